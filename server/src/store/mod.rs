//! The metadata store: inodes, directories and per-file extent maps as keyed records of an
//! on-disk copy-on-write B+tree, paged through a bounded cache and changed only through
//! `metalog` transactions (design.md §2–4; docs/store.md).
//!
//! This is the API the NFS operations call. It knows nothing of NFS: no stateids, no XDR, no
//! `nfsstat4` (the mapping `StoreError -> NfsStat` lives in `nfs4/status.rs`). Every method is
//! synchronous and thread-safe; COMPOUNDs run on blocking threads. Locks are held only while the
//! in-memory state changes, never across a log force or device I/O of the log.
//!
//! Durability (design.md §4): on a `sync` export the mutating namespace calls (create, remove,
//! rename, link, setattr) return after `force_seq(commit_seq)` of the inodes they changed; on
//! an `async` export they return after the in-memory commit.
//!
//! ```text
//!  op ─▶ log.reserve ─▶ [state lock: check, build items, Core::apply, log.commit_reserved]
//!     ─▶ force_seq(csn) (sync export; lock dropped)          inner.rs, ns.rs, data.rs
//!  Core::apply ─▶ live changes (kv.rs) over the B+tree (btree.rs) read through the cache
//!  mount: superblock ─▶ checkpoint + free-space list ─▶ Log::mount replaying items through
//!         Core::apply ─▶ orphans freed                                        mount.rs
//!  changes past a bound / log half full / unmount ─▶ Writeback::write_back: merge into a
//!         new tree, new checkpoint; the log's tail moves                  writeback.rs
//! ```
//!
//! Where a method is: every public `Store` method is an `impl Store` in the file named for its
//! concept, and nowhere else. The file layer: `ns.rs` (lookup, create, remove, link, readdir,
//! readlink), `rename.rs`, `setattr.rs`, `data.rs` (read, write, commit, allocate,
//! deallocate, seek, release), `blocks.rs` (extents, alloc_unwritten, commit_blocks for
//! layouts), `layout_map.rs` (map_for_layout, trim_eof, files_past_eof), `copy.rs`,
//! `xattr.rs` (getxattr, setxattr, listxattrs, removexattr), `misc.rs` (getattr, fsstat,
//! client records). This file keeps the types of the API, the lifecycle (mkfs, open,
//! unmount; done in `mount.rs`) and the volume-wide counters. The file layer reaches what
//! lies under it through `Store: Deref<Target = Inner>` (`inner.rs`: the log, the locked
//! `Core` of `state.rs`, `commit_locked`, busy extents), whose items are `pub(super)`: the
//! one interface between the layers, invisible outside `store`.
//!
//! Under it, the tree layer: `btree.rs` (the on-disk copy-on-write B+tree), `cache.rs` (page
//! cache), `kv.rs` (changes over the tree), `keys.rs` (record keys and values), `format.rs`
//! (the checkpoint format), `meta_blocks.rs`, `writeback.rs` (write-back), with
//! `extents.rs` (keyed extent maps), `dirfilter.rs` (directory filters) and `inode.rs` (the
//! inode core, defined once: in-memory record, log item and record codec).

mod blocks;
mod btree;
mod cache;
mod copy;
pub use copy::{Copied, CopyMethod};
#[cfg(test)]
mod crash_tests;
mod data;
mod dirfilter;
#[cfg(test)]
mod dirfilter_tests;
mod extents;
mod format;
pub mod fuzzing;
mod inner;
mod inode;
mod keys;
mod kv;
mod layout_map;
mod meta_blocks;
mod misc;
#[cfg(test)]
mod model_tests;
mod mount;
pub use mount::{describe_mark, mark_is_live};
mod ns;
mod rename;
mod setattr;
mod state;
#[cfg(test)]
mod tests;
mod writeback;
mod xattr;

use std::sync::Arc;
use std::time::SystemTime;

pub use blocks::{BlockCommit, WrittenExtent};
pub use inner::{MountStats, OpenProbe};
pub use layout_map::{LayoutMap, Reach};
pub use meta_blocks::{MetaBlocks, MetaCheck};
pub use ns::{LINK_MAX, NAME_MAX};
pub use xattr::{XattrSet, XATTR_NAME_MAX, XATTR_SIZE_MAX};

/// Block size of the volume in bytes (layout::BLOCK_SIZE as u64).
pub const BLOCK: u64 = layout::BLOCK_SIZE as u64;
/// Largest file size: 1 PiB keeps every byte offset and block number far from overflow.
pub const MAX_FILE_SIZE: u64 = 1 << 50;

/// Inode number. `ROOT_INO` is the export's root directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ino(pub u64);

pub const ROOT_INO: Ino = Ino(1);

/// Seconds and nanoseconds since the epoch, as NFS `nfstime4` carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    pub fn now() -> Timespec {
        let d = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    BlockDev,
    CharDev,
    Fifo,
    Socket,
}

