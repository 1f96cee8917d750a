//! ICReq and ICResp (NVMe/TCP 1.0 §3.6.2.2, §3.6.2.3): 128 bytes, header only, never
//! digested. Offsets below are after the common header.

use super::{Digests, COMMON_LEN, IC_LEN};
use bytecodec::{get_u16_le, get_u32_le, get_u8, put_u16_le, put_u32_le, put_u8, Error};

/// PFV (u16), HPDA/CPDA (u8), DGST (u8), MAXR2T/MAXH2CDATA (u32); the rest is reserved.
const PFV: usize = 0;
const PDA: usize = 2;
const DGST: usize = 3;
const MAX: usize = 4;
const _: () = assert!(COMMON_LEN + MAX + 4 <= IC_LEN);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IcReq {
    pub pfv: u16,
    pub hpda: u8,
    pub digests: Digests,
    pub maxr2t: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct IcResp {
    pub pfv: u16,
    pub cpda: u8,
    pub digests: Digests,
    pub maxh2cdata: u32,
}

/// Both are the same four fields at the same places.
fn put(s: &mut [u8], pfv: u16, pda: u8, digests: Digests, max: u32) {
    put_u16_le(s, PFV, pfv);
    put_u8(s, PDA, pda);
    put_u8(s, DGST, digests.bits());
    put_u32_le(s, MAX, max);
}

fn get(s: &[u8]) -> Result<(u16, u8, Digests, u32), Error> {
    Ok((
        get_u16_le(s, PFV)?,
        get_u8(s, PDA)?,
        Digests::from_bits(get_u8(s, DGST)?),
        get_u32_le(s, MAX)?,
    ))
}

impl IcReq {
    pub(super) fn put(&self, s: &mut [u8]) {
        put(s, self.pfv, self.hpda, self.digests, self.maxr2t);
    }
    pub(super) fn get(s: &[u8]) -> Result<Self, Error> {
        let (pfv, hpda, digests, maxr2t) = get(s)?;
        Ok(IcReq {
            pfv,
            hpda,
            digests,
            maxr2t,
        })
    }
}

impl IcResp {
    pub(super) fn put(&self, s: &mut [u8]) {
        put(s, self.pfv, self.cpda, self.digests, self.maxh2cdata);
    }
    pub(super) fn get(s: &[u8]) -> Result<Self, Error> {
        let (pfv, cpda, digests, maxh2cdata) = get(s)?;
        Ok(IcResp {
            pfv,
            cpda,
            digests,
            maxh2cdata,
        })
    }
}
