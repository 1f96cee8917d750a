//! `validate_header()`: the PDU header checks of NVMe/TCP 1.0 §3.6 / §3.3.x, pure, in the
//! order of the fields on the wire, because the spec says a receiver reports the lowest
//! incorrect field first (as FreeBSD's `nvmf_tcp_validate_pdu_header`, docs/design.md,
//! house rule 9). The result is the FES/FEI of the TermReq to send.

use super::{
    data, flags, r2t, CommonHeader, PduType, CAPSULE_CMD_HLEN, CAPSULE_RESP_HLEN, COMMON_LEN,
    DATA_HLEN, DIGEST_LEN, IC_LEN, R2T_HLEN, TERM_HLEN, TERM_MAX_DATA,
};
use bytecodec::{get_u16_le, get_u32_le, get_u8};

/// Fatal Error Status of a termination request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Fes(pub u16);
impl Fes {
    pub const INVALID_HEADER_FIELD: Fes = Fes(0x01);
    pub const PDU_SEQUENCE: Fes = Fes(0x02);
    pub const HEADER_DIGEST: Fes = Fes(0x03);
    pub const DATA_OUT_OF_RANGE: Fes = Fes(0x04);
    /// Also "R2T limit exceeded" (same value).
    pub const DATA_LIMIT_EXCEEDED: Fes = Fes(0x05);
    pub const UNSUPPORTED_PARAMETER: Fes = Fes(0x06);
}

/// FES plus Fatal Error Information (for an invalid field: its byte offset in the header).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Fatal {
    pub fes: Fes,
    pub fei: u32,
}

impl Fatal {
    pub fn field(offset: u32) -> Self {
        Fatal {
            fes: Fes::INVALID_HEADER_FIELD,
            fei: offset,
        }
    }
}

/// Which end receives the PDU.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Side {
    Controller,
    Host,
}

/// Connection stage: before the ICReq/ICResp exchange only those are in sequence.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stage {
    AwaitIc,
    Ready,
}

/// What a receiver accepts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Rules {
    pub receiver: Side,
    pub stage: Stage,
    pub digests: super::Digests,
    /// Largest in-capsule data of a CapsuleCmd.
    pub max_capsule_data: u32,
    /// Largest DATAL of one H2CData (MAXH2CDATA) or C2HData.
    pub max_data_pdu: u32,
}

fn is_digestible(t: PduType) -> bool {
    matches!(
        t,
        PduType::CAPSULE_CMD
            | PduType::CAPSULE_RESP
            | PduType::H2C_DATA
            | PduType::C2H_DATA
            | PduType::R2T
    )
}

fn carries_data(t: PduType) -> bool {
    matches!(
        t,
        PduType::CAPSULE_CMD | PduType::H2C_DATA | PduType::C2H_DATA
    )
}

