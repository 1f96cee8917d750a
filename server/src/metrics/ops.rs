//! Per-operation counts and latencies (`pnfsd_nfs_ops_total{op,status}`,
//! `pnfsd_nfs_op_seconds{op}`), and the log-force latency histogram.
//!
//! The COMPOUND dispatcher records every operation result it writes, once
//! (`nfs4::compound::run_compound`), into its server's [`OpMetrics`] (`Server::ops`): a
//! table of atomics indexed by opcode and a dense status index, so recording is two
//! `fetch_add`s and a histogram observation, with no lock and no allocation
//! (prometheus-client's `Family` takes a read lock per lookup). A scrape walks it and
//! writes only the cells that were hit.
//!
//! The table is the one ledger of operations: nothing else counts or times an operation.
//! The layout operation counters (`pnfsd_layoutgets_total`, `…_errors_total`,
//! `…_seconds_total`, and LAYOUTCOMMIT's and LAYOUTRETURN's) are read from it through
//! [`OpMetrics::totals`]. It is per server, not process-wide, so that servers sharing a
//! process (the unit tests) each count their own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use super::hist::Histogram;
use crate::nfs4::opcode::NfsOp;
use crate::nfs4::status::NfsStat;

/// Opcodes 0..=REMOVEXATTR have their own row; ILLEGAL and anything else share the last.
const OP_ROWS: usize = NfsOp::REMOVEXATTR.0 as usize + 2;
/// `nfsstat4` values are 0..=70 (errno-like) and 10001..=10096 (RFC 8881 §15.1, RFC 7862
/// §11): both ranges map densely, anything else to the last column.
const ERRNO_SPAN: usize = 100;
const STATUS_COLS: usize = 2 * ERRNO_SPAN + 1;

fn op_row(op: NfsOp) -> usize {
    (op.0 as usize).min(OP_ROWS - 1)
}

fn op_of_row(row: usize) -> NfsOp {
    if row == OP_ROWS - 1 {
        NfsOp::ILLEGAL
    } else {
        NfsOp(row as u32)
    }
}

fn status_col(st: NfsStat) -> usize {
    let v = st.0 as usize;
    match v {
        0..ERRNO_SPAN => v,
        10_000..10_100 => ERRNO_SPAN + (v - 10_000),
        _ => STATUS_COLS - 1,
    }
}

fn status_name(col: usize) -> &'static str {
    match col {
        0..ERRNO_SPAN => NfsStat(col as u32).name(),
        c if c < STATUS_COLS - 1 => NfsStat((10_000 + c - ERRNO_SPAN) as u32).name(),
        _ => "UNKNOWN",
    }
}

/// What the ledger holds of one operation, read in one pass over its row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpTotals {
    /// Results of every status, those the dispatcher refused before the handler ran included.
    pub results: u64,
    /// Results other than NFS4_OK (all results minus OK).
    pub errors: u64,
    /// Nanoseconds the handler ran, summed (the histogram's `_sum`).
    pub ns: u64,
}

/// The layout operations' totals: the `pnfsd_layout*_total` operation counters and the
/// daemon's exit log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayoutOps {
    pub get: OpTotals,
    pub commit: OpTotals,
    pub ret: OpTotals,
}

/// The dispatcher's per-operation table: `OP_ROWS` rows of `STATUS_COLS` counters, on the
/// heap (about 120 KiB: a `Server` stays small to move).
pub struct OpMetrics {
    results: Box<[AtomicU64]>,
    seconds: Box<[Histogram]>,
}

impl std::fmt::Debug for OpMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OpMetrics")
    }
}

impl Default for OpMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl OpMetrics {
    pub fn new() -> OpMetrics {
        OpMetrics {
            results: (0..OP_ROWS * STATUS_COLS)
                .map(|_| AtomicU64::new(0))
                .collect(),
            seconds: (0..OP_ROWS).map(|_| Histogram::new()).collect(),
        }
    }

    fn row(&self, row: usize) -> &[AtomicU64] {
        &self.results[row * STATUS_COLS..(row + 1) * STATUS_COLS]
    }

    /// One operation result; `ran` is the handler's time (`None`: the dispatcher refused
    /// it before it ran, and only the count moves).
    pub fn record(&self, op: NfsOp, st: NfsStat, ran: Option<Duration>) {
        let row = op_row(op);
        self.results[row * STATUS_COLS + status_col(st)].fetch_add(1, Ordering::Relaxed);
        if let Some(d) = ran {
            self.seconds[row].observe(d);
        }
    }

    /// How many results `op` answered with `st` (tests, and the docs' examples).
    pub fn count(&self, op: NfsOp, st: NfsStat) -> u64 {
        self.results[op_row(op) * STATUS_COLS + status_col(st)].load(Ordering::Relaxed)
    }

    /// `op`'s results, errors and handler time. Each cell is read once, so `errors` never
    /// exceeds `results` however the dispatcher races the read.
    pub fn totals(&self, op: NfsOp) -> OpTotals {
        let row = op_row(op);
        let mut results = 0u64;
        let mut ok = 0;
        for (col, c) in self.row(row).iter().enumerate() {
            let n = c.load(Ordering::Relaxed);
            results = results.saturating_add(n);
            if col == status_col(NfsStat::OK) {
                ok = n;
            }
        }
        OpTotals {
            results,
            errors: results.saturating_sub(ok),
            ns: self.seconds[row].sum_ns(),
        }
    }

