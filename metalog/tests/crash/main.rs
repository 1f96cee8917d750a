//! Crash suite: random transaction streams from concurrent committers
//! and forcers on a [`CrashDev`], crash snapshots at random device operations, recovery, and
//! the invariants, checked against a model:
//! - every transaction whose force returned before the crash point is present;
//! - the recovered state is the model state after a whole number of checkpoints (nothing
//!   half-applied), never before the last forced state (timestamp-only changes included);
//! - recovering the recovered image — and an image crashed during recovery — gives the same
//!   state again.
//!
//! The "store" writes its whole state back into one of two slots in front of the log (with the
//! CSN it covers), so the log's tail moves, wraps and fills up under the test.
//!
//! `METALOG_CRASH_SEED=<n>` replays one run; `METALOG_CRASH_RUNS` sets the number of runs.

mod model;

use model::{run_one, RunStats};

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// The default suite runs until it has checked this many crash points, at least
/// `MIN_RUNS` runs and at most `MAX_RUNS`: ≈450 runs, ≈25 s in a debug build on the shared
/// 2-core machine. How many snapshots a run yields depends on timing (group commit merges
/// pushes), hence a target rather than a fixed run count.
const MIN_CRASH_POINTS: u64 = 10_000;
const MIN_RUNS: u64 = 300;
const MAX_RUNS: u64 = 2_000;

fn suite(runs: u64, base: u64, until_points: u64) -> RunStats {
    let mut total = RunStats::default();
    let mut i = 0;
    while i < runs || (total.crash_points < until_points && i < MAX_RUNS) {
        let seed = base.wrapping_add(i);
        total.add(&watched(seed));
        i += 1;
    }
    total
}

/// One run under a watchdog: a hang anywhere (workload, unmount, recovery) fails with its seed.
fn watched(seed: u64) -> RunStats {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(run_one(seed));
    });
    match rx.recv_timeout(std::time::Duration::from_secs(120)) {
        Ok(st) => {
            let _ = h.join();
            st
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // The run panicked: re-raise its message.
            match h.join() {
                Err(e) => std::panic::resume_unwind(e),
                Ok(()) => panic!("seed {seed}: run ended without a result"),
            }
        }
        Err(_) => panic!("crash suite seed {seed} hung (METALOG_CRASH_SEED={seed})"),
    }
}

#[test]
fn crash_suite() {
    if let Some(seed) = env_u64("METALOG_CRASH_SEED") {
        let st = watched(seed);
        eprintln!("seed {seed}: {st:?}");
        return;
    }
    let (runs, target) = match env_u64("METALOG_CRASH_RUNS") {
        Some(r) => (r, 0),
        None => (MIN_RUNS, MIN_CRASH_POINTS),
    };
    let st = suite(runs, 0x5eed_0000, target);
    eprintln!("crash suite: {st:?}");
    assert!(
        st.crash_points >= target,
        "only {} crash points",
        st.crash_points
    );
    assert!(st.wraps > 0, "the log never wrapped: {st:?}");
    assert!(st.space_waits > 0, "the log never filled up: {st:?}");
    assert!(
        st.overlapped_pushes > 0,
        "never two pushes in flight: {st:?}"
    );
}

/// Millions of crash points: `cargo test --release -p metalog --test crash -- --ignored`.
#[test]
#[ignore]
fn crash_soak() {
    let runs = env_u64("METALOG_CRASH_RUNS").unwrap_or(100_000);
    let st = suite(runs, env_u64("METALOG_SOAK_BASE").unwrap_or(0x50a4_0000), 0);
    eprintln!("crash soak: {runs} runs, {st:?}");
}