/// What CREATE / OPEN(create) makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewNode {
    Regular,
    Directory,
    Symlink(Vec<u8>),
    BlockDev { major: u32, minor: u32 },
    CharDev { major: u32, minor: u32 },
    Fifo,
    Socket,
}

/// The attributes of an inode, as the store keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    /// Bumped each time an inode number is reused; part of the filehandle.
    pub generation: u32,
    pub ftype: FileType,
    /// Permission bits (07777).
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Bytes of allocated blocks (written + unwritten).
    pub used: u64,
    pub rdev: (u32, u32),
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    /// NFS change attribute: strictly increases with every change of the inode.
    pub change: u64,
    /// Parent directory (directories only; the root is its own parent).
    pub parent: Ino,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    ServerNow,
    Client(Timespec),
}

/// SETATTR / CREATE attributes; `None` leaves a field alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttrs {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncate or extend; truncation frees the blocks past the new size.
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// The change attribute of a directory before and after an operation (NFS `change_info4`).
/// `atomic` is true: the store changes a directory under its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirChange {
    pub before: u64,
    pub after: u64,
}

/// REMOVE / RENAME may drop the last link of a file: the caller recalls its layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unlinked {
    pub ino: Ino,
    /// The inode is gone (last link dropped and no open keeps it; see `Store::release`).
    pub last_link: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Resume READDIR after this entry with this cookie; never 0, 1 or 2 (reserved by NFS).
    pub cookie: u64,
    pub name: Vec<u8>,
    pub attr: Attr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadDir {
    pub entries: Vec<DirEntry>,
    pub eof: bool,
    /// Changes when cookies of this directory become invalid.
    pub verifier: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stable {
    Unstable,
    DataSync,
    FileSync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekWhat {
    Data,
    Hole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStat {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub total_files: u64,
    pub free_files: u64,
}

/// Errors of the store. Each maps to one `nfsstat4` in `nfs4/status.rs`.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    #[error("no such file or directory")]
    NoEnt,
    #[error("file exists")]
    Exist,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("invalid argument")]
    Inval,
    #[error("name too long")]
    NameTooLong,
    #[error("bad name")]
    BadName,
    #[error("no space left on the volume")]
    NoSpace,
    #[error("file too big")]
    FileTooBig,
    #[error("stale inode")]
    Stale,
    #[error("wrong type for this operation")]
    WrongType,
    #[error("too many links")]
    TooManyLinks,
    #[error("cookie is no longer valid")]
    BadCookie,
    #[error("no such extended attribute")]
    NoXattr,
    #[error("extended attribute value too large")]
    XattrTooBig,
    #[error("the metadata log is shut down or failed: {0}")]
    Io(String),
    /// The device (or the file holding the volume) ran out of space under us: ENOSPC from
    /// the backing file system, not a full volume.
    #[error("the device holding the volume is full: {0}")]
    DeviceFull(String),
    /// Mount or mkfs of a volume whose superblock is marked mounted by a pnfsd that is running
    /// on this machine (an external namespace has no lock file: the mark is all there is).
    #[error(
        "the volume is marked mounted by {0}, and that pnfsd is running: two servers on one \
         volume corrupt it (stop it first; --force does not override a live mount)"
    )]
    Served(String),
}

/// The one conversion of device errors (style.md rule 3): ENOSPC of the backing file stays
/// apart from every other I/O error.
impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> StoreError {
        if e.kind() == std::io::ErrorKind::StorageFull {
            StoreError::DeviceFull(e.to_string())
        } else {
            StoreError::Io(e.to_string())
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// How the store is opened (from the config; see `config.rs`).
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// `sync` export (default): namespace changes are durable before the reply (design.md §4).
    pub sync: bool,
    /// How often the background worker forces the log so lazy timestamps reach the disk.
    pub log_force_interval: std::time::Duration,
    /// Bytes of metadata kept in memory (config `metadata_cache`, issue 11 item 2): changes
    /// not yet written back start a write-back at an eighth and make committers wait at a
    /// quarter; the page cache of tree nodes gets half (mount.rs `budget`).
    pub metadata_cache: u64,
}

/// `metadata_cache` by default: 256 MiB.
pub const DEFAULT_METADATA_CACHE: u64 = 256 << 20;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sync: true,
            log_force_interval: std::time::Duration::from_secs(30),
            metadata_cache: DEFAULT_METADATA_CACHE,
        }
    }
}

/// The metadata store of one volume.
pub struct Store {
    inner: Arc<inner::Inner>,
}

/// The file layer's methods (`impl Store` in ns.rs, data.rs, …) reach the tree layer and the
/// shared core through this: the log, the state lock, `commit_locked` (inner.rs). What `Inner`
/// offers is `pub(super)`, so nothing outside `store` sees it through a `Store`.
impl std::ops::Deref for Store {
    type Target = inner::Inner;

    fn deref(&self) -> &inner::Inner {
        &self.inner
    }
}

