//! The on-disk superblock in block 0 (docs/design.md §2; house rule 4 there: the whole
//! format is here).
//!
//! All integers are little-endian with explicit width; new fields are appended before the CRC's
//! reserved tail. The volume UUID sits at byte [`UUID_OFFSET`] = 32, the same place XFS keeps
//! its UUID, because Linux `blkmapd` finds the device of a block layout by comparing the
//! signature bytes `{offset, bytes}` that GETDEVICEINFO hands out (RFC 5663 §2.2.1).

/// The volume's block size: the Linux block-layout client wants 0 < `layout_blksize` ≤ page size.
pub const BLOCK_SIZE: u32 = 4096;
/// The LBA size of every NVMe namespace that carries a volume: the block size, so every NVMe
/// I/O is whole, aligned store blocks (an O_DIRECT file backend then never read-modify-writes)
/// and layout extents convert to LBAs by one multiplication.
pub const LBA_SIZE: u32 = BLOCK_SIZE;
pub const MAGIC: [u8; 8] = *b"PNFSDSB\x01";
/// 2: the metadata lives in a copy-on-write B+tree allocated from free space (server::store,
/// docs/store.md); version 1 had a fixed object table sized at mkfs.
pub const FORMAT_VERSION: u32 = 2;

use bytecodec::{get_array, get_u32_le, get_u64_le, put_bytes, put_u32_le, put_u64_le};

// Byte offsets of the fields.
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_BLOCK_SIZE: usize = 12;
const OFF_TOTAL_BLOCKS: usize = 16;
const OFF_FEATURES: usize = 24;
/// Where the block-layout signature (the volume UUID) lives: fixed forever.
pub const UUID_OFFSET: usize = 32;
const OFF_LOG_START: usize = 48;
const OFF_LOG_BLOCKS: usize = 56;
const OFF_META_START: usize = 64;
const OFF_META_BLOCKS: usize = 72;
const OFF_DATA_START: usize = 80;
const OFF_DATA_BLOCKS: usize = 88;
const OFF_CREATED: usize = 96;
/// The mount mark ([`MountMark`]): seconds since the epoch, 0 = not mounted. A volume written
/// before the mark existed has zeros here, so it reads as not mounted (no format change).
const OFF_MOUNT_SINCE: usize = 104;
const OFF_MOUNT_PID: usize = 112;
const OFF_MOUNT_HOST: usize = 116;
/// The host name is kept to this many bytes, NUL-padded (Linux allows 64: HOST_NAME_MAX).
pub const MOUNT_HOST_BYTES: usize = 64;
const OFF_END_OF_FIELDS: usize = OFF_MOUNT_HOST + MOUNT_HOST_BYTES;
/// The CRC32C covers bytes `0..OFF_CRC`.
const OFF_CRC: usize = 508;
/// Encoded size: one 512-byte sector, so a superblock write is never torn.
pub const SUPERBLOCK_BYTES: usize = 512;

const _: () = assert!(UUID_OFFSET == 32);
const _: () = assert!(OFF_FEATURES + 8 == UUID_OFFSET);
const _: () = assert!(UUID_OFFSET + 16 == OFF_LOG_START);
const _: () = assert!(OFF_END_OF_FIELDS <= OFF_CRC);
const _: () = assert!(OFF_CRC + 4 == SUPERBLOCK_BYTES);
const _: () = assert!(SUPERBLOCK_BYTES <= BLOCK_SIZE as usize);
const _: () = assert!(OFF_MAGIC + 8 == OFF_VERSION && OFF_VERSION + 4 == OFF_BLOCK_SIZE);

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SuperblockError {
    #[error("not a pnfsd volume (bad magic)")]
    BadMagic,
    #[error("unsupported format version {0}")]
    BadVersion(u32),
    #[error("formatted by an older pnfsd: run pnfsd mkfs (the volume has format version {0}, this pnfsd needs {FORMAT_VERSION})")]
    OldFormat(u32),
    #[error("unsupported block size {0}")]
    BadBlockSize(u32),
    #[error("superblock checksum mismatch")]
    BadCrc,
    #[error("superblock geometry is inconsistent: {0}")]
    BadGeometry(&'static str),
    #[error("buffer too short for a superblock")]
    Short,
    #[error("volume of {0} bytes is too small (minimum {1})")]
    TooSmall(u64, u64),
}

impl From<bytecodec::Error> for SuperblockError {
    fn from(_: bytecodec::Error) -> SuperblockError {
        SuperblockError::Short
    }
}

/// Where each region of the volume is, in blocks of [`BLOCK_SIZE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub total_blocks: u64,
    pub log_start: u64,
    pub log_blocks: u64,
    pub meta_start: u64,
    pub meta_blocks: u64,
    pub data_start: u64,
    pub data_blocks: u64,
}

