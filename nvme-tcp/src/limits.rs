//! What one host, or all of them, may make the target hold (docs/nvme-tcp.md "Limits"): the
//! bounds (`Limits`, a `TargetConfig` field), the counters the target keeps of them
//! (`TargetStats`), and the rate limit on the log lines a peer can cause at connection rate
//! (`RateLimit`, the workspace's one).

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The target's bounds. Every one is checked where the resource is taken; what the host is
/// told, and what happens past each, is in docs/nvme-tcp.md "Limits".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Controllers (discovery and I/O) at once, all hosts together. Past it a Connect that
    /// would create one is refused with *Connect Controller Busy*.
    pub max_controllers: usize,
    /// Controllers one host NQN may hold at once (a Linux host holds one per `nvme connect`
    /// plus a discovery controller). Past it: *Connect Controller Busy*.
    pub max_controllers_per_host: usize,
    /// TCP connections at once (every queue is one). Past it a new connection is closed at
    /// accept, before any PDU is read.
    pub max_connections: usize,
    /// Keep Alive Timeout granted at most, in ms: a host asking for more (Connect or Set
    /// Features) gets this, which Get Features reports. A discovery controller asking for
    /// none (KATO 0) gets it too, as nvmet gives such one 120 s, so an idle discovery
    /// connection does not stay for ever.
    pub max_kato_ms: u32,
    /// Bytes of host-to-controller data one queue may have solicited (R2T) and not yet
    /// received in full: the most a host can make the target buffer per queue by sending
    /// part of a transfer, or none. Further R2Ts wait until earlier transfers complete.
    /// At least one command's largest transfer (MDTS), so every command can proceed.
    pub max_h2c_buffered_per_queue: usize,
    /// Bytes of answers (C2HData, CapsuleResp, R2T) one connection may have queued for its
    /// socket that the host has not read. Past it the queue takes no further command from
    /// that socket until the host drains it: a host that sends Reads and never reads the
    /// answers holds at most this, plus the commands already in flight (SQ window).
    pub max_send_queued_per_connection: usize,
    /// A connection that has not completed ICReq/ICResp and a successful Connect this many
    /// ms after accept is closed (counted in `TargetStats::connect_timeouts`). nvmet has no
    /// such timeout; a Linux host sends both at once, so the bound only meets peers that
    /// hold a connection slot and never use it.
    pub connect_timeout_ms: u32,
    /// How long a fence (`Target::disconnect_host`, a Preempt and Abort) waits, in ms, for
    /// the I/O its hosts already had at the media (docs/nvme-tcp.md "Fences wait for the I/O
    /// at the media"). An I/O still in the kernel after it is stuck there; the fence then
    /// fails (`Error::StillInFlight`, *Internal Error*) rather than return while it may land.
    pub fence_drain_ms: u32,
}

/// Defaults: room for 64 hosts with 16 I/O queues each (the per-host controller count covers
/// multipath and reconnects), KATO as nvmet's default for discovery controllers (120 s; Linux
/// hosts ask for 5 s on I/O controllers), four of the largest writes in flight per queue, and
/// eight of the largest reads' answers queued per connection (4 MiB: at 10 Gb/s the socket
/// drains that in 3.4 ms, far longer than a host that reads takes to come back, so a
/// well-behaved host never meets it; 4096 connections × 4 MiB is the worst case), and 10 s
/// from accept to a successful Connect (Linux needs milliseconds; 10 s leaves room for a
/// host under load and a few TCP retransmissions, and still frees a slot taken by a silent
/// peer well before `max_connections` idle sockets pile up), and 10 s for a fence's wait (a
/// 4 KiB write takes well under a millisecond; one not done in 10 s waits on a device in
/// trouble).
impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_controllers: 1024,
            max_controllers_per_host: 16,
            max_connections: 4096,
            max_kato_ms: 120_000,
            max_h2c_buffered_per_queue: 4 * crate::controller::MAX_TRANSFER as usize,
            max_send_queued_per_connection: 8 * crate::controller::MAX_TRANSFER as usize,
            connect_timeout_ms: 10_000,
            fence_drain_ms: 10_000,
        }
    }
}

