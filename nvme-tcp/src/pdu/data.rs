//! H2CData and C2HData (NVMe/TCP 1.0 §3.6.2.8, §3.6.2.9): a 24-byte header, the data at PDO.
//! Offsets below are after the common header.

use super::{flags, COMMON_LEN, DATA_HLEN};
use bytecodec::{get_u16_le, get_u32_le, put_u16_le, put_u32_le, Error};
use bytes::Bytes;

/// CCCID (u16), TTAG (u16), DATAO (u32), DATAL (u32); 4 bytes reserved.
const CCCID: usize = 0;
const TTAG: usize = 2;
const DATAO: usize = 4;
pub(super) const DATAL: usize = 8;
const _: () = assert!(COMMON_LEN + DATAL + 4 + 4 == DATA_HLEN);

/// H2CData or C2HData (`ttag` is reserved, 0, in C2HData).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DataPdu {
    pub cccid: u16,
    pub ttag: u16,
    pub datao: u32,
    pub last: bool,
    pub success: bool,
    pub data: Bytes,
}

impl DataPdu {
    /// A C2HData with all of a command's data: offset 0, LAST, and no SUCCESS flag, so a
    /// CapsuleResp follows (the only kind the target sends).
    pub fn c2h_whole(cccid: u16, data: Bytes) -> DataPdu {
        DataPdu {
            cccid,
            ttag: 0,
            datao: 0,
            last: true,
            success: false,
            data,
        }
    }

    /// Writes the fields and gives back the FLAGS bits they set.
    #[inline]
    pub(super) fn put(&self, s: &mut [u8]) -> u8 {
        put_u16_le(s, CCCID, self.cccid);
        put_u16_le(s, TTAG, self.ttag);
        put_u32_le(s, DATAO, self.datao);
        // DATAL ≤ MAXH2CDATA or the C2H limit, both u32 (validate_header checks it on receipt).
        put_u32_le(s, DATAL, self.data.len() as u32);
        (if self.last { flags::LAST_PDU } else { 0 })
            | (if self.success { flags::SUCCESS } else { 0 })
    }

    /// The PDU from its fields, its FLAGS and its data (DATAL was checked against PLEN).
    #[inline]
    pub(super) fn get(s: &[u8], fl: u8, data: Bytes) -> Result<Self, Error> {
        Ok(DataPdu {
            cccid: get_u16_le(s, CCCID)?,
            ttag: get_u16_le(s, TTAG)?,
            datao: get_u32_le(s, DATAO)?,
            last: fl & flags::LAST_PDU != 0,
            success: fl & flags::SUCCESS != 0,
            data,
        })
    }
}
