//! File delegations (RFC 8881 §10.2, §18.16.3): grants, the conflict that starts a recall,
//! DELEGRETURN, and revocation of a delegation whose recall went unanswered for a lease.
//!
//! ```text
//! OPEN(want deleg) ─ no conflicting open / deleg ─▶ Deleg { write, recalled_at: None }
//! OPEN by another client that conflicts ─▶ recalled_at = now, CB_RECALL queued (caller,
//!        callback::CbQueue), the OPEN answers DELAY at once
//!        ├ DELEGRETURN ─▶ state dropped, the next OPEN goes on
//!        └ a lease after the recall, still held (the tick, or the next conflict)
//!            ─▶ revoked DELEG_REVOKED (SEQUENCE: RECALLABLE_STATE_REVOKED; TEST_STATEID
//!               says so until FREE_STATEID)
//! ```
//! The queue re-sends an unanswered CB_RECALL on whichever session of the holder has a
//! backchannel then, so a recall survives the holder replacing its session (DSESS9003).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::files::{ShareAccess, StateKind};
use super::stateid::parse_other;
use super::Inner;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::Ino;

/// A delegation's state.
pub struct DelegState {
    pub write: bool,
    /// When the recall was decided (`None` while not recalled).
    pub recalled_at: Option<u64>,
}

/// Delegation bookkeeping beside the states: the recalls not yet answered by a DELEGRETURN
/// (so the tick finds them without a scan of every state), the counts of delegations held,
/// and the counters.
#[derive(Debug, Default)]
pub(crate) struct DelegBook {
    /// State ids of delegations being recalled.
    recalled: std::collections::HashSet<u64>,
    /// Delegations held now, revoked ones not counted (the `max_delegations` cap).
    pub held: usize,
    /// Write delegations held now, revoked ones not counted: shared with `StateManager`
    /// (`write_delegs`), whose GETATTR check reads it without the state lock (see the
    /// ordering argument there). Changed only under the lock, by `held_in` and `held_out`.
    pub write_held: Arc<AtomicUsize>,
    pub counters: DelegCounters,
}

impl DelegBook {
    /// A delegation became held: `new_state`, before the state is inserted (and so before
    /// the OPEN that granted it can answer).
    pub(super) fn held_in(&mut self, write: bool) {
        self.held += 1;
        if write {
            self.write_held.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A held delegation went: revoked (`revoke_id`) or dropped while not revoked
    /// (`drop_state`: DELEGRETURN, the client's end). A decrement below zero (a path that
    /// counted out what it never counted in) wraps the shared count to a huge value rather
    /// than saturating: that only sends every GETATTR to the locked walk, the safe side.
    pub(super) fn held_out(&mut self, write: bool) {
        debug_assert!(self.held > 0, "a delegation counted out twice");
        self.held = self.held.saturating_sub(1);
        if write {
            let was = self.write_held.fetch_sub(1, Ordering::SeqCst);
            debug_assert!(was > 0, "a write delegation counted out twice");
        }
    }
}

/// Why no delegation was granted (OPEN's `why_no_delegation4` when one was asked for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoDeleg {
    /// Another client's open or delegation is in the way, or a recall of the file is
    /// under way (WND4_CONTENTION).
    Contention,
    /// `max_delegations` are held (WND4_RESOURCE).
    Resource,
}

/// Delegation counters since the start (metrics.rs shows them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DelegCounters {
    pub granted: u64,
    pub recalled: u64,
    pub revoked: u64,
}

/// A delegation another client must give back before an operation may go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recall {
    pub client: u64,
    pub stateid: Stateid,
    /// The recall was decided just now: the caller sends CB_RECALL.
    pub send: bool,
}

/// The write delegation of another client that a GETATTR of a file's size or change must
/// ask CB_GETATTR of (RFC 8881 §10.4.3; nfs4/delegs/cb_getattr.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteHolder {
    pub client: u64,
    pub stateid: Stateid,
    /// Being recalled: the holder is flushing and returning it.
    pub recalled: bool,
}

impl Inner {
    fn delegs_of(&self, ino: Ino) -> Vec<u64> {
        self.files
            .get(&ino)
            .map_or_else(Vec::new, |f| f.delegs.clone())
    }

