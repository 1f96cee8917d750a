//! The store's checkpoint format (docs/design.md, house rule 4; the B+tree node format is in btree.rs, the
//! records in keys.rs). Little-endian, explicit widths.
//!
//! ```text
//! geometry meta area = 2 blocks: checkpoint slot 0 | checkpoint slot 1     (written alternately)
//! checkpoint (first 512-byte sector of its block, so a torn write is all or nothing):
//!   0 magic "PNCK" | 4 version 1 | 8 seq | 16 csn covered | 24 root block | 32 root level
//!   33 has root | 40 next inode number | 48 inodes | 56 tree nodes
//!   64 free-space list (BlobRef) | 88 client records (BlobRef) | 508 CRC32C (seeded with slot)
//! BlobRef: first block u64 | blocks u32 | bytes u32 | CRC32C u32 (of the bytes) | pad u32
//! blob block: next block u64 (0: the last) | up to 4088 bytes of the blob (a chain, so a blob
//! needs no contiguous space on a fragmented volume)
//! free-space list blob: (start u64, len u64)* — the free extents as of the checkpoint
//! client records blob: count u32, then (key_len u32, key, value_len u32, value)*
//! ```
//! Blobs and tree nodes are blocks allocated from free space; the list of a checkpoint counts
//! its own blobs and nodes as used. Mount reads one checkpoint, its two blobs and nothing else
//!; the tree is read through the cache as it is used.

use bytecodec::{get_u32_le, get_u64_le, put_u32_le, put_u64_le, Reader, Writer};

use super::btree::Root;
use super::types::BLOCK;

const MAGIC: u32 = 0x4b43_4e50; // "PNCK"
const VERSION: u32 = 1;
pub const CHECKPOINT_BYTES: usize = 512;

// The checkpoint's fields, at the offsets the module comment gives.
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 4;
const OFF_SEQ: usize = 8;
const OFF_CSN: usize = 16;
const OFF_ROOT_BLOCK: usize = 24;
const OFF_ROOT_LEVEL: usize = 32;
const OFF_HAS_ROOT: usize = 33;
const OFF_NEXT_INO: usize = 40;
const OFF_FILES: usize = 48;
const OFF_NODES: usize = 56;
const OFF_FREE: usize = 64;
const OFF_CLIENTS: usize = 88;
const OFF_CRC: usize = 508;

/// A `BlobRef` on disk: start u64, blocks u32, bytes u32, CRC32C u32, pad u32.
const BLOB_REF_BYTES: usize = 24;

const _: () = assert!(OFF_FREE + BLOB_REF_BYTES == OFF_CLIENTS);
const _: () = assert!(OFF_CLIENTS + BLOB_REF_BYTES <= OFF_CRC);
// The CRC is the sector's last word, and the sector fits in the slot's block.
const _: () = assert!(OFF_CRC + 4 == CHECKPOINT_BYTES);
const _: () = assert!(CHECKPOINT_BYTES <= BLOCK as usize);

/// Where a blob lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlobRef {
    pub start: u64,
    pub blocks: u32,
    pub bytes: u32,
    pub crc: u32,
}

impl BlobRef {
    /// Writes the reference at byte `off` of `b` (a checkpoint block; its pad stays zero).
    fn put(&self, b: &mut [u8], off: usize) {
        put_u64_le(b, off, self.start);
        put_u32_le(b, off + 8, self.blocks);
        put_u32_le(b, off + 12, self.bytes);
        put_u32_le(b, off + 16, self.crc);
    }

    fn get(b: &[u8], off: usize) -> Result<BlobRef, bytecodec::Error> {
        Ok(BlobRef {
            start: get_u64_le(b, off)?,
            blocks: get_u32_le(b, off + 8)?,
            bytes: get_u32_le(b, off + 12)?,
            crc: get_u32_le(b, off + 16)?,
        })
    }
}

/// A blob block's next-block pointer, then its payload.
const BLOB_NEXT_BYTES: usize = 8;
/// Bytes of a blob per block (after the next-block pointer).
pub const BLOB_PAYLOAD: usize = BLOCK as usize - BLOB_NEXT_BYTES;

