//! Figures: per-mode statistics over rounds, the server's counters (parsed from its shutdown
//! log line), the stdout table and the `--json` file (hand-written JSON: flat, no new crate).

use std::fmt::Write as _;
use std::time::Duration;

use super::Mode;

/// What one mode measured over all rounds of one workload.
#[derive(Debug, Clone, Default)]
pub struct ModeFigures {
    /// Wall time of each round (all writers), seconds.
    pub walls: Vec<f64>,
    /// Every commit unit's latency (write + its flush/commit), all rounds, microseconds.
    pub lat_us: Vec<f64>,
    /// Commit units per round (all writers).
    pub ops_per_round: u64,
}

impl ModeFigures {
    pub fn record_round(&mut self, wall: Duration, lats: Vec<Duration>) {
        self.walls.push(wall.as_secs_f64());
        self.ops_per_round = lats.len() as u64;
        self.lat_us
            .extend(lats.iter().map(|d| d.as_secs_f64() * 1e6));
    }
    pub fn median_wall(&self) -> f64 {
        percentile(&self.walls, 50.0)
    }
    pub fn ops_per_s(&self) -> f64 {
        let w = self.median_wall();
        if w > 0.0 {
            self.ops_per_round as f64 / w
        } else {
            0.0
        }
    }
}

/// Nearest-rank percentile of `v` (0 when empty).
pub fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

/// The server's pNFS counters, from the `pNFS layout counters` line pnfsd logs at shutdown
/// (server/src/main.rs). Cheap and honest: the server's own totals, no admin path added.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerCounters {
    pub layoutcommits: u64,
    pub layoutcommit_ns: u64,
    pub commit_log_writes: u64,
    pub commit_data_flushes: u64,
}

impl ServerCounters {
    /// Finds the last counters line in `log` and reads its `name: value` fields.
    pub fn parse(log: &str) -> Option<ServerCounters> {
        let line = log
            .lines()
            .rev()
            .find(|l| l.contains("pNFS layout counters"))?;
        let field = |name: &str| -> Option<u64> {
            let key = format!("{name}: ");
            let at = line.find(&key)? + key.len();
            let digits: String = line[at..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            digits.parse().ok()
        };
        Some(ServerCounters {
            layoutcommits: field("layoutcommits")?,
            layoutcommit_ns: field("layoutcommit_ns")?,
            commit_log_writes: field("commit_log_writes")?,
            commit_data_flushes: field("commit_data_flushes")?,
        })
    }
    fn per_commit(&self, x: u64) -> f64 {
        if self.layoutcommits == 0 {
            0.0
        } else {
            x as f64 / self.layoutcommits as f64
        }
    }
    pub fn us_per_commit(&self) -> f64 {
        self.per_commit(self.layoutcommit_ns) / 1000.0
    }
    pub fn log_writes_per_commit(&self) -> f64 {
        self.per_commit(self.commit_log_writes)
    }
    pub fn flushes_per_commit(&self) -> f64 {
        self.per_commit(self.commit_data_flushes)
    }
}

/// One workload's result: every mode, and the two servers' counters.
#[derive(Debug, Clone, Default)]
pub struct WorkloadResult {
    pub name: String,
    pub writers: usize,
    pub file_size: u64,
    pub io_size: u64,
    pub rounds: usize,
    pub modes: Vec<(Mode, ModeFigures)>,
    /// Counters of the datasync server (`pnfsd`) and the `layoutcommit = "sync"` server.
    pub server: Option<ServerCounters>,
    pub server_sync: Option<ServerCounters>,
}

impl WorkloadResult {
    pub fn mode(&self, m: Mode) -> Option<&ModeFigures> {
        self.modes.iter().find(|(k, _)| *k == m).map(|(_, f)| f)
    }
    /// Wall time of `a` over wall time of `b` (medians); > 1 means `a` is slower; NaN if either
    /// mode was not run.
    pub fn ratio(&self, a: Mode, b: Mode) -> f64 {
        match (self.mode(a), self.mode(b)) {
            (Some(x), Some(y)) if y.median_wall() > 0.0 => x.median_wall() / y.median_wall(),
            // Not measured in this workload: `null` in the JSON.
            _ => f64::NAN,
        }
    }
}

pub fn table(results: &[WorkloadResult]) -> String {
    let mut s = String::new();
    for r in results {
        if r.io_size == 0 {
            let _ = writeln!(
                s,
                "\n{} — {} client(s) × {} files (create, rename, remove), {} round(s), medians; ops",
                r.name, r.writers, r.file_size, r.rounds
            );
        } else {
            let _ = writeln!(
                s,
                "\n{} — {} writer(s) × {} KiB file, {} KiB writes, {} round(s), medians",
                r.name,
                r.writers,
                r.file_size >> 10,
                r.io_size >> 10,
                r.rounds
            );
        }
        let _ = writeln!(
            s,
            "  {:<12} {:>10} {:>10} {:>10} {:>10} {:>9}",
            "mode", "wall ms", "commits/s", "p50 µs", "p99 µs", "÷limit"
        );
        for (m, f) in &r.modes {
            let _ = writeln!(
                s,
                "  {:<12} {:>10.1} {:>10.0} {:>10.0} {:>10.0} {:>9}",
                m.name(),
                f.median_wall() * 1e3,
                f.ops_per_s(),
                percentile(&f.lat_us, 50.0),
                percentile(&f.lat_us, 99.0),
                match r.ratio(*m, Mode::Limit) {
                    x if x.is_finite() => format!("{x:.2}"),
                    _ => "-".into(),
                }
            );
        }
        if r.io_size == 0 {
            let _ = writeln!(
                s,
                "  sync-export ÷ async-export {:.2}",
                r.ratio(Mode::ExportSync, Mode::ExportAsync)
            );
            continue;
        }
        let _ = writeln!(
            s,
            "  pnfsd ÷ limit {:.2}   pnfsd ÷ device {:.2}   sync ÷ pnfsd {:.2}",
            r.ratio(Mode::Pnfsd, Mode::Limit),
            r.ratio(Mode::Pnfsd, Mode::Device),
            r.ratio(Mode::Sync, Mode::Pnfsd)
        );
        for (label, c) in [("pnfsd", r.server), ("sync", r.server_sync)] {
            if let Some(c) = c {
                let _ = writeln!(
                    s,
                    "  server[{label}]: {} LAYOUTCOMMITs, {:.0} µs each, {:.3} log writes and {:.3} data flushes per commit",
                    c.layoutcommits,
                    c.us_per_commit(),
                    c.log_writes_per_commit(),
                    c.flushes_per_commit()
                );
            }
        }
    }
    s
}

fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.3}")
    } else {
        "null".into()
    }
}

