//! Crash suite (issue 2 "Must show"): random transaction streams from concurrent committers
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

/// Runs of the default suite: sized so a debug build on a shared 2-core machine stays near
/// a minute while still passing 10,000 crash points.
const DEFAULT_RUNS: u64 = 400;
const MIN_CRASH_POINTS: u64 = 10_000;

fn suite(runs: u64, base: u64) -> RunStats {
    let mut total = RunStats::default();
    for i in 0..runs {
        let seed = base.wrapping_add(i);
        let st = run_one(seed);
        total.add(&st);
    }
    total
}

#[test]
fn crash_suite() {
    if let Some(seed) = env_u64("METALOG_CRASH_SEED") {
        let st = run_one(seed);
        eprintln!("seed {seed}: {st:?}");
        return;
    }
    let runs = env_u64("METALOG_CRASH_RUNS").unwrap_or(DEFAULT_RUNS);
    let st = suite(runs, 0x5eed_0000);
    eprintln!("crash suite: {runs} runs, {st:?}");
    assert!(
        st.crash_points >= MIN_CRASH_POINTS || runs < DEFAULT_RUNS,
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
    let st = suite(runs, env_u64("METALOG_SOAK_BASE").unwrap_or(0x50a4_0000));
    eprintln!("crash soak: {runs} runs, {st:?}");
}
