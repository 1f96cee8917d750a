//! Client records: EXCHANGE_ID (RFC 8881 §18.35), CREATE_SESSION (§18.36),
//! DESTROY_CLIENTID (§18.50), and dropping a client with everything hanging off it. The
//! request/answer types of the session operations live here too.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;

use super::session::{slot_charge, ChannelAttrs, Session, SlotTable, SOLO_REPLY_ROOM};
use super::{Inner, SessionSlotRef};
use crate::nfs4::status::NfsStat;
use crate::rpc::Backchannel;

/// EXCHGID4_FLAG_* (RFC 8881 §18.35.1).
pub mod exchgid {
    pub const SUPP_MOVED_REFER: u32 = 0x1;
    pub const SUPP_MOVED_MIGR: u32 = 0x2;
    pub const SUPP_FENCE_OPS: u32 = 0x4;
    pub const BIND_PRINC_STATEID: u32 = 0x100;
    pub const USE_NON_PNFS: u32 = 0x1_0000;
    pub const USE_PNFS_MDS: u32 = 0x2_0000;
    pub const USE_PNFS_DS: u32 = 0x4_0000;
    pub const UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
    pub const CONFIRMED_R: u32 = 0x8000_0000;
    /// Every flag a client may send; anything else is NFS4ERR_INVAL. SUPP_FENCE_OPS (RFC
    /// 7862) is left out as knfsd does: pynfs EID4 expects INVAL for bit 0x4.
    pub const MASK_A: u32 = SUPP_MOVED_REFER
        | SUPP_MOVED_MIGR
        | BIND_PRINC_STATEID
        | USE_NON_PNFS
        | USE_PNFS_MDS
        | USE_PNFS_DS
        | UPD_CONFIRMED_REC_A;
}

/// What client state may take (docs/robustness.md "Client state bounds"). One
/// memory budget sizes every session's reply cache at CREATE_SESSION; the counts bound what
/// the budget does not see (client records, sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    /// Client records, confirmed or not: past it EXCHANGE_ID answers NFS4ERR_RESOURCE (once
    /// no courtesy client is left to make room).
    pub max_clients: usize,
    /// Sessions of one client: past it CREATE_SESSION answers NFS4ERR_RESOURCE.
    pub max_sessions_per_client: usize,
    /// Slots × cached-reply bytes of all sessions together (`slot_charge`).
    pub max_client_memory: u64,
    /// Expired clients kept because they hold state; past it the oldest goes.
    pub max_courtesy_clients: usize,
    /// How long an expired client with state is kept while nobody conflicts with it.
    pub courtesy_seconds: u64,
    /// Whether OPEN hands out delegations at all (config `delegations`).
    pub delegations: bool,
    /// Whether an OPEN that states no preference (no WANT_* flag: what the Linux client
    /// sends) may get a read delegation the server chose (config `read_delegations`; on by
    /// default, docs/delegations.md).
    pub read_delegations: bool,
    /// Whether an OPEN for write that states no preference, by a client alone on the file,
    /// may get a write delegation the server chose (config `write_delegations`; on by
    /// default; CB_GETATTR keeps other clients' view of size and change right, §10.4.3).
    pub write_delegations: bool,
    /// Delegations held server-wide; past it OPEN offers none (WND4_RESOURCE to a client
    /// that asked). Config `max_delegations`.
    pub max_delegations: usize,
}

