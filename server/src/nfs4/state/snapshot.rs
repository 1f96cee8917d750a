//! Read-only views of the state for the admin endpoint: what each client holds,
//! and the grace period, copied out under the state lock in one short pass (no store call,
//! no record write), so that a `GET /clients` never waits on, or changes, an NFS operation.

use serde::Serialize;

use super::files::StateKind;
use super::stateid::make_other;
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
    /// The address the client's layouts came from, when it holds or held one (filled by
    /// the admin view from the layouts service; the state layer does not keep addresses).
    pub address: Option<String>,
}

/// One state a client holds (`GET /clients/ID/states`), as knfsd's
/// /proc/fs/nfsd/clients/ID/states lists them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StateInfo {
    /// The stateid's `other` field in hex (what the client sends; seqid left out).
    pub stateid: String,
    /// "open", "lock", "delegation" or "layout".
    pub kind: &'static str,
    /// The file's inode number (`fileid`).
    pub fileid: u64,
    pub seqid: u32,
    /// Open: "read", "write" or "both", and the deny mode ("none", …). Delegation: "read" or
    /// "write". Lock: the byte ranges held ("0-4095 write").
    pub access: Option<&'static str>,
    pub deny: Option<&'static str>,
    pub ranges: Vec<String>,
    /// The open or lock owner in hex.
    pub owner: Option<String>,
    /// A delegation being recalled.
    pub recalled: bool,
    /// Revoked by the server, waiting for FREE_STATEID: the status the client gets.
    pub revoked: Option<&'static str>,
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

/// What client state holds now, against its bounds (`/status` `client_state`):
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

/// OPEN4_SHARE_ACCESS_* / OPEN4_SHARE_DENY_* by value (RFC 8881 §18.16.3).
fn share_name(v: u32) -> &'static str {
    match v {
        0 => "none",
        1 => "read",
        2 => "write",
        _ => "both",
    }
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
                    address: None,
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

    /// What one client holds, state by state (`None`: no such client).
    pub fn client_states(&self, clientid: u64) -> Option<Vec<StateInfo>> {
        let g = self.lock();
        let c = g.clients.get(&clientid)?;
        let mut out: Vec<StateInfo> = c
            .states
            .iter()
            .filter_map(|id| g.states.get(id).map(|st| (*id, st)))
            .map(|(id, st)| {
                let mut info = StateInfo {
                    stateid: hex(&make_other(g.epoch, id)),
                    kind: "layout",
                    fileid: st.ino.0,
                    seqid: st.seqid,
                    access: None,
                    deny: None,
                    ranges: Vec::new(),
                    owner: None,
                    recalled: false,
                    revoked: st.revoked.map(|s| s.name()),
                };
                match &st.kind {
                    StateKind::Open(o) => {
                        info.kind = "open";
                        info.access = Some(share_name(o.share.access));
                        info.deny = Some(share_name(o.share.deny));
                        info.owner = Some(hex(&o.owner));
                    }
                    StateKind::Lock(l) => {
                        info.kind = "lock";
                        info.owner = Some(hex(&l.owner));
                        if let Some(f) = g.files.get(&st.ino) {
                            info.ranges = f
                                .locks
                                .iter()
                                .filter(|r| r.owner == id)
                                .map(|r| {
                                    let mode = if r.write { "write" } else { "read" };
                                    format!("{}-{} {mode}", r.start, r.end)
                                })
                                .collect();
                        }
                    }
                    StateKind::Deleg(d) => {
                        info.kind = "delegation";
                        info.access = Some(if d.write { "write" } else { "read" });
                        info.recalled = d.recalled_at.is_some();
                    }
                    StateKind::Layout => {}
                }
                info
            })
            .collect();
        out.sort_by(|a, b| (a.fileid, a.kind, &a.stateid).cmp(&(b.fileid, b.kind, &b.stateid)));
        Some(out)
    }

    /// Expires a client now, as if its lease had run out and someone needed its state
    /// (`pnfsd clients evict`, knfsd's `echo expire > /proc/fs/nfsd/clients/ID/ctl`): its
    /// sessions and states go, its record too (it cannot reclaim), and its layouts are
    /// handed to the layouts service's expiry (`take_dropped_layouts`), which fences it.
    /// False if there is no such client.
    pub fn evict_client(&self, clientid: u64) -> bool {
        self.with(|i, _| {
            if !i.clients.contains_key(&clientid) {
                return false;
            }
            i.log_client_end(clientid, super::client::ClientEnd::Evicted("by the admin"));
            i.expire_client(clientid);
            true
        })
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
