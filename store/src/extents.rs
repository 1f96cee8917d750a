//! Per-file extent maps as keyed records of the B+tree: every operation
//! seeks to the extents it touches, O(log n) in the file's extent count, whatever that count
//! is. Same rules as `layout::ExtentMap`: extents disjoint and non-empty, neighbours that
//! continue each other on disk with the same state merged, holes implicit.

use layout::{ExtState, Segment};

use super::keys::{decode_extent, encode_extent, ino_end, pair_key, Ext, K_EXTENT};
use super::kv::Kv;
use super::types::StoreError;

type R<T> = Result<T, StoreError>;

fn key(ino: u64, end: u64) -> Vec<u8> {
    pair_key(K_EXTENT, ino, end)
}

fn bad(e: String) -> StoreError {
    StoreError::Io(e)
}

/// Extents of `ino` that overlap `[fb, end)`, in order.
pub fn overlapping(kv: &Kv, ino: u64, fb: u64, end: u64) -> R<Vec<Ext>> {
    let mut out = Vec::new();
    if fb >= end {
        return Ok(out);
    }
    kv.scan(
        &key(ino, fb.saturating_add(1)),
        &ino_end(K_EXTENT, ino),
        &mut |k, v| {
            let e = decode_extent(k, v).map_err(bad)?;
            if e.start >= end {
                return Ok(false);
            }
            out.push(e);
            Ok(true)
        },
    )?;
    Ok(out)
}

/// Every extent of `ino`.
pub fn all(kv: &Kv, ino: u64) -> R<Vec<Ext>> {
    overlapping(kv, ino, 0, u64::MAX)
}

/// Calls `f` for the extents of `ino` ending after `fb`, in order, until it returns
/// `Ok(false)`: one seek, then as many entries as `f` takes (no list of the whole file).
pub fn each_from(kv: &Kv, ino: u64, fb: u64, f: &mut dyn FnMut(Ext) -> R<bool>) -> R<()> {
    kv.scan(
        &key(ino, fb.saturating_add(1)),
        &ino_end(K_EXTENT, ino),
        &mut |k, v| f(decode_extent(k, v).map_err(bad)?),
    )
}

/// The extent holding block `b`, if it is mapped (one seek).
pub fn extent_at(kv: &Kv, ino: u64, b: u64) -> R<Option<Ext>> {
    Ok(first_after(kv, ino, b)?.filter(|e| e.start <= b))
}

/// Where the mapped run that starts at `from` ends, before `hi`, after at most `max_ext`
/// extents: the same as `layout::reach::run_end` over a lookup of `[from, hi)`, but it stops
/// at the first hole (or the cap) instead of listing every extent up to `hi`, so its cost
/// does not follow the file's extent count.
pub fn run_end(kv: &Kv, ino: u64, from: u64, hi: u64, max_ext: usize) -> R<u64> {
    let mut end = from;
    let mut n = 0;
    if from >= hi {
        return Ok(from);
    }
    each_from(kv, ino, from, &mut |e| {
        if e.start > end || n == max_ext {
            return Ok(false);
        }
        end = e.end.min(hi);
        n += 1;
        Ok(end < hi)
    })?;
    Ok(end)
}

/// Mapped blocks right before `first`, back to the first hole, at most `cap` blocks and
/// `max_ext` extents: one seek per extent (the map is keyed by extent end, so stepping back
/// is a seek for the extent holding the block before).
pub fn mapped_before(kv: &Kv, ino: u64, first: u64, cap: u64, max_ext: usize) -> R<u64> {
    let lo = first.saturating_sub(cap);
    let mut at = first;
    for _ in 0..max_ext {
        if at <= lo {
            break;
        }
        match extent_at(kv, ino, at - 1)? {
            Some(e) => at = e.start.max(lo),
            None => break,
        }
    }
    Ok(first - at)
}

