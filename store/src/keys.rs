//! The store's keyed records in the B+tree (docs/design.md, house rule 4: the whole record format is here).
//!
//! Keys sort as byte strings: a one-byte kind, then big-endian integers, so each kind, each
//! inode's extents and each directory's entries are contiguous ranges. Values are
//! little-endian.
//!
//! | kind | key | value |
//! |---|---|---|
//! | inode 1 | ino | `InodeRec` (110 bytes) |
//! | dirent 2 | dir, cookie | child ino, name |
//! | extent 3 | ino, end block (exclusive) | start block, phys block, state |
//! | xattr 4 | ino, name, 0, chunk u16 | ≤ `XATTR_CHUNK` bytes of the value (name "" = symlink target) |
//! | orphan 5 | ino | — (nlink 0, freed at mount) |
//! | eofblocks 6 | ino | — (may have blocks past EOF: `files_past_eof`) |
//!
//! Extents are keyed by their end so that "the extent holding block b" is the first key
//! above (ino, b): the tree needs only forward seeks. Directory cookies are a keyed hash of
//! the name (`cookie_base`) with a collision index in the low 8 bits, so they stay valid
//! across restarts and concurrent changes, and lookup by name is a seek to one small range.

use layout::ExtState;

pub use super::inode::{decode_inode, encode_inode};

pub const K_INODE: u8 = 1;
pub const K_DIRENT: u8 = 2;
pub const K_EXTENT: u8 = 3;
pub const K_XATTR: u8 = 4;
pub const K_ORPHAN: u8 = 5;
pub const K_EOFB: u8 = 6;

/// Bytes of an xattr value (or symlink target) per tree entry.
pub const XATTR_CHUNK: usize = 1024;
const _: () = assert!(XATTR_CHUNK <= super::btree::MAX_VAL);

pub fn ino_key(kind: u8, ino: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(9);
    k.push(kind);
    k.extend_from_slice(&ino.to_be_bytes());
    k
}

/// The first key past every key of `ino` of this kind.
pub fn ino_end(kind: u8, ino: u64) -> Vec<u8> {
    match ino.checked_add(1) {
        Some(n) => ino_key(kind, n),
        None => vec![kind + 1],
    }
}

pub fn pair_key(kind: u8, a: u64, b: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(17);
    k.push(kind);
    k.extend_from_slice(&a.to_be_bytes());
    k.extend_from_slice(&b.to_be_bytes());
    k
}

/// The big-endian number that ends a key read from the tree, at `o`: a corrupt node may hold
/// a key of any length in a range, so the length is checked, never trusted.
pub fn key_u64(k: &[u8], o: usize) -> Result<u64, String> {
    match k.get(o..) {
        Some(t) if t.len() == 8 => Ok(be64(k, o)),
        _ => Err(format!("bad key of {} bytes", k.len())),
    }
}

pub fn be64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_be_bytes(a)
}

fn le64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

pub fn encode_dirent(ino: u64, name: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + name.len());
    v.extend_from_slice(&ino.to_le_bytes());
    v.extend_from_slice(name);
    v
}

pub fn decode_dirent(v: &[u8]) -> Result<(u64, &[u8]), String> {
    if v.len() < 9 {
        return Err("bad directory entry".into());
    }
    Ok((le64(v, 0), &v[8..]))
}

/// One extent as stored: `[start, end)` of the file mapped at `phys`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ext {
    pub start: u64,
    pub end: u64,
    pub phys: u64,
    pub state: ExtState,
}

pub fn encode_extent(e: &Ext) -> Vec<u8> {
    let mut v = Vec::with_capacity(17);
    v.extend_from_slice(&e.start.to_le_bytes());
    v.extend_from_slice(&e.phys.to_le_bytes());
    v.push(matches!(e.state, ExtState::Unwritten) as u8);
    v
}

pub fn decode_extent(key: &[u8], v: &[u8]) -> Result<Ext, String> {
    if key.len() != 17 || v.len() != 17 || v[16] > 1 {
        return Err("bad extent record".into());
    }
    let e = Ext {
        start: le64(v, 0),
        end: be64(key, 9),
        phys: le64(v, 8),
        state: if v[16] == 1 {
            ExtState::Unwritten
        } else {
            ExtState::Written
        },
    };
    if e.start >= e.end || !super::format::extent_ok(e.start, e.phys, e.end - e.start) {
        return Err(format!("bad extent {}..{} at {}", e.start, e.end, e.phys));
    }
    Ok(e)
}

/// `[4][ino][name][0]`: every chunk key of one xattr starts with it (names hold no NUL).
pub fn xattr_prefix(ino: u64, name: &[u8]) -> Vec<u8> {
    let mut k = ino_key(K_XATTR, ino);
    k.extend_from_slice(name);
    k.push(0);
    k
}

pub fn xattr_chunk_key(prefix: &[u8], chunk: u16) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&chunk.to_be_bytes());
    k
}

/// The xattr name of a chunk key of `ino` (None for the symlink target and for bad keys).
pub fn xattr_name(key: &[u8]) -> Option<&[u8]> {
    let body = key.get(9..key.len().checked_sub(3)?)?;
    (!body.is_empty()).then_some(body)
}

/// The cookie of a directory entry: a 55-bit hash of the name keyed by the volume, shifted
/// over the 8-bit collision index. Never below 256 (NFS reserves 0, 1 and 2), never with the
/// top bit set (some clients treat cookies as signed).
pub fn cookie_base(hash_key: (u64, u64), name: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut s = siphasher::sip::SipHasher13::new_with_keys(hash_key.0, hash_key.1);
    s.write(name);
    ((s.finish() >> 9) | 1) << 8
}

/// Collision indexes per hash value: a name whose 256 neighbours are all taken is refused.
pub const COOKIE_SLOTS: u64 = 256;

/// The hash key of a volume (from its UUID: stable for the volume's life).
pub fn hash_key(uuid: &[u8; 16]) -> (u64, u64) {
    (le64(uuid, 0), le64(uuid, 8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let e = Ext {
            start: 3,
            end: 10,
            phys: 500,
            state: ExtState::Unwritten,
        };
        let k = pair_key(K_EXTENT, 7, e.end);
        assert_eq!(decode_extent(&k, &encode_extent(&e)).unwrap(), e);
        let d = encode_dirent(9, b"abc");
        let (ino, name) = decode_dirent(&d).unwrap();
        assert_eq!((ino, name), (9, &b"abc"[..]));
        let p = xattr_prefix(7, b"user.x");
        assert_eq!(xattr_name(&xattr_chunk_key(&p, 3)), Some(&b"user.x"[..]));
        assert_eq!(xattr_name(&xattr_chunk_key(&xattr_prefix(7, b""), 0)), None);
    }

    #[test]
    fn cookies_are_stable_spread_and_never_reserved() {
        let k = hash_key(b"0123456789abcdef");
        let a = cookie_base(k, b"name");
        assert_eq!(a, cookie_base(k, b"name"));
        assert_ne!(a, cookie_base(k, b"name2"));
        assert_ne!(a, cookie_base(hash_key(b"fedcba9876543210"), b"name"));
        for i in 0..1000u32 {
            let c = cookie_base(k, &i.to_le_bytes());
            assert!((256..1 << 63).contains(&c) && c.is_multiple_of(COOKIE_SLOTS));
        }
    }
}
