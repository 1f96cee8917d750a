//! The grace period after a restart (RFC 8881 §8.4.2–8.4.3), RECLAIM_COMPLETE (§18.51),
//! the claim of a LAYOUTCOMMIT after a restart (§12.7.4, §18.42.3), and the lease clock
//! (§8.3): expired clients become courtesy clients, which are purged after COURTESY_SECONDS
//! or as soon as they are in someone's way.

use std::collections::HashSet;

use super::stateid::{is_special, parse_other};
use super::{Inner, StateManager};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;

/// What a LAYOUTCOMMIT may convert, judged by its `loca_reclaim` and its stateid around a
/// restart (docs/pnfs.md "After a restart").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitClaim {
    /// Data the client wrote under a layout of the previous instance: the file's own
    /// unwritten blocks of the range, with no grant to check (the grants died with it).
    /// `explicit`: `loca_reclaim` was set (RFC 8881 §18.42.3); otherwise the stateid is the
    /// previous instance's, which is how the Linux client re-sends the LAYOUTCOMMIT it had
    /// in flight (fs/nfs never sets `loca_reclaim`).
    Reclaim { explicit: bool },
    /// A layout of this instance: the stateid and the grants are checked.
    Current,
}

/// The value of a client record (RFC 8881 §8.4.3) once the client took state: the grace
/// period after a restart waits for its RECLAIM_COMPLETE. Records of earlier versions all
/// say this, so a client they name is waited for.
pub const RECORD_HELD_STATE: &[u8] = b"v1";
/// The value of the record of a confirmed client that has not taken state yet: it may come
/// back after a restart, but there is nothing of it to wait for.
pub const RECORD_NO_STATE: &[u8] = b"v1-nostate";

/// The grace period after a restart: the owners that held state before it may reclaim.
///
/// It lasts `grace_seconds` (default: one lease) and ends early once every previous client
/// that held state has sent RECLAIM_COMPLETE (at the next tick). A reclaim in its last
/// `extension` seconds pushes the end to `extension` after it, as knfsd keeps grace while
/// reclaims still arrive, but never past `bound`: two leases after the nominal end plus
/// `RECLAIM_ALLOWANCE_MS` for each client waited for, so a client that keeps reclaiming
/// cannot hold everyone else's new opens for longer than that, and a thousand clients that
/// reclaim one after the other still fit.
///
/// knfsd (fs/nfsd/nfs4state.c `clients_still_reclaiming`, `nfs4_laundromat`): after the
/// first lease the laundromat looks again every second while someone reclaimed since its last
/// look, until every client of the stable records sent RECLAIM_COMPLETE or two leases from
/// the start. Ours tolerates longer pauses (`extension`, a fifth of a lease) and has a longer
/// bound, because the early end makes a long tail cost nothing when every reclaimer
/// completes: it only delays the end when one never does.
pub struct Grace {
    /// The nominal end (`grace_seconds` after the start): the layout reclaim window.
    pub until: u64,
    /// The end as reclaims pushed it (`until` ≤ `end` ≤ `bound`).
    pub end: u64,
    pub bound: u64,
    /// How far a late reclaim pushes the end.
    pub extension: u64,
    pub previous: HashSet<Vec<u8>>,
    /// The previous owners whose record says they held state: the ones waited for.
    pub waited: HashSet<Vec<u8>>,
    /// Previous owners that said RECLAIM_COMPLETE (when all waited ones have, grace ends early).
    pub completed: HashSet<Vec<u8>>,
    pub ended: bool,
    /// Set while something outside the state must act before the previous instance's
    /// clients may be taken as gone (`StateManager::hold_grace`): the grace period and the
    /// layout reclaim window stay open past `until` until it is cleared.
    pub held: bool,
}

/// Why the grace period ended (the info line says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GraceEnd {
    Timeout,
    AllReclaimed,
}

/// How far a late reclaim pushes the end of grace: a fifth of a lease (18 s at the default
/// 90 s, 3 s at 15 s), at least 2 s. A client reclaims back to back, so a pause that long
/// means it is done or stuck; a tenth of a lease (9 s) ended grace in the middle of pynfs's
/// 1,000-client passes on a loaded host (REBT3c/4c at the default lease).
fn extension(lease: u32) -> u64 {
    (u64::from(lease) / 5).max(2)
}

