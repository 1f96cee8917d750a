//! Extent-based free-space allocator over one region of blocks (the data area,
//! docs/design.md §2). Two indexes, as XFS's by-block and by-size free-space btrees: `by_off`
//! (start → len) to find the neighbours of a goal and to merge on free, `by_size` ((len, start))
//! to find the best fit. Nothing outside `[start, start + len)` is ever handed out, so the
//! superblock, the log and the metadata area cannot end up in a file or a layout.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum AllocError {
    #[error("extent {0}+{1} lies outside the managed region")]
    OutOfRange(u64, u64),
    #[error("extent {0}+{1} is (partly) free already")]
    DoubleFree(u64, u64),
    #[error("extent {0}+{1} is (partly) in use already")]
    InUse(u64, u64),
}

#[derive(Debug, Clone)]
pub struct Allocator {
    start: u64,
    len: u64,
    by_off: BTreeMap<u64, u64>,
    by_size: BTreeSet<(u64, u64)>,
    free: u64,
    /// A split region (`set_split`): blocks below this are the node area, the rest the file
    /// area; `free_low` counts the free blocks below it. One free list for both, so the
    /// free-space list on disk is the same for a split volume.
    split: Option<u64>,
    free_low: u64,
}

impl Allocator {
    /// A region whose blocks are all free.
    pub fn new_free(start: u64, len: u64) -> Allocator {
        let mut a = Allocator::new_full(start, len);
        if len > 0 {
            a.insert_free(start, len);
        }
        a
    }

    /// A region whose blocks are all in use (then `free` what is known free).
    pub fn new_full(start: u64, len: u64) -> Allocator {
        Allocator {
            start,
            len,
            by_off: BTreeMap::new(),
            by_size: BTreeSet::new(),
            free: 0,
            split: None,
            free_low: 0,
        }
    }

    /// Splits the region at `at` (before any block is freed): `alloc_nodes` then hands out
    /// blocks below it only, `alloc_data` blocks from it on.
    pub fn set_split(&mut self, at: u64) {
        debug_assert!(self.free == 0);
        self.split = Some(at.clamp(self.start, self.start + self.len));
    }

    pub fn is_split(&self) -> bool {
        self.split.is_some()
    }

    /// Free blocks where tree nodes and blobs are allocated (all of them, unsplit).
    pub fn free_node_blocks(&self) -> u64 {
        match self.split {
            Some(_) => self.free_low,
            None => self.free,
        }
    }

    /// Free blocks where file data is allocated (all of them, unsplit).
    pub fn free_data_blocks(&self) -> u64 {
        match self.split {
            Some(_) => self.free - self.free_low,
            None => self.free,
        }
    }

    /// Blocks where file data is allocated (all of them, unsplit).
    pub fn data_region_blocks(&self) -> u64 {
        match self.split {
            Some(at) => self.start + self.len - at,
            None => self.len,
        }
    }

    /// `alloc` for tree nodes and blobs: below the split.
    pub fn alloc_nodes(&mut self, goal: u64, want: u64) -> Option<(u64, u64)> {
        match self.split {
            Some(at) => self.alloc_within(self.start, at, goal, want),
            None => self.alloc(goal, want),
        }
    }

    /// `alloc` for file data: from the split on.
    pub fn alloc_data(&mut self, goal: u64, want: u64) -> Option<(u64, u64)> {
        match self.split {
            Some(at) => self.alloc_within(at, self.start + self.len, goal, want),
            None => self.alloc(goal, want),
        }
    }

