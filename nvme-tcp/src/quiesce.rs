//! Activity gates: work holds a `Busy` guard; `close` refuses new guards, `idle` (or
//! `idle_blocking`) waits for the last one to drop.
//! - The target's gate: every connection task and every backend call made for a command.
//!   `Target::shutdown_and_wait` uses it so an embedder (pnfsd unmounting its store,
//!   design.md §3) knows no command of ours can still reach the backend.
//! - Each controller's (`Controller::io`): every I/O command from the moment it is let
//!   through to the media until it is done. `Target::disconnect_host` closes it and waits, so
//!   an embedder that fences a host knows none of its commands can still land.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

#[derive(Default)]
pub(crate) struct Gate {
    busy: AtomicUsize,
    closed: AtomicBool,
    idle: Notify,
}

/// Proof that the gate was open when the work began; the gate is busy until it drops.
pub(crate) struct Busy(Arc<Gate>);

/// What a command at the media holds: its target's guard (`Target::shutdown_and_wait`
/// waits for it) and its controller's (`Target::disconnect_host` waits for it).
pub(crate) struct AtMedia {
    pub _target: Busy,
    pub _ctrl: Busy,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Gate {
    /// A guard, or `None` once `close` ran (the work must not start). Increment before
    /// reading `closed` (both SeqCst): either `idle` sees our count or we see the close.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<Busy> {
        self.busy.fetch_add(1, Ordering::SeqCst);
        let g = Busy(self.clone());
        if self.closed.load(Ordering::SeqCst) {
            return None; // `g` drops: the count goes back, waking `idle` if it was the last
        }
        Some(g)
    }

    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub(crate) fn busy(&self) -> usize {
        self.busy.load(Ordering::SeqCst)
    }

    /// `idle` for a caller that may block its thread (a fence, run from the embedder's
    /// timer): polls every `POLL`, since the guards that remain belong to I/O already in the
    /// kernel or on a blocking thread, which ends by itself.
    pub(crate) fn idle_blocking(&self, timeout: Duration) -> bool {
        const POLL: Duration = Duration::from_micros(200);
        let start = std::time::Instant::now();
        while self.busy() != 0 {
            if start.elapsed() >= timeout {
                return false;
            }
            std::thread::sleep(POLL);
        }
        true
    }

    /// Waits until no guard is held, at most `timeout`; false when the time ran out.
    pub(crate) async fn idle(&self, timeout: Duration) -> bool {
        let wait = async {
            loop {
                let n = self.idle.notified();
                tokio::pin!(n);
                // Registered before the check, so a drop between the two is not missed.
                n.as_mut().enable();
                if self.busy() == 0 {
                    return;
                }
                n.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_waits_for_every_guard_and_close_refuses_new_ones() {
        let g = Arc::new(Gate::default());
        let a = g.enter().unwrap();
        let b = g.enter().unwrap();
        g.close();
        assert!(g.enter().is_none());
        assert_eq!(g.busy(), 2);
        assert!(!g.idle(Duration::from_millis(20)).await);
        drop(a);
        let g2 = g.clone();
        let w = tokio::spawn(async move { g2.idle(Duration::from_secs(10)).await });
        tokio::task::yield_now().await;
        assert!(!w.is_finished());
        drop(b);
        assert!(w.await.unwrap());
        assert_eq!(g.busy(), 0);
    }

    #[test]
    fn idle_blocking_returns_once_the_last_guard_drops_on_another_thread() {
        let g = Arc::new(Gate::default());
        let a = g.enter().unwrap();
        g.close();
        assert!(!g.idle_blocking(Duration::from_millis(5)));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(a);
        });
        assert!(g.idle_blocking(Duration::from_secs(10)));
        t.join().unwrap();
    }
}
