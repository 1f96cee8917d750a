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

use super::btree::Root;
use super::types::BLOCK;

const MAGIC: u32 = 0x4b43_4e50; // "PNCK"
const VERSION: u32 = 1;
const OFF_CRC: usize = 508;
pub const CHECKPOINT_BYTES: usize = 512;

/// Where a blob lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlobRef {
    pub start: u64,
    pub blocks: u32,
    pub bytes: u32,
    pub crc: u32,
}

impl BlobRef {
    fn put(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.start.to_le_bytes());
        b[8..12].copy_from_slice(&self.blocks.to_le_bytes());
        b[12..16].copy_from_slice(&self.bytes.to_le_bytes());
        b[16..20].copy_from_slice(&self.crc.to_le_bytes());
    }
    fn get(b: &[u8]) -> BlobRef {
        BlobRef {
            start: u64le(b, 0),
            blocks: u32le(b, 8),
            bytes: u32le(b, 12),
            crc: u32le(b, 16),
        }
    }
}

/// Bytes of a blob per block (after the next-block pointer).
pub const BLOB_PAYLOAD: usize = BLOCK as usize - 8;

/// The blocks of a blob chain over `blocks`, holding `bytes`.
pub fn encode_blob(bytes: &[u8], blocks: &[u64]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(blocks.len());
    let mut chunks = bytes.chunks(BLOB_PAYLOAD);
    for (i, _) in blocks.iter().enumerate() {
        let mut b = vec![0u8; BLOCK as usize];
        let next = blocks.get(i + 1).copied().unwrap_or(0);
        b[0..8].copy_from_slice(&next.to_le_bytes());
        if let Some(c) = chunks.next() {
            b[8..8 + c.len()].copy_from_slice(c);
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
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.seq.to_le_bytes());
        b[16..24].copy_from_slice(&self.csn.to_le_bytes());
        if let Some(r) = self.root {
            b[24..32].copy_from_slice(&r.block.to_le_bytes());
            b[32] = r.level;
            b[33] = 1;
        }
        b[40..48].copy_from_slice(&self.next_ino.to_le_bytes());
        b[48..56].copy_from_slice(&self.files.to_le_bytes());
        b[56..64].copy_from_slice(&self.nodes.to_le_bytes());
        self.free.put(&mut b[64..88]);
        self.clients.put(&mut b[88..112]);
        let crc = slot_crc(slot, &b[..OFF_CRC]);
        b[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `None` for a slot that was never written, is torn, or belongs to another slot.
    pub fn decode(slot: u64, b: &[u8]) -> Option<Checkpoint> {
        if b.len() < CHECKPOINT_BYTES || u32le(b, 0) != MAGIC || u32le(b, 4) != VERSION {
            return None;
        }
        if slot_crc(slot, &b[..OFF_CRC]) != u32le(b, OFF_CRC) {
            return None;
        }
        Some(Checkpoint {
            seq: u64le(b, 8),
            csn: u64le(b, 16),
            root: (b[33] == 1).then(|| Root {
                block: u64le(b, 24),
                level: b[32],
            }),
            next_ino: u64le(b, 40),
            files: u64le(b, 48),
            nodes: u64le(b, 56),
            free: BlobRef::get(&b[64..88]),
            clients: BlobRef::get(&b[88..112]),
        })
    }
}

#[cfg(feature = "fuzzing")]
/// Give an edited checkpoint block the CRC of `slot` (the fuzz harness: store/fuzzing.rs).
pub fn seal_checkpoint(slot: u64, b: &mut [u8]) {
    if b.len() >= CHECKPOINT_BYTES {
        let crc = slot_crc(slot, &b[..OFF_CRC]);
        b[OFF_CRC..OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

fn slot_crc(slot: u64, b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&slot.to_le_bytes()), b)
}

fn u32le(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}
fn u64le(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

/// An extent whose numbers cannot overflow block arithmetic (a disk may say anything).
pub fn extent_ok(file_block: u64, phys_block: u64, len: u64) -> bool {
    const LIMIT: u64 = 1 << 62;
    len > 0 && file_block < LIMIT && phys_block < LIMIT && len < LIMIT
}

/// The next-block pointer of a blob block.
pub fn blob_next(b: &[u8]) -> u64 {
    u64le(b, 0)
}

pub fn encode_free_list(ext: impl Iterator<Item = (u64, u64)>) -> Vec<u8> {
    let mut w = Vec::new();
    for (s, l) in ext {
        w.extend_from_slice(&s.to_le_bytes());
        w.extend_from_slice(&l.to_le_bytes());
    }
    w
}

pub fn decode_free_list(b: &[u8]) -> Result<Vec<(u64, u64)>, String> {
    if !b.len().is_multiple_of(16) {
        return Err("free-space list: bad length".into());
    }
    Ok(b.chunks(16).map(|c| (u64le(c, 0), u64le(c, 8))).collect())
}

/// (key, value) pairs of the client records.
pub type ClientRecords = Vec<(Vec<u8>, Vec<u8>)>;

pub fn encode_clients<'a>(recs: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>) -> Vec<u8> {
    let recs: Vec<_> = recs.collect();
    let mut w = Vec::new();
    w.extend_from_slice(&(recs.len() as u32).to_le_bytes());
    for (k, v) in recs {
        w.extend_from_slice(&(k.len() as u32).to_le_bytes());
        w.extend_from_slice(k);
        w.extend_from_slice(&(v.len() as u32).to_le_bytes());
        w.extend_from_slice(v);
    }
    w
}

pub fn decode_clients(b: &[u8]) -> Result<ClientRecords, String> {
    if b.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = b;
    let mut take = |n: usize| -> Result<&[u8], String> {
        if r.len() < n {
            return Err("client records truncated".into());
        }
        let (a, rest) = r.split_at(n);
        r = rest;
        Ok(a)
    };
    let n = u32le(take(4)?, 0);
    let mut out = Vec::new();
    for _ in 0..n {
        let kl = u32le(take(4)?, 0) as usize;
        let k = take(kl)?.to_vec();
        let vl = u32le(take(4)?, 0) as usize;
        let v = take(vl)?.to_vec();
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
