//! mkfs, mount (superblock → checkpoint → free-space list → log replay) and unmount.
//!
//! A mount reads O(1) metadata: the superblock, the two checkpoint slots,
//! the free-space list and the client records; the tree is read through the cache when used.
//! After a crash it also replays the log from its tail, which the write-back keeps close to
//! the head (writeback.rs): the cost follows the log, not the file count.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use layout::{Allocator, Geometry, MountMark, Superblock};
use metalog::{BlockDev, FileDev, FlushSeq, Log, LogOptions, Writeback};

use super::cache::PageCache;
use super::dirfilter::{DirFilters, FilterCounters};
use super::format::Wb;
use super::format::{self, BlobRef, Checkpoint};
use super::inner::{log_err, Inner, MountStats};
use super::inode::Meta;
use super::keys::{hash_key, K_ORPHAN};
use super::kv::{Kv, Reader};
use super::meta_blocks::MetaBlocks;
use super::split::SplitDev;
use super::state::Core;
use super::types::{FileType, Result, StoreError, StoreOptions, Timespec, BLOCK, ROOT_INO};
use super::writeback::read_blob;

/// Zero-write in pieces of this size (bounded memory for a 256 MiB log).
const ZERO_CHUNK: u64 = 1 << 20;

/// How often mount and recovery say how far they got; the tests see
/// every line.
#[cfg(not(test))]
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
#[cfg(test)]
const PROGRESS_EVERY: Duration = Duration::ZERO;

fn zero_region(dev: &dyn BlockDev, start_block: u64, blocks: u64) -> Result<()> {
    let zeros = vec![0u8; ZERO_CHUNK as usize];
    let (mut off, end) = (start_block * BLOCK, (start_block + blocks) * BLOCK);
    while off < end {
        let n = ZERO_CHUNK.min(end - off) as usize;
        dev.write_at(&zeros[..n], off)?;
        off += n as u64;
    }
    Ok(())
}

pub fn mkfs_path(path: &Path, size: u64, force: bool) -> Result<()> {
    let dev: Arc<dyn BlockDev> = if path.exists() {
        // A regular file smaller than asked grows (sparse); a block device keeps its size.
        let md = std::fs::metadata(path)?;
        if md.is_file() && md.len() < size {
            let f = std::fs::OpenOptions::new().write(true).open(path)?;
            f.set_len(size)?;
        }
        Arc::new(FileDev::open(path)?)
    } else {
        Arc::new(FileDev::create(path, size)?)
    };
    mkfs_dev(dev, force)
}

fn sb_err(e: layout::SuperblockError) -> StoreError {
    StoreError::Io(e.to_string())
}

/// Lay out a volume: superblock, internal log, two checkpoint slots, and the rest free for
/// data and tree nodes alike (docs/design.md §2; nothing is sized by the file count).
pub fn mkfs_dev(dev: Arc<dyn BlockDev>, force: bool) -> Result<()> {
    may_format(&*dev, force)?;
    let g = Geometry::for_volume(dev.size()).map_err(sb_err)?;
    format_dev(dev, g, 0)
}

/// Lay out a split volume over a metadata member and a data member (split.rs): the data
/// member's label first, then the metadata member as `mkfs_dev` does a volume, through the
/// device over both. A crash before the superblock leaves an unformatted volume.
pub fn mkfs_split(meta: Arc<dyn BlockDev>, data: Arc<dyn BlockDev>, force: bool) -> Result<()> {
    may_format(&*meta, force)?;
    let mut b0 = vec![0u8; BLOCK as usize];
    if data.size() >= BLOCK {
        data.read_at(&mut b0, 0)?;
        let labelled = layout::MemberLabel::decode(&b0).is_ok();
        if (labelled || Superblock::looks_formatted(&b0)) && !force {
            return Err(StoreError::Exist);
        }
    }
    let g = Geometry::for_split(meta.size(), data.size()).map_err(sb_err)?;
    let dev = Arc::new(SplitDev::new(meta, data.clone(), &g));
    format_split(dev, data, g)
}

