//! Byte-range lock arithmetic for one file (RFC 8881 §9): ranges are inclusive `[start, end]`
//! so that "to the end of the file" (`length == u64::MAX`) is `end == u64::MAX`. Each range
//! belongs to a lock stateid (one per lock-owner and file). Setting a range replaces what the
//! owner had there (upgrade, downgrade, split) and merges neighbours of the same type.

use crate::nfs4::status::NfsStat;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockRange {
    /// The lock stateid's id: identifies the lock-owner for this file.
    pub owner: u64,
    pub start: u64,
    pub end: u64,
    pub write: bool,
}

impl LockRange {
    /// `(offset, length)` as LOCK4denied carries them.
    pub fn offset_length(&self) -> (u64, u64) {
        let len = if self.end == u64::MAX {
            u64::MAX
        } else {
            self.end - self.start + 1
        };
        (self.start, len)
    }
}

/// RFC 8881 §18.10.4: a zero length is INVAL, and so is a range that overflows the offset
/// space (unless the length is "all ones", meaning to the end).
pub fn range_of(offset: u64, length: u64) -> Result<(u64, u64), NfsStat> {
    if length == 0 {
        return Err(NfsStat::INVAL);
    }
    if length == u64::MAX {
        return Ok((offset, u64::MAX));
    }
    match offset.checked_add(length - 1) {
        Some(end) => Ok((offset, end)),
        None => Err(NfsStat::INVAL),
    }
}

fn overlaps(r: &LockRange, start: u64, end: u64) -> bool {
    r.start <= end && start <= r.end
}

/// The first lock of another owner that conflicts with `[start, end]` (two reads never do).
pub fn conflict(
    ranges: &[LockRange],
    owner: Option<u64>,
    start: u64,
    end: u64,
    write: bool,
) -> Option<LockRange> {
    ranges
        .iter()
        .find(|r| Some(r.owner) != owner && (write || r.write) && overlaps(r, start, end))
        .copied()
}

/// Removes `owner`'s coverage of `[start, end]`, splitting ranges that stick out.
pub fn unset(ranges: &mut Vec<LockRange>, owner: u64, start: u64, end: u64) {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for r in ranges.drain(..) {
        if r.owner != owner || !overlaps(&r, start, end) {
            out.push(r);
            continue;
        }
        if r.start < start {
            out.push(LockRange {
                end: start - 1,
                ..r
            });
        }
        if r.end > end {
            out.push(LockRange {
                start: end + 1,
                ..r
            });
        }
    }
    *ranges = out;
}

/// Gives `owner` a lock of the given type over `[start, end]` (the caller checked conflicts).
pub fn set(ranges: &mut Vec<LockRange>, owner: u64, start: u64, end: u64, write: bool) {
    unset(ranges, owner, start, end);
    let mut new = LockRange {
        owner,
        start,
        end,
        write,
    };
    // Merge with touching or overlapping ranges of the same owner and type.
    ranges.retain(|r| {
        let touches = r.owner == owner
            && r.write == write
            && r.start <= new.end.saturating_add(1)
            && new.start <= r.end.saturating_add(1);
        if touches {
            new.start = new.start.min(r.start);
            new.end = new.end.max(r.end);
        }
        !touches
    });
    ranges.push(new);
    ranges.sort_by_key(|r| (r.start, r.owner));
}