    /// A delegation for `clientid` on `ino` if nothing is in its way (§10.4): a read
    /// delegation needs no write open and no write delegation of another client, a write one
    /// no open or delegation of anyone else. A client gets one delegation per file, none is
    /// granted while a delegation of the file is being recalled (the conflict is live), and
    /// none past `max_delegations`.
    pub fn grant_deleg(
        &mut self,
        clientid: u64,
        ino: Ino,
        write: bool,
    ) -> Result<Stateid, NoDeleg> {
        self.deleg_blocked(clientid, ino, write)?;
        let id = self.new_deleg(clientid, ino, write, None);
        Ok(self.stateid_of(id))
    }

    /// What is in the way of a new delegation (see `grant_deleg`).
    fn deleg_blocked(&self, clientid: u64, ino: Ino, write: bool) -> Result<(), NoDeleg> {
        let held: Vec<u64> = self
            .files
            .get(&ino)
            .map(|f| f.opens.iter().chain(&f.delegs).copied().collect())
            .unwrap_or_default();
        for id in &held {
            let Some(st) = self.states.get(id) else {
                continue;
            };
            let other = st.client != clientid;
            let blocks = match &st.kind {
                StateKind::Open(o) => other && (write || o.share.access & ShareAccess::WRITE != 0),
                StateKind::Deleg(d) => !other || write || d.write || d.recalled_at.is_some(),
                _ => false,
            };
            if blocks {
                return Err(NoDeleg::Contention);
            }
        }
        if self.delegs.held >= self.limits.max_delegations {
            return Err(NoDeleg::Resource);
        }
        Ok(())
    }

    fn new_deleg(&mut self, clientid: u64, ino: Ino, write: bool, recalled_at: Option<u64>) -> u64 {
        let id = self.new_state(
            clientid,
            ino,
            StateKind::Deleg(DelegState { write, recalled_at }),
        );
        self.delegs.counters.granted += 1;
        if recalled_at.is_some() {
            self.delegs.recalled.insert(id);
            self.delegs.counters.recalled += 1;
        }
        id
    }

    /// OPEN CLAIM_PREVIOUS of a delegation in grace (RFC 8881 §10.2.1, §9.11): the client
    /// gets back the delegation it held before the restart. The server may not refuse it
    /// (§18.16.3: it sets `recall` instead), so when it cannot stay — another client's
    /// reclaimed open or delegation conflicts, the cap is reached, or `give_back` (the
    /// client's backchannel does not work, delegations are off) — it is granted already
    /// recalled: `recall` in the reply, revoked by the tick a lease later unless returned.
    /// A second reclaim of the same file by the client gets the delegation it already has.
    /// Returns the stateid and whether it is recalled.
    pub fn reclaim_deleg(
        &mut self,
        clientid: u64,
        ino: Ino,
        write: bool,
        give_back: bool,
        now: u64,
    ) -> (Stateid, bool) {
        let own = self.delegs_of(ino).into_iter().find(|id| {
            self.states
                .get(id)
                .is_some_and(|st| st.client == clientid && st.revoked.is_none())
        });
        if let Some(id) = own {
            let recalled = matches!(
                self.states.get(&id).map(|s| &s.kind),
                Some(StateKind::Deleg(d)) if d.recalled_at.is_some()
            );
            return (self.stateid_of(id), recalled);
        }
        let recall = give_back || self.deleg_blocked(clientid, ino, write).is_err();
        let id = self.new_deleg(clientid, ino, write, recall.then_some(now));
        (self.stateid_of(id), recall)
    }

    /// The delegations of other clients that an access by `clientid` to `ino` conflicts
    /// with (`write`: the access changes the file or takes write access). A recall that is a
    /// lease old revokes the delegation instead (§10.2.1), which ends that conflict.
    pub fn deleg_conflicts(
        &mut self,
        clientid: u64,
        ino: Ino,
        write: bool,
        now: u64,
    ) -> Vec<Recall> {
        let mut out = Vec::new();
        for (id, client, recalled_at) in self.delegs_in_the_way(clientid, ino, write, now) {
            let stateid = self.stateid_of(id);
            let send = recalled_at.is_none();
            if send {
                if let Some(StateKind::Deleg(d)) = self.states.get_mut(&id).map(|s| &mut s.kind) {
                    d.recalled_at = Some(now);
                }
                self.delegs.recalled.insert(id);
                self.delegs.counters.recalled += 1;
            }
            out.push(Recall {
                client,
                stateid,
                send,
            });
        }
        out
    }