    /// `alloc` inside `[lo, hi)`, by the same preferences (the goal, the first fit after
    /// it, a first fit before it, the largest piece), over the free extents clipped to the
    /// range. The fits are found by walking the range's extents: the size index spans both
    /// areas.
    fn alloc_within(&mut self, lo: u64, hi: u64, goal: u64, want: u64) -> Option<(u64, u64)> {
        if want == 0 || lo >= hi {
            return None;
        }
        // A goal outside the range (a file's previous extent elsewhere, or 0) starts at `lo`.
        let goal = if (lo..hi).contains(&goal) { goal } else { lo };
        let clip = |(s, l): (u64, u64)| {
            let (a, b) = (s.max(lo), (s + l).min(hi));
            (a < b).then_some((a, b - a))
        };
        let pick = if let Some(x) = self.free_containing(goal).and_then(clip) {
            let (fs, fl) = x;
            Some((goal, fs + fl - goal))
        } else {
            let from = |a: u64, b: u64| {
                let head = self.free_containing(a).filter(|&(s, _)| s < a);
                head.into_iter()
                    .chain(self.by_off.range(a..b).map(|(&s, &l)| (s, l)))
                    .filter_map(clip)
                    .collect::<Vec<_>>()
            };
            let after = from(goal, hi);
            let fit = |v: &[(u64, u64)]| v.iter().copied().find(|&(_, l)| l >= want);
            fit(&after).or_else(|| {
                let all = from(lo, hi);
                fit(&all).or_else(|| all.iter().copied().max_by_key(|&(_, l)| l))
            })
        };
        let (a, n) = pick?;
        let n = n.min(want);
        let (fs, fl) = self.free_containing(a)?;
        self.carve(fs, fl, a, n);
        Some((a, n))
    }

    /// How many blocks of `[start, start + len)` lie below the split.
    fn low_part(&self, start: u64, len: u64) -> u64 {
        match self.split {
            Some(at) if start < at => (start + len).min(at) - start,
            _ => 0,
        }
    }

    pub fn total_blocks(&self) -> u64 {
        self.len
    }
    pub fn free_blocks(&self) -> u64 {
        self.free
    }
    pub fn used_blocks(&self) -> u64 {
        self.len - self.free
    }
    pub fn region(&self) -> (u64, u64) {
        (self.start, self.len)
    }
    /// How many free extents there are.
    pub fn extent_count(&self) -> usize {
        self.by_off.len()
    }
    /// Free extents in block order.
    pub fn free_extents(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_off.iter().map(|(&s, &l)| (s, l))
    }

    fn in_region(&self, start: u64, len: u64) -> bool {
        len > 0
            && start >= self.start
            && start
                .checked_add(len)
                .is_some_and(|e| e <= self.start + self.len)
    }

    fn insert_free(&mut self, start: u64, len: u64) {
        self.by_off.insert(start, len);
        self.by_size.insert((len, start));
        self.free += len;
        self.free_low += self.low_part(start, len);
    }

    fn remove_free(&mut self, start: u64) -> u64 {
        let len = self.by_off.remove(&start).unwrap_or(0);
        self.by_size.remove(&(len, start));
        self.free -= len;
        self.free_low -= self.low_part(start, len);
        len
    }

    /// The free extent containing `block`, if any.
    fn free_containing(&self, block: u64) -> Option<(u64, u64)> {
        let (&s, &l) = self.by_off.range(..=block).next_back()?;
        (block < s + l).then_some((s, l))
    }

    /// Take `[start, start+len)` out of the free extent `(fs, fl)` that contains it.
    fn carve(&mut self, fs: u64, fl: u64, start: u64, len: u64) {
        self.remove_free(fs);
        if start > fs {
            self.insert_free(fs, start - fs);
        }
        let end = start + len;
        if end < fs + fl {
            self.insert_free(end, fs + fl - end);
        }
    }

    /// Allocate up to `want` contiguous blocks, preferring to start at `goal` (e.g. the block
    /// after the file's previous extent, so files stay contiguous), then the first extent after
    /// the goal that holds `want`, then the smallest extent that holds `want`, then the largest
    /// one (a shorter piece: the caller loops). `None` when the region is full.
    pub fn alloc(&mut self, goal: u64, want: u64) -> Option<(u64, u64)> {
        if want == 0 || self.free == 0 {
            return None;
        }
        if let Some((fs, fl)) = self.free_containing(goal) {
            let n = want.min(fs + fl - goal);
            self.carve(fs, fl, goal, n);
            return Some((goal, n));
        }
        let after = self
            .by_off
            .range(goal..)
            .find(|(_, &l)| l >= want)
            .map(|(&s, &l)| (s, l));
        let pick = after
            .or_else(|| self.by_size.range((want, 0)..).next().map(|&(l, s)| (s, l)))
            .or_else(|| self.by_size.iter().next_back().map(|&(l, s)| (s, l)));
        let (fs, fl) = pick?;
        let n = want.min(fl);
        self.carve(fs, fl, fs, n);
        Some((fs, n))
    }

