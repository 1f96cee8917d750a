//! Activity gates: work holds a `Busy` guard; `close` refuses new guards, `idle` waits for
//! the last one to drop, `drain_entered` for the last one taken before it was called.
//! - The target's gate: every connection task and every backend call made for a command.
//!   `Target::shutdown_and_wait` uses it so an embedder (pnfsd unmounting its store,
//!   docs/design.md §3) knows no command of ours can still reach the backend.
//! - Each controller's (`Controller::io`): every I/O command from the moment it is let
//!   through to the media until it is done. `Target::disconnect_host` closes it and waits, so
//!   an embedder that fences a host knows none of its commands can still land. Preempt and
//!   Abort waits on it open: the commands that come after it fail their reservation check,
//!   so it waits only for the guards taken before (`drain_entered`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Guards are counted in two slots: a new guard goes to the slot of the current epoch
/// (`epoch & 1`). `drain_entered` waits for the other slot to empty of older guards, moves the
/// epoch on and then waits for the slot it left, so a host that keeps sending cannot keep it
/// waiting (beyond its guards taken before the move, whose commands fail their checks).
#[derive(Default)]
pub(crate) struct Gate {
    slots: [AtomicUsize; 2],
    epoch: AtomicUsize,
    closed: AtomicBool,
    idle: Notify,
}

/// How often a blocking wait looks again: the guards it waits for belong to I/O already in
/// the kernel or on a blocking thread, which ends by itself.
const POLL: Duration = Duration::from_micros(200);

/// What `Gate::wait_slot` saw.
enum Slot {
    Empty,
    Moved,
    TimedOut,
}

/// Proof that the gate was open when the work began; the gate is busy until it drops.
pub(crate) struct Busy {
    gate: Arc<Gate>,
    slot: usize,
}

/// What a command at the media holds: its target's guard (`Target::shutdown_and_wait`
/// waits for it) and its controller's (`Target::disconnect_host` waits for it).
pub(crate) struct AtMedia {
    pub _target: Busy,
    pub _ctrl: Busy,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.gate.slots[self.slot].fetch_sub(1, Ordering::SeqCst) == 1 {
            self.gate.idle.notify_waiters();
        }
    }
}

impl Gate {
    /// A guard, or `None` once `close` ran (the work must not start). Increment before
    /// reading `closed` (both SeqCst): either `idle` sees our count or we see the close.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<Busy> {
        let slot = self.epoch.load(Ordering::SeqCst) & 1;
        self.slots[slot].fetch_add(1, Ordering::SeqCst);
        let g = Busy {
            gate: self.clone(),
            slot,
        };
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

    /// Guards held. Exact once the gate is closed (guards only drop then); on an open gate
    /// a snapshot.
    pub(crate) fn busy(&self) -> usize {
        self.slots[0].load(Ordering::SeqCst) + self.slots[1].load(Ordering::SeqCst)
    }

