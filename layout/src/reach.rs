//! How far a LAYOUTGET reaches past the range it was asked for (RFC 8881 §18.43.3: the range
//! returned must cover `[loga_offset, loga_offset + loga_minlength)` and may be larger than
//! asked; knfsd over XFS returns whole mapped extents). Two rules, as pure functions over
//! block numbers and extent-map segments:
//!
//! - **Speculative preallocation** (`speculative_end`): an RW LAYOUTGET that has to allocate
//!   and reaches past EOF allocates more than asked, as XFS preallocates past EOF: the extra
//!   grows with the run of blocks the file already has just before the request (doubling as a
//!   file is written sequentially), between [`PREALLOC_MIN_BLOCKS`] and the configured
//!   maximum, and never more than a sixteenth of the free space.
//! - **Whole runs** (`run_end`, `run_start`): the returned range is widened over the mapped
//!   blocks around the request (forward over the run of mapped segments, backward inside the
//!   extent that holds the first block), bounded by the caller's limits.
//!
//! The Linux block client needs every returned range to be covered exactly by contiguous
//! extents starting at the range's offset (`bl_alloc_lseg`: "Final length mismatch"), which
//! the callers keep; it reuses a cached layout segment for any later I/O whose first byte the
//! segment contains (`pnfs_lseg_range_match`), so a wider range saves whole LAYOUTGETs.

use crate::extent_map::Segment;

/// The least speculative preallocation: 1 MiB (256 blocks of 4 KiB). The Linux client asks
/// for the contiguous dirty bytes of its page cache, so a writer that fsyncs every 64 KiB asks
/// for 64 KiB at a time: with 1 MiB more per allocating LAYOUTGET, the first one already
/// saves 16 round trips (and 16 log forces), and the doubling does the rest (a 16 MiB file
/// in 64 KiB steps takes 5 allocating LAYOUTGETs instead of 256).
pub const PREALLOC_MIN_BLOCKS: u64 = 256;

/// Default cap of one speculative preallocation, in bytes: 64 MiB, the span one LAYOUTGET
/// maps at most (`policy::MAX_SPAN_BYTES`); XFS caps its own at the largest extent, far
/// more, but a layout is recalled and returned as a whole, so a bound keeps a returned
/// layout and what close has to trim of the same order as one large write.
pub const DEFAULT_PREALLOC_MAX_BYTES: u64 = 64 << 20;

/// Speculation never takes more than `free / FREE_SHARE_DIVISOR` blocks: as XFS throttles
/// preallocation when free space runs low, a nearly full volume allocates only what is asked.
pub const FREE_SHARE_DIVISOR: u64 = 16;

/// The end block of an allocating RW LAYOUTGET for `[first, req_end)`: `req_end` itself when
/// the request ends inside the file (`eof_block` = blocks of the file size) or speculation is
/// off (`max_blocks == 0`); otherwise `req_end` plus `prev_run + (req_end - first)` (the
/// mapped blocks just before `first` and the request: doubling), clamped to
/// `[PREALLOC_MIN_BLOCKS, max_blocks]` and to `free_blocks / FREE_SHARE_DIVISOR`.
pub fn speculative_end(
    first: u64,
    req_end: u64,
    eof_block: u64,
    prev_run: u64,
    max_blocks: u64,
    free_blocks: u64,
) -> u64 {
    if req_end <= eof_block || max_blocks == 0 {
        return req_end;
    }
    let want = prev_run.saturating_add(req_end.saturating_sub(first));
    let extra = want
        .clamp(PREALLOC_MIN_BLOCKS.min(max_blocks), max_blocks)
        .min(free_blocks / FREE_SHARE_DIVISOR);
    req_end.saturating_add(extra)
}

/// The end of the run of mapped segments that `segs` (a lookup starting at `from`) begins
/// with: `from` if the first segment is a hole.
pub fn run_end(segs: &[Segment], from: u64) -> u64 {
    let mut end = from;
    for s in segs {
        match s {
            Segment::Mapped {
                file_block, len, ..
            } if *file_block == end => end += len,
            _ => break,
        }
    }
    end
}

/// Where the extent holding block `first` starts, given the segments of a lookup of
/// `[lo, first + 1)`: the first block of the last segment if it is mapped (clipped at `lo`
/// by the lookup), else `first` (a hole). Widening only inside one extent keeps the number
/// of extents in the reply unchanged.
pub fn run_start(segs: &[Segment], first: u64) -> u64 {
    // A lookup gives one segment per extent (the map merges neighbours that continue each
    // other on disk in the same state), so the last segment is the extent holding `first`.
    match segs.last() {
        Some(Segment::Mapped {
            file_block, len, ..
        }) if file_block + len == first + 1 => *file_block,
        _ => first,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extent_map::{ExtState, ExtentMap};

    #[test]
    fn speculation_doubles_from_a_floor_to_a_cap() {
        let max = DEFAULT_PREALLOC_MAX_BYTES / 4096;
        let free = 1 << 30;
        // Inside the file: nothing extra.
        assert_eq!(speculative_end(0, 16, 16, 0, max, free), 16);
        assert_eq!(speculative_end(0, 16, 100, 0, max, free), 16);
        // Off.
        assert_eq!(speculative_end(0, 16, 0, 0, 0, free), 16);
        // A new file: the floor.
        assert_eq!(speculative_end(0, 16, 0, 0, max, free), 16 + 256);
        // Sequential: the run before the request doubles the file.
        assert_eq!(speculative_end(272, 288, 10, 272, max, free), 288 + 288);
        // Capped.
        assert_eq!(
            speculative_end(1 << 20, (1 << 20) + 16, 0, 1 << 20, max, free),
            (1 << 20) + 16 + max
        );
        // A nearly full volume: a sixteenth of the free space at most.
        assert_eq!(speculative_end(0, 16, 0, 0, max, 160), 26);
        // A cap below the floor wins.
        assert_eq!(speculative_end(0, 16, 0, 0, 8, free), 24);
    }

    #[test]
    fn a_sixteen_mib_file_in_64k_steps_takes_five_allocations() {
        let max = DEFAULT_PREALLOC_MAX_BYTES / 4096;
        let (mut allocated, mut n) = (0u64, 0);
        let mut off = 0;
        while off < 4096 {
            if off >= allocated {
                allocated = speculative_end(off, off + 16, off, off, max, 1 << 30);
                n += 1;
            }
            off += 16;
        }
        assert_eq!(n, 5);
    }

    #[test]
    fn runs_widen_over_mapped_blocks_only() {
        let mut m = ExtentMap::new();
        m.set(0, 100, 10, ExtState::Written);
        m.set(10, 110, 5, ExtState::Unwritten);
        m.set(20, 300, 4, ExtState::Unwritten);
        assert_eq!(run_end(&m.lookup(3, 30), 3), 15);
        assert_eq!(run_end(&m.lookup(15, 30), 15), 15);
        assert_eq!(run_end(&m.lookup(20, 2), 20), 22);
        // Backward: inside the extent holding the block, not across a state change.
        assert_eq!(run_start(&m.lookup(0, 8), 7), 0);
        assert_eq!(run_start(&m.lookup(0, 13), 12), 10);
        assert_eq!(run_start(&m.lookup(0, 18), 17), 17);
        assert_eq!(run_start(&m.lookup(5, 17), 21), 20);
    }
}
