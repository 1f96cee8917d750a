//! The server side of the pNFS block layout (issue 4) that outlives one operation: what each
//! client was granted of each file (so that LAYOUTCOMMIT can check "inside what this client
//! was given", RFC 5663 §2.3.2), the device id, and the counters of issue 4 item 7.
//!
//! The rules themselves are pure functions in `layout::policy`; the stateids are in
//! `nfs4::state` (layouts.rs); the op files in `nfs4/ops/` glue them together.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use layout::block::IoMode;
use layout::policy::Grants;

use crate::nfs4::state::{CommitClaim, IoAccess};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Fh, Stateid};
use crate::store::Ino;

/// Counters of the layout operations (issue 4 item 7), read by metrics and logged at
/// shutdown. Times are nanoseconds spent inside the operation handlers.
#[derive(Debug, Default)]
pub struct PnfsMetrics {
    pub layoutgets: AtomicU64,
    pub layoutget_ns: AtomicU64,
    /// LAYOUTGETs answered with an error.
    pub layoutget_errors: AtomicU64,
    pub layoutcommits: AtomicU64,
    pub layoutcommit_ns: AtomicU64,
    pub layoutcommit_errors: AtomicU64,
    /// LAYOUTCOMMITs whose log force wrote the log (design.md §4).
    pub commit_log_writes: AtomicU64,
    /// Data-volume flushes LAYOUTCOMMITs issued themselves.
    pub commit_data_flushes: AtomicU64,
    /// LAYOUTCOMMITs whose data flush was another caller's (flush sharing, design.md §3).
    pub commit_data_flushes_joined: AtomicU64,
    /// Unwritten blocks LAYOUTCOMMIT converted.
    pub commit_converted_blocks: AtomicU64,
    pub layoutreturns: AtomicU64,
    pub recalls_sent: AtomicU64,
    pub fences: AtomicU64,
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
    pub layoutgets: u64,
    pub layoutget_ns: u64,
    pub layoutget_errors: u64,
    pub layoutcommits: u64,
    pub layoutcommit_ns: u64,
    pub layoutcommit_errors: u64,
    pub commit_log_writes: u64,
    pub commit_data_flushes: u64,
    pub commit_data_flushes_joined: u64,
    pub commit_converted_blocks: u64,
    pub layoutreturns: u64,
    pub recalls_sent: u64,
    pub fences: u64,
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

/// Adds the time since `t0` to `ns`.
pub fn add_elapsed(ns: &AtomicU64, t0: Instant) {
    add(ns, t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64);
}

impl PnfsMetrics {
    pub fn snapshot(&self) -> PnfsCounters {
        PnfsCounters {
            layoutgets: get(&self.layoutgets),
            layoutget_ns: get(&self.layoutget_ns),
            layoutget_errors: get(&self.layoutget_errors),
            layoutcommits: get(&self.layoutcommits),
            layoutcommit_ns: get(&self.layoutcommit_ns),
            layoutcommit_errors: get(&self.layoutcommit_errors),
            commit_log_writes: get(&self.commit_log_writes),
            commit_data_flushes: get(&self.commit_data_flushes),
            commit_data_flushes_joined: get(&self.commit_data_flushes_joined),
            commit_converted_blocks: get(&self.commit_converted_blocks),
            layoutreturns: get(&self.layoutreturns),
            recalls_sent: get(&self.recalls_sent),
            fences: get(&self.fences),
            layoutget_allocations: get(&self.layoutget_allocations),
            layoutget_allocated_blocks: get(&self.layoutget_allocated_blocks),
            trimmed_blocks: get(&self.trimmed_blocks),
        }
    }
}

/// Layout engine state of the server (`Server::pnfs`).
#[derive(Debug, Default)]
pub struct Pnfs {
    pub metrics: PnfsMetrics,
    /// (clientid, file) → the byte ranges the client holds, with their iomode.
    grants: Mutex<HashMap<(u64, Ino), Grants>>,
    /// Recalls sent and not yet answered by a return: (clientid, file) → when.
    recalls: Mutex<HashMap<(u64, Ino), Instant>>,
    /// Pending recalls whose CB_LAYOUTRECALL could not be sent yet (backchannel down or busy).
    unsent: Mutex<HashMap<(u64, Ino), Fh>>,
    /// The address each layout holder last came from (what the fence command is given).
    peers: Mutex<HashMap<u64, SocketAddr>>,
    /// The SCSI layout's fencing through the volume's reservations (nfs4::scsi).
    pub scsi: crate::nfs4::scsi::ScsiHook,
    /// The sweep of the previous instance's registrations after a restart.
    pub scsi_restart: crate::nfs4::scsi_restart::RestartSweep,
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

/// An RW LAYOUTGET in progress on a file (see `Pnfs::getting`); ends on drop.
pub struct Getting<'a> {
    pnfs: &'a Pnfs,
    ino: Ino,
}

impl Drop for Getting<'_> {
    fn drop(&mut self) {
        let mut g = self.pnfs.getting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = g.get_mut(&self.ino) {
            *n -= 1;
            if *n == 0 {
                g.remove(&self.ino);
            }
        }
    }
}

