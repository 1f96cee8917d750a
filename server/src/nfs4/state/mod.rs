//! Client, session, open, lock and layout state (RFC 8881 §2.10, §8–9, §12): the slot tables
//! and reply cache, leases, the grace period. Knows nothing of XDR beyond the shared types,
//! and nothing of the store beyond the client records it persists (through `ClientRecords`),
//! so the whole state machine is testable without a volume.
//!
//! ```text
//! Inner ─ clients:  clientid → Client ─ sessions (ids), states (stateid ids)
//!       ├ sessions: sessionid → Session (slot table + reply cache, backchannel)
//!       ├ states:   stateid id → State { client, ino, seqid, Open | Lock | Layout }
//!       └ files:    ino → FileState { opens, lock ranges, layouts }
//! ```
//! Layout state hangs off both a client and a file, like opens and locks, so that lease
//! expiry, CLOSE/return-on-close and recalls find it from either side.
//!
//! Files: client.rs (client records, EXCHANGE_ID, CREATE_SESSION), session.rs and
//! sessions.rs (slot tables, SEQUENCE, the backchannel), files.rs (opens and the stateid
//! checks every operation shares), lock.rs and locks.rs (byte-range locks), grace.rs (the
//! grace period and the lease clock), snapshot.rs (the admin views), stateid.rs (stateid
//! layout and seqids). Two kinds of the one stateid table have their rules in their
//! services' rooms, as `impl Inner` and `impl StateManager` blocks on this lock: layout
//! stateids in nfs4/layouts/stateids.rs, delegations in nfs4/delegs/state.rs. What `Inner`
//! keeps for the delegations (`DelegBook`) is in nfs4/delegs/book.rs, which imports nothing
//! of this module (tools/deps.py ranks it below).
//!
//! Wiring outside this module: the transport calls `conn_closed` when a connection goes
//! (backchannel loss → CB_PATH_DOWN_SESSION); the store gets `open_probe()` through
//! `Store::set_open_probe` so that REMOVE keeps open files; the server calls `tick` once a
//! second; the layout engine drains `take_dropped_layouts` and sends recalls through
//! `cb_begin`/`cb_done`. The state lock is never held across a store call (record writes go
//! out after it is released), so the store may call the probe under its own lock.

mod client;
pub(crate) mod files;
mod grace;
mod lock;
mod locks;
mod session;
mod sessions;
mod snapshot;
pub(crate) mod stateid;
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
pub(crate) mod tests_files;
#[cfg(test)]
mod tests_limits;

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::Ino;

pub use crate::nfs4::delegs::book::{DelegCounters, NoDeleg, Recall, WriteHolder};
pub use client::{
    exchgid, seq4, BindDir, ClientLimits, CreateSessionReq, CreateSessionRes, ExchangeIdReq,
    ExchangeIdRes, Principal, SequenceOutcome, SequenceReq, CS_FLAG_CONN_BACK_CHAN,
};
pub use files::{OpenReq, ShareAccess};
pub use grace::CommitClaim;
pub use lock::{range_of, LockRange};
pub use locks::{Denied, LockError, LockReq, Locker};
pub use session::{CbPath, ChannelAttrs, MAX_IO, MAX_SLOTS};
pub use sessions::{CbSlot, ProbeTarget};
pub use snapshot::{
    ClientInfo, ClientStateUsage, GraceInfo, LeaseState, ReclaimState, SessionInfo, StateCounts,
};
pub use stateid::is_special;

/// The session and slot of a COMPOUND, as SEQUENCE found them.
#[derive(Debug, Clone)]
pub struct SessionSlotRef {
    pub sessionid: [u8; 16],
    pub clientid: u64,
    pub slot: u32,
    pub seqid: u32,
    /// Whether the client asked for the reply to be cached (`sa_cachethis`).
    pub cachethis: bool,
    /// Channel limits negotiated by CREATE_SESSION, enforced once by the dispatcher.
    pub max_ops: u32,
    pub max_request_size: u32,
    pub max_response_size: u32,
    pub max_response_size_cached: u32,
}

/// What an I/O stateid must permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoAccess {
    Read,
    Write,
}

