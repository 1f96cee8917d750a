//! The member label in block 0 of each data member of a split volume (docs/store.md "Split
//! volume", "Striped data set"): which volume set the device belongs to and what it is in it, so that a mount
//! refuses a foreign or swapped device and a block-layout client finds the data member by
//! the signature GETDEVICEINFO hands out (RFC 5663 §2.2.1), never the metadata member.
//!
//! ```text
//! 0 magic "PNFSDMB\x01" | 8 set UUID (the superblock's) | 24 member index u32
//! 28 member count u32 | 32 role u32 (1 = data) | 36 version u32 (1)
//! 40 member size in blocks u64 | 48 data base block u64
//! 56 stripe unit in blocks u64 (0 for the one data member of a split volume)
//! 508 CRC32C of bytes 0..508
//! ```
//! The stripe unit sits in what version 1 left zero, so a label of one data member is the
//! same bytes it always was, and the version stays 1: a pnfsd that predates striping
//! refuses a member of a larger set by its count (and the superblock's feature bit).
//! Little-endian, one 512-byte sector (never torn). The signature is bytes
//! `[SIGNATURE_OFFSET, +20)`: the set UUID and the member index; on the metadata member
//! (its superblock) those bytes are the format version, the block size and the block count,
//! which no UUID matches.

use bytecodec::{get_array, get_u32_le, get_u64_le, put_bytes, put_u32_le, put_u64_le};

pub const MAGIC: [u8; 8] = *b"PNFSDMB\x01";
const VERSION: u32 = 1;
/// The role of a data member (the blocks of layouts).
pub const ROLE_DATA: u32 = 1;

const OFF_MAGIC: usize = 0;
const OFF_UUID: usize = 8;
const OFF_INDEX: usize = 24;
const OFF_COUNT: usize = 28;
const OFF_ROLE: usize = 32;
const OFF_VERSION: usize = 36;
const OFF_BLOCKS: usize = 40;
const OFF_DATA_BASE: usize = 48;
const OFF_STRIPE_UNIT: usize = 56;
const OFF_CRC: usize = 508;
pub const LABEL_BYTES: usize = 512;
/// Where the block-layout signature of a data member starts, and its length (UUID + index).
pub const SIGNATURE_OFFSET: usize = OFF_UUID;
pub const SIGNATURE_BYTES: usize = 20;

const _: () = assert!(OFF_UUID + 16 == OFF_INDEX);
const _: () = assert!(SIGNATURE_OFFSET + SIGNATURE_BYTES == OFF_COUNT);
const _: () = assert!(OFF_DATA_BASE + 8 == OFF_STRIPE_UNIT);
const _: () = assert!(OFF_STRIPE_UNIT + 8 <= OFF_CRC && OFF_CRC + 4 == LABEL_BYTES);

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum LabelError {
    #[error("no pnfsd member label (not formatted as a data member of this volume)")]
    Missing,
    #[error("member label checksum mismatch")]
    BadCrc,
    #[error("unsupported member label version {0}")]
    BadVersion(u32),
    #[error("member label is short")]
    Short,
}

/// A decoded member label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberLabel {
    pub uuid: [u8; 16],
    pub index: u32,
    pub count: u32,
    pub role: u32,
    pub blocks: u64,
    pub data_base: u64,
    /// Blocks per stripe unit of a striped set; 0 when `count` is 1.
    pub stripe_unit: u64,
}

impl MemberLabel {
    /// The one data member of a split volume that is not striped.
    pub fn data(uuid: [u8; 16], blocks: u64, data_base: u64) -> MemberLabel {
        MemberLabel {
            uuid,
            index: 0,
            count: 1,
            role: ROLE_DATA,
            blocks,
            data_base,
            stripe_unit: 0,
        }
    }

    /// One sector.
    pub fn encode(&self) -> [u8; LABEL_BYTES] {
        let mut b = [0u8; LABEL_BYTES];
        put_bytes(&mut b, OFF_MAGIC, &MAGIC);
        put_bytes(&mut b, OFF_UUID, &self.uuid);
        put_u32_le(&mut b, OFF_INDEX, self.index);
        put_u32_le(&mut b, OFF_COUNT, self.count);
        put_u32_le(&mut b, OFF_ROLE, self.role);
        put_u32_le(&mut b, OFF_VERSION, VERSION);
        put_u64_le(&mut b, OFF_BLOCKS, self.blocks);
        put_u64_le(&mut b, OFF_DATA_BASE, self.data_base);
        put_u64_le(&mut b, OFF_STRIPE_UNIT, self.stripe_unit);
        let crc = crc32c::crc32c(&b[..OFF_CRC]);
        put_u32_le(&mut b, OFF_CRC, crc);
        b
    }

    pub fn decode(b: &[u8]) -> Result<MemberLabel, LabelError> {
        let b = b.get(..LABEL_BYTES).ok_or(LabelError::Short)?;
        let get32 = |o| get_u32_le(b, o).map_err(|_| LabelError::Short);
        let get64 = |o| get_u64_le(b, o).map_err(|_| LabelError::Short);
        if get_array::<8>(b, OFF_MAGIC).map_err(|_| LabelError::Short)? != MAGIC {
            return Err(LabelError::Missing);
        }
        if crc32c::crc32c(&b[..OFF_CRC]) != get32(OFF_CRC)? {
            return Err(LabelError::BadCrc);
        }
        let v = get32(OFF_VERSION)?;
        if v != VERSION {
            return Err(LabelError::BadVersion(v));
        }
        Ok(MemberLabel {
            uuid: get_array::<16>(b, OFF_UUID).map_err(|_| LabelError::Short)?,
            index: get32(OFF_INDEX)?,
            count: get32(OFF_COUNT)?,
            role: get32(OFF_ROLE)?,
            blocks: get64(OFF_BLOCKS)?,
            data_base: get64(OFF_DATA_BASE)?,
            stripe_unit: get64(OFF_STRIPE_UNIT)?,
        })
    }

