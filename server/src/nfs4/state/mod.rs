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
//! Wiring outside this module: the transport calls `conn_closed` when a connection goes
//! (backchannel loss → CB_PATH_DOWN_SESSION); the store gets `open_probe()` through
//! `Store::set_open_probe` so that REMOVE keeps open files; the server calls `tick` once a
//! second; the layout engine drains `take_dropped_layouts` and sends recalls through
//! `cb_begin`/`cb_done`. The state lock is never held across a store call (record writes go
//! out after it is released), so the store may call the probe under its own lock.

mod client;
mod delegs;
mod files;
mod grace;
mod layouts;
mod lock;
mod locks;
mod session;
mod sessions;
mod snapshot;
mod stateid;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_delegs;
#[cfg(test)]
mod tests_files;
#[cfg(test)]
mod tests_limits;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::Ino;

pub use client::{
    exchgid, seq4, BindDir, ClientLimits, CreateSessionReq, CreateSessionRes, ExchangeIdReq,
    ExchangeIdRes, Principal, SequenceOutcome, SequenceReq, CS_FLAG_CONN_BACK_CHAN,
};
pub use delegs::{DelegCounters, NoDeleg, Recall, WriteHolder};
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
    write_delegs: Arc<AtomicUsize>,
    /// Benchmarks only: `write_deleg_holder` takes the lock whatever the count says (the
    /// check as it was before the count), for `getattr_rate_threads` to compare against.
    #[cfg(test)]
    pub(crate) lock_every_getattr: std::sync::atomic::AtomicBool,
}

/// A persisted-record change decided under the lock and written after it is dropped (the
/// store forces its log; no state lock is held across that).
type RecordOp = (Vec<u8>, Option<Vec<u8>>);

pub(crate) struct Inner {
    cfg: StateConfig,
    /// Bounds on clients, sessions and reply-cache memory (client.rs).
    limits: client::ClientLimits,
    epoch: u32,
    next_id: u64,
    clients: HashMap<u64, client::Client>,
    /// `co_ownerid` → its confirmed and unconfirmed client records.
    owners: HashMap<Vec<u8>, client::OwnerRecs>,
    sessions: HashMap<[u8; 16], session::Session>,
    states: HashMap<u64, files::State>,
    files: HashMap<Ino, files::FileState>,
    grace: grace::Grace,
    /// Record changes to persist once the lock is released.
    pending: Vec<RecordOp>,
    /// Layouts of clients that went away or expired, for the layout engine.
    dropped_layouts: Vec<(u64, Ino)>,
    /// Recalls pending and counters of delegations (delegs.rs).
    delegs: delegs::DelegBook,
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
    fn with<T>(&self, f: impl FnOnce(&mut Inner, u64) -> T) -> T {
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

    fn lock(&self) -> MutexGuard<'_, Inner> {
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

    // ---- delegations (delegs.rs) ----

    /// DELEGRETURN of the delegation of `ino` the stateid names.
    pub fn delegreturn(&self, clientid: u64, stateid: &Stateid, ino: Ino) -> Result<(), NfsStat> {
        self.with(|i, _| i.delegreturn(clientid, stateid, ino))
    }

    /// A read (`write == false`) or write delegation of `ino` if none conflicts.
    pub fn grant_deleg(&self, clientid: u64, ino: Ino, write: bool) -> Result<Stateid, NoDeleg> {
        self.with(|i, _| i.grant_deleg(clientid, ino, write))
    }

    /// See `Inner::reclaim_deleg` (delegs.rs): the stateid and whether it is recalled.
    pub fn reclaim_deleg(
        &self,
        clientid: u64,
        ino: Ino,
        write: bool,
        give_back: bool,
    ) -> (Stateid, bool) {
        self.with(|i, now| i.reclaim_deleg(clientid, ino, write, give_back, now))
    }

    /// Delegations of other clients in the way of an access to `ino` (see delegs.rs); the
    /// caller sends CB_RECALL for those with `send` and answers DELAY while any is left.
    pub fn deleg_conflicts(&self, clientid: u64, ino: Ino, write: bool) -> Vec<Recall> {
        self.with(|i, now| i.deleg_conflicts(clientid, ino, write, now))
    }

    /// See `Inner::write_deleg_holder` (delegs.rs): the write delegation of another client
    /// that a GETATTR of size or change by `clientid` must ask CB_GETATTR of.
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

    // ---- layouts (for the layout operations) ----

    /// LAYOUTGET's stateid rules (RFC 8881 §12.5.2–3): the first LAYOUTGET presents an open,
    /// lock or delegation stateid and gets a new layout stateid with seqid 1; later ones
    /// present the layout stateid. Every call bumps the seqid.
    pub fn layout_stateid(
        &self,
        clientid: u64,
        ino: Ino,
        given: &Stateid,
    ) -> Result<Stateid, NfsStat> {
        self.with(|i, _| i.layout_stateid(clientid, ino, given))
    }

    /// LAYOUTRETURN(FILE): bumps the layout stateid; `all_returned` drops it.
    pub fn layout_return(
        &self,
        clientid: u64,
        ino: Ino,
        given: &Stateid,
        all_returned: bool,
    ) -> Result<Stateid, NfsStat> {
        self.with(|i, _| i.layout_return(clientid, ino, given, all_returned))
    }

    /// Checks a layout stateid (LAYOUTCOMMIT answers BADLAYOUT for the error).
    pub fn check_layout(&self, clientid: u64, ino: Ino, given: &Stateid) -> Result<(), NfsStat> {
        self.with(|i, _| i.check_layout(clientid, ino, given))
    }

    /// LAYOUTRETURN(FSID/ALL): drops every layout stateid of the client.
    pub fn layout_return_all(&self, clientid: u64) -> Vec<Ino> {
        self.with(|i, _| i.layout_return_all(clientid))
    }

    /// Whether the client still has an open of the file (return-on-close).
    pub fn client_has_open(&self, clientid: u64, ino: Ino) -> bool {
        self.with(|i, _| i.client_has_open(clientid, ino))
    }

    /// Clients holding layouts of a file (for CB_LAYOUTRECALL), with their layout stateids.
    pub fn layouts_of_file(&self, ino: Ino) -> Vec<(u64, Stateid)> {
        self.with(|i, _| i.layouts_of_file(ino))
    }

    /// Layouts whose client went away since the last call (lease expiry, a courtesy client
    /// in someone's way, a client replaced by its new incarnation): `(clientid, file)`.
    /// The layout engine drains this from its tick (layouts are freed at lease expiry).
    pub fn take_dropped_layouts(&self) -> Vec<(u64, Ino)> {
        std::mem::take(&mut self.lock().dropped_layouts)
    }

    /// Revokes a stateid (a fenced client's layout): reported by SEQUENCE status flags and
    /// TEST_STATEID until the client frees it.
    pub fn revoke(&self, stateid: &Stateid) {
        self.with(|i, _| i.revoke(stateid))
    }

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
