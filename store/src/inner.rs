//! The shared core of a mounted store: devices, log, the locked metadata (`Core`, state.rs),
//! and the one helper through which every change is applied and committed
//! (`Inner::commit_locked`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use layout::Superblock;
use metalog::{BlockDev, Csn, FlushSeq, Item, Log, Reservation, Transaction, TxObject};

use super::cache::PageCache;
use super::dirfilter::{Bloom, ReadAhead};
use super::format::Wb;
use super::meta_blocks::MetaBlocks;
use super::state::{Busy, Core};
use super::types::{Ino, Result, StoreError, StoreOptions};

/// Data I/O in flight, by ticket (see `Busy::io_ticket`).
#[derive(Default)]
pub struct IoTrack {
    next: u64,
    inflight: BTreeMap<u64, u32>,
}

/// Ends a data I/O on drop.
pub struct IoGuard<'a> {
    inner: &'a Inner,
    ticket: u64,
}

impl Drop for IoGuard<'_> {
    fn drop(&mut self) {
        let mut t = self.inner.io.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = t.inflight.get_mut(&self.ticket) {
            *n -= 1;
            if *n == 0 {
                t.inflight.remove(&self.ticket);
            }
        }
    }
}

/// Whether an inode is open somewhere (the NFS state layer answers; the store keeps an
/// unlinked open file as an orphan until `Store::release`).
pub type OpenProbe = Box<dyn Fn(Ino) -> bool + Send + Sync>;

pub struct Inner {
    pub(super) dev: Arc<dyn BlockDev>,
    /// Shared flushes of the data volume (the internal log uses the same device and sequence).
    pub(super) flush: Arc<FlushSeq>,
    pub(super) log: Arc<Log>,
    pub(super) sb: Superblock,
    pub(super) opts: StoreOptions,
    pub(super) boot: u64,
    pub(super) core: RwLock<Core>,
    pub(super) wb: Mutex<Wb>,
    /// Signalled when a write-back put its new tree in (committers wait on it when the
    /// changes since the last write-back reach `hard_limit`).
    pub(super) wb_done: Condvar,
    pub(super) wb_done_lock: Mutex<()>,
    /// Bytes of changes not yet in the tree (live + frozen), readable without the lock.
    pub(super) pending_bytes: AtomicU64,
    /// A write-back starts past this many pending bytes, and committers wait past twice it.
    pub(super) soft_limit: u64,
    pub(super) cache: Arc<PageCache>,
    /// Nodes of the tree on disk (for the metadata reserve, ns.rs `meta_reserve`).
    pub(super) tree_nodes: AtomicU64,
    /// Set when applying a change failed half-way (a metadata read error): memory no longer
    /// matches the log, so nothing more is accepted (as the log shuts down on I/O errors).
    pub(super) failed: AtomicBool,
    pub(super) open_probe: RwLock<Option<OpenProbe>>,
    pub(super) mount_stats: std::sync::OnceLock<MountStats>,
    pub(super) io: Mutex<IoTrack>,
    /// Per-file data locks (sharded by inode number), taken before the state lock by WRITE,
    /// truncation, ALLOCATE, DEALLOCATE and block commits.
    pub(super) file_locks: Vec<Mutex<()>>,
    /// The blocks tree nodes and checkpoint blobs hold, for the NVMe target's guard
    /// (meta_blocks.rs): changed next to every metadata allocation and free (writeback.rs).
    pub(super) meta_blocks: Arc<MetaBlocks>,
    /// This store, for the threads it starts (a directory filter's scan, dirfilter.rs).
    pub(super) me: std::sync::OnceLock<std::sync::Weak<Inner>>,
    /// The directory filters' counters, readable without the state lock.
    pub(super) filter_counters: Arc<super::dirfilter::FilterCounters>,
}

/// Shards of `Inner::file_locks`.
pub const FILE_LOCK_SHARDS: usize = 64;