/// Seconds on a monotonic clock. A trait so that lease and grace tests set the time.
pub trait Clock: Send + Sync {
    fn now(&self) -> u64;
}

/// The real clock: seconds since the state manager started.
pub struct MonotonicClock(std::time::Instant);

impl Clock for MonotonicClock {
    fn now(&self) -> u64 {
        self.0.elapsed().as_secs()
    }
}

/// Where client records live across restarts (RFC 8881 §8.4.3): the store in production.
/// `put(key, None)` removes. Durable before return.
pub trait ClientRecords: Send + Sync {
    fn put(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), NfsStat>;
    fn list(&self) -> Vec<(Vec<u8>, Vec<u8>)>;
}

impl ClientRecords for crate::store::Store {
    fn put(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), NfsStat> {
        self.put_client_record(key, value).map_err(NfsStat::from)
    }
    fn list(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.client_records()
    }
}

/// How long an expired client keeps its state while nobody conflicts with it (knfsd uses
/// the same 24 hours for its courtesy clients).
pub const COURTESY_SECONDS: u64 = 24 * 3600;

/// Settings of the state manager.
#[derive(Debug, Clone, Copy)]
pub struct StateConfig {
    pub lease_seconds: u32,
    pub grace_seconds: u32,
    /// Changes at every boot: goes into clientids, sessionids and stateids.
    pub boot_verifier: u64,
}

/// All NFSv4 state of the server.
pub struct StateManager {
    inner: Arc<Mutex<Inner>>,
    records: Arc<dyn ClientRecords>,
    clock: Arc<dyn Clock>,
    /// Write delegations held now (`DelegBook::write_held`, the same atomic): while it is
    /// zero, `write_deleg_holder` answers without the lock. See there for why that is safe.
    pub(crate) write_delegs: Arc<AtomicUsize>,
    /// Benchmarks only: `write_deleg_holder` takes the lock whatever the count says (the
    /// check as it was before the count), for `getattr_rate_threads` to compare against.
    #[cfg(test)]
    pub(crate) lock_every_getattr: std::sync::atomic::AtomicBool,
}

/// A persisted-record change decided under the lock and written after it is dropped (the
/// store forces its log; no state lock is held across that).
type RecordOp = (Vec<u8>, Option<Vec<u8>>);

/// The state under the lock. The layout and delegation rooms add `impl Inner` blocks
/// (nfs4/layouts/stateids.rs, nfs4/delegs/state.rs), so what they use is `pub(crate)`: not
/// `pub(in crate::nfs4)`, which tools/deps.py would read as an import of nfs4/mod.rs.
pub(crate) struct Inner {
    pub(crate) cfg: StateConfig,
    /// Bounds on clients, sessions and reply-cache memory (client.rs).
    pub(crate) limits: client::ClientLimits,
    pub(crate) epoch: u32,
    next_id: u64,
    clients: HashMap<u64, client::Client>,
    /// `co_ownerid` → its confirmed and unconfirmed client records.
    owners: HashMap<Vec<u8>, client::OwnerRecs>,
    sessions: HashMap<[u8; 16], session::Session>,
    pub(crate) states: HashMap<u64, files::State>,
    pub(crate) files: HashMap<Ino, files::FileState>,
    grace: grace::Grace,
    /// Record changes to persist once the lock is released.
    pending: Vec<RecordOp>,
    /// Layouts of clients that went away or expired, for the layout engine.
    pub(crate) dropped_layouts: Vec<(u64, Ino)>,
    /// Recalls pending and counters of delegations (nfs4/delegs/book.rs).
    pub(crate) delegs: crate::nfs4::delegs::book::DelegBook,
}

impl StateManager {
    /// Reads the client records the store kept (for reclaim during grace) and starts the
    /// grace period if there were any.
    pub fn new(cfg: StateConfig, store: std::sync::Arc<crate::store::Store>) -> StateManager {
        let clock = Arc::new(MonotonicClock(std::time::Instant::now()));
        StateManager::with_parts(cfg, store, clock)
    }

