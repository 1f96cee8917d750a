//! The pNFS layouts service (RFC 8881 §12; block RFC 5663, SCSI RFC 8154): everything the
//! server knows and decides about layouts outside one operation.
//!
//! ```text
//! Layouts ─ held:    (client, file) → Held { type, iomode ranges }   what LAYOUTCOMMIT checks
//!         ├ peers:   client → address it last came from                 what fencing names
//!         ├ recalls: (client, file) → deadline                          recall.rs
//!         ├ fenced / unfenced                                           fence.rs
//!         └ getting / trim_queue                                        the trim past EOF
//! ```
//! The layout stateids sit in `nfs4::state`'s one stateid space (opens, locks, delegations,
//! layouts: TEST_STATEID, FREE_STATEID and lease expiry see them all; rules in stateids.rs),
//! but only this module creates, bumps, returns or revokes them, in the same call that changes
//! the grants: `get` (get.rs), `commit` (commit.rs), `return_layouts` with a
//! [`Circumstance`], `on_close` (CLOSE and DELEGRETURN), `recall::expire` (lease expiry,
//! client gone, a revoked delegation that kept layouts past CLOSE) and
//! `recall::revoke` (a recall not answered by its deadline). `break_for` is what a change
//! to a file (truncate, last unlink) asks first. Recalls are asynchronous (recall.rs): the
//! caller gets DELAY or RECALLCONFLICT at once. The pure rules are `layout::policy`; the
//! op files in `nfs4/ops/` decode, call one function here and encode. Each function takes
//! an [`Env`] (env.rs, built by `Server::layouts_env`), never the whole server.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use layout::block::{BlockExtent, IoMode, LayoutType};
use layout::policy::Grants;

pub mod check;
pub mod commit;
pub mod enforce;
mod env;
pub mod fence;
pub mod get;
pub mod hosts;
pub mod recall;
pub mod scsi;
pub mod scsi_restart;
pub mod snapshot;
mod stateids;
pub use env::Env;

use crate::nfs4::state::{CommitClaim, IoAccess};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Fh, Stateid};
use crate::store::Ino;

/// Counters of what the layouts service did, read by metrics and logged at shutdown. The
/// layout operations themselves (how many, how long, how many failed) are counted only by
/// the dispatcher's ledger, `Server::ops` (metrics::ops).
#[derive(Debug, Default)]
pub struct PnfsMetrics {
    /// LAYOUTCOMMITs whose log force wrote the log (docs/design.md §4).
    pub commit_log_writes: AtomicU64,
    /// Data-volume flushes LAYOUTCOMMITs issued themselves.
    pub commit_data_flushes: AtomicU64,
    /// LAYOUTCOMMITs whose data flush was another caller's (flush sharing, docs/design.md §3).
    pub commit_data_flushes_joined: AtomicU64,
    /// Unwritten blocks LAYOUTCOMMIT converted.
    pub commit_converted_blocks: AtomicU64,
    pub recalls_sent: AtomicU64,
    pub fences: AtomicU64,
    /// Of `fences`, those that had no mechanism (no fence command, no embedded target, no
    /// SCSI fencer): counted, nothing done.
    pub fences_without_mechanism: AtomicU64,
    /// Fences whose mechanism ran and failed (fence.rs `fence_client`: a fence command's
    /// non-zero exit, a disconnect at the embedded target that could not be done — its
    /// shared-address refusals, `fences_shared_host`, included — a SCSI preempt that
    /// failed): not in `fences`; each is retried once a lease.
    pub fences_failed: AtomicU64,
    /// LAYOUTGETs that allocated blocks (each forced the log once).
    pub layoutget_allocations: AtomicU64,
    /// Blocks those LAYOUTGETs allocated, the speculative ones included.
    pub layoutget_allocated_blocks: AtomicU64,
    /// Unwritten blocks past EOF freed after the last layout of a file went.
    pub trimmed_blocks: AtomicU64,
}

/// A copy of [`PnfsMetrics`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PnfsCounters {
    pub commit_log_writes: u64,
    pub commit_data_flushes: u64,
    pub commit_data_flushes_joined: u64,
    pub commit_converted_blocks: u64,
    pub recalls_sent: u64,
    pub fences: u64,
    pub fences_without_mechanism: u64,
    pub fences_failed: u64,
    pub layoutget_allocations: u64,
    pub layoutget_allocated_blocks: u64,
    pub trimmed_blocks: u64,
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// The device id of the volume, which every layout, GETDEVICEINFO answer and fence command
/// names: derived from the volume UUID (`layout::block::device_id`), so it is stable across
/// restarts and valid before any LAYOUTGET.
pub fn device_id(store: &crate::store::Store) -> [u8; 16] {
    layout::block::device_id(store.volume_uuid())
}

