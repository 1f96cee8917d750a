//! Process-wide tuning of glibc's allocator, set once before the runtime's threads start.
//! Giving free pages back at run time is rpc/trim.rs's job; this module only decides how
//! many arenas there are for it to trim.
//!
//! The store's page cache frees 4 KiB node buffers in CLOCK order on whichever thread evicts
//! them, between small allocations of the same arena, so with glibc's default of 8 arenas
//! per core most freed memory is in holes too small to give back: the 10,000,000-file run
//! peaked at 525 MiB of RSS for a `metadata_cache` of 256M (bound 484), and at 64M a run of
//! 1,000,000 files at 126.5 MiB where heaptrack saw 50 MiB of heap at the peak. With as many
//! arenas as CPUs (at least 2, at most 8: `limit_arenas`) the same run peaked at 77 MiB at
//! unchanged create rates (jemalloc preloaded: 67.6, mimalloc 106; docs/benchmarks.md,
//! under Scale).

/// Arenas glibc may create, when the operator's environment does not say
/// (`MALLOC_ARENA_MAX`): one per CPU, between 2 and 8. Called before the runtime's threads
/// start; returns the limit set, if any.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
pub fn limit_arenas() -> Option<usize> {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return None;
    }
    let n = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(2, 8);
    // SAFETY: mallopt(3) sets a tunable of glibc's allocator under its own lock; it takes
    // plain integers and touches no memory of ours. M_ARENA_MAX bounds arenas created
    // from now on.
    let ok = unsafe { libc::mallopt(libc::M_ARENA_MAX, n as libc::c_int) } == 1;
    ok.then_some(n)
}

/// Other allocators manage their arenas by their own rules.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_arenas() -> Option<usize> {
    None
}