fn format_split(dev: Arc<SplitDev>, data: Arc<dyn BlockDev>, g: Geometry) -> Result<()> {
    let uuid = *uuid::Uuid::new_v4().as_bytes();
    let mut label = vec![0u8; BLOCK as usize];
    let l = layout::MemberLabel::data(uuid, g.data_member_blocks, g.data_base);
    label[..layout::member::LABEL_BYTES].copy_from_slice(&l.encode());
    data.write_at(&label, 0)?;
    format_with(dev, g, layout::superblock::FEATURE_SPLIT, uuid)
}

/// Refuses to format a device that holds a volume (unless `force`) or one that a live
/// pnfsd has mounted (even with `force`).
fn may_format(dev: &dyn BlockDev, force: bool) -> Result<()> {
    let mut b0 = vec![0u8; BLOCK as usize];
    if dev.size() >= BLOCK {
        dev.read_at(&mut b0, 0)?;
    }
    if Superblock::looks_formatted(&b0) && !force {
        return Err(StoreError::Exist);
    }
    if let Some(m) = Superblock::decode(&b0).ok().and_then(|sb| sb.mounted) {
        if mark_is_live(&m) {
            return Err(StoreError::Served(describe_mark(&m)));
        }
        tracing::warn!(
            "mkfs --force over a volume marked mounted by {}",
            describe_mark(&m)
        );
    }
    Ok(())
}

fn format_dev(dev: Arc<dyn BlockDev>, g: Geometry, features: u64) -> Result<()> {
    format_with(dev, g, features, *uuid::Uuid::new_v4().as_bytes())
}

fn format_with(dev: Arc<dyn BlockDev>, g: Geometry, features: u64, uuid: [u8; 16]) -> Result<()> {
    // The log region is zero-written, not left sparse, by `Log::format` below: a later log
    // write then never allocates file blocks, so its `fdatasync` never has to commit
    // filesystem metadata (docs/design.md §3). Data blocks stay sparse.
    Log::format(dev.clone(), g.log_start * BLOCK, g.log_blocks * BLOCK, uuid).map_err(log_err)?;
    // The first checkpoint: an empty tree, all of the data area free but the block holding
    // that very list. Slot 0 is zeroed (a `--force` over an old volume).
    zero_region(&*dev, g.meta_start, g.meta_blocks)?;
    let list = format::encode_free_list(std::iter::once((g.data_start + 1, g.data_blocks - 1)));
    let blob = format::encode_blob(&list, &[g.data_start]);
    dev.write_at(&blob[0], g.data_start * BLOCK)?;
    let ck = Checkpoint {
        seq: 1,
        csn: 0,
        root: None,
        next_ino: ROOT_INO.0,
        files: 0,
        nodes: 0,
        free: BlobRef {
            start: g.data_start,
            blocks: 1,
            bytes: list.len() as u32,
            crc: crc32c::crc32c(&list),
        },
        clients: BlobRef::default(),
    };
    dev.write_at(&ck.encode(1), (g.meta_start + 1) * BLOCK)?;
    dev.flush()?;
    let created = Timespec::now().sec;
    let sb = Superblock {
        uuid,
        features,
        geometry: g,
        created,
        mounted: None,
    };
    // Superblock last and durable: a crash during mkfs leaves an unformatted volume.
    dev.write_fua(&sb.encode(), 0)?;
    let inner = open_dev(dev, StoreOptions::default())?;
    inner.make_root()?;
    inner.unmount()
}

/// The newer of the two checkpoints (a torn or missing one is skipped).
fn read_checkpoint(dev: &dyn BlockDev, g: &Geometry) -> Result<Checkpoint> {
    let mut best: Option<Checkpoint> = None;
    for slot in 0..2 {
        let mut b = vec![0u8; BLOCK as usize];
        dev.read_at(&mut b, (g.meta_start + slot) * BLOCK)?;
        if let Some(c) = Checkpoint::decode(slot, &b) {
            if c.seq % 2 == slot && best.is_none_or(|x| c.seq > x.seq) {
                best = Some(c);
            }
        }
    }
    best.ok_or_else(|| StoreError::Io("no valid checkpoint on the volume".into()))
}