    /// The write delegation of a client other than `clientid` on `ino`, if one is held (at
    /// most one is). A courtesy holder loses its state instead, and a recall a lease old
    /// revokes the delegation, as for `deleg_conflicts`: neither is asked anything. A read
    /// access conflicts with write delegations only, so this is the walk of
    /// `deleg_conflicts` for a read, without the recall.
    pub fn write_deleg_holder(&mut self, clientid: u64, ino: Ino, now: u64) -> Option<WriteHolder> {
        let (id, client, recalled_at) = self
            .delegs_in_the_way(clientid, ino, false, now)
            .into_iter()
            .next()?;
        Some(WriteHolder {
            client,
            stateid: self.stateid_of(id),
            recalled: recalled_at.is_some(),
        })
    }

    /// The walk `deleg_conflicts` and `write_deleg_holder` share: the live delegations of
    /// other clients on `ino` that an access (`write`: one that changes the file or takes
    /// write access; else only write delegations are in its way) conflicts with, as (state
    /// id, holder, when recalled). On the way it takes away those that no longer count: a
    /// courtesy holder's state (§8.3: a courtesy client loses its state when it is in the
    /// way) and a delegation recalled a lease ago or more (revoked, §10.2.1).
    fn delegs_in_the_way(
        &mut self,
        clientid: u64,
        ino: Ino,
        write: bool,
        now: u64,
    ) -> Vec<(u64, u64, Option<u64>)> {
        let lease = u64::from(self.cfg.lease_seconds);
        let mut out = Vec::new();
        for id in self.delegs_of(ino) {
            let Some(st) = self.states.get(&id) else {
                continue;
            };
            let StateKind::Deleg(d) = &st.kind else {
                continue;
            };
            if st.client == clientid || !(write || d.write) || st.revoked.is_some() {
                continue;
            }
            let (client, recalled_at) = (st.client, d.recalled_at);
            if self.is_courtesy(client) {
                self.expire_state(client);
                continue;
            }
            if recalled_at.is_some_and(|t| now >= t + lease) {
                self.revoke_deleg(id);
                continue;
            }
            out.push((id, client, recalled_at));
        }
        out
    }

    /// Whether `client` still holds the delegation `sid`: a CB_GETATTR about it goes only
    /// then.
    pub fn deleg_held(&self, client: u64, sid: &Stateid) -> bool {
        parse_other(self.epoch, &sid.other)
            .ok()
            .and_then(|id| self.states.get(&id))
            .is_some_and(|st| {
                st.client == client
                    && st.revoked.is_none()
                    && matches!(&st.kind, StateKind::Deleg(_))
            })
    }

    /// Revokes a delegation whose recall went unanswered (§10.2.1), and with it the
    /// layouts of the file it kept past the holder's last CLOSE (`drop_kept_layouts`).
    fn revoke_deleg(&mut self, id: u64) {
        self.delegs.recalled.remove(&id);
        let Some((client, ino, live)) = self
            .states
            .get(&id)
            .map(|s| (s.client, s.ino, s.revoked.is_none()))
        else {
            return;
        };
        if live {
            self.delegs.counters.revoked += 1;
        }
        self.revoke_id(id, NfsStat::DELEG_REVOKED);
        self.drop_kept_layouts(client, ino);
    }

    /// The delegation `client` held of `ino` was revoked: with no open of the file left,
    /// the return-on-close layouts it kept past the last CLOSE (layouts `on_close`) have
    /// nothing left to keep them. They go as the layouts of an expired client do: the
    /// stateid is dropped and the layouts service fences the client before it forgets the
    /// grants (`take_dropped_layouts`, recall.rs `expire`) — a holder that left a recall
    /// unanswered for a lease may be cut off from us, not from the volume. (A DELEGRETURN
    /// returns them as the last CLOSE does, in the layouts service: no fence.)
    fn drop_kept_layouts(&mut self, client: u64, ino: Ino) {
        if self.client_has_open(client, ino) || self.deleg_of(client, ino).is_some() {
            return;
        }
        let ids: Vec<u64> = self.files.get(&ino).map_or_else(Vec::new, |f| {
            f.layouts
                .iter()
                .copied()
                .filter(|id| self.states.get(id).is_some_and(|s| s.client == client))
                .collect()
        });
        for id in ids {
            self.drop_state(id);
            self.dropped_layouts.push((client, ino));
        }
    }