    /// Mark `[start, start+len)` used (rebuilding at mount, replaying an allocation). Every
    /// block must be free.
    pub fn mark_used(&mut self, start: u64, len: u64) -> Result<(), AllocError> {
        if !self.in_region(start, len) {
            return Err(AllocError::OutOfRange(start, len));
        }
        match self.free_containing(start) {
            Some((fs, fl)) if start + len <= fs + fl => {
                self.carve(fs, fl, start, len);
                Ok(())
            }
            _ => Err(AllocError::InUse(start, len)),
        }
    }

    /// Make every block of `[start, start+len)` used, whatever it was (replaying a logged
    /// allocation over free space that may already hold it: a blind set). Returns how many
    /// blocks changed state.
    pub fn set_used(&mut self, start: u64, len: u64) -> Result<u64, AllocError> {
        if !self.in_region(start, len) {
            return Err(AllocError::OutOfRange(start, len));
        }
        let end = start + len;
        let mut changed = 0;
        // Free extents that overlap the range: the one containing `start`, then those that
        // begin inside it (the first of which may be that same one).
        let mut hits: Vec<(u64, u64)> = self.free_containing(start).into_iter().collect();
        for (&s, &l) in self.by_off.range(start..end) {
            if hits.first().is_none_or(|h| h.0 != s) {
                hits.push((s, l));
            }
        }
        for (fs, fl) in hits {
            let (a, b) = (fs.max(start), (fs + fl).min(end));
            if a < b {
                self.carve(fs, fl, a, b - a);
                changed += b - a;
            }
        }
        Ok(changed)
    }

    /// Make every block of `[start, start+len)` free, whatever it was (a blind set; see
    /// `set_used`). Returns how many blocks changed state.
    pub fn set_free(&mut self, start: u64, len: u64) -> Result<u64, AllocError> {
        if !self.in_region(start, len) {
            return Err(AllocError::OutOfRange(start, len));
        }
        let before = self.free;
        // Take out whatever is free inside, then free the whole range as one extent.
        self.set_used(start, len)?;
        self.free(start, len)?;
        Ok(self.free - before)
    }

    /// Whether every block of the extent is free.
    pub fn is_free(&self, start: u64, len: u64) -> bool {
        self.free_containing(start)
            .is_some_and(|(fs, fl)| start + len <= fs + fl)
    }

