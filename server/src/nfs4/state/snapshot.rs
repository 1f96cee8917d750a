//! Read-only views of the state for the admin endpoint (issue 16): what each client holds,
//! and the grace period, copied out under the state lock in one short pass (no store call,
//! no record write), so that a `GET /clients` never waits on, or changes, an NFS operation.

use serde::Serialize;

use super::files::StateKind;
use super::StateManager;

/// How a client's lease stands (RFC 8881 §8.3; courtesy as knfsd keeps them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    /// EXCHANGE_ID done, CREATE_SESSION not yet (RFC 8881 §18.35.4).
    Unconfirmed,
    /// Renewed within the lease.
    Active,
    /// The lease ran out; its state is kept until someone conflicts with it.
    Courtesy,
}

/// A client's reclaim during the grace period after a restart (RFC 8881 §8.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReclaimState {
    /// Not a client of the previous instance, or the grace period is over.
    None,
    /// A previous client that has not said RECLAIM_COMPLETE yet.
    Reclaiming,
    /// A previous client that said RECLAIM_COMPLETE.
    Complete,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    /// The sessionid in hex.
    pub id: String,
    /// Fore-channel slots granted, and how many are in use now.
    pub slots: u32,
    pub slots_busy: usize,
    /// Connections bound to the session.
    pub connections: usize,
    pub backchannel: bool,
}

/// Counts of a client's states (revoked ones counted apart: they wait for FREE_STATEID).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StateCounts {
    pub opens: usize,
    pub locks: usize,
    pub delegations: usize,
    pub layouts: usize,
    pub revoked: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClientInfo {
    /// The clientid as the wire carries it (`clientid4`).
    pub id: u64,
    /// `co_ownerid`: text when it is printable UTF-8 (Linux sends "Linux NFSv4.2 host"),
    /// hex otherwise.
    pub owner: String,
    pub lease: LeaseState,
    /// Seconds since the client last renewed its lease.
    pub idle_seconds: u64,
    pub sessions: Vec<SessionInfo>,
    pub states: StateCounts,
    pub reclaim: ReclaimState,
}

/// The grace period now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GraceInfo {
    /// Seconds left; `None` once the grace period is over (or there was none).
    pub remaining_seconds: Option<u64>,
    /// Clients of the previous instance, and how many said RECLAIM_COMPLETE.
    pub previous_clients: usize,
    pub reclaimed: usize,
}

/// What client state holds now, against its bounds (issue 17; `/status` `client_state`):
/// the bytes pnfsd itself keeps, whatever the allocator does with freed pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ClientStateUsage {
    pub clients: usize,
    pub courtesy_clients: usize,
    pub sessions: usize,
    pub slots: u64,
    /// Bytes of cached replies held in the slot tables.
    pub reply_cache_bytes: u64,
    /// What the sessions take of `max_client_memory` (slots × the per-slot charge).
    pub reserved_bytes: u64,
    pub max_client_memory: u64,
    pub max_clients: usize,
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn owner_text(o: &[u8]) -> String {
    match std::str::from_utf8(o) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => s.to_string(),
        _ => hex(o),
    }
}

impl StateManager {
    /// Every client and what it holds, by clientid.
    pub fn clients_snapshot(&self) -> Vec<ClientInfo> {
        let now = self.clock.now();
        let g = self.lock();
        let in_grace = g.grace.active(now);
        let mut out: Vec<ClientInfo> = g
            .clients
            .values()
            .map(|c| {
                let mut sessions: Vec<SessionInfo> = c
                    .sessions
                    .iter()
                    .filter_map(|sid| g.sessions.get(sid))
                    .map(|s| SessionInfo {
                        id: hex(&s.id),
                        slots: s.slots.len(),
                        slots_busy: s.slots.busy_count(),
                        connections: s.conns.len(),
                        backchannel: s.back_conn.is_some(),
                    })
                    .collect();
                sessions.sort_by(|a, b| a.id.cmp(&b.id));
                let mut states = StateCounts::default();
                for st in c.states.iter().filter_map(|id| g.states.get(id)) {
                    if st.revoked.is_some() {
                        states.revoked += 1;
                        continue;
                    }
                    match st.kind {
                        StateKind::Open(_) => states.opens += 1,
                        StateKind::Lock(_) => states.locks += 1,
                        StateKind::Deleg(_) => states.delegations += 1,
                        StateKind::Layout => states.layouts += 1,
                    }
                }
                let reclaim = if !in_grace || !g.grace.previous.contains(&c.owner) {
                    ReclaimState::None
                } else if c.reclaim_complete {
                    ReclaimState::Complete
                } else {
                    ReclaimState::Reclaiming
                };
                ClientInfo {
                    id: c.id,
                    owner: owner_text(&c.owner),
                    lease: if !c.confirmed {
                        LeaseState::Unconfirmed
                    } else if c.courtesy {
                        LeaseState::Courtesy
                    } else {
                        LeaseState::Active
                    },
                    idle_seconds: now.saturating_sub(c.last_renew),
                    sessions,
                    states,
                    reclaim,
                }
            })
            .collect();
        out.sort_by_key(|c| c.id);
        out
    }

    /// Counts and bytes of client state, in one short pass under the state lock.
    pub fn client_state_usage(&self) -> ClientStateUsage {
        let g = self.lock();
        ClientStateUsage {
            clients: g.clients.len(),
            courtesy_clients: g.clients.values().filter(|c| c.courtesy).count(),
            sessions: g.sessions.len(),
            slots: g.sessions.values().map(|s| u64::from(s.slots.len())).sum(),
            reply_cache_bytes: g.sessions.values().map(|s| s.slots.cached_bytes()).sum(),
            reserved_bytes: g.reserved_bytes(),
            max_client_memory: g.limits.max_client_memory,
            max_clients: g.limits.max_clients,
        }
    }

    /// The grace period now.
    pub fn grace_snapshot(&self) -> GraceInfo {
        let now = self.clock.now();
        let g = self.lock();
        GraceInfo {
            remaining_seconds: g
                .grace
                .active(now)
                .then(|| g.grace.until.saturating_sub(now)),
            previous_clients: g.grace.previous.len(),
            reclaimed: g.grace.completed.len(),
        }
    }
}
