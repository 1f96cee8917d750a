//! The background worker: forces the log every `force_interval` so lazy (timestamp-only)
//! changes reach the disk (docs/design.md §3, seed 002: "at the latest the one that the log worker
//! issues every 30 s"), pushes a CIL that grew past its limit, and calls the store's
//! write-back to move the tail when the log fills up.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::log::Inner;
use crate::{Csn, LogError, Writeback};

/// Work requested of the worker, under `Inner::wk`.
#[derive(Default)]
pub(crate) struct WorkerReq {
    pub stop: bool,
    pub push: bool,
    pub space: bool,
    /// The store asked for a write-back (its in-memory changes reached their bound).
    pub writeback: bool,
}

pub(crate) fn run(inner: Arc<Inner>) {
    let mut next_force = Instant::now() + inner.opts.force_interval;
    loop {
        let (push, space) = {
            let mut wk = inner.lock_wk();
            loop {
                if wk.stop {
                    return;
                }
                if wk.push || wk.space || wk.writeback || Instant::now() >= next_force {
                    break;
                }
                let dur = next_force.saturating_duration_since(Instant::now());
                wk = inner
                    .wk_cond
                    .wait_timeout(wk, dur)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            let r = (wk.push, wk.space || wk.writeback);
            wk.push = false;
            wk.space = false;
            wk.writeback = false;
            r
        };
        if space {
            inner.run_writeback();
        }
        if push || Instant::now() >= next_force {
            // Errors here are the log's shutdown error, which every caller sees anyway.
            if inner.last_committed() > inner.durable_csn.load(Ordering::Acquire) {
                let _ = inner.force_seq(Csn(u64::MAX));
            }
            next_force = Instant::now() + inner.opts.force_interval;
        }
    }
}

impl Inner {
    /// Call the store's write-back and move the tail past what it wrote.
    pub(crate) fn run_writeback(&self) {
        let wb = self.lock_wb().as_ref().and_then(|w| w.upgrade());
        let Some(wb) = wb else {
            return;
        };
        if let Err(LogError::Writeback(m)) = self.writeback_once(&*wb) {
            *self.lock_wb_err() = Some(m);
        }
        self.io_cond.notify_all();
    }

    /// One write-back round. The store returns the CSN `C` it read under its lock when it
    /// snapshotted; but while `C` is the open checkpoint, commits keep joining it after the
    /// snapshot. So the tail passes `C` only if `C` was already closed (pushed) before the
    /// write-back began, and otherwise only `C - 1`; the next round releases `C`.
    pub(crate) fn writeback_once(&self, wb: &dyn Writeback) -> Result<(), LogError> {
        let sealed = self.lock_io().pushed_csn;
        self.ctr.writebacks.fetch_add(1, Ordering::Relaxed);
        let c = wb.write_back().map_err(LogError::Writeback)?;
        let upto = if c.0 <= sealed { c.0 } else { c.0 - 1 };
        self.force_seq(Csn(upto))?;
        self.move_tail(Csn(upto))
    }
}
