//! Writing records: checkpoint pushes with several buffers in flight, forces (group commit),
//! durability bookkeeping, tail and space.
//!
//! A push takes the CIL's open checkpoint and allocates its LSN range under the CIL lock (so
//! checkpoints are laid out in CSN order), then formats and writes its records with no lock
//! held. Up to [`MAX_PUSHES`] pushes are in flight at once; a checkpoint counts as durable only
//! when it and every record before it completed, so `durable_csn` never runs ahead of a hole.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::format::{build_record, BLOCK, F_END, F_START, F_TAIL};
use crate::log::Inner;
use crate::{Csn, Forced, LogError, Lsn};

/// Checkpoint pushes in flight at once. A force pushes only when no push is in flight: the
/// commits that arrive meanwhile then ride together in the next checkpoint (group commit;
/// with a second forced push in flight the bench measured 5.4 commits per log write at 16
/// threads instead of ≥ 8). A second buffer goes in flight only for a CIL grown past
/// `cil_push_bytes` (background push, or a force finding it that big): then its write
/// overlaps the previous flush and the CIL does not grow without bound.
pub(crate) const MAX_PUSHES: usize = 2;

/// One record range written or being written.
#[derive(Debug)]
pub(crate) struct Flight {
    pub start: u64,
    #[allow(dead_code)] // kept for debugging output of in-flight ranges
    pub end: u64,
    /// CSN of the checkpoint this range completes, if any.
    pub ckpt: Option<u64>,
    /// Tail LSN carried in its header(s).
    pub tail: u64,
    pub done: bool,
    /// Counts against `MAX_PUSHES`.
    pub push: bool,
}

/// Log-wide I/O state, under `Inner::io`.
pub(crate) struct IoState {
    /// Next LSN to allocate (the head of what is written or being written).
    pub next_lsn: u64,
    /// In-memory tail: oldest LSN recovery still needs, after write-back.
    pub tail: u64,
    /// Tail carried by the newest record of the durable prefix: the area before it may be
    /// overwritten (recovery finds the tail from the records on disk).
    pub durable_tail: u64,
    /// Highest CSN whose records are allocated.
    pub pushed_csn: u64,
    pub flights: VecDeque<Flight>,
    pub pushes: usize,
    /// (csn, first LSN) of checkpoints not yet behind the tail.
    pub ckpts: VecDeque<(u64, u64)>,
    /// Space promised to the CIL and to reservations.
    pub reserved: u64,
    pub shutdown: Option<LogError>,
    pub space_waiters: usize,
    pub tail_record_busy: bool,
}

impl IoState {
    /// Area bytes that may not be overwritten or are being written.
    pub fn used(&self) -> u64 {
        self.next_lsn - self.durable_tail
    }
}

impl Inner {
    /// Area bytes commits may fill. Of the last three blocks, one is for tail records,
    /// relogged intents and overdrawn reservations (they free space or may not wait), one for
    /// the unmount record, and one always stays free so recovery can write its tail record
    /// without touching the records it replays.
    pub(crate) fn usable(&self) -> u64 {
        self.area_len - 3 * BLOCK
    }

    /// Limit for writes that free space or may not wait (see [`Inner::usable`]).
    pub(crate) fn overdraw_limit(&self) -> u64 {
        self.area_len - 2 * BLOCK
    }

