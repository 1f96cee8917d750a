//! Figures: per-mode statistics over rounds, the server's counters over each mode's rounds
//! (counters.rs), the stdout table and the `--json` file (hand-written JSON: flat, no new
//! crate).

use std::fmt::Write as _;
use std::time::Duration;

use super::counters::ServerCounters;
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
    /// The server's counters over this mode's rounds (None: no metrics endpoint).
    pub server: Option<ServerCounters>,
    /// Groups of concurrent LAYOUTCOMMITs over all rounds (`newfiles`; counters.rs): chains
    /// of overlapping intervals, and sets of commits all in flight at one moment.
    pub commit_groups: Option<usize>,
    pub commit_sets: Option<usize>,
}

impl ModeFigures {
    pub fn record_round(&mut self, wall: Duration, lats: Vec<Duration>) {
        self.walls.push(wall.as_secs_f64());
        self.ops_per_round = lats.len() as u64;
        self.lat_us
            .extend(lats.iter().map(|d| d.as_secs_f64() * 1e6));
    }
    pub fn record_server(&mut self, delta: Option<ServerCounters>) {
        if let Some(d) = delta {
            self.server.get_or_insert_with(Default::default).add(&d);
        }
    }
    pub fn record_groups(&mut self, chains: usize, sets: usize) {
        *self.commit_groups.get_or_insert(0) += chains;
        *self.commit_sets.get_or_insert(0) += sets;
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

/// One workload's result: every mode, and the two servers' counters.
#[derive(Debug, Clone, Default)]
pub struct WorkloadResult {
    pub name: String,
    pub writers: usize,
    pub file_size: u64,
    pub io_size: u64,
    pub rounds: usize,
    pub modes: Vec<(Mode, ModeFigures)>,
    /// What was skipped and why (e.g. `--server`: no second server for `sync`).
    pub notes: Vec<String>,
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
                shown(r.ratio(*m, Mode::Limit))
            );
        }
        if r.io_size == 0 {
            let _ = writeln!(
                s,
                "  sync-export ÷ async-export {}",
                shown(r.ratio(Mode::ExportSync, Mode::ExportAsync))
            );
            server_lines(&mut s, r);
            continue;
        }
        if r.mode(Mode::Unenforced).is_some() {
            let _ = writeln!(
                s,
                "  enforcement on ÷ off {} (wall-time medians; > 1: the check costs)",
                shown(r.ratio(Mode::Pnfsd, Mode::Unenforced))
            );
            server_lines(&mut s, r);
            continue;
        }
        let _ = writeln!(
            s,
            "  pnfsd ÷ limit {}   pnfsd ÷ device {}   sync ÷ pnfsd {}",
            shown(r.ratio(Mode::Pnfsd, Mode::Limit)),
            shown(r.ratio(Mode::Pnfsd, Mode::Device)),
            shown(r.ratio(Mode::Sync, Mode::Pnfsd))
        );
        server_lines(&mut s, r);
    }
    s
}

/// The server's counters of each mode that made LAYOUTCOMMITs or namespace ops, the commit
/// groups of `newfiles`, and the notes.
fn server_lines(s: &mut String, r: &WorkloadResult) {
    for (m, f) in &r.modes {
        let Some(c) = f.server else { continue };
        let ops = (f.ops_per_round as usize * f.walls.len()) as f64;
        if r.io_size == 0 {
            let per = if c.log_writes > 0.0 {
                format!("{:.2} ops per log write", ops / c.log_writes)
            } else {
                "no log write".into()
            };
            let _ = writeln!(
                s,
                "  server[{}]: {ops} ops, {} log forces ({} waited for a write), {} log writes: {per}",
                m.name(),
                c.log_forces,
                c.log_forces_wrote,
                c.log_writes
            );
            continue;
        }
        if c.layoutcommits == 0.0 {
            continue;
        }
        let _ = writeln!(
            s,
            "  server[{}]: {} LAYOUTCOMMITs, {:.0} µs each; per commit {:.3} log writes, {:.3} data flushes issued ({:.3} joined)",
            m.name(),
            c.layoutcommits,
            c.us_per_commit(),
            c.log_writes_per_commit(),
            c.flushes_issued_per_commit(),
            c.flushes_joined_per_commit()
        );
        if let (Some(g), Some(k)) = (f.commit_groups, f.commit_sets) {
            let _ = writeln!(
                s,
                "  groups[{}]: {} log writes for {} LAYOUTCOMMITs: {:.2} per group of overlapping commits ({g} groups), {:.2} per set of commits in flight at one moment ({k} sets); target ≤ 1",
                m.name(),
                c.log_writes,
                c.layoutcommits,
                c.log_writes / (g.max(1) as f64),
                c.log_writes / (k.max(1) as f64)
            );
        }
    }
    for n in &r.notes {
        let _ = writeln!(s, "  note: {n}");
    }
}

/// A ratio for the table: two decimals, or "-" when a mode was not run (skipped).
fn shown(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.2}")
    } else {
        "-".into()
    }
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
            "{{\"layoutcommits\": {}, \"us_per_commit\": {}, \"forces_that_wrote_per_commit\": {}, \"log_writes_per_commit\": {}, \"data_flushes_issued_per_commit\": {}, \"data_flushes_joined_per_commit\": {}, \"log_writes\": {}, \"log_commits\": {}, \"log_forces\": {}, \"log_forces_wrote\": {}}}",
            num(c.layoutcommits),
            num(c.us_per_commit()),
            num(c.forces_wrote_per_commit()),
            num(c.log_writes_per_commit()),
            num(c.flushes_issued_per_commit()),
            num(c.flushes_joined_per_commit()),
            num(c.log_writes),
            num(c.log_commits),
            num(c.log_forces),
            num(c.log_forces_wrote)
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
                "{}\n       \"{}\": {{\"wall_ms\": {}, \"commits_per_s\": {}, \"p50_us\": {}, \"p99_us\": {}, \"commits_per_round\": {},\n         \"server\": {}, \"commit_groups\": {}, \"commit_sets\": {}}}",
                if j == 0 { "" } else { "," },
                m.name(),
                num(f.median_wall() * 1e3),
                num(f.ops_per_s()),
                num(percentile(&f.lat_us, 50.0)),
                num(percentile(&f.lat_us, 99.0)),
                f.ops_per_round,
                counters_json(f.server),
                f.commit_groups.map_or("null".into(), |g| g.to_string()),
                f.commit_sets.map_or("null".into(), |g| g.to_string())
            );
        }
        let _ = write!(
            s,
            "}},\n     \"ratios\": {{\"sync_export_over_async\": {}, \"pnfsd_over_limit\": {}, \"pnfsd_over_device\": {}, \"sync_over_pnfsd\": {}, \"enforce_on_over_off\": {}}},\n     \"notes\": [{}]}}{}\n",
            num(r.ratio(Mode::ExportSync, Mode::ExportAsync)),
            num(r.ratio(Mode::Pnfsd, Mode::Limit)),
            num(r.ratio(Mode::Pnfsd, Mode::Device)),
            num(r.ratio(Mode::Sync, Mode::Pnfsd)),
            num(r.ratio(Mode::Pnfsd, Mode::Unenforced)),
            r.notes
                .iter()
                .map(|n| format!("\"{}\"", n.replace(['"', '\\'], "'")))
                .collect::<Vec<_>>()
                .join(", "),
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
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 50.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
