//! NVMe/TCP PDUs (NVMe/TCP Transport 1.0 §3.6): pure types, encoding, and
//! `validate_header()`, shared by target and initiator. No sockets, no tokio
//! (docs/design.md, house rule 1).
//!
//! Every PDU starts with the 8-byte common header (header.rs): PDU-Type, FLAGS, HLEN, PDO,
//! PLEN (LE u32). Header digest (CRC32C over the HLEN header bytes) follows the header when
//! negotiated; data starts at PDO and is followed by a data digest (CRC32C over the data)
//! when negotiated. Each PDU format is in its own file (ic, term, capsule, data, r2t), its
//! fields written and read through bytecodec at offsets its const asserts hold to its HLEN;
//! this file frames them.

mod capsule;
mod command;
mod data;
mod header;
mod ic;
mod r2t;
mod term;
mod validate;

pub use command::*;
pub use data::DataPdu;
pub use header::{CommonHeader, COMMON_LEN};
pub use ic::{IcReq, IcResp};
pub use r2t::R2t;
pub use term::TermReq;
pub use validate::{validate_common, validate_header, Fatal, Fes, Rules, Side, Stage};

use bytecodec::{get_u32_le, Writer};
use bytes::Bytes;

pub const DIGEST_LEN: usize = 4;
/// ICReq/ICResp are 128 bytes, header only.
pub const IC_LEN: usize = 128;
pub const CAPSULE_CMD_HLEN: usize = 72;
pub const CAPSULE_RESP_HLEN: usize = 24;
pub const DATA_HLEN: usize = 24;
pub const R2T_HLEN: usize = 24;
pub const TERM_HLEN: usize = 24;
/// A TermReq carries at most 128 bytes of the offending header (plen ≤ 152).
pub const TERM_MAX_DATA: usize = 128;

/// PDU-Type values.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PduType(pub u8);
impl PduType {
    pub const IC_REQ: PduType = PduType(0x00);
    pub const IC_RESP: PduType = PduType(0x01);
    pub const H2C_TERM_REQ: PduType = PduType(0x02);
    pub const C2H_TERM_REQ: PduType = PduType(0x03);
    pub const CAPSULE_CMD: PduType = PduType(0x04);
    pub const CAPSULE_RESP: PduType = PduType(0x05);
    pub const H2C_DATA: PduType = PduType(0x06);
    pub const C2H_DATA: PduType = PduType(0x07);
    pub const R2T: PduType = PduType(0x09);
}

/// FLAGS bits.
pub mod flags {
    pub const HDGSTF: u8 = 0x01;
    pub const DDGSTF: u8 = 0x02;
    pub const LAST_PDU: u8 = 0x04;
    pub const SUCCESS: u8 = 0x08;
}

/// Which digests a connection negotiated in ICReq/ICResp.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

impl Digests {
    pub fn from_bits(b: u8) -> Self {
        Digests {
            header: b & 1 != 0,
            data: b & 2 != 0,
        }
    }
    pub fn bits(self) -> u8 {
        self.header as u8 | ((self.data as u8) << 1)
    }
}

#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Pdu {
    IcReq(IcReq),
    IcResp(IcResp),
    H2cTermReq(TermReq),
    C2hTermReq(TermReq),
    CapsuleCmd(Sqe, Bytes),
    CapsuleResp(Cqe),
    H2cData(DataPdu),
    C2hData(DataPdu),
    R2t(R2t),
}

/// Why a received PDU was not accepted.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum DecodeError {
    /// Fatal: answer with a TermReq carrying this FES/FEI, then close.
    Fatal(Fatal),
    /// The data digest of a command's data did not match: the command fails with a transient
    /// transport error (NVMe/TCP 1.0 §3.6.2.x), the connection stays.
    DataDigest {
        pdu_type: PduType,
        cccid: u16,
        ttag: u16,
        datal: u32,
    },
}

impl From<Fatal> for DecodeError {
    fn from(f: Fatal) -> Self {
        DecodeError::Fatal(f)
    }
}

impl Pdu {
    pub fn pdu_type(&self) -> PduType {
        match self {
            Pdu::IcReq(_) => PduType::IC_REQ,
            Pdu::IcResp(_) => PduType::IC_RESP,
            Pdu::H2cTermReq(_) => PduType::H2C_TERM_REQ,
            Pdu::C2hTermReq(_) => PduType::C2H_TERM_REQ,
            Pdu::CapsuleCmd(..) => PduType::CAPSULE_CMD,
            Pdu::CapsuleResp(_) => PduType::CAPSULE_RESP,
            Pdu::H2cData(_) => PduType::H2C_DATA,
            Pdu::C2hData(_) => PduType::C2H_DATA,
            Pdu::R2t(_) => PduType::R2T,
        }
    }

