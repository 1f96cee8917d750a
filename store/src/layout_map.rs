//! What a LAYOUTGET maps, and the trim of what it preallocated (one round trip per
//! run of a file rather than per client request; docs/design.md §4–5; layout::reach has the rules):
//!
//! - `map_for_layout`: RW allocates the holes of the request as unwritten blocks, plus
//!   speculative unwritten blocks past EOF (`layout::reach::speculative_end`), in one
//!   transaction made durable by one log force before the reply (docs/design.md §4); then READ
//!   and RW widen the returned range over the mapped run around the request, inside the
//!   bounds the caller gives (what no other client holds).
//! - `trim_eof`: frees the unwritten blocks past EOF, what a client was given in a layout and
//!   never committed, once the caller says no layout of the file is held or being handed out
//!   (XFS trims its post-EOF preallocation at close). Not forced: a trim lost in a crash
//!   leaves unwritten blocks past EOF, which read as zeros and are trimmed again after the
//!   grace period (`files_past_eof`); the freed blocks stay busy until the trim is durable.

use layout::reach::speculative_end;
use layout::{ExtState, Segment};
use metalog::Item;

use super::extents;
use super::inner::Inner;
use super::keys::K_EOFB;
use super::types::{FileType, Ino, Result, StoreError, Timespec, BLOCK, MAX_FILE_SIZE};
use super::Store;

/// How far one LAYOUTGET may reach, in file blocks: never before `lo` nor past `hi` (the
/// caller leaves out what other clients hold), and at most `prealloc_max` blocks of
/// speculative preallocation (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    pub lo: u64,
    pub hi: u64,
    pub prealloc_max: u64,
}

/// The blocks a LAYOUTGET hands out: segments covering `[first, first + len)` exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutMap {
    pub first: u64,
    pub segs: Vec<Segment>,
    /// Blocks this call allocated (the asked holes and the speculation).
    pub allocated: u64,
}

/// Extents a LAYOUTGET widens over past the request at most (and steps back over to see
/// how far the file has grown): a reply of a Linux client's usual `maxcount` (~4 KiB) holds
/// ~90 extents, so a longer run of small extents would be cut by `policy::fit` anyway, and the
/// cap keeps a LAYOUTGET of a fragmented file from walking its whole map.
const RUN_MAX_EXTENTS: usize = 64;

/// Extent items one trim writes at most (its log reservation); a file fragmented past EOF
/// into more pieces is trimmed over several calls (the next return or the sweep).
const TRIM_MAX_ITEMS: usize = 256;

