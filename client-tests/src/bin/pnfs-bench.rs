//! `pnfs-bench`: issue 7's workloads against a pnfsd it starts itself, with ratios against the
//! physical limit measured in the same run (see docs/benchmarks.md and `src/bench/`).
#![deny(unsafe_code)]

#[path = "../bench/mod.rs"]
mod bench;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str =
    "usage: pnfs-bench [--rounds N] [--quick] [--scale DIV] [--json FILE] [WORKLOAD...]
  workloads: overwrite-1 overwrite-4 small newfiles meta-1 meta-8 (default: all)
  --rounds N   interleaved rounds per workload, figures are medians (default 3; --quick 1)
  --quick      one round, sizes divided by 4
  --scale DIV  divide every file size by DIV (the smoke test uses a tiny run)
  --json FILE  also write the figures as JSON
  env TMPDIR chooses where the servers' volume files live (the device measured)";

struct Args {
    rounds: usize,
    scale: u64,
    json: Option<PathBuf>,
    only: Vec<String>,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        rounds: 0,
        scale: 1,
        json: None,
        only: vec![],
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
            "-h" | "--help" => return Err(String::new()),
            w if !w.starts_with('-') => a.only.push(w.to_string()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if quick {
        a.scale = a.scale.max(1) * 4;
    }
    if a.rounds == 0 {
        a.rounds = if quick { 1 } else { 3 };
    }
    Ok(a)
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
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
    let mut results = Vec::new();
    for s in &specs {
        eprintln!("pnfs-bench: {} ...", s.name);
        match rt.block_on(bench::run_workload(s, args.rounds)) {
            Ok(r) => results.push(r),
            Err(e) => {
                eprintln!("pnfs-bench: {}: {e}", s.name);
                return ExitCode::FAILURE;
            }
        }
    }
    let machine = bench::machine();
    println!("pnfs-bench on {machine}");
    print!("{}", bench::report::table(&results));
    if let Some(p) = &args.json {
        if let Err(e) = std::fs::write(p, bench::report::json(&results, &machine)) {
            eprintln!("pnfs-bench: writing {}: {e}", p.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