    /// The block-layout signature of this member: `(byte offset on the device, bytes)`.
    pub fn signature(&self) -> (u64, Vec<u8>) {
        let b = self.encode();
        (
            SIGNATURE_OFFSET as u64,
            b[SIGNATURE_OFFSET..SIGNATURE_OFFSET + SIGNATURE_BYTES].to_vec(),
        )
    }

    /// Whether this label is `want` (the label the superblock expects at this position:
    /// `Superblock::member_label`); the mismatch in words otherwise.
    pub fn check(&self, want: &MemberLabel) -> Result<(), String> {
        if self.uuid != want.uuid {
            return Err("it belongs to another volume (its set UUID differs)".into());
        }
        if self.role != ROLE_DATA {
            return Err(format!(
                "it is not a data member (role {}, member {} of {})",
                self.role, self.index, self.count
            ));
        }
        if self.count != want.count {
            return Err(format!(
                "it is member {} of a set of {} data members, the superblock has {}",
                self.index, self.count, want.count
            ));
        }
        if self.index != want.index {
            return Err(format!(
                "it is data member {} of {}, given as member {} (members swapped?)",
                self.index, self.count, want.index
            ));
        }
        if self.blocks != want.blocks || self.data_base != want.data_base {
            return Err(format!(
                "its label says {} blocks from block {}, the superblock {} from {}",
                self.blocks, self.data_base, want.blocks, want.data_base
            ));
        }
        if self.stripe_unit != want.stripe_unit {
            return Err(format!(
                "its label says a stripe unit of {} blocks, the superblock {}",
                self.stripe_unit, want.stripe_unit
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: [u8; 16] = *b"0123456789abcdef";

    #[test]
    fn label_bytes_are_pinned_and_round_trip() {
        let l = MemberLabel::data(U, 0x0102_0304, 256);
        let b = l.encode();
        assert_eq!(&b[..8], b"PNFSDMB\x01");
        assert_eq!(&b[8..24], &U);
        assert_eq!(
            &b[24..40],
            &[0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
        );
        assert_eq!(&b[40..48], &[4, 3, 2, 1, 0, 0, 0, 0]);
        assert_eq!(&b[48..56], &[0, 1, 0, 0, 0, 0, 0, 0]);
        assert!(b[56..OFF_CRC].iter().all(|&x| x == 0));
        assert_eq!(&b[OFF_CRC..], &crc32c::crc32c(&b[..OFF_CRC]).to_le_bytes());
        assert_eq!(MemberLabel::decode(&b), Ok(l));
        let (off, sig) = l.signature();
        assert_eq!((off, &sig[..16], &sig[16..]), (8, &U[..], &[0u8; 4][..]));
        l.check(&l).unwrap();
    }

    /// A member of a striped set carries its stripe unit at 56; everything else is laid
    /// out as for the one data member.
    #[test]
    fn a_striped_member_label_round_trips() {
        let l = MemberLabel {
            index: 2,
            count: 3,
            stripe_unit: 0x0a0b,
            ..MemberLabel::data(U, 5000, 256)
        };
        let b = l.encode();
        assert_eq!(
            &b[24..40],
            &[2, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
        );
        assert_eq!(&b[56..64], &[0x0b, 0x0a, 0, 0, 0, 0, 0, 0]);
        assert!(b[64..OFF_CRC].iter().all(|&x| x == 0));
        assert_eq!(MemberLabel::decode(&b), Ok(l));
        assert_eq!(&l.signature().1[16..], &[2, 0, 0, 0]);
        let swapped = MemberLabel { index: 1, ..l };
        assert!(swapped.check(&l).unwrap_err().contains("swapped"));
        let fewer = MemberLabel { count: 2, ..l };
        assert!(fewer.check(&l).unwrap_err().contains("set of 2"));
        let unit = MemberLabel {
            stripe_unit: 1,
            ..l
        };
        assert!(unit.check(&l).unwrap_err().contains("stripe unit"));
    }

    /// A missing, torn, foreign, wrong-role or wrong-size label is refused.
    #[test]
    fn a_wrong_label_is_refused() {
        let l = MemberLabel::data(U, 1000, 256);
        assert_eq!(MemberLabel::decode(&[0u8; 512]), Err(LabelError::Missing));
        assert_eq!(MemberLabel::decode(&[0u8; 100]), Err(LabelError::Short));
        let mut torn = l.encode();
        torn[40] ^= 1;
        assert_eq!(MemberLabel::decode(&torn), Err(LabelError::BadCrc));
        let other = *b"fedcba9876543210";
        assert!(MemberLabel { uuid: other, ..l }
            .check(&l)
            .unwrap_err()
            .contains("another volume"));
        let meta = MemberLabel { role: 2, ..l };
        assert!(meta.check(&l).unwrap_err().contains("not a data member"));
        assert!(l
            .check(&MemberLabel::data(U, 999, 256))
            .unwrap_err()
            .contains("1000 blocks"));
        // A superblock is not a label, and its bytes at the signature are no UUID.
        let sb = crate::Superblock {
            uuid: U,
            features: 0,
            geometry: crate::Geometry::for_volume(64 << 20).unwrap(),
            created: 1,
            mounted: None,
        }
        .encode();
        assert_eq!(MemberLabel::decode(&sb), Err(LabelError::Missing));
        assert_ne!(&sb[SIGNATURE_OFFSET..SIGNATURE_OFFSET + 16], &U);
    }
}