pub const DEFAULT_MAX_CLIENTS: usize = 1024;
pub const DEFAULT_MAX_SESSIONS_PER_CLIENT: usize = 16;
pub const DEFAULT_MAX_CLIENT_MEMORY: u64 = 256 << 20;
/// As many as the client cap: a courtesy client goes when the client cap or the memory
/// budget needs its room (both evict courtesy clients first), not before. A lower count
/// evicted clients nobody needed gone, and their records with them, so after a restart they
/// could not reclaim (RFC 8881 §8.4.3; pynfs REBT2c/3c/4c, 1,000 clients that stop renewing
/// while the rest are set up). knfsd bounds courtesy clients only under memory pressure.
pub const DEFAULT_MAX_COURTESY_CLIENTS: usize = DEFAULT_MAX_CLIENTS;
/// 65,536 delegations: a delegation costs about 200 bytes here (its state and its place on
/// the file), so some 16 MiB at the cap, and one conflicting access recalls at most the
/// delegations of one file. It is thirteen Linux clients at their own cap
/// (`nfs4_delegation_watermark`, 5,000 each); knfsd allows 4 per MiB of memory (16,384 on
/// a 4 GiB server).
pub const DEFAULT_MAX_DELEGATIONS: usize = 1 << 16;

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            max_clients: DEFAULT_MAX_CLIENTS,
            max_sessions_per_client: DEFAULT_MAX_SESSIONS_PER_CLIENT,
            max_client_memory: DEFAULT_MAX_CLIENT_MEMORY,
            max_courtesy_clients: DEFAULT_MAX_COURTESY_CLIENTS,
            courtesy_seconds: super::COURTESY_SECONDS,
            delegations: true,
            read_delegations: true,
            write_delegations: true,
            max_delegations: DEFAULT_MAX_DELEGATIONS,
        }
    }
}

/// CREATE_SESSION4_FLAG_*.
pub const CS_FLAG_PERSIST: u32 = 0x1;
pub const CS_FLAG_CONN_BACK_CHAN: u32 = 0x2;
pub const CS_FLAG_CONN_RDMA: u32 = 0x4;

/// SEQ4_STATUS_* (RFC 8881 §18.46.3).
pub mod seq4 {
    pub const CB_PATH_DOWN: u32 = 0x1;
    pub const EXPIRED_ALL_STATE_REVOKED: u32 = 0x8;
    pub const EXPIRED_SOME_STATE_REVOKED: u32 = 0x10;
    pub const ADMIN_STATE_REVOKED: u32 = 0x20;
    pub const RECALLABLE_STATE_REVOKED: u32 = 0x40;
    pub const CB_PATH_DOWN_SESSION: u32 = 0x200;
}

/// Who owns a client record (RFC 8881 §2.4: the principal that did EXCHANGE_ID).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    pub flavor: u32,
    pub uid: u32,
}

pub struct Client {
    pub id: u64,
    pub owner: Vec<u8>,
    pub verifier: [u8; 8],
    pub principal: Principal,
    pub confirmed: bool,
    /// Last `csa_sequence` seen (RFC 8881 §18.36.4) and the answer it got, for replays.
    pub cs_seqid: u32,
    /// The answer to the last CREATE_SESSION, for a replay of it.
    pub cs_reply: Option<CreateSessionRes>,
    pub last_renew: u64,
    /// The lease expired; the state stays until someone conflicts or COURTESY_SECONDS pass.
    pub courtesy: bool,
    pub sessions: HashSet<[u8; 16]>,
    /// Ids of the client's stateids.
    pub states: HashSet<u64>,
    pub reclaim_complete: bool,
    /// Its record says it took state (`RECORD_HELD_STATE`): written at its first OPEN.
    pub state_recorded: bool,
    /// Where it confirmed itself from (its first CREATE_SESSION): the event lines say it.
    pub addr: Option<SocketAddr>,
    /// Ids of states the server took away (ADMIN_REVOKED or EXPIRED), reported by SEQUENCE
    /// until the client frees them.
    pub revoked: HashSet<u64>,
}

#[derive(Default)]
pub struct OwnerRecs {
    pub confirmed: Option<u64>,
    pub unconfirmed: Option<u64>,
}