/// The first extent ending after `block`.
fn first_after(kv: &Kv, ino: u64, block: u64) -> R<Option<Ext>> {
    match kv.first(&key(ino, block.saturating_add(1)), &ino_end(K_EXTENT, ino))? {
        Some((k, v)) => Ok(Some(decode_extent(&k, &v).map_err(bad)?)),
        None => Ok(None),
    }
}

/// Whether any block at or past `block` is mapped.
pub fn any_from(kv: &Kv, ino: u64, block: u64) -> R<bool> {
    Ok(first_after(kv, ino, block)?.is_some())
}

/// Segments that exactly cover `[fb, fb + len)`.
pub fn lookup(kv: &Kv, ino: u64, fb: u64, len: u64) -> R<Vec<Segment>> {
    let end = fb.saturating_add(len);
    let mut out = Vec::new();
    let mut pos = fb;
    for e in overlapping(kv, ino, fb, end)? {
        let s = e.start.max(fb);
        if s > pos {
            out.push(Segment::Hole {
                file_block: pos,
                len: s - pos,
            });
        }
        let t = e.end.min(end);
        out.push(Segment::Mapped {
            file_block: s,
            phys_block: e.phys + (s - e.start),
            len: t - s,
            state: e.state,
        });
        pos = t;
    }
    if pos < end {
        out.push(Segment::Hole {
            file_block: pos,
            len: end - pos,
        });
    }
    Ok(out)
}

fn put(kv: &mut Kv, ino: u64, e: &Ext) {
    kv.put(key(ino, e.end), encode_extent(e));
}

/// Unmap `[fb, fb + len)`; returns the physical extents that were mapped there, merged.
pub fn punch(kv: &mut Kv, ino: u64, fb: u64, len: u64) -> R<Vec<(u64, u64)>> {
    let end = fb.saturating_add(len);
    let mut freed: Vec<(u64, u64)> = Vec::new();
    for e in overlapping(kv, ino, fb, end)? {
        kv.del(key(ino, e.end));
        let (a, b) = (e.start.max(fb), e.end.min(end));
        let p = e.phys + (a - e.start);
        match freed.last_mut() {
            Some(l) if l.0 + l.1 == p => l.1 += b - a,
            _ => freed.push((p, b - a)),
        }
        if e.start < fb {
            put(kv, ino, &Ext { end: fb, ..e });
        }
        if e.end > end {
            put(
                kv,
                ino,
                &Ext {
                    start: end,
                    phys: e.phys + (end - e.start),
                    ..e
                },
            );
        }
    }
    Ok(freed)
}

/// Map `[fb, fb + len)` to `phys..` in `state` (a blind set); returns what it displaced.
pub fn set(
    kv: &mut Kv,
    ino: u64,
    fb: u64,
    len: u64,
    phys: u64,
    state: ExtState,
) -> R<Vec<(u64, u64)>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let displaced = punch(kv, ino, fb, len)?;
    let mut e = Ext {
        start: fb,
        end: fb + len,
        phys,
        state,
    };
    if fb > 0 {
        if let Some(v) = kv.get(&key(ino, fb))? {
            let l = decode_extent(&key(ino, fb), &v).map_err(bad)?;
            if l.state == state && l.phys + (l.end - l.start) == phys {
                kv.del(key(ino, fb));
                e.start = l.start;
                e.phys = l.phys;
            }
        }
    }
    if let Some(r) = first_after(kv, ino, e.end)? {
        if r.start == e.end && r.state == state && e.phys + (e.end - e.start) == r.phys {
            kv.del(key(ino, r.end));
            e.end = r.end;
        }
    }
    put(kv, ino, &e);
    Ok(displaced)
}

