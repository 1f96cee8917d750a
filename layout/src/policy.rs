//! LAYOUTGET / LAYOUTCOMMIT / LAYOUTRETURN rules of the block layout (docs/design.md §5, RFC 8881
//! §18.42–18.44, RFC 5663 §2.3), as pure functions over extent-map segments: which range a
//! LAYOUTGET maps, which extent states it answers, how many extents fit `maxcount`, what a
//! client was granted and whether a LAYOUTCOMMIT stays inside it. The server's op files call
//! these and map [`PolicyError`] to NFS status codes.

use thiserror::Error;

use crate::block::{BlockExtent, ExtentState, IoMode};
use crate::extent_map::{ExtState, Segment};

#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum PolicyError {
    /// NFS4ERR_INVAL: a range that overflows, is empty or shorter than `minlength`, or a last
    /// byte written outside the committed range.
    #[error("invalid range")]
    Inval,
    /// NFS4ERR_BADIOMODE.
    #[error("bad iomode")]
    BadIoMode,
    /// NFS4ERR_TOOSMALL: not even the extents up to `offset + minlength` fit `maxcount`.
    #[error("maxcount too small")]
    TooSmall,
    /// NFS4ERR_BADLAYOUT: a LAYOUTCOMMIT extent the client was not given, misaligned, of
    /// another device or in a state other than READ_WRITE_DATA.
    #[error("bad layout")]
    BadLayout,
}

/// How far one LAYOUTGET maps past its offset when the client asks for more (the Linux
/// client asks for the whole file, `length = u64::MAX`): 64 MiB, so one allocating LAYOUTGET
/// never grabs more than a large write needs, while an ordinary file is one round trip.
pub const MAX_SPAN_BYTES: u64 = 64 << 20;

/// RFC 8881 §18.43.3 argument checks (knfsd `nfsd4_layoutget` makes the same ones).
pub fn check_get(
    mode: IoMode,
    offset: u64,
    length: u64,
    minlength: u64,
) -> Result<(), PolicyError> {
    if mode != IoMode::READ && mode != IoMode::RW {
        return Err(PolicyError::BadIoMode);
    }
    // "length less than minlength", and both must fit below 2^64 from the offset (a length
    // of all ones means "to the end of the file").
    if length == 0 || length < minlength {
        return Err(PolicyError::Inval);
    }
    if minlength != 0 && (minlength == u64::MAX || offset.checked_add(minlength).is_none()) {
        return Err(PolicyError::Inval);
    }
    if length != u64::MAX && offset.checked_add(length).is_none() {
        return Err(PolicyError::Inval);
    }
    Ok(())
}

/// A LAYOUTGET's range, converted from the client's bytes once, at the layout engine's door
/// ([`get_range`]): the store maps blocks, the grants ledger and the recalls compare
/// block-aligned bytes, and the reply must reach `need_end`. Every view the LAYOUTGET walk
/// uses comes from here, so no step converts back and forth on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetRange {
    /// The block size the range was converted with.
    pub block: u64,
    /// Blocks `[first, first + n)`: from `offset` rounded down to the end rounded up.
    pub first: u64,
    pub n: u64,
    /// The same range in bytes, block-aligned.
    pub start: u64,
    pub end: u64,
    /// The byte the layout must reach (`offset + minlength`, at least one byte) and the
    /// block it ends in, rounded up.
    pub need_end: u64,
    pub need_end_block: u64,
}

/// How far a layout may be widened around the asked range (RFC 8881 §18.43.3 lets the server
/// return more): [`MAX_SPAN_BYTES`] either side, in blocks for the store and in bytes for
/// the grants it must not collide with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub lo: u64,
    pub hi: u64,
    pub start: u64,
    pub end: u64,
}

impl GetRange {
    pub fn window(&self) -> Window {
        let span = MAX_SPAN_BYTES / self.block;
        let lo = self.first.saturating_sub(span);
        let hi = self
            .first
            .saturating_add(span)
            .max(self.first.saturating_add(self.n));
        Window {
            lo,
            hi,
            start: lo * self.block,
            end: hi.saturating_mul(self.block),
        }
    }
}

