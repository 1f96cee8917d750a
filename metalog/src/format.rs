//! On-disk log format (docs/design.md, house rule 4): every byte the log writes is laid out here.
//!
//! ```text
//! log region [offset, offset + len):
//!   block 0        LogSuperblock (4 KiB): clean-unmount hint, so a clean mount is O(1)
//!   blocks 1..     circular record area of `len - 4096` bytes; LSN = monotonic byte position,
//!                  physical = area_start + lsn % area_len
//! record (4 KiB-aligned, may wrap at the end of the area):
//!   RecordHeader (64 B) | payload (payload_len B) | zero padding to 4 KiB
//! checkpoint = 1..n records with the same CSN, START on the first and END (commit) on the last;
//!   payload of a checkpoint = concatenated encoded items (items/mod.rs), split across records
//! ```
//! Integers are little-endian. New fields are appended in the reserved space.

use crate::{Csn, Lsn};
use bytecodec::{get_array, put_bytes, put_u16_le, put_u32_le, put_u64_le, Reader};

/// Record header magic: "PNML" (pnfsd metalog).
pub const RECORD_MAGIC: u32 = 0x4c4d_4e50;
/// Log superblock magic: "PNLS".
pub const SB_MAGIC: u32 = 0x534c_4e50;
/// Format version of records and superblock.
pub const VERSION: u16 = 1;
/// Record alignment and unit of the area; 4 KiB = page size and the largest common sector.
pub const BLOCK: u64 = 4096;
/// Size of [`RecordHeader`] on disk.
pub const HEADER_SIZE: usize = 64;
/// Size of [`LogSuperblock`] on disk (it occupies the whole first block of the region).
pub const SB_SIZE: usize = 64;

/// First record of a checkpoint.
pub const F_START: u16 = 1;
/// Last record of a checkpoint: the commit record. A checkpoint is replayed only if it is there.
pub const F_END: u16 = 2;
/// Clean-unmount record (no payload).
pub const F_UNMOUNT: u16 = 4;
/// Tail-update record (no payload): carries a moved tail before the area behind it is reused.
pub const F_TAIL: u16 = 8;

/// Superblock flag: the log was cleanly unmounted at `clean_lsn`.
pub const SB_CLEAN: u16 = 1;

/// Record header, 64 bytes. The CRC32C covers the header (with `crc` = 0) and the payload.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// [`RECORD_MAGIC`]. Offset 0.
    pub magic: u32,
    /// [`VERSION`]. Offset 4.
    pub version: u16,
    /// `F_*` flags. Offset 6.
    pub flags: u16,
    /// Volume UUID: records of another volume never replay. Offset 8.
    pub uuid: [u8; 16],
    /// Byte position of this record; must match where it was read. Offset 24.
    pub lsn: u64,
    /// Checkpoint sequence of the payload (for UNMOUNT/TAIL: the last pushed CSN). Offset 32.
    pub csn: u64,
    /// LSN of the oldest record recovery needs, as of this record's write. Offset 40.
    pub tail_lsn: u64,
    /// Record length on disk including header and padding, a multiple of [`BLOCK`]. Offset 48.
    pub rec_len: u32,
    /// Payload bytes after the header. Offset 52.
    pub payload_len: u32,
    /// CRC32C. Offset 56.
    pub crc: u32,
    /// Mount epoch: every recovery writes with a higher epoch than any record it found, and
    /// a record chain never steps back to a lower epoch, so records left behind a hole by an
    /// earlier crash can never continue a later chain. Offset 60.
    pub epoch: u32,
}

/// Log superblock, first 64 bytes of block 0 of the region; CRC32C over it with `crc` = 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogSuperblock {
    /// [`SB_MAGIC`]. Offset 0.
    pub magic: u32,
    /// [`VERSION`]. Offset 4.
    pub version: u16,
    /// `SB_*` flags. Offset 6.
    pub flags: u16,
    /// Volume UUID. Offset 8.
    pub uuid: [u8; 16],
    /// Size of the record area (region length − 4096). Offset 24.
    pub area_len: u64,
    /// LSN of the clean-unmount record when `SB_CLEAN` is set. Offset 32.
    pub clean_lsn: u64,
    /// Head LSN at the last mount (a lower bound for every later record). Offset 40.
    pub mount_lsn: u64,
    /// CRC32C. Offset 48.
    pub crc: u32,
    /// Zero. Offset 52.
    pub reserved: [u8; 12],
}

