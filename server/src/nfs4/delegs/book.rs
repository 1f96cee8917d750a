//! The delegation bookkeeping `state::Inner` keeps beside its stateid table (the recalls
//! pending, the counts of delegations held, the counters) and the types the delegation
//! calls answer with. It imports nothing of `nfs4::state`, so the state can hold a
//! `DelegBook` while the delegation rules (state.rs) sit above it (tools/deps.py ranks this
//! module below the state).

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::nfs4::types::Stateid;

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
    pub(crate) recalled: HashSet<u64>,
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
    pub(crate) fn held_in(&mut self, write: bool) {
        self.held += 1;
        if write {
            self.write_held.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A held delegation went: revoked (`revoke_id`) or dropped while not revoked
    /// (`drop_state`: DELEGRETURN, the client's end). A decrement below zero (a path that
    /// counted out what it never counted in) wraps the shared count to a huge value rather
    /// than saturating: that only sends every GETATTR to the locked walk, the safe side.
    pub(crate) fn held_out(&mut self, write: bool) {
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

#[cfg(test)]
#[path = "book_tests.rs"]
mod tests;