    /// LAYOUTGET's, LAYOUTCOMMIT's and LAYOUTRETURN's totals.
    pub fn layout_ops(&self) -> LayoutOps {
        LayoutOps {
            get: self.totals(NfsOp::LAYOUTGET),
            commit: self.totals(NfsOp::LAYOUTCOMMIT),
            ret: self.totals(NfsOp::LAYOUTRETURN),
        }
    }

    /// How many `op`s ran (the histogram's count).
    pub fn timed(&self, op: NfsOp) -> u64 {
        self.seconds[op_row(op)].count()
    }

    pub fn encode(&self, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
        let mut m = e.encode_descriptor(
            "pnfsd_nfs_ops",
            "NFSv4 operation results by operation and nfsstat4, counted once by the COMPOUND dispatcher (refused operations included).",
            None,
            MetricType::Counter,
        )?;
        for (row, cols) in self.results.chunks(STATUS_COLS).enumerate() {
            let op = op_of_row(row).name();
            for (col, c) in cols.iter().enumerate() {
                let n = c.load(Ordering::Relaxed);
                if n > 0 {
                    let labels = [("op", op), ("status", status_name(col))];
                    let f = m.encode_family(&labels)?;
                    ConstCounter::new(n).encode(f)?;
                }
            }
        }
        let mut m = e.encode_descriptor(
            "pnfsd_nfs_op_seconds",
            "Time NFSv4 operation handlers took, by operation (LAYOUTCOMMIT's is the LAYOUTCOMMIT latency).",
            None,
            MetricType::Histogram,
        )?;
        for (row, h) in self.seconds.iter().enumerate() {
            if h.count() > 0 {
                let labels = [("op", op_of_row(row).name())];
                h.encode(m.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

/// Every metadata-log force's wall time (`pnfsd_log_force_seconds`): metalog calls
/// [`observe_log_force`] through the hook the endpoint installs (`Log::set_force_observer`);
/// metalog itself knows nothing of Prometheus.
pub static LOG_FORCE: Histogram = Histogram::new();

pub fn observe_log_force(d: Duration) {
    LOG_FORCE.observe(d);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_own_column_and_names_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for v in (0..100).chain(10_000..10_100) {
            let st = NfsStat(v);
            if st.name() == "UNKNOWN" {
                continue;
            }
            let col = status_col(st);
            assert!(seen.insert(col), "{v} shares column {col}");
            assert_eq!(status_name(col), st.name(), "{v}");
        }
        assert_eq!(status_name(status_col(NfsStat(99_999))), "UNKNOWN");
        assert_eq!(op_of_row(op_row(NfsOp(10_044))), NfsOp::ILLEGAL);
        assert_eq!(op_of_row(op_row(NfsOp::LAYOUTCOMMIT)), NfsOp::LAYOUTCOMMIT);
        assert_eq!(op_of_row(op_row(NfsOp(7_777))), NfsOp::ILLEGAL);
    }

    #[test]
    fn record_counts_by_op_and_status_and_times_only_what_ran() {
        let m = OpMetrics::new();
        m.record(
            NfsOp::LOOKUP,
            NfsStat::NOENT,
            Some(Duration::from_micros(30)),
        );
        m.record(NfsOp::LOOKUP, NfsStat::OK, Some(Duration::from_micros(20)));
        m.record(NfsOp::LOOKUP, NfsStat::OK, None);
        assert_eq!(m.count(NfsOp::LOOKUP, NfsStat::OK), 2);
        assert_eq!(m.count(NfsOp::LOOKUP, NfsStat::NOENT), 1);
        assert_eq!(m.count(NfsOp::GETATTR, NfsStat::OK), 0);
        assert_eq!(m.timed(NfsOp::LOOKUP), 2);
        assert_eq!(
            m.totals(NfsOp::LOOKUP),
            OpTotals {
                results: 3,
                errors: 1,
                ns: 50_000
            }
        );
        assert_eq!(m.totals(NfsOp::GETATTR), OpTotals::default());
        let mut reg = prometheus_client::registry::Registry::default();
        reg.register_collector(Box::new(Table(m)));
        let mut t = String::new();
        prometheus_client::encoding::text::encode(&mut t, &reg).unwrap();
        assert!(
            t.contains("pnfsd_nfs_ops_total{op=\"LOOKUP\",status=\"NOENT\"} 1\n"),
            "{t}"
        );
        assert!(t.contains("pnfsd_nfs_ops_total{op=\"LOOKUP\",status=\"OK\"} 2\n"));
        assert!(
            t.contains("pnfsd_nfs_op_seconds_count{op=\"LOOKUP\"} 2\n"),
            "{t}"
        );
        // The crate writes `le` first.
        assert!(t.contains("pnfsd_nfs_op_seconds_bucket{le=\"+Inf\",op=\"LOOKUP\"} 2\n"));
        assert!(!t.contains("GETATTR"), "{t}");
    }

    #[derive(Debug)]
    struct Table(OpMetrics);
    impl prometheus_client::collector::Collector for Table {
        fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
            self.0.encode(&mut e)
        }
    }
}
