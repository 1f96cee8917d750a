//! `pnfs-bench`: the benchmark workloads against a pnfsd it starts itself (or one already running,
//! `--server`), with ratios against the physical limit measured in the same run (see
//! docs/benchmarks.md and `src/bench/`).
#![deny(unsafe_code)]

#[path = "../bench/mod.rs"]
mod bench;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: pnfs-bench [OPTIONS] [WORKLOAD...]
       pnfs-bench scale [--files N] [--dirs D] [--sessions C] [--big M] [--volume-size 64G]
                        [--cache 256M] [--window W] [--baseline PNFSD_BIN] [--baseline-files N]
                       [--baseline-rounds R] [--compare-only]
  workloads: overwrite-1 overwrite-4 small newfiles meta-1 meta-8 (default: all)
  scale: N empty files in D directories by C sessions plus one directory of M entries
         (docs/benchmarks.md \"Scale\"), on a pnfsd it starts
  --rounds N            interleaved rounds per workload, figures are medians (default 3)
  --quick               one round, sizes divided by 4
  --scale DIV           divide every file size by DIV (the smoke test uses a tiny run)
  --json FILE           also write the figures as JSON
  --nvme                write data through the NVMe/TCP initiator to pnfsd's embedded target
                        (Write without FUA, the server flushes at LAYOUTCOMMIT; the limit
                        loop uses NVMe Write + Flush) instead of pwrite to the volume file
  --enforcement         with --nvme: the layout workloads against two started servers, the
                        target's layout check on (pnfsd) and off (enforce-off,
                        nvme_enforce_layouts = false), and their ratio (default 5 rounds;
                        docs/pnfs.md \"Enforcement\")
  --server HOST:PORT    use a running pnfsd instead of starting servers (modes that need a
                        second server config, sync and async-export, are skipped)
  --volume PATH         its volume file or device (for layout I/O without --nvme)
  --metrics HOST:PORT   its metrics endpoint (metrics_listen), for the server counters
  --nvme-addr HOST:PORT its NVMe/TCP target (default: the --server host, port 4420)
  --nqn NQN             its subsystem NQN (default nqn.2026-11.org.pnfsd:volume)
  env TMPDIR chooses where started servers' volume files live (the device measured)";

struct Args {
    rounds: usize,
    scale: u64,
    json: Option<PathBuf>,
    only: Vec<String>,
    target: bench::target::Options,
}

fn addr(n: &str, v: String) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    v.to_socket_addrs()
        .map_err(|e| format!("{n} {v}: {e}"))?
        .next()
        .ok_or(format!("{n} {v}: no address"))
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        rounds: 0,
        scale: 1,
        json: None,
        only: vec![],
        target: Default::default(),
    };
    let mut quick = false;
    while let Some(x) = it.next() {
        let mut val = |n: &str| it.next().ok_or(format!("{n} needs a value"));
        match x.as_str() {
            "--rounds" => {
                a.rounds = val("--rounds")?
                    .parse()
                    .map_err(|e| format!("--rounds: {e}"))?
            }
            "--scale" => {
                a.scale = val("--scale")?
                    .parse()
                    .map_err(|e| format!("--scale: {e}"))?
            }
            "--json" => a.json = Some(PathBuf::from(val("--json")?)),
            "--quick" => quick = true,
            "--nvme" => a.target.nvme = true,
            "--enforcement" => a.target.enforcement = true,
            "--server" => a.target.server = Some(addr("--server", val("--server")?)?),
            "--metrics" => a.target.metrics = Some(addr("--metrics", val("--metrics")?)?),
            "--nvme-addr" => a.target.nvme_addr = Some(addr("--nvme-addr", val("--nvme-addr")?)?),
            "--nqn" => a.target.nqn = Some(val("--nqn")?),
            "--volume" => a.target.volume = Some(PathBuf::from(val("--volume")?)),
            "-h" | "--help" => return Err(String::new()),
            w if !w.starts_with('-') => a.only.push(w.to_string()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if quick {
        a.scale = a.scale.max(1) * 4;
    }
    let t = &a.target;
    if a.rounds == 0 {
        a.rounds = match (quick, t.enforcement) {
            (true, _) => 1,
            // Two modes only: more rounds for the same time, a steadier median.
            (false, true) => 5,
            (false, false) => 3,
        };
    }
    if t.enforcement && (!t.nvme || t.server.is_some()) {
        return Err(
            "--enforcement needs --nvme (the check runs at the target) and no --server \
                    (it starts both servers)"
                .into(),
        );
    }
    if t.server.is_none() && (t.volume.is_some() || t.metrics.is_some() || t.nvme_addr.is_some()) {
        return Err("--volume, --metrics and --nvme-addr describe a --server".into());
    }
    Ok(a)
}

fn parse_scale(mut it: impl Iterator<Item = String>) -> Result<bench::scale::ScaleArgs, String> {
    let mut a = bench::scale::ScaleArgs::default();
    while let Some(x) = it.next() {
        let mut val = |n: &str| it.next().ok_or(format!("{n} needs a value"));
        let num = |n: &str, v: String| v.parse::<u64>().map_err(|e| format!("{n}: {e}"));
        match x.as_str() {
            "--files" => a.files = num("--files", val("--files")?)?,
            "--dirs" => a.dirs = num("--dirs", val("--dirs")?)?,
            "--sessions" => a.sessions = num("--sessions", val("--sessions")?)? as usize,
            "--big" => a.big = num("--big", val("--big")?)?,
            "--window" => a.window = num("--window", val("--window")?)?,
            "--volume-size" => a.volume_size = val("--volume-size")?,
            "--cache" => a.cache = val("--cache")?,
            "--baseline" => a.baseline = Some(PathBuf::from(val("--baseline")?)),
            "--baseline-files" => {
                a.baseline_files = num("--baseline-files", val("--baseline-files")?)?
            }
            "--baseline-rounds" => {
                a.baseline_rounds = num("--baseline-rounds", val("--baseline-rounds")?)? as usize
            }
            "--compare-only" => a.compare_only = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if a.sessions == 0 || a.dirs == 0 || a.big == 0 || a.files == 0 {
        return Err("--files, --dirs, --sessions and --big must be positive".into());
    }
    Ok(a)
}

fn run_scale(args: impl Iterator<Item = String>) -> ExitCode {
    let a = match parse_scale(args) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("pnfs-bench: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pnfs-bench: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(bench::scale::run(&a)) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pnfs-bench scale: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some("scale") {
        argv.next();
        return run_scale(argv);
    }
    let args = match parse(argv) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("pnfs-bench: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let specs: Vec<bench::Spec> = bench::specs(args.scale)
        .into_iter()
        .filter(|s| {
            args.only.is_empty() || args.only.iter().any(|o| s.name.starts_with(o.as_str()))
        })
        .collect();
    if specs.is_empty() {
        eprintln!("pnfs-bench: no such workload\n{USAGE}");
        return ExitCode::from(2);
    }
    // A worker per writer (their pwrite/fdatasync block a worker) plus room for the I/O driver.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(6)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pnfs-bench: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let load_before = bench::loadavg();
    let mut results = Vec::new();
    for s in &specs {
        eprintln!("pnfs-bench: {} ...", s.name);
        match rt.block_on(bench::run_workload(s, args.rounds, &args.target)) {
            Ok(r) => results.push(r),
            Err(e) => {
                eprintln!("pnfs-bench: {}: {e}", s.name);
                return ExitCode::FAILURE;
            }
        }
    }
    let machine = format!(
        "{}, load average {load_before} before, {} after",
        bench::machine(),
        bench::loadavg()
    );
    println!("pnfs-bench on {machine}");
    if let Some(s) = args.target.server {
        println!("against the running pnfsd at {s}");
    }
    print!("{}", bench::report::table(&results));
    if let Some(p) = &args.json {
        if let Err(e) = std::fs::write(p, bench::report::json(&results, &machine)) {
            eprintln!("pnfs-bench: writing {}: {e}", p.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