/// Log size: 1/64 of the volume, between 4 MiB and 256 MiB. The minimum holds thousands of
/// checkpoints of namespace operations (each item is tens of bytes, records are 4 KiB-aligned);
/// the maximum bounds what a mount after a crash may have to replay.
const LOG_MIN_BLOCKS: u64 = (4 << 20) / BLOCK_SIZE as u64;
const LOG_MAX_BLOCKS: u64 = (256 << 20) / BLOCK_SIZE as u64;
/// The fixed metadata area is only the two checkpoint slots of server::store (the roots of its
/// B+tree, written alternately); every tree node is allocated from the free space of the data
/// area as the metadata grows, so nothing about the file count is decided at mkfs.
pub const META_SLOT_BLOCKS: u64 = 2;
/// At least 1 MiB of data blocks, so that a test volume can hold files.
const DATA_MIN_BLOCKS: u64 = (1 << 20) / BLOCK_SIZE as u64;

impl Geometry {
    /// The layout `mkfs` gives a volume of `size_bytes`.
    pub fn for_volume(size_bytes: u64) -> Result<Geometry, SuperblockError> {
        let bs = BLOCK_SIZE as u64;
        let total_blocks = size_bytes / bs;
        let log_blocks = (total_blocks / 64).clamp(LOG_MIN_BLOCKS, LOG_MAX_BLOCKS);
        let meta_blocks = META_SLOT_BLOCKS;
        let data_start = 1 + log_blocks + meta_blocks;
        let min = (data_start + DATA_MIN_BLOCKS) * bs;
        if total_blocks < data_start + DATA_MIN_BLOCKS {
            return Err(SuperblockError::TooSmall(size_bytes, min));
        }
        Ok(Geometry {
            total_blocks,
            log_start: 1,
            log_blocks,
            meta_start: 1 + log_blocks,
            meta_blocks,
            data_start,
            data_blocks: total_blocks - data_start,
        })
    }

    fn check(&self) -> Result<(), SuperblockError> {
        let g = self;
        let end = |s: u64, l: u64| {
            s.checked_add(l)
                .ok_or(SuperblockError::BadGeometry("overflow"))
        };
        if g.log_start < 1 || g.log_blocks == 0 {
            return Err(SuperblockError::BadGeometry("log"));
        }
        if end(g.log_start, g.log_blocks)? > g.meta_start || g.meta_blocks == 0 {
            return Err(SuperblockError::BadGeometry(
                "metadata area overlaps the log",
            ));
        }
        if end(g.meta_start, g.meta_blocks)? > g.data_start {
            return Err(SuperblockError::BadGeometry("data area overlaps metadata"));
        }
        if end(g.data_start, g.data_blocks)? > g.total_blocks {
            return Err(SuperblockError::BadGeometry(
                "data area past the volume end",
            ));
        }
        Ok(())
    }

    pub fn in_data_area(&self, start: u64, len: u64) -> bool {
        start >= self.data_start
            && start
                .checked_add(len)
                .is_some_and(|e| e <= self.data_start + self.data_blocks)
    }
}

/// "Mounted by host X since T": written when pnfsd mounts the volume and cleared by its clean
/// unmount, so that `pnfsd mkfs` can name who may be serving a volume it cannot lock (an
/// external NVMe/TCP namespace), and a mount can say the last one did not end cleanly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountMark {
    host: [u8; MOUNT_HOST_BYTES],
    pub pid: u32,
    /// Seconds since the epoch; never 0 (0 on disk means "not mounted").
    pub since: i64,
}

impl MountMark {
    /// `host` is cut to [`MOUNT_HOST_BYTES`] (at a character boundary); `since` ≤ 0 becomes 1.
    pub fn new(host: &str, pid: u32, since: i64) -> MountMark {
        let mut end = host.len().min(MOUNT_HOST_BYTES);
        while !host.is_char_boundary(end) {
            end -= 1;
        }
        let mut h = [0u8; MOUNT_HOST_BYTES];
        h[..end].copy_from_slice(&host.as_bytes()[..end]);
        MountMark {
            host: h,
            pid,
            since: since.max(1),
        }
    }

