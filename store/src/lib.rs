//! The metadata store: inodes, directories and per-file extent maps as keyed records of an
//! on-disk copy-on-write B+tree, paged through a bounded cache and changed only through
//! `metalog` transactions (docs/design.md §2–4; docs/store.md).
//!
//! This is the API the NFS operations call. It knows nothing of NFS: no stateids, no XDR, no
//! `nfsstat4` (the mapping `StoreError -> NfsStat` lives in the server's `nfs4/status.rs`). Every method is
//! synchronous and thread-safe; COMPOUNDs run on blocking threads. Locks are held only while the
//! in-memory state changes, never across a log force or device I/O of the log.
//!
//! Durability (docs/design.md §4): on a `sync` export the mutating namespace calls (create, remove,
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
//! client records). This file keeps `Store` itself, the lifecycle (mkfs, open, unmount; done
//! in `mount.rs`) and the volume-wide counters. The file layer reaches what
//! lies under it through `Store: Deref<Target = Inner>` (`inner.rs`: the log, the locked
//! `Core` of `state.rs`, `commit_locked`, busy extents), whose items are `pub(super)`: the
//! one interface between the layers, invisible outside this crate.
//!
//! Under it, from the bottom (tools/deps.py checks the order, no file imports a higher one):
//! `types.rs` (the API types, re-exported here); the tree layer: `btree.rs` (the on-disk
//! copy-on-write B+tree), `cache.rs` (page cache), `kv.rs` (changes over the tree), `keys.rs`
//! (record keys and values), `format.rs` (the checkpoint format, the write-back's state),
//! `meta_blocks.rs`, `extents.rs` (keyed extent maps), `dirfilter.rs` (directory filters),
//! `inode.rs` (the inode core, defined once: in-memory record, log item and record codec);
//! `state.rs` (the locked `Core`, `apply` of log items, keyed lookups); the shared core:
//! `inner.rs` (`Inner`, the apply-then-commit helper, busy extents, the threads it starts),
//! `writeback.rs` (the write-back pass over `Inner`), `mount.rs` (mkfs, mount, unmount).

// Unsafe code only where an item allows it, with a `// SAFETY:` comment: copy.rs
// (copy_file_range).
#![deny(unsafe_code)]

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
#[cfg(feature = "fuzzing")]
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
mod split;
pub use split::{SplitDev, SplitError};
mod state;
#[cfg(test)]
mod tests;
mod types;
mod writeback;
mod xattr;

use std::sync::Arc;

pub use blocks::{BlockCommit, WrittenExtent};
pub use inner::{MountStats, OpenProbe};
pub use layout_map::{LayoutMap, Reach};
pub use meta_blocks::{MetaBlocks, MetaCheck};
pub use ns::{LINK_MAX, NAME_MAX};
pub use types::{
    Attr, DirChange, DirEntry, FileType, FsStat, Ino, NewNode, ReadDir, Result, SeekWhat, SetAttrs,
    SetTime, Stable, StoreError, StoreOptions, Timespec, Unlinked, BLOCK, DEFAULT_METADATA_CACHE,
    MAX_FILE_SIZE, ROOT_INO,
};
pub use xattr::{XattrSet, XATTR_NAME_MAX, XATTR_SIZE_MAX};

/// The metadata store of one volume.
pub struct Store {
    inner: Arc<inner::Inner>,
}

/// The file layer's methods (`impl Store` in ns.rs, data.rs, …) reach the tree layer and the
/// shared core through this: the log, the state lock, `commit_locked` (inner.rs). What `Inner`
/// offers is `pub(super)`, so nothing outside this crate sees it through a `Store`.
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

    /// Format a split volume: the metadata member `meta` and the data member `data`
    /// (split.rs; docs/store.md "Split volume"). Refuses formatted members unless `force`.
    pub fn mkfs_split(
        meta: Arc<dyn metalog::BlockDev>,
        data: Arc<dyn metalog::BlockDev>,
        force: bool,
    ) -> Result<()> {
        mount::mkfs_split(meta, data, force)
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
    /// counters, docs/design.md §3 "Flush sharing").
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
    /// for the NVMe target's guard: no host writes them.
    pub fn meta_blocks(&self) -> Arc<MetaBlocks> {
        self.inner.meta_blocks.clone()
    }

    /// The metadata log (counters, `object_seqs`, forces for LAYOUTCOMMIT).
    pub fn log(&self) -> &Arc<metalog::Log> {
        &self.inner.log
    }
}
