//! [`Log`]: format, mount (with recovery), commit, force, tail and unmount.
//!
//! Locks, in the only order they nest: `cil` → `io`; `io` → `wk`/`wb`. No lock is held across
//! device I/O except FlushSeq's own bookkeeping (never hold the CIL lock across I/O).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::blockdev::BlockDev;
use crate::cil::{tx_bound, Cil};
use crate::flush::FlushSeq;
use crate::format::{build_record, LogSuperblock, BLOCK, F_UNMOUNT, HEADER_SIZE, SB_CLEAN};
use crate::geometry::Geometry;
use crate::iclog::IoState;
use crate::items::encode_item;
use crate::recover::{recover_clean, recover_scan, Recovered};
use crate::worker::WorkerReq;
use crate::{Csn, Forced, Item, LogCounters, LogError, LogOptions, Lsn, Transaction, Writeback};

#[derive(Default)]
pub(crate) struct Counters {
    pub commits: AtomicU64,
    pub forces: AtomicU64,
    pub forces_that_wrote: AtomicU64,
    pub log_writes: AtomicU64,
    pub log_bytes: AtomicU64,
    pub checkpoints: AtomicU64,
    pub flushes_issued: AtomicU64,
    pub flushes_shared: AtomicU64,
    pub wait_ns: AtomicU64,
    pub writebacks: AtomicU64,
    pub pushes_overlapped: AtomicU64,
}

/// Shared state of a mounted log (the worker thread holds it too).
pub(crate) struct Inner {
    pub geo: Geometry,
    pub dev: Arc<dyn BlockDev>,
    pub area_off: u64,
    pub area_len: u64,
    pub uuid: [u8; 16],
    pub log_flush: Arc<FlushSeq>,
    pub opts: LogOptions,
    pub max_payload: usize,
    /// Epoch of every record this mount writes (format.rs `RecordHeader::epoch`).
    pub epoch: u32,
    /// Push the CIL in the background past this many bytes: 1/8 of the log, XFS's
    /// XLOG_CIL_SPACE_LIMIT ratio, so a push never has to wait for much space.
    pub cil_push_bytes: u64,
    /// A second push may start while one is in flight once the CIL holds this many bytes
    /// (default `cil_push_bytes`; tests lower it to keep two buffers in flight).
    pub second_push_bytes: AtomicU64,
    /// Bytes in the CIL now (a lock-free copy for the push policy).
    pub cil_bytes: AtomicU64,
    pub cil: Mutex<Cil>,
    pub io: Mutex<IoState>,
    pub io_cond: Condvar,
    pub durable_csn: AtomicU64,
    pub ctr: Counters,
    wb: Mutex<Option<Weak<dyn Writeback>>>,
    wb_err: Mutex<Option<String>>,
    wk: Mutex<WorkerReq>,
    pub wk_cond: Condvar,
    /// Called with each force's wall time (`Log::set_force_observer`): the server's
    /// latency histogram; metalog keeps no distribution itself.
    pub force_observer: OnceLock<fn(Duration)>,
    /// What the shutdown line calls the log's device (`Log::set_device_name`).
    pub device_name: OnceLock<String>,
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic under one of these locks is a bug; the state itself stays consistent because
    // every critical section only does bookkeeping, so continue rather than cascade.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    pub(crate) fn lock_cil(&self) -> MutexGuard<'_, Cil> {
        relock(&self.cil)
    }
    pub(crate) fn lock_io(&self) -> MutexGuard<'_, IoState> {
        relock(&self.io)
    }
    pub(crate) fn lock_wk(&self) -> MutexGuard<'_, WorkerReq> {
        relock(&self.wk)
    }
    pub(crate) fn lock_wb(&self) -> MutexGuard<'_, Option<Weak<dyn Writeback>>> {
        relock(&self.wb)
    }
    pub(crate) fn lock_wb_err(&self) -> MutexGuard<'_, Option<String>> {
        relock(&self.wb_err)
    }
    pub(crate) fn has_writeback(&self) -> bool {
        self.lock_wb()
            .as_ref()
            .is_some_and(|w| w.strong_count() > 0)
    }
    pub(crate) fn take_writeback_error(&self) -> Option<String> {
        self.lock_wb_err().take()
    }
    pub(crate) fn kick_worker(&self, f: impl FnOnce(&mut WorkerReq)) {
        f(&mut self.lock_wk());
        self.wk_cond.notify_all();
    }
}