const _: () = assert!(std::mem::size_of::<RecordHeader>() == HEADER_SIZE);
const _: () = assert!(std::mem::offset_of!(RecordHeader, lsn) == 24);
const _: () = assert!(std::mem::offset_of!(RecordHeader, crc) == 56);
const _: () = assert!(std::mem::size_of::<LogSuperblock>() == SB_SIZE);
const _: () = assert!(std::mem::offset_of!(LogSuperblock, crc) == 48);
const _: () = assert!(HEADER_SIZE < BLOCK as usize);
const _: () = assert!(SB_SIZE <= BLOCK as usize);

/// On-disk length of a record carrying `payload` bytes.
pub const fn rec_len(payload: usize) -> u64 {
    (HEADER_SIZE as u64 + payload as u64).div_ceil(BLOCK) * BLOCK
}

impl RecordHeader {
    fn put(&self, out: &mut [u8]) {
        put_u32_le(out, 0, self.magic);
        put_u16_le(out, 4, self.version);
        put_u16_le(out, 6, self.flags);
        put_bytes(out, 8, &self.uuid);
        put_u64_le(out, 24, self.lsn);
        put_u64_le(out, 32, self.csn);
        put_u64_le(out, 40, self.tail_lsn);
        put_u32_le(out, 48, self.rec_len);
        put_u32_le(out, 52, self.payload_len);
        put_u32_le(out, 56, self.crc);
        put_u32_le(out, 60, self.epoch);
    }

    /// Parse the header at the start of `b` (no CRC check); `None` if not a record header.
    pub fn parse(b: &[u8]) -> Option<RecordHeader> {
        let h = Self::read(&mut Reader::new(b.get(..HEADER_SIZE)?)).ok()?;
        (h.magic == RECORD_MAGIC).then_some(h)
    }

    /// The fields in their on-disk order (the offsets their docs give).
    fn read(r: &mut Reader<'_>) -> Result<RecordHeader, bytecodec::Error> {
        let h = RecordHeader {
            magic: r.u32_le()?,
            version: r.u16_le()?,
            flags: r.u16_le()?,
            uuid: r.array()?,
            lsn: r.u64_le()?,
            csn: r.u64_le()?,
            tail_lsn: r.u64_le()?,
            rec_len: r.u32_le()?,
            payload_len: r.u32_le()?,
            crc: r.u32_le()?,
            epoch: r.u32_le()?,
        };
        r.finish()?;
        Ok(h)
    }
}

/// Build one record: header + payload, padded, CRC filled in.
#[allow(clippy::too_many_arguments)] // one per header field
pub fn build_record(
    uuid: [u8; 16],
    epoch: u32,
    flags: u16,
    lsn: Lsn,
    csn: Csn,
    tail: Lsn,
    payload: &[u8],
) -> Vec<u8> {
    let len = rec_len(payload.len());
    let mut out = vec![0u8; len as usize];
    let h = RecordHeader {
        magic: RECORD_MAGIC,
        version: VERSION,
        flags,
        uuid,
        lsn: lsn.0,
        csn: csn.0,
        tail_lsn: tail.0,
        rec_len: len as u32,
        payload_len: payload.len() as u32,
        crc: 0,
        epoch,
    };
    h.put(&mut out);
    out[HEADER_SIZE..HEADER_SIZE + payload.len()].copy_from_slice(payload);
    let crc = crc32c::crc32c(&out[..HEADER_SIZE + payload.len()]);
    put_u32_le(&mut out, 56, crc);
    out
}

/// Why a record was rejected (recovery stops there: a torn or stale record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordCheck {
    /// No record magic.
    NoMagic,
    /// Wrong version, UUID, LSN or length.
    Mismatch,
    /// CRC mismatch: torn or corrupt.
    BadCrc,
}

/// Validate a full record image read at `lsn` (header block first); returns header + payload.
pub fn check_record<'a>(
    rec: &'a [u8],
    uuid: &[u8; 16],
    lsn: Lsn,
) -> Result<(RecordHeader, &'a [u8]), RecordCheck> {
    let h = RecordHeader::parse(rec).ok_or(RecordCheck::NoMagic)?;
    if h.version != VERSION
        || &h.uuid != uuid
        || h.lsn != lsn.0
        || h.rec_len as u64 != rec_len(h.payload_len as usize)
        || rec.len() < h.rec_len as usize
    {
        return Err(RecordCheck::Mismatch);
    }
    let end = HEADER_SIZE + h.payload_len as usize;
    let mut crc = crc32c::crc32c(&rec[..56]);
    crc = crc32c::crc32c_append(crc, &[0u8; 4]);
    crc = crc32c::crc32c_append(crc, &rec[60..end]);
    if crc != h.crc {
        return Err(RecordCheck::BadCrc);
    }
    Ok((h, &rec[HEADER_SIZE..end]))
}