/// What each client waited for adds to the bound of grace: 250 ms, the time one client's
/// reclaim (EXCHANGE_ID, CREATE_SESSION, its reclaims, RECLAIM_COMPLETE, in pynfs's REBT
/// passes) took here at the worst: 3.5 clients a second on the shared 2-core host at load
/// 12 (docs/conformance.md). Clients that reclaim one after the other, as a thousand pynfs
/// clients do, need time in proportion to their number; a fixed bound of three leases
/// (270 s) ended grace under the 935th.
pub const RECLAIM_ALLOWANCE_MS: u64 = 250;

fn allowance(waited: usize) -> u64 {
    (waited as u64).saturating_mul(RECLAIM_ALLOWANCE_MS) / 1000
}

impl Grace {
    /// `records`: the owners of the previous instance with their record values.
    pub fn start(records: Vec<(Vec<u8>, Vec<u8>)>, now: u64, seconds: u32, lease: u32) -> Grace {
        let waited: HashSet<Vec<u8>> = records
            .iter()
            .filter(|(_, v)| v.as_slice() != RECORD_NO_STATE)
            .map(|(k, _)| k.clone())
            .collect();
        let previous: HashSet<Vec<u8>> = records.into_iter().map(|(k, _)| k).collect();
        let waited_count = waited.len();
        let ended = previous.is_empty();
        let until = now + u64::from(seconds);
        Grace {
            until,
            end: until,
            bound: until + 2 * u64::from(lease) + allowance(waited_count),
            extension: extension(lease),
            previous,
            waited,
            completed: HashSet::new(),
            ended,
            held: false,
        }
    }

    pub fn active(&self, now: u64) -> bool {
        !self.ended && (now < self.end || self.held) && self.completed.len() < self.previous.len()
    }

    /// A reclaim arrived at `now`: late in grace, it keeps grace open a little longer.
    pub fn note_reclaim(&mut self, now: u64) {
        if self.active(now) {
            self.end = self.end.max(now + self.extension).min(self.bound);
        }
    }

    /// Whether grace should end at `now`, and why.
    fn should_end(&self, now: u64) -> Option<GraceEnd> {
        if self.ended {
            return None;
        }
        // Every previous client back: over at once (`active`). Every one that held state
        // back: over at the next tick, unless held. The tick's lag lets the last reclaimer's
        // own requests right after its RECLAIM_COMPLETE still see grace, as knfsd's
        // laundromat does (pynfs REBT2a–4c check that a new OPEN then still gets GRACE).
        if self.completed.len() >= self.previous.len()
            || (!self.held && self.waited.iter().all(|o| self.completed.contains(o)))
        {
            return Some(GraceEnd::AllReclaimed);
        }
        (!self.active(now)).then_some(GraceEnd::Timeout)
    }

    /// Layouts of the previous instance may still commit: for the whole nominal grace period,
    /// even when the previous clients' RECLAIM_COMPLETEs ended the grace early. A Linux
    /// client re-sends its in-flight LAYOUTCOMMIT only once the data write under it has
    /// completed, after its own recovery (and, on the embedded target, after its NVMe/TCP
    /// reconnect): that is after its RECLAIM_COMPLETE. The trim past EOF waits for this
    /// window too, so the blocks such a commit names are still the file's.
    pub fn layouts_reclaimable(&self, now: u64) -> bool {
        self.reclaim_window(now) || self.held
    }

    /// The nominal window of `layouts_reclaimable`, hold or not.
    fn reclaim_window(&self, now: u64) -> bool {
        !self.previous.is_empty() && now < self.until
    }
}

impl Inner {
    /// A reclaim by `clientid` arrived (granted or refused): if its owner is a client of the
    /// previous instance, grace is still in use. A refused one counts too: an owner whose
    /// second incarnation tries again after its RECLAIM_COMPLETE (NO_GRACE: pynfs REBT4c's 500
    /// duplicate reclaims, a minute and more on a loaded host) is still recovering, and so
    /// are the clients behind it; ending grace under them lets their new OPENs through
    /// before every previous client had its chance.
    pub fn note_reclaim_by(&mut self, clientid: u64, now: u64) {
        let previous = self
            .clients
            .get(&clientid)
            .is_some_and(|c| self.grace.previous.contains(&c.owner));
        if previous {
            self.grace.note_reclaim(now);
        }
    }