pub fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

impl PnfsMetrics {
    pub fn snapshot(&self) -> PnfsCounters {
        PnfsCounters {
            commit_log_writes: get(&self.commit_log_writes),
            commit_data_flushes: get(&self.commit_data_flushes),
            commit_data_flushes_joined: get(&self.commit_data_flushes_joined),
            commit_converted_blocks: get(&self.commit_converted_blocks),
            recalls_sent: get(&self.recalls_sent),
            fences: get(&self.fences),
            fences_without_mechanism: get(&self.fences_without_mechanism),
            fences_failed: get(&self.fences_failed),
            layoutget_allocations: get(&self.layoutget_allocations),
            layoutget_allocated_blocks: get(&self.layoutget_allocated_blocks),
            trimmed_blocks: get(&self.trimmed_blocks),
        }
    }
}

/// What one client holds of one file.
#[derive(Debug, Clone)]
pub struct Held {
    /// The type of the client's last LAYOUTGET of the file (a client asks one type per
    /// mount; CB_LAYOUTRECALL names it, RFC 8881 §20.3).
    pub ltype: LayoutType,
    pub grants: Grants,
}

/// The layouts service of the server (`Server::layouts`).
#[derive(Debug, Default)]
pub struct Layouts {
    pub metrics: PnfsMetrics,
    /// (clientid, file) → what the client holds.
    held: Mutex<HashMap<(u64, Ino), Held>>,
    /// Recalls sent and not yet answered by a return: (clientid, file) → the deadline, after
    /// which the client is fenced and its layout revoked (recall.rs).
    recalls: Mutex<HashMap<(u64, Ino), Instant>>,
    /// The address each layout holder last came from (what the fence command is given).
    peers: Mutex<HashMap<u64, SocketAddr>>,
    /// The NVMe hosts of the clients and the embedded target's fences (hosts.rs); the
    /// target's `HostPolicy`.
    pub hosts: std::sync::Arc<hosts::HostGate>,
    /// The SCSI layout's fencing through the volume's reservations (nfs4::layouts::scsi).
    pub scsi: crate::nfs4::layouts::scsi::ScsiHook,
    /// The sweep of the previous instance's registrations after a restart.
    pub scsi_restart: crate::nfs4::layouts::scsi_restart::RestartSweep,
    /// RW LAYOUTGETs between their allocation and their grant, per file: the trim past EOF
    /// waits for them (`may_trim`).
    getting: Mutex<HashMap<Ino, u32>>,
    /// Files whose last RW grant went: their blocks past EOF may be trimmed (`trim_released`).
    trim_queue: Mutex<HashSet<Ino>>,
    /// The sweep of files with blocks past EOF after a restart's grace period was done.
    swept: AtomicBool,
    /// The SCSI designator of an external NVMe/TCP volume (its Identify: NGUID, else
    /// EUI-64), set at start; unset: the embedded target's identifiers (GETDEVICEINFO).
    pub volume_designator: std::sync::OnceLock<Vec<u8>>,
    /// Clients fenced since their last grant: dropping more of their layouts fences no more.
    fenced: Mutex<HashSet<u64>>,
    /// Clients whose fencing failed → (last attempt, the files they held layouts of): those
    /// files' blocks are neither trimmed nor truncated away until a retry succeeds (RFC 8881
    /// §12.5.5: no reuse of storage a revoked client may still write).
    unfenced: Mutex<HashMap<u64, (Instant, HashSet<Ino>)>>,
}

/// Why layouts go back (NFS-Ganesha's `fsal_layoutreturn_circumstance`): what happens to
/// the layout stateid depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Circumstance {
    /// LAYOUTRETURN from the client: the stateid is bumped, and freed once nothing is left.
    Client,
    /// The client's last CLOSE of the file, or its DELEGRETURN, with no open or delegation
    /// left to keep them (`logr_return_on_close`, RFC 8881 §18.43.3; `on_close`).
    OnClose,
    /// A recall not answered in time: the stateid is revoked (ADMIN_REVOKED), after a fence.
    Revoke,
    /// The state layer dropped the stateid (lease expiry, courtesy purge, client gone): only
    /// the grants are left to forget, after a fence.
    Forgotten,
}