    /// The state manager over any record keeper and clock (tests use in-memory ones).
    pub fn with_parts(
        cfg: StateConfig,
        records: Arc<dyn ClientRecords>,
        clock: Arc<dyn Clock>,
    ) -> StateManager {
        let previous = records.list();
        let now = clock.now();
        let grace = grace::Grace::start(previous, now, cfg.grace_seconds, cfg.lease_seconds);
        if !grace.ended {
            tracing::info!(
                previous = grace.previous.len(),
                waited_for = grace.waited.len(),
                seconds = cfg.grace_seconds,
                "grace period started"
            );
        }
        let inner = Inner {
            cfg,
            limits: client::ClientLimits::default(),
            // The low and high halves mixed, so that two boots differ in the 4 bytes kept.
            epoch: (cfg.boot_verifier ^ (cfg.boot_verifier >> 32)) as u32,
            next_id: 1,
            clients: HashMap::new(),
            owners: HashMap::new(),
            sessions: HashMap::new(),
            states: HashMap::new(),
            files: HashMap::new(),
            grace,
            pending: Vec::new(),
            dropped_layouts: Vec::new(),
            delegs: Default::default(),
        };
        StateManager {
            write_delegs: inner.delegs.write_held.clone(),
            inner: Arc::new(Mutex::new(inner)),
            records,
            clock,
            #[cfg(test)]
            lock_every_getattr: Default::default(),
        }
    }

    /// Replaces the bounds on client state (configuration `max_clients`, …); sessions
    /// that exist keep what they were given.
    pub fn set_limits(&self, limits: ClientLimits) {
        self.lock().limits = limits;
    }

    /// Runs `f` on the state at the current time, then persists the record changes it made.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Inner, u64) -> T) -> T {
        let now = self.clock.now();
        let (out, pending) = {
            let mut g = self.lock();
            let out = f(&mut g, now);
            // Every test's every state change is checked against a full walk (debug test
            // builds only: the benchmarks run in release).
            #[cfg(all(test, debug_assertions))]
            g.check_deleg_counts();
            (out, std::mem::take(&mut g.pending))
        };
        for (k, v) in pending {
            // A record that fails to persist only costs that client its reclaim after a
            // restart (it then gets RECLAIM_BAD and starts afresh): never fail the op for it.
            let _ = self.records.put(&k, v.as_deref());
        }
        out
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves state that is still consistent enough to
        // serve (each change is small); keep serving rather than failing every request.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called by the dispatcher when a COMPOUND that began with SEQUENCE is done: keeps the
    /// encoded reply in the slot's reply cache (RFC 8881 §2.10.6.1) and frees the slot.
    pub fn slot_done(&self, slot: &SessionSlotRef, reply: &[u8]) {
        let mut g = self.lock();
        if let Some(s) = g.sessions.get_mut(&slot.sessionid) {
            s.slots.done(slot.slot, slot.seqid, reply);
        }
    }

    /// Called about once a second by the server: expires leases (courtesy clients),
    /// ends the grace period, times out recalls.
    pub fn tick(&self) {
        self.with(|i, now| i.tick(now))
    }

    /// RFC 8881 §8.2: check a stateid given to READ, WRITE or SETATTR(size) for `ino`.
    /// Special stateids (anonymous, bypass, current) are resolved by the caller first.
    pub fn check_io(
        &self,
        clientid: Option<u64>,
        stateid: &Stateid,
        ino: Ino,
        access: IoAccess,
    ) -> Result<(), NfsStat> {
        self.with(|i, _| i.check_io(clientid, stateid, ino, access))
    }

    /// In the grace period after a restart (RFC 8881 §8.4.2): non-reclaim OPENs and LOCKs,
    /// and REMOVE/RENAME/SETATTR(size) that could conflict, answer NFS4ERR_GRACE.
    pub fn in_grace(&self) -> bool {
        self.with(|i, now| i.grace.active(now))
    }

    /// The lease time in seconds (the `lease_time` attribute).
    pub fn lease_seconds(&self) -> u32 {
        self.lock().cfg.lease_seconds
    }

    // ---- sessions and clients (client.rs) ----

    pub fn exchange_id(&self, req: &ExchangeIdReq) -> Result<ExchangeIdRes, NfsStat> {
        self.with(|i, now| i.exchange_id(req, now))
    }

