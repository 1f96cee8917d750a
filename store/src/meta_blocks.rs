//! The blocks the store's metadata holds among the data blocks: B+tree nodes and the
//! checkpoint's blobs (free-space list, client records), kept as a set of runs so that the
//! embedded NVMe/TCP target can refuse any host's write into them (it
//! "never lets a host other than the MDS write the blocks of the superblock, log or
//! metadata area"; docs/store.md "Metadata blocks").
//!
//! Tree nodes come from the same free space as file data (docs/store.md), so there is no
//! fixed metadata area past the log to guard. The set follows the allocator exactly: the
//! write-back adds a run when it takes it for nodes or blobs, and takes blocks out when it
//! gives them back (unused rest of a run, replaced nodes and old blobs once the new checkpoint
//! is in, everything taken by a failed write-back), in each case next to the allocator call,
//! under the state lock, so a block is out of the set before any file can be given it.
//!
//! A mount reads O(1) metadata, so the nodes of the tree on disk are
//! not known at mount: `walk` finds them after the mount, on a thread of its own, holding
//! the write-back's mutex so that the tree cannot change under it. It reads only the internal
//! nodes (a leaf's block is in its parent): about one node in a hundred. Until it is done,
//! `check` answers `NotReady` and the target's gate refuses every write a layout does not
//! cover (the layouts' own blocks are file data, never metadata).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{OnceLock, RwLock};

/// What `MetaBlocks::check` found for a range of blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaCheck {
    /// No block of the range holds metadata.
    Clear,
    /// Some block of the range is a tree node or a checkpoint blob.
    Metadata,
    /// The set is still being built after the mount (`walk`).
    NotReady,
}

/// Runs of metadata blocks, by first block: `start → end` (exclusive), never touching or
/// overlapping (adjacent runs are joined).
#[derive(Default)]
pub struct MetaBlocks {
    runs: RwLock<BTreeMap<u64, u64>>,
    ready: AtomicBool,
    /// What the walk after the mount found: (tree nodes, milliseconds).
    walked: OnceLock<(u64, u64)>,
}

impl MetaBlocks {
    pub fn new() -> MetaBlocks {
        MetaBlocks::default()
    }

    /// Blocks `[start, start + len)` now hold (or are taken for) metadata.
    pub fn insert(&self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (mut s, mut e) = (start, start.saturating_add(len));
        let mut runs = self.runs.write().unwrap_or_else(|p| p.into_inner());
        // A run starting at or before `s` that reaches it joins.
        if let Some((&ps, &pe)) = runs.range(..=s).next_back() {
            if pe >= s {
                s = ps;
                e = e.max(pe);
                runs.remove(&ps);
            }
        }
        // Runs starting inside `[s, e]` join too.
        while let Some((&ns, &ne)) = runs.range(s..=e).next() {
            e = e.max(ne);
            runs.remove(&ns);
        }
        runs.insert(s, e);
    }

    /// Blocks `[start, start + len)` went back to free space.
    pub fn remove(&self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let (s, e) = (start, start.saturating_add(len));
        let mut runs = self.runs.write().unwrap_or_else(|p| p.into_inner());
        // The run that starts before `s` keeps its head, and its tail past `e` if any.
        if let Some((&ps, &pe)) = runs.range(..s).next_back() {
            if pe > s {
                runs.insert(ps, s);
                if pe > e {
                    runs.insert(e, pe);
                }
            }
        }
        while let Some((&ns, &ne)) = runs.range(s..e).next() {
            runs.remove(&ns);
            if ne > e {
                runs.insert(e, ne);
            }
        }
    }

    /// Whether any block of `[start, start + len)` holds metadata: one lookup, no scan.
    pub fn check(&self, start: u64, len: u64) -> MetaCheck {
        if !self.ready.load(Ordering::Acquire) {
            return MetaCheck::NotReady;
        }
        if len == 0 {
            return MetaCheck::Clear;
        }
        let end = start.saturating_add(len);
        let runs = self.runs.read().unwrap_or_else(|p| p.into_inner());
        match runs.range(..end).next_back() {
            Some((_, &re)) if re > start => MetaCheck::Metadata,
            _ => MetaCheck::Clear,
        }
    }

    /// The walk after the mount is done: `check` answers from the set from now on.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// The walk of the tree after the mount found `nodes` nodes in `ms` ms (inner.rs
    /// `walk_meta_blocks`).
    pub(super) fn set_walked(&self, nodes: u64, ms: u64) {
        let _ = self.walked.set((nodes, ms));
    }