pub fn open_dev(dev: Arc<dyn BlockDev>, opts: StoreOptions) -> Result<Arc<Inner>> {
    let mut b0 = vec![0u8; BLOCK as usize];
    dev.read_at(&mut b0, 0)?;
    let sb = Superblock::decode(&b0).map_err(sb_err)?;
    // Before anything is replayed or written: a volume file is locked (volume.rs), an
    // external namespace has only its mark.
    if let Some(m) = sb.mounted.filter(mark_is_live) {
        if !opts.taken_over {
            return Err(StoreError::Served(describe_mark(&m)));
        }
        tracing::info!(
            "the volume was taken over from {} (fenced by reservation)",
            describe_mark(&m)
        );
    }
    let g = sb.geometry;
    if g.total_blocks * BLOCK > dev.size() {
        return Err(StoreError::Io(
            "volume is smaller than its superblock says".into(),
        ));
    }
    let t0 = Instant::now();
    let reads = Arc::new(AtomicU64::new(0));
    let ck = read_checkpoint(&*dev, &g)?;
    let mut alloc = Allocator::new_full(g.data_start, g.data_blocks);
    if g.is_split() {
        alloc.set_split(g.data_split());
    }
    let (list, free_blocks) = read_blob(&*dev, &ck.free)?;
    let list = format::decode_free_list(&list).map_err(StoreError::Io)?;
    for (s, l) in list {
        alloc
            .free(s, l)
            .map_err(|e| StoreError::Io(format!("free-space list: {e}")))?;
    }
    let (cbytes, clients_blocks) = read_blob(&*dev, &ck.clients)?;
    // The blobs' blocks are known now; the tree's nodes after the mount (`walk_meta_blocks`).
    let meta_blocks = Arc::new(MetaBlocks::new());
    for &b in free_blocks.iter().chain(&clients_blocks) {
        meta_blocks.insert(b, 1);
    }
    let clients: BTreeMap<Vec<u8>, Vec<u8>> = format::decode_clients(&cbytes)
        .map_err(StoreError::Io)?
        .into_iter()
        .collect();
    if ck.clients.blocks == 0 && !clients.is_empty() {
        return Err(StoreError::Io("client records without a blob".into()));
    }
    reads.fetch_add(
        3 + ck.free.blocks as u64 + ck.clients.blocks as u64,
        Ordering::Relaxed,
    );
    // `metadata_cache` is the whole budget: the changes not yet written
    // back take up to a quarter of it (`soft_limit` × 2, inner.rs `throttle`), clean pages
    // half, and the last quarter is for what a write-back and the allocator hold beside
    // them. (Pages with the whole budget: the 2,000,000-file run peaked at 519 MiB of RSS
    // against the 484 MiB bound; with three quarters, 493 MiB.)
    let (soft_limit, page_budget, filter_share) = budget(opts.metadata_cache);
    let filter_counters = Arc::new(FilterCounters::default());
    let cache = Arc::new(PageCache::new(page_budget));
    let rd = Reader {
        dev: dev.clone(),
        cache: cache.clone(),
        reads: reads.clone(),
    };
    let mut core = Core {
        kv: Kv::new(rd, ck.root),
        alloc,
        busy: Vec::new(),
        reserved: BTreeMap::new(),
        clients,
        clients_dirty: false,
        next_ino: ck.next_ino,
        files: ck.files,
        wb_hold: None,
        hash_key: hash_key(&sb.uuid),
        hash_mask: u64::MAX,
        filters: DirFilters::new(filter_share, filter_counters.clone()),
    };
    let load_ms = t0.elapsed().as_millis() as u64;
    let t1 = Instant::now();
    let misses0 = cache.misses.load(Ordering::Relaxed);
    let mut replayed = 0u64;
    let covered = ck.csn;
    let mut last_note = Instant::now();
    let mut batch = Vec::with_capacity(REPLAY_BATCH);
    let flush = Arc::new(FlushSeq::new(dev.clone()));
    let lopts = LogOptions {
        force_interval: opts.log_force_interval,
        // Internal log: its own flush covers the clients' data (docs/design.md §2).
        external_data: None,
    };
    let log = Log::mount(
        dev.clone(),
        g.log_start * BLOCK,
        g.log_blocks * BLOCK,
        sb.uuid,
        flush.clone(),
        lopts,
        &mut |csn, item| {
            // The tree holds every commit up to the CSN its checkpoint covers: skip those.
            // Replaying them could free blocks the tree's own nodes took since (writeback.rs).
            if csn.0 <= covered {
                return Ok(());
            }
            replayed += 1;
            if last_note.elapsed() >= PROGRESS_EVERY {
                last_note = Instant::now();
                // What is left: metalog's own line says records and KiB replayed of the total.
                tracing::info!(
                    "store recovery: {replayed} log items replayed (log CSN {}, the tree covers {covered}), {} KiB of changes in memory",
                    csn.0,
                    core.kv.live_bytes >> 10
                );
            }
            batch.push(item.clone());
            if batch.len() >= REPLAY_BATCH {
                replay_batch(&mut core, &mut batch)?;
            }
            Ok(())
        },
    )
    .map_err(log_err)?;
    replay_batch(&mut core, &mut batch).map_err(|e| log_err(metalog::LogError::Replay(e)))?;
    let log_mount_ms = t1.elapsed().as_millis() as u64;
    let replay_single_reads = cache.misses.load(Ordering::Relaxed) - misses0;
    let boot = {
        let now = Timespec::now();
        (now.sec as u64) << 20 ^ now.nsec as u64 ^ u64::from_le_bytes(rand_bytes())
    };
    let pending = core.kv.live_bytes;
    let inner = Arc::new(Inner {
        dev,
        flush,
        log,
        sb,
        boot,
        soft_limit,
        opts,
        core: RwLock::new(core),
        wb: Mutex::new(Wb {
            ck,
            free_blocks,
            clients_blocks,
            runs: 0,
            objects_written: 0,
        }),
        wb_done: Condvar::new(),
        wb_done_lock: Mutex::new(()),
        pending_bytes: AtomicU64::new(pending),
        cache,
        tree_nodes: AtomicU64::new(ck.nodes),
        failed: AtomicBool::new(false),
        open_probe: RwLock::new(None),
        io: Mutex::new(Default::default()),
        file_locks: (0..super::inner::FILE_LOCK_SHARDS)
            .map(|_| Mutex::new(()))
            .collect(),
        mount_stats: std::sync::OnceLock::new(),
        meta_blocks,
        me: std::sync::OnceLock::new(),
        filter_counters,
    });
    let _ = inner.me.set(Arc::downgrade(&inner));
    let w: std::sync::Weak<dyn Writeback> =
        Arc::downgrade(&inner) as std::sync::Weak<dyn Writeback>;
    inner.log.set_writeback(w);
    inner.free_orphans()?;
    let stale_mark = inner.mark_mounted()?;
    inner.wr().filters.enabled = true;
    let stats = MountStats {
        blocks_read: reads.load(Ordering::Relaxed),
        replay_single_reads,
        items_replayed: replayed,
        load_ms,
        log_mount_ms,
        stale_mark,
    };
    let _ = inner.mount_stats.set(stats);
    let walker = inner.clone();
    std::thread::Builder::new()
        .name("pnfsd-metablocks".into())
        .spawn(move || walker.walk_meta_blocks())
        .map_err(StoreError::from)?;
    let (files, free_extents) = {
        let g = inner.rd();
        (g.files, g.alloc.extent_count())
    };
    let ck = inner.wb.lock().unwrap_or_else(|e| e.into_inner()).ck;
    // The free-space list is held whole (docs/store.md "Memory"): its size is logged.
    tracing::info!(
        "store mounted: {files} inodes, checkpoint {} (log CSN {}), {} metadata blocks read ({} one at a time by the replay), {replayed} log items replayed, {} ms; free space {free_extents} extents ({} list blocks)",
        ck.seq,
        ck.csn,
        stats.blocks_read,
        stats.replay_single_reads,
        t0.elapsed().as_millis(),
        ck.free.blocks
    );
    Ok(inner)
}