/// What the mount had to do: metadata blocks read (checkpoint, free-space list, client
/// records, and the tree nodes the replay and orphan pass touched: independent of the file
/// count), log items replayed (0 after a clean unmount).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MountStats {
    pub blocks_read: u64,
    /// Of those, the tree nodes the replay read one at a time, where its read-ahead
    /// (mount.rs `replay_batch`) had not brought them in.
    pub replay_single_reads: u64,
    pub items_replayed: u64,
    /// Time spent reading the checkpoint, and inside `Log::mount` (recovery).
    pub load_ms: u64,
    pub log_mount_ms: u64,
    /// The mount mark an earlier mount left in the superblock (it did not unmount cleanly),
    /// logged as a warning at mount.
    pub stale_mark: Option<layout::MountMark>,
}

/// Log space reserved for a namespace transaction: the items of a rename (≤ 8 items of
/// ≤ 400 bytes with names) plus two record headers of metalog's bound (`tx_bound`).
const RESERVE_BASE: u64 = 8 * 400 + 2 * (4096 + 512);

/// Errors of the log: the log is shut down or failed (its own I/O errors are strings by then).
/// A log shut down by ENOSPC from the device under it is `DeviceFull` (NFS4ERR_NOSPC), like ENOSPC on the store's own device I/O (`From<io::Error>`).
pub fn log_err(e: metalog::LogError) -> StoreError {
    if let metalog::LogError::NoDeviceSpace(what) = e {
        return StoreError::DeviceFull(what);
    }
    StoreError::Io(e.to_string())
}