/// The range a LAYOUTGET maps: from `offset` rounded down to the end rounded up, clipped to
/// [`MAX_SPAN_BYTES`] but never below `offset + minlength`.
pub fn get_range(offset: u64, length: u64, minlength: u64, block: u64) -> GetRange {
    let first = offset / block;
    let want_end = offset.saturating_add(length);
    let need_end = offset.saturating_add(minlength.max(1));
    let end = want_end
        .min(offset.saturating_add(MAX_SPAN_BYTES))
        .max(need_end);
    let n = end.div_ceil(block).saturating_sub(first).max(1);
    GetRange {
        block,
        first,
        n,
        start: first * block,
        end: (first + n).saturating_mul(block),
        need_end,
        need_end_block: need_end.div_ceil(block),
    }
}

/// The wire extents for the segments of a looked-up range (docs/design.md §5): RW gives
/// READ_WRITE_DATA over written and INVALID_DATA over unwritten blocks (holes were
/// allocated before); READ gives READ_DATA over written blocks inside the file and
/// NONE_DATA (storage offset 0) for holes, unwritten blocks and past EOF. Neighbouring
/// NONE_DATA pieces merge. `None` if an RW range still has a hole.
pub fn extents_for(
    segs: &[Segment],
    mode: IoMode,
    dev: [u8; 16],
    block: u64,
    file_size: u64,
) -> Option<Vec<BlockExtent>> {
    let eof_block = file_size.div_ceil(block);
    let mut out: Vec<BlockExtent> = Vec::with_capacity(segs.len());
    let mut push = |fb: u64, len: u64, phys: Option<u64>, st: ExtentState| {
        if len == 0 {
            return;
        }
        if let Some(prev) = out.last_mut() {
            if st == ExtentState::NONE_DATA
                && prev.state == st
                && prev.file_offset + prev.length == fb * block
            {
                prev.length += len * block;
                return;
            }
        }
        out.push(BlockExtent {
            deviceid: dev,
            file_offset: fb * block,
            length: len * block,
            storage_offset: phys.map_or(0, |p| p * block),
            state: st,
        });
    };
    for s in segs {
        match *s {
            Segment::Hole { file_block, len } => {
                if mode == IoMode::RW {
                    return None;
                }
                push(file_block, len, None, ExtentState::NONE_DATA);
            }
            Segment::Mapped {
                file_block,
                phys_block,
                len,
                state,
            } => match (mode == IoMode::RW, state) {
                (true, ExtState::Written) => push(
                    file_block,
                    len,
                    Some(phys_block),
                    ExtentState::READ_WRITE_DATA,
                ),
                (true, ExtState::Unwritten) => {
                    push(file_block, len, Some(phys_block), ExtentState::INVALID_DATA)
                }
                (false, ExtState::Unwritten) => push(file_block, len, None, ExtentState::NONE_DATA),
                (false, ExtState::Written) => {
                    // Written blocks past EOF (a racing truncate) read as nothing.
                    let inside = eof_block.saturating_sub(file_block).min(len);
                    push(file_block, inside, Some(phys_block), ExtentState::READ_DATA);
                    push(
                        file_block + inside,
                        len - inside,
                        None,
                        ExtentState::NONE_DATA,
                    );
                }
            },
        }
    }
    Some(out)
}

/// A READ layout stops before unwritten blocks past the ones it must cover (up to
/// `need_end`, the block after `offset + minlength`): they are cut from `segs`. Unwritten
/// blocks holding the block at the offset (`first`) stay whole.
///
/// Why: unwritten blocks may hold data a client wrote through its RW layout and has not yet
/// committed; READ can only call them NONE_DATA ("read as zeros"), and the Linux client
/// looks a read up in its READ extents before its own RW ones (`ext_tree_lookup`), so a
/// NONE_DATA extent hides what it wrote: it read zeros for the last 64 KiB it had written,
/// between the write and its LAYOUTCOMMIT (the guest suite's crash-scsi-4.2).
/// Cut short, the READ layout leaves those blocks to the client's RW layout, where its own
/// extents answer. A layout shorter than asked is allowed down to `minlength` (RFC 8881
/// §18.43.3), so blocks the client must be given are never cut. A READ asked from inside
/// unwritten blocks gets them whole as NONE_DATA, as before: the Linux client asks that only
/// where it holds no RW layout (it reads through an RW one where it has it), and a reader of
/// a long unwritten run (ALLOCATE) should not pay a LAYOUTGET per page.
pub fn cut_read_at_unwritten(segs: &mut Vec<Segment>, first: u64, need_end: u64) {
    let cut = segs.iter().enumerate().find_map(|(i, s)| match *s {
        Segment::Mapped {
            file_block,
            len,
            state: ExtState::Unwritten,
            ..
        } if file_block + len > need_end && !(file_block..file_block + len).contains(&first) => {
            Some((i, need_end.saturating_sub(file_block)))
        }
        _ => None,
    });
    let Some((i, keep)) = cut else { return };
    segs.truncate(i + 1);
    match segs.last_mut() {
        Some(Segment::Mapped { len, .. }) if keep > 0 => *len = keep,
        _ => {
            segs.pop();
        }
    }
}