impl Store {
    /// LAYOUTGET's blocks for `[first, first + n)` widened as `reach` allows; RW allocates the
    /// holes plus speculative blocks past EOF, durable before return (see the module comment).
    pub fn map_for_layout(
        &self,
        ino: Ino,
        first: u64,
        n: u64,
        rw: bool,
        r: Reach,
    ) -> Result<LayoutMap> {
        let req_end = first.checked_add(n).ok_or(StoreError::FileTooBig)?;
        let max_block = MAX_FILE_SIZE / BLOCK;
        if n == 0 {
            return Err(StoreError::Inval);
        }
        if rw && req_end > max_block {
            return Err(StoreError::FileTooBig);
        }
        let mut allocated = 0;
        if rw {
            let w = self.file_lock(ino);
            let (hole, spec_end) = {
                let g = self.rd();
                let i = g.meta(ino.0)?;
                check_regular(i.ftype)?;
                let segs = extents::lookup(&g.kv, ino.0, first, n)?;
                let hole = segs.iter().any(|s| matches!(s, Segment::Hole { .. }));
                // The mapped run just before the request: how much the file has grown so far
                // (bounded: more than the cap changes nothing).
                let prev =
                    extents::mapped_before(&g.kv, ino.0, first, r.prealloc_max, RUN_MAX_EXTENTS)?;
                let end = speculative_end(
                    first,
                    req_end,
                    i.size.div_ceil(BLOCK),
                    prev,
                    r.prealloc_max,
                    g.data_room(self.meta_reserve(&g)),
                );
                (hole, end.min(r.hi.max(req_end)).min(max_block))
            };
            let mut csn = None;
            if hole {
                let now = Timespec::now();
                let done = match self.allocate_blocks(ino, first, spec_end - first, None, now) {
                    // The speculation is only a guess: when it does not fit, the request alone.
                    Err(StoreError::NoSpace) if spec_end > req_end => {
                        self.allocate_blocks(ino, first, n, None, now)?
                    }
                    other => other?,
                };
                if let Some((c, blocks)) = done {
                    csn = Some(c);
                    allocated = blocks;
                }
            }
            drop(w);
            // docs/design.md §4: the allocation is durable before the reply — one force for the
            // asked blocks and the speculation together.
            if let Some(csn) = csn {
                self.force(csn)?;
            }
        }
        let g = self.rd();
        let i = g.meta(ino.0)?;
        check_regular(i.ftype)?;
        // READ gains nothing past EOF (NONE_DATA), so it widens only up to the file's end.
        let hi = if rw {
            r.hi
        } else {
            r.hi.min(i.size.div_ceil(BLOCK).max(req_end))
        };
        // layout::reach's whole runs (`run_end`, `run_start`), found by seeks that stop at
        // the first hole: the cost follows the extents handed out, not the file's extent
        // count.
        let end = extents::run_end(&g.kv, ino.0, req_end, hi, RUN_MAX_EXTENTS)?;
        let start = match extents::extent_at(&g.kv, ino.0, first)? {
            Some(e) if r.lo < first => e.start.max(r.lo),
            _ => first,
        };
        Ok(LayoutMap {
            first: start,
            segs: extents::lookup(&g.kv, ino.0, start, end - start)?,
            allocated,
        })
    }

    /// Frees the unwritten blocks of `ino` past its EOF if `may()` — evaluated under the
    /// file's data lock, which every allocating LAYOUTGET also takes — allows it. Returns the
    /// blocks freed (busy until the trim is durable; never forced, see the module comment).
    pub fn trim_eof(&self, ino: Ino, may: &dyn Fn() -> bool) -> Result<u64> {
        let _w = self.file_lock(ino);
        if !may() {
            return Ok(0);
        }
        let res = self.reserve(64 * TRIM_MAX_ITEMS as u64)?;
        let mut g = self.wr();
        let Ok(i) = g.meta(ino.0) else {
            return Ok(0);
        };
        if i.ftype != FileType::Regular {
            return Ok(0);
        }
        let keep = i.size.div_ceil(BLOCK);
        let mut items = Vec::new();
        let mut blocks = 0;
        extents::each_from(&g.kv, ino.0, keep, &mut |e| {
            if e.state != ExtState::Unwritten {
                return Ok(true);
            }
            // The rest goes at the next trim (the next return or the sweep).
            if items.len() == TRIM_MAX_ITEMS {
                return Ok(false);
            }
            let s = e.start.max(keep);
            items.push(Item::ExtentFree {
                ino: ino.0,
                file_block: s,
                len_blocks: e.end - s,
            });
            blocks += e.end - s;
            Ok(true)
        })?;
        if items.is_empty() {
            // Nothing unwritten past EOF any more: the file leaves the eofblocks index.
            drop(g);
            self.unmark_eofblocks(ino, res)?;
            return Ok(0);
        }
        // Timestamps-only for the log's per-inode sequences: a later fdatasync of the file
        // need not wait for the trim (a lost trim is redone, see the module comment).
        self.commit_locked(&mut g, res, items, vec![Inner::tx(ino.0, true)])?;
        Ok(blocks)
    }

    /// Drop `ino` from the eofblocks index. Not logged: the index only narrows what
    /// `files_past_eof` checks, and an entry a crash brings back is checked and dropped again.
    fn unmark_eofblocks(&self, ino: Ino, _res: metalog::Reservation) -> Result<()> {
        let mut g = self.wr();
        g.mark(K_EOFB, ino.0, false)
    }

