//! What the dispatcher's per-operation metrics cost: the two clock reads around a
//! handler and `OpMetrics::record` (`Server::ops`: a count and a histogram observation, all atomics), per
//! operation, on one thread and on two threads recording the same operation (the worst
//! case: one cache line shared). Prints nanoseconds per operation; compare with the
//! handler times `pnfsd_nfs_op_seconds` itself reports (tens of microseconds and up).
//!
//! `cargo run --release -p pnfsd --example op_metrics_cost`

use std::time::Instant;

use pnfsd::metrics::ops::OpMetrics;
use pnfsd::nfs4::opcode::NfsOp;
use pnfsd::nfs4::status::NfsStat;

const N: u32 = 5_000_000;

fn round(ops: &OpMetrics, threads: usize) -> f64 {
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                for i in 0..N {
                    let started = Instant::now();
                    std::hint::black_box(i);
                    let ran = started.elapsed();
                    ops.record(NfsOp::GETATTR, NfsStat::OK, Some(ran));
                }
            });
        }
    });
    t0.elapsed().as_nanos() as f64 / f64::from(N)
}

fn bare() -> f64 {
    let t0 = Instant::now();
    for i in 0..N {
        std::hint::black_box(i);
    }
    t0.elapsed().as_nanos() as f64 / f64::from(N)
}

fn main() {
    let mut one = Vec::new();
    let mut two = Vec::new();
    // One table, as the server's: the rounds after the first record into warm cells.
    let ops = OpMetrics::new();
    for _ in 0..5 {
        one.push(round(&ops, 1) - bare());
        two.push(round(&ops, 2) - bare());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (a, b) = (median(&mut one), median(&mut two));
    println!("per-op metrics cost: {a:.1} ns/op on 1 thread, {b:.1} ns/op (wall, per op of each thread) on 2 threads sharing one op's counters");
}
