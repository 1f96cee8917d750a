//! H2CTermReq and C2HTermReq (NVMe/TCP 1.0 §3.6.2.4, §3.6.2.5): a 24-byte header, never
//! digested, followed directly by up to 128 bytes of the offending PDU's header. Offsets
//! below are after the common header.

use super::{Fes, COMMON_LEN, TERM_HLEN};
use bytecodec::{get_u16_le, get_u32_le, put_u16_le, put_u32_le, Error};

/// FES (u16), FEI (u32); the rest is reserved.
const FES: usize = 0;
const FEI: usize = 2;
const _: () = assert!(COMMON_LEN + FEI + 4 <= TERM_HLEN);

#[derive(Clone, PartialEq, Eq, Debug)]
pub struct TermReq {
    pub fes: Fes,
    pub fei: u32,
    /// The header of the PDU in error (at most 128 bytes).
    pub data: Vec<u8>,
}

impl TermReq {
    #[inline]
    pub(super) fn put(&self, s: &mut [u8]) {
        put_u16_le(s, FES, self.fes.0);
        put_u32_le(s, FEI, self.fei);
    }
    #[inline]
    pub(super) fn get(s: &[u8], data: &[u8]) -> Result<Self, Error> {
        Ok(TermReq {
            fes: Fes(get_u16_le(s, FES)?),
            fei: get_u32_le(s, FEI)?,
            data: data.to_vec(),
        })
    }
}