    pub fn create_session(&self, req: CreateSessionReq) -> Result<CreateSessionRes, NfsStat> {
        self.with(|i, now| i.create_session(req, now))
    }

    pub fn sequence(&self, req: &SequenceReq) -> Result<SequenceOutcome, NfsStat> {
        self.with(|i, now| i.sequence(req, now))
    }

    /// `own`: the COMPOUND runs in the session it destroys.
    pub fn destroy_session(
        &self,
        sessionid: &[u8; 16],
        own: bool,
        conn: u64,
    ) -> Result<(), NfsStat> {
        self.with(|i, _| i.destroy_session(sessionid, own, conn))
    }

    /// Called by the transport when a connection closes.
    pub fn conn_closed(&self, conn: u64) {
        self.with(|i, _| i.conn_closed(conn))
    }

    /// Whether a session has connection `conn` bound (the transport never closes those for
    /// being idle; rpc/limits.rs).
    pub fn conn_in_session(&self, conn: u64) -> bool {
        self.with(|i, _| i.sessions.values().any(|s| s.conns.contains(&conn)))
    }

    pub fn destroy_clientid(&self, clientid: u64) -> Result<(), NfsStat> {
        self.with(|i, _| i.destroy_clientid(clientid))
    }

    pub fn bind_conn_to_session(
        &self,
        sessionid: &[u8; 16],
        dir: BindDir,
        conn: u64,
        backchannel: Option<Arc<dyn crate::rpc::Backchannel>>,
    ) -> Result<BindDir, NfsStat> {
        self.with(|i, _| i.bind_conn(sessionid, dir, conn, backchannel))
    }

    pub fn backchannel_ctl(&self, sessionid: &[u8; 16], cb_program: u32) -> Result<(), NfsStat> {
        self.with(|i, _| i.backchannel_ctl(sessionid, cb_program))
    }

    /// The credential and minor version callbacks of the session use (CREATE_SESSION /
    /// BACKCHANNEL_CTL; a client answers only CB_COMPOUNDs of its own minor version).
    pub fn set_cb_cred(&self, sessionid: &[u8; 16], cred: crate::rpc::CbCred, minor: u32) {
        self.with(|i, _| i.set_cb_cred(sessionid, cred, minor))
    }

    pub fn reclaim_complete(&self, clientid: u64, one_fs: bool) -> Result<(), NfsStat> {
        self.with(|i, now| i.reclaim_complete(clientid, one_fs, now))
    }

    /// The backchannel of one of the client's sessions, with that session's id and callback
    /// program, for CB_COMPOUNDs (recalls).
    pub fn backchannel_of(
        &self,
        clientid: u64,
    ) -> Option<([u8; 16], u32, Arc<dyn crate::rpc::Backchannel>)> {
        let g = self.lock();
        let c = g.clients.get(&clientid)?;
        c.sessions.iter().find_map(|sid| {
            let s = g.sessions.get(sid)?;
            let (_, bc) = s.back_conn.as_ref()?;
            Some((s.id, s.cb_program, bc.clone()))
        })
    }

    /// Takes a callback slot (CB_SEQUENCE fields and the connection) to recall from a
    /// client; give it back with `cb_done`.
    pub fn cb_begin(&self, clientid: u64) -> Result<CbSlot, NfsStat> {
        self.with(|i, _| i.cb_begin(clientid))
    }

    pub fn cb_done(&self, slot: &CbSlot, answered: bool) {
        self.with(|i, _| i.cb_done(slot, answered))
    }

    /// See `Inner::probe_start` (sessions.rs).
    pub fn probe_start(&self, sessionid: &[u8; 16]) -> Option<(u64, u64)> {
        self.with(|i, _| i.probe_start(sessionid))
    }

    pub fn probe_target(&self, sessionid: &[u8; 16], generation: u64) -> Option<ProbeTarget> {
        self.with(|i, _| i.probe_target(sessionid, generation))
    }

    pub fn probe_done(&self, sessionid: &[u8; 16], generation: u64, ok: bool) {
        self.with(|i, _| i.probe_done(sessionid, generation, ok))
    }

    /// Whether the client has a backchannel that works (or is being probed): no
    /// delegation otherwise.
    pub fn backchannel_works(&self, clientid: u64) -> bool {
        self.with(|i, _| i.backchannel_works(clientid))
    }

