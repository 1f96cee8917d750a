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
    }

    fn remove_free(&mut self, start: u64) -> u64 {
        let len = self.by_off.remove(&start).unwrap_or(0);
        self.by_size.remove(&(len, start));
        self.free -= len;
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
        fn never_owned_twice(ops in proptest::collection::vec(op(), 1..200)) {
            let (start, len) = (20u64, 256u64);
            let mut a = Allocator::new_free(start, len);
            let mut owner = vec![false; 400];
            let mut owned: Vec<(u64, u64)> = Vec::new();
            for o in ops {
                match o {
                    Op::Alloc(g, w) => {
                        if let Some((s, l)) = a.alloc(g, w) {
                            prop_assert!(l >= 1 && l <= w);
                            prop_assert!(s >= start && s + l <= start + len);
                            for b in s..s + l {
                                prop_assert!(!owner[b as usize], "block {} owned twice", b);
                                owner[b as usize] = true;
                            }
                            owned.push((s, l));
                        } else {
                            prop_assert_eq!(a.free_blocks(), 0);
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
