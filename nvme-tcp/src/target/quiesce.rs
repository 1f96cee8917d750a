//! The target's activity gate: every connection task and every backend call made for a
//! command holds a `Busy` guard; `close` refuses new guards, `idle` waits for the last one
//! to drop. `Target::shutdown_and_wait` uses it so an embedder (pnfsd unmounting its store,
//! design.md §3) knows no command of ours can still reach the backend.

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
}
