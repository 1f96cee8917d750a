//! The pNFS block layout's wire bodies (RFC 5663 §2) and the constants of docs/design.md §5.
//!
//! Wire formats (XDR, big-endian, 4-byte units):
//! ```text
//! pnfs_block_extent4 (44 bytes)     deviceid[16] | file_offset u64 | length u64
//!                                   | storage_offset u64 | state u32
//! pnfs_block_layout4 (LAYOUTGET)    count u32 | extent4 × count
//! pnfs_block_layoutupdate4 (COMMIT) count u32 | extent4 × count        (same encoding)
//! pnfs_block_deviceaddr4 (GETDEVICEINFO, one SIMPLE volume):
//!     count u32 = 1 | type u32 = SIMPLE (0)
//!     | sig count u32 = 1 | sig offset i64 = 32 | sig bytes opaque<> = volume UUID (16)
//! ```
//! All offsets and lengths are bytes, block-aligned; `storage_offset` is the byte offset on
//! the volume (NONE_DATA extents carry 0). The device id is the volume UUID itself, so it is
//! stable across restarts and needs no table.
//!
//! Pure encode/decode: no I/O, no NFS state.

use bytecodec::{Reader, Writer};
use thiserror::Error;

/// `layouttype4` (RFC 8881 §3.3.13, RFC 5663, RFC 8154). A newtype, so that any value a
/// client sends decodes (and is refused as UNKNOWN_LAYOUTTYPE by the server).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LayoutType(pub u32);

impl LayoutType {
    pub const FILES: LayoutType = LayoutType(1);
    pub const OSD2: LayoutType = LayoutType(2);
    pub const BLOCK_VOLUME: LayoutType = LayoutType(3);
    pub const FLEX_FILES: LayoutType = LayoutType(4);
    pub const SCSI: LayoutType = LayoutType(5);
}

/// `layoutiomode4` (RFC 8881 §3.3.20). A newtype, so that any value decodes (and is refused
/// by `policy::check_get` / LAYOUTRETURN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IoMode(pub u32);

impl IoMode {
    pub const READ: IoMode = IoMode(1);
    pub const RW: IoMode = IoMode(2);
    pub const ANY: IoMode = IoMode(3);
}

/// `pnfs_block_volume_type4` (RFC 5663 §2.2.1, RFC 8154 §2.3.1).
pub mod volume_type {
    pub const SIMPLE: u32 = 0;
    pub const SLICE: u32 = 1;
    pub const CONCAT: u32 = 2;
    pub const STRIPE: u32 = 3;
    pub const SCSI: u32 = 4;
}

/// `pnfs_block_extent_state4` (RFC 5663 §2.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExtentState(pub u32);

impl ExtentState {
    /// Written blocks the client may read and overwrite.
    pub const READ_WRITE_DATA: ExtentState = ExtentState(0);
    /// Written blocks, read only.
    pub const READ_DATA: ExtentState = ExtentState(1);
    /// Allocated, not yet written: reads as zeros until LAYOUTCOMMIT.
    pub const INVALID_DATA: ExtentState = ExtentState(2);
    /// No storage (hole, unwritten in a READ layout, past EOF): reads as zeros.
    pub const NONE_DATA: ExtentState = ExtentState(3);
}

/// Size of one `pnfs_block_extent4` on the wire.
pub const EXTENT_WIRE_SIZE: usize = 44;
/// Size of the one-SIMPLE-volume `pnfs_block_deviceaddr4` with a 16-byte signature.
pub const SIMPLE_DEVICEADDR_SIZE: usize = 4 + 4 + 4 + 8 + 4 + 16;

const _: () = assert!(EXTENT_WIRE_SIZE == 16 + 8 + 8 + 8 + 4);
const _: () = assert!(SIMPLE_DEVICEADDR_SIZE == 40);

/// `pnfs_block_extent4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockExtent {
    pub deviceid: [u8; 16],
    pub file_offset: u64,
    pub length: u64,
    pub storage_offset: u64,
    pub state: ExtentState,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BodyError {
    #[error("body truncated")]
    Short,
    #[error("trailing bytes after the body")]
    Trailing,
    #[error("extent count {0} does not fit the body")]
    Count(u32),
}

impl From<bytecodec::Error> for BodyError {
    fn from(e: bytecodec::Error) -> BodyError {
        match e {
            bytecodec::Error::Short { .. } => BodyError::Short,
            bytecodec::Error::Trailing { .. } => BodyError::Trailing,
        }
    }
}

impl BlockExtent {
    pub fn encode(&self, out: &mut Vec<u8>) {
        Writer::new(out)
            .bytes(&self.deviceid)
            .u64_be(self.file_offset)
            .u64_be(self.length)
            .u64_be(self.storage_offset)
            .u32_be(self.state.0);
    }

    fn decode(r: &mut Reader<'_>) -> Result<BlockExtent, BodyError> {
        Ok(BlockExtent {
            deviceid: r.array::<16>()?,
            file_offset: r.u64_be()?,
            length: r.u64_be()?,
            storage_offset: r.u64_be()?,
            state: ExtentState(r.u32_be()?),
        })
    }