    /// (tree nodes found, milliseconds) of the walk after the mount, once it is done.
    pub fn walked(&self) -> Option<(u64, u64)> {
        self.walked.get().copied()
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// (runs, blocks) in the set, for the mount's log line and the tests.
    pub fn size(&self) -> (usize, u64) {
        let runs = self.runs.read().unwrap_or_else(|p| p.into_inner());
        (runs.len(), runs.iter().map(|(s, e)| e - s).sum())
    }

    /// The set as runs `(start, len)`, in block order (tests, fsck; the server's NVMe guard
    /// tests too, so not behind `cfg(test)`).
    pub fn runs(&self) -> Vec<(u64, u64)> {
        let runs = self.runs.read().unwrap_or_else(|p| p.into_inner());
        runs.iter().map(|(&s, &e)| (s, e - s)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(runs: &[(u64, u64)]) -> MetaBlocks {
        let m = MetaBlocks::new();
        for &(s, l) in runs {
            m.insert(s, l);
        }
        m.set_ready();
        m
    }

    #[test]
    fn inserts_join_touching_and_overlapping_runs() {
        let m = set(&[(10, 5), (20, 5), (15, 5)]);
        assert_eq!(m.runs(), vec![(10, 15)]);
        let m = set(&[(10, 5), (30, 5), (12, 20)]);
        assert_eq!(m.runs(), vec![(10, 25)]);
        let m = set(&[(10, 5), (16, 1)]);
        assert_eq!(m.runs(), vec![(10, 5), (16, 1)]);
        m.insert(15, 1);
        assert_eq!(m.runs(), vec![(10, 7)]);
        m.insert(11, 2);
        assert_eq!(m.runs(), vec![(10, 7)]);
    }

    #[test]
    fn removes_split_and_trim_runs() {
        let m = set(&[(10, 10)]);
        m.remove(12, 2);
        assert_eq!(m.runs(), vec![(10, 2), (14, 6)]);
        m.remove(8, 3);
        assert_eq!(m.runs(), vec![(11, 1), (14, 6)]);
        m.remove(18, 10);
        assert_eq!(m.runs(), vec![(11, 1), (14, 4)]);
        m.remove(0, 100);
        assert_eq!(m.runs(), vec![]);
        // Removing what is not there changes nothing (a write-back may free blocks the walk
        // had not reached yet).
        let m = set(&[(10, 2)]);
        m.remove(20, 5);
        assert_eq!(m.runs(), vec![(10, 2)]);
    }

    #[test]
    fn check_sees_any_block_of_a_range() {
        let m = set(&[(100, 1), (200, 50)]);
        assert_eq!(m.check(99, 1), MetaCheck::Clear);
        assert_eq!(m.check(99, 2), MetaCheck::Metadata);
        assert_eq!(m.check(101, 99), MetaCheck::Clear);
        assert_eq!(m.check(150, 51), MetaCheck::Metadata);
        assert_eq!(m.check(249, 1), MetaCheck::Metadata);
        assert_eq!(m.check(250, 1000), MetaCheck::Clear);
        assert_eq!(m.check(0, u64::MAX), MetaCheck::Metadata);
        assert_eq!(m.check(200, 0), MetaCheck::Clear);
        let fresh = MetaBlocks::new();
        fresh.insert(5, 1);
        assert_eq!(fresh.check(0, 1), MetaCheck::NotReady);
    }

    /// Against a model (a set of blocks), random inserts and removes.
    #[test]
    fn follows_a_model_of_single_blocks() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let m = set(&[]);
        let mut model = std::collections::BTreeSet::new();
        for _ in 0..5_000 {
            let s = rng.gen_range(0..400u64);
            let l = rng.gen_range(0..20u64);
            if rng.gen_bool(0.55) {
                m.insert(s, l);
                model.extend(s..s + l);
            } else {
                m.remove(s, l);
                for b in s..s + l {
                    model.remove(&b);
                }
            }
            let q = rng.gen_range(0..420u64);
            let ql = rng.gen_range(1..10u64);
            let want = (q..q + ql).any(|b| model.contains(&b));
            assert_eq!(m.check(q, ql) == MetaCheck::Metadata, want);
        }
        let blocks: Vec<u64> = m.runs().iter().flat_map(|&(s, l)| s..s + l).collect();
        assert_eq!(blocks, model.into_iter().collect::<Vec<_>>());
        // Runs never touch: each is maximal.
        let r = m.runs();
        assert!(r.windows(2).all(|w| w[0].0 + w[0].1 < w[1].0));
    }
}