/// Keeps the leading extents whose list fits in `room` bytes; the kept ones must reach
/// `need_end` (the byte `offset + minlength`), else TOOSMALL.
pub fn fit(
    mut ext: Vec<BlockExtent>,
    room: usize,
    need_end: u64,
) -> Result<Vec<BlockExtent>, PolicyError> {
    let mut n = ext.len();
    while n > 0 && BlockExtent::list_size(n) > room {
        n -= 1;
    }
    ext.truncate(n);
    let end = ext.last().map_or(0, |e| e.file_offset + e.length);
    if n == 0 || end < need_end {
        return Err(PolicyError::TooSmall);
    }
    Ok(ext)
}

/// What one client holds of one file: byte ranges `[start, end)` with their iomode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    ranges: Vec<(u64, u64, IoMode)>,
}

impl Grants {
    pub fn add(&mut self, start: u64, end: u64, mode: IoMode) {
        if start < end {
            self.ranges.push((start, end, mode));
        }
    }

    /// LAYOUTRETURN of `[start, end)` in `mode` (ANY returns both modes).
    pub fn remove(&mut self, start: u64, end: u64, mode: IoMode) {
        let mut keep = Vec::with_capacity(self.ranges.len());
        for &(s, e, m) in &self.ranges {
            if (mode != IoMode::ANY && m != mode) || e <= start || s >= end {
                keep.push((s, e, m));
                continue;
            }
            if s < start {
                keep.push((s, start, m));
            }
            if e > end {
                keep.push((end, e, m));
            }
        }
        self.ranges = keep;
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges held, `(start, end, iomode)`, in grant order (overlaps kept as granted).
    pub fn ranges(&self) -> &[(u64, u64, IoMode)] {
        &self.ranges
    }

    /// Whether any RW range is held.
    pub fn has_rw(&self) -> bool {
        self.ranges.iter().any(|r| r.2 == IoMode::RW)
    }

    /// Whether RW grants cover all of `[start, end)`.
    pub fn covers_rw(&self, start: u64, end: u64) -> bool {
        let mut rw: Vec<(u64, u64)> = self
            .ranges
            .iter()
            .filter(|r| r.2 == IoMode::RW)
            .map(|r| (r.0, r.1))
            .collect();
        rw.sort_unstable();
        let mut pos = start;
        for (s, e) in rw {
            if pos >= end {
                break;
            }
            if s > pos {
                return false;
            }
            pos = pos.max(e);
        }
        pos >= end
    }

    /// Whether any grant overlaps `[start, end)` in a mode that conflicts with `mode` (RW
    /// conflicts with everything; READ only with RW).
    pub fn conflicts(&self, start: u64, end: u64, mode: IoMode) -> bool {
        self.ranges
            .iter()
            .any(|&(s, e, m)| s < end && start < e && (m == IoMode::RW || mode == IoMode::RW))
    }
}

/// One extent a LAYOUTCOMMIT converts: file block, length, volume block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitExtent {
    pub file_block: u64,
    pub len_blocks: u64,
    pub phys_block: u64,
}