impl Limits {
    /// Why a configuration is unusable, if it is.
    pub(crate) fn check(&self) -> Result<(), String> {
        let min_h2c = crate::controller::MAX_TRANSFER as usize;
        if self.max_controllers == 0 || self.max_controllers_per_host == 0 {
            return Err("max_controllers and max_controllers_per_host must be ≥ 1".into());
        }
        // An admin queue plus at least one I/O queue.
        if self.max_connections < 2 {
            return Err("max_connections must be ≥ 2".into());
        }
        if self.connect_timeout_ms == 0 {
            return Err("connect_timeout_ms must be ≥ 1".into());
        }
        if self.fence_drain_ms == 0 {
            return Err("fence_drain_ms must be ≥ 1".into());
        }
        if self.max_kato_ms == 0 {
            return Err("max_kato_ms must be ≥ 1".into());
        }
        if self.max_h2c_buffered_per_queue < min_h2c {
            return Err(format!(
                "max_h2c_buffered_per_queue must be ≥ {min_h2c} (one command's largest transfer)"
            ));
        }
        if self.max_send_queued_per_connection < min_h2c {
            return Err(format!(
                "max_send_queued_per_connection must be ≥ {min_h2c} (one Read's answer)"
            ));
        }
        Ok(())
    }
}

/// A snapshot of the target's gauges and counters (`Target::stats`), for the embedder's
/// metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetStats {
    /// Live controllers, discovery and I/O.
    pub controllers: usize,
    /// Open TCP connections (queues, and connections not yet connected).
    pub connections: usize,
    /// Running keep-alive timers (one per live controller with a KATO).
    pub keep_alive_timers: usize,
    /// Connects refused, for any reason (host not allowed, a limit, bad parameters).
    pub connects_refused: u64,
    /// Connections closed at accept because `max_connections` were open.
    pub connections_refused: u64,
    /// Connections closed because no ICReq, or no successful Connect, came within
    /// `Limits::connect_timeout_ms`.
    pub connect_timeouts: u64,
}

/// The live counters behind `TargetStats`, shared by the listener, connections and
/// controllers.
#[derive(Default)]
pub(crate) struct Counters {
    pub connections: AtomicUsize,
    pub keep_alive_timers: AtomicUsize,
    pub connects_refused: AtomicU64,
    pub connections_refused: AtomicU64,
    pub connect_timeouts: AtomicU64,
}

/// At most one log line per interval for an event any peer can cause at connection rate (no
/// peer can flood the log); the line says how many were left out. The one limiter of the
/// workspace: pnfsd's RPC listener and device watch use it too (docs/nvme-tcp.md "Limits",
/// why it lives here).
#[derive(Debug)]
pub struct RateLimit {
    interval: Duration,
    /// When the last line was written, and how many events were left out since.
    st: Mutex<(Option<Instant>, u64)>,
}

impl RateLimit {
    pub const fn new(interval: Duration) -> Self {
        RateLimit {
            interval,
            st: Mutex::new((None, 0)),
        }
    }

    /// `Some(n)`: log now, and say that `n` similar lines were left out since the last one.
    /// `None`: leave this one out.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut st = crate::namespace::lock(&self.st);
        match st.0 {
            Some(last) if now.saturating_duration_since(last) < self.interval => {
                st.1 += 1;
                None
            }
            _ => {
                st.0 = Some(now);
                Some(std::mem::take(&mut st.1))
            }
        }
    }
}

/// One line per ten seconds for each kind of refusal.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_lets_one_line_per_interval_and_counts_the_rest() {
        let r = RateLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(r.allow_at(t0), Some(0));
        for i in 1..=1000 {
            assert_eq!(r.allow_at(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(r.allow_at(t0 + Duration::from_secs(10)), Some(1000));
        assert_eq!(r.allow_at(t0 + Duration::from_secs(11)), None);
        assert_eq!(r.allow_at(t0 + Duration::from_secs(21)), Some(1));
        // A clock read earlier than the last line (another thread's `now`) is no panic.
        assert_eq!(r.allow_at(t0), None);
    }

    #[test]
    fn defaults_are_valid_and_small_h2c_bounds_refused() {
        assert_eq!(Limits::default().check(), Ok(()));
        let l = Limits {
            max_h2c_buffered_per_queue: 4096,
            ..Limits::default()
        };
        assert!(l.check().is_err());
        let l = Limits {
            max_send_queued_per_connection: 4096,
            ..Limits::default()
        };
        assert!(l.check().is_err());
    }
}