/// Whether `owner` holds any lock.
pub fn holds_any(ranges: &[LockRange], owner: u64) -> bool {
    ranges.iter().any(|r| r.owner == owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mine(ranges: &[LockRange], owner: u64) -> Vec<(u64, u64, bool)> {
        ranges
            .iter()
            .filter(|r| r.owner == owner)
            .map(|r| (r.start, r.end, r.write))
            .collect()
    }

    #[test]
    fn range_arithmetic() {
        assert_eq!(range_of(0, 0), Err(NfsStat::INVAL));
        assert_eq!(range_of(10, 5), Ok((10, 14)));
        assert_eq!(range_of(10, u64::MAX), Ok((10, u64::MAX)));
        assert_eq!(range_of(u64::MAX - 1, 3), Err(NfsStat::INVAL));
        assert_eq!(range_of(u64::MAX, 1), Ok((u64::MAX, u64::MAX)));
        let r = LockRange {
            owner: 1,
            start: 5,
            end: u64::MAX,
            write: true,
        };
        assert_eq!(r.offset_length(), (5, u64::MAX));
    }

    #[test]
    fn unlock_in_the_middle_splits() {
        let mut v = Vec::new();
        set(&mut v, 1, 0, 99, true);
        unset(&mut v, 1, 40, 59);
        assert_eq!(mine(&v, 1), vec![(0, 39, true), (60, 99, true)]);
        unset(&mut v, 1, 0, u64::MAX);
        assert!(!holds_any(&v, 1));
    }

    #[test]
    fn downgrade_part_of_a_range_and_merge_back() {
        let mut v = Vec::new();
        set(&mut v, 1, 0, 99, true);
        set(&mut v, 1, 20, 29, false);
        assert_eq!(
            mine(&v, 1),
            vec![(0, 19, true), (20, 29, false), (30, 99, true)]
        );
        set(&mut v, 1, 20, 29, true);
        assert_eq!(mine(&v, 1), vec![(0, 99, true)]);
        // Adjacent ranges of the same type merge; different types do not.
        set(&mut v, 1, 100, 109, false);
        set(&mut v, 1, 110, 119, false);
        assert_eq!(mine(&v, 1), vec![(0, 99, true), (100, 119, false)]);
    }

    #[test]
    fn conflicts_between_owners() {
        let mut v = Vec::new();
        set(&mut v, 1, 0, 9, false);
        set(&mut v, 2, 20, 29, true);
        // Reads share; a write over a read conflicts; the owner never conflicts with itself.
        assert_eq!(conflict(&v, Some(3), 0, 9, false), None);
        assert_eq!(conflict(&v, Some(3), 5, 5, true).map(|r| r.owner), Some(1));
        assert_eq!(conflict(&v, Some(1), 0, 9, true), None);
        assert_eq!(
            conflict(&v, Some(3), 29, 40, false).map(|r| r.owner),
            Some(2)
        );
        assert_eq!(conflict(&v, None, 10, 19, true), None);
        // Upgrade of owner 1 over its own read range is fine until it reaches owner 2's write.
        assert_eq!(conflict(&v, Some(1), 0, 25, true).map(|r| r.owner), Some(2));
    }

    /// Model: what each owner (1..=3) holds on each of 64 bytes.
    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Cell {
        Free,
        Read,
        Write,
    }

    fn model_of(ranges: &[LockRange]) -> Vec<Vec<(u64, bool)>> {
        (0..64u64)
            .map(|b| {
                let mut v: Vec<(u64, bool)> = ranges
                    .iter()
                    .filter(|r| r.start <= b && b <= r.end)
                    .map(|r| (r.owner, r.write))
                    .collect();
                v.sort();
                v
            })
            .collect()
    }

    proptest::proptest! {
        /// After any sequence of set/unset, each byte holds per owner exactly what the last
        /// operation covering it left; an owner's ranges never overlap or touch with the same
        /// type; and `conflict` agrees with the per-byte model.
        #[test]
        fn set_unset_match_a_per_byte_model(
            ops in proptest::collection::vec((1u64..4, 0u64..64, 0u64..64, proptest::bool::ANY, proptest::bool::ANY), 1..40)
        ) {
            let mut ranges = Vec::new();
            let mut model = vec![[Cell::Free; 4]; 64];
            for (owner, a, b, write, lock) in ops {
                let (start, end) = (a.min(b), a.max(b));
                if lock {
                    set(&mut ranges, owner, start, end, write);
                } else {
                    unset(&mut ranges, owner, start, end);
                }
                for byte in model.iter_mut().take(end as usize + 1).skip(start as usize) {
                    byte[owner as usize] = match (lock, write) {
                        (false, _) => Cell::Free,
                        (true, true) => Cell::Write,
                        (true, false) => Cell::Read,
                    };
                }
                let got = model_of(&ranges);
                for (i, cells) in model.iter().enumerate() {
                    let want: Vec<(u64, bool)> = (1..4u64)
                        .filter_map(|o| match cells[o as usize] {
                            Cell::Free => None,
                            Cell::Read => Some((o, false)),
                            Cell::Write => Some((o, true)),
                        })
                        .collect();
                    proptest::prop_assert_eq!(&got[i], &want, "byte {}", i);
                }
                for x in &ranges {
                    for y in &ranges {
                        if x != y && x.owner == y.owner {
                            proptest::prop_assert!(x.end < y.start || y.end < x.start);
                            if x.write == y.write {
                                proptest::prop_assert!(x.end + 1 < y.start || y.end + 1 < x.start);
                            }
                        }
                    }
                }
                // conflict() for owner 4 (holds nothing) asking a write over [start, end].
                let c = conflict(&ranges, Some(4), start, end, true).is_some();
                let any = (start..=end).any(|i| !got[i as usize].is_empty());
                proptest::prop_assert_eq!(c, any);
            }
        }
    }

    #[test]
    fn lock_to_eof_and_unlock_the_tail() {
        let mut v = Vec::new();
        set(&mut v, 1, 100, u64::MAX, true);
        unset(&mut v, 1, 200, u64::MAX);
        assert_eq!(mine(&v, 1), vec![(100, 199, true)]);
        set(&mut v, 1, u64::MAX, u64::MAX, false);
        assert_eq!(
            mine(&v, 1),
            vec![(100, 199, true), (u64::MAX, u64::MAX, false)]
        );
    }
}
