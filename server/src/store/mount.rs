//! mkfs, mount (superblock → object table → log replay → allocator rebuild) and unmount.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use layout::{Allocator, Geometry, Superblock};
use metalog::{BlockDev, FileDev, FlushSeq, Log, LogOptions, Writeback};

use super::inner::{io_err, Core, Inner, MountStats};
use super::inode::{Meta, State};
use super::writeback::{self, table_blocks};
use super::{FileType, Result, StoreError, StoreOptions, Timespec, BLOCK, ROOT_INO};

/// Zero-write in pieces of this size (bounded memory for a 256 MiB log).
const ZERO_CHUNK: u64 = 1 << 20;

fn zero_region(dev: &dyn BlockDev, start_block: u64, blocks: u64) -> Result<()> {
    let zeros = vec![0u8; ZERO_CHUNK as usize];
    let (mut off, end) = (start_block * BLOCK, (start_block + blocks) * BLOCK);
    while off < end {
        let n = ZERO_CHUNK.min(end - off) as usize;
        dev.write_at(&zeros[..n], off).map_err(io_err)?;
        off += n as u64;
    }
    Ok(())
}

pub fn mkfs_path(path: &Path, size: u64, force: bool) -> Result<()> {
    let dev: Arc<dyn BlockDev> = if path.exists() {
        // A regular file smaller than asked grows (sparse); a block device keeps its size.
        let md = std::fs::metadata(path).map_err(io_err)?;
        if md.is_file() && md.len() < size {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io_err)?;
            f.set_len(size).map_err(io_err)?;
        }
        Arc::new(FileDev::open(path).map_err(io_err)?)
    } else {
        Arc::new(FileDev::create(path, size).map_err(io_err)?)
    };
    mkfs_dev(dev, force)
}

/// Lay out a volume: superblock, internal log, metadata area, data area (design.md §2).
pub fn mkfs_dev(dev: Arc<dyn BlockDev>, force: bool) -> Result<()> {
    let mut b0 = vec![0u8; BLOCK as usize];
    if dev.size() >= BLOCK {
        dev.read_at(&mut b0, 0).map_err(io_err)?;
    }
    if Superblock::looks_formatted(&b0) && !force {
        return Err(StoreError::Exist);
    }
    let g = Geometry::for_volume(dev.size()).map_err(|e| StoreError::Io(e.to_string()))?;
    let uuid = *uuid::Uuid::new_v4().as_bytes();
    // The log region is zero-written, not left sparse, by `Log::format` below: a later log
    // write then never allocates file blocks, so its `fdatasync` never has to commit
    // filesystem metadata (design.md §3).
    // The object table must read as "never used" (a `--force` over an old volume); object
    // blocks and data blocks stay sparse.
    zero_region(&*dev, g.meta_start, table_blocks(&g))?;
    Log::format(dev.clone(), g.log_start * BLOCK, g.log_blocks * BLOCK, uuid).map_err(io_err)?;
    dev.flush().map_err(io_err)?;
    let created = Timespec::now().sec;
    let sb = Superblock {
        uuid,
        features: 0,
        geometry: g,
        created,
    };
    // Superblock last and durable: a crash during mkfs leaves an unformatted volume.
    dev.write_fua(&sb.encode(), 0).map_err(io_err)?;
    let inner = open_dev(dev, StoreOptions::default())?;
    inner.make_root()?;
    inner.unmount()
}

