//! Stateid layout and seqid rules (RFC 8881 §8.2). `other` is the boot epoch (4 bytes, so a
//! stateid of an earlier boot is recognised as STALE_STATEID) followed by a 64-bit id unique
//! for this boot; the seqid starts at 1 and wraps to 1, never 0 (RFC 8881 §8.2.2).

use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use bytecodec::{get_u32_be, get_u64_be, put_u32_be, put_u64_be};

/// Builds the `other` field of a stateid.
pub fn make_other(epoch: u32, id: u64) -> [u8; 12] {
    let mut o = [0u8; 12];
    put_u32_be(&mut o, 0, epoch);
    put_u64_be(&mut o, 4, id);
    o
}

/// Splits `other`: `Err(STALE_STATEID)` for another boot's stateid.
pub fn parse_other(epoch: u32, other: &[u8; 12]) -> Result<u64, NfsStat> {
    // Both reads are inside the 12-byte array: the errors cannot happen, and would read as
    // another boot's stateid.
    let stale = |_| NfsStat::STALE_STATEID;
    let e = get_u32_be(other, 0).map_err(stale)?;
    let id = get_u64_be(other, 4).map_err(stale)?;
    if e != epoch {
        return Err(NfsStat::STALE_STATEID);
    }
    Ok(id)
}

/// True for the reserved stateids of RFC 8881 §8.2.3 (anonymous, bypass, current, invalid):
/// none of them names state and ops that need real state answer BAD_STATEID for them.
pub fn is_special(s: &Stateid) -> bool {
    s.other == [0u8; 12] || s.other == [0xffu8; 12]
}

/// RFC 8881 §8.2.2: seqid 0 means "the current one"; a smaller seqid is OLD_STATEID, a
/// larger one was never handed out (BAD_STATEID).
pub fn check_seqid(given: u32, current: u32) -> Result<(), NfsStat> {
    if given == 0 || given == current {
        Ok(())
    } else if seqid_newer(given, current) {
        Err(NfsStat::BAD_STATEID)
    } else {
        Err(NfsStat::OLD_STATEID)
    }
}

/// The next seqid after `s`, skipping 0 on wrap.
pub fn next_seqid(s: u32) -> u32 {
    if s == u32::MAX {
        1
    } else {
        s + 1
    }
}

/// Serial-number comparison, so that a wrapped seqid still orders correctly.
fn seqid_newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_round_trips_and_detects_other_boots() {
        let o = make_other(7, 0x1234_5678_9abc);
        assert_eq!(parse_other(7, &o), Ok(0x1234_5678_9abc));
        assert_eq!(parse_other(8, &o), Err(NfsStat::STALE_STATEID));
    }

    #[test]
    fn seqid_checks() {
        assert_eq!(check_seqid(0, 5), Ok(()));
        assert_eq!(check_seqid(5, 5), Ok(()));
        assert_eq!(check_seqid(4, 5), Err(NfsStat::OLD_STATEID));
        assert_eq!(check_seqid(6, 5), Err(NfsStat::BAD_STATEID));
        // Across the wrap: 1 follows u32::MAX.
        assert_eq!(next_seqid(u32::MAX), 1);
        assert_eq!(check_seqid(u32::MAX, 1), Err(NfsStat::OLD_STATEID));
        assert_eq!(check_seqid(2, u32::MAX), Err(NfsStat::BAD_STATEID));
    }

    #[test]
    fn special_stateids() {
        assert!(is_special(&Stateid::ANONYMOUS));
        assert!(is_special(&Stateid::BYPASS));
        assert!(is_special(&Stateid::CURRENT));
        assert!(!is_special(&Stateid {
            seqid: 1,
            other: make_other(1, 1)
        }));
    }
}
