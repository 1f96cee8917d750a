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

/// The grace period after a restart: the owners that held state before it may reclaim.
pub struct Grace {
    pub until: u64,
    pub previous: HashSet<Vec<u8>>,
    /// Previous owners that said RECLAIM_COMPLETE (when all have, grace ends early).
    pub completed: HashSet<Vec<u8>>,
    pub ended: bool,
    /// Set while something outside the state must act before the previous instance's
    /// clients may be taken as gone (`StateManager::hold_grace`): the grace period and the
    /// layout reclaim window stay open past `until` until it is cleared.
    pub held: bool,
}

impl Grace {
    pub fn start(previous: HashSet<Vec<u8>>, now: u64, seconds: u32) -> Grace {
        let ended = previous.is_empty();
        Grace {
            until: now + seconds as u64,
            previous,
            completed: HashSet::new(),
            ended,
            held: false,
        }
    }

    pub fn active(&self, now: u64) -> bool {
        !self.ended && (now < self.until || self.held) && self.completed.len() < self.previous.len()
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
    /// RFC 8881 §18.51.3: a second global RECLAIM_COMPLETE is COMPLETE_ALREADY.
    pub fn reclaim_complete(
        &mut self,
        clientid: u64,
        one_fs: bool,
        _now: u64,
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
            // Reclaimed: its record stays valid for the next restart.
            self.pending.push((owner, Some(b"v1".to_vec())));
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
            if !grace || c.reclaim_complete {
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
    ///   it retry the same LAYOUTCOMMIT forever: issue 18).
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
        // Lease expiry and the courtesy bounds live with the client records (client.rs).
        self.expire_leases(now);
        self.revoke_unreturned_delegs(now);
        if !self.grace.ended && !self.grace.active(now) {
            self.grace.ended = true;
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
    /// the previous instance's clients off the volume (`nfs4::scsi_restart`), or a client
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

    use super::super::tests::{env_with, exid, mount, MemRecords};
    use super::super::ClientRecords;

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
        assert!(!e2.sm.in_grace());
        e2.clock.0.store(91, Ordering::SeqCst);
        assert!(e2.sm.layouts_reclaimable());
        e2.sm.release_grace();
        assert!(!e2.sm.layouts_reclaimable());
        // Without previous clients there is nothing to wait for.
        let e3 = env_with(Arc::new(MemRecords::default()), 3);
        assert!(e3.sm.previous_layouts_expired() && !e3.sm.in_grace());
    }
}