/// A mounted metadata log (see the crate doc).
///
/// Space: a commit waits when the log is full until write-back moves the tail. The worker
/// thread calls [`Writeback::write_back`] for that, and the store's write-back takes the
/// store's lock — so a store that commits while holding that lock must take a
/// [`Log::reserve`] reservation *before* taking it and commit with [`Log::commit_reserved`]
/// (as XFS reserves log space before it locks inodes).
pub struct Log {
    inner: Arc<Inner>,
    worker: Mutex<Option<JoinHandle<()>>>,
}

/// Log space reserved ahead of a commit; unused space returns when it is dropped.
pub struct Reservation {
    inner: Arc<Inner>,
    bytes: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            let mut io = self.inner.lock_io();
            io.reserved = io.reserved.saturating_sub(self.bytes);
            self.inner.io_cond.notify_all();
        }
    }
}

impl Log {
    /// Format a log in [offset, offset+len) of dev (zero-written, so fdatasync never commits FS metadata).
    pub fn format(
        dev: Arc<dyn BlockDev>,
        offset: u64,
        len: u64,
        uuid: [u8; 16],
    ) -> Result<(), LogError> {
        let g = Geometry::new(dev, offset, len, uuid)?;
        let zero = vec![0u8; (1u64 << 20).min(len) as usize];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zero.len() as u64) as usize;
            g.dev.write_at(&zero[..n], offset + at)?;
            at += n as u64;
        }
        // An unmount record at LSN 0 so the first mount is a clean, O(1) one.
        let rec = build_record(uuid, 1, F_UNMOUNT, Lsn(0), Csn(0), Lsn(0), &[]);
        g.write_area(0, &rec)?;
        g.dev.write_at(&g.superblock(Some(0), 0), offset)?;
        g.dev.flush()?;
        Ok(())
    }

    /// Mount: find head/tail (O(1) after a clean unmount record), replay complete checkpoints in CSN order
    /// through `replay(csn, &item)`, stop at a torn record. `log_flush` is the FlushSeq of the log's device
    /// (so log flushes count as device flushes for the data on that device).
    pub fn mount(
        dev: Arc<dyn BlockDev>,
        offset: u64,
        len: u64,
        uuid: [u8; 16],
        log_flush: Arc<FlushSeq>,
        opts: LogOptions,
        replay: &mut dyn FnMut(Csn, &Item) -> Result<(), String>,
    ) -> Result<Arc<Log>, LogError> {
        let g = Geometry::new(dev, offset, len, uuid)?;
        let mut sbb = vec![0u8; BLOCK as usize];
        g.dev.read_at(&mut sbb, offset)?;
        let sb = LogSuperblock::from_block(&sbb)
            .ok_or_else(|| LogError::Corrupt("no log superblock".into()))?;
        if sb.uuid != uuid {
            return Err(LogError::Invalid("log UUID mismatch".into()));
        }
        if sb.area_len != g.area_len {
            return Err(LogError::Invalid(
                "log size differs from the formatted size".into(),
            ));
        }
        let clean = if sb.flags & SB_CLEAN != 0 {
            recover_clean(&g, sb.clean_lsn, replay)?
        } else {
            None
        };
        let rec = match clean {
            Some(r) => r,
            None => recover_scan(&g, sb.mount_lsn, replay)?,
        };
        // Mark the log in use before any new record can follow the unmount record.
        g.dev.write_fua(&g.superblock(None, rec.head), offset)?;
        Ok(Self::start(g, rec, log_flush, opts))
    }

    fn start(g: Geometry, rec: Recovered, log_flush: Arc<FlushSeq>, opts: LogOptions) -> Arc<Log> {
        let max_payload = (g.max_rec() as usize) - HEADER_SIZE;
        let area_len = g.area_len;
        let inner = Arc::new(Inner {
            dev: g.dev.clone(),
            area_off: g.area_off,
            area_len,
            uuid: g.uuid,
            geo: g,
            log_flush,
            opts,
            max_payload,
            epoch: rec.epoch,
            cil_push_bytes: area_len / 8,
            second_push_bytes: AtomicU64::new(area_len / 8),
            cil_bytes: AtomicU64::new(0),
            cil: Mutex::new(Cil::new(rec.next_csn)),
            io: Mutex::new(IoState {
                next_lsn: rec.head,
                tail: rec.tail,
                durable_tail: rec.tail,
                pushed_csn: rec.next_csn - 1,
                flights: VecDeque::new(),
                pushes: 0,
                ckpts: VecDeque::new(),
                reserved: 0,
                shutdown: None,
                space_waiters: 0,
                tail_record_busy: false,
            }),
            io_cond: Condvar::new(),
            durable_csn: AtomicU64::new(rec.next_csn - 1),
            ctr: Counters::default(),
            wb: Mutex::new(None),
            wb_err: Mutex::new(None),
            wk: Mutex::new(WorkerReq::default()),
            wk_cond: Condvar::new(),
            force_observer: OnceLock::new(),
            device_name: OnceLock::new(),
        });
        let w = inner.clone();
        let handle = std::thread::Builder::new()
            .name("metalog-worker".into())
            .spawn(move || crate::worker::run(w))
            .ok();
        Arc::new(Log {
            inner,
            worker: Mutex::new(handle),
        })
    }

    /// Ask the worker for a write-back round soon (the store's own trigger: its in-memory
    /// changes are bounded too, not only the log space). Never waits.
    pub fn kick_writeback(&self) {
        self.inner.kick_worker(|w| w.writeback = true);
    }

    /// Register the store's write-back (held weakly: the store owns the log, not the reverse).
    pub fn set_writeback(&self, wb: Weak<dyn Writeback>) {
        *self.inner.lock_wb() = Some(wb);
    }

    /// Cheap: append to the CIL of the current CSN, set per-object commit_seq (and datasync_seq unless
    /// timestamps_only); never waits for I/O, except it waits for tail space when the log is full.
    pub fn commit(&self, tx: Transaction) -> Result<Csn, LogError> {
        self.inner.commit(tx, None)
    }

    /// Upper bound of the log space `tx` needs (for [`Log::reserve`]).
    pub fn tx_space(&self, tx: &Transaction) -> u64 {
        let mut enc = Vec::new();
        for it in &tx.items {
            encode_item(it, &mut enc);
        }
        tx_bound(enc.len(), self.inner.max_payload)
    }

    /// Reserve `bytes` of log space, waiting for the tail if needed. Call it before taking
    /// locks that write-back needs; then [`Log::commit_reserved`] never waits.
    pub fn reserve(&self, bytes: u64) -> Result<Reservation, LogError> {
        self.inner
            .wait_space_then(bytes, |io| io.reserved += bytes)?;
        Ok(Reservation {
            inner: self.inner.clone(),
            bytes,
        })
    }

    /// Commit using a reservation; never waits (overdraws a short reservation into the
    /// log's slack, or fails with `NoSpace` if even that is gone).
    pub fn commit_reserved(&self, tx: Transaction, mut res: Reservation) -> Result<Csn, LogError> {
        let b = std::mem::take(&mut res.bytes);
        self.inner.commit(tx, Some(b))
    }

    /// Make every checkpoint up to `seq` durable (group commit; see [`Forced`]).
    pub fn force_seq(&self, seq: Csn) -> Result<Forced, LogError> {
        self.inner.force_seq(seq)
    }

    /// Make everything committed so far durable.
    pub fn force_all(&self) -> Result<Forced, LogError> {
        self.inner.force_seq(Csn(u64::MAX))
    }

    /// (commit_seq, datasync_seq) of an object; None once durable (cleared).
    pub fn object_seqs(&self, id: u64) -> (Option<Csn>, Option<Csn>) {
        self.inner.object_seqs(id)
    }

    /// __xfs_log_force_inode: force to the object's datasync_seq (datasync) or commit_seq; Forced{wrote_log:false} if none.
    pub fn force_object(&self, id: u64, datasync: bool) -> Result<Forced, LogError> {
        let (c, d) = self.inner.object_seqs(id);
        match if datasync { d } else { c } {
            Some(seq) => self.inner.force_seq(seq),
            None => {
                if let Some(e) = &self.inner.lock_io().shutdown {
                    return Err(e.clone());
                }
                Ok(Forced { wrote_log: false })
            }
        }
    }

    /// CSN of the last commit.
    pub fn last_committed(&self) -> Csn {
        Csn(self.inner.last_committed())
    }

    /// Highest CSN known durable.
    pub fn durable_csn(&self) -> Csn {
        Csn(self.inner.durable_csn.load(Ordering::Acquire))
    }

    /// (tail, head) LSNs in memory.
    pub fn tail_head(&self) -> (Lsn, Lsn) {
        let io = self.inner.lock_io();
        (Lsn(io.tail), Lsn(io.next_lsn))
    }

    /// Move the tail past `upto` now (normally the worker does this after write-back).
    pub fn move_tail(&self, upto: Csn) -> Result<(), LogError> {
        self.inner.move_tail(upto)
    }

    /// Counters.
    pub fn counters(&self) -> LogCounters {
        let c = &self.inner.ctr;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LogCounters {
            commits: l(&c.commits),
            forces: l(&c.forces),
            forces_that_wrote: l(&c.forces_that_wrote),
            log_writes: l(&c.log_writes),
            log_bytes: l(&c.log_bytes),
            checkpoints: l(&c.checkpoints),
            flushes_issued: l(&c.flushes_issued),
            flushes_shared: l(&c.flushes_shared),
            wait_ns: l(&c.wait_ns),
            writebacks: l(&c.writebacks),
            pushes_overlapped: l(&c.pushes_overlapped),
        }
    }

    /// Tuning for tests and benchmarks: a force may start a second push while one is in flight
    /// once the CIL holds more than `bytes` (0: always, so two buffers are in flight as often
    /// as possible; default: 1/8 of the log).
    #[doc(hidden)]
    pub fn set_second_push_bytes(&self, bytes: u64) {
        self.inner.second_push_bytes.store(bytes, Ordering::Relaxed);
    }

    /// A one-line dump of the log's in-memory state, for test failure messages.
    pub fn debug_state(&self) -> String {
        let cil_csn = self.inner.lock_cil().csn;
        let io = self.inner.lock_io();
        format!(
            "cil_csn={cil_csn} durable_csn={} pushed={} next_lsn={} tail={} durable_tail={} reserved={} pushes={} flights={:?} waiters={} shutdown={:?} {:?}",
            self.inner.durable_csn.load(Ordering::Acquire),
            io.pushed_csn,
            io.next_lsn,
            io.tail,
            io.durable_tail,
            io.reserved,
            io.pushes,
            io.flights,
            io.space_waiters,
            io.shutdown,
            self.counters()
        )
    }

    /// Calls `f` with the wall time of every force from now on (the server's latency
    /// histogram). Set once: `false` if an observer was already set.
    pub fn set_force_observer(&self, f: fn(Duration)) -> bool {
        self.inner.force_observer.set(f).is_ok()
    }

    /// Names the log's device in the line a shutdown logs (the volume as the operator
    /// named it). Set once: `false` if a name was already set.
    pub fn set_device_name(&self, name: impl Into<String>) -> bool {
        self.inner.device_name.set(name.into()).is_ok()
    }

    /// Whether the log is shut down (after an I/O error or unmount), and why.
    pub fn shutdown_error(&self) -> Option<LogError> {
        self.inner.lock_io().shutdown.clone()
    }

    /// Force all, write back (if a write-back is registered), write the clean-unmount record and
    /// the superblock hint; the log is shut down afterwards and the worker stops.
    pub fn unmount(&self) -> Result<(), LogError> {
        let inner = &self.inner;
        inner.force_seq(Csn(u64::MAX))?;
        let wb = inner.lock_wb().as_ref().and_then(|w| w.upgrade());
        if let Some(wb) = wb {
            // Twice: the first round may release only up to the checkpoint before the one
            // open at its snapshot (worker.rs `writeback_once`).
            inner.writeback_once(&*wb)?;
            inner.writeback_once(&*wb)?;
        }
        // Relogged intents, or commits racing with unmount, must reach the log first. Wait
        // for pushes to drain without the CIL lock (a push needs it), then check both at once.
        let mut io = loop {
            inner.force_seq(Csn(u64::MAX))?;
            {
                let mut io = inner.lock_io();
                while io.shutdown.is_none() && (!io.flights.is_empty() || io.pushes > 0) {
                    io = inner.io_cond.wait(io).unwrap_or_else(|e| e.into_inner());
                }
            }
            let cil = inner.lock_cil();
            let io = inner.lock_io();
            if let Some(e) = &io.shutdown {
                return Err(e.clone());
            }
            if cil.ntx == 0 && io.flights.is_empty() && io.pushes == 0 {
                drop(cil);
                break io;
            }
        };
        if io.used() + BLOCK > inner.area_len - BLOCK {
            return Err(LogError::NoSpace);
        }
        let lsn = io.next_lsn;
        io.next_lsn += BLOCK;
        let tail = io.tail;
        let csn = io.pushed_csn;
        // From here on nothing else may be written or acknowledged.
        io.shutdown = Some(LogError::Shutdown);
        drop(io);
        inner.io_cond.notify_all();
        let rec = build_record(
            inner.uuid,
            inner.epoch,
            F_UNMOUNT,
            Lsn(lsn),
            Csn(csn),
            Lsn(tail),
            &[],
        );
        inner.write_area(lsn, &rec)?;
        inner.flush_log()?;
        inner.ctr.log_writes.fetch_add(1, Ordering::Relaxed);
        // The hint goes last: it must never name a record that is not durable.
        inner
            .dev
            .write_fua(&inner.geo.superblock(Some(lsn), lsn), inner.geo.region)?;
        self.stop_worker();
        Ok(())
    }

    fn stop_worker(&self) {
        self.inner.kick_worker(|w| w.stop = true);
        let h = relock(&self.worker).take();
        if let Some(h) = h {
            // The worker may drop the last reference to the store, and so to us: never join
            // ourselves.
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        self.stop_worker();
    }
}