    /// The delegation `client` holds of `ino`, if any (one per client and file): whether
    /// it is a write delegation. A recalled one is held until returned or revoked.
    pub fn deleg_of(&self, client: u64, ino: Ino) -> Option<bool> {
        self.delegs_of(ino).iter().find_map(|id| {
            let st = self.states.get(id)?;
            match &st.kind {
                StateKind::Deleg(d) if st.client == client && st.revoked.is_none() => Some(d.write),
                _ => None,
            }
        })
    }

    /// From the tick: revokes the delegations recalled a lease ago or more and still held
    /// (a holder whose backchannel never delivered the recall included: the recall is
    /// what started the clock, §10.2.1).
    pub(super) fn revoke_unreturned_delegs(&mut self, now: u64) {
        let lease = u64::from(self.cfg.lease_seconds);
        let late: Vec<u64> = self
            .delegs
            .recalled
            .iter()
            .copied()
            .filter(
                |id| match self.states.get(id).map(|s| (&s.kind, s.revoked)) {
                    Some((StateKind::Deleg(d), None)) => {
                        d.recalled_at.is_some_and(|t| now >= t + lease)
                    }
                    // Returned, expired or already revoked: nothing left to wait for.
                    _ => true,
                },
            )
            .collect();
        for id in late {
            let live = self.states.get(&id).is_some_and(|s| s.revoked.is_none());
            if live {
                self.revoke_deleg(id);
            } else {
                self.delegs.recalled.remove(&id);
            }
        }
    }

    /// Whether the delegation `sid` of `client` is still held and being recalled: the
    /// queue sends (or re-sends) its CB_RECALL only then.
    pub fn deleg_recall_pending(&self, client: u64, sid: &Stateid) -> bool {
        parse_other(self.epoch, &sid.other)
            .ok()
            .and_then(|id| self.states.get(&id))
            .is_some_and(|st| {
                st.client == client
                    && st.revoked.is_none()
                    && matches!(&st.kind, StateKind::Deleg(d) if d.recalled_at.is_some())
            })
    }

    /// DELEGRETURN (§18.6.3). Like knfsd, the type is checked before the seqid: any other
    /// kind of stateid is BAD_STATEID.
    pub fn delegreturn(&mut self, clientid: u64, sid: &Stateid, ino: Ino) -> Result<(), NfsStat> {
        let known = parse_other(self.epoch, &sid.other)
            .ok()
            .and_then(|id| self.states.get(&id));
        if known.is_some_and(|st| !matches!(st.kind, StateKind::Deleg(_))) {
            return Err(NfsStat::BAD_STATEID);
        }
        let id = self.find(clientid, sid)?;
        match self.states.get(&id) {
            Some(st) if st.ino == ino && matches!(st.kind, StateKind::Deleg(_)) => {}
            _ => return Err(NfsStat::BAD_STATEID),
        }
        self.delegs.recalled.remove(&id);
        self.drop_state(id);
        Ok(())
    }
}

/// The counts of delegations held against a walk of every state (tests; `StateManager::with`
/// runs it after every state change of a debug test build).
#[cfg(test)]
impl Inner {
    /// The delegations held, found by a walk of every state: (all, write ones).
    pub(super) fn deleg_counts_by_walk(&self) -> (usize, usize) {
        let live = self.states.values().filter_map(|st| match &st.kind {
            StateKind::Deleg(d) if st.revoked.is_none() => Some(d.write),
            _ => None,
        });
        live.fold((0, 0), |(all, w), write| (all + 1, w + usize::from(write)))
    }

    /// Panics unless the counts kept (`DelegBook::held`, `write_held`) equal the walk.
    pub(super) fn check_deleg_counts(&self) {
        let kept = (
            self.delegs.held,
            self.delegs.write_held.load(Ordering::SeqCst),
        );
        assert_eq!(
            kept,
            self.deleg_counts_by_walk(),
            "delegations held (all, write): kept count vs walk"
        );
    }
}

#[cfg(test)]
impl super::StateManager {
    /// See `Inner::check_deleg_counts`, for the handler tests.
    pub(crate) fn check_deleg_counts(&self) {
        self.lock().check_deleg_counts();
    }
}