impl Pnfs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, Ino), Grants>> {
        self.grants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// LAYOUTGET handed `[start, end)` in `mode` to the client.
    pub fn grant(&self, clientid: u64, ino: Ino, start: u64, end: u64, mode: IoMode) {
        // A new layout after a fence: the client may have regained access (re-registered
        // its key), so losing this layout fences it again.
        self.fenced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&clientid);
        self.lock()
            .entry((clientid, ino))
            .or_default()
            .add(start, end, mode);
    }

    /// A copy of what the client holds of the file (empty if nothing).
    pub fn grants_of(&self, clientid: u64, ino: Ino) -> Grants {
        self.lock()
            .get(&(clientid, ino))
            .cloned()
            .unwrap_or_default()
    }

    /// What would remain after returning `[start, end)` in `mode`: whether nothing would.
    pub fn would_empty(&self, clientid: u64, ino: Ino, start: u64, end: u64, mode: IoMode) -> bool {
        let mut g = self.grants_of(clientid, ino);
        g.remove(start, end, mode);
        g.is_empty()
    }

    /// LAYOUTRETURN(FILE) of `[start, end)` in `mode`.
    pub fn release(&self, clientid: u64, ino: Ino, start: u64, end: u64, mode: IoMode) {
        let mut m = self.lock();
        if let Some(g) = m.get_mut(&(clientid, ino)) {
            g.remove(start, end, mode);
            if g.is_empty() {
                m.remove(&(clientid, ino));
                self.end_recalls(|k| *k == (clientid, ino));
            }
            self.queue_trim([ino]);
        }
    }

    /// Ends the recalls `done` selects: their layouts came back.
    fn end_recalls(&self, done: impl Fn(&(u64, Ino)) -> bool) {
        let mut r = self.recalls.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|k, _| !done(k));
    }

    /// Everything the client holds of one file (return-on-close, revocation, expiry).
    pub fn release_file(&self, clientid: u64, ino: Ino) {
        if self.lock().remove(&(clientid, ino)).is_some() {
            self.queue_trim([ino]);
        }
        self.end_recalls(|k| *k == (clientid, ino));
    }

    /// LAYOUTRETURN(FSID / ALL): everything the client holds (one file system).
    pub fn release_client(&self, clientid: u64) {
        let mut gone = Vec::new();
        self.lock().retain(|(c, i), _| {
            if *c == clientid {
                gone.push(*i);
            }
            *c != clientid
        });
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
            .filter(|((c, i), g)| *c != clientid && *i == ino && g.conflicts(start, end, mode))
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

    /// Marks a recall of `ino` from `clientid` as pending; false if one already is.
    pub fn start_recall(&self, clientid: u64, ino: Ino, now: Instant) -> bool {
        let mut r = self.recalls.lock().unwrap_or_else(|e| e.into_inner());
        match r.entry((clientid, ino)) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(now);
                true
            }
        }
    }

    /// Remembers a pending recall to send again from the tick.
    pub fn retry_recall(&self, clientid: u64, fh: Fh) {
        let mut u = self.unsent.lock().unwrap_or_else(|e| e.into_inner());
        u.insert((clientid, fh.ino), fh);
    }

    /// The unsent recalls that are still pending.
    pub fn take_unsent_recalls(&self) -> Vec<(u64, Fh)> {
        let taken = std::mem::take(&mut *self.unsent.lock().unwrap_or_else(|e| e.into_inner()));
        taken
            .into_iter()
            .filter(|(k, _)| self.recall_pending(k.0, k.1))
            .map(|((c, _), fh)| (c, fh))
            .collect()
    }

    /// Whether a recall of `ino` from `clientid` is pending.
    pub fn recall_pending(&self, clientid: u64, ino: Ino) -> bool {
        let r = self.recalls.lock().unwrap_or_else(|e| e.into_inner());
        r.contains_key(&(clientid, ino))
    }

    /// Ends recalls whose layouts came back, and takes those still held after `limit`.
    pub fn overdue_recalls(&self, now: Instant, limit: Duration) -> Vec<(u64, Ino)> {
        let g = self.lock();
        let mut r = self.recalls.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|k, _| g.contains_key(k));
        let late: Vec<(u64, Ino)> = r
            .iter()
            .filter(|(_, t)| now.saturating_duration_since(**t) >= limit)
            .map(|(k, _)| *k)
            .collect();
        for k in &late {
            r.remove(k);
        }
        late
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
    pub fn forget(&self, dropped: &[(u64, Ino)]) {
        if dropped.is_empty() {
            return;
        }
        {
            let mut m = self.lock();
            for k in dropped {
                m.remove(k);
            }
        }
        self.queue_trim(dropped.iter().map(|k| k.1));
        self.end_recalls(|k| dropped.contains(k));
    }
}

