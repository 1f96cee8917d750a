//! Giving the allocator's free pages back to the kernel, so that RSS returns
//! close to its idle level after the abusers leave.
//!
//! pnfsd frees what a closed connection or an expired client held, but glibc malloc keeps
//! freed pages in its arenas for reuse (the 64 COMPOUND threads spread a burst's reply
//! buffers over all of them: by default up to 8 per core, one per CPU under
//! `crate::alloc::limit_arenas`), and returns only the top of each heap by itself. 50
//! connections that never read their replies left 73–100 MB of a 9 MB idle daemon behind
//! 10 s after they went; `malloc_trim(0)` brought it to 28–33 MB (docs/benchmarks.md
//! "Abuse: RSS after the abusers leave"). So a task per listener asks glibc to
//! trim when a burst of connections has ended and every 10 s, and only when its arenas
//! hold enough free memory to be worth the walk (`mallinfo2`). `MALLOC_TRIM_THRESHOLD_` was
//! measured too and paid less; it stays for the operator's environment.
//!
//! Trimming returns only whole free pages, and memory freed across many arenas is mostly in
//! holes too small to give back: `crate::alloc::limit_arenas` keeps the arenas few.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::rpc::limits::Shared;

/// How often the connection count is looked at.
const TICK: Duration = Duration::from_secs(1);
/// At most this long between two looks at the allocator (memory freed without any
/// connection closing: client state at lease end, the store's caches). A look that finds
/// less than `MIN_FREE` free costs one `mallinfo2` walk of the arenas' bins.
const PERIOD: Duration = Duration::from_secs(10);
/// A burst has ended when the connection count fell by at least this many, to half its
/// peak or less.
const BURST: usize = 8;
/// A second look this long after a burst ended: what its connections held may be freed
/// after they are counted gone (replies still queued, state dropped by other tasks).
const AGAIN: Duration = Duration::from_secs(2);
/// Free bytes in the arenas below which trimming is not worth walking them.
const MIN_FREE: usize = 16 << 20;

/// When to look at the allocator: pure, so it can be tested without one.
#[derive(Debug)]
pub struct TrimPolicy {
    /// Most connections seen since the last look.
    peak: usize,
    last: Instant,
    /// The second look after a burst.
    again: Option<Instant>,
}

impl TrimPolicy {
    pub fn new(now: Instant) -> TrimPolicy {
        TrimPolicy {
            peak: 0,
            last: now,
            again: None,
        }
    }

    /// Whether to look now, with `conns` connections open.
    pub fn due(&mut self, conns: usize, now: Instant) -> bool {
        self.peak = self.peak.max(conns);
        let burst_over = self.peak >= conns + BURST && conns <= self.peak / 2;
        let again = self.again.is_some_and(|t| now >= t);
        if burst_over || again || now.duration_since(self.last) >= PERIOD {
            self.again = burst_over.then_some(now + AGAIN);
            self.peak = conns;
            self.last = now;
            return true;
        }
        false
    }
}

/// Runs until `shutdown`: looks at the connection count every `TICK`, and when the policy
/// says so trims on a blocking thread (the walk takes each arena's lock).
pub async fn run(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut policy = TrimPolicy::new(Instant::now());
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
        }
        if policy.due(shared.connections(), Instant::now()) {
            if let Ok(Some((free, after))) = tokio::task::spawn_blocking(trim).await {
                tracing::debug!(free_before = free, free_after = after, "malloc_trim");
            }
        }
    }
}

/// Trims glibc's arenas if they hold at least `MIN_FREE` free bytes; returns the free bytes
/// before and after, or `None` when it did nothing.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn trim() -> Option<(usize, usize)> {
    // SAFETY: mallinfo2(3) takes no argument and returns a plain struct; it locks each
    // arena itself while it sums it.
    let free = unsafe { libc::mallinfo2() }.fordblks;
    if free < MIN_FREE {
        return None;
    }
    // SAFETY: malloc_trim(3) only gives free pages of glibc's own heaps back to the kernel
    // (madvise), under each arena's lock; no memory in use moves or changes.
    unsafe { libc::malloc_trim(0) };
    // SAFETY: as above.
    let after = unsafe { libc::mallinfo2() }.fordblks;
    Some((free, after))
}

/// Other allocators return memory by their own rules.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn trim() -> Option<(usize, usize)> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_when_a_burst_ends_and_once_a_period() {
        let t0 = Instant::now();
        let s = |n| t0 + Duration::from_secs(n);
        let mut p = TrimPolicy::new(t0);
        assert!(!p.due(2, s(1)), "quiet");
        assert!(!p.due(50, s(2)), "a burst is running");
        assert!(!p.due(30, s(3)), "not yet half");
        assert!(
            p.due(20, s(4)),
            "fell to less than half the peak, by more than BURST"
        );
        assert!(!p.due(20, s(5)), "the peak starts again from there");
        assert!(p.due(20, s(6)), "the second look, AGAIN after the burst");
        assert!(!p.due(14, s(7)), "fell by fewer than BURST");
        assert!(!p.due(14, s(8)), "one second look only");
        assert!(!p.due(14, s(6 + 9)), "not yet a period");
        assert!(p.due(14, s(6 + 10)), "a period after the last look");
    }
}
