//! The 8-byte common header every PDU starts with (NVMe/TCP 1.0 §3.6.1): PDU-Type, FLAGS,
//! HLEN, PDO, then PLEN, the length of the whole PDU, little-endian.

use super::PduType;
use bytecodec::{get_u32_le, get_u8, put_u32_le, Error};

pub const COMMON_LEN: usize = 8;

const TYPE: usize = 0;
const FLAGS: usize = 1;
const HLEN: usize = 2;
const PDO: usize = 3;
const PLEN: usize = 4;
const _: () = assert!(PLEN + 4 == COMMON_LEN);

/// The 8-byte common header, decoded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CommonHeader {
    pub pdu_type: PduType,
    pub flags: u8,
    pub hlen: u8,
    pub pdo: u8,
    pub plen: u32,
}

impl CommonHeader {
    /// The header at the start of `b`, unchecked beyond its length (`validate_common` checks
    /// the fields).
    #[inline]
    pub fn parse(b: &[u8]) -> Result<CommonHeader, Error> {
        Ok(CommonHeader {
            pdu_type: PduType(get_u8(b, TYPE)?),
            flags: get_u8(b, FLAGS)?,
            hlen: get_u8(b, HLEN)?,
            pdo: get_u8(b, PDO)?,
            plen: get_u32_le(b, PLEN)?,
        })
    }

    /// The wire form.
    #[inline]
    pub fn to_bytes(self) -> [u8; COMMON_LEN] {
        let mut b = [self.pdu_type.0, self.flags, self.hlen, self.pdo, 0, 0, 0, 0];
        put_u32_le(&mut b, PLEN, self.plen);
        b
    }
}
