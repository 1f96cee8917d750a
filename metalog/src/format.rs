//! On-disk log format (style.md rule 4): every byte the log writes is laid out here.
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

fn le32(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}
fn le64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

/// On-disk length of a record carrying `payload` bytes.
pub const fn rec_len(payload: usize) -> u64 {
    (HEADER_SIZE as u64 + payload as u64).div_ceil(BLOCK) * BLOCK
}

impl RecordHeader {
    fn put(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.magic.to_le_bytes());
        out[4..6].copy_from_slice(&self.version.to_le_bytes());
        out[6..8].copy_from_slice(&self.flags.to_le_bytes());
        out[8..24].copy_from_slice(&self.uuid);
        out[24..32].copy_from_slice(&self.lsn.to_le_bytes());
        out[32..40].copy_from_slice(&self.csn.to_le_bytes());
        out[40..48].copy_from_slice(&self.tail_lsn.to_le_bytes());
        out[48..52].copy_from_slice(&self.rec_len.to_le_bytes());
        out[52..56].copy_from_slice(&self.payload_len.to_le_bytes());
        out[56..60].copy_from_slice(&self.crc.to_le_bytes());
        out[60..64].copy_from_slice(&self.epoch.to_le_bytes());
    }

    /// Parse the header at the start of `b` (no CRC check); `None` if not a record header.
    pub fn parse(b: &[u8]) -> Option<RecordHeader> {
        if b.len() < HEADER_SIZE || le32(b, 0) != RECORD_MAGIC {
            return None;
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[8..24]);
        Some(RecordHeader {
            magic: RECORD_MAGIC,
            version: le16(b, 4),
            flags: le16(b, 6),
            uuid,
            lsn: le64(b, 24),
            csn: le64(b, 32),
            tail_lsn: le64(b, 40),
            rec_len: le32(b, 48),
            payload_len: le32(b, 52),
            crc: le32(b, 56),
            epoch: le32(b, 60),
        })
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
    out[56..60].copy_from_slice(&crc.to_le_bytes());
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
        out[0..4].copy_from_slice(&SB_MAGIC.to_le_bytes());
        out[4..6].copy_from_slice(&self.version.to_le_bytes());
        out[6..8].copy_from_slice(&self.flags.to_le_bytes());
        out[8..24].copy_from_slice(&self.uuid);
        out[24..32].copy_from_slice(&self.area_len.to_le_bytes());
        out[32..40].copy_from_slice(&self.clean_lsn.to_le_bytes());
        out[40..48].copy_from_slice(&self.mount_lsn.to_le_bytes());
        let crc = crc32c::crc32c(&out[..SB_SIZE]);
        out[48..52].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decode and verify; `None` if the block is not a valid superblock.
    pub fn from_block(b: &[u8]) -> Option<LogSuperblock> {
        if b.len() < SB_SIZE || le32(b, 0) != SB_MAGIC || le16(b, 4) != VERSION {
            return None;
        }
        let mut c = [0u8; SB_SIZE];
        c.copy_from_slice(&b[..SB_SIZE]);
        c[48..52].fill(0);
        if crc32c::crc32c(&c) != le32(b, 48) {
            return None;
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[8..24]);
        Some(LogSuperblock {
            magic: SB_MAGIC,
            version: VERSION,
            flags: le16(b, 6),
            uuid,
            area_len: le64(b, 24),
            clean_lsn: le64(b, 32),
            mount_lsn: le64(b, 40),
            crc: le32(b, 48),
            reserved: [0; 12],
        })
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