    /// force_seq: group commit (docs/design.md §3).
    pub(crate) fn force_seq(&self, seq: Csn) -> Result<Forced, LogError> {
        self.ctr.forces.fetch_add(1, Ordering::Relaxed);
        let ticket = self.log_flush.ticket();
        let target = seq.0.min(self.last_committed());
        let t0 = Instant::now();
        let mut waited = false;
        let mut io = self.lock_io();
        loop {
            if let Some(e) = &io.shutdown {
                return Err(e.clone());
            }
            if self.durable_csn.load(Ordering::Acquire) >= target {
                break;
            }
            let slots = if io.pushes > 0
                && self.cil_bytes.load(Ordering::Relaxed)
                    >= self.second_push_bytes.load(Ordering::Relaxed)
            {
                MAX_PUSHES
            } else {
                1
            };
            if io.pushed_csn < target && io.pushes < slots {
                if io.pushes > 0 {
                    self.ctr.pushes_overlapped.fetch_add(1, Ordering::Relaxed);
                }
                io.pushes += 1;
                drop(io);
                waited = true;
                self.push(target)?;
                io = self.lock_io();
                continue;
            }
            waited = true;
            io = self.io_cond.wait(io).unwrap_or_else(|e| e.into_inner());
        }
        drop(io);
        if waited {
            self.ctr
                .wait_ns
                .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        if let Some(observe) = self.force_observer.get() {
            observe(t0.elapsed());
        }
        // Only a flush that began after this call began covers the caller's earlier writes.
        let wrote_log = waited && self.log_flush.flushed_since(ticket);
        if wrote_log {
            self.ctr.forces_that_wrote.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Forced { wrote_log })
    }

    /// Push the open checkpoint if it is `target` or older; the caller holds a push slot.
    fn push(&self, target: u64) -> Result<(), LogError> {
        // Let threads that the previous push just released commit into this checkpoint
        // before it closes: without this, forcers split into two halves that alternate
        // (N/2 commits per log write); costs ~1 µs when nobody else is runnable.
        std::thread::yield_now();
        let mut cil = self.lock_cil();
        if cil.csn > target || cil.ntx == 0 {
            drop(cil);
            let mut io = self.lock_io();
            io.pushes -= 1;
            self.io_cond.notify_all();
            return Ok(());
        }
        let bytes = cil.space(self.max_payload);
        let payload = std::mem::take(&mut cil.buf);
        self.cil_bytes.store(0, Ordering::Relaxed);
        let csn = cil.csn;
        let converts = cil.converts;
        cil.csn += 1;
        cil.ntx = 0;
        cil.converts = false;
        let mut io = self.lock_io();
        io.reserved = io.reserved.saturating_sub(bytes);
        if io.used() + bytes > self.overdraw_limit() {
            // Space accounting guarantees this never happens; writing would overwrite
            // records recovery needs, so stop instead.
            let e = LogError::Corrupt(format!(
                "log space accounting: {} used + {bytes} > {}",
                io.used(),
                self.area_len
            ));
            io.shutdown.get_or_insert(e.clone());
            io.pushes -= 1;
            self.io_cond.notify_all();
            return Err(e);
        }
        let start = io.next_lsn;
        io.next_lsn += bytes;
        io.pushed_csn = csn;
        io.ckpts.push_back((csn, start));
        let tail = io.tail;
        io.flights.push_back(Flight {
            start,
            end: start + bytes,
            ckpt: Some(csn),
            tail,
            done: false,
            push: true,
        });
        drop(io);
        drop(cil);

        let res = self.write_checkpoint(start, csn, tail, &payload, converts);
        self.complete(start, res)
    }

    fn write_checkpoint(
        &self,
        start: u64,
        csn: u64,
        tail: u64,
        payload: &[u8],
        converts: bool,
    ) -> Result<u64, LogError> {
        // External log: the clients' data must be on stable storage before a record that
        // makes its conversion durable can be (docs/design.md §2, §3: PREFLUSH of the data device).
        if converts {
            if let Some(data) = &self.opts.external_data {
                data.flush()?;
            }
        }
        let chunks: Vec<&[u8]> = if payload.is_empty() {
            vec![payload]
        } else {
            payload.chunks(self.max_payload).collect()
        };
        let n = chunks.len();
        let mut lsn = start;
        for (i, c) in chunks.into_iter().enumerate() {
            let mut flags = 0;
            if i == 0 {
                flags |= F_START;
            }
            if i + 1 == n {
                flags |= F_END;
            }
            let rec = build_record(
                self.uuid,
                self.epoch,
                flags,
                Lsn(lsn),
                Csn(csn),
                Lsn(tail),
                c,
            );
            self.write_area(lsn, &rec)?;
            lsn += rec.len() as u64;
            self.ctr.log_writes.fetch_add(1, Ordering::Relaxed);
            self.ctr
                .log_bytes
                .fetch_add(rec.len() as u64, Ordering::Relaxed);
        }
        self.ctr.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.flush_log()?;
        Ok(lsn)
    }

    /// The commit record is made durable by write + flush of the log device: the FUA form
    /// that also acts as the PREFLUSH for the clients' data on an internal log (docs/design.md §3),
    /// and that concurrent pushes and data flushes share through the device's FlushSeq.
    pub(crate) fn flush_log(&self) -> Result<(), LogError> {
        let out = self.log_flush.flush()?;
        if out.issued {
            self.ctr.flushes_issued.fetch_add(1, Ordering::Relaxed);
        } else {
            self.ctr.flushes_shared.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Write `buf` at `lsn`, splitting at the end of the circular area.
    pub(crate) fn write_area(&self, lsn: u64, buf: &[u8]) -> Result<(), LogError> {
        let pos = lsn % self.area_len;
        let first = ((self.area_len - pos) as usize).min(buf.len());
        self.dev.write_at(&buf[..first], self.area_off + pos)?;
        if first < buf.len() {
            self.dev.write_at(&buf[first..], self.area_off)?;
        }
        Ok(())
    }

    /// Record the outcome of the flight starting at `start`; advance the durable prefix.
    fn complete(&self, start: u64, res: Result<u64, LogError>) -> Result<(), LogError> {
        let mut io = self.lock_io();
        let Some(idx) = io.flights.iter().position(|f| f.start == start) else {
            return Err(LogError::Corrupt("lost flight".into()));
        };
        if io.flights[idx].push {
            io.pushes -= 1;
        }
        if let Err(e) = res {
            // After a failed write or flush nothing more is acknowledged.
            if io.shutdown.is_none() {
                io.shutdown = Some(e.clone());
                // The one line an operator needs: which device, what failed, what follows.
                tracing::error!(
                    device = self.device_name.get().map_or("(unnamed)", String::as_str),
                    log_offset = self.area_off,
                    error = %e,
                    "metadata log shut down after a failed log write or flush: changes are \
                     refused until pnfsd restarts (the log is replayed at the next mount)"
                );
            }
            self.io_cond.notify_all();
            return Err(e);
        }
        io.flights[idx].done = true;
        if io.shutdown.is_some() {
            self.io_cond.notify_all();
            return io.shutdown.clone().map_or(Ok(()), Err);
        }
        let mut advanced = false;
        while io.flights.front().is_some_and(|f| f.done) {
            let Some(f) = io.flights.pop_front() else {
                break;
            };
            io.durable_tail = io.durable_tail.max(f.tail);
            if let Some(c) = f.ckpt {
                self.durable_csn.fetch_max(c, Ordering::AcqRel);
                advanced = true;
            }
        }
        let pressure = io.used() + io.reserved > self.area_len / 2;
        self.io_cond.notify_all();
        drop(io);
        if advanced {
            self.clear_durable_objects();
        }
        // Start write-back early, at half the log, so committers rarely wait for space
        // (XFS pushes its AIL at 25% free for the same reason).
        if pressure {
            self.kick_worker(|w| w.space = true);
        }
        Ok(())
    }

    /// Move the in-memory tail past checkpoint `upto` (durable outside the log), and if
    /// someone waits for space, persist it with a tail record so the area can be reused.
    pub(crate) fn move_tail(&self, upto: Csn) -> Result<(), LogError> {
        let mut upto = upto.0.min(self.durable_csn.load(Ordering::Acquire));
        let before = self.lock_cil().csn;
        let pin = self.relog_intents(upto)?;
        if self.lock_cil().ntx > 0 && self.lock_cil().csn == before {
            // Push relogged intents soon so the next write-back can pass the old copies.
            self.kick_worker(|w| w.push = true);
        }
        if let Some(p) = pin {
            upto = upto.min(p.saturating_sub(1));
        }
        let mut io = self.lock_io();
        if let Some(e) = &io.shutdown {
            return Err(e.clone());
        }
        while io.ckpts.front().is_some_and(|&(c, _)| c <= upto) {
            io.ckpts.pop_front();
        }
        let new_tail = io.ckpts.front().map_or(io.next_lsn, |&(_, l)| l);
        io.tail = io.tail.max(new_tail);
        let want = io.tail > io.durable_tail
            && io.space_waiters > 0
            && !io.tail_record_busy
            && io.used() + io.reserved + BLOCK <= self.overdraw_limit();
        if !want {
            self.io_cond.notify_all();
            return Ok(());
        }
        io.tail_record_busy = true;
        let start = io.next_lsn;
        io.next_lsn += BLOCK;
        let tail = io.tail;
        let csn = io.pushed_csn;
        io.flights.push_back(Flight {
            start,
            end: start + BLOCK,
            ckpt: None,
            tail,
            done: false,
            push: false,
        });
        drop(io);
        let rec = build_record(
            self.uuid,
            self.epoch,
            F_TAIL,
            Lsn(start),
            Csn(csn),
            Lsn(tail),
            &[],
        );
        let res = self.write_area(start, &rec).and_then(|()| {
            self.ctr.log_writes.fetch_add(1, Ordering::Relaxed);
            self.ctr.log_bytes.fetch_add(BLOCK, Ordering::Relaxed);
            self.flush_log()
        });
        let r = self.complete(start, res.map(|()| start + BLOCK));
        self.lock_io().tail_record_busy = false;
        r
    }

    /// Wait until `need` more bytes fit (wait for the tail, not fail).
    pub(crate) fn wait_space(&self, need: u64) -> Result<(), LogError> {
        self.wait_space_then(need, |_| {})
    }

    /// Wait for space, then run `take` under the I/O lock while it is known to fit.
    pub(crate) fn wait_space_then(
        &self,
        need: u64,
        take: impl FnOnce(&mut IoState),
    ) -> Result<(), LogError> {
        if need > self.usable() {
            return Err(LogError::NoSpace);
        }
        let t0 = Instant::now();
        let mut io = self.lock_io();
        loop {
            if let Some(e) = &io.shutdown {
                return Err(e.clone());
            }
            if io.used() + io.reserved + need <= self.usable() {
                take(&mut io);
                break;
            }
            if !self.has_writeback() {
                // Nothing can ever move the tail.
                return Err(LogError::NoSpace);
            }
            if let Some(e) = self.take_writeback_error() {
                return Err(LogError::Writeback(e));
            }
            io.space_waiters += 1;
            self.kick_worker(|w| w.space = true);
            let (g, _) = self
                .io_cond
                .wait_timeout(io, std::time::Duration::from_millis(50))
                .unwrap_or_else(|e| e.into_inner());
            io = g;
            io.space_waiters -= 1;
        }
        drop(io);
        self.ctr
            .wait_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }
}