    /// Leases do not run out while grace lasts, and restart when it ends. During grace the
    /// server refuses the clients' new work (GRACE), and a client done with its reclaim may
    /// sit idle until it lifts: pynfs REBT2c's first client of 1,000 reclaims, closes, and
    /// comes back only after the last one (some 170 s at 6 clients a second here, longer
    /// than the 90-s lease); dropped for its idle lease, it got BADSESSION. knfsd expires
    /// such a client; pausing costs at most the grace period's bound of extra life for a
    /// client that really went.
    fn restart_leases(&mut self, now: u64) {
        for c in self.clients.values_mut() {
            c.last_renew = c.last_renew.max(now);
        }
    }

    /// RFC 8881 §18.51.3: a second global RECLAIM_COMPLETE is COMPLETE_ALREADY.
    pub fn reclaim_complete(
        &mut self,
        clientid: u64,
        one_fs: bool,
        now: u64,
    ) -> Result<(), NfsStat> {
        let c = self
            .clients
            .get_mut(&clientid)
            .ok_or(NfsStat::STALE_CLIENTID)?;
        if one_fs {
            // Per-file-system completion: we export one file system, and the global
            // RECLAIM_COMPLETE is what ends the client's grace.
            return Ok(());
        }
        if c.reclaim_complete {
            return Err(NfsStat::COMPLETE_ALREADY);
        }
        c.reclaim_complete = true;
        let owner = c.owner.clone();
        if self.grace.previous.contains(&owner) && !self.grace.ended {
            self.grace.completed.insert(owner.clone());
            self.grace.note_reclaim(now);
            if self.grace.waited.contains(&owner) {
                // Reclaimed: its record stays valid for the next restart.
                self.pending.push((owner, Some(RECORD_HELD_STATE.to_vec())));
            }
        }
        Ok(())
    }

    /// RFC 8881 §8.4.2 / §18.16.3 / §18.10.4: who may reclaim and who must wait for grace.
    /// `open`: an OPEN, which must also wait for the client's own RECLAIM_COMPLETE
    /// (§18.51.3; knfsd does the same, pynfs RECC3).
    pub fn check_reclaim(
        &self,
        clientid: u64,
        reclaim: bool,
        open: bool,
        now: u64,
    ) -> Result<(), NfsStat> {
        let c = self.client(clientid)?;
        let grace = self.grace.active(now);
        if reclaim {
            // An owner that already said RECLAIM_COMPLETE in this grace period has reclaimed
            // all it had: a new incarnation of it (a client restarted since) has nothing
            // of the previous instance left to claim (pynfs REBT4c's duplicate reclaims).
            if !grace || c.reclaim_complete || self.grace.completed.contains(&c.owner) {
                return Err(NfsStat::NO_GRACE);
            }
            if !self.grace.previous.contains(&c.owner) {
                return Err(NfsStat::RECLAIM_BAD);
            }
            Ok(())
        } else if grace || (open && !c.reclaim_complete) {
            Err(NfsStat::GRACE)
        } else {
            Ok(())
        }
    }