    /// Appends the wire form. ICReq/ICResp/TermReq never carry digests (§3.6.1).
    pub fn encode(&self, dg: Digests, out: &mut Vec<u8>) {
        let (data, dd) = self.encode_head(dg, out);
        out.extend_from_slice(data);
        if dd {
            Writer::new(out).u32_le(crc32c::crc32c(data));
        }
    }

    /// `encode` for a vectored send: the data of a C2HData or H2CData PDU is not copied
    /// into `out` but handed back, with the length `out` had where it belongs (its digest,
    /// if negotiated, is appended after that point). The sender writes `out` up to there,
    /// the data from where it lies, then the rest. Any other PDU is encoded whole (`None`).
    pub fn encode_vectored(&self, dg: Digests, out: &mut Vec<u8>) -> Option<(usize, Bytes)> {
        match self {
            Pdu::H2cData(d) | Pdu::C2hData(d) if !d.data.is_empty() => {
                let (data, dd) = self.encode_head(dg, out);
                let at = out.len();
                if dd {
                    Writer::new(out).u32_le(crc32c::crc32c(data));
                }
                Some((at, d.data.clone()))
            }
            _ => {
                self.encode(dg, out);
                None
            }
        }
    }

    /// Appends the header (and its digest) and gives back the data that follows it, and
    /// whether a data digest follows the data.
    fn encode_head(&self, dg: Digests, out: &mut Vec<u8>) -> (&[u8], bool) {
        // The type-specific part of the header, the largest (ICReq/ICResp) fitting.
        let mut spec = [0u8; IC_LEN - COMMON_LEN];
        let (ty, hlen, mut fl, data): (PduType, usize, u8, &[u8]) = match self {
            Pdu::IcReq(r) => {
                r.put(&mut spec);
                (PduType::IC_REQ, IC_LEN, 0, &[])
            }
            Pdu::IcResp(r) => {
                r.put(&mut spec);
                (PduType::IC_RESP, IC_LEN, 0, &[])
            }
            Pdu::H2cTermReq(t) | Pdu::C2hTermReq(t) => {
                t.put(&mut spec);
                let n = t.data.len().min(TERM_MAX_DATA);
                (self.pdu_type(), TERM_HLEN, 0, &t.data[..n])
            }
            Pdu::CapsuleCmd(sqe, d) => {
                capsule::put_cmd(sqe, &mut spec);
                (PduType::CAPSULE_CMD, CAPSULE_CMD_HLEN, 0, &d[..])
            }
            Pdu::CapsuleResp(cqe) => {
                capsule::put_resp(cqe, &mut spec);
                (PduType::CAPSULE_RESP, CAPSULE_RESP_HLEN, 0, &[])
            }
            Pdu::H2cData(d) | Pdu::C2hData(d) => {
                let f = d.put(&mut spec);
                (self.pdu_type(), DATA_HLEN, f, &d.data[..])
            }
            Pdu::R2t(r) => {
                r.put(&mut spec);
                (PduType::R2T, R2T_HLEN, 0, &[])
            }
        };
        let digestible = !matches!(
            ty,
            PduType::IC_REQ | PduType::IC_RESP | PduType::H2C_TERM_REQ | PduType::C2H_TERM_REQ
        );
        let hd = digestible && dg.header;
        let dd = digestible && dg.data && !data.is_empty();
        if hd {
            fl |= flags::HDGSTF;
        }
        if dd {
            fl |= flags::DDGSTF;
        }
        let hdl = if hd { DIGEST_LEN } else { 0 };
        // TermReq data follows the header directly but is not "PDU data" with a PDO.
        let pdo = if !data.is_empty() && digestible {
            hlen + hdl
        } else {
            0
        };
        let plen = hlen + hdl + data.len() + if dd { DIGEST_LEN } else { 0 };
        let start = out.len();
        // HLEN and PDO are at most 128 + 4 and PLEN at most 152 + a u32 DATAL: the casts
        // are exact (validate_common holds a receiver to the same bounds).
        let ch = CommonHeader {
            pdu_type: ty,
            flags: fl,
            hlen: hlen as u8,
            pdo: pdo as u8,
            plen: plen as u32,
        };
        out.extend_from_slice(&ch.to_bytes());
        out.extend_from_slice(&spec[..hlen - COMMON_LEN]);
        if hd {
            let c = crc32c::crc32c(&out[start..start + hlen]);
            Writer::new(out).u32_le(c);
        }
        (data, dd)
    }