impl Inner {
    pub(super) fn rd(&self) -> RwLockReadGuard<'_, Core> {
        self.core.read().unwrap_or_else(|e| e.into_inner())
    }
    pub(super) fn wr(&self) -> RwLockWriteGuard<'_, Core> {
        self.core.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserve log space for a transaction of about `extra` bytes of items, before taking the
    /// state lock: the log's write-back takes that lock, so a commit under it must never wait
    /// for log space (metalog `Log::reserve`, as XFS reserves before locking inodes).
    pub(super) fn reserve(&self, extra: u64) -> Result<Reservation> {
        self.check_failed()?;
        self.throttle();
        // Fixed part: a few inode cores (~100 bytes each) and two names, plus record headers.
        self.log.reserve(RESERVE_BASE + extra).map_err(log_err)
    }

    pub(super) fn check_failed(&self) -> Result<()> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(StoreError::Io(
                "the metadata store stopped after a failed metadata read".into(),
            ));
        }
        Ok(())
    }

    /// Keep the changes not yet written back within bounds: start a
    /// write-back past the soft limit; past twice it, wait for one to finish.
    fn throttle(&self) {
        let pending = self.pending_bytes.load(Ordering::Relaxed);
        if pending < self.soft_limit {
            return;
        }
        self.log.kick_writeback();
        let mut g = self.wb_done_lock.lock().unwrap_or_else(|e| e.into_inner());
        while self.pending_bytes.load(Ordering::Relaxed) >= 2 * self.soft_limit
            && self.log.shutdown_error().is_none()
        {
            self.log.kick_writeback();
            g = self
                .wb_done
                .wait_timeout(g, std::time::Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Apply `items` to the in-memory state and commit them as one transaction, in that
    /// order under the state lock, so the log's order is the memory's order (items are blind
    /// sets: two commits of one inode replayed out of order would resurrect the older one).
    /// Blocks the items free become busy until the transaction is durable.
    pub(super) fn commit_locked(
        &self,
        core: &mut Core,
        res: Reservation,
        items: Vec<Item>,
        objects: Vec<TxObject>,
    ) -> Result<Csn> {
        self.check_failed()?;
        let before = core.kv.live_bytes;
        let mut freed = Vec::new();
        for it in &items {
            match core.apply(it) {
                Ok(a) => {
                    for (p, _) in a.used {
                        // Planned by this caller: the allocator gave it out already.
                        core.reserved.remove(&p);
                    }
                    freed.extend(a.freed);
                }
                Err(e) => {
                    self.failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        if let Some((dir, id)) = core.filters.wanted.take() {
            self.start_filter_scan(core, dir, id);
        }
        let csn = self
            .log
            .commit_reserved(Transaction { items, objects }, res)
            .map_err(log_err)?;
        let io_ticket = self.io_now();
        for (phys, len) in freed {
            core.busy.push(Busy {
                csn: csn.0,
                io_ticket,
                phys,
                len,
            });
        }
        let grown = core.kv.live_bytes.saturating_sub(before);
        let pending = self.pending_bytes.fetch_add(grown, Ordering::Relaxed) + grown;
        if pending >= self.soft_limit {
            self.log.kick_writeback();
        }
        Ok(csn)
    }

    /// Force the log to `csn` (group-committed) and remember it is durable.
    pub(super) fn force(&self, csn: Csn) -> Result<bool> {
        let f = self.log.force_seq(csn).map_err(log_err)?;
        Ok(f.wrote_log)
    }

    /// Force on a `sync` export (docs/design.md §4 table), nothing on an `async` one.
    pub(super) fn force_if_sync(&self, csn: Csn) -> Result<()> {
        if self.opts.sync {
            self.force(csn)?;
        }
        Ok(())
    }

    /// Give busy blocks whose freeing transaction is durable back to the allocator.
    pub(super) fn reclaim_busy(&self, core: &mut Core) {
        let durable = self.log.durable_csn().0;
        let oldest_io = self.oldest_io();
        let mut keep = Vec::new();
        // Freed after a write-back's snapshot: not free in the tree it writes (writeback.rs).
        let hold = core.wb_hold.unwrap_or(u64::MAX);
        for b in std::mem::take(&mut core.busy) {
            if b.csn <= durable && b.io_ticket <= oldest_io && b.csn <= hold {
                // A failure here means the block was never ours: dropping it is the safe side.
                let _ = core.alloc.free(b.phys, b.len);
            } else {
                keep.push(b);
            }
        }
        core.busy = keep;
    }

    /// Make every busy block reusable (forces the log): the slow path of a full allocator.
    pub(super) fn drain_busy(&self) -> Result<()> {
        let last = self.log.last_committed();
        self.force(last)?;
        let mut g = self.wr();
        self.reclaim_busy(&mut g);
        Ok(())
    }

    /// Start a data I/O: blocks freed from now on are not reused until it ends.
    pub(super) fn io_begin(&self) -> IoGuard<'_> {
        let mut t = self.io.lock().unwrap_or_else(|e| e.into_inner());
        let ticket = t.next;
        t.next += 1;
        *t.inflight.entry(ticket).or_default() += 1;
        IoGuard {
            inner: self,
            ticket,
        }
    }

    fn io_now(&self) -> u64 {
        self.io.lock().unwrap_or_else(|e| e.into_inner()).next
    }

    /// The oldest ticket still in flight (`u64::MAX` if none).
    fn oldest_io(&self) -> u64 {
        let t = self.io.lock().unwrap_or_else(|e| e.into_inner());
        t.inflight.keys().next().copied().unwrap_or(u64::MAX)
    }

    pub(super) fn file_lock(&self, ino: Ino) -> MutexGuard<'_, ()> {
        let i = (ino.0 % FILE_LOCK_SHARDS as u64) as usize;
        self.file_locks[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Data-volume flush shared with concurrent callers (docs/design.md §3 "Flush sharing");
    /// says whether this call issued the flush or joined another caller's.
    pub(super) fn flush_data(&self) -> Result<metalog::FlushOutcome> {
        Ok(self.flush.flush()?)
    }

    pub(super) fn tx(ino: u64, timestamps_only: bool) -> TxObject {
        TxObject {
            id: ino,
            timestamps_only,
        }
    }
}

/// Blocks planned by a caller: taken from the allocator, recorded as reserved.
pub fn reserve_blocks(core: &mut Core, phys: u64, len: u64) {
    core.reserved.insert(phys, len);
}

/// Give planned blocks back (the write failed before its commit).
pub fn unreserve_blocks(core: &mut Core, phys: u64, len: u64) {
    if core.reserved.remove(&phys).is_some() {
        let _ = core.alloc.free(phys, len);
    }
}

impl Inner {
    /// Start the scan `commit_locked` found registered, on a thread of its own.
    pub(super) fn start_filter_scan(&self, core: &mut Core, dir: u64, id: u64) {
        let Some(me) = self.me.get().cloned() else {
            core.filters.abandon(dir, id);
            return;
        };
        let spawned = std::thread::Builder::new()
            .name("pnfsd-dirfilter".into())
            .spawn(move || scan_dir(me, dir, id));
        if spawned.is_err() {
            core.filters.abandon(dir, id);
        }
    }
}

/// The scan: chunks of entries under the read lock, in cookie order, until the end of the
/// directory; then `finish` under the write lock. Each chunk first reads ahead, together,
/// the leaves the next chunks walk (`Core::dir_read_ahead`), under the same read lock: a
/// cold 1,000,000-entry directory is ~13,000 leaves, one device round trip each otherwise.
fn scan_dir(me: Weak<Inner>, dir: u64, id: u64) {
    let Some((bits, leaves)) = me.upgrade().map(|i| {
        let g = i.rd();
        let window = g.filters.scan_ahead.min(i.cache.capacity() / 8);
        (g.filters.scan_bits(), window)
    }) else {
        return;
    };
    let mut ra = ReadAhead {
        leaves,
        read: None,
        again: None,
        batches: 0,
    };
    let mut bloom = Bloom::new(bits);
    let mut n = 0u64;
    let mut after = 0u64;
    let t0 = std::time::Instant::now();
    loop {
        let Some(inner) = me.upgrade() else { return };
        let step = {
            let g = inner.rd();
            if !g.filters.building(dir, id) {
                Err(())
            } else {
                g.dir_read_ahead(dir, after, &mut ra);
                g.dir_hashes(dir, after, g.filters.scan_chunk)
                    .map_err(|_| ())
            }
        };
        match step {
            Ok((hashes, eof)) => {
                for (cookie, h) in hashes {
                    bloom.add(h);
                    n += 1;
                    after = cookie;
                }
                if eof {
                    inner.wr().filters.finish(dir, id, bloom, n);
                    tracing::info!(
                        "directory filter of inode {dir}: {n} entries scanned in {} ms ({} read-ahead windows of {} leaves)",
                        t0.elapsed().as_millis(),
                        ra.batches,
                        ra.leaves
                    );
                    return;
                }
            }
            Err(()) => {
                inner.wr().filters.abandon(dir, id);
                return;
            }
        }
        drop(inner);
        std::thread::yield_now();
    }
}

impl Inner {
    /// After the mount, on its own thread: the nodes of the tree on disk into the set, then
    /// `check` answers from it (module comment). The write-back's mutex keeps the tree as it
    /// is meanwhile; a write-back that ran before it already added its own nodes (and took
    /// out what it replaced, which the walk no longer finds).
    pub(super) fn walk_meta_blocks(&self) {
        let t0 = std::time::Instant::now();
        let _wb = self.wb.lock().unwrap_or_else(|e| e.into_inner());
        let (rd, root) = {
            let g = self.rd();
            (g.kv.rd.clone(), g.kv.root)
        };
        let mut blocks = match super::btree::all_blocks(&rd, root) {
            Ok(b) => b,
            Err(e) => {
                // Left not ready: the target refuses every write no layout covers.
                tracing::error!(error = %e, "metadata blocks: walking the tree failed; hosts write only inside their layouts");
                return;
            }
        };
        blocks.sort_unstable();
        let mut i = 0;
        while i < blocks.len() {
            let mut j = i + 1;
            while j < blocks.len() && blocks[j] == blocks[j - 1] + 1 {
                j += 1;
            }
            self.meta_blocks.insert(blocks[i], (j - i) as u64);
            i = j;
        }
        let ms = t0.elapsed().as_millis() as u64;
        self.meta_blocks.set_walked(blocks.len() as u64, ms);
        self.meta_blocks.set_ready();
        let (runs, n) = self.meta_blocks.size();
        tracing::info!(
            "metadata blocks guarded: {n} in {runs} runs ({} tree nodes found in {ms} ms)",
            blocks.len()
        );
    }
}