/// An RW LAYOUTGET in progress on a file (see `Layouts::getting`); ends on drop.
pub struct Getting<'a> {
    layouts: &'a Layouts,
    ino: Ino,
}

impl Drop for Getting<'_> {
    fn drop(&mut self) {
        let mut g = self
            .layouts
            .getting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = g.get_mut(&self.ino) {
            *n -= 1;
            if *n == 0 {
                g.remove(&self.ino);
            }
        }
    }
}

/// The ledger.
impl Layouts {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, Ino), Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Brings the client's block set for `ino` in step with its grants (enforce.rs), under
    /// the ledger's lock `m`, so that no other change of the file's grants comes between.
    fn sync_blocks(
        &self,
        m: &HashMap<(u64, Ino), Held>,
        clientid: u64,
        ino: Ino,
        learned: Option<(&[BlockExtent], IoMode)>,
    ) {
        let g = m.get(&(clientid, ino)).map(|h| &h.grants);
        self.hosts
            .blocks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .sync(clientid, ino, g, learned);
    }

    /// LAYOUTGET handed `[start, end)` of type `ltype` in `mode` to the client.
    pub fn grant(
        &self,
        clientid: u64,
        ino: Ino,
        ltype: LayoutType,
        range: (u64, u64),
        mode: IoMode,
    ) {
        self.grant_blocks(clientid, ino, ltype, range, mode, &[]);
    }

    /// `grant`, with the extents LAYOUTGET sent: their volume blocks join the client's
    /// block set (what its NVMe hosts may touch, hosts.rs).
    pub fn grant_blocks(
        &self,
        clientid: u64,
        ino: Ino,
        ltype: LayoutType,
        (start, end): (u64, u64),
        mode: IoMode,
        extents: &[BlockExtent],
    ) {
        // A new layout after a fence: the client may have regained access (re-registered
        // its key), so losing this layout fences it again.
        self.fenced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&clientid);
        let mut m = self.lock();
        let h = m.entry((clientid, ino)).or_insert_with(|| Held {
            ltype,
            grants: Grants::default(),
        });
        h.ltype = ltype;
        h.grants.add(start, end, mode);
        self.sync_blocks(&m, clientid, ino, Some((extents, mode)));
    }

    /// A copy of what the client holds of the file (empty if nothing).
    pub fn grants_of(&self, clientid: u64, ino: Ino) -> Grants {
        self.lock()
            .get(&(clientid, ino))
            .map(|h| h.grants.clone())
            .unwrap_or_default()
    }

    /// The layout type the client holds of the file, if it holds any.
    pub fn type_of(&self, clientid: u64, ino: Ino) -> Option<LayoutType> {
        self.lock().get(&(clientid, ino)).map(|h| h.ltype)
    }

    /// What would remain after returning `[start, end)` in `mode`: whether nothing would.
    pub fn would_empty(&self, clientid: u64, ino: Ino, start: u64, end: u64, mode: IoMode) -> bool {
        let mut g = self.grants_of(clientid, ino);
        g.remove(start, end, mode);
        g.is_empty()
    }

    /// Returns `[start, end)` in `mode` of the file's grants.
    fn release(&self, clientid: u64, ino: Ino, start: u64, end: u64, mode: IoMode) {
        let mut m = self.lock();
        if let Some(h) = m.get_mut(&(clientid, ino)) {
            h.grants.remove(start, end, mode);
            if h.grants.is_empty() {
                m.remove(&(clientid, ino));
                self.end_recalls(|k| *k == (clientid, ino));
            }
            self.sync_blocks(&m, clientid, ino, None);
            self.queue_trim([ino]);
        }
    }

    /// Everything the client holds of one file.
    pub(crate) fn release_file(&self, clientid: u64, ino: Ino) {
        let gone = {
            let mut m = self.lock();
            let gone = m.remove(&(clientid, ino)).is_some();
            self.sync_blocks(&m, clientid, ino, None);
            gone
        };
        if gone {
            self.queue_trim([ino]);
        }
        self.end_recalls(|k| *k == (clientid, ino));
    }

    /// Everything the client holds (one file system).
    fn release_client(&self, clientid: u64) {
        let mut gone = Vec::new();
        {
            let mut m = self.lock();
            m.retain(|(c, i), _| {
                if *c == clientid {
                    gone.push(*i);
                }
                *c != clientid
            });
            for i in &gone {
                self.sync_blocks(&m, clientid, *i, None);
            }
        }
        self.queue_trim(gone);
        self.end_recalls(|k| k.0 == clientid);
    }

    /// Clients other than `clientid` holding grants of `ino` that conflict with `[start,
    /// end)` in `mode`.
    pub fn conflicting(
        &self,
        clientid: u64,
        ino: Ino,
        start: u64,
        end: u64,
        mode: IoMode,
    ) -> Vec<u64> {
        self.lock()
            .iter()
            .filter(|((c, i), h)| {
                *c != clientid && *i == ino && h.grants.conflicts(start, end, mode)
            })
            .map(|((c, _), _)| *c)
            .collect()
    }

    /// Every client holding something of `ino`.
    pub fn holders(&self, ino: Ino) -> Vec<u64> {
        self.lock()
            .keys()
            .filter(|(_, i)| *i == ino)
            .map(|(c, _)| *c)
            .collect()
    }

    pub fn set_peer(&self, clientid: u64, addr: SocketAddr) {
        let mut p = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        p.insert(clientid, addr);
    }

    pub fn peer_of(&self, clientid: u64) -> Option<SocketAddr> {
        let p = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        p.get(&clientid).copied()
    }

    /// Drops the grants of layouts the state layer dropped (lease expiry, client gone).
    fn forget(&self, dropped: &[(u64, Ino)]) {
        if dropped.is_empty() {
            return;
        }
        {
            let mut m = self.lock();
            for k in dropped {
                m.remove(k);
                self.sync_blocks(&m, k.0, k.1, None);
            }
        }
        self.queue_trim(dropped.iter().map(|k| k.1));
        self.end_recalls(|k| dropped.contains(k));
    }
}