/// How a client went without DESTROY_CLIENTID (the event line, `Inner::log_client_end`).
#[derive(Debug, Clone, Copy)]
pub(super) enum ClientEnd {
    /// Its lease ran out (without state, or past the courtesy time).
    Expired,
    /// Taken away before its time: room needed, another principal, the admin.
    Evicted(&'static str),
}

/// A sessionid as the event lines print it: 32 hex digits.
pub(super) fn hex16(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, Clone)]
pub struct ExchangeIdReq {
    pub owner: Vec<u8>,
    pub verifier: [u8; 8],
    pub flags: u32,
    pub principal: Principal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeIdRes {
    pub clientid: u64,
    pub sequenceid: u32,
    pub flags: u32,
}

pub struct CreateSessionReq {
    pub clientid: u64,
    pub sequence: u32,
    pub flags: u32,
    pub fore: ChannelAttrs,
    pub back: ChannelAttrs,
    pub cb_program: u32,
    pub principal: Principal,
    pub conn: u64,
    /// The peer of the connection it came on (the event lines).
    pub peer: SocketAddr,
    pub backchannel: Option<Arc<dyn Backchannel>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSessionRes {
    pub sessionid: [u8; 16],
    pub sequence: u32,
    pub flags: u32,
    pub fore: ChannelAttrs,
    pub back: ChannelAttrs,
}

#[derive(Debug, Clone)]
pub struct SequenceReq {
    pub sessionid: [u8; 16],
    pub sequenceid: u32,
    pub slot: u32,
    pub highest_slot: u32,
    pub cachethis: bool,
    /// Hash of the whole request from SEQUENCE's arguments on (false-retry detection).
    pub hash: u64,
    /// SEQUENCE is the only operation: its reply is cached even without `cachethis`.
    pub solo: bool,
    pub conn: u64,
}

#[derive(Debug, Clone)]
pub enum SequenceOutcome {
    New {
        slot: SessionSlotRef,
        highest_slot: u32,
        target_highest_slot: u32,
        status_flags: u32,
    },
    Replay(Vec<u8>),
}

/// `channel_dir_from_client4` / `channel_dir_from_server4` (RFC 8881 §18.34).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindDir {
    Fore,
    Back,
    ForeOrBoth,
    BackOrBoth,
    Both,
}

impl Inner {
    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn new_client(&mut self, req: &ExchangeIdReq, now: u64) -> u64 {
        let id = (self.epoch as u64) << 32 | (self.new_id() & 0xffff_ffff);
        self.clients.insert(
            id,
            Client {
                id,
                owner: req.owner.clone(),
                verifier: req.verifier,
                principal: req.principal.clone(),
                confirmed: false,
                cs_seqid: 0,
                cs_reply: None,
                last_renew: now,
                courtesy: false,
                sessions: HashSet::new(),
                states: HashSet::new(),
                reclaim_complete: false,
                state_recorded: false,
                addr: None,
                revoked: HashSet::new(),
            },
        );
        id
    }

    /// The client behind a clientid: STALE_CLIENTID for another boot's or a forgotten one.
    pub(super) fn client(&self, clientid: u64) -> Result<&Client, NfsStat> {
        self.clients.get(&clientid).ok_or(NfsStat::STALE_CLIENTID)
    }

    /// RFC 8881 §18.35.5: the cases of EXCHANGE_ID against existing records.
    pub fn exchange_id(&mut self, req: &ExchangeIdReq, now: u64) -> Result<ExchangeIdRes, NfsStat> {
        if req.flags & !exchgid::MASK_A != 0 {
            return Err(NfsStat::INVAL);
        }
        let update = req.flags & exchgid::UPD_CONFIRMED_REC_A != 0;
        let (conf, unconf) = self
            .owners
            .get(&req.owner)
            .map_or((None, None), |r| (r.confirmed, r.unconfirmed));
        let reply = |c: &Client, confirmed: bool| ExchangeIdRes {
            clientid: c.id,
            sequenceid: c.cs_seqid.wrapping_add(1),
            flags: exchgid::USE_PNFS_MDS | if confirmed { exchgid::CONFIRMED_R } else { 0 },
        };
        if let Some(cid) = conf {
            let c = self.client(cid)?;
            let same_verf = c.verifier == req.verifier;
            let same_princ = c.principal == req.principal;
            if update {
                // Cases 6–8: update of a confirmed record.
                return if !same_princ {
                    Err(NfsStat::PERM)
                } else if !same_verf {
                    Err(NfsStat::NOT_SAME)
                } else {
                    Ok(reply(c, true))
                };
            }
            if same_princ && same_verf {
                // Case 2: the same client again.
                return Ok(reply(c, true));
            }
            if !same_princ {
                // Case 3: another principal uses the owner; refuse while the lease holds.
                if !c.courtesy && (!c.states.is_empty() || !c.sessions.is_empty()) {
                    return Err(NfsStat::CLID_INUSE);
                }
                self.log_client_end(
                    cid,
                    ClientEnd::Evicted("its owner is taken by another principal"),
                );
                self.expire_client(cid);
            }
            // Case 4 (client restarted: new verifier) falls through to a new unconfirmed
            // record; the old one goes when the new one is confirmed.
        } else if update {
            // Case 9: nothing confirmed to update.
            return Err(NfsStat::NOENT);
        }
        if let Some(u) = unconf {
            // Case 5: an unconfirmed record is replaced.
            self.remove_client(u);
        }
        // The client cap: courtesy clients make room, oldest first; then RESOURCE.
        while self.clients.len() >= self.limits.max_clients {
            if !self.evict_oldest_courtesy() {
                return Err(NfsStat::RESOURCE);
            }
        }
        let id = self.new_client(req, now);
        self.owners
            .entry(req.owner.clone())
            .or_default()
            .unconfirmed = Some(id);
        let c = self.client(id)?;
        Ok(reply(c, false))
    }