/// The blocks of a blob chain over `blocks`, holding `bytes`.
pub fn encode_blob(bytes: &[u8], blocks: &[u64]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(blocks.len());
    let mut chunks = bytes.chunks(BLOB_PAYLOAD);
    for (i, _) in blocks.iter().enumerate() {
        let mut b = vec![0u8; BLOCK as usize];
        let next = blocks.get(i + 1).copied().unwrap_or(0);
        put_u64_le(&mut b, 0, next);
        if let Some(c) = chunks.next() {
            bytecodec::put_bytes(&mut b, BLOB_NEXT_BYTES, c);
        }
        out.push(b);
    }
    out
}

/// One checkpoint: what the tree on disk covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Checkpoint {
    pub seq: u64,
    /// Every commit up to this CSN is in the tree (writeback.rs).
    pub csn: u64,
    pub root: Option<Root>,
    pub next_ino: u64,
    pub files: u64,
    pub nodes: u64,
    pub free: BlobRef,
    pub clients: BlobRef,
}

impl Checkpoint {
    /// One full block for slot `slot`.
    pub fn encode(&self, slot: u64) -> Vec<u8> {
        let mut b = vec![0u8; BLOCK as usize];
        put_u32_le(&mut b, OFF_MAGIC, MAGIC);
        put_u32_le(&mut b, OFF_VERSION, VERSION);
        put_u64_le(&mut b, OFF_SEQ, self.seq);
        put_u64_le(&mut b, OFF_CSN, self.csn);
        if let Some(r) = self.root {
            put_u64_le(&mut b, OFF_ROOT_BLOCK, r.block);
            b[OFF_ROOT_LEVEL] = r.level;
            b[OFF_HAS_ROOT] = 1;
        }
        put_u64_le(&mut b, OFF_NEXT_INO, self.next_ino);
        put_u64_le(&mut b, OFF_FILES, self.files);
        put_u64_le(&mut b, OFF_NODES, self.nodes);
        self.free.put(&mut b, OFF_FREE);
        self.clients.put(&mut b, OFF_CLIENTS);
        let crc = slot_crc(slot, &b[..OFF_CRC]);
        put_u32_le(&mut b, OFF_CRC, crc);
        b
    }

    /// `None` for a slot that was never written, is torn, or belongs to another slot.
    pub fn decode(slot: u64, b: &[u8]) -> Option<Checkpoint> {
        let b = b.get(..CHECKPOINT_BYTES)?;
        if get_u32_le(b, OFF_MAGIC).ok()? != MAGIC || get_u32_le(b, OFF_VERSION).ok()? != VERSION {
            return None;
        }
        if slot_crc(slot, &b[..OFF_CRC]) != get_u32_le(b, OFF_CRC).ok()? {
            return None;
        }
        let root = match b[OFF_HAS_ROOT] {
            1 => Some(Root {
                block: get_u64_le(b, OFF_ROOT_BLOCK).ok()?,
                level: b[OFF_ROOT_LEVEL],
            }),
            _ => None,
        };
        Some(Checkpoint {
            seq: get_u64_le(b, OFF_SEQ).ok()?,
            csn: get_u64_le(b, OFF_CSN).ok()?,
            root,
            next_ino: get_u64_le(b, OFF_NEXT_INO).ok()?,
            files: get_u64_le(b, OFF_FILES).ok()?,
            nodes: get_u64_le(b, OFF_NODES).ok()?,
            free: BlobRef::get(b, OFF_FREE).ok()?,
            clients: BlobRef::get(b, OFF_CLIENTS).ok()?,
        })
    }
}

#[cfg(feature = "fuzzing")]
/// Give an edited checkpoint block the CRC of `slot` (the fuzz harness: fuzzing.rs).
pub fn seal_checkpoint(slot: u64, b: &mut [u8]) {
    if b.len() >= CHECKPOINT_BYTES {
        let crc = slot_crc(slot, &b[..OFF_CRC]);
        put_u32_le(b, OFF_CRC, crc);
    }
}