impl Store {
    /// Format `path` (a file, created sparse with `size` bytes if missing, or a block device).
    /// Refuses a formatted volume unless `force`.
    pub fn mkfs(path: &std::path::Path, size: u64, force: bool) -> Result<()> {
        mount::mkfs_path(path, size, force)
    }

    /// Mount a formatted volume: read the superblock, recover the log, rebuild the indexes.
    pub fn open(path: &std::path::Path, opts: StoreOptions) -> Result<Store> {
        Ok(Store {
            inner: mount::open_dev(Self::open_file(path)?, opts)?,
        })
    }

    /// The volume UUID (the block-layout signature, fsid and write-verifier source).
    pub fn volume_uuid(&self) -> [u8; 16] {
        self.inner.sb.uuid
    }

    /// Changes at every mount (NFS write verifier, READDIR verifier base, server boot epoch).
    pub fn boot_verifier(&self) -> u64 {
        self.inner.boot
    }

    /// The volume's block size (`layout_blksize`).
    pub fn block_size(&self) -> u32 {
        layout::BLOCK_SIZE
    }

    /// Clean unmount: force the log, write back, write the clean-unmount record.
    pub fn unmount(&self) -> Result<()> {
        self.inner.unmount()
    }
}

/// Mounting a device, the open probe, and the volume-wide counters.
impl Store {
    /// Format a device (tests use metalog's `CrashDev`).
    pub fn mkfs_dev(dev: Arc<dyn metalog::BlockDev>, force: bool) -> Result<()> {
        mount::mkfs_dev(dev, force)
    }

    /// Mount a formatted device.
    pub fn open_dev(dev: Arc<dyn metalog::BlockDev>, opts: StoreOptions) -> Result<Store> {
        Ok(Store {
            inner: mount::open_dev(dev, opts)?,
        })
    }

    fn open_file(path: &std::path::Path) -> Result<Arc<dyn metalog::BlockDev>> {
        let dev = metalog::FileDev::open(path)?;
        Ok(Arc::new(dev))
    }

    /// Tell the store how to ask whether an inode is open: REMOVE / RENAME of the last link of
    /// an open file keep it as an orphan until `release` (RFC 8881 §18.25.4 "silly rename").
    pub fn set_open_probe(&self, probe: OpenProbe) {
        *self
            .inner
            .open_probe
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Some(probe);
    }

    /// Merge every change into the tree on disk now (the log calls this itself when it
    /// needs space); returns the CSN the tree covers.
    pub fn write_back(&self) -> Result<metalog::Csn> {
        self.inner.write_back_now()
    }

    /// Counters of the write-back: (passes, tree nodes written).
    pub fn writeback_counters(&self) -> (u64, u64) {
        let wb = self.inner.wb.lock().unwrap_or_else(|e| e.into_inner());
        (wb.runs, wb.objects_written)
    }

    /// The metadata cache's lookups of tree nodes since mount: (hits, misses). A miss is a
    /// node read from the volume (read-ahead counts neither).
    pub fn metadata_cache_counts(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.inner.cache.hits.load(Relaxed),
            self.inner.cache.misses.load(Relaxed),
        )
    }

    /// The directory filters (dirfilter.rs) since mount: (lookups answered "absent" without
    /// reading the tree, lookups they could not answer, filters built, filters evicted).
    pub fn dir_filter_counts(&self) -> (u64, u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.inner.filter_counters;
        (
            c.hits.load(Relaxed),
            c.misses.load(Relaxed),
            c.builds.load(Relaxed),
            c.evictions.load(Relaxed),
        )
    }

    /// What the metadata takes: (tree nodes on disk, bytes of changes not yet written
    /// back, pages in the cache).
    pub fn metadata_usage(&self) -> (u64, u64, usize) {
        let nodes = self
            .inner
            .wb
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .ck
            .nodes;
        (
            nodes,
            self.inner
                .pending_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
            self.inner.cache.len(),
        )
    }

    /// Data-volume flushes `(issued, shared with another caller)` so far (LAYOUTCOMMIT
    /// counters, design.md §3 "Flush sharing").
    pub fn data_flush_counts(&self) -> (u64, u64) {
        (self.inner.flush.issued(), self.inner.flush.shared())
    }

    /// What the last mount read and replayed.
    pub fn mount_stats(&self) -> MountStats {
        self.inner.mount_stats.get().copied().unwrap_or_default()
    }

    /// The volume's superblock (geometry for layouts and GETDEVICEINFO).
    pub fn superblock(&self) -> layout::Superblock {
        self.inner.sb
    }

    /// The blocks the metadata holds among the data blocks (tree nodes, checkpoint blobs),
    /// for the NVMe target's guard: no host writes them (issue 12 item 4).
    pub fn meta_blocks(&self) -> Arc<MetaBlocks> {
        self.inner.meta_blocks.clone()
    }

    /// The metadata log (counters, `object_seqs`, forces for LAYOUTCOMMIT).
    pub fn log(&self) -> &Arc<metalog::Log> {
        &self.inner.log
    }
}
