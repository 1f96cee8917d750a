//! metalog — the XFS-like metadata log of pnfsd (docs/design.md §2–4).
//!
//! ```text
//!  commit(tx) ──▶ CIL of CSN c (cil.rs) ── force_seq(c) ──▶ push: records at LSN l.. (iclog.rs)
//!      │ per-object commit_seq / datasync_seq          │ write_at ×n, then FlushSeq::flush (flush.rs)
//!      ▼                                               ▼
//!  Writeback (store) moves the tail ◀── background worker (worker.rs): 30 s force, space, CIL size
//!  mount: superblock hint (O(1)) or scan ─▶ recover.rs: head, tail, CRC, replay in CSN order
//! ```
//!
//! Owns: the on-disk log format (format.rs), typed idempotent items (items/), the committed item
//! list and checkpoint sequences, group commit with several buffers in flight, the flush rules
//! of docs/design.md §3, log space and tail, recovery, the [`BlockDev`] trait with a file device
//! and a crash-simulating device, and per-device flush sharing ([`FlushSeq`]).
//!
//! Never: knows anything of NFS or layouts, uses async runtimes (callers run on blocking
//! threads), holds the CIL lock across I/O, or acknowledges anything after a failed write or
//! flush (the log shuts down).
#![deny(unsafe_code)]

pub mod blockdev;
mod cil;
mod error;
pub mod flush;
pub mod format;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod geometry;
mod iclog;
pub mod items;
mod log;
mod recover;
mod worker;

use std::sync::Arc;
use std::time::Duration;

pub use blockdev::{BlockDev, CrashDev, Fault, FaultDev, FileDev};
pub use error::LogError;
pub use flush::{FlushOutcome, FlushSeq};
pub use items::Item;
pub use log::{Log, Reservation};

/// Checkpoint sequence number: every commit lands in the CIL of the current CSN.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Csn(pub u64);

/// Log sequence number: monotonic byte position in the log (physical = lsn mod area size).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

/// An object (inode) a transaction changed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TxObject {
    /// Object id (inode number).
    pub id: u64,
    /// The change touched only timestamps: `datasync_seq` does not move (docs/design.md §3, seed
    /// 002).
    pub timestamps_only: bool,
}

/// A transaction: items applied atomically at replay, and the objects it changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transaction {
    /// The logical changes.
    pub items: Vec<Item>,
    /// Objects whose sequence numbers this commit sets.
    pub objects: Vec<TxObject>,
}

/// Result of a force.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Forced {
    /// This call's wait included a log write whose device flush started after the call began,
    /// so every write to the log's device completed before the call is durable (XFS
    /// `log_flushed`). With an internal log the caller may then skip its data flush (docs/design.md
    /// §4).
    pub wrote_log: bool,
}

/// Mount options.
#[derive(Clone)]
pub struct LogOptions {
    /// Background force interval so lazy timestamps reach the disk (docs/design.md §3: 30 s, as
    /// XFS).
    pub force_interval: Duration,
    /// Some for an external log: the data device is flushed before a checkpoint that converts
    /// client-written extents is written (docs/design.md §2, §3).
    pub external_data: Option<Arc<FlushSeq>>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            force_interval: Duration::from_secs(30),
            external_data: None,
        }
    }
}

/// The metadata store's write-back, called by the log when it needs space (see [`Log`]).
pub trait Writeback: Send + Sync {
    /// Write back (outside the log) every change committed so far whose checkpoint is durable, and
    /// return the CSN up to which all changes are now durable outside the log. The log then moves its
    /// tail past that CSN. The store snapshots its dirty objects with the log's last committed CSN C
    /// under its lock, calls log.force_seq(C), writes them, and returns C.
    ///
    /// The log moves its tail past `C` only if checkpoint `C` was already closed when the
    /// call began (commits that join the open checkpoint after the snapshot are not in it);
    /// otherwise past `C - 1`, and the next call releases `C`. Called from the log's worker
    /// thread and from [`Log::unmount`], never with a log lock held.
    fn write_back(&self) -> Result<Csn, String>;
}

/// Counters.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct LogCounters {
    /// Transactions committed.
    pub commits: u64,
    /// Force calls (force_seq, force_all, force_object that had a sequence).
    pub forces: u64,
    /// Forces that returned `wrote_log: true`.
    pub forces_that_wrote: u64,
    /// Records written (a checkpoint is one or more records; tail and unmount records count).
    pub log_writes: u64,
    /// Bytes of records written.
    pub log_bytes: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Log-device flushes this log issued.
    pub flushes_issued: u64,
    /// Log-device flush requests of this log served by another caller's flush.
    pub flushes_shared: u64,
    /// Nanoseconds callers spent waiting in forces and for log space.
    pub wait_ns: u64,
    /// Times write-back was called to move the tail.
    pub writebacks: u64,
    /// Pushes started while another was in flight (two buffers in flight).
    pub pushes_overlapped: u64,
}
