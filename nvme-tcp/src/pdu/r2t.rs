//! R2T (NVMe/TCP 1.0 §3.6.2.10): a 24-byte header, no data. Offsets below are after the
//! common header.

use super::{COMMON_LEN, R2T_HLEN};
use bytecodec::{get_u16_le, get_u32_le, put_u16_le, put_u32_le, Error};

/// CCCID (u16), TTAG (u16), R2TO (u32), R2TL (u32); 4 bytes reserved.
const CCCID: usize = 0;
const TTAG: usize = 2;
const R2TO: usize = 4;
pub(super) const R2TL: usize = 8;
const _: () = assert!(COMMON_LEN + R2TL + 4 + 4 == R2T_HLEN);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct R2t {
    pub cccid: u16,
    pub ttag: u16,
    pub r2to: u32,
    pub r2tl: u32,
}

impl R2t {
    #[inline]
    pub(super) fn put(&self, s: &mut [u8]) {
        put_u16_le(s, CCCID, self.cccid);
        put_u16_le(s, TTAG, self.ttag);
        put_u32_le(s, R2TO, self.r2to);
        put_u32_le(s, R2TL, self.r2tl);
    }
    #[inline]
    pub(super) fn get(s: &[u8]) -> Result<Self, Error> {
        Ok(R2t {
            cccid: get_u16_le(s, CCCID)?,
            ttag: get_u16_le(s, TTAG)?,
            r2to: get_u32_le(s, R2TO)?,
            r2tl: get_u32_le(s, R2TL)?,
        })
    }
}
