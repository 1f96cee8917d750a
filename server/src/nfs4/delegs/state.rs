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

use std::sync::atomic::Ordering;

use super::book::{DelegState, NoDeleg, Recall, WriteHolder};
use crate::nfs4::state::files::{ShareAccess, StateKind};
use crate::nfs4::state::stateid::parse_other;
use crate::nfs4::state::{DelegCounters, Inner, StateManager};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::Ino;

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
    pub(crate) fn revoke_unreturned_delegs(&mut self, now: u64) {
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

/// The delegation calls of the state manager, for the operations and the delegations service.
impl StateManager {
    /// DELEGRETURN of the delegation of `ino` the stateid names.
    pub fn delegreturn(&self, clientid: u64, stateid: &Stateid, ino: Ino) -> Result<(), NfsStat> {
        self.with(|i, _| i.delegreturn(clientid, stateid, ino))
    }

    /// A read (`write == false`) or write delegation of `ino` if none conflicts.
    pub fn grant_deleg(&self, clientid: u64, ino: Ino, write: bool) -> Result<Stateid, NoDeleg> {
        self.with(|i, _| i.grant_deleg(clientid, ino, write))
    }

    /// See `Inner::reclaim_deleg`: the stateid and whether it is recalled.
    pub fn reclaim_deleg(
        &self,
        clientid: u64,
        ino: Ino,
        write: bool,
        give_back: bool,
    ) -> (Stateid, bool) {
        self.with(|i, now| i.reclaim_deleg(clientid, ino, write, give_back, now))
    }

    /// Delegations of other clients in the way of an access to `ino` (see `Inner`'s); the
    /// caller sends CB_RECALL for those with `send` and answers DELAY while any is left.
    pub fn deleg_conflicts(&self, clientid: u64, ino: Ino, write: bool) -> Vec<Recall> {
        self.with(|i, now| i.deleg_conflicts(clientid, ino, write, now))
    }

    /// See `Inner::write_deleg_holder`: the write delegation of another client that a
    /// GETATTR of size or change by `clientid` must ask CB_GETATTR of.
    ///
    /// Every GETATTR of size or change asks this, so while no write delegation is held
    /// anywhere it answers `None` from the count `write_delegs` without taking the lock.
    /// Why a GETATTR that reads 0 may answer from the server's attributes:
    /// - The count changes only under the lock, in the same critical section that creates,
    ///   revokes or drops the delegation state (`DelegBook::held_in`/`held_out`, called
    ///   from `new_state`, `revoke_id`, `drop_state`), so at every release of the lock it
    ///   equals the write delegations held (`check_deleg_counts` checks this after every
    ///   state change of every debug test).
    /// - The increment comes before the state is inserted, inside the OPEN's critical
    ///   section (`grant_deleg`, `reclaim_deleg`); the OPEN's reply, the only way the
    ///   holder learns of the delegation, is encoded and sent after the lock is released.
    ///   The holder can write nothing under the delegation before it has the reply.
    /// - A GETATTR whose load reads 0 therefore did not happen after the grant: anything
    ///   that orders it after the reply (the holder's reply sent, then something the
    ///   GETATTR's client learnt from the holder, through sockets or threads that
    ///   synchronize) orders it after the increment, and the load would see it (SeqCst
    ///   coherence). Such a GETATTR is concurrent with the OPEN or before it, and answers
    ///   what the locked walk would have answered just before the OPEN took the lock: no
    ///   delegation, the server's size. Nothing can have been written under the delegation
    ///   yet, so that size is not stale because of it (writes of the holder's open before
    ///   the delegation are ordinary open-for-write writes, seen after its LAYOUTCOMMIT or
    ///   WRITE, with or without this check). In time, the increment is a locked
    ///   read-modify-write followed by the unlock and a socket write: it is visible to
    ///   every core before the first byte of the reply leaves.
    /// - A decrement happens when the delegation is gone (returned after the holder
    ///   flushed, revoked, or its client gone): a GETATTR that reads the lower count then
    ///   answers as the walk would. A count that is too high costs only the walk.
    ///
    /// The count is of the whole server, not per file: with any write delegation held,
    /// every such GETATTR takes the lock as before.
    pub fn write_deleg_holder(&self, clientid: u64, ino: Ino) -> Option<WriteHolder> {
        #[cfg(test)]
        let lock_always = self.lock_every_getattr.load(Ordering::Relaxed);
        #[cfg(not(test))]
        let lock_always = false;
        if !lock_always && self.write_delegs.load(Ordering::SeqCst) == 0 {
            return None;
        }
        self.with(|i, now| i.write_deleg_holder(clientid, ino, now))
    }

    /// Write delegations held now (not revoked), read without the lock.
    pub fn write_delegations_held(&self) -> usize {
        self.write_delegs.load(Ordering::SeqCst)
    }

    /// Whether `client` still holds the delegation `sid` (not returned, not revoked).
    pub fn deleg_held(&self, client: u64, sid: &Stateid) -> bool {
        self.with(|i, _| i.deleg_held(client, sid))
    }

    /// Whether a recall of the delegation `stateid` of `client` is still to be answered.
    pub fn deleg_recall_pending(&self, client: u64, stateid: &Stateid) -> bool {
        self.with(|i, _| i.deleg_recall_pending(client, stateid))
    }

    /// Delegations granted, recalled and revoked since the start.
    pub fn deleg_counters(&self) -> DelegCounters {
        self.lock().delegs.counters
    }

    /// Delegations held now (not revoked).
    pub fn delegations_held(&self) -> usize {
        self.lock().delegs.held
    }

    /// Whether an OPEN with no WANT_* preference may get a read delegation the server chose
    /// (config `read_delegations`).
    pub fn read_delegations_by_default(&self) -> bool {
        self.lock().limits.read_delegations
    }

    /// Whether an OPEN for write with no WANT_* preference may get a write delegation the
    /// server chose (config `write_delegations`).
    pub fn write_delegations_by_default(&self) -> bool {
        self.lock().limits.write_delegations
    }

    /// Whether OPEN may offer delegations at all (config `delegations`).
    pub fn delegations_enabled(&self) -> bool {
        self.lock().limits.delegations
    }

    /// The delegation `clientid` holds of `ino`, if any: whether it is a write one (the
    /// layouts service's `on_close` asks what a delegation keeps past the last CLOSE).
    pub fn deleg_of(&self, clientid: u64, ino: Ino) -> Option<bool> {
        self.with(|i, _| i.deleg_of(clientid, ino))
    }
}

/// The counts of delegations held against a walk of every state (tests; `StateManager::with`
/// runs it after every state change of a debug test build).
#[cfg(test)]
impl Inner {
    /// The delegations held, found by a walk of every state: (all, write ones).
    pub(crate) fn deleg_counts_by_walk(&self) -> (usize, usize) {
        let live = self.states.values().filter_map(|st| match &st.kind {
            StateKind::Deleg(d) if st.revoked.is_none() => Some(d.write),
            _ => None,
        });
        live.fold((0, 0), |(all, w), write| (all + 1, w + usize::from(write)))
    }

    /// Panics unless the counts kept (`DelegBook::held`, `write_held`) equal the walk.
    pub(crate) fn check_deleg_counts(&self) {
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
impl StateManager {
    /// See `Inner::check_deleg_counts`, for the handler tests.
    pub(crate) fn check_deleg_counts(&self) {
        self.lock().check_deleg_counts();
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