    /// Return `[start, start+len)`; no block of it may be free already.
    pub fn free(&mut self, start: u64, len: u64) -> Result<(), AllocError> {
        if !self.in_region(start, len) {
            return Err(AllocError::OutOfRange(start, len));
        }
        let end = start + len;
        if self.by_off.range(start..end).next().is_some() || self.free_containing(start).is_some() {
            return Err(AllocError::DoubleFree(start, len));
        }
        let mut s = start;
        let mut l = len;
        if let Some((&ps, &pl)) = self.by_off.range(..start).next_back() {
            if ps + pl == start {
                self.remove_free(ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.by_off.get(&end) {
            self.remove_free(end);
            l += nl;
        }
        self.insert_free(s, l);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn goal_and_contiguity() {
        let mut a = Allocator::new_free(100, 1000);
        assert_eq!(a.alloc(100, 10), Some((100, 10)));
        // The goal right after the previous piece continues the file contiguously.
        assert_eq!(a.alloc(110, 5), Some((110, 5)));
        assert_eq!(a.alloc(0, 5), Some((115, 5)));
        a.free(110, 5).unwrap();
        // A request that fits the hole before the goal prefers the first fit after the goal.
        assert_eq!(a.alloc(500, 5), Some((500, 5)));
        assert_eq!(a.free(110, 5), Err(AllocError::DoubleFree(110, 5)));
        assert_eq!(a.free(50, 5), Err(AllocError::OutOfRange(50, 5)));
        assert_eq!(a.mark_used(100, 1), Err(AllocError::InUse(100, 1)));
    }

    #[test]
    fn full_region_and_partial_pieces() {
        let mut a = Allocator::new_free(0, 10);
        a.mark_used(3, 2).unwrap();
        assert_eq!(a.alloc(9, 100), Some((9, 1)));
        // No extent holds 100 and the goal is not free: the largest piece comes back.
        assert_eq!(a.alloc(20, 100), Some((5, 4)));
        assert_eq!(a.alloc(20, 100), Some((0, 3)));
        assert_eq!(a.alloc(0, 1), None);
        assert_eq!(a.free_blocks(), 0);
    }

    #[test]
    fn set_used_and_set_free_are_blind() {
        let mut a = Allocator::new_free(0, 100);
        assert_eq!(a.set_used(10, 10).unwrap(), 10);
        assert_eq!(a.set_used(5, 20).unwrap(), 10, "only the free part changes");
        assert_eq!(a.free_blocks(), 80);
        assert_eq!(a.set_free(0, 10).unwrap(), 5);
        assert_eq!(a.set_free(0, 30).unwrap(), 15);
        assert_eq!(a.free_blocks(), 100);
        assert_eq!(a.free_extents().collect::<Vec<_>>(), vec![(0, 100)]);
        a.set_used(40, 1).unwrap();
        a.set_used(42, 1).unwrap();
        assert_eq!(a.set_used(39, 5).unwrap(), 3);
        assert_eq!(
            a.free_extents().collect::<Vec<_>>(),
            vec![(0, 39), (44, 56)]
        );
        assert!(a.set_used(99, 5).is_err());
    }

    /// A split region: nodes only below the split, data only from it on, each counted.
    #[test]
    fn split_areas_never_mix() {
        let mut a = Allocator::new_full(10, 100);
        a.set_split(40);
        a.free(10, 100).unwrap();
        assert_eq!((a.free_node_blocks(), a.free_data_blocks()), (30, 70));
        assert_eq!(a.data_region_blocks(), 70);
        assert_eq!(a.alloc_nodes(0, 20), Some((10, 20)));
        // Across the split the free extent is one, but a node run stops at it.
        assert_eq!(a.alloc_nodes(30, 50), Some((30, 10)));
        assert_eq!(a.alloc_nodes(0, 1), None);
        assert_eq!(a.alloc_data(0, 5), Some((40, 5)));
        assert_eq!(a.alloc_data(100, 50), Some((100, 10)));
        assert_eq!(a.alloc_data(100, 50), Some((45, 50)));
        assert_eq!(a.alloc_data(0, 50), Some((95, 5)));
        assert_eq!(a.alloc_data(0, 1), None);
        assert_eq!((a.free_node_blocks(), a.free_data_blocks()), (0, 0));
        a.free(35, 10).unwrap();
        assert_eq!((a.free_node_blocks(), a.free_data_blocks()), (5, 5));
        assert_eq!(a.alloc_data(0, 100), Some((40, 5)));
        assert_eq!(a.alloc_nodes(90, 100), Some((35, 5)));
        // Unsplit, both are the plain allocator.
        let mut u = Allocator::new_free(0, 10);
        assert_eq!(u.alloc_nodes(0, 4), Some((0, 4)));
        assert_eq!(u.alloc_data(0, 4), Some((4, 4)));
        assert_eq!((u.free_node_blocks(), u.free_data_blocks()), (2, 2));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Alloc(u64, u64),
        Free(usize, u64, u64),
        MarkUsed(u64, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..300, 1u64..40).prop_map(|(g, w)| Op::Alloc(g, w)),
            (any::<usize>(), 0u64..20, 1u64..20).prop_map(|(i, o, l)| Op::Free(i, o, l)),
            (0u64..300, 1u64..10).prop_map(|(s, l)| Op::MarkUsed(s, l)),
        ]
    }

    proptest! {
        /// No block is owned twice, free + used = total, and the allocator agrees with a
        /// per-block model after any sequence of operations.
        #[test]
        fn never_owned_twice(
            ops in proptest::collection::vec(op(), 1..200),
            split in proptest::option::of(20u64..276),
        ) {
            let (start, len) = (20u64, 256u64);
            let mut a = Allocator::new_full(start, len);
            if let Some(at) = split {
                a.set_split(at);
            }
            a.free(start, len).unwrap();
            let mut owner = vec![false; 400];
            let mut owned: Vec<(u64, u64)> = Vec::new();
            for o in ops {
                match o {
                    Op::Alloc(g, w) => {
                        // Split: odd goals ask for nodes, even ones for data.
                        let (got, (lo, hi)) = match split {
                            None => (a.alloc(g, w), (start, start + len)),
                            Some(at) if g % 2 == 1 => (a.alloc_nodes(g, w), (start, at)),
                            Some(at) => (a.alloc_data(g, w), (at, start + len)),
                        };
                        let area_free = (lo..hi).filter(|&b| !owner[b as usize]).count() as u64;
                        if let Some((s, l)) = got {
                            prop_assert!(s >= lo && s + l <= hi, "{}+{} outside {}..{}", s, l, lo, hi);
                            prop_assert!(l >= 1 && l <= w);
                            prop_assert!(s >= start && s + l <= start + len);
                            for b in s..s + l {
                                prop_assert!(!owner[b as usize], "block {} owned twice", b);
                                owner[b as usize] = true;
                            }
                            owned.push((s, l));
                        } else {
                            prop_assert_eq!(area_free, 0);
                        }
                    }
                    Op::Free(i, off, l) => {
                        if owned.is_empty() { continue; }
                        let k = i % owned.len();
                        let (s, ol) = owned[k];
                        // Free a sub-range of an owned extent (truncate frees partial extents).
                        let off = off % ol;
                        let l = l.min(ol - off);
                        a.free(s + off, l).unwrap();
                        for b in s + off..s + off + l { owner[b as usize] = false; }
                        owned.swap_remove(k);
                        if off > 0 { owned.push((s, off)); }
                        if off + l < ol { owned.push((s + off + l, ol - off - l)); }
                        // A second free of the same blocks is refused.
                        prop_assert!(a.free(s + off, l).is_err());
                    }
                    Op::MarkUsed(s, l) => {
                        let ok = a.mark_used(s, l).is_ok();
                        let model_ok = s >= start && s + l <= start + len
                            && (s..s + l).all(|b| !owner[b as usize]);
                        prop_assert_eq!(ok, model_ok);
                        if ok {
                            for b in s..s + l { owner[b as usize] = true; }
                            owned.push((s, l));
                        }
                    }
                }
                let used = owner.iter().filter(|&&x| x).count() as u64;
                prop_assert_eq!(a.used_blocks(), used);
                if let Some(at) = split {
                    let low = (start..at).filter(|&b| !owner[b as usize]).count() as u64;
                    prop_assert_eq!(a.free_node_blocks(), low);
                    prop_assert_eq!(a.free_data_blocks(), a.free_blocks() - low);
                }
                prop_assert_eq!(a.free_blocks() + a.used_blocks(), a.total_blocks());
                // Free extents are disjoint, merged, inside the region, and match the model.
                let mut prev_end = None;
                for (s, l) in a.free_extents() {
                    prop_assert!(prev_end.iter().all(|&e| e < s), "unmerged or overlapping");
                    for b in s..s + l { prop_assert!(!owner[b as usize]); }
                    prev_end = Some(s + l);
                }
            }
        }
    }
}
