//! Per-file extent map: file block → (physical block, length, Written | Unwritten); holes are
//! implicit (docs/design.md §2). Unwritten extents are allocated blocks whose data
//! a client has not yet committed: they read as zeros (RFC 5663 §2.3.2 INVALID_DATA).
//!
//! Every operation keeps the map canonical: extents disjoint, non-empty, and neighbours that
//! continue each other on disk with the same state merged.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExtState {
    Written,
    Unwritten,
}

/// One piece of a looked-up range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    Mapped {
        file_block: u64,
        phys_block: u64,
        len: u64,
        state: ExtState,
    },
    Hole {
        file_block: u64,
        len: u64,
    },
}

impl Segment {
    pub fn file_block(&self) -> u64 {
        match *self {
            Segment::Mapped { file_block, .. } | Segment::Hole { file_block, .. } => file_block,
        }
    }
    pub fn len(&self) -> u64 {
        match *self {
            Segment::Mapped { len, .. } | Segment::Hole { len, .. } => len,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ext {
    phys: u64,
    len: u64,
    state: ExtState,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtentMap {
    map: BTreeMap<u64, Ext>,
    blocks: u64,
}

impl ExtentMap {
    pub fn new() -> ExtentMap {
        ExtentMap::default()
    }

    /// Blocks mapped (written + unwritten).
    pub fn mapped_blocks(&self) -> u64 {
        self.blocks
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Every extent in file order: (file_block, phys_block, len, state).
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, u64, ExtState)> + '_ {
        self.map.iter().map(|(&f, e)| (f, e.phys, e.len, e.state))
    }

    /// The first file block past the last mapped block (0 when empty).
    pub fn end_block(&self) -> u64 {
        self.map.iter().next_back().map_or(0, |(&f, e)| f + e.len)
    }

    /// Segments that exactly cover `[file_block, file_block + len)`, in order.
    pub fn lookup(&self, file_block: u64, len: u64) -> Vec<Segment> {
        let mut out = Vec::new();
        let end = file_block.saturating_add(len);
        let mut pos = file_block;
        let first = self
            .map
            .range(..=file_block)
            .next_back()
            .filter(|(&f, e)| f + e.len > file_block)
            .map(|(&f, _)| f)
            .unwrap_or(file_block);
        for (&f, e) in self.map.range(first..end) {
            if f > pos {
                out.push(Segment::Hole {
                    file_block: pos,
                    len: f - pos,
                });
                pos = f;
            }
            let seg_end = (f + e.len).min(end);
            out.push(Segment::Mapped {
                file_block: pos,
                phys_block: e.phys + (pos - f),
                len: seg_end - pos,
                state: e.state,
            });
            pos = seg_end;
        }
        if pos < end {
            out.push(Segment::Hole {
                file_block: pos,
                len: end - pos,
            });
        }
        out
    }

    /// Split the extent containing `at` (if any, and not starting there) into two.
    fn split_at(&mut self, at: u64) {
        let Some((&f, &e)) = self.map.range(..at).next_back() else {
            return;
        };
        if f + e.len <= at {
            return;
        }
        let head = at - f;
        self.map.insert(f, Ext { len: head, ..e });
        self.map.insert(
            at,
            Ext {
                phys: e.phys + head,
                len: e.len - head,
                state: e.state,
            },
        );
    }

    /// Merge the extent starting at `f` with its neighbours where they continue it.
    fn merge_around(&mut self, f: u64) {
        let Some(&e) = self.map.get(&f) else { return };
        let (mut start, mut cur) = (f, e);
        if let Some((&pf, &p)) = self.map.range(..f).next_back() {
            if pf + p.len == f && p.phys + p.len == e.phys && p.state == e.state {
                self.map.remove(&f);
                start = pf;
                cur = Ext {
                    len: p.len + e.len,
                    ..p
                };
            }
        }
        let next = start + cur.len;
        if let Some(&n) = self.map.get(&next) {
            if cur.phys + cur.len == n.phys && n.state == cur.state {
                self.map.remove(&next);
                cur.len += n.len;
            }
        }
        self.map.insert(start, cur);
    }

    /// Remove the mappings of `[file_block, file_block + len)`; returns the physical extents
    /// that were mapped there (for the caller to free), in file order.
    pub fn punch(&mut self, file_block: u64, len: u64) -> Vec<(u64, u64)> {
        if len == 0 {
            return Vec::new();
        }
        let end = file_block.saturating_add(len);
        self.split_at(file_block);
        self.split_at(end);
        let keys: Vec<u64> = self.map.range(file_block..end).map(|(&f, _)| f).collect();
        let mut freed: Vec<(u64, u64)> = Vec::new();
        for k in keys {
            if let Some(e) = self.map.remove(&k) {
                self.blocks -= e.len;
                match freed.last_mut() {
                    Some(last) if last.0 + last.1 == e.phys => last.1 += e.len,
                    _ => freed.push((e.phys, e.len)),
                }
            }
        }
        // Splitting at the range edges may have left mergeable pieces outside the range.
        if let Some((&f, _)) = self.map.range(..file_block).next_back() {
            self.merge_around(f);
        }
        if self.map.contains_key(&end) {
            self.merge_around(end);
        }
        freed
    }

    /// Map `[file_block, file_block + len)` to `phys..` in `state`, replacing whatever was
    /// there (a blind set: replaying it twice gives the same map). Returns the physical extents
    /// it displaced.
    pub fn set(
        &mut self,
        file_block: u64,
        phys_block: u64,
        len: u64,
        state: ExtState,
    ) -> Vec<(u64, u64)> {
        if len == 0 {
            return Vec::new();
        }
        let displaced = self.punch(file_block, len);
        self.map.insert(
            file_block,
            Ext {
                phys: phys_block,
                len,
                state,
            },
        );
        self.blocks += len;
        self.merge_around(file_block);
        displaced
    }

    /// Turn the unwritten blocks of `[file_block, file_block + len)` into written ones; holes
    /// and written blocks are left alone. Returns how many blocks changed state.
    pub fn convert(&mut self, file_block: u64, len: u64) -> u64 {
        if len == 0 {
            return 0;
        }
        let end = file_block.saturating_add(len);
        self.split_at(file_block);
        self.split_at(end);
        let keys: Vec<u64> = self
            .map
            .range(file_block..end)
            .filter(|(_, e)| e.state == ExtState::Unwritten)
            .map(|(&f, _)| f)
            .collect();
        let mut n = 0;
        for k in &keys {
            if let Some(e) = self.map.get_mut(k) {
                e.state = ExtState::Written;
                n += e.len;
            }
        }
        // Re-merge everything the range touched (and its two outer neighbours).
        let touched: Vec<u64> = self
            .map
            .range(..end)
            .rev()
            .take_while(|(&f, e)| f + e.len >= file_block)
            .map(|(&f, _)| f)
            .collect();
        for f in touched.into_iter().rev() {
            if self.map.contains_key(&f) {
                self.merge_around(f);
            }
        }
        if self.map.contains_key(&end) {
            self.merge_around(end);
        }
        n
    }

    /// First file block ≥ `from` that is mapped (written or unwritten).
    pub fn next_mapped(&self, from: u64) -> Option<u64> {
        if let Some((&f, e)) = self.map.range(..=from).next_back() {
            if f + e.len > from {
                return Some(from);
            }
        }
        self.map.range(from..).next().map(|(&f, _)| f)
    }

    /// First file block ≥ `from` that is a hole.
    pub fn next_hole(&self, from: u64) -> u64 {
        let mut pos = from;
        loop {
            match self.map.range(..=pos).next_back() {
                Some((&f, e)) if f + e.len > pos => pos = f + e.len,
                _ => return pos,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lookup_covers_the_range() {
        let mut m = ExtentMap::new();
        m.set(2, 100, 3, ExtState::Unwritten);
        m.set(5, 103, 2, ExtState::Unwritten); // merges: continues on disk, same state
        assert_eq!(m.iter().count(), 1);
        let segs = m.lookup(0, 10);
        assert_eq!(
            segs,
            vec![
                Segment::Hole {
                    file_block: 0,
                    len: 2
                },
                Segment::Mapped {
                    file_block: 2,
                    phys_block: 100,
                    len: 5,
                    state: ExtState::Unwritten
                },
                Segment::Hole {
                    file_block: 7,
                    len: 3
                },
            ]
        );
        assert_eq!(m.convert(3, 2), 2);
        assert_eq!(m.iter().count(), 3);
        assert_eq!(m.convert(2, 5), 3);
        assert_eq!(m.iter().count(), 1, "converted pieces merge back");
        assert_eq!(m.punch(3, 1), vec![(101, 1)]);
        assert_eq!(m.mapped_blocks(), 4);
        assert_eq!(m.next_hole(2), 3);
        assert_eq!(m.next_mapped(3), Some(4));
        assert_eq!(m.next_mapped(7), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(u64, u64, u64, bool),
        Convert(u64, u64),
        Punch(u64, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..60, 0u64..8, 1u64..12, any::<bool>()).prop_map(|(f, p, l, w)| Op::Set(
                f,
                p * 16,
                l,
                w
            )),
            (0u64..60, 1u64..20).prop_map(|(f, l)| Op::Convert(f, l)),
            (0u64..60, 1u64..20).prop_map(|(f, l)| Op::Punch(f, l)),
        ]
    }

    type Model = Vec<Option<(u64, ExtState)>>;

    fn model_freed(model: &Model, f: u64, l: u64) -> Vec<u64> {
        (f..f + l)
            .filter_map(|b| model[b as usize].map(|(p, _)| p))
            .collect()
    }

    fn flatten(ext: &[(u64, u64)]) -> Vec<u64> {
        ext.iter().flat_map(|&(s, l)| s..s + l).collect()
    }

    proptest! {
        /// The map agrees block by block with a per-block model, stays canonical, and
        /// punch / set return exactly the physical blocks that were mapped there.
        #[test]
        fn matches_per_block_model(ops in proptest::collection::vec(op(), 1..60)) {
            let mut m = ExtentMap::new();
            let mut model: Model = vec![None; 100];
            for o in ops {
                match o {
                    Op::Set(f, p, l, w) => {
                        let st = if w { ExtState::Written } else { ExtState::Unwritten };
                        let want = model_freed(&model, f, l);
                        let got = m.set(f, p, l, st);
                        prop_assert_eq!(flatten(&got), want);
                        for i in 0..l { model[(f + i) as usize] = Some((p + i, st)); }
                    }
                    Op::Convert(f, l) => {
                        let mut n = 0;
                        for b in f..f + l {
                            if let Some((p, ExtState::Unwritten)) = model[b as usize] {
                                model[b as usize] = Some((p, ExtState::Written));
                                n += 1;
                            }
                        }
                        prop_assert_eq!(m.convert(f, l), n);
                    }
                    Op::Punch(f, l) => {
                        let want = model_freed(&model, f, l);
                        prop_assert_eq!(flatten(&m.punch(f, l)), want);
                        for b in f..f + l { model[b as usize] = None; }
                    }
                }
                // Lookup of the whole range covers it exactly and matches the model.
                let segs = m.lookup(0, 100);
                let mut pos = 0;
                for s in &segs {
                    prop_assert_eq!(s.file_block(), pos);
                    prop_assert!(!s.is_empty());
                    for i in 0..s.len() {
                        let b = (pos + i) as usize;
                        match *s {
                            Segment::Hole { .. } => prop_assert_eq!(model[b], None),
                            Segment::Mapped { phys_block, state, .. } =>
                                prop_assert_eq!(model[b], Some((phys_block + i, state))),
                        }
                    }
                    pos += s.len();
                }
                prop_assert_eq!(pos, 100);
                // Canonical: no two neighbours that should have merged.
                let ex: Vec<_> = m.iter().collect();
                for w in ex.windows(2) {
                    let (f0, p0, l0, s0) = w[0];
                    let (f1, p1, _, s1) = w[1];
                    prop_assert!(f0 + l0 <= f1);
                    prop_assert!(!(f0 + l0 == f1 && p0 + l0 == p1 && s0 == s1), "unmerged {:?}", w);
                }
                let mapped = model.iter().filter(|x| x.is_some()).count() as u64;
                prop_assert_eq!(m.mapped_blocks(), mapped);
                // A sub-range lookup starting inside an extent is exact too.
                let sub = m.lookup(7, 13);
                prop_assert_eq!(sub.iter().map(|s| s.len()).sum::<u64>(), 13);
                prop_assert_eq!(sub.first().map(|s| s.file_block()), Some(7));
            }
        }
    }
}