    /// RFC 8881 §18.36.4: CREATE_SESSION confirms a record, with `csa_sequence` replay rules.
    pub fn create_session(
        &mut self,
        req: CreateSessionReq,
        now: u64,
    ) -> Result<CreateSessionRes, NfsStat> {
        let c = self.client(req.clientid)?;
        // §18.36.4: only the principal of EXCHANGE_ID may confirm; once confirmed, another
        // principal may create sessions (pynfs CSESS9, CSESS10).
        if !c.confirmed && c.principal != req.principal {
            return Err(NfsStat::CLID_INUSE);
        }
        if c.confirmed && req.sequence == c.cs_seqid {
            // A retry of the last CREATE_SESSION: the same answer again. §18.36.4 defines the
            // replay by csa_sequence alone; false-retry detection is a SEQUENCE slot matter
            // (§2.10.6.1.3), and clients (pynfs CSESS5a/b) replay with other callback
            // parameters and expect the cached answer, as knfsd gives it.
            return match &c.cs_reply {
                Some(res) => Ok(res.clone()),
                None => Err(NfsStat::SEQ_MISORDERED),
            };
        }
        if req.sequence != c.cs_seqid.wrapping_add(1) {
            return Err(NfsStat::SEQ_MISORDERED);
        }
        if req.flags & !(CS_FLAG_PERSIST | CS_FLAG_CONN_BACK_CHAN | CS_FLAG_CONN_RDMA) != 0 {
            return Err(NfsStat::INVAL);
        }
        if c.sessions.len() >= self.limits.max_sessions_per_client {
            return Err(NfsStat::RESOURCE);
        }
        let mut fore = req.fore.negotiate_fore()?;
        let back = req.back.negotiate_back()?;
        let was_confirmed = c.confirmed;
        let owner = c.owner.clone();
        let charge = self.size_reply_cache(&mut fore, req.clientid)?;
        if !was_confirmed {
            // Confirming a replacement record (case 4) drops the old client and its state.
            let old = self.owners.get(&owner).and_then(|r| r.confirmed);
            if let Some(old) = old {
                self.remove_client(old);
            }
            let may_reclaim = self.grace.previous.contains(&owner);
            if let Some(r) = self.owners.get_mut(&owner) {
                r.confirmed = Some(req.clientid);
                r.unconfirmed = None;
            }
            tracing::info!(
                client = %format_args!("{:016x}", req.clientid),
                addr = %req.peer,
                reclaims = may_reclaim && !self.grace.ended,
                "client created"
            );
            if !may_reclaim || self.grace.ended {
                // A new client has nothing to reclaim (RFC 8881 §8.4.3: the record says
                // who may reclaim after the next restart).
                self.pending
                    .push((owner.clone(), Some(super::grace::RECORD_NO_STATE.to_vec())));
            }
        }
        let mut sid = [0u8; 16];
        sid[0..8].copy_from_slice(&req.clientid.to_be_bytes());
        sid[8..12].copy_from_slice(&self.epoch.to_be_bytes());
        sid[12..16].copy_from_slice(&(self.new_id() as u32).to_be_bytes());
        let back_ok = req.flags & CS_FLAG_CONN_BACK_CHAN != 0;
        let mut conns = HashSet::new();
        conns.insert(req.conn);
        let back_conn = match (&req.backchannel, back_ok) {
            (Some(bc), true) => Some((req.conn, bc.clone())),
            _ => None,
        };
        let flags = if back_conn.is_some() {
            CS_FLAG_CONN_BACK_CHAN
        } else {
            0
        };
        let res = CreateSessionRes {
            sessionid: sid,
            sequence: req.sequence,
            flags,
            fore: fore.clone(),
            back: back.clone(),
        };
        self.sessions.insert(
            sid,
            Session {
                id: sid,
                client: req.clientid,
                slots: SlotTable::new(fore.maxrequests, fore.maxresponsesize_cached),
                charge,
                fore,
                cb_program: req.cb_program,
                cb_cred: Default::default(),
                cb_minor: 1,
                conns,
                wants_back: back_conn.is_some(),
                back_conn,
                cb_seqid: 0,
                cb_busy: false,
                cb_path: Default::default(),
                cb_probe_gen: 0,
            },
        );
        let c = self
            .clients
            .get_mut(&req.clientid)
            .ok_or(NfsStat::STALE_CLIENTID)?;
        tracing::info!(
            session = %hex16(&sid),
            client = %format_args!("{:016x}", req.clientid),
            addr = %req.peer,
            "session created"
        );
        c.confirmed = true;
        c.addr.get_or_insert(req.peer);
        c.cs_seqid = req.sequence;
        c.cs_reply = Some(res.clone());
        c.sessions.insert(sid);
        c.last_renew = now;
        c.courtesy = false;
        Ok(res)
    }