/// Log items replayed together: their leaves are read ahead as one batch.
const REPLAY_BATCH: usize = 1024;

/// Replays `batch` (log order) into `core` and empties it. The tree's nodes on the paths of
/// every key the items look up are read ahead first, together (`Kv::prefetch`): a replay
/// after a crash reads the leaves a log's worth of changes touched, which one at a time, as
/// the items reach them, cost a device round trip each.
fn replay_batch(
    core: &mut Core,
    batch: &mut Vec<metalog::Item>,
) -> std::result::Result<(), String> {
    let mut keys = Vec::new();
    for it in batch.iter() {
        core.replay_keys(it, &mut keys);
    }
    // A node that cannot be read ahead is read again, and reported, by the apply.
    let _ = core.kv.prefetch(&mut keys);
    for it in batch.drain(..) {
        let a = core.apply(&it).map_err(|e| e.to_string())?;
        // Replay sets free space in log order (state.rs module comment): what the item
        // unmapped, then what it maps.
        for (s, l) in a.freed {
            core.alloc.set_free(s, l).map_err(|e| e.to_string())?;
        }
        for (s, l) in a.used {
            core.alloc.set_used(s, l).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The write-back trigger (changes pending), the page cache's bytes and the directory
/// filters' bytes for a budget of `metadata_cache`: a write-back starts at an eighth,
/// committers wait at a quarter, the filters get a sixteenth (dirfilter.rs: 1,000,000
/// entries at 8 bits each in 16 MiB, 10,000,000 in the default 256 MiB) and the pages the
/// rest of half.
pub fn budget(metadata_cache: u64) -> (u64, u64, u64) {
    let filters = metadata_cache / 16;
    (
        (metadata_cache / 8).max(1 << 20),
        metadata_cache / 2 - filters,
        filters,
    )
}

fn rand_bytes() -> [u8; 8] {
    let u = uuid::Uuid::new_v4();
    let mut a = [0u8; 8];
    a.copy_from_slice(&u.as_bytes()[..8]);
    a
}

impl Inner {
    fn make_root(&self) -> Result<()> {
        let now = Timespec::now();
        let res = self.reserve(0)?;
        let csn = {
            let mut g = self.wr();
            if g.meta_opt(ROOT_INO.0)?.is_some() {
                return Ok(());
            }
            let m = Meta {
                mode: 0o755,
                nlink: 2,
                change: 1,
                parent: ROOT_INO.0,
                ..Meta::new(1, FileType::Directory, now)
            };
            let items = vec![m.core_item(ROOT_INO.0)];
            self.commit_locked(&mut g, res, items, vec![Inner::tx(ROOT_INO.0, false)])?
        };
        self.force(csn)?;
        Ok(())
    }

    /// Unlinked inodes that were kept for an open (or half-removed at a crash): no open
    /// survives a restart, so free them now. They are indexed (keys.rs orphan records), so
    /// this reads only them.
    fn free_orphans(&self) -> Result<()> {
        let mut from = 0;
        let mut freed = 0u64;
        let mut note = Instant::now();
        loop {
            let batch = self.rd().marked(K_ORPHAN, from, 256)?;
            let Some(&last) = batch.last() else {
                if freed > 0 {
                    tracing::info!("store mount: {freed} unlinked inodes freed");
                }
                return Ok(());
            };
            if note.elapsed() >= PROGRESS_EVERY {
                note = Instant::now();
                tracing::info!(
                    "store mount: {freed} unlinked inodes freed, next batch of {} from inode {}",
                    batch.len(),
                    batch[0]
                );
            }
            freed += batch.len() as u64;
            for ino in batch {
                let res = self.reserve(0)?;
                let mut g = self.wr();
                let items = vec![metalog::Item::InodeFree { ino }];
                self.commit_locked(&mut g, res, items, vec![Inner::tx(ino, false)])?;
            }
            from = last + 1;
        }
    }

    /// The log forces everything, calls our write-back, moves its tail and writes the
    /// clean-unmount record: the next mount replays nothing. Then the mount mark is cleared.
    pub(super) fn unmount(&self) -> Result<()> {
        self.log.unmount().map_err(log_err)?;
        let sb = Superblock {
            mounted: None,
            ..self.sb
        };
        self.dev.write_fua(&sb.encode(), 0)?;
        Ok(())
    }

    /// Writes "mounted by this host since now" into the superblock (durable before anything is
    /// served) and returns the mark an earlier mount left, if any: that mount did not end with
    /// a clean unmount, or another pnfsd is serving the volume now.
    fn mark_mounted(&self) -> Result<Option<MountMark>> {
        let stale = self.sb.mounted;
        if let Some(m) = &stale {
            tracing::warn!(
                "volume {}: the superblock says it is mounted by {}; that pnfsd stopped without \
                 a clean unmount, or is still serving this volume (two servers on one volume \
                 corrupt it: stop one)",
                uuid::Uuid::from_bytes(self.sb.uuid),
                describe_mark(m)
            );
        }
        let mark = MountMark::new(&host_name(), std::process::id(), Timespec::now().sec);
        let sb = Superblock {
            mounted: Some(mark),
            ..self.sb
        };
        self.dev.write_fua(&sb.encode(), 0)?;
        Ok(stale)
    }
}

/// "host H (pid P) since T", T in RFC 3339 UTC: what mkfs and a mount say about a mark.
pub fn describe_mark(m: &MountMark) -> String {
    let since = std::time::UNIX_EPOCH + std::time::Duration::from_secs(m.since.max(0) as u64);
    format!(
        "host {} (pid {}) since {}",
        m.host(),
        m.pid,
        humantime::format_rfc3339_seconds(since)
    )
}

/// Whether the pnfsd that made mark `m` is still running: it names this machine and a live
/// process called pnfsd that is not this one (a mark of this very process is an earlier
/// mount of its own). A mark of another machine cannot be checked from here: mount and
/// mkfs --force only warn about it (a crash leaves one behind).
pub fn mark_is_live(m: &MountMark) -> bool {
    if m.host() != host_name() || m.pid == std::process::id() {
        return false;
    }
    // `/proc/PID/stat` is "PID (COMM) STATE …": a zombie (Z) or dead (X) process serves
    // nothing (a killed server its parent has not reaped yet).
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", m.pid)) else {
        return false;
    };
    let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
        return false;
    };
    let comm = &stat[open + 1..close];
    let state = stat[close + 1..].trim_start().chars().next();
    comm.starts_with("pnfsd") && !matches!(state, Some('Z' | 'X') | None)
}

/// This machine's name as the kernel has it (uname -n); "unknown" if it cannot be read.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use metalog::{BlockDev, CrashDev};

    use super::super::{tests::VOL, Store, StoreOptions};
    use super::*;

    fn on_disk(dev: &dyn BlockDev) -> Option<MountMark> {
        let mut b0 = vec![0u8; BLOCK as usize];
        dev.read_at(&mut b0, 0).unwrap();
        Superblock::decode(&b0).unwrap().mounted
    }

    #[test]
    fn the_mount_mark_is_written_at_mount_and_cleared_by_a_clean_unmount() {
        let dev = Arc::new(CrashDev::new(VOL, 7));
        Store::mkfs_dev(dev.clone(), false).unwrap();
        assert_eq!(on_disk(&*dev), None, "mkfs leaves the volume unmounted");
        let before = Timespec::now().sec;
        let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
        assert_eq!(s.mount_stats().stale_mark, None);
        let m = on_disk(&*dev).expect("marked at mount");
        assert_eq!((m.host(), m.pid), (host_name(), std::process::id()));
        assert!(m.since >= before && m.since <= Timespec::now().sec);
        s.unmount().unwrap();
        drop(s);
        assert_eq!(on_disk(&*dev), None, "cleared by the clean unmount");
        // The next mount after a clean unmount finds no mark.
        let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
        assert_eq!(s.mount_stats().stale_mark, None);
        s.unmount().unwrap();
    }

    /// A namespace marked by a pnfsd running on this machine is neither mounted nor
    /// formatted, --force or not; a mark of a process that is gone (or of this one) is not live.
    #[test]
    fn a_live_mark_refuses_mount_and_mkfs_force() {
        let dev = Arc::new(CrashDev::new(VOL, 9));
        Store::mkfs_dev(dev.clone(), false).unwrap();
        let mut b0 = vec![0u8; BLOCK as usize];
        dev.read_at(&mut b0, 0).unwrap();
        let sb = Superblock::decode(&b0).unwrap();
        // A live pnfsd of this machine: a child process named pnfsd (sleep, run through a
        // link of that name: a process's comm is the name it was executed by).
        let bin = tempfile::tempdir().unwrap();
        let link = bin.path().join("pnfsd");
        std::os::unix::fs::symlink("/bin/sleep", &link).unwrap();
        let mut child = std::process::Command::new(&link).arg("30").spawn().unwrap();
        let pid = child.id();
        let comm_is_pnfsd = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains("(pnfsd)"))
        };
        let t0 = std::time::Instant::now();
        while !comm_is_pnfsd() && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mark = MountMark::new(&host_name(), pid, 1_800_000_000);
        assert!(mark_is_live(&mark));
        let marked = Superblock {
            mounted: Some(mark),
            ..sb
        };
        dev.write_at(&marked.encode(), 0).unwrap();
        let e = Store::open_dev(dev.clone(), StoreOptions::default())
            .err()
            .unwrap();
        assert!(matches!(e, StoreError::Served(_)), "{e}");
        assert!(e.to_string().contains(&format!("pid {pid}")), "{e}");
        let e = Store::mkfs_dev(dev.clone(), true).unwrap_err();
        assert!(matches!(e, StoreError::Served(_)), "{e}");
        // The volume is untouched: once that process is gone, it mounts (a stale mark).
        // Killed and not reaped yet, it is a zombie that still has its comm: not live.
        child.kill().unwrap();
        let t0 = std::time::Instant::now();
        while mark_is_live(&mark) && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(comm_is_pnfsd() && !mark_is_live(&mark));
        child.wait().unwrap();
        assert!(!mark_is_live(&mark));
        let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
        assert_eq!(s.mount_stats().stale_mark, Some(mark));
        s.unmount().unwrap();
        // Other machines' marks and this process's own are not live.
        assert!(!mark_is_live(&MountMark::new("another-host", pid, 1)));
        assert!(!mark_is_live(&MountMark::new(
            &host_name(),
            std::process::id(),
            1
        )));
    }

    #[test]
    fn a_mark_left_by_a_crash_is_reported_and_named_by_mkfs() {
        let dev = Arc::new(CrashDev::new(VOL, 8));
        Store::mkfs_dev(dev.clone(), false).unwrap();
        let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
        let m = on_disk(&*dev).unwrap();
        // Power loss: the mark (written with FUA) survives, the unmount never ran.
        let survivor = Arc::new(dev.crash());
        dev.freeze();
        drop(s);
        assert_eq!(on_disk(&*survivor), Some(m));
        // What mkfs without --force names it by (the server's preflight.rs tests that).
        let since = describe_mark(&m);
        assert!(since.contains(&host_name()) && since.contains('T') && since.ends_with('Z'));
        // The next mount reports the stale mark, then marks the volume as its own.
        let s = Store::open_dev(survivor.clone(), StoreOptions::default()).unwrap();
        assert_eq!(s.mount_stats().stale_mark, Some(m));
        assert!(on_disk(&*survivor).is_some());
        s.unmount().unwrap();
        drop(s);
        // --force formats over a marked volume; the new volume is unmarked.
        let s = Store::open_dev(survivor.clone(), StoreOptions::default()).unwrap();
        let survivor2 = Arc::new(survivor.crash());
        survivor.freeze();
        drop(s);
        assert!(on_disk(&*survivor2).is_some());
        assert!(matches!(
            Store::mkfs_dev(survivor2.clone(), false),
            Err(StoreError::Exist)
        ));
        Store::mkfs_dev(survivor2.clone(), true).unwrap();
        assert_eq!(on_disk(&*survivor2), None);
    }
}