    // ---- opens, locks, stateids (files.rs) ----

    /// RFC 8881 §8.4.2/§18.16.3/§18.51.3 grace rules for an OPEN before it touches
    /// anything (LOCK checks them itself).
    pub fn check_open_reclaim(&self, clientid: u64, reclaim: bool) -> Result<(), NfsStat> {
        self.with(|i, now| {
            let checked = i.check_reclaim(clientid, reclaim, true, now);
            if reclaim {
                // Refused or not, a previous client reclaiming is still in its recovery.
                i.note_reclaim_by(clientid, now);
            }
            checked
        })
    }

    pub fn open(&self, req: &OpenReq<'_>) -> Result<Stateid, NfsStat> {
        self.with(|i, now| i.open(req, now))
    }

    pub fn open_downgrade(
        &self,
        clientid: u64,
        stateid: &Stateid,
        ino: Ino,
        share: ShareAccess,
    ) -> Result<Stateid, NfsStat> {
        self.with(|i, _| i.open_downgrade(clientid, stateid, ino, share))
    }

    /// CLOSE: `Ok(true)` when this was the file's last open (an unlinked file can go).
    pub fn close(&self, clientid: u64, stateid: &Stateid, ino: Ino) -> Result<bool, NfsStat> {
        self.with(|i, _| i.close(clientid, stateid, ino))
    }

    pub fn lock_range(&self, req: &LockReq<'_>) -> Result<Stateid, LockError> {
        self.with(|i, now| i.lock(req, now))
    }

    #[allow(clippy::too_many_arguments)]
    pub fn lockt(
        &self,
        clientid: u64,
        owner: &[u8],
        ino: Ino,
        write: bool,
        start: u64,
        end: u64,
    ) -> Result<(), LockError> {
        self.with(|i, _| i.lockt(clientid, owner, ino, write, start, end))
    }

    pub fn locku(
        &self,
        clientid: u64,
        stateid: &Stateid,
        ino: Ino,
        start: u64,
        end: u64,
    ) -> Result<Stateid, NfsStat> {
        self.with(|i, _| i.locku(clientid, stateid, ino, start, end))
    }

    pub fn test_stateid(&self, clientid: u64, stateid: &Stateid) -> NfsStat {
        self.with(|i, _| i.test_stateid(clientid, stateid))
    }

    pub fn free_stateid(&self, clientid: u64, stateid: &Stateid) -> Result<(), NfsStat> {
        self.with(|i, _| i.free_stateid(clientid, stateid))
    }

    /// Whether any client has the file open (REMOVE keeps an open file's inode).
    pub fn file_is_open(&self, ino: Ino) -> bool {
        file_is_open(&self.inner, ino)
    }

    /// The same question as a closure the store can keep (`Store::set_open_probe`): the
    /// store asks it under its own lock, and the state never calls the store while holding
    /// the state lock, so the two locks are always taken store first.
    pub fn open_probe(&self) -> impl Fn(Ino) -> bool + Send + Sync + 'static {
        let inner = self.inner.clone();
        move |ino| file_is_open(&inner, ino)
    }

    // ---- the clients' identities (for the layouts service) ----
    // (The layout and delegation calls: nfs4/layouts/stateids.rs, nfs4/delegs/state.rs.)

    /// The owner and verifier of a client this instance knows (courtesy clients included):
    /// what the target's host map and fences name (nfs4/layouts/hosts.rs).
    pub fn client_identity(&self, clientid: u64) -> Option<(Vec<u8>, [u8; 8])> {
        let g = self.lock();
        g.clients
            .get(&clientid)
            .map(|c| (c.owner.clone(), c.verifier))
    }

    /// The owners and verifiers of every client this instance knows.
    pub fn client_identities(&self) -> Vec<(Vec<u8>, [u8; 8])> {
        let g = self.lock();
        g.clients
            .values()
            .map(|c| (c.owner.clone(), c.verifier))
            .collect()
    }
}

fn file_is_open(inner: &Mutex<Inner>, ino: Ino) -> bool {
    inner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .files
        .get(&ino)
        .is_some_and(|f| !f.opens.is_empty())
}