    /// What the sessions take of `max_client_memory` now.
    pub(super) fn reserved_bytes(&self) -> u64 {
        self.sessions.values().map(|s| s.charge).sum()
    }

    /// Sizes a new session's reply cache from what is left of `max_client_memory` (RFC 8881
    /// §18.36.3: the server may lower `ca_maxrequests` and `ca_maxresponsesize_cached`),
    /// after courtesy clients (oldest first) make room; returns the session's charge. DELAY
    /// when not even one slot fits: sessions that end or expire give memory back.
    fn size_reply_cache(&mut self, fore: &mut ChannelAttrs, clientid: u64) -> Result<u64, NfsStat> {
        let budget = self.limits.max_client_memory;
        let per_slot = slot_charge(fore.maxresponsesize_cached);
        let want = u64::from(fore.maxrequests) * per_slot;
        while budget.saturating_sub(self.reserved_bytes()) < want {
            if !self.evict_oldest_courtesy_except(clientid) {
                break;
            }
        }
        let left = budget.saturating_sub(self.reserved_bytes());
        if want <= left {
            return Ok(want);
        }
        let fit = left / per_slot;
        if fit >= 1 {
            fore.maxrequests = fit as u32;
            return Ok(fit * per_slot);
        }
        // Not one slot of the size asked for: one slot with a smaller cache.
        let cached = left.saturating_sub(super::session::SLOT_OVERHEAD);
        if cached >= u64::from(SOLO_REPLY_ROOM) {
            fore.maxrequests = 1;
            fore.maxresponsesize_cached = cached as u32;
            return Ok(slot_charge(fore.maxresponsesize_cached));
        }
        Err(NfsStat::DELAY)
    }

    /// Drops the courtesy client that expired first (its layouts go to the layout engine's
    /// expiry, as at any lease expiry). False when there is none.
    pub(super) fn evict_oldest_courtesy(&mut self) -> bool {
        self.evict_oldest_courtesy_except(0)
    }