fn counters_json(c: Option<ServerCounters>) -> String {
    match c {
        None => "null".into(),
        Some(c) => format!(
            "{{\"layoutcommits\": {}, \"us_per_commit\": {}, \"log_writes_per_commit\": {}, \"data_flushes_per_commit\": {}}}",
            c.layoutcommits,
            num(c.us_per_commit()),
            num(c.log_writes_per_commit()),
            num(c.flushes_per_commit())
        ),
    }
}

pub fn json(results: &[WorkloadResult], machine: &str) -> String {
    let mut s = format!(
        "{{\n  \"machine\": \"{}\",\n  \"workloads\": [\n",
        machine.replace('"', "'")
    );
    for (i, r) in results.iter().enumerate() {
        let _ = write!(
            s,
            "    {{\"name\": \"{}\", \"writers\": {}, \"file_size\": {}, \"io_size\": {}, \"rounds\": {},\n     \"modes\": {{",
            r.name, r.writers, r.file_size, r.io_size, r.rounds
        );
        for (j, (m, f)) in r.modes.iter().enumerate() {
            let _ = write!(
                s,
                "{}\n       \"{}\": {{\"wall_ms\": {}, \"commits_per_s\": {}, \"p50_us\": {}, \"p99_us\": {}, \"commits_per_round\": {}}}",
                if j == 0 { "" } else { "," },
                m.name(),
                num(f.median_wall() * 1e3),
                num(f.ops_per_s()),
                num(percentile(&f.lat_us, 50.0)),
                num(percentile(&f.lat_us, 99.0)),
                f.ops_per_round
            );
        }
        let _ = write!(
            s,
            "}},\n     \"ratios\": {{\"sync_export_over_async\": {}, \"pnfsd_over_limit\": {}, \"pnfsd_over_device\": {}, \"sync_over_pnfsd\": {}}},\n     \"server\": {},\n     \"server_sync\": {}}}{}\n",
            num(r.ratio(Mode::ExportSync, Mode::ExportAsync)),
            num(r.ratio(Mode::Pnfsd, Mode::Limit)),
            num(r.ratio(Mode::Pnfsd, Mode::Device)),
            num(r.ratio(Mode::Sync, Mode::Pnfsd)),
            counters_json(r.server),
            counters_json(r.server_sync),
            if i + 1 == results.len() { "" } else { "," }
        );
    }
    s.push_str("  ]\n}\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_shutdown_counters_line() {
        let log = "x\n2026 INFO pnfsd: pNFS layout counters counters=PnfsCounters { layoutgets: 3, layoutget_ns: 9, layoutget_errors: 0, layoutcommits: 40, layoutcommit_ns: 4000000, layoutcommit_errors: 0, commit_log_writes: 10, commit_data_flushes: 20, commit_converted_blocks: 0 }\n";
        let c = ServerCounters::parse(log).unwrap();
        assert_eq!(c.layoutcommits, 40);
        assert_eq!(c.us_per_commit(), 100.0);
        assert_eq!(c.log_writes_per_commit(), 0.25);
        assert_eq!(c.flushes_per_commit(), 0.5);
        assert!(ServerCounters::parse("no such line").is_none());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