    /// Files that may have blocks past their EOF (after a restart: what crashed before its
    /// trim, or was never returned): the eofblocks index, as XFS tags such inodes.
    pub fn files_past_eof(&self) -> Vec<Ino> {
        let g = self.rd();
        let mut out = Vec::new();
        let mut from = 0;
        loop {
            let Ok(batch) = g.marked(K_EOFB, from, 1024) else {
                return out;
            };
            let Some(&last) = batch.last() else {
                return out;
            };
            for ino in batch {
                let past = g
                    .meta(ino)
                    .ok()
                    .filter(|m| m.ftype == FileType::Regular)
                    .map(|m| {
                        extents::any_from(&g.kv, ino, m.size.div_ceil(BLOCK)).unwrap_or(false)
                    });
                if past == Some(true) {
                    out.push(Ino(ino));
                }
            }
            from = last + 1;
        }
    }
}

fn check_regular(ft: FileType) -> Result<()> {
    match ft {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(StoreError::IsDir),
        _ => Err(StoreError::Inval),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{fresh, mk};
    use super::super::{NewNode, Store, StoreOptions, WrittenExtent, ROOT_INO};
    use super::*;

    const WIDE: Reach = Reach {
        lo: 0,
        hi: 1 << 20,
        prealloc_max: 16384,
    };

    fn mapped(s: &Store, ino: Ino) -> u64 {
        s.extents(ino, 0, 1 << 20)
            .unwrap()
            .iter()
            .filter(|s| matches!(s, Segment::Mapped { .. }))
            .map(|s| s.len())
            .sum()
    }

    /// Speculation, the trim of exactly the unwritten blocks past EOF, and free + used =
    /// total before and after a remount (the allocator is rebuilt from the extent maps).
    #[test]
    fn speculation_and_trim_keep_the_free_space_exact() {
        let (_d, path, s) = fresh();
        let f = mk(&s, ROOT_INO, "f", NewNode::Regular);
        let total = s.fsstat().total_bytes;
        let free0 = s.fsstat().free_bytes;
        let m = s.map_for_layout(f.ino, 0, 16, true, WIDE).unwrap();
        assert_eq!(m.first, 0);
        let got: u64 = m.segs.iter().map(|x| x.len()).sum();
        assert!(got > 16, "speculated: {got}");
        assert_eq!(m.allocated, got);
        assert_eq!(s.fsstat().free_bytes, free0 - got * BLOCK);
        // Off: exactly the request.
        let g = mk(&s, ROOT_INO, "g", NewNode::Regular);
        let off = Reach {
            prealloc_max: 0,
            ..WIDE
        };
        assert_eq!(
            s.map_for_layout(g.ino, 0, 16, true, off).unwrap().allocated,
            16
        );
        // Commit 10 blocks (size 10 blocks - 1 byte): the trim keeps blocks 0..10.
        let w = [WrittenExtent {
            file_block: 0,
            len_blocks: 10,
            phys_block: None,
        }];
        s.commit_blocks(f.ino, &w, Some(10 * BLOCK - 2), None, false)
            .unwrap();
        assert_eq!(s.trim_eof(f.ino, &|| false).unwrap(), 0, "refused");
        assert_eq!(s.files_past_eof().len(), 2);
        assert_eq!(s.trim_eof(f.ino, &|| true).unwrap(), got - 10);
        assert_eq!(mapped(&s, f.ino), 10);
        assert_eq!(s.trim_eof(f.ino, &|| true).unwrap(), 0, "idempotent");
        assert_eq!(s.files_past_eof(), vec![g.ino]);
        let free = s.fsstat().free_bytes;
        assert_eq!(free, free0 - 10 * BLOCK - 16 * BLOCK);
        s.unmount().unwrap();
        drop(s);
        let s = Store::open(&path, StoreOptions::default()).unwrap();
        assert_eq!(s.fsstat().free_bytes, free);
        assert_eq!(s.fsstat().total_bytes, total);
        assert_eq!(mapped(&s, f.ino), 10);
    }

    /// READ never allocates and widens over the mapped run up to EOF only; RW inside an
    /// allocated extent returns the extent, from its start.
    #[test]
    fn whole_runs_for_read_and_rw() {
        let (_d, _p, s) = fresh();
        let f = mk(&s, ROOT_INO, "f", NewNode::Regular);
        s.allocate(f.ino, 0, 64 * BLOCK).unwrap();
        let r = s.map_for_layout(f.ino, 8, 1, false, WIDE).unwrap();
        assert_eq!((r.first, r.allocated), (0, 0));
        assert_eq!(r.segs.iter().map(|x| x.len()).sum::<u64>(), 64);
        let past = s.map_for_layout(f.ino, 100, 1, false, WIDE).unwrap();
        assert_eq!(past.first, 100);
        assert_eq!(
            past.segs,
            vec![Segment::Hole {
                file_block: 100,
                len: 1
            }]
        );
        let narrow = Reach {
            lo: 8,
            hi: 9,
            prealloc_max: 16384,
        };
        let w = s.map_for_layout(f.ino, 8, 1, true, narrow).unwrap();
        assert_eq!((w.first, w.allocated), (8, 0));
        assert_eq!(w.segs.len(), 1);
        let w = s.map_for_layout(f.ino, 8, 1, true, WIDE).unwrap();
        assert_eq!(w.first, 0);
        assert_eq!(w.segs.iter().map(|x| x.len()).sum::<u64>(), 64);
    }
}

/// A LAYOUTGET of a fragmented file costs what the extents it hands out
/// cost, not the file's extent count.
#[cfg(test)]
mod scale_tests {
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    use super::super::{Ino, NewNode, SetAttrs, Store, StoreOptions, WrittenExtent, ROOT_INO};
    use super::*;

    /// The reach the NFS layer gives a LAYOUTGET of `[first, +n)` that no other client
    /// conflicts with (nfs4/ops/layoutget.rs `reach`): `policy::MAX_SPAN_BYTES` either way.
    fn nfs_reach(first: u64, n: u64) -> Reach {
        let span = layout::policy::MAX_SPAN_BYTES / BLOCK;
        Reach {
            lo: first.saturating_sub(span),
            hi: first.saturating_add(span).max(first + n),
            prealloc_max: 0,
        }
    }

    /// A file of `n` one-block extents at file blocks 0, 2, 4, ... (holes between), made
    /// without a log force per extent (`allocate_blocks` commits; the test forces once).
    fn fragmented(s: &Store, name: &str, n: u64) -> Ino {
        let f = s
            .create(
                ROOT_INO,
                name.as_bytes(),
                NewNode::Regular,
                &SetAttrs::default(),
                (0, 0),
            )
            .unwrap()
            .0
            .ino;
        let now = Timespec::now();
        for i in 0..n {
            s.allocate_blocks(f, 2 * i, 1, Some((2 * i + 2) * BLOCK), now)
                .unwrap();
        }
        s.log().force_all().unwrap();
        f
    }

    fn volume(size: u64) -> (tempfile::TempDir, std::path::PathBuf) {
        // On tmpfs when there is one: the figures are the store's work, not the disk's flush.
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let path = dir.path().join("vol.img");
        Store::mkfs(&path, size, false).unwrap();
        (dir, path)
    }

    /// A cold LAYOUTGET in the middle of a 20,000-extent file reads a root-to-leaf path or
    /// two, not the leaves of every extent within the reach (±64 MiB: ~8,000 extents here,
    /// ~80 leaves, which a lookup per extent would walk).
    #[test]
    fn layoutget_of_a_fragmented_file_reads_a_few_nodes() {
        let (_d, path) = volume(1 << 30);
        let opts = StoreOptions {
            sync: false,
            ..StoreOptions::default()
        };
        let s = Store::open(&path, opts.clone()).unwrap();
        let f = fragmented(&s, "frag", 20_000);
        s.unmount().unwrap();
        drop(s);
        let s = Store::open(&path, opts).unwrap();
        s.getattr(f).unwrap();
        let reads = s.inner.rd().kv.rd.reads.clone();
        for (first, rw) in [(20_000u64, false), (20_010, true), (30_000, false)] {
            let r0 = reads.load(Ordering::Relaxed);
            let m = s
                .map_for_layout(f, first, 1, rw, nfs_reach(first, 1))
                .unwrap();
            assert_eq!(m.first, first, "one-block extents: nothing to widen over");
            assert_eq!(m.segs.len(), 1);
            let read = reads.load(Ordering::Relaxed) - r0;
            assert!(read <= 8, "LAYOUTGET at {first} read {read} tree nodes");
        }
        s.unmount().unwrap();
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    }

    /// Figures, not a timing test: `cargo test --release -p store --lib extent_scale_figures
    /// -- --ignored --nocapture`. LAYOUTGET (READ, RW over mapped blocks, RW over a hole) and
    /// LAYOUTCOMMIT (one unwritten block converted) in a 1,000,000-extent file against a
    /// 100-extent one: medians of interleaved rounds, µs per call, on tmpfs when there is one.
    #[test]
    #[ignore]
    fn extent_scale_figures() {
        let big_n: u64 = std::env::var("EXTENTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        let (_d, path) = volume(16 << 30);
        let opts = StoreOptions {
            sync: false,
            ..StoreOptions::default()
        };
        let s = Store::open(&path, opts).unwrap();
        let t = Instant::now();
        let big = fragmented(&s, "big", big_n);
        let build = t.elapsed().as_secs_f64();
        s.write_back().unwrap();
        let (nodes, _, _) = s.metadata_usage();
        println!(
            "load average {}; {big_n} extents built in {build:.1} s; tree {nodes} nodes",
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
        // 100 calls of each kind per file and round, at distinct extents: LAYOUTGET READ and
        // RW of a mapped block, RW of the hole after it (allocates it, forced), LAYOUTCOMMIT
        // of that new block (converts it, forced). The 100-extent file is made anew each
        // round (untimed) so that its holes are holes again.
        let ops = 100u64;
        let names = [
            "LAYOUTGET READ",
            "LAYOUTGET RW mapped",
            "LAYOUTGET RW hole",
            "LAYOUTCOMMIT",
        ];
        let mut big_us = vec![Vec::new(); 4];
        let mut small_us = vec![Vec::new(); 4];
        for round in 0..5u64 {
            let small = fragmented(&s, &format!("small{round}"), 100);
            for (ino, n, out) in [(big, big_n, &mut big_us), (small, 100, &mut small_us)] {
                let at = |i: u64| 2 * ((i * 7919 + round * 104_729) % n);
                for (row, r) in out.iter_mut().enumerate() {
                    let t = Instant::now();
                    for i in 0..ops {
                        let b = at(i);
                        match row {
                            0 | 1 => {
                                s.map_for_layout(ino, b, 1, row == 1, nfs_reach(b, 1))
                                    .unwrap();
                            }
                            2 => {
                                let m = s
                                    .map_for_layout(ino, b + 1, 1, true, nfs_reach(b + 1, 1))
                                    .unwrap();
                                assert_eq!(m.allocated, 1);
                            }
                            _ => {
                                let w = [WrittenExtent {
                                    file_block: b + 1,
                                    len_blocks: 1,
                                    phys_block: None,
                                }];
                                let c = s.commit_blocks(ino, &w, None, None, false).unwrap();
                                assert_eq!(c.converted_blocks, 1);
                            }
                        }
                    }
                    r.push(t.elapsed().as_secs_f64() * 1e6 / ops as f64);
                }
            }
            s.remove(ROOT_INO, format!("small{round}").as_bytes())
                .unwrap();
        }
        for (i, name) in names.iter().enumerate() {
            let (b, sm) = (median(big_us[i].clone()), median(small_us[i].clone()));
            println!(
                "  {name:<20} {big_n}-extent file {b:8.1} µs, 100-extent file {sm:8.1} µs ({:.2}×)",
                b / sm
            );
        }
        s.unmount().unwrap();
    }
}