    /// Decodes one whole PDU (`buf.len()` is its PLEN), validating the header first.
    pub fn decode(buf: &[u8], rules: &Rules) -> Result<Pdu, DecodeError> {
        Self::decode_with(buf, rules, |r| Bytes::copy_from_slice(&buf[r]))
    }

    /// `decode` of a PDU held in `Bytes`: its data (in-capsule, H2C/C2HData) is a slice of
    /// `buf`, not a copy (the receive path hands whole PDUs out of its buffer this way).
    pub fn decode_shared(buf: &Bytes, rules: &Rules) -> Result<Pdu, DecodeError> {
        Self::decode_with(buf, rules, |r| buf.slice(r))
    }

    fn decode_with(
        buf: &[u8],
        rules: &Rules,
        data_of: impl Fn(std::ops::Range<usize>) -> Bytes,
    ) -> Result<Pdu, DecodeError> {
        let ch = validate_header(buf, rules)?;
        if buf.len() != ch.plen as usize {
            return Err(Fatal::field(4).into());
        }
        let hlen = ch.hlen as usize;
        let hd = ch.flags & flags::HDGSTF != 0;
        let hdl = if hd { DIGEST_LEN } else { 0 };
        // validate_header held the buffer to PLEN ≥ HLEN (+ the digests the flags announce),
        // so a short read below means a PLEN that lied, its field.
        let short = |_| DecodeError::Fatal(Fatal::field(4));
        if hd {
            let want = crc32c::crc32c(&buf[..hlen]);
            if get_u32_le(buf, hlen).map_err(short)? != want {
                return Err(Fatal {
                    fes: Fes::HEADER_DIGEST,
                    fei: 0,
                }
                .into());
            }
        }
        let dd = ch.flags & flags::DDGSTF != 0;
        let body_end = buf.len() - if dd { DIGEST_LEN } else { 0 };
        let data_start = if ch.pdo != 0 {
            ch.pdo as usize
        } else {
            hlen + hdl
        };
        let range = if body_end > data_start {
            data_start..body_end
        } else {
            0..0
        };
        let data = &buf[range.clone()];
        let s = &buf[COMMON_LEN..];
        let pdu = match ch.pdu_type {
            PduType::IC_REQ => Pdu::IcReq(IcReq::get(s).map_err(short)?),
            PduType::IC_RESP => Pdu::IcResp(IcResp::get(s).map_err(short)?),
            PduType::H2C_TERM_REQ | PduType::C2H_TERM_REQ => {
                let t = TermReq::get(s, &buf[TERM_HLEN..]).map_err(short)?;
                if ch.pdu_type == PduType::H2C_TERM_REQ {
                    Pdu::H2cTermReq(t)
                } else {
                    Pdu::C2hTermReq(t)
                }
            }
            PduType::CAPSULE_CMD => {
                Pdu::CapsuleCmd(capsule::get_cmd(s).map_err(short)?, data_of(range.clone()))
            }
            PduType::CAPSULE_RESP => Pdu::CapsuleResp(capsule::get_resp(s).map_err(short)?),
            PduType::H2C_DATA | PduType::C2H_DATA => {
                let d = DataPdu::get(s, ch.flags, data_of(range.clone())).map_err(short)?;
                if ch.pdu_type == PduType::H2C_DATA {
                    Pdu::H2cData(d)
                } else {
                    Pdu::C2hData(d)
                }
            }
            _ => Pdu::R2t(R2t::get(s).map_err(short)?),
        };
        if dd && crc32c::crc32c(data) != get_u32_le(buf, body_end).map_err(short)? {
            let (cccid, ttag) = match &pdu {
                Pdu::CapsuleCmd(sqe, _) => (sqe.cid(), 0),
                Pdu::H2cData(d) | Pdu::C2hData(d) => (d.cccid, d.ttag),
                _ => (0, 0),
            };
            return Err(DecodeError::DataDigest {
                pdu_type: ch.pdu_type,
                cccid,
                ttag,
                datal: data.len() as u32,
            });
        }
        Ok(pdu)
    }
}

#[cfg(test)]
mod tests;