/// RFC 8881 §18.42.3 / RFC 5663 §2.3.2 checks of a LAYOUTCOMMIT: the last byte written lies
/// in `[offset, offset + length)` (else INVAL); every extent is of our device, block-aligned,
/// non-empty, READ_WRITE_DATA and inside what `grants` gave the client RW (else BADLAYOUT).
/// `grants` is `None` for a reclaim during grace (no layout survives a restart).
pub fn check_commit(
    extents: &[BlockExtent],
    dev: [u8; 16],
    block: u64,
    offset: u64,
    length: u64,
    last_byte: Option<u64>,
    grants: Option<&Grants>,
) -> Result<Vec<CommitExtent>, PolicyError> {
    if let Some(lb) = last_byte {
        let end = offset.saturating_add(length);
        if lb < offset || lb >= end {
            return Err(PolicyError::Inval);
        }
    }
    let mut out = Vec::with_capacity(extents.len());
    for e in extents {
        let aligned =
            e.file_offset % block == 0 && e.length % block == 0 && e.storage_offset % block == 0;
        let Some(end) = e.file_offset.checked_add(e.length) else {
            return Err(PolicyError::BadLayout);
        };
        if e.deviceid != dev
            || !aligned
            || e.length == 0
            || e.state != ExtentState::READ_WRITE_DATA
            || grants.is_some_and(|g| !g.covers_rw(e.file_offset, end))
        {
            return Err(PolicyError::BadLayout);
        }
        out.push(CommitExtent {
            file_block: e.file_offset / block,
            len_blocks: e.length / block,
            phys_block: e.storage_offset / block,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u64 = 4096;
    const DEV: [u8; 16] = [5; 16];

    fn mapped(fb: u64, pb: u64, len: u64, state: ExtState) -> Segment {
        Segment::Mapped {
            file_block: fb,
            phys_block: pb,
            len,
            state,
        }
    }

    /// READ stops before unwritten blocks past `offset + minlength`, keeps the unwritten
    /// blocks it must cover or that hold the offset, and leaves everything before them.
    #[test]
    fn read_layouts_stop_before_unwritten_blocks() {
        let w = ExtState::Written;
        let u = ExtState::Unwritten;
        let hole = Segment::Hole {
            file_block: 10,
            len: 5,
        };
        // written 0..10, hole 10..15, unwritten 15..20, written 20..30: cut at 15.
        let all = vec![
            mapped(0, 100, 10, w),
            hole,
            mapped(15, 200, 5, u),
            mapped(20, 300, 10, w),
        ];
        let mut s = all.clone();
        cut_read_at_unwritten(&mut s, 0, 1);
        assert_eq!(s, all[..2].to_vec());
        let e = extents_for(&s, IoMode::READ, DEV, B, 30 * B).unwrap();
        assert_eq!(e.last().map(|x| x.file_offset + x.length), Some(15 * B));
        // minlength reaching into the unwritten run: its first blocks stay, the rest goes.
        let mut s = all.clone();
        cut_read_at_unwritten(&mut s, 3, 17);
        assert_eq!(s[..2], all[..2]);
        assert_eq!(s[2], mapped(15, 200, 2, u));
        assert_eq!(s.len(), 3);
        // The offset inside unwritten blocks: those stay whole, the next ones go.
        let two = vec![
            mapped(15, 200, 5, u),
            mapped(20, 300, 10, w),
            mapped(30, 400, 4, u),
        ];
        let mut s = two.clone();
        cut_read_at_unwritten(&mut s, 16, 17);
        assert_eq!(s, two[..2].to_vec());
        // Nothing unwritten: unchanged.
        let mut s = vec![mapped(0, 100, 10, w), hole];
        cut_read_at_unwritten(&mut s, 0, 1);
        assert_eq!(s, vec![mapped(0, 100, 10, w), hole]);
        // Unwritten blocks all before need_end stay.
        let mut s = vec![mapped(0, 100, 4, u), mapped(4, 104, 4, w)];
        cut_read_at_unwritten(&mut s, 5, 6);
        assert_eq!(s, vec![mapped(0, 100, 4, u), mapped(4, 104, 4, w)]);
    }

    #[test]
    fn get_argument_checks() {
        assert_eq!(
            check_get(IoMode::ANY, 0, 10, 0),
            Err(PolicyError::BadIoMode)
        );
        assert_eq!(check_get(IoMode(0), 0, 10, 0), Err(PolicyError::BadIoMode));
        assert_eq!(check_get(IoMode::READ, 0, 10, 20), Err(PolicyError::Inval));
        assert_eq!(check_get(IoMode::READ, 0, 0, 0), Err(PolicyError::Inval));
        assert_eq!(
            check_get(IoMode::RW, u64::MAX - 5, 10, 0),
            Err(PolicyError::Inval)
        );
        assert_eq!(
            check_get(IoMode::RW, 10, u64::MAX, u64::MAX),
            Err(PolicyError::Inval)
        );
        assert_eq!(check_get(IoMode::RW, 10, u64::MAX, 4 * B), Ok(()));
        assert_eq!(check_get(IoMode::READ, 8192, 8192, 8192), Ok(()));
    }

    #[test]
    fn get_range_is_block_aligned_and_bounded() {
        let blocks = |o, l, m| {
            let r = get_range(o, l, m, B);
            (r.first, r.n)
        };
        assert_eq!(blocks(100, 10, 10), (0, 1));
        assert_eq!(blocks(8192, 8192, 8192), (2, 2));
        assert_eq!(blocks(4095, 2, 0), (0, 2));
        // "The whole file" is clipped to the span, but never below minlength.
        assert_eq!(blocks(0, u64::MAX, 0), (0, MAX_SPAN_BYTES / B));
        assert_eq!(
            blocks(0, u64::MAX, 2 * MAX_SPAN_BYTES).1,
            2 * MAX_SPAN_BYTES / B
        );
    }

    #[test]
    fn get_range_bytes_and_need_end_agree_with_its_blocks() {
        let r = get_range(4095, 2, 0, B);
        assert_eq!((r.start, r.end), (0, 2 * B));
        // minlength 0 still needs the first byte.
        assert_eq!((r.need_end, r.need_end_block), (4096, 1));
        let r = get_range(3 * B + 1, 10, 10, B);
        assert_eq!((r.first, r.n, r.start, r.end), (3, 1, 3 * B, 4 * B));
        assert_eq!((r.need_end, r.need_end_block), (3 * B + 11, 4));
        // The window: the span either side, never below block 0, never short of the range.
        let w = r.window();
        let span = MAX_SPAN_BYTES / B;
        assert_eq!((w.lo, w.hi), (0, 3 + span));
        assert_eq!((w.start, w.end), (0, (3 + span) * B));
        let far = get_range(10 * MAX_SPAN_BYTES, B, B, B).window();
        assert_eq!(far.lo, 10 * span - span);
        assert_eq!(far.end, far.hi * B);
    }

    #[test]
    fn rw_extents_are_invalid_over_unwritten_and_rw_over_written() {
        let segs = [
            mapped(0, 100, 2, ExtState::Written),
            mapped(2, 300, 3, ExtState::Unwritten),
        ];
        let e = extents_for(&segs, IoMode::RW, DEV, B, 0).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].state, ExtentState::READ_WRITE_DATA);
        assert_eq!(
            (e[0].file_offset, e[0].length, e[0].storage_offset),
            (0, 2 * B, 100 * B)
        );
        assert_eq!(e[1].state, ExtentState::INVALID_DATA);
        assert_eq!(
            (e[1].file_offset, e[1].length, e[1].storage_offset),
            (2 * B, 3 * B, 300 * B)
        );
        let hole = [Segment::Hole {
            file_block: 0,
            len: 1,
        }];
        assert_eq!(extents_for(&hole, IoMode::RW, DEV, B, 0), None);
    }

    #[test]
    fn read_extents_give_none_data_for_holes_unwritten_and_past_eof() {
        let segs = [
            mapped(0, 100, 4, ExtState::Written),
            mapped(4, 200, 1, ExtState::Unwritten),
            Segment::Hole {
                file_block: 5,
                len: 3,
            },
        ];
        // Size 2.5 blocks: blocks 0..3 are inside, block 3 is past EOF.
        let e = extents_for(&segs, IoMode::READ, DEV, B, 2 * B + 100).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].state, e[0].file_offset, e[0].length),
            (ExtentState::READ_DATA, 0, 3 * B)
        );
        assert_eq!(e[0].storage_offset, 100 * B);
        assert_eq!(
            (e[1].state, e[1].file_offset, e[1].length),
            (ExtentState::NONE_DATA, 3 * B, 5 * B)
        );
        assert_eq!(e[1].storage_offset, 0);
        // Contiguous, covering the range exactly.
        assert_eq!(e[0].file_offset + e[0].length, e[1].file_offset);
    }

    #[test]
    fn fit_keeps_what_maxcount_allows_and_checks_minlength() {
        let one = |i: u64| BlockExtent {
            deviceid: DEV,
            file_offset: i * B,
            length: B,
            storage_offset: (10 + 2 * i) * B,
            state: ExtentState::INVALID_DATA,
        };
        let all: Vec<_> = (0..5).map(one).collect();
        let kept = fit(all.clone(), BlockExtent::list_size(3), B).unwrap();
        assert_eq!(kept, all[..3].to_vec());
        assert_eq!(
            fit(all.clone(), BlockExtent::list_size(3), 4 * B),
            Err(PolicyError::TooSmall)
        );
        assert_eq!(fit(all, 10, 0), Err(PolicyError::TooSmall));
    }

    #[test]
    fn grants_cover_return_and_conflict() {
        let mut g = Grants::default();
        g.add(0, 8192, IoMode::RW);
        g.add(8192, 16384, IoMode::RW);
        g.add(16384, 20480, IoMode::READ);
        assert!(g.covers_rw(0, 16384));
        assert!(!g.covers_rw(0, 16385));
        assert!(g.conflicts(16384, 16385, IoMode::RW));
        assert!(!g.conflicts(16384, 16385, IoMode::READ));
        g.remove(4096, 12288, IoMode::RW);
        assert!(!g.covers_rw(0, 8192));
        assert!(g.covers_rw(12288, 16384));
        g.remove(0, u64::MAX, IoMode::READ);
        assert!(!g.conflicts(16384, 20480, IoMode::RW));
        g.remove(0, u64::MAX, IoMode::ANY);
        assert!(g.is_empty());
    }

    #[test]
    fn commit_checks() {
        let mut g = Grants::default();
        g.add(0, 4 * B, IoMode::RW);
        let ok = BlockExtent {
            deviceid: DEV,
            file_offset: B,
            length: 2 * B,
            storage_offset: 50 * B,
            state: ExtentState::READ_WRITE_DATA,
        };
        let c = check_commit(&[ok], DEV, B, B, 2 * B, Some(3 * B - 1), Some(&g)).unwrap();
        assert_eq!(
            c,
            vec![CommitExtent {
                file_block: 1,
                len_blocks: 2,
                phys_block: 50
            }]
        );
        // Last byte outside the committed range.
        assert_eq!(
            check_commit(&[ok], DEV, B, B, 2 * B, Some(3 * B), Some(&g)),
            Err(PolicyError::Inval)
        );
        assert_eq!(
            check_commit(&[ok], DEV, B, B, 2 * B, Some(B - 1), Some(&g)),
            Err(PolicyError::Inval)
        );
        let bad = |e: BlockExtent| check_commit(&[e], DEV, B, 0, 4 * B, None, Some(&g));
        assert_eq!(
            bad(BlockExtent {
                file_offset: 3 * B,
                ..ok
            }),
            Err(PolicyError::BadLayout)
        );
        assert_eq!(
            bad(BlockExtent { length: 100, ..ok }),
            Err(PolicyError::BadLayout)
        );
        assert_eq!(
            bad(BlockExtent {
                storage_offset: 7,
                ..ok
            }),
            Err(PolicyError::BadLayout)
        );
        assert_eq!(
            bad(BlockExtent {
                deviceid: [0; 16],
                ..ok
            }),
            Err(PolicyError::BadLayout)
        );
        assert_eq!(
            bad(BlockExtent {
                state: ExtentState::INVALID_DATA,
                ..ok
            }),
            Err(PolicyError::BadLayout)
        );
        assert_eq!(
            bad(BlockExtent { length: 0, ..ok }),
            Err(PolicyError::BadLayout)
        );
        // A reclaim (no grants after a restart) is checked for shape only.
        assert!(check_commit(
            &[BlockExtent {
                file_offset: 9 * B,
                ..ok
            }],
            DEV,
            B,
            0,
            1,
            None,
            None
        )
        .is_ok());
    }
}