/// Who was fenced, and the files a failed fence keeps (callback.rs `fence_client`).
impl Pnfs {
    /// Whether `client` was fenced since its last grant.
    pub fn is_fenced(&self, client: u64) -> bool {
        let f = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        f.contains(&client)
    }

    /// Records that `client` no longer has access to the volume; its kept files are freed
    /// for trimming.
    pub fn mark_fenced(&self, client: u64) {
        self.fenced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(client);
        let kept = self
            .unfenced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&client);
        if let Some((_, inos)) = kept {
            self.queue_trim(inos);
        }
    }

    /// Fencing `client` failed at `now`: keeps the blocks of `inos` until it succeeds.
    pub fn keep_unfenced(&self, client: u64, inos: impl IntoIterator<Item = Ino>, now: Instant) {
        let mut u = self.unfenced.lock().unwrap_or_else(|e| e.into_inner());
        let e = u.entry(client).or_insert_with(|| (now, HashSet::new()));
        e.0 = now;
        e.1.extend(inos);
    }

    /// Whether a client that could not be fenced held a layout of `ino`: its blocks stay.
    pub fn kept(&self, ino: Ino) -> bool {
        let u = self.unfenced.lock().unwrap_or_else(|e| e.into_inner());
        u.values().any(|(_, inos)| inos.contains(&ino))
    }

    /// The clients whose failed fence was last tried `every` or longer before `now`.
    pub fn fences_to_retry(&self, now: Instant, every: Duration) -> Vec<u64> {
        let u = self.unfenced.lock().unwrap_or_else(|e| e.into_inner());
        u.iter()
            .filter(|(_, (t, _))| now.saturating_duration_since(*t) >= every)
            .map(|(c, _)| *c)
            .collect()
    }

    /// Of `dropped`, the clients holding grants (what they held: READ layouts too, since
    /// their blocks may be freed and reused) that were not fenced since, with their files.
    pub fn to_fence(&self, dropped: &[(u64, Ino)]) -> Vec<(u64, Vec<Ino>)> {
        let g = self.lock();
        let mut out: Vec<(u64, Vec<Ino>)> = Vec::new();
        for k in dropped {
            if !g.contains_key(k) || self.is_fenced(k.0) {
                continue;
            }
            match out.iter_mut().find(|(c, _)| *c == k.0) {
                Some((_, inos)) => inos.push(k.1),
                None => out.push((k.0, vec![k.1])),
            }
        }
        out
    }
}