    /// A `pnfs_block_layout4` (or `_layoutupdate4`) body: count + extents.
    pub fn encode_list(list: &[BlockExtent]) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + list.len() * EXTENT_WIRE_SIZE);
        Writer::new(&mut out).u32_be(list.len() as u32);
        for e in list {
            e.encode(&mut out);
        }
        out
    }

    /// Decodes a whole body; a count the bytes cannot hold or trailing bytes are errors (the
    /// count is checked before anything is allocated, so a forged count costs nothing).
    pub fn decode_list(body: &[u8]) -> Result<Vec<BlockExtent>, BodyError> {
        let mut r = Reader::new(body);
        let n = r.u32_be()?;
        if (n as usize).saturating_mul(EXTENT_WIRE_SIZE) != r.remaining() {
            return Err(
                if (n as usize).saturating_mul(EXTENT_WIRE_SIZE) > r.remaining() {
                    BodyError::Count(n)
                } else {
                    BodyError::Trailing
                },
            );
        }
        (0..n).map(|_| BlockExtent::decode(&mut r)).collect()
    }

    /// Bytes of a body holding `n` extents.
    pub const fn list_size(n: usize) -> usize {
        4 + n * EXTENT_WIRE_SIZE
    }
}

/// The device id of the volume: its UUID (stable across restarts, unique per volume).
pub fn device_id(volume_uuid: [u8; 16]) -> [u8; 16] {
    volume_uuid
}

/// `pnfs_block_deviceaddr4` with one SIMPLE volume whose signature is `bytes` at byte
/// `offset` of the device (RFC 5663 §2.2.1; Linux blkmapd compares exactly these bytes).
pub fn simple_deviceaddr(offset: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SIMPLE_DEVICEADDR_SIZE);
    Writer::new(&mut out)
        .u32_be(1)
        .u32_be(volume_type::SIMPLE)
        .u32_be(1)
        .u64_be(offset)
        .u32_be(bytes.len() as u32)
        .bytes(bytes)
        .zeros((4 - bytes.len() % 4) % 4);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(fo: u64, st: ExtentState) -> BlockExtent {
        BlockExtent {
            deviceid: [9; 16],
            file_offset: fo,
            length: 8192,
            storage_offset: 1 << 20,
            state: st,
        }
    }

    #[test]
    fn extent_list_round_trips_at_44_bytes_each() {
        let l = [
            ext(0, ExtentState::INVALID_DATA),
            ext(8192, ExtentState::NONE_DATA),
        ];
        let b = BlockExtent::encode_list(&l);
        assert_eq!(b.len(), BlockExtent::list_size(2));
        assert_eq!(b.len(), 4 + 88);
        assert_eq!(&b[..4], &[0, 0, 0, 2]);
        // deviceid first, then file offset big-endian.
        assert_eq!(&b[4..20], &[9; 16]);
        assert_eq!(&b[20..28], &0u64.to_be_bytes());
        assert_eq!(&b[44..48], &2u32.to_be_bytes());
        assert_eq!(BlockExtent::decode_list(&b).unwrap(), l.to_vec());
    }

    #[test]
    fn bad_bodies_are_refused() {
        let b = BlockExtent::encode_list(&[ext(0, ExtentState::READ_WRITE_DATA)]);
        assert_eq!(
            BlockExtent::decode_list(&b[..b.len() - 1]),
            Err(BodyError::Count(1))
        );
        let mut t = b.clone();
        t.extend_from_slice(&[0; 4]);
        assert_eq!(BlockExtent::decode_list(&t), Err(BodyError::Trailing));
        assert_eq!(BlockExtent::decode_list(&[]), Err(BodyError::Short));
        // A forged count far beyond the body.
        assert_eq!(
            BlockExtent::decode_list(&u32::MAX.to_be_bytes()),
            Err(BodyError::Count(u32::MAX))
        );
        assert_eq!(BlockExtent::decode_list(&0u32.to_be_bytes()), Ok(vec![]));
    }

    #[test]
    fn simple_deviceaddr_has_the_signature_at_its_offset() {
        let uuid = [0xab; 16];
        let b = simple_deviceaddr(32, &uuid);
        assert_eq!(b.len(), SIMPLE_DEVICEADDR_SIZE);
        let mut r = Reader::new(&b);
        assert_eq!(r.u32_be(), Ok(1));
        assert_eq!(r.u32_be(), Ok(volume_type::SIMPLE));
        assert_eq!(r.u32_be(), Ok(1));
        assert_eq!(r.u64_be(), Ok(32));
        assert_eq!(r.u32_be(), Ok(16));
        assert_eq!(r.array::<16>(), Ok(uuid));
        assert_eq!(r.finish(), Ok(()));
        // Padding of an odd-length signature to 4 bytes.
        assert_eq!(simple_deviceaddr(0, &[1, 2, 3]).len(), 4 * 5 + 4 + 4);
    }
}
