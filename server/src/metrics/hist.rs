//! A latency histogram of atomics: one `fetch_add` per bucket hit and one on the sum, no lock.
//!
//! prometheus-client's own `Histogram` takes a `RwLock` write lock per `observe`; the COMPOUND
//! dispatcher observes every operation, so it gets this instead and the crate only encodes it
//! (`MetricEncoder::encode_histogram`, as its `Histogram` does).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::MetricEncoder;

/// Upper bounds, in nanoseconds, of the latency buckets every pnfsd histogram shares: from
/// 10 µs (a PUTFH or a SEQUENCE on a warm server) to 10 s (a LAYOUTCOMMIT behind a stalled
/// log device), in 1-2.5-5 steps as client_golang's `DefBuckets`; above is `+Inf`.
pub const BOUNDS_NS: [u64; 19] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Observations per bucket (the last is `+Inf`) and their sum.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS_NS.len() + 1],
    sum_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    pub const fn new() -> Histogram {
        Histogram {
            buckets: [const { AtomicU64::new(0) }; BOUNDS_NS.len() + 1],
            sum_ns: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        // The first bucket whose bound is >= ns (Prometheus buckets are `le`).
        let i = BOUNDS_NS.partition_point(|&b| b < ns);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Observations so far (the buckets' sum: read at scrape, never kept apart).
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The observations' sum in nanoseconds (the `_sum` sample, before it is shown in seconds).
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns.load(Ordering::Relaxed)
    }

    /// Writes the `_sum`, `_count` and `_bucket` samples (seconds).
    pub fn encode(&self, mut e: MetricEncoder<'_>) -> std::fmt::Result {
        let mut buckets = [(0f64, 0u64); BOUNDS_NS.len() + 1];
        for (i, slot) in buckets.iter_mut().enumerate() {
            // f64::MAX is how the crate's encoder spells `+Inf`.
            let bound = BOUNDS_NS.get(i).map_or(f64::MAX, |&b| b as f64 / 1e9);
            *slot = (bound, self.buckets[i].load(Ordering::Relaxed));
        }
        let count = buckets.iter().map(|b| b.1).sum();
        let sum = self.sum_ns() as f64 / 1e9;
        e.encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, &buckets, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_on_a_bound_falls_in_that_bucket_and_beyond_the_last_in_inf() {
        let h = Histogram::new();
        h.observe(Duration::from_nanos(10_000));
        h.observe(Duration::from_nanos(10_001));
        h.observe(Duration::from_secs(11));
        h.observe(Duration::ZERO);
        let at = |i: usize| h.buckets[i].load(Ordering::Relaxed);
        assert_eq!((at(0), at(1), at(BOUNDS_NS.len())), (2, 1, 1));
        assert_eq!(h.count(), 4);
        assert_eq!(h.sum_ns(), 10_000 + 10_001 + 11_000_000_000);
    }
}