/// The trim of speculative blocks past EOF (store `trim_eof`, docs/pnfs.md "Preallocation").
impl Pnfs {
    /// Marks an RW LAYOUTGET of `ino` as in progress until the guard drops (after its
    /// grant): taken before the allocation, so a trim either ran before the allocation or
    /// sees the guard.
    pub fn begin_get(&self, ino: Ino) -> Getting<'_> {
        let mut g = self.getting.lock().unwrap_or_else(|e| e.into_inner());
        *g.entry(ino).or_default() += 1;
        Getting { pnfs: self, ino }
    }

    /// No client holds an RW layout of `ino`, none is being handed out, and no client whose
    /// fence failed held one: the unwritten blocks past EOF are in nobody's layout (READ
    /// layouts name unwritten blocks as NONE_DATA, without their volume offsets, so they
    /// hold none) and nobody can still write them.
    pub fn may_trim(&self, ino: Ino) -> bool {
        let held = self
            .lock()
            .iter()
            .any(|((_, i), g)| *i == ino && g.has_rw());
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
pub fn trim_released(srv: &crate::server::Server) {
    // While a previous instance's layout may still commit (`layouts_reclaimable`, which
    // covers grace), nothing past EOF is trimmed: the queue waits for the next call after it.
    if srv.state.layouts_reclaimable() {
        return;
    }
    let mut inos = srv.pnfs.take_trims();
    if !srv.pnfs.swept.swap(true, Ordering::Relaxed) {
        inos.extend(srv.store.files_past_eof());
    }
    for ino in inos {
        match srv.store.trim_eof(ino, &|| srv.pnfs.may_trim(ino)) {
            Ok(n) => add(&srv.pnfs.metrics.trimmed_blocks, n),
            Err(e) => tracing::warn!(ino = ino.0, %e, "trim past EOF failed"),
        }
    }
}

/// The stateid and grant check of a LAYOUTCOMMIT (RFC 8881 §12.7.4, §18.42.3; docs/pnfs.md
/// "After a restart"): `None` = a reclaim, which converts only the file's own unwritten
/// blocks of `[start, end)`; else the client's RW grants of this instance to check the
/// extents against. A bad layout stateid of this instance is BADLAYOUT (§18.42.4, as knfsd).
pub fn commit_grants(
    srv: &crate::server::Server,
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
                .pnfs
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
            Ok(Some(srv.pnfs.grants_of(clientid, ino)))
        }
    }
}

/// The stateid a LAYOUTGET presents: the client's layout stateid of the file, or an open,
/// lock or delegation stateid giving `access`. One of the previous instance is BAD_STATEID,
/// not STALE_STATEID: the Linux client answers BAD_STATEID by dropping its layout stateid
/// (or recovering its open) and asking again, but STALE_STATEID by a lease check and the
/// same LAYOUTGET again (fs/nfs/nfs4proc.c `nfs4_layoutget_handle_exception`).
pub fn check_get_stateid(
    srv: &crate::server::Server,
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
mod tests {
    use super::*;
    use layout::block::IoMode;

    #[test]
    fn grants_follow_gets_and_returns() {
        let p = Pnfs::default();
        let f = Ino(7);
        p.grant(1, f, 0, 8192, IoMode::RW);
        p.grant(2, f, 0, 4096, IoMode::READ);
        assert!(p.grants_of(1, f).covers_rw(0, 8192));
        assert_eq!(p.conflicting(2, f, 0, 4096, IoMode::READ), vec![1]);
        assert!(p.conflicting(1, f, 0, 4096, IoMode::READ).is_empty());
        assert!(!p.would_empty(1, f, 0, 4096, IoMode::RW));
        assert!(p.would_empty(1, f, 0, 8192, IoMode::ANY));
        p.release(1, f, 0, 8192, IoMode::RW);
        assert!(p.grants_of(1, f).is_empty());
        p.release_client(2);
        assert!(p.grants_of(2, f).is_empty());
        p.grant(3, f, 0, 1, IoMode::RW);
        p.forget(&[(3, f)]);
        assert!(p.grants_of(3, f).is_empty());
    }
}