    /// RFC 8881 §12.7.4 / §18.42.3: how a LAYOUTCOMMIT is taken after a restart.
    /// `previous_instance`: its stateid was handed out by the previous instance.
    /// - `loca_reclaim` set: a reclaim, while this client may reclaim (NO_GRACE, RECLAIM_BAD).
    /// - a previous instance's stateid from a client that held state then, in the window of
    ///   `Grace::layouts_reclaimable`: a reclaim too. Outside it: BADLAYOUT — the layout is
    ///   gone; the Linux client ends the call and asks for a new layout (STALE_STATEID made
    ///   it retry the same LAYOUTCOMMIT forever).
    /// - otherwise, in grace: GRACE (no layout of this instance exists yet: LAYOUTGET waits).
    pub fn commit_claim(
        &self,
        clientid: u64,
        reclaim: bool,
        previous_instance: bool,
        now: u64,
    ) -> Result<CommitClaim, NfsStat> {
        if reclaim {
            self.check_reclaim(clientid, true, false, now)?;
            return Ok(CommitClaim::Reclaim { explicit: true });
        }
        if previous_instance {
            let c = self.client(clientid)?;
            if self.grace.layouts_reclaimable(now) && self.grace.previous.contains(&c.owner) {
                return Ok(CommitClaim::Reclaim { explicit: false });
            }
            return Err(NfsStat::BADLAYOUT);
        }
        if self.grace.active(now) {
            return Err(NfsStat::GRACE);
        }
        Ok(CommitClaim::Current)
    }

    /// Leases (RFC 8881 §8.3: `expire_leases`), unreturned recalled delegations revoked,
    /// then the grace period ends.
    pub fn tick(&mut self, now: u64) {
        // Lease expiry and the courtesy bounds live with the client records (client.rs);
        // paused while grace lasts (`restart_leases`).
        if self.grace.ended || self.grace.previous.is_empty() {
            self.expire_leases(now);
        }
        self.revoke_unreturned_delegs(now);
        if let Some(why) = self.grace.should_end(now) {
            self.grace.ended = true;
            self.restart_leases(now);
            let (previous, reclaimed) = (self.grace.previous.len(), self.grace.completed.len());
            match why {
                GraceEnd::AllReclaimed => tracing::info!(
                    previous,
                    reclaimed,
                    "grace period ended: every client that held state reclaimed"
                ),
                GraceEnd::Timeout => tracing::info!(
                    previous,
                    reclaimed,
                    extended_by = self.grace.end.saturating_sub(self.grace.until),
                    "grace period ended: time out"
                ),
            }
            // Owners that did not come back during grace can no longer reclaim.
            let gone: Vec<Vec<u8>> = self
                .grace
                .previous
                .iter()
                .filter(|o| match self.owners.get(*o) {
                    Some(r) => r.confirmed.is_none(),
                    None => true,
                })
                .cloned()
                .collect();
            for o in gone {
                self.pending.push((o, None));
            }
        }
    }
}

impl StateManager {
    /// See `Inner::commit_claim`.
    pub fn commit_claim(
        &self,
        clientid: u64,
        reclaim: bool,
        stateid: &Stateid,
    ) -> Result<CommitClaim, NfsStat> {
        let previous = self.is_previous_instance(stateid);
        self.with(|i, now| i.commit_claim(clientid, reclaim, previous, now))
    }

    /// A stateid that names state of an earlier instance of the server (its epoch differs).
    pub fn is_previous_instance(&self, stateid: &Stateid) -> bool {
        !is_special(stateid)
            && parse_other(self.with(|i, _| i.epoch), &stateid.other) == Err(NfsStat::STALE_STATEID)
    }

    /// See `Grace::layouts_reclaimable`.
    pub fn layouts_reclaimable(&self) -> bool {
        self.with(|i, now| i.grace.layouts_reclaimable(now))
    }

    /// Keeps the grace period (while previous clients are missing) and the layout reclaim
    /// window open past their time, until `release_grace`: the SCSI layout must first cut
    /// the previous instance's clients off the volume (`nfs4::layouts::scsi_restart`), or a client
    /// that did not come back could write into blocks freed after grace.
    pub fn hold_grace(&self) {
        self.with(|i, _| i.grace.held = true)
    }

    pub fn release_grace(&self) {
        self.with(|i, _| i.grace.held = false)
    }

    /// Whether the previous instance's layouts are past their time — the nominal grace
    /// period is over, or there were no previous clients — whether or not it is held.
    pub fn previous_layouts_expired(&self) -> bool {
        self.with(|i, now| !i.grace.reclaim_window(now))
    }

    /// How many clients of the previous instance came back (their RECLAIM_COMPLETE).
    pub fn previous_clients_back(&self) -> usize {
        self.with(|i, _| i.grace.completed.len())
    }

