//! The shared core of a mounted store: devices, log, the locked in-memory state, and the one
//! helper through which every change is applied and committed (`Inner::commit_locked`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use layout::{Allocator, Superblock};
use metalog::{BlockDev, Csn, FlushSeq, Item, Log, Reservation, Transaction, TxObject};

use super::inode::{Inode, State};
use super::writeback::Wb;
use super::{Ino, Result, StoreError, StoreOptions};

/// What the state lock protects.
pub struct Core {
    pub s: State,
    /// Free space of the data area.
    pub alloc: Allocator,
    /// Blocks freed by a transaction that may not be durable yet: reusing them before it is
    /// would let a crash hand another file's data to the old owner (XFS "busy extents").
    pub busy: Vec<Busy>,
}

/// A freed extent waiting to be reusable.
#[derive(Debug, Clone, Copy)]
pub struct Busy {
    /// The CSN of the freeing transaction: reusable once durable.
    pub csn: u64,
    /// Data I/O tickets below this one may still target the blocks (a READ or WRITE that
    /// looked the extent up before it was freed): reusable once they all ended.
    pub io_ticket: u64,
    pub phys: u64,
    pub len: u64,
}

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
    pub dev: Arc<dyn BlockDev>,
    /// Shared flushes of the data volume (the internal log uses the same device and sequence).
    pub flush: Arc<FlushSeq>,
    pub log: Arc<Log>,
    pub sb: Superblock,
    pub opts: StoreOptions,
    pub boot: u64,
    pub max_ino: u64,
    pub core: RwLock<Core>,
    pub wb: Mutex<Wb>,
    /// Free blocks of the metadata area after the last write-back (read without `wb`).
    pub meta_free: std::sync::atomic::AtomicU64,
    pub open_probe: RwLock<Option<OpenProbe>>,
    pub mount_stats: MountStats,
    pub io: Mutex<IoTrack>,
    /// Per-file data locks (sharded by inode number), taken before the state lock by WRITE,
    /// truncation, ALLOCATE, DEALLOCATE and block commits.
    pub file_locks: Vec<Mutex<()>>,
}

/// Shards of `Inner::file_locks`.
pub const FILE_LOCK_SHARDS: usize = 64;

/// What the mount had to do: objects read from the metadata area, log items replayed (0
/// after a clean unmount: the log part of the mount is O(1)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MountStats {
    pub objects_loaded: u64,
    pub items_replayed: u64,
    /// Time spent reading the object table and objects, and inside `Log::mount` (recovery).
    pub load_ms: u64,
    pub log_mount_ms: u64,
}

/// Log space reserved for a namespace transaction: the items of a rename (≤ 8 items of
/// ≤ 400 bytes with names) plus two record headers of metalog's bound (`tx_bound`).
const RESERVE_BASE: u64 = 8 * 400 + 2 * (4096 + 512);

/// The store's one conversion of a device or log error. ENOSPC — from the device, or the
/// log shut down by it — is `NoSpace` (NFS4ERR_NOSPC, issue 17); anything else is `Io`.
pub fn io_err<E: std::fmt::Display + 'static>(e: E) -> StoreError {
    let any = &e as &dyn std::any::Any;
    let enospc = any
        .downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.raw_os_error() == Some(libc::ENOSPC))
        || matches!(
            any.downcast_ref::<metalog::LogError>(),
            Some(metalog::LogError::NoDeviceSpace(_))
        );
    if enospc {
        return StoreError::NoSpace;
    }
    StoreError::Io(e.to_string())
}

impl Inner {
    pub fn rd(&self) -> RwLockReadGuard<'_, Core> {
        self.core.read().unwrap_or_else(|e| e.into_inner())
    }
    pub fn wr(&self) -> RwLockWriteGuard<'_, Core> {
        self.core.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserve log space for a transaction of about `extra` bytes of items, before taking the
    /// state lock: the log's write-back takes that lock, so a commit under it must never wait
    /// for log space (metalog `Log::reserve`, as XFS reserves before locking inodes).
    pub fn reserve(&self, extra: u64) -> Result<Reservation> {
        // Fixed part: a few inode cores (~100 bytes each) and two names, plus record headers.
        self.log.reserve(RESERVE_BASE + extra).map_err(io_err)
    }

    /// Apply `items` to the in-memory state and commit them as one transaction, in that
    /// order under the state lock, so the log's order is the memory's order (items are blind
    /// sets: two commits of one inode replayed out of order would resurrect the older one).
    /// Blocks the items free become busy until the transaction is durable.
    pub fn commit_locked(
        &self,
        core: &mut Core,
        res: Reservation,
        items: Vec<Item>,
        objects: Vec<TxObject>,
    ) -> Result<Csn> {
        let mut freed = Vec::new();
        for it in &items {
            freed.extend(core.s.apply(it).map_err(StoreError::Io)?);
        }
        let csn = self
            .log
            .commit_reserved(Transaction { items, objects }, res)
            .map_err(io_err)?;
        let io_ticket = self.io_now();
        for (phys, len) in freed {
            core.busy.push(Busy {
                csn: csn.0,
                io_ticket,
                phys,
                len,
            });
        }
        Ok(csn)
    }

    /// Force the log to `csn` (group-committed) and remember it is durable.
    pub fn force(&self, csn: Csn) -> Result<bool> {
        let f = self.log.force_seq(csn).map_err(io_err)?;
        Ok(f.wrote_log)
    }

    /// Force on a `sync` export (design.md §4 table), nothing on an `async` one.
    pub fn force_if_sync(&self, csn: Csn) -> Result<()> {
        if self.opts.sync {
            self.force(csn)?;
        }
        Ok(())
    }

    /// Give busy blocks whose freeing transaction is durable back to the allocator.
    pub fn reclaim_busy(&self, core: &mut Core) {
        let durable = self.log.durable_csn().0;
        let oldest_io = self.oldest_io();
        let mut keep = Vec::new();
        for b in std::mem::take(&mut core.busy) {
            if b.csn <= durable && b.io_ticket <= oldest_io {
                // A failure here means the block was never ours: dropping it is the safe side.
                let _ = core.alloc.free(b.phys, b.len);
            } else {
                keep.push(b);
            }
        }
        core.busy = keep;
    }

    /// Make every busy block reusable (forces the log): the slow path of a full allocator.
    pub fn drain_busy(&self) -> Result<()> {
        let last = self.log.last_committed();
        self.force(last)?;
        let mut g = self.wr();
        self.reclaim_busy(&mut g);
        Ok(())
    }

    /// Start a data I/O: blocks freed from now on are not reused until it ends.
    pub fn io_begin(&self) -> IoGuard<'_> {
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

    pub fn file_lock(&self, ino: Ino) -> MutexGuard<'_, ()> {
        let i = (ino.0 % FILE_LOCK_SHARDS as u64) as usize;
        self.file_locks[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Data-volume flush shared with concurrent callers (design.md §3 "Flush sharing");
    /// says whether this call issued the flush or joined another caller's.
    pub fn flush_data(&self) -> Result<metalog::FlushOutcome> {
        self.flush.flush().map_err(io_err)
    }

    pub fn tx(ino: u64, timestamps_only: bool) -> TxObject {
        TxObject {
            id: ino,
            timestamps_only,
        }
    }
}

/// Look up an inode a filehandle names: `Stale` if it is gone.
pub fn inode(core: &Core, ino: Ino) -> Result<&Inode> {
    core.s.inodes.get(&ino.0).ok_or(StoreError::Stale)
}