/// What LAYOUTRETURN returns (RFC 8881 §18.44.1).
#[derive(Debug, Clone, Copy)]
pub enum ReturnWhat {
    /// `[start, end)` of one file in `mode`, with the layout stateid the client presents.
    File {
        ino: Ino,
        range: (u64, u64),
        mode: IoMode,
        stateid: Stateid,
    },
    /// Everything of the client (FSID and ALL: one file system is exported).
    All,
}

/// Returns layouts, keeping the stateid and the grants in step. For `Circumstance::Client`
/// and a FILE return: the stateid to give back while some of the file is still held
/// (`None` once nothing is). `Forgotten` and `Revoke` do not come here (recall.rs:
/// `expire`, `revoke`: they fence first).
pub fn return_layouts(
    srv: &Env,
    clientid: u64,
    what: ReturnWhat,
) -> Result<Option<Stateid>, NfsStat> {
    let l = &srv.layouts;
    let out = match what {
        ReturnWhat::File {
            ino,
            range: (start, end),
            mode,
            stateid,
        } => {
            let empty = l.would_empty(clientid, ino, start, end, mode);
            let new = srv.state.layout_return(clientid, ino, &stateid, empty)?;
            l.release(clientid, ino, start, end, mode);
            (!empty).then_some(new)
        }
        ReturnWhat::All => {
            srv.state.layout_return_all(clientid);
            l.release_client(clientid);
            None
        }
    };
    // The last RW layout of a file gone: its never-committed blocks past EOF are freed.
    trim_released(srv);
    Ok(out)
}

