//! CPU time of this process and of its threads, from Linux's /proc, for the benchmark
//! examples (`nvme-tcp/examples/bench.rs`, `server/examples/nvme_volume_bench.rs`), which
//! report CPU per I/O of the whole process and of the target's or initiator's threads.
//! A dev-dependency only: a crate of its own so that neither nvme-tcp nor pnfsd carries it.

/// User and system CPU time, in seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuTime {
    pub user: f64,
    pub system: f64,
}

impl CpuTime {
    pub fn total(self) -> f64 {
        self.user + self.system
    }
}

/// Clock ticks per second of /proc's utime and stime (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// The whole process, threads that ended included (/proc/self/stat); `None` where it cannot
/// be read.
pub fn process() -> Option<CpuTime> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_stat(&s).map(|(_, t)| t)
}

/// Each live thread's name (comm) and CPU time (/proc/self/task/*/stat): threads that ended
/// are missing, and so is one that ends while being read. `None` where the directory cannot
/// be read.
pub fn threads() -> Option<Vec<(String, CpuTime)>> {
    let dir = std::fs::read_dir("/proc/self/task").ok()?;
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Ok(s) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        if let Some((comm, t)) = parse_stat(&s) {
            out.push((comm.to_string(), t));
        }
    }
    Some(out)
}

/// comm and (utime, stime) of a stat line. comm is between the first "(" and the last ")":
/// a thread may put either in its name.
fn parse_stat(stat: &str) -> Option<(&str, CpuTime)> {
    let (a, b) = (stat.find('(')?, stat.rfind(')')?);
    let comm = stat.get(a + 1..b)?;
    // After comm: state is the 1st field, utime and stime the 12th and 13th.
    let mut f = stat[b + 1..].split_whitespace().skip(11);
    let mut secs = || Some(f.next()?.parse::<f64>().ok()? / USER_HZ);
    let user = secs()?;
    let system = secs()?;
    Some((comm, CpuTime { user, system }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_comm_has_parentheses_and_spaces() {
        let line = "4242 (a) b (c)) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 1 0";
        let (comm, t) = parse_stat(line).unwrap();
        assert_eq!(comm, "a) b (c)");
        assert_eq!(
            t,
            CpuTime {
                user: 2.5,
                system: 0.75
            }
        );
        assert_eq!(parse_stat("4242 (x) S 1 2"), None, "truncated");
    }

    /// A named thread that burns CPU shows up under its name (once 5 ticks have been charged
    /// to it), and the process total covers it, but for rounding: the kernel scales user and
    /// system time to the precise runtime and truncates each to ticks on its own, for the
    /// thread and for the process alike, so the process can show up to 2 ticks less than a
    /// thread (a clean-clone CI run saw the process total below the thread's).
    #[test]
    fn finds_a_named_thread_and_the_process() {
        let mine = || {
            let all = threads().unwrap();
            let named: Vec<_> = all.iter().filter(|(c, _)| c == "bench-cpu-test").collect();
            assert_eq!(named.len(), 1, "{all:?}");
            named[0].1
        };
        let t = std::thread::Builder::new()
            .name("bench-cpu-test".into())
            .spawn(move || {
                let t0 = std::time::Instant::now();
                let mut x = 1u64;
                loop {
                    for _ in 0..100_000 {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005) | 1);
                    }
                    let t = mine();
                    if t.total() >= 5.0 / USER_HZ || t0.elapsed().as_secs() >= 10 {
                        return t;
                    }
                }
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(t.total() > 0.0, "no CPU time in 10 s of work: {t:?}");
        let p = process().unwrap();
        assert!(
            p.total() >= t.total() - 2.0 / USER_HZ,
            "{p:?} against {t:?}"
        );
    }
}
