//! Force benchmark, everything measured in one run on one file:
//! 1. force latency (commit + force_seq of a small transaction, one thread) against a raw
//!    4 KiB `pwrite` + `fdatasync` on the same file — the ratio, goal ≤ 1.1×;
//! 2. commits per log write with 1, 4, 16 and 64 concurrent committer+forcer threads — goal:
//!    grows with concurrency, ≥ 8 at 16.
//!
//! `cargo run --release -p metalog --example force_bench [-- <file> [iterations]]`
//! (default file: ./force_bench.img, removed afterwards; it must not be on tmpfs).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metalog::{BlockDev, FileDev, FlushSeq, Item, Log, LogOptions, Transaction, TxObject};

const DATA: u64 = 64 << 20;
const LOG_LEN: u64 = 64 << 20;
const UUID: [u8; 16] = *b"force-bench-uuid";

fn tx(t: u64, k: u64) -> Transaction {
    Transaction {
        items: vec![
            Item::Size { ino: t, size: k },
            Item::Timestamps {
                ino: t,
                atime: (k as i64, 0),
                mtime: (k as i64, 0),
                ctime: (k as i64, 0),
                change: k,
            },
        ],
        objects: vec![TxObject {
            id: t,
            timestamps_only: false,
        }],
    }
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

fn raw(dev: &FileDev, n: usize) -> Vec<Duration> {
    let buf = vec![0xa5u8; 4096];
    (0..n)
        .map(|i| {
            let t = Instant::now();
            dev.write_at(&buf, (i as u64 % 1024) * 4096)
                .expect("pwrite");
            dev.flush().expect("fdatasync");
            t.elapsed()
        })
        .collect()
}

fn forces(log: &Log, n: usize) -> Vec<Duration> {
    (0..n)
        .map(|i| {
            let t = Instant::now();
            let c = log.commit(tx(1, i as u64)).expect("commit");
            log.force_seq(c).expect("force");
            t.elapsed()
        })
        .collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(args.next().unwrap_or_else(|| "force_bench.img".into()));
    let n: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(400);
    let dev = Arc::new(FileDev::create(&path, DATA + LOG_LEN).expect("create bench file"));
    // Preallocate and zero-write everything (mkfs does this for the log): no fdatasync below
    // has to commit filesystem metadata, for the raw writes either.
    let zero = vec![0u8; 1 << 20];
    for off in (0..DATA).step_by(zero.len()) {
        dev.write_at(&zero, off).expect("zero data");
    }
    dev.flush().expect("flush");
    let bdev: Arc<dyn BlockDev> = dev.clone();
    Log::format(bdev.clone(), DATA, LOG_LEN, UUID).expect("format");
    let fs = Arc::new(FlushSeq::new(bdev.clone()));
    let log = Log::mount(
        bdev,
        DATA,
        LOG_LEN,
        UUID,
        fs,
        LogOptions::default(),
        &mut |_, _| Ok(()),
    )
    .expect("mount");
    println!(
        "file {} (O_DIRECT: {}), {n} iterations",
        path.display(),
        dev.is_direct()
    );

    // Interleave rounds of both so drift in the shared machine's load hits both alike.
    let (mut r, mut f) = (Vec::new(), Vec::new());
    raw(&dev, 20);
    forces(&log, 20);
    // Many short alternating rounds: the disk is shared, its latency drifts by 10x.
    for _ in 0..20 {
        r.extend(raw(&dev, n / 20));
        f.extend(forces(&log, n / 20));
    }
    let (r50, f50) = (pct(&mut r, 0.5), pct(&mut f, 0.5));
    let (r90, f90) = (pct(&mut r, 0.9), pct(&mut f, 0.9));
    let rm = r.iter().sum::<Duration>() / r.len() as u32;
    let fm = f.iter().sum::<Duration>() / f.len() as u32;
    println!("raw 4 KiB pwrite+fdatasync: p50 {r50:?} p90 {r90:?} mean {rm:?}");
    println!("commit+force_seq:           p50 {f50:?} p90 {f90:?} mean {fm:?}");
    println!(
        "force/raw ratio: p50 {:.3}x  mean {:.3}x  (goal <= 1.1x)",
        f50.as_secs_f64() / r50.as_secs_f64(),
        fm.as_secs_f64() / rm.as_secs_f64()
    );

    println!("threads  commits  log_writes  commits/log_write  flushes  commits/s  p50_force");
    for threads in [1u64, 4, 16, 64] {
        let before = log.counters();
        let per = (n as u64 * 4 / threads).max(40);
        let t0 = Instant::now();
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut lat = Vec::new();
                    for k in 0..per {
                        let s = Instant::now();
                        log.commit(tx(t + 2, k)).expect("commit");
                        log.force_object(t + 2, true).expect("force");
                        lat.push(s.elapsed());
                    }
                    lat
                })
            })
            .collect();
        let mut lat: Vec<Duration> = hs
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect();
        let el = t0.elapsed();
        let after = log.counters();
        let commits = after.commits - before.commits;
        let writes = after.log_writes - before.log_writes;
        let flushes = after.flushes_issued - before.flushes_issued;
        println!(
            "{threads:>7}  {commits:>7}  {writes:>10}  {:>17.2}  {flushes:>7}  {:>9.0}  {:?}",
            commits as f64 / writes.max(1) as f64,
            commits as f64 / el.as_secs_f64(),
            pct(&mut lat, 0.5)
        );
    }
    log.unmount().expect("unmount");
    drop(log);
    let _ = std::fs::remove_file(&path);
}