/// Checks the common header (`ch` holds at least its 8 bytes): enough to know how many bytes
/// to read next without trusting an absurd PLEN.
pub fn validate_common(ch: &[u8], r: &Rules) -> Result<CommonHeader, Fatal> {
    let h = CommonHeader::parse(ch).map_err(|_| Fatal::field(4))?;
    let t = h.pdu_type;
    // PDU-Type (offset 0): only the types that travel towards this receiver.
    let (ic, term) = match r.receiver {
        Side::Controller => (PduType::IC_REQ, PduType::H2C_TERM_REQ),
        Side::Host => (PduType::IC_RESP, PduType::C2H_TERM_REQ),
    };
    let valid = t == ic
        || t == term
        || match r.receiver {
            Side::Controller => matches!(t, PduType::CAPSULE_CMD | PduType::H2C_DATA),
            Side::Host => matches!(t, PduType::CAPSULE_RESP | PduType::C2H_DATA | PduType::R2T),
        };
    if !valid {
        return Err(Fatal::field(0));
    }
    let in_sequence = match r.stage {
        Stage::AwaitIc => t == ic || t == term,
        Stage::Ready => t != ic,
    };
    if !in_sequence {
        return Err(Fatal {
            fes: Fes::PDU_SEQUENCE,
            fei: 0,
        });
    }
    // FLAGS (offset 1).
    let allowed = match t {
        PduType::CAPSULE_CMD => flags::HDGSTF | flags::DDGSTF,
        PduType::H2C_DATA => flags::HDGSTF | flags::DDGSTF | flags::LAST_PDU,
        PduType::C2H_DATA => flags::HDGSTF | flags::DDGSTF | flags::LAST_PDU | flags::SUCCESS,
        PduType::CAPSULE_RESP | PduType::R2T => flags::HDGSTF,
        _ => 0,
    };
    if h.flags & !allowed != 0
        || (is_digestible(t) && (h.flags & flags::HDGSTF != 0) != r.digests.header)
        || (h.flags & flags::DDGSTF != 0 && !r.digests.data)
    {
        return Err(Fatal::field(1));
    }
    // HLEN (offset 2): fixed per type.
    let want_hlen = match t {
        PduType::IC_REQ | PduType::IC_RESP => IC_LEN,
        PduType::H2C_TERM_REQ | PduType::C2H_TERM_REQ => TERM_HLEN,
        PduType::CAPSULE_CMD => CAPSULE_CMD_HLEN,
        PduType::CAPSULE_RESP => CAPSULE_RESP_HLEN,
        PduType::R2T => R2T_HLEN,
        _ => DATA_HLEN,
    };
    if h.hlen as usize != want_hlen {
        return Err(Fatal::field(2));
    }
    let hdl = if h.flags & flags::HDGSTF != 0 {
        DIGEST_LEN
    } else {
        0
    };
    let ddl = if h.flags & flags::DDGSTF != 0 {
        DIGEST_LEN
    } else {
        0
    };
    let min = want_hlen + hdl;
    let plen = h.plen as usize;
    // PDO (offset 3): CPDA/HPDA are 0, so data starts right after the header (+ digest);
    // a larger PDO must stay 4-byte aligned ((CPDA+1)*4) and inside the PDU.
    let pdo = h.pdo as usize;
    if !carries_data(t) {
        if pdo != 0 {
            return Err(Fatal::field(3));
        }
    } else if (pdo != 0 && (pdo < min || !pdo.is_multiple_of(4)))
        || (pdo == 0 && matches!(t, PduType::H2C_DATA | PduType::C2H_DATA))
    {
        return Err(Fatal::field(3));
    }
    // PLEN (offset 4).
    match t {
        PduType::IC_REQ | PduType::IC_RESP => {
            if plen != IC_LEN {
                return Err(Fatal::field(4));
            }
        }
        PduType::H2C_TERM_REQ | PduType::C2H_TERM_REQ => {
            if !(TERM_HLEN..=TERM_HLEN + TERM_MAX_DATA).contains(&plen) {
                return Err(Fatal::field(4));
            }
        }
        PduType::CAPSULE_RESP | PduType::R2T => {
            if plen != min {
                return Err(Fatal::field(4));
            }
        }
        _ => {
            let start = if pdo != 0 { pdo } else { min };
            // A PLEN that ends before the header, or before PDO, is the wrong field.
            if plen < min || (plen > min && plen < start + ddl) || (pdo != 0 && plen < pdo) {
                return Err(Fatal::field(4));
            }
            let data = plen.saturating_sub(start + ddl);
            if data == 0 && (ddl != 0 || plen != min) {
                // A data digest with no data, or padding with no data.
                return Err(Fatal::field(if ddl != 0 { 1 } else { 4 }));
            }
            if data > 0 && r.digests.data && ddl == 0 {
                return Err(Fatal::field(1));
            }
            let limit = if t == PduType::CAPSULE_CMD {
                r.max_capsule_data
            } else {
                r.max_data_pdu
            };
            if data > limit as usize {
                return Err(Fatal {
                    fes: Fes::DATA_LIMIT_EXCEEDED,
                    fei: 4,
                });
            }
        }
    }
    Ok(h)
}

/// Checks a whole header (`hdr` holds at least HLEN bytes): the common fields, then the
/// type-specific fields in offset order.
pub fn validate_header(hdr: &[u8], r: &Rules) -> Result<CommonHeader, Fatal> {
    let h = validate_common(hdr, r)?;
    if hdr.len() < h.hlen as usize || hdr.len() < h.plen as usize {
        // The caller hands us the whole PDU; a short buffer means PLEN lied.
        return Err(Fatal::field(4));
    }
    // Reads below HLEN: the length was checked just above, so a miss cannot happen, and
    // would be the same lying PLEN.
    let short = |_| Fatal::field(4);
    match h.pdu_type {
        PduType::IC_REQ | PduType::IC_RESP => {
            if get_u16_le(hdr, 8).map_err(short)? != 0 {
                return Err(Fatal {
                    fes: Fes::UNSUPPORTED_PARAMETER,
                    fei: 8,
                });
            }
            if get_u8(hdr, 10).map_err(short)? > 31 {
                return Err(Fatal::field(10));
            }
            if get_u8(hdr, 11).map_err(short)? & !3 != 0 {
                return Err(Fatal::field(11));
            }
            if h.pdu_type == PduType::IC_RESP {
                let m = get_u32_le(hdr, 12).map_err(short)?;
                if m < 4096 || !m.is_multiple_of(4) {
                    return Err(Fatal::field(12));
                }
            }
        }
        PduType::H2C_DATA | PduType::C2H_DATA => {
            let ddl = if h.flags & flags::DDGSTF != 0 {
                DIGEST_LEN
            } else {
                0
            };
            const DATAL: usize = COMMON_LEN + data::DATAL;
            let datal = get_u32_le(hdr, DATAL).map_err(short)? as usize;
            if datal == 0 || h.pdo as usize + datal + ddl != h.plen as usize {
                return Err(Fatal::field(DATAL as u32));
            }
            if h.flags & flags::SUCCESS != 0 && h.flags & flags::LAST_PDU == 0 {
                return Err(Fatal::field(1));
            }
        }
        PduType::R2T if get_u32_le(hdr, COMMON_LEN + r2t::R2TL).map_err(short)? == 0 => {
            return Err(Fatal::field((COMMON_LEN + r2t::R2TL) as u32))
        }
        _ => {}
    }
    Ok(h)
}