    /// The host name as written (bytes that are not UTF-8 are shown replaced).
    pub fn host(&self) -> String {
        let n = self
            .host
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(MOUNT_HOST_BYTES);
        String::from_utf8_lossy(&self.host[..n]).into_owned()
    }
}

/// The decoded superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub uuid: [u8; 16],
    pub features: u64,
    pub geometry: Geometry,
    /// mkfs time, seconds since the epoch (informational).
    pub created: i64,
    /// Who has the volume mounted, if a pnfsd has not unmounted it cleanly.
    pub mounted: Option<MountMark>,
}

impl Superblock {
    /// One full block (the rest of block 0 is zero).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        let g = &self.geometry;
        put_bytes(&mut b, OFF_MAGIC, &MAGIC);
        put_u32_le(&mut b, OFF_VERSION, FORMAT_VERSION);
        put_u32_le(&mut b, OFF_BLOCK_SIZE, BLOCK_SIZE);
        put_u64_le(&mut b, OFF_TOTAL_BLOCKS, g.total_blocks);
        put_u64_le(&mut b, OFF_FEATURES, self.features);
        put_bytes(&mut b, UUID_OFFSET, &self.uuid);
        put_u64_le(&mut b, OFF_LOG_START, g.log_start);
        put_u64_le(&mut b, OFF_LOG_BLOCKS, g.log_blocks);
        put_u64_le(&mut b, OFF_META_START, g.meta_start);
        put_u64_le(&mut b, OFF_META_BLOCKS, g.meta_blocks);
        put_u64_le(&mut b, OFF_DATA_START, g.data_start);
        put_u64_le(&mut b, OFF_DATA_BLOCKS, g.data_blocks);
        put_u64_le(&mut b, OFF_CREATED, self.created as u64);
        if let Some(m) = &self.mounted {
            put_u64_le(&mut b, OFF_MOUNT_SINCE, m.since as u64);
            put_u32_le(&mut b, OFF_MOUNT_PID, m.pid);
            put_bytes(&mut b, OFF_MOUNT_HOST, &m.host);
        }
        let crc = crc32c::crc32c(&b[..OFF_CRC]);
        put_u32_le(&mut b, OFF_CRC, crc);
        b
    }

    /// The block-layout signature of this volume: `(byte offset on the device, bytes)`, what
    /// GETDEVICEINFO puts in its SIMPLE volume (RFC 5663 §2.2.1) and blkmapd compares.
    pub fn signature(&self) -> (u64, [u8; 16]) {
        (UUID_OFFSET as u64, self.uuid)
    }

    /// Whether `buf` starts with our magic (mkfs refuses such a volume without `--force`).
    pub fn looks_formatted(buf: &[u8]) -> bool {
        buf.len() >= 8 && buf[..8] == MAGIC
    }

    pub fn decode(b: &[u8]) -> Result<Superblock, SuperblockError> {
        if b.len() < SUPERBLOCK_BYTES {
            return Err(SuperblockError::Short);
        }
        if get_array::<8>(b, OFF_MAGIC)? != MAGIC {
            return Err(SuperblockError::BadMagic);
        }
        if crc32c::crc32c(&b[..OFF_CRC]) != get_u32_le(b, OFF_CRC)? {
            return Err(SuperblockError::BadCrc);
        }
        let version = get_u32_le(b, OFF_VERSION)?;
        if version < FORMAT_VERSION {
            return Err(SuperblockError::OldFormat(version));
        }
        if version != FORMAT_VERSION {
            return Err(SuperblockError::BadVersion(version));
        }
        let bs = get_u32_le(b, OFF_BLOCK_SIZE)?;
        if bs != BLOCK_SIZE {
            return Err(SuperblockError::BadBlockSize(bs));
        }
        let uuid = get_array::<16>(b, UUID_OFFSET)?;
        let geometry = Geometry {
            total_blocks: get_u64_le(b, OFF_TOTAL_BLOCKS)?,
            log_start: get_u64_le(b, OFF_LOG_START)?,
            log_blocks: get_u64_le(b, OFF_LOG_BLOCKS)?,
            meta_start: get_u64_le(b, OFF_META_START)?,
            meta_blocks: get_u64_le(b, OFF_META_BLOCKS)?,
            data_start: get_u64_le(b, OFF_DATA_START)?,
            data_blocks: get_u64_le(b, OFF_DATA_BLOCKS)?,
        };
        geometry.check()?;
        let since = get_u64_le(b, OFF_MOUNT_SINCE)? as i64;
        let mounted = if since == 0 {
            None
        } else {
            Some(MountMark {
                host: get_array::<MOUNT_HOST_BYTES>(b, OFF_MOUNT_HOST)?,
                pid: get_u32_le(b, OFF_MOUNT_PID)?,
                since,
            })
        };
        Ok(Superblock {
            uuid,
            features: get_u64_le(b, OFF_FEATURES)?,
            geometry,
            created: get_u64_le(b, OFF_CREATED)? as i64,
            mounted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb() -> Superblock {
        Superblock {
            uuid: *b"0123456789abcdef",
            features: 0,
            geometry: Geometry::for_volume(1 << 30).unwrap(),
            created: 1_700_000_000,
            mounted: None,
        }
    }

    #[test]
    fn the_mount_mark_round_trips_and_is_cleared() {
        let mut s = sb();
        s.mounted = Some(MountMark::new("mds-a.example", 4242, 1_800_000_000));
        let d = Superblock::decode(&s.encode()).unwrap();
        assert_eq!(d, s);
        let m = d.mounted.unwrap();
        assert_eq!(
            (m.host(), m.pid, m.since),
            ("mds-a.example".into(), 4242, 1_800_000_000)
        );
        // Cleared: zeros, as a volume from before the mark reads.
        s.mounted = None;
        let b = s.encode();
        assert!(b[OFF_MOUNT_SINCE..OFF_END_OF_FIELDS]
            .iter()
            .all(|&x| x == 0));
        assert_eq!(Superblock::decode(&b).unwrap().mounted, None);
        // A long name is cut at a character boundary, never past its field.
        let long = "é".repeat(40);
        let m = MountMark::new(&long, 1, 0);
        assert_eq!(m.host(), "é".repeat(32));
        assert_eq!(m.since, 1);
    }

    #[test]
    fn round_trip_and_uuid_at_32() {
        let s = sb();
        let b = s.encode();
        assert_eq!(b.len(), BLOCK_SIZE as usize);
        assert_eq!(&b[32..48], b"0123456789abcdef");
        let (off, sig) = s.signature();
        assert_eq!(&b[off as usize..off as usize + 16], &sig);
        assert_eq!(Superblock::decode(&b).unwrap(), s);
        assert!(Superblock::looks_formatted(&b));
    }

    #[test]
    fn corruption_is_detected() {
        let mut b = sb().encode();
        b[70] ^= 1;
        assert_eq!(Superblock::decode(&b), Err(SuperblockError::BadCrc));
        let mut b = sb().encode();
        b[0] = b'X';
        assert_eq!(Superblock::decode(&b), Err(SuperblockError::BadMagic));
        assert_eq!(Superblock::decode(&[0u8; 10]), Err(SuperblockError::Short));
    }

    #[test]
    fn geometry_regions_do_not_overlap() {
        for size in [10u64 << 20, 64 << 20, 1 << 30, 1 << 40, 64 << 40] {
            let g = Geometry::for_volume(size).unwrap();
            g.check().unwrap();
            assert_eq!(g.data_start + g.data_blocks, g.total_blocks);
            assert!(g.log_blocks >= LOG_MIN_BLOCKS && g.log_blocks <= LOG_MAX_BLOCKS);
        }
        assert!(matches!(
            Geometry::for_volume(4 << 20),
            Err(SuperblockError::TooSmall(..))
        ));
    }

    #[test]
    fn an_older_format_says_run_mkfs() {
        let mut b = sb().encode();
        put_u32_le(&mut b, OFF_VERSION, 1);
        let crc = crc32c::crc32c(&b[..OFF_CRC]);
        put_u32_le(&mut b, OFF_CRC, crc);
        let e = Superblock::decode(&b).unwrap_err();
        assert_eq!(e, SuperblockError::OldFormat(1));
        assert!(e
            .to_string()
            .contains("formatted by an older pnfsd: run pnfsd mkfs"));
    }

    #[test]
    fn inconsistent_geometry_is_refused() {
        let mut s = sb();
        s.geometry.meta_start = s.geometry.log_start;
        assert!(matches!(
            Superblock::decode(&s.encode()),
            Err(SuperblockError::BadGeometry(_))
        ));
    }
}
