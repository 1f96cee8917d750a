//! The queue on a tokio task (`Queue::run`): the socket read through the reactor, the
//! ring (if any) waited for in the same `select!`.

use super::{connect_timed_out, Flow, Queue};
use crate::transport::PduReader;
use std::sync::atomic::Ordering;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::watch;

/// How long a command alone on its queue is waited for inside `io_uring_enter` before the
/// connection goes back to the reactor (`Ring::submit_and_wait_one`).
const ALONE_WAIT: std::time::Duration = std::time::Duration::from_micros(500);

impl Queue {
    pub(super) async fn run(
        &mut self,
        reader: &mut PduReader<OwnedReadHalf>,
        mut stop: watch::Receiver<bool>,
        connect_by: tokio::time::Instant,
    ) {
        let mut dead: Option<watch::Receiver<bool>> = None;
        let send_bound = self.subsys.limits.max_send_queued_per_connection;
        loop {
            // Answers the host has not read reached the bound: no further command is read
            // from the socket until the writer drains below it (completions still run).
            let full = self.tx.queued() >= send_bound;
            let connecting = self.ctrl.is_none();
            let mut timed_out = false;
            let waiting_tx = full.then(|| self.tx.clone());
            let drained = async {
                match waiting_tx.as_ref() {
                    Some(tx) => tx.wait_below(send_bound).await,
                    None => std::future::pending::<()>().await,
                }
            };
            let dead_fut = async {
                match dead.as_mut() {
                    Some(rx) => {
                        let _ = rx.wait_for(|d| *d).await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let ring_ready = async {
                match self.ring.as_mut() {
                    Some(r) => r.ready().await,
                    None => std::future::pending::<()>().await,
                }
            };
            let r = tokio::select! {
                r = reader.read(), if !full => Some(Some(r)),
                _ = ring_ready => Some(None),
                _ = drained => Some(None),
                _ = dead_fut => None,
                _ = tokio::time::sleep_until(connect_by), if connecting => {
                    timed_out = true;
                    None
                }
                _ = stop.wait_for(|s| *s) => None,
            };
            if timed_out {
                connect_timed_out(&self.subsys, self.peer, "Connect");
            }
            // More commands already buffered: hold answers for one write after the last.
            self.more = reader.has_buffered_pdu();
            let flow = match r {
                None => Flow::Close,
                // Completions are waiting: reaped (and answered) below.
                Some(None) => Flow::Continue,
                Some(Some(r)) => self.on_received(r),
            };
            if let Flow::Close = flow {
                let _ = self.tx.flush();
                self.drop_batch();
                return;
            }
            // At the bound: end the batch here (what is held leaves now) and wait above.
            if self.more && self.tx.queued() >= send_bound {
                self.more = false;
            }
            if !self.more && !self.batch.is_empty() {
                self.run_batch();
            }
            // The batch's I/O leaves in one io_uring_enter; page-cache hits complete inside it
            // and are answered with the rest, in the one write below.
            if !self.more {
                self.ring_submit_and_reap();
            }
            if self.held.get() && !self.more {
                self.held.set(false);
                let _ = self.tx.flush();
            }
            if dead.is_none() {
                dead = self.ctrl.as_ref().map(|c| c.dead_rx());
            }
        }
    }

    /// Submits what the batch queued on the ring and answers every completion waiting
    /// (held: they leave in the loop's one write). A short or failed transfer is run again on
    /// the blocking path, which reports its status.
    fn ring_submit_and_reap(&mut self) {
        let Some(ring) = self.ring.as_mut() else {
            return;
        };
        // Alone: the one command in flight on this queue, just queued.
        let alone = ring.inflight() == 1
            && ring.queued() == 1
            && self.inflight.load(Ordering::Relaxed) == 1;
        let r = if alone {
            ring.submit_and_wait_one(ALONE_WAIT)
        } else {
            ring.submit()
        };
        if let Err(e) = r {
            tracing::warn!(error = %e, "io_uring submit failed");
        }
        let mut done = std::mem::take(&mut self.done);
        ring.reap(|d| done.push(d));
        for d in done.drain(..) {
            self.on_done(d);
        }
        self.done = done;
    }
}