/// Unwritten blocks of `[fb, fb + len)` become written; returns how many changed.
pub fn convert(kv: &mut Kv, ino: u64, fb: u64, len: u64) -> R<u64> {
    let end = fb.saturating_add(len);
    let mut n = 0;
    for e in overlapping(kv, ino, fb, end)? {
        if e.state != ExtState::Unwritten {
            continue;
        }
        let (a, b) = (e.start.max(fb), e.end.min(end));
        // The same blocks, written: what `set` displaces is this very piece.
        set(kv, ino, a, b - a, e.phys + (a - e.start), ExtState::Written)?;
        n += b - a;
    }
    Ok(n)
}

/// First block ≥ `from` that is mapped.
#[cfg(test)]
pub fn next_mapped(kv: &Kv, ino: u64, from: u64) -> R<Option<u64>> {
    Ok(first_after(kv, ino, from)?.map(|e| e.start.max(from)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::PageCache;
    use crate::kv::Reader;
    use layout::ExtentMap;
    use proptest::prelude::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    fn kv() -> Kv {
        Kv::new(
            Reader {
                dev: Arc::new(metalog::CrashDev::new(1 << 20, 1)),
                cache: Arc::new(PageCache::new(1 << 20)),
                reads: Arc::new(AtomicU64::new(0)),
            },
            None,
        )
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

    proptest! {
        /// The keyed map behaves exactly like the in-memory `layout::ExtentMap` (which has its
        /// own per-block model test): same segments, same extents, same freed blocks. Another
        /// inode's extents next to it are never touched.
        #[test]
        fn matches_the_in_memory_map(ops in proptest::collection::vec(op(), 1..60)) {
            let mut kv = kv();
            let mut m = ExtentMap::new();
            set(&mut kv, 6, 0, 5, 900, ExtState::Written).unwrap();
            set(&mut kv, 8, 0, 5, 950, ExtState::Written).unwrap();
            for o in ops {
                match o {
                    Op::Set(f, p, l, w) => {
                        let st = if w { ExtState::Written } else { ExtState::Unwritten };
                        prop_assert_eq!(set(&mut kv, 7, f, l, p, st).unwrap(), m.set(f, p, l, st));
                    }
                    Op::Convert(f, l) => prop_assert_eq!(convert(&mut kv, 7, f, l).unwrap(), m.convert(f, l)),
                    Op::Punch(f, l) => prop_assert_eq!(punch(&mut kv, 7, f, l).unwrap(), m.punch(f, l)),
                }
                prop_assert_eq!(lookup(&kv, 7, 0, 100).unwrap(), m.lookup(0, 100));
                prop_assert_eq!(lookup(&kv, 7, 7, 13).unwrap(), m.lookup(7, 13));
                let got: Vec<_> = all(&kv, 7).unwrap().iter().map(|e| (e.start, e.phys, e.end - e.start, e.state)).collect();
                prop_assert_eq!(got, m.iter().collect::<Vec<_>>());
                prop_assert_eq!(next_mapped(&kv, 7, 3).unwrap(), m.next_mapped(3));
                // The seeking run queries give what layout::reach's rules give over a lookup.
                for (from, hi) in [(0u64, 100u64), (5, 40), (13, 14), (30, 90)] {
                    prop_assert_eq!(
                        run_end(&kv, 7, from, hi, usize::MAX).unwrap(),
                        layout::reach::run_end(&m.lookup(from, hi - from), from)
                    );
                    let lo = from.saturating_sub(hi - from);
                    prop_assert_eq!(
                        extent_at(&kv, 7, hi).unwrap().map_or(hi, |e| e.start.max(lo)),
                        layout::reach::run_start(&m.lookup(lo, hi + 1 - lo), hi).max(lo)
                    );
                    let back: u64 = m.lookup(lo, from - lo).iter().rev()
                        .take_while(|s| matches!(s, Segment::Mapped { .. })).map(|s| s.len()).sum();
                    prop_assert_eq!(mapped_before(&kv, 7, from, from - lo, usize::MAX).unwrap(), back);
                }
                prop_assert_eq!(all(&kv, 6).unwrap().len(), 1);
                prop_assert_eq!(all(&kv, 8).unwrap().len(), 1);
            }
        }
    }
}