fn slot_crc(slot: u64, b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&slot.to_le_bytes()), b)
}

/// An extent whose numbers cannot overflow block arithmetic (a disk may say anything).
pub fn extent_ok(file_block: u64, phys_block: u64, len: u64) -> bool {
    const LIMIT: u64 = 1 << 62;
    len > 0 && file_block < LIMIT && phys_block < LIMIT && len < LIMIT
}

/// The next-block pointer of a blob block; 0 (the last) for one too short to hold it, which
/// ends the chain where its readers check the length they were promised.
pub fn blob_next(b: &[u8]) -> u64 {
    get_u64_le(b, 0).unwrap_or(0)
}

/// A free extent in the free-space list: start u64, len u64.
const FREE_EXTENT_BYTES: usize = 16;

pub fn encode_free_list(ext: impl Iterator<Item = (u64, u64)>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = Writer::new(&mut out);
    for (s, l) in ext {
        w.u64_le(s).u64_le(l);
    }
    out
}

pub fn decode_free_list(b: &[u8]) -> Result<Vec<(u64, u64)>, String> {
    if !b.len().is_multiple_of(FREE_EXTENT_BYTES) {
        return Err("free-space list: bad length".into());
    }
    let bad = |e: bytecodec::Error| format!("free-space list: {e}");
    let mut r = Reader::new(b);
    let mut out = Vec::with_capacity(b.len() / FREE_EXTENT_BYTES);
    for _ in 0..b.len() / FREE_EXTENT_BYTES {
        let start = r.u64_le().map_err(bad)?;
        out.push((start, r.u64_le().map_err(bad)?));
    }
    Ok(out)
}

/// (key, value) pairs of the client records.
pub type ClientRecords = Vec<(Vec<u8>, Vec<u8>)>;

pub fn encode_clients<'a>(recs: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>) -> Vec<u8> {
    let recs: Vec<_> = recs.collect();
    let mut out = Vec::new();
    let mut w = Writer::new(&mut out);
    w.u32_le(recs.len() as u32);
    for (k, v) in recs {
        w.u32_le(k.len() as u32).bytes(k);
        w.u32_le(v.len() as u32).bytes(v);
    }
    out
}

/// Bytes after the last of the `count` records are ignored.
pub fn decode_clients(b: &[u8]) -> Result<ClientRecords, String> {
    if b.is_empty() {
        return Ok(Vec::new());
    }
    let truncated = |_: bytecodec::Error| String::from("client records truncated");
    let mut r = Reader::new(b);
    let n = r.u32_le().map_err(truncated)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let kl = r.u32_le().map_err(truncated)? as usize;
        let k = r.bytes(kl).map_err(truncated)?.to_vec();
        let vl = r.u32_le().map_err(truncated)? as usize;
        let v = r.bytes(vl).map_err(truncated)?.to_vec();
        out.push((k, v));
    }
    Ok(out)
}

/// Write-back state (writeback.rs): the checkpoint on disk and what its blobs take;
/// serialized by its own mutex (taken before the state lock).
pub struct Wb {
    /// The checkpoint on disk, and the blocks of its two blobs (freed by the next one).
    pub ck: Checkpoint,
    pub free_blocks: Vec<u64>,
    pub clients_blocks: Vec<u64>,
    /// Counters: write-backs done, tree nodes written.
    pub runs: u64,
    pub objects_written: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trip_and_slot_binding() {
        let c = Checkpoint {
            seq: 7,
            csn: 99,
            root: Some(Root {
                block: 1234,
                level: 2,
            }),
            next_ino: 50,
            files: 40,
            nodes: 9,
            free: BlobRef {
                start: 10,
                blocks: 1,
                bytes: 32,
                crc: 5,
            },
            clients: BlobRef::default(),
        };
        let b = c.encode(1);
        assert_eq!(Checkpoint::decode(1, &b), Some(c));
        assert_eq!(Checkpoint::decode(0, &b), None, "moved to the other slot");
        let mut torn = b.clone();
        torn[20] ^= 1;
        assert_eq!(Checkpoint::decode(1, &torn), None);
        assert_eq!(Checkpoint::decode(0, &vec![0u8; 4096]), None);
    }