/// The delegation queries of the layouts service (state/mod.rs has the rest).
impl super::StateManager {
    /// The delegation `clientid` holds of `ino`, if any: whether it is a write one.
    pub fn deleg_of(&self, clientid: u64, ino: Ino) -> Option<bool> {
        self.with(|i, _| i.deleg_of(clientid, ino))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::super::tests::{env, mount, seq};
    use super::super::tests_files::open;
    use super::super::{seq4, IoAccess, SequenceOutcome};
    use super::*;

    fn flags(e: &super::super::tests::Env, sid: [u8; 16], seqid: u32) -> u32 {
        match e.sm.sequence(&seq(sid, 0, seqid, seqid as u64)).unwrap() {
            SequenceOutcome::New { status_flags, .. } => status_flags,
            SequenceOutcome::Replay(_) => panic!("replay"),
        }
    }

    #[test]
    fn grant_rules() {
        let e = env();
        let (a, _) = mount(&e, b"a");
        let (b, _) = mount(&e, b"b");
        // A write open of another client forbids a read delegation.
        open(&e, b, b"ob", 10, 2, 0).unwrap();
        open(&e, a, b"oa", 10, 1, 0).unwrap();
        assert_eq!(
            e.sm.grant_deleg(a, Ino(10), false),
            Err(NoDeleg::Contention)
        );
        // Readers share read delegations, but one each, and no write delegation then.
        open(&e, a, b"oa", 11, 1, 0).unwrap();
        open(&e, b, b"ob", 11, 1, 0).unwrap();
        assert!(e.sm.grant_deleg(a, Ino(11), false).is_ok());
        assert_eq!(
            e.sm.grant_deleg(a, Ino(11), false),
            Err(NoDeleg::Contention)
        );
        assert!(e.sm.grant_deleg(b, Ino(11), false).is_ok());
        assert_eq!(e.sm.grant_deleg(b, Ino(11), true), Err(NoDeleg::Contention));
        // A write delegation needs the file to itself.
        open(&e, a, b"oa", 12, 3, 0).unwrap();
        let w = e.sm.grant_deleg(a, Ino(12), true).unwrap();
        assert_eq!(e.sm.check_io(Some(a), &w, Ino(12), IoAccess::Write), Ok(()));
        // A reader of another client conflicts with it; the holder's own opens do not.
        assert!(e.sm.deleg_conflicts(a, Ino(12), true).is_empty());
        let r = e.sm.deleg_conflicts(b, Ino(12), false);
        assert_eq!(r.len(), 1);
        assert!(r[0].send && r[0].client == a && r[0].stateid == w);
    }

    /// A reclaimed delegation (OPEN CLAIM_PREVIOUS) is given back even when it cannot
    /// stay: with another client's reclaimed write open in the way, or `give_back`, it comes
    /// recalled, and the tick revokes it a lease later unless returned. Without a conflict
    /// it is a plain delegation; the same reclaim again finds it.
    #[test]
    fn a_reclaimed_delegation_in_the_way_comes_recalled() {
        let e = env();
        let (a, _) = mount(&e, b"a");
        let (b, _) = mount(&e, b"b");
        let (d, recall) = e.sm.reclaim_deleg(a, Ino(10), false, false);
        assert!(!recall);
        assert_eq!(e.sm.reclaim_deleg(a, Ino(10), false, false), (d, false));
        open(&e, b, b"ob", 11, 3, 0).unwrap();
        let (w, recall) = e.sm.reclaim_deleg(a, Ino(11), false, false);
        assert!(recall, "b writes the file");
        let (g, recall) = e.sm.reclaim_deleg(a, Ino(12), false, true);
        assert!(recall, "give_back");
        assert_eq!(e.sm.deleg_counters().granted, 3);
        assert_eq!(e.sm.delegreturn(a, &g, Ino(12)), Ok(()));
        e.clock.0.store(90, Ordering::SeqCst);
        e.sm.tick();
        assert_eq!(e.sm.test_stateid(a, &w), NfsStat::DELEG_REVOKED);
        assert_eq!(e.sm.test_stateid(a, &d), NfsStat::OK);
    }

    #[test]
    fn recall_then_return_or_revoke() {
        let e = env();
        let (a, sa) = mount(&e, b"a");
        let (b, _) = mount(&e, b"b");
        open(&e, a, b"oa", 10, 1, 0).unwrap();
        let d = e.sm.grant_deleg(a, Ino(10), false).unwrap();
        // Another reader does not conflict with a read delegation; a writer does, once
        // sent, then only waited for.
        assert!(e.sm.deleg_conflicts(b, Ino(10), false).is_empty());
        assert!(e.sm.deleg_conflicts(b, Ino(10), true)[0].send);
        assert!(!e.sm.deleg_conflicts(b, Ino(10), true)[0].send);
        // DELEGRETURN ends it (not of another file, not another kind of stateid).
        assert_eq!(e.sm.delegreturn(a, &d, Ino(11)), Err(NfsStat::BAD_STATEID));
        assert_eq!(e.sm.delegreturn(a, &d, Ino(10)), Ok(()));
        assert!(e.sm.deleg_conflicts(b, Ino(10), true).is_empty());
        assert_eq!(e.sm.delegreturn(a, &d, Ino(10)), Err(NfsStat::BAD_STATEID));

        // Not returned within a lease of the recall: revoked.
        let d = e.sm.grant_deleg(a, Ino(10), false).unwrap();
        assert_eq!(flags(&e, sa, 1) & seq4::RECALLABLE_STATE_REVOKED, 0);
        e.clock.0.store(10, Ordering::SeqCst);
        assert_eq!(e.sm.deleg_conflicts(b, Ino(10), true).len(), 1);
        e.clock.0.store(60, Ordering::SeqCst);
        assert_eq!(e.sm.deleg_conflicts(b, Ino(10), true).len(), 1);
        e.sm.sequence(&seq(sa, 0, 2, 2)).unwrap();
        e.clock.0.store(100, Ordering::SeqCst);
        assert!(e.sm.deleg_conflicts(b, Ino(10), true).is_empty());
        assert_eq!(e.sm.test_stateid(a, &d), NfsStat::DELEG_REVOKED);
        assert_eq!(
            e.sm.check_io(Some(a), &d, Ino(10), IoAccess::Read),
            Err(NfsStat::DELEG_REVOKED)
        );
        assert_ne!(flags(&e, sa, 3) & seq4::RECALLABLE_STATE_REVOKED, 0);
        e.sm.free_stateid(a, &d).unwrap();
        assert_eq!(flags(&e, sa, 4) & seq4::RECALLABLE_STATE_REVOKED, 0);
    }

    /// The tick revokes a recalled delegation a lease after its recall even when nobody
    /// asks again (the conflicting client may have given up), and counts it; a returned one
    /// is only forgotten.
    #[test]
    fn the_tick_revokes_an_unreturned_recall_after_a_lease() {
        let e = env();
        let (a, sa) = mount(&e, b"a");
        let (b, _) = mount(&e, b"b");
        open(&e, a, b"oa", 10, 1, 0).unwrap();
        open(&e, a, b"oa", 11, 1, 0).unwrap();
        let d = e.sm.grant_deleg(a, Ino(10), false).unwrap();
        let kept = e.sm.grant_deleg(a, Ino(11), false).unwrap();
        e.clock.0.store(5, Ordering::SeqCst);
        assert!(e.sm.deleg_conflicts(b, Ino(10), true)[0].send);
        assert!(e.sm.deleg_conflicts(b, Ino(11), true)[0].send);
        assert!(e.sm.deleg_recall_pending(a, &d));
        assert!(!e.sm.deleg_recall_pending(b, &d));
        e.sm.delegreturn(a, &kept, Ino(11)).unwrap();
        assert!(!e.sm.deleg_recall_pending(a, &kept));
        e.sm.sequence(&seq(sa, 0, 1, 1)).unwrap();
        e.clock.0.store(94, Ordering::SeqCst);
        e.sm.tick();
        assert_eq!(e.sm.test_stateid(a, &d), NfsStat::OK);
        e.clock.0.store(95, Ordering::SeqCst);
        e.sm.tick();
        assert_eq!(e.sm.test_stateid(a, &d), NfsStat::DELEG_REVOKED);
        assert!(!e.sm.deleg_recall_pending(a, &d));
        assert_ne!(flags(&e, sa, 2) & seq4::RECALLABLE_STATE_REVOKED, 0);
        let c = e.sm.deleg_counters();
        assert_eq!((c.granted, c.recalled, c.revoked), (2, 2, 1));
        assert_eq!(e.sm.delegations_held(), 0, "one returned, one revoked");
        // The conflict is gone: the other client's access goes on.
        assert!(e.sm.deleg_conflicts(b, Ino(10), true).is_empty());
    }

    /// A revoked delegation takes with it the layouts it kept past the holder's last CLOSE
    /// (the layout stateid goes; the layouts service fences and forgets the grants), but not
    /// those of a file the holder still has open.
    #[test]
    fn a_revoked_delegation_drops_the_layouts_it_kept_past_close() {
        let e = env();
        let (a, sa) = mount(&e, b"a");
        let (b, _) = mount(&e, b"b");
        let mut opens = Vec::new();
        for ino in [10, 11] {
            let s = open(&e, a, b"oa", ino, 1, 0).unwrap();
            e.sm.grant_deleg(a, Ino(ino), false).unwrap();
            e.sm.layout_stateid(a, Ino(ino), &s).unwrap();
            assert_eq!(e.sm.deleg_of(a, Ino(ino)), Some(false));
            opens.push(s);
        }
        e.sm.close(a, &opens[0], Ino(10)).unwrap();
        assert_eq!(e.sm.layouts_of_file(Ino(10)).len(), 1, "kept past CLOSE");
        e.clock.0.store(5, Ordering::SeqCst);
        for ino in [10, 11] {
            assert!(e.sm.deleg_conflicts(b, Ino(ino), true)[0].send);
        }
        e.sm.sequence(&seq(sa, 0, 1, 1)).unwrap();
        e.clock.0.store(95, Ordering::SeqCst);
        e.sm.tick();
        assert_eq!(e.sm.deleg_of(a, Ino(10)), None);
        assert_eq!(e.sm.take_dropped_layouts(), vec![(a, Ino(10))]);
        assert!(e.sm.layouts_of_file(Ino(10)).is_empty());
        // Still open: the layout stays for the last CLOSE (layouts `on_close`).
        assert_eq!(e.sm.layouts_of_file(Ino(11)).len(), 1);
        assert_eq!(e.sm.deleg_counters().revoked, 2);
    }

    /// `max_delegations` caps the delegations held server-wide (WND4_RESOURCE); a returned
    /// or revoked one makes room. A file whose delegation is being recalled gets no new one.
    #[test]
    fn the_cap_and_a_pending_recall_refuse_new_delegations() {
        let e = env();
        e.sm.set_limits(super::super::ClientLimits {
            max_delegations: 2,
            ..Default::default()
        });
        let (a, _) = mount(&e, b"a");
        let (b, _) = mount(&e, b"b");
        for ino in 10..13 {
            open(&e, a, b"oa", ino, 1, 0).unwrap();
        }
        let d10 = e.sm.grant_deleg(a, Ino(10), false).unwrap();
        e.sm.grant_deleg(a, Ino(11), false).unwrap();
        assert_eq!(e.sm.grant_deleg(a, Ino(12), false), Err(NoDeleg::Resource));
        assert_eq!(e.sm.delegations_held(), 2);
        e.sm.delegreturn(a, &d10, Ino(10)).unwrap();
        let d12 = e.sm.grant_deleg(a, Ino(12), false).unwrap();
        // Recalled for b's write: no other client gets one of that file meanwhile.
        assert!(e.sm.deleg_conflicts(b, Ino(12), true)[0].send);
        open(&e, b, b"ob", 12, 1, 0).unwrap();
        e.sm.delegreturn(a, &d12, Ino(12)).unwrap();
        assert!(e.sm.grant_deleg(b, Ino(12), false).is_ok());
        // Revoked, it no longer counts.
        let (c, _) = mount(&e, b"c");
        open(&e, c, b"oc", 13, 1, 0).unwrap();
        assert_eq!(e.sm.grant_deleg(c, Ino(13), false), Err(NoDeleg::Resource));
        assert!(e.sm.deleg_conflicts(b, Ino(11), true)[0].send);
        e.clock.0.store(100, Ordering::SeqCst);
        e.sm.tick();
        assert!(e.sm.grant_deleg(c, Ino(13), false).is_ok());
    }
}
