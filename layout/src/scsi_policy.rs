//! LAYOUTCOMMIT rules of the SCSI layout (RFC 8154 §2.5), beside the block layout's in
//! `policy`: the client names only file byte ranges it wrote, so the server finds the
//! volume blocks itself in the file's extent map — a client can never name another file's
//! block.

use crate::policy::{Grants, PolicyError};
use crate::scsi::ScsiRange;

/// RFC 8881 §18.42.3 / RFC 8154 §2.5 checks: the last byte written lies in `[offset, offset
/// + length)` (else INVAL); every range is block-aligned, non-empty, does not overflow and
/// lies inside what `grants` gave the client RW (else BADLAYOUT). Returns the ranges as
/// (first file block, blocks). `grants` is `None` for a reclaim during grace.
pub fn check_commit(
    ranges: &[ScsiRange],
    block: u64,
    offset: u64,
    length: u64,
    last_byte: Option<u64>,
    grants: Option<&Grants>,
) -> Result<Vec<(u64, u64)>, PolicyError> {
    if let Some(lb) = last_byte {
        if lb < offset || lb >= offset.saturating_add(length) {
            return Err(PolicyError::Inval);
        }
    }
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let Some(end) = r.offset.checked_add(r.length) else {
            return Err(PolicyError::BadLayout);
        };
        if r.offset % block != 0
            || r.length % block != 0
            || r.length == 0
            || grants.is_some_and(|g| !g.covers_rw(r.offset, end))
        {
            return Err(PolicyError::BadLayout);
        }
        out.push((r.offset / block, r.length / block));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::IoMode;

    const B: u64 = 4096;

    fn r(offset: u64, length: u64) -> ScsiRange {
        ScsiRange { offset, length }
    }

    #[test]
    fn ranges_inside_rw_grants_pass_others_are_badlayout() {
        let mut g = Grants::default();
        g.add(0, 16 * B, IoMode::RW);
        g.add(16 * B, 32 * B, IoMode::READ);
        let ok = check_commit(
            &[r(0, 2 * B), r(8 * B, B)],
            B,
            0,
            9 * B,
            Some(9 * B - 1),
            Some(&g),
        );
        assert_eq!(ok, Ok(vec![(0, 2), (8, 1)]));
        for bad in [
            r(1, B),
            r(0, B + 1),
            r(0, 0),
            r(15 * B, 2 * B),
            r(u64::MAX - 1, B),
        ] {
            assert_eq!(
                check_commit(&[bad], B, 0, 32 * B, None, Some(&g)),
                Err(PolicyError::BadLayout),
                "{bad:?}"
            );
        }
        // Reclaim: no grants to check against.
        assert!(check_commit(&[r(64 * B, B)], B, 0, B, None, None).is_ok());
        // Last byte outside [offset, offset + length).
        assert_eq!(
            check_commit(&[r(0, B)], B, 0, B, Some(B), Some(&g)),
            Err(PolicyError::Inval)
        );
    }
}