    /// The bytes of a checkpoint on disk, pinned: a change of encoding fails here before it
    /// fails to mount an existing volume.
    #[test]
    fn checkpoint_bytes_are_pinned() {
        let c = Checkpoint {
            seq: 0x0102_0304_0506_0708,
            csn: 0x11,
            root: Some(Root {
                block: 0x2233,
                level: 3,
            }),
            next_ino: 0x44,
            files: 0x55,
            nodes: 0x66,
            free: BlobRef {
                start: 0x77,
                blocks: 0x88,
                bytes: 0x99,
                crc: 0xaabb_ccdd,
            },
            clients: BlobRef {
                start: 0xee,
                blocks: 1,
                bytes: 2,
                crc: 3,
            },
        };
        let b = c.encode(1);
        assert_eq!(b.len(), BLOCK as usize);
        let mut want = [0u8; 112];
        want[..8].copy_from_slice(b"PNCK\x01\0\0\0");
        want[8..16].copy_from_slice(&[8, 7, 6, 5, 4, 3, 2, 1]);
        want[16] = 0x11;
        want[24..26].copy_from_slice(&[0x33, 0x22]);
        want[32..34].copy_from_slice(&[3, 1]);
        want[40] = 0x44;
        want[48] = 0x55;
        want[56] = 0x66;
        want[64] = 0x77;
        want[72] = 0x88;
        want[76] = 0x99;
        want[80..84].copy_from_slice(&[0xdd, 0xcc, 0xbb, 0xaa]);
        want[88] = 0xee;
        want[96] = 1;
        want[100] = 2;
        want[104] = 3;
        assert_eq!(&b[..112], &want[..]);
        assert!(b[112..OFF_CRC].iter().all(|&x| x == 0));
        let crc = crc32c::crc32c_append(crc32c::crc32c(&1u64.to_le_bytes()), &b[..OFF_CRC]);
        assert_eq!(&b[OFF_CRC..CHECKPOINT_BYTES], &crc.to_le_bytes());
        assert!(b[CHECKPOINT_BYTES..].iter().all(|&x| x == 0));
        assert_eq!(Checkpoint::decode(1, &b), Some(c));
        assert_eq!(Checkpoint::decode(1, &b[..CHECKPOINT_BYTES - 1]), None);
        // The blobs: a blob block, the free-space list and the client records.
        let blob = encode_blob(b"ab", &[9, 12]);
        assert_eq!(&blob[0][..10], &[12, 0, 0, 0, 0, 0, 0, 0, b'a', b'b']);
        assert_eq!(&blob[1][..8], &[0u8; 8]);
        assert_eq!((blob_next(&blob[0]), blob_next(&blob[1])), (12, 0));
        assert_eq!(
            encode_free_list([(1u64, 0x0203u64)].into_iter()),
            [1, 0, 0, 0, 0, 0, 0, 0, 3, 2, 0, 0, 0, 0, 0, 0]
        );
        let (k, v) = (b"k".to_vec(), b"vw".to_vec());
        assert_eq!(
            encode_clients([(&k, &v)].into_iter()),
            [1, 0, 0, 0, 1, 0, 0, 0, b'k', 2, 0, 0, 0, b'v', b'w']
        );
    }

    #[test]
    fn blobs_round_trip() {
        let l = vec![(5, 6), (100, 1 << 40)];
        assert_eq!(
            decode_free_list(&encode_free_list(l.clone().into_iter())).unwrap(),
            l
        );
        let k = [b"k".to_vec()];
        let v = [b"value".to_vec()];
        let b = encode_clients(k.iter().zip(v.iter()));
        assert_eq!(
            decode_clients(&b).unwrap(),
            vec![(k[0].clone(), v[0].clone())]
        );
        assert!(decode_clients(&b[..b.len() - 1]).is_err());
    }
}