/// Return-on-close (LAYOUTGET answers `logr_return_on_close` true, RFC 8881 §18.43.3): an
/// open or the delegation of the client's on `ino` went (CLOSE, DELEGRETURN). Its layouts of
/// the file go once no open and no delegation of its keeps them, as in knfsd (the client's
/// per-file state there is held by each open and delegation) and as the Linux client
/// expects: it keeps its layouts past its last CLOSE while it holds a delegation of the file
/// — all of them under a write delegation, the READ ones under a read delegation (the RW
/// ones it returns in the CLOSE's COMPOUND) — and returns them with DELEGRETURN
/// (fs/nfs/pnfs.c `pnfs_roc`, called by `_nfs4_proc_delegreturn` too). Dropping them at
/// CLOSE had it read through layouts the server no longer recorded, which the enforcing
/// target refused (docs/delegations.md). So, with no open left:
/// - a write delegation: everything stays;
/// - a read delegation: the RW layouts go (no write without an open), the READ ones stay;
/// - no delegation: everything goes.
///
/// What a delegation kept goes at DELEGRETURN (here again), at its revocation (delegs/state.rs
/// `drop_kept_layouts`, after a fence), at lease expiry and with the client
/// (`take_dropped_layouts`).
pub fn on_close(srv: &Env, clientid: u64, ino: Ino) {
    let st = &srv.state;
    if st.client_has_open(clientid, ino) {
        return;
    }
    let mode = match st.deleg_of(clientid, ino) {
        Some(true) => return,
        Some(false) => IoMode::RW,
        None => IoMode::ANY,
    };
    let l = &srv.layouts;
    if l.would_empty(clientid, ino, 0, u64::MAX, mode) {
        for (c, lsid) in st.layouts_of_file(ino) {
            if c == clientid {
                let _ = st.layout_return(clientid, ino, &lsid, true);
            }
        }
        l.release_file(clientid, ino);
    } else if l.grants_of(clientid, ino).has_rw() {
        l.release(clientid, ino, 0, u64::MAX, mode);
    }
    // XFS trims post-EOF preallocation at close: here once no RW layout is left.
    trim_released(srv);
}

/// What is about to change a file so that the blocks layouts name may be freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Break {
    /// SETATTR to a smaller size.
    Truncate,
    /// REMOVE or RENAME dropping the file's last link.
    Unlink,
}

/// Asks the holders of `fh`'s layouts to return them before `why` (RFC 8881 §12.5.5: the
/// server recalls; knfsd's `break_layout`). Never waits for them:
/// - `Truncate` answers DELAY while any client holds a layout of the file (the caller too:
///   the Linux block client returns its own before SETATTR) or a client that could not be
///   fenced held one: no client may write into blocks the truncate frees. The recalls are
///   queued; the client retries.
/// - `Unlink` answers DELAY only while an unfenced client held a layout; otherwise it
///   recalls and lets the unlink go on: the blocks of an unlinked file stay until its last
///   CLOSE, which returns the layouts (docs/pnfs.md "Not done").
pub fn break_for(srv: &Env, fh: Fh, why: Break) -> Result<(), NfsStat> {
    if srv.layouts.kept(fh.ino) {
        // Its blocks stay while a client that could not be fenced may write them.
        return Err(NfsStat::DELAY);
    }
    let holders = srv.layouts.holders(fh.ino);
    if holders.is_empty() {
        return Ok(());
    }
    recall::recall_file(srv, fh, &holders);
    match why {
        Break::Truncate => Err(NfsStat::DELAY),
        Break::Unlink => Ok(()),
    }
}

#[cfg(test)]
impl Layouts {
    /// Whether the embedded target would let the client's hosts reach volume bytes `[off,
    /// off + len)` for reading (`write` false) or writing, as its layouts stand (enforce.rs).
    pub(crate) fn target_allows(&self, clientid: u64, write: bool, off: u64, len: u64) -> bool {
        let lba = layout::LBA_SIZE as u64;
        let want = if write {
            enforce::Want::Write
        } else {
            enforce::Want::Read
        };
        self.hosts
            .blocks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .covers(&[clientid], want, off / lba, len.div_ceil(lba))
    }
}

/// The trim of speculative blocks past EOF (store `trim_eof`, docs/pnfs.md "Preallocation").
impl Layouts {
    /// Marks an RW LAYOUTGET of `ino` as in progress until the guard drops (after its
    /// grant): taken before the allocation, so a trim either ran before the allocation or
    /// sees the guard.
    pub fn begin_get(&self, ino: Ino) -> Getting<'_> {
        let mut g = self.getting.lock().unwrap_or_else(|e| e.into_inner());
        *g.entry(ino).or_default() += 1;
        Getting { layouts: self, ino }
    }

    /// No client holds an RW layout of `ino`, none is being handed out, and no client whose
    /// fence failed held one: the unwritten blocks past EOF are in nobody's layout (READ
    /// layouts name unwritten blocks as NONE_DATA, without their volume offsets, so they
    /// hold none) and nobody can still write them.
    pub fn may_trim(&self, ino: Ino) -> bool {
        let held = self
            .lock()
            .iter()
            .any(|((_, i), h)| *i == ino && h.grants.has_rw());
        let getting = self
            .getting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&ino);
        !held && !getting && !self.kept(ino)
    }

    /// Queues files for `trim_released` to look at.
    pub fn queue_trim(&self, inos: impl IntoIterator<Item = Ino>) {
        let mut q = self.trim_queue.lock().unwrap_or_else(|e| e.into_inner());
        q.extend(inos);
    }

    fn take_trims(&self) -> Vec<Ino> {
        let mut q = self.trim_queue.lock().unwrap_or_else(|e| e.into_inner());
        q.drain().collect()
    }
}