    /// Whether this instance handed out `clientid` (its epoch is in the high 32 bits).
    pub fn is_current_clientid(&self, clientid: u64) -> bool {
        self.with(|i, _| (clientid >> 32) as u32 == i.epoch)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::super::tests::{cs_req, env_with, exid, mount, seq, MemRecords};
    use super::super::tests_files::open;
    use super::super::ClientRecords;
    use super::{RECORD_HELD_STATE, RECORD_NO_STATE};
    use crate::nfs4::status::NfsStat;

    /// `hold_grace` keeps grace (while a previous client is missing) and the layout reclaim
    /// window open past their time, and the tick does not end grace, until `release_grace`.
    #[test]
    fn a_held_grace_outlasts_its_time_until_released() {
        let records = Arc::new(MemRecords::default());
        let e1 = env_with(records.clone(), 1);
        mount(&e1, b"gone");
        mount(&e1, b"back");
        let e2 = env_with(records.clone(), 2);
        e2.sm.hold_grace();
        assert!(e2.sm.in_grace() && e2.sm.layouts_reclaimable());
        assert!(!e2.sm.previous_layouts_expired());
        e2.clock.0.store(91, Ordering::SeqCst);
        e2.sm.tick();
        assert!(e2.sm.previous_layouts_expired());
        assert!(e2.sm.in_grace() && e2.sm.layouts_reclaimable());
        assert_eq!(records.list().len(), 2, "the tick ended a held grace");
        // A client that comes back meanwhile may still reclaim, and it is of this instance.
        let back = e2.sm.exchange_id(&exid(b"back", 1, 0, 0)).unwrap().clientid;
        assert!(e2.sm.is_current_clientid(back));
        assert!(!e1.sm.is_current_clientid(back));
        e2.sm.release_grace();
        assert!(!e2.sm.in_grace() && !e2.sm.layouts_reclaimable());
        e2.sm.tick();
        let keys: Vec<Vec<u8>> = records.list().into_iter().map(|(k, _)| k).collect();
        assert!(!keys.contains(&b"gone".to_vec()), "{keys:?}");
    }

    /// Held or not, grace ends as soon as every previous client has completed its reclaim;
    /// only the reclaim window waits for the release.
    #[test]
    fn a_held_grace_still_ends_early_when_everyone_is_back() {
        let records = Arc::new(MemRecords::default());
        let e1 = env_with(records.clone(), 1);
        mount(&e1, b"back");
        let e2 = env_with(records.clone(), 2);
        e2.sm.hold_grace();
        let (c, _) = mount(&e2, b"back");
        e2.sm.reclaim_complete(c, false).unwrap();
        e2.sm.tick();
        assert!(!e2.sm.in_grace());
        e2.clock.0.store(91, Ordering::SeqCst);
        assert!(e2.sm.layouts_reclaimable());
        e2.sm.release_grace();
        assert!(!e2.sm.layouts_reclaimable());
        // Without previous clients there is nothing to wait for.
        let e3 = env_with(Arc::new(MemRecords::default()), 3);
        assert!(e3.sm.previous_layouts_expired() && !e3.sm.in_grace());
    }

    fn at(e: &super::super::tests::Env, t: u64) {
        e.clock.0.store(t, Ordering::SeqCst);
        e.sm.tick();
    }

    /// A restart after clients "a" and "b" held state; "a" is back (not yet complete).
    fn restarted() -> (super::super::tests::Env, u64, [u8; 16]) {
        let records = Arc::new(MemRecords::default());
        let e1 = env_with(records.clone(), 1);
        let (a, _) = mount(&e1, b"a");
        let (b, _) = mount(&e1, b"b");
        open(&e1, a, b"oa", 10, 1, 0).unwrap();
        open(&e1, b, b"ob", 11, 1, 0).unwrap();
        let e2 = env_with(records, 2);
        let (a, sid) = mount(&e2, b"a");
        (e2, a, sid)
    }

    /// A reclaim late in grace pushes its end `extension` (18 s at a 90-s lease) past the
    /// reclaim; an early one changes nothing.
    #[test]
    fn a_late_reclaim_extends_grace() {
        let (e, a, _) = restarted();
        e.sm.check_open_reclaim(a, true).unwrap();
        at(&e, 89);
        assert!(e.sm.in_grace());
        e.sm.check_open_reclaim(a, true).unwrap();
        at(&e, 106);
        assert!(e.sm.in_grace(), "a reclaim at 89 keeps grace to 107");
        at(&e, 107);
        assert!(!e.sm.in_grace());
        // Without the late reclaim it ends on time.
        let (e, _, _) = restarted();
        at(&e, 90);
        assert!(!e.sm.in_grace());
    }

    /// A previous client's reclaim that is refused (NO_GRACE: a new incarnation of an owner
    /// that completed its reclaim, pynfs REBT4c) still keeps grace open; a reclaim by a
    /// client the previous instance never knew (RECLAIM_BAD) does not.
    #[test]
    fn a_refused_reclaim_of_a_previous_client_keeps_grace_open() {
        let (e, a, _) = restarted();
        e.sm.check_open_reclaim(a, true).unwrap();
        e.sm.reclaim_complete(a, false).unwrap();
        let r = e.sm.exchange_id(&exid(b"a", 9, 0, 0)).unwrap();
        e.sm.create_session(cs_req(r.clientid, r.sequenceid, 0))
            .unwrap();
        let (stranger, _) = mount(&e, b"stranger");
        e.clock.0.store(85, Ordering::SeqCst);
        assert_eq!(
            e.sm.check_open_reclaim(stranger, true),
            Err(NfsStat::RECLAIM_BAD)
        );
        at(&e, 95);
        assert!(!e.sm.in_grace(), "a stranger's reclaim extended grace");
        let (e, a, _) = restarted();
        e.sm.check_open_reclaim(a, true).unwrap();
        e.sm.reclaim_complete(a, false).unwrap();
        let r = e.sm.exchange_id(&exid(b"a", 9, 0, 0)).unwrap();
        e.sm.create_session(cs_req(r.clientid, r.sequenceid, 0))
            .unwrap();
        e.clock.0.store(85, Ordering::SeqCst);
        assert_eq!(
            e.sm.check_open_reclaim(r.clientid, true),
            Err(NfsStat::NO_GRACE)
        );
        at(&e, 100);
        assert!(
            e.sm.in_grace(),
            "the refused reclaim at 85 keeps grace to 103"
        );
        at(&e, 103);
        assert!(!e.sm.in_grace());
    }

    /// A client that reclaimed early and then sat idle through a grace period longer than
    /// its lease (pynfs REBT2c's first client) is still there when grace ends, with a new
    /// lease from then; it expires a lease after that.
    #[test]
    fn leases_do_not_run_out_during_grace() {
        let (e, a, _) = restarted();
        e.sm.check_open_reclaim(a, true).unwrap();
        e.sm.reclaim_complete(a, false).unwrap();
        let (b, _) = mount(&e, b"b");
        for t in (10..=200).step_by(10) {
            at(&e, t);
            e.sm.check_open_reclaim(b, true).unwrap();
        }
        e.sm.reclaim_complete(b, false).unwrap();
        at(&e, 201);
        assert!(!e.sm.in_grace());
        assert_eq!(e.sm.check_open_reclaim(a, false), Ok(()), "a was dropped");
        at(&e, 201 + 60);
        assert_eq!(
            e.sm.check_open_reclaim(a, false),
            Ok(()),
            "a's lease did not restart"
        );
        at(&e, 201 + 91);
        assert_eq!(
            e.sm.check_open_reclaim(a, false),
            Err(NfsStat::STALE_CLIENTID)
        );
    }

    /// Reclaims that keep coming extend grace up to its bound, two leases after the nominal
    /// end (270 s) for two clients waited for, and no further; each client waited for adds
    /// `RECLAIM_ALLOWANCE_MS`.
    #[test]
    fn reclaims_extend_grace_no_further_than_its_bound() {
        let (e, a, sid) = restarted();
        for (n, t) in (85..400).step_by(5).enumerate() {
            e.clock.0.store(t, Ordering::SeqCst);
            if !e.sm.in_grace() {
                break;
            }
            // The reclaimer renews its lease as it goes.
            if let Ok(super::super::SequenceOutcome::New { slot, .. }) =
                e.sm.sequence(&seq(sid, 0, n as u32 + 1, n as u64))
            {
                e.sm.slot_done(&slot, b"");
            }
            e.sm.check_open_reclaim(a, true).unwrap();
            e.sm.tick();
        }
        at(&e, 269);
        assert!(e.sm.in_grace());
        at(&e, 270);
        assert!(!e.sm.in_grace(), "grace outlived its bound");
        // 2 clients: 0.5 s, rounded down; 1,000 clients: 250 s more.
        assert_eq!(super::allowance(2), 0);
        let g = super::Grace::start(
            (0..1000)
                .map(|i| (vec![i as u8, (i >> 8) as u8], b"v1".to_vec()))
                .collect(),
            0,
            90,
            90,
        );
        assert_eq!(g.bound, 90 + 180 + 250);
    }

    /// Clients that hold state and stop renewing (pynfs's REBT2c: 1,000 of them, none
    /// renewing while the rest are set up) are courtesy clients until someone needs the
    /// room: their records survive, so after a restart every one of them may reclaim. A
    /// count cap below the client cap evicted the oldest (and deleted their records) with
    /// nobody in need of the room, and they got RECLAIM_BAD.
    #[test]
    fn expired_clients_with_state_keep_their_records_through_a_restart() {
        let records = Arc::new(MemRecords::default());
        let e1 = env_with(records.clone(), 1);
        let n = 300;
        for i in 0..n {
            let owner = format!("c{i}");
            let (c, _) = mount(&e1, owner.as_bytes());
            open(&e1, c, b"o", 10 + i, 1, 0).unwrap();
        }
        // Every lease runs out; nobody else wants the room.
        at(&e1, 200);
        assert_eq!(e1.sm.client_state_usage().courtesy_clients, n as usize);
        let e2 = env_with(records, 2);
        for i in 0..n {
            let owner = format!("c{i}");
            let (c, _) = mount(&e2, owner.as_bytes());
            assert_eq!(e2.sm.check_open_reclaim(c, true), Ok(()), "client {i}");
        }
    }

    /// A previous client that completed its reclaim and comes back as a new incarnation
    /// (another verifier) while grace lasts may not reclaim again: NO_GRACE.
    #[test]
    fn a_client_that_completed_its_reclaim_may_not_reclaim_again() {
        let (e, a, _) = restarted();
        e.sm.check_open_reclaim(a, true).unwrap();
        e.sm.reclaim_complete(a, false).unwrap();
        assert!(e.sm.in_grace(), "b has not reclaimed");
        let r = e.sm.exchange_id(&exid(b"a", 9, 0, 0)).unwrap();
        e.sm.create_session(cs_req(r.clientid, r.sequenceid, 0))
            .unwrap();
        assert_eq!(
            e.sm.check_open_reclaim(r.clientid, true),
            Err(NfsStat::NO_GRACE)
        );
    }

    /// Grace ends at the tick after every previous client that held state sent
    /// RECLAIM_COMPLETE; one that never took state (its record says so) is not waited for.
    #[test]
    fn grace_ends_early_once_every_client_with_state_reclaimed() {
        let records = Arc::new(MemRecords::default());
        let e1 = env_with(records.clone(), 1);
        let (a, _) = mount(&e1, b"held");
        mount(&e1, b"idle");
        open(&e1, a, b"oa", 10, 1, 0).unwrap();
        let rec: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
            records.list().into_iter().collect();
        assert_eq!(rec[&b"held".to_vec()], RECORD_HELD_STATE);
        assert_eq!(rec[&b"idle".to_vec()], RECORD_NO_STATE);
        let e2 = env_with(records.clone(), 2);
        assert!(e2.sm.in_grace());
        let (a, _) = mount(&e2, b"held");
        e2.sm.reclaim_complete(a, false).unwrap();
        at(&e2, 1);
        assert!(!e2.sm.in_grace(), "waited for a client without state");
        // The stateless client did not come back: its record goes with the grace.
        let keys: Vec<Vec<u8>> = records.list().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"held".to_vec()]);
    }
}