    fn evict_oldest_courtesy_except(&mut self, keep: u64) -> bool {
        let oldest = self
            .clients
            .values()
            .filter(|c| c.courtesy && c.id != keep)
            .min_by_key(|c| (c.last_renew, c.id))
            .map(|c| c.id);
        match oldest {
            Some(id) => {
                self.log_client_end(id, ClientEnd::Evicted("courtesy client, room needed"));
                self.expire_client(id);
                true
            }
            None => false,
        }
    }

    /// Leases (RFC 8881 §8.3), from the server's tick: an unconfirmed client, or one that
    /// holds no state (no open, lock, delegation or layout), goes at lease end with its
    /// sessions and reply caches, as in knfsd; one with state becomes a courtesy client,
    /// kept `courtesy_seconds` at most and `max_courtesy_clients` at most (oldest first).
    pub(super) fn expire_leases(&mut self, now: u64) {
        let lease = u64::from(self.cfg.lease_seconds);
        let courtesy_seconds = self.limits.courtesy_seconds;
        let mut purge = Vec::new();
        let mut courtesy = 0;
        for c in self.clients.values_mut() {
            let idle = now.saturating_sub(c.last_renew);
            if idle <= lease {
                continue;
            }
            if !c.confirmed || c.states.is_empty() || idle > lease + courtesy_seconds {
                purge.push(c.id);
            } else {
                c.courtesy = true;
                courtesy += 1;
            }
        }
        for id in purge {
            self.log_client_end(id, ClientEnd::Expired);
            self.expire_client(id);
        }
        while courtesy > self.limits.max_courtesy_clients && self.evict_oldest_courtesy() {
            courtesy -= 1;
        }
    }

    /// The info line of a client that goes without asking (a confirmed one; an
    /// unconfirmed record that lapses is no event).
    pub(super) fn log_client_end(&self, clientid: u64, end: ClientEnd) {
        let Some(c) = self.clients.get(&clientid).filter(|c| c.confirmed) else {
            return;
        };
        let client = format_args!("{clientid:016x}");
        let addr = c.addr.map_or_else(|| "-".to_string(), |a| a.to_string());
        match end {
            ClientEnd::Expired => tracing::info!(
                %client,
                %addr,
                held_state = !c.states.is_empty(),
                "client expired"
            ),
            ClientEnd::Evicted(why) => tracing::info!(%client, %addr, why, "client evicted"),
        }
    }

    /// RFC 8881 §18.50.3: only a client without sessions can be destroyed. With SP4_NONE
    /// any principal may (as in knfsd: only SP4_MACH_CRED binds these to a principal).
    pub fn destroy_clientid(&mut self, clientid: u64) -> Result<(), NfsStat> {
        let c = self.client(clientid)?;
        if !c.sessions.is_empty() {
            return Err(NfsStat::CLIENTID_BUSY);
        }
        let (owner, confirmed) = (c.owner.clone(), c.confirmed);
        self.remove_client(clientid);
        if confirmed {
            self.pending.push((owner, None));
        }
        Ok(())
    }

    /// Drops a client whose lease is gone (or that a new incarnation replaced): its sessions,
    /// its state, and its persisted record.
    pub fn expire_client(&mut self, clientid: u64) {
        if let Some(c) = self.clients.get(&clientid) {
            if c.confirmed {
                let owner = c.owner.clone();
                self.pending.push((owner, None));
            }
        }
        self.remove_client(clientid);
    }

    /// Removes a client record and everything hanging off it.
    pub fn remove_client(&mut self, clientid: u64) {
        let Some(c) = self.clients.remove(&clientid) else {
            return;
        };
        for sid in &c.sessions {
            self.sessions.remove(sid);
        }
        for id in &c.states {
            if let Some(st) = self.states.get(id) {
                if matches!(st.kind, super::files::StateKind::Layout) {
                    self.dropped_layouts.push((clientid, st.ino));
                }
            }
            self.drop_state(*id);
        }
        if let Some(r) = self.owners.get_mut(&c.owner) {
            if r.confirmed == Some(clientid) {
                r.confirmed = None;
            }
            if r.unconfirmed == Some(clientid) {
                r.unconfirmed = None;
            }
            if r.confirmed.is_none() && r.unconfirmed.is_none() {
                self.owners.remove(&c.owner);
            }
        }
    }
}