    /// Blocks until no guard taken before this call is held, at most `timeout` (false when
    /// the time ran out). Guards taken after it are waited for only until it moves the
    /// epoch, which it does once the older ones are gone (with another wait on the same
    /// gate, once that one moved it). For a caller that may block its thread (a fence, run
    /// from the embedder's timer or a queue's command).
    ///
    /// Whoever calls it has first made the work it waits out fail from then on (closed the
    /// gate, or changed the reservation a command checks while holding its guard): a guard
    /// that read the old epoch just before the move and counts in the old slot just after
    /// is waited for, though its command will not run.
    pub(crate) fn drain_entered(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let e = self.epoch.load(Ordering::SeqCst);
            // The slot that becomes current still counts guards of older epochs (a wait that
            // ran out left them): wait for those first, they came before this call too.
            // Another wait may move the epoch meanwhile, making that slot current: then new
            // guards count there, so look again from the new epoch.
            match self.wait_slot((e + 1) & 1, deadline, Some(e)) {
                Slot::Empty => {}
                Slot::Moved => continue,
                Slot::TimedOut => return false,
            }
            if self
                .epoch
                .compare_exchange(e, e.wrapping_add(1), Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                // No other wait can make this slot current again before it is empty (it
                // waits for it first, as above): only guards from before the move count here.
                return matches!(self.wait_slot(e & 1, deadline, None), Slot::Empty);
            }
            // Another wait moved the epoch first: look again from its epoch.
            if Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// Polls until `slot` counts no guard, the deadline passes, or (given `epoch`) the
    /// epoch is no longer `epoch`.
    fn wait_slot(&self, slot: usize, deadline: Instant, epoch: Option<usize>) -> Slot {
        loop {
            if self.slots[slot].load(Ordering::SeqCst) == 0 {
                return Slot::Empty;
            }
            if epoch.is_some_and(|e| self.epoch.load(Ordering::SeqCst) != e) {
                return Slot::Moved;
            }
            if Instant::now() >= deadline {
                return Slot::TimedOut;
            }
            std::thread::sleep(POLL);
        }
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

    /// Whether a wait on another thread moves the epoch on from `from` within 2 s.
    fn epoch_moves_on(g: &Gate, from: usize) -> bool {
        let start = Instant::now();
        while g.epoch.load(Ordering::SeqCst) == from {
            if start.elapsed() > Duration::from_secs(2) {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    #[test]
    fn drain_entered_returns_once_the_last_guard_drops_on_another_thread() {
        let g = Arc::new(Gate::default());
        let a = g.enter().unwrap();
        g.close();
        assert!(!g.drain_entered(Duration::from_millis(5)));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            drop(a);
        });
        assert!(g.drain_entered(Duration::from_secs(10)));
        t.join().unwrap();
    }

    /// Preempt and Abort waits on an open gate: a host that keeps sending must not keep it
    /// waiting, and what was at the media before it must.
    #[test]
    fn drain_entered_waits_for_the_guards_before_it_and_not_for_those_after() {
        let g = Arc::new(Gate::default());
        let before = g.enter().unwrap();
        let epoch = g.epoch.load(Ordering::SeqCst);
        let g2 = g.clone();
        let w = std::thread::spawn(move || g2.drain_entered(Duration::from_secs(10)));
        assert!(epoch_moves_on(&g, epoch), "the wait never moved the epoch");
        let after = g.enter().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !w.is_finished(),
            "returned with a guard from before it held"
        );
        drop(before);
        assert!(w.join().unwrap(), "waited for a guard taken after it");
        assert_eq!(g.busy(), 1);
        drop(after);
        assert_eq!(g.busy(), 0);
    }

    /// Two waits on one gate (two preempts): one moves the epoch while the other still waits
    /// for the slot that thereby becomes current, where new guards now count. That one must
    /// notice, and move on from the new epoch instead of waiting for them.
    #[test]
    fn a_drain_notices_when_another_makes_its_slot_current() {
        let g = Arc::new(Gate::default());
        // A guard of an older epoch left in slot 1 (as by a wait that ran out).
        g.epoch.store(1, Ordering::SeqCst);
        let older = g.enter().unwrap();
        g.epoch.store(2, Ordering::SeqCst);
        let g2 = g.clone();
        let w = std::thread::spawn(move || g2.drain_entered(Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(5));
        assert!(!w.is_finished());
        // Another wait moves the epoch (2 -> 3): slot 1 is now the current one.
        g.epoch.store(3, Ordering::SeqCst);
        assert!(epoch_moves_on(&g, 3), "the wait stayed on the current slot");
        // It moved on (3 -> 4, slot 0 current) and waits for slot 1, from before its move.
        let after = g.enter().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(!w.is_finished(), "returned with an older guard held");
        drop(older);
        assert!(w.join().unwrap(), "waited for a guard taken after its move");
        drop(after);
    }

    /// A wait that ran out leaves its guards in a slot that a later epoch uses again: the
    /// next wait must still wait for them.
    #[test]
    fn a_drain_after_one_that_ran_out_still_waits_for_its_guards() {
        let g = Arc::new(Gate::default());
        let stuck = g.enter().unwrap();
        assert!(!g.drain_entered(Duration::from_millis(5)));
        let brief = g.enter().unwrap();
        drop(brief);
        assert!(!g.drain_entered(Duration::from_millis(5)));
        assert!(!g.drain_entered(Duration::from_millis(5)));
        drop(stuck);
        assert!(g.drain_entered(Duration::from_millis(5)));
        let later = g.enter().unwrap();
        assert!(!g.drain_entered(Duration::from_millis(5)));
        drop(later);
        assert!(g.drain_entered(Duration::from_millis(5)));
    }
}
