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

use crate::stripe::Stripe;

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
const OFF_MOUNT_END: usize = OFF_MOUNT_HOST + MOUNT_HOST_BYTES;
// A split volume's fields ([`FEATURE_SPLIT`]; zero on a single volume).
const OFF_NODE_BLOCKS: usize = OFF_MOUNT_END;
const OFF_DATA_BASE: usize = OFF_NODE_BLOCKS + 8;
const OFF_DATA_MEMBER_BLOCKS: usize = OFF_DATA_BASE + 8;
// A striped data set's fields ([`FEATURE_STRIPE`]; zero otherwise).
const OFF_DATA_MEMBERS: usize = OFF_DATA_MEMBER_BLOCKS + 8;
const OFF_STRIPE_UNIT: usize = OFF_DATA_MEMBERS + 8;
const OFF_END_OF_FIELDS: usize = OFF_STRIPE_UNIT + 8;
/// The CRC32C covers bytes `0..OFF_CRC`.
const OFF_CRC: usize = 508;
/// Encoded size: one 512-byte sector, so a superblock write is never torn.
pub const SUPERBLOCK_BYTES: usize = 512;

/// Incompatible feature: the volume is split over a metadata member (this superblock, the
/// log, the checkpoint slots and a node area for the B+tree and blobs) and a data member
/// (the blocks of layouts, behind a member label: `member`). A pnfsd that does not know a
/// bit of `features` refuses the volume.
pub const FEATURE_SPLIT: u64 = 1 << 0;
/// Incompatible feature, only with [`FEATURE_SPLIT`]: the data area is striped over more
/// than one data member (`stripe`); a set of one data member never sets it.
pub const FEATURE_STRIPE: u64 = 1 << 1;
const FEATURES_KNOWN: u64 = FEATURE_SPLIT | FEATURE_STRIPE;

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
    #[error("the volume uses features {0:#x} this pnfsd does not know")]
    UnknownFeatures(u64),
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
    /// The allocator's region `[data_start, data_start + data_blocks)`, to the volume's end.
    pub data_start: u64,
    pub data_blocks: u64,
    /// Split volume ([`FEATURE_SPLIT`]): the first `node_blocks` of the allocator's region
    /// are the node area (tree nodes and blobs) on the metadata member; the rest lives on the
    /// data member from its block `data_base` on. 0: a single volume.
    pub node_blocks: u64,
    pub data_base: u64,
    /// The data member's size in blocks (its label's and the first `data_base` included);
    /// of a striped set, the blocks each member uses (all the same).
    pub data_member_blocks: u64,
    /// Data members: 0 on a single volume, 1 on a split one, N > 1 on a striped set
    /// ([`FEATURE_STRIPE`]), whose file area is striped in units of `stripe_unit` blocks
    /// (0 unless striped).
    pub data_members: u32,
    pub stripe_unit: u64,
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
/// A split volume's data start on its data member, past the member label: 1 MiB, so data
/// extents are 1 MiB aligned on the device.
pub const DATA_BASE_BLOCKS: u64 = (1 << 20) / BLOCK_SIZE as u64;
/// The smallest node area: 1 MiB of tree nodes and blobs.
const NODE_MIN_BLOCKS: u64 = (1 << 20) / BLOCK_SIZE as u64;

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
            node_blocks: 0,
            data_base: 0,
            data_member_blocks: 0,
            data_members: 0,
            stripe_unit: 0,
        })
    }

    /// The layout `mkfs` gives a split volume: all of the metadata member past the log and
    /// the checkpoint slots is the node area (the member holds metadata only), the data
    /// member's blocks from [`DATA_BASE_BLOCKS`] on are the data area. The log is sized from
    /// both members together, as for a single volume of that size.
    pub fn for_split(meta_bytes: u64, data_bytes: u64) -> Result<Geometry, SuperblockError> {
        Geometry::for_stripe(meta_bytes, &[data_bytes], 1)
    }

    /// The layout `mkfs` gives a split volume over the data members of `data_bytes`, striped
    /// in units of `stripe_unit` blocks when there is more than one (`stripe`): each member
    /// uses as many whole stripe units as the smallest holds past its label. One member is
    /// [`Geometry::for_split`], whatever the unit.
    pub fn for_stripe(
        meta_bytes: u64,
        data_bytes: &[u64],
        stripe_unit: u64,
    ) -> Result<Geometry, SuperblockError> {
        let bs = BLOCK_SIZE as u64;
        let n = u32::try_from(data_bytes.len())
            .map_err(|_| SuperblockError::BadGeometry("too many data members"))?;
        let smallest = *data_bytes
            .iter()
            .min()
            .ok_or(SuperblockError::BadGeometry("no data member"))?;
        let meta = meta_bytes / bs;
        let (member, unit) = match n {
            1 => (smallest / bs, 0),
            _ => {
                if stripe_unit == 0 {
                    return Err(SuperblockError::BadGeometry("stripe unit of 0 blocks"));
                }
                let usable = (smallest / bs).saturating_sub(DATA_BASE_BLOCKS);
                (
                    DATA_BASE_BLOCKS + usable / stripe_unit * stripe_unit,
                    stripe_unit,
                )
            }
        };
        let all: u64 = data_bytes.iter().map(|b| b / bs).sum();
        let log_blocks = ((meta + all) / 64).clamp(LOG_MIN_BLOCKS, LOG_MAX_BLOCKS);
        let data_start = 1 + log_blocks + META_SLOT_BLOCKS;
        if meta < data_start + NODE_MIN_BLOCKS {
            return Err(SuperblockError::TooSmall(
                meta_bytes,
                (data_start + NODE_MIN_BLOCKS) * bs,
            ));
        }
        let min = DATA_BASE_BLOCKS + DATA_MIN_BLOCKS.max(unit);
        if member < min {
            return Err(SuperblockError::TooSmall(smallest, min * bs));
        }
        let node_blocks = meta - data_start;
        let total_blocks = meta + u64::from(n) * (member - DATA_BASE_BLOCKS);
        Ok(Geometry {
            total_blocks,
            log_start: 1,
            log_blocks,
            meta_start: 1 + log_blocks,
            meta_blocks: META_SLOT_BLOCKS,
            data_start,
            data_blocks: total_blocks - data_start,
            node_blocks,
            data_base: DATA_BASE_BLOCKS,
            data_member_blocks: member,
            data_members: n,
            stripe_unit: unit,
        })
    }

    pub fn is_split(&self) -> bool {
        self.node_blocks > 0
    }

    /// Whether the file area is striped over more than one data member.
    pub fn is_striped(&self) -> bool {
        self.data_members > 1
    }

    /// The striping of the file area over the data members (one member: the identity).
    pub fn stripe(&self) -> Stripe {
        Stripe {
            members: self.data_members.max(1),
            unit: self.stripe_unit.max(1),
        }
    }

    /// Where block `block` of the file area lives: (data member index, block on that
    /// member's device, its label's included). `None` outside a split volume's file area.
    pub fn member_block(&self, block: u64) -> Option<(u32, u64)> {
        if !self.is_split() || block >= self.total_blocks {
            return None;
        }
        let (m, b) = self
            .stripe()
            .to_member(block.checked_sub(self.data_split())?);
        Some((m, b + self.data_base))
    }

    /// The inverse of [`Geometry::member_block`]: `None` for a label block, a block past
    /// the blocks a member uses, or a member not in the set.
    pub fn block_of_member(&self, member: u32, b: u64) -> Option<u64> {
        if !self.is_split() || b >= self.data_member_blocks {
            return None;
        }
        let s = self
            .stripe()
            .to_logical(member, b.checked_sub(self.data_base)?)?;
        Some(self.data_split() + s)
    }

    /// The first block of the data member's part of the block space (the volume's end for a
    /// single volume, whose blocks are all on one member).
    pub fn data_split(&self) -> u64 {
        match self.is_split() {
            true => self.data_start + self.node_blocks,
            false => self.total_blocks,
        }
    }

    /// Blocks of the metadata member (all of a single volume).
    pub fn meta_member_blocks(&self) -> u64 {
        self.data_split()
    }

    /// Blocks of the device clients write (LBAs of the embedded target's namespace 1): the
    /// whole of a single volume, the data member of a split one (each member of a striped
    /// set).
    pub fn data_member_len(&self) -> u64 {
        match self.is_split() {
            true => self.data_member_blocks,
            false => self.total_blocks,
        }
    }

    /// Where tree nodes and blobs are allocated: `[start, end)`.
    pub fn node_area(&self) -> (u64, u64) {
        match self.is_split() {
            true => (self.data_start, self.data_split()),
            false => (self.data_start, self.total_blocks),
        }
    }

    /// Where file data is allocated: `[start, end)`.
    pub fn file_area(&self) -> (u64, u64) {
        match self.is_split() {
            true => (self.data_split(), self.total_blocks),
            false => (self.data_start, self.total_blocks),
        }
    }

    /// The byte offset on the data member (a layout's `storage_offset`, an LBA of the data
    /// namespace times its size) of block `block` of the data area. The identity times the
    /// block size on a single volume; `None` for a block not on the data member.
    /// On a striped set the offset is in the STRIPE volume GETDEVICEINFO describes (over
    /// each member's data past its label): the logical data block times the block size; the
    /// client maps it to a member itself (RFC 5663 §2.2.4).
    pub fn storage_offset(&self, block: u64) -> Option<u64> {
        let bs = BLOCK_SIZE as u64;
        if !self.is_split() {
            return block.checked_mul(bs);
        }
        let b = block.checked_sub(self.data_split())?;
        if block >= self.total_blocks {
            return None;
        }
        match self.is_striped() {
            true => Some(b * bs),
            false => Some((b + self.data_base) * bs),
        }
    }

    /// The inverse of [`Geometry::storage_offset`]: the block at byte `offset` of the data
    /// member (rounded down to its block). `None` for a split volume's label blocks or
    /// past its end.
    pub fn block_at_storage(&self, offset: u64) -> Option<u64> {
        let b = offset / BLOCK_SIZE as u64;
        if !self.is_split() {
            return Some(b);
        }
        if self.is_striped() {
            let logical = b.checked_add(self.data_split())?;
            return (logical < self.total_blocks).then_some(logical);
        }
        let logical = b
            .checked_sub(self.data_base)?
            .checked_add(self.data_split())?;
        (logical < self.total_blocks).then_some(logical)
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
        if g.is_split() {
            let split = end(g.data_start, g.node_blocks)?;
            if split >= g.total_blocks || g.data_base == 0 {
                return Err(SuperblockError::BadGeometry("node area"));
            }
            let per = g
                .data_member_blocks
                .checked_sub(g.data_base)
                .filter(|&p| p > 0)
                .ok_or(SuperblockError::BadGeometry("data member size"))?;
            let n = u64::from(g.data_members.max(1));
            if per.checked_mul(n) != Some(g.total_blocks - split) {
                return Err(SuperblockError::BadGeometry("data member size"));
            }
            if g.is_striped() && (g.stripe_unit == 0 || per % g.stripe_unit != 0) {
                return Err(SuperblockError::BadGeometry("stripe unit"));
            }
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
        if g.is_split() {
            put_u64_le(&mut b, OFF_NODE_BLOCKS, g.node_blocks);
            put_u64_le(&mut b, OFF_DATA_BASE, g.data_base);
            put_u64_le(&mut b, OFF_DATA_MEMBER_BLOCKS, g.data_member_blocks);
        }
        if g.is_striped() {
            put_u64_le(&mut b, OFF_DATA_MEMBERS, u64::from(g.data_members));
            put_u64_le(&mut b, OFF_STRIPE_UNIT, g.stripe_unit);
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

    /// The block-layout signature of the device clients write, the one GETDEVICEINFO names:
    /// this superblock's on a single volume, the data member's label on a split one
    /// (`member`), so that blkmapd never takes the metadata member for it.
    pub fn data_signature(&self) -> (u64, Vec<u8>) {
        let g = &self.geometry;
        match g.is_split() {
            false => (UUID_OFFSET as u64, self.uuid.to_vec()),
            true => self.member_label(0).signature(),
        }
    }

    /// The label of data member `index` of a split volume, as mkfs writes it in the member's
    /// block 0 and a mount expects it there (`member`).
    pub fn member_label(&self, index: u32) -> crate::member::MemberLabel {
        let g = &self.geometry;
        crate::member::MemberLabel {
            uuid: self.uuid,
            index,
            count: g.data_members.max(1),
            role: crate::member::ROLE_DATA,
            blocks: g.data_member_blocks,
            data_base: g.data_base,
            stripe_unit: g.stripe_unit,
        }
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
        let features = get_u64_le(b, OFF_FEATURES)?;
        if features & !FEATURES_KNOWN != 0 {
            return Err(SuperblockError::UnknownFeatures(features & !FEATURES_KNOWN));
        }
        let split = features & FEATURE_SPLIT != 0;
        let striped = features & FEATURE_STRIPE != 0;
        if striped && !split {
            return Err(SuperblockError::BadGeometry("stripe feature without split"));
        }
        let split_field = |off| match split {
            true => get_u64_le(b, off),
            false => Ok(0),
        };
        let (data_members, stripe_unit) = match (split, striped) {
            (false, _) => (0, 0),
            (true, false) => (1, 0),
            (true, true) => {
                let n = u32::try_from(get_u64_le(b, OFF_DATA_MEMBERS)?)
                    .ok()
                    .filter(|&n| n > 1)
                    .ok_or(SuperblockError::BadGeometry("data member count"))?;
                (n, get_u64_le(b, OFF_STRIPE_UNIT)?)
            }
        };
        let geometry = Geometry {
            total_blocks: get_u64_le(b, OFF_TOTAL_BLOCKS)?,
            log_start: get_u64_le(b, OFF_LOG_START)?,
            log_blocks: get_u64_le(b, OFF_LOG_BLOCKS)?,
            meta_start: get_u64_le(b, OFF_META_START)?,
            meta_blocks: get_u64_le(b, OFF_META_BLOCKS)?,
            data_start: get_u64_le(b, OFF_DATA_START)?,
            data_blocks: get_u64_le(b, OFF_DATA_BLOCKS)?,
            node_blocks: split_field(OFF_NODE_BLOCKS)?,
            data_base: split_field(OFF_DATA_BASE)?,
            data_member_blocks: split_field(OFF_DATA_MEMBER_BLOCKS)?,
            data_members,
            stripe_unit,
        };
        if split != geometry.is_split() {
            return Err(SuperblockError::BadGeometry(
                "split feature without a node area",
            ));
        }
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
            features,
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

    /// The bytes of a single volume's superblock, pinned: the split fields stay zero, so a
    /// single volume is byte for byte what it was before they existed.
    #[test]
    fn single_volume_bytes_are_pinned() {
        let s = sb();
        let b = s.encode();
        let g = s.geometry;
        assert_eq!(&b[0..8], b"PNFSDSB\x01");
        assert_eq!(&b[8..12], &2u32.to_le_bytes());
        assert_eq!(&b[12..16], &4096u32.to_le_bytes());
        assert_eq!(&b[16..24], &(262_144u64).to_le_bytes());
        assert_eq!(&b[24..32], &[0u8; 8]);
        assert_eq!(&b[48..56], &1u64.to_le_bytes());
        assert_eq!(&b[56..64], &4096u64.to_le_bytes());
        assert_eq!(&b[64..72], &4097u64.to_le_bytes());
        assert_eq!(&b[72..80], &2u64.to_le_bytes());
        assert_eq!(&b[80..88], &4099u64.to_le_bytes());
        assert_eq!(&b[88..96], &(262_144u64 - 4099).to_le_bytes());
        assert_eq!(&b[96..104], &1_700_000_000u64.to_le_bytes());
        assert!(b[104..OFF_CRC].iter().all(|&x| x == 0));
        assert_eq!(
            &b[OFF_CRC..512],
            &crc32c::crc32c(&b[..OFF_CRC]).to_le_bytes()
        );
        assert!(!g.is_split());
        assert_eq!(g.data_split(), g.total_blocks);
        assert_eq!(g.node_area(), g.file_area());
    }

    fn split_sb() -> Superblock {
        Superblock {
            features: FEATURE_SPLIT,
            geometry: Geometry::for_split(64 << 20, 1 << 30).unwrap(),
            ..sb()
        }
    }

    /// A split volume's superblock: its feature bit and its three fields after the mount
    /// mark, pinned; a superblock that has one without the other is refused.
    #[test]
    fn split_volume_bytes_are_pinned() {
        let s = split_sb();
        let g = s.geometry;
        // 64 MiB + 1 GiB: the log is 1/64 of both, (16384 + 262144) / 64 = 4352 blocks.
        assert_eq!((g.log_blocks, g.data_start), (4352, 4355));
        assert_eq!((g.node_blocks, g.data_base), (16384 - 4355, 256));
        assert_eq!(g.data_member_blocks, 262_144);
        assert_eq!(g.total_blocks, 16384 + 262_144 - 256);
        let b = s.encode();
        assert_eq!(&b[24..32], &1u64.to_le_bytes());
        assert_eq!(&b[180..188], &(16384u64 - 4355).to_le_bytes());
        assert_eq!(&b[188..196], &256u64.to_le_bytes());
        assert_eq!(&b[196..204], &262_144u64.to_le_bytes());
        assert!(b[204..OFF_CRC].iter().all(|&x| x == 0));
        assert_eq!(Superblock::decode(&b).unwrap(), s);
        let reseal = |b: &mut Vec<u8>| {
            let crc = crc32c::crc32c(&b[..OFF_CRC]);
            put_u32_le(b, OFF_CRC, crc);
        };
        let mut no_bit = b.clone();
        put_u64_le(&mut no_bit, OFF_FEATURES, 0);
        reseal(&mut no_bit);
        // Without the bit the fields are not read: a single volume whose regions are fine.
        assert!(!Superblock::decode(&no_bit).unwrap().geometry.is_split());
        let mut no_nodes = b.clone();
        put_u64_le(&mut no_nodes, OFF_NODE_BLOCKS, 0);
        reseal(&mut no_nodes);
        assert!(matches!(
            Superblock::decode(&no_nodes),
            Err(SuperblockError::BadGeometry(_))
        ));
        let mut bad_size = b.clone();
        put_u64_le(&mut bad_size, OFF_DATA_MEMBER_BLOCKS, 262_143);
        reseal(&mut bad_size);
        assert!(Superblock::decode(&bad_size).is_err());
        let mut unknown = b;
        put_u64_le(&mut unknown, OFF_FEATURES, FEATURE_SPLIT | 1 << 7);
        reseal(&mut unknown);
        assert_eq!(
            Superblock::decode(&unknown),
            Err(SuperblockError::UnknownFeatures(1 << 7))
        );
    }

    /// Data-member offsets at the boundary between the members, both ways; a single volume
    /// maps by the identity.
    #[test]
    fn storage_offsets_at_the_member_boundary() {
        let g = split_sb().geometry;
        let bs = BLOCK_SIZE as u64;
        let split = g.data_split();
        assert_eq!(split, g.data_start + g.node_blocks);
        assert_eq!(g.node_area(), (g.data_start, split));
        assert_eq!(g.file_area(), (split, g.total_blocks));
        assert_eq!(g.storage_offset(split), Some(256 * bs));
        assert_eq!(g.storage_offset(split + 1), Some(257 * bs));
        assert_eq!(g.storage_offset(split - 1), None, "a node-area block");
        assert_eq!(g.storage_offset(g.total_blocks), None);
        assert_eq!(
            g.storage_offset(g.total_blocks - 1),
            Some((g.data_member_blocks - 1) * bs)
        );
        assert_eq!(g.block_at_storage(256 * bs), Some(split));
        assert_eq!(g.block_at_storage(257 * bs + 5), Some(split + 1));
        assert_eq!(g.block_at_storage(255 * bs), None, "the label blocks");
        assert_eq!(g.block_at_storage(g.data_member_blocks * bs), None);
        for b in [split, split + 7, g.total_blocks - 1] {
            assert_eq!(g.block_at_storage(g.storage_offset(b).unwrap()), Some(b));
        }
        let one = sb().geometry;
        assert_eq!(one.storage_offset(12_345), Some(12_345 * bs));
        assert_eq!(one.block_at_storage(12_345 * bs), Some(12_345));
        assert!(matches!(
            Geometry::for_split(8 << 20, 1 << 30),
            Err(SuperblockError::TooSmall(..))
        ));
        assert!(matches!(
            Geometry::for_split(64 << 20, 1 << 20),
            Err(SuperblockError::TooSmall(..))
        ));
    }

    fn striped_sb() -> Superblock {
        Superblock {
            features: FEATURE_SPLIT | FEATURE_STRIPE,
            geometry: Geometry::for_stripe(64 << 20, &[(32 << 20) + 12345, 40 << 20], 64).unwrap(),
            ..sb()
        }
    }

    /// A striped set's superblock: both feature bits, the split fields and the member count
    /// and stripe unit after them, pinned; each member uses the smallest one's whole units.
    #[test]
    fn striped_set_bytes_are_pinned() {
        let s = striped_sb();
        let g = s.geometry;
        // The smallest member: 8195 blocks, 256 of them the label's, 7939 past it: 124 units
        // of 64 blocks.
        assert_eq!((g.data_members, g.stripe_unit), (2, 64));
        assert_eq!(g.data_member_blocks, 256 + 124 * 64);
        assert_eq!(g.total_blocks, 16384 + 2 * 124 * 64);
        assert_eq!(
            g.log_blocks, LOG_MIN_BLOCKS,
            "(16384 + 8195 + 10240) / 64 is less"
        );
        let b = s.encode();
        assert_eq!(&b[24..32], &3u64.to_le_bytes());
        assert_eq!(&b[196..204], &(256u64 + 124 * 64).to_le_bytes());
        assert_eq!(&b[204..212], &2u64.to_le_bytes());
        assert_eq!(&b[212..220], &64u64.to_le_bytes());
        assert!(b[220..OFF_CRC].iter().all(|&x| x == 0));
        assert_eq!(Superblock::decode(&b).unwrap(), s);
        // One data member is the split volume, byte for byte, whatever the unit.
        assert_eq!(
            Geometry::for_stripe(64 << 20, &[1 << 30], 64).unwrap(),
            Geometry::for_split(64 << 20, 1 << 30).unwrap()
        );
        let reseal = |b: &mut Vec<u8>| {
            let crc = crc32c::crc32c(&b[..OFF_CRC]);
            put_u32_le(b, OFF_CRC, crc);
        };
        for (off, v) in [
            (OFF_DATA_MEMBERS, 1),
            (OFF_DATA_MEMBERS, 3),
            (OFF_STRIPE_UNIT, 0),
            (OFF_STRIPE_UNIT, 48),
            (OFF_FEATURES, FEATURE_STRIPE),
        ] {
            let mut bad = b.clone();
            put_u64_le(&mut bad, off, v);
            reseal(&mut bad);
            assert!(
                matches!(
                    Superblock::decode(&bad),
                    Err(SuperblockError::BadGeometry(_))
                ),
                "{off} = {v}"
            );
        }
        // A member label of the set: index, count and unit; member 0 of a split volume's
        // is the one data member's.
        let l = s.member_label(1);
        assert_eq!((l.index, l.count, l.stripe_unit), (1, 2, 64));
        assert_eq!(l.blocks, g.data_member_blocks);
        assert_eq!(
            split_sb().member_label(0),
            crate::MemberLabel::data(s.uuid, 262_144, 256)
        );
        assert!(matches!(
            Geometry::for_stripe(64 << 20, &[1 << 30, 1 << 20], 256),
            Err(SuperblockError::TooSmall(..))
        ));
        assert!(Geometry::for_stripe(64 << 20, &[], 256).is_err());
        assert!(Geometry::for_stripe(64 << 20, &[1 << 30, 1 << 30], 0).is_err());
    }

    /// Storage offsets of a striped set are logical data offsets; each block lands on the
    /// member and the member block the stripe says, past the member's label.
    #[test]
    fn striped_blocks_map_to_members_both_ways() {
        let g = striped_sb().geometry;
        let (bs, split, base) = (BLOCK_SIZE as u64, g.data_split(), g.data_base);
        assert_eq!(g.file_area(), (split, g.total_blocks));
        assert_eq!(g.storage_offset(split), Some(0));
        assert_eq!(g.storage_offset(split + 64), Some(64 * bs));
        assert_eq!(g.storage_offset(split - 1), None);
        assert_eq!(g.storage_offset(g.total_blocks), None);
        assert_eq!(g.block_at_storage(0), Some(split));
        assert_eq!(g.block_at_storage((g.total_blocks - split) * bs), None);
        assert_eq!(g.member_block(split), Some((0, base)));
        assert_eq!(g.member_block(split + 63), Some((0, base + 63)));
        assert_eq!(g.member_block(split + 64), Some((1, base)), "the next unit");
        assert_eq!(
            g.member_block(split + 128),
            Some((0, base + 64)),
            "the next row"
        );
        let last = g.total_blocks - 1;
        assert_eq!(g.member_block(last), Some((1, g.data_member_blocks - 1)));
        assert_eq!(g.member_block(g.total_blocks), None);
        assert_eq!(g.block_of_member(0, base - 1), None, "a label block");
        assert_eq!(g.block_of_member(1, g.data_member_blocks), None);
        assert_eq!(g.block_of_member(2, base), None);
        for b in [split, split + 63, split + 64, split + 1000, last] {
            let (m, mb) = g.member_block(b).unwrap();
            assert_eq!(g.block_of_member(m, mb), Some(b));
            assert_eq!(g.block_at_storage(g.storage_offset(b).unwrap()), Some(b));
        }
        // One data member: member 0, at the storage offset.
        let one = split_sb().geometry;
        let b = one.data_split() + 77;
        assert_eq!(
            one.member_block(b),
            Some((0, one.storage_offset(b).unwrap() / bs))
        );
        assert_eq!(sb().geometry.member_block(5000), None, "a single volume");
    }
}