pub fn open_dev(dev: Arc<dyn BlockDev>, opts: StoreOptions) -> Result<Arc<Inner>> {
    let mut b0 = vec![0u8; BLOCK as usize];
    dev.read_at(&mut b0, 0).map_err(io_err)?;
    let sb = Superblock::decode(&b0).map_err(|e| StoreError::Io(e.to_string()))?;
    let g = sb.geometry;
    if g.total_blocks * BLOCK > dev.size() {
        return Err(StoreError::Io(
            "volume is smaller than its superblock says".into(),
        ));
    }
    let t0 = std::time::Instant::now();
    let (wb, mut st) = writeback::load(&*dev, &g)?;
    let load_ms = t0.elapsed().as_millis() as u64;
    let t1 = std::time::Instant::now();
    let loaded = st.inodes.len() as u64;
    let mut replayed = 0u64;
    let flush = Arc::new(FlushSeq::new(dev.clone()));
    let lopts = LogOptions {
        force_interval: opts.log_force_interval,
        // Internal log: its own flush covers the clients' data (design.md §2).
        external_data: None,
    };
    let log = Log::mount(
        dev.clone(),
        g.log_start * BLOCK,
        g.log_blocks * BLOCK,
        sb.uuid,
        flush.clone(),
        lopts,
        &mut |_csn, item| {
            replayed += 1;
            st.apply(item).map(|_| ())
        },
    )
    .map_err(io_err)?;
    let log_mount_ms = t1.elapsed().as_millis() as u64;
    let alloc = rebuild_alloc(&st, &g)?;
    let boot = {
        let now = Timespec::now();
        (now.sec as u64) << 20 ^ now.nsec as u64 ^ u64::from_le_bytes(rand_bytes())
    };
    let inner = Arc::new(Inner {
        dev,
        flush,
        log,
        sb,
        opts,
        boot,
        max_ino: writeback::max_ino(&g),
        core: RwLock::new(Core {
            s: st,
            alloc,
            busy: Vec::new(),
        }),
        meta_free: std::sync::atomic::AtomicU64::new(wb.meta_alloc.free_blocks()),
        wb: Mutex::new(wb),
        open_probe: RwLock::new(None),
        io: Mutex::new(Default::default()),
        file_locks: (0..super::inner::FILE_LOCK_SHARDS)
            .map(|_| Mutex::new(()))
            .collect(),
        mount_stats: MountStats {
            objects_loaded: loaded,
            items_replayed: replayed,
            load_ms,
            log_mount_ms,
        },
    });
    let w: std::sync::Weak<dyn Writeback> =
        Arc::downgrade(&inner) as std::sync::Weak<dyn Writeback>;
    inner.log.set_writeback(w);
    inner.free_orphans()?;
    Ok(inner)
}

fn rand_bytes() -> [u8; 8] {
    let u = uuid::Uuid::new_v4();
    let mut a = [0u8; 8];
    a.copy_from_slice(&u.as_bytes()[..8]);
    a
}

/// Free space = the data area minus every extent of every inode. Derived, never logged, so
/// it cannot disagree with the extent maps after a crash.
fn rebuild_alloc(st: &State, g: &Geometry) -> Result<Allocator> {
    let mut a = Allocator::new_free(g.data_start, g.data_blocks);
    for (ino, i) in &st.inodes {
        for (_, p, l, _) in i.ext.iter() {
            a.mark_used(p, l)
                .map_err(|e| StoreError::Io(format!("inode {ino}: extent {p}+{l}: {e}")))?;
        }
    }
    Ok(a)
}

impl Inner {
    fn make_root(&self) -> Result<()> {
        let now = Timespec::now();
        let res = self.reserve(0)?;
        let csn = {
            let mut g = self.wr();
            if g.s.inodes.contains_key(&ROOT_INO.0) {
                return Ok(());
            }
            let m = Meta {
                gen: 1,
                ftype: FileType::Directory,
                mode: 0o755,
                uid: 0,
                gid: 0,
                nlink: 2,
                rdev: (0, 0),
                size: 0,
                atime: now,
                mtime: now,
                ctime: now,
                crtime: now,
                change: 1,
                parent: ROOT_INO.0,
            };
            let items = vec![m.core_item(ROOT_INO.0)];
            self.commit_locked(&mut g, res, items, vec![Inner::tx(ROOT_INO.0, false)])?
        };
        self.force(csn)?;
        Ok(())
    }

    /// Unlinked inodes that were kept for an open (or half-removed at a crash): no open
    /// survives a restart, so free them now.
    fn free_orphans(&self) -> Result<()> {
        let orphans: Vec<u64> = {
            let g = self.rd();
            g.s.inodes
                .iter()
                .filter(|(&ino, i)| i.m.nlink == 0 && ino != ROOT_INO.0)
                .map(|(&ino, _)| ino)
                .collect()
        };
        for ino in orphans {
            let res = self.reserve(0)?;
            let mut g = self.wr();
            let items = vec![metalog::Item::InodeFree { ino }];
            self.commit_locked(&mut g, res, items, vec![Inner::tx(ino, false)])?;
        }
        Ok(())
    }

    /// The log forces everything, calls our write-back, moves its tail and writes the
    /// clean-unmount record: the next mount replays nothing.
    pub fn unmount(&self) -> Result<()> {
        self.log.unmount().map_err(io_err)
    }
}