impl LogSuperblock {
    /// Encode into a full 4 KiB block with the CRC filled in.
    pub fn to_block(&self) -> Vec<u8> {
        let mut out = vec![0u8; BLOCK as usize];
        put_u32_le(&mut out, 0, SB_MAGIC);
        put_u16_le(&mut out, 4, self.version);
        put_u16_le(&mut out, 6, self.flags);
        put_bytes(&mut out, 8, &self.uuid);
        put_u64_le(&mut out, 24, self.area_len);
        put_u64_le(&mut out, 32, self.clean_lsn);
        put_u64_le(&mut out, 40, self.mount_lsn);
        let crc = crc32c::crc32c(&out[..SB_SIZE]);
        put_u32_le(&mut out, 48, crc);
        out
    }

    /// Decode and verify; `None` if the block is not a valid superblock.
    pub fn from_block(b: &[u8]) -> Option<LogSuperblock> {
        let mut c = get_array::<SB_SIZE>(b, 0).ok()?;
        let sb = Self::read(&mut Reader::new(&c)).ok()?;
        if sb.magic != SB_MAGIC || sb.version != VERSION {
            return None;
        }
        put_u32_le(&mut c, 48, 0);
        (crc32c::crc32c(&c) == sb.crc).then_some(sb)
    }

    /// The fields in their on-disk order (the offsets their docs give); `reserved` reads as
    /// zeros whatever is there, as it is written.
    fn read(r: &mut Reader<'_>) -> Result<LogSuperblock, bytecodec::Error> {
        let sb = LogSuperblock {
            magic: r.u32_le()?,
            version: r.u16_le()?,
            flags: r.u16_le()?,
            uuid: r.array()?,
            area_len: r.u64_le()?,
            clean_lsn: r.u64_le()?,
            mount_lsn: r.u64_le()?,
            crc: r.u32_le()?,
            reserved: {
                r.skip(12)?;
                [0; 12]
            },
        };
        r.finish()?;
        Ok(sb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_roundtrip_and_crc() {
        let u = [3u8; 16];
        let mut r = build_record(u, 1, F_START | F_END, Lsn(8192), Csn(7), Lsn(4096), b"abc");
        assert_eq!(r.len(), 4096);
        let (h, p) = check_record(&r, &u, Lsn(8192)).unwrap();
        assert_eq!((h.csn, h.tail_lsn, p), (7, 4096, &b"abc"[..]));
        assert_eq!(
            check_record(&r, &u, Lsn(0)).unwrap_err(),
            RecordCheck::Mismatch
        );
        assert_eq!(
            check_record(&r, &[0; 16], Lsn(8192)).unwrap_err(),
            RecordCheck::Mismatch
        );
        r[HEADER_SIZE + 1] ^= 1;
        assert_eq!(
            check_record(&r, &u, Lsn(8192)).unwrap_err(),
            RecordCheck::BadCrc
        );
        assert_eq!(
            check_record(&[0u8; 4096], &u, Lsn(0)).unwrap_err(),
            RecordCheck::NoMagic
        );
        assert_eq!(rec_len(4096 - 64), 4096);
        assert_eq!(rec_len(4096 - 63), 8192);
    }

    #[test]
    fn superblock_roundtrip() {
        let sb = LogSuperblock {
            magic: SB_MAGIC,
            version: VERSION,
            flags: SB_CLEAN,
            uuid: [9; 16],
            area_len: 1 << 20,
            clean_lsn: 12288,
            mount_lsn: 4096,
            crc: 0,
            reserved: [0; 12],
        };
        let mut b = sb.to_block();
        let back = LogSuperblock::from_block(&b).unwrap();
        assert_eq!(
            (back.flags, back.clean_lsn, back.area_len),
            (SB_CLEAN, 12288, 1 << 20)
        );
        b[33] ^= 1;
        assert!(LogSuperblock::from_block(&b).is_none());
    }
}