/// Trims the files whose RW layouts went since the last call (LAYOUTRETURN, CLOSE, expiry,
/// fencing), and once after a restart's layout reclaim window every file with blocks past EOF
/// (a crash lost their trim; until then a reclaiming LAYOUTCOMMIT may still need them, RFC
/// 8881 §12.7.4). Errors are logged: a trim that fails is retried by the next return or
/// restart, and nothing depends on it but free space.
pub fn trim_released(srv: &Env) {
    // While a previous instance's layout may still commit (`layouts_reclaimable`, which
    // covers grace), nothing past EOF is trimmed: the queue waits for the next call after it.
    if srv.state.layouts_reclaimable() {
        return;
    }
    let mut inos = srv.layouts.take_trims();
    if !srv.layouts.swept.swap(true, Ordering::Relaxed) {
        inos.extend(srv.store.files_past_eof());
    }
    for ino in inos {
        match srv.store.trim_eof(ino, &|| srv.layouts.may_trim(ino)) {
            Ok(n) => add(&srv.layouts.metrics.trimmed_blocks, n),
            Err(e) => tracing::warn!(ino = ino.0, %e, "trim past EOF failed"),
        }
    }
}

/// The stateid and grant check of a LAYOUTCOMMIT (RFC 8881 §12.7.4, §18.42.3; docs/pnfs.md
/// "After a restart"): `None` = a reclaim, which converts only the file's own unwritten
/// blocks of `[start, end)`; else the client's RW grants of this instance to check the
/// extents against. A bad layout stateid of this instance is BADLAYOUT (§18.42.4, as knfsd).
pub fn commit_grants(
    srv: &Env,
    clientid: u64,
    ino: Ino,
    reclaim: bool,
    stateid: &Stateid,
    (start, end): (u64, u64),
) -> Result<Option<Grants>, NfsStat> {
    match srv.state.commit_claim(clientid, reclaim, stateid)? {
        CommitClaim::Reclaim { explicit } => {
            // A layout of this instance over the range (another client's, granted after
            // grace): its holder may be writing those blocks; they are not ours to convert.
            if !srv
                .layouts
                .conflicting(clientid, ino, start, end, IoMode::RW)
                .is_empty()
            {
                return Err(if explicit {
                    NfsStat::RECLAIM_BAD
                } else {
                    NfsStat::BADLAYOUT
                });
            }
            tracing::info!(
                ino = ino.0,
                start,
                end,
                explicit,
                "LAYOUTCOMMIT of a layout of the previous instance taken as a reclaim"
            );
            Ok(None)
        }
        CommitClaim::Current => {
            srv.state
                .check_layout(clientid, ino, stateid)
                .map_err(|e| match e {
                    NfsStat::BAD_STATEID => NfsStat::BADLAYOUT,
                    e => e,
                })?;
            Ok(Some(srv.layouts.grants_of(clientid, ino)))
        }
    }
}

/// The stateid a LAYOUTGET presents: the client's layout stateid of the file, or an open,
/// lock or delegation stateid giving `access`. One of the previous instance is BAD_STATEID,
/// not STALE_STATEID: the Linux client answers BAD_STATEID by dropping its layout stateid
/// (or recovering its open) and asking again, but STALE_STATEID by a lease check and the
/// same LAYOUTGET again (fs/nfs/nfs4proc.c `nfs4_layoutget_handle_exception`).
pub fn check_get_stateid(
    srv: &Env,
    clientid: u64,
    ino: Ino,
    given: &Stateid,
    access: IoAccess,
) -> Result<(), NfsStat> {
    let st = &srv.state;
    st.check_layout(clientid, ino, given)
        .or_else(|_| st.check_io(Some(clientid), given, ino, access))
        .map_err(|e| match e {
            NfsStat::STALE_STATEID => NfsStat::BAD_STATEID,
            e => e,
        })
}

#[cfg(test)]
mod tests;
