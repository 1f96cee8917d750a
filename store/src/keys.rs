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

use bytecodec::{get_u64_be, get_u64_le, Reader, Writer};
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

/// A key of one inode: kind, ino.
pub const INO_KEY_BYTES: usize = 9;
/// A key of two numbers: kind, then (dir, cookie) or (ino, end block).
pub const PAIR_KEY_BYTES: usize = 17;

pub fn ino_key(kind: u8, ino: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(INO_KEY_BYTES);
    Writer::new(&mut k).u8(kind).u64_be(ino);
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
    let mut k = Vec::with_capacity(PAIR_KEY_BYTES);
    Writer::new(&mut k).u8(kind).u64_be(a).u64_be(b);
    k
}

/// The big-endian number that ends a key read from the tree, at `o`: a corrupt node may hold
/// a key of any length in a range, so the length is checked, never trusted.
pub fn key_u64(k: &[u8], o: usize) -> Result<u64, String> {
    k.get(o..)
        .filter(|t| t.len() == 8)
        .and_then(|t| get_u64_be(t, 0).ok())
        .ok_or_else(|| format!("bad key of {} bytes", k.len()))
}

/// The big-endian number at `o` of a key a test wrote.
#[cfg(test)]
pub fn be64(b: &[u8], o: usize) -> u64 {
    get_u64_be(b, o).expect("a key of the test's own")
}

pub fn encode_dirent(ino: u64, name: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + name.len());
    Writer::new(&mut v).u64_le(ino).bytes(name);
    v
}

/// A directory entry's value: child ino (u64), then a name of at least one byte.
pub fn decode_dirent(v: &[u8]) -> Result<(u64, &[u8]), String> {
    let mut r = Reader::new(v);
    match (r.u64_le(), r.rest()) {
        (Ok(ino), name) if !name.is_empty() => Ok((ino, name)),
        _ => Err("bad directory entry".into()),
    }
}

/// One extent as stored: `[start, end)` of the file mapped at `phys`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ext {
    pub start: u64,
    pub end: u64,
    pub phys: u64,
    pub state: ExtState,
}

/// An extent's value: start block u64, phys block u64, state u8 (1: unwritten).
pub const EXTENT_VAL_BYTES: usize = 17;
const _: () = assert!(EXTENT_VAL_BYTES <= super::btree::MAX_VAL);

pub fn encode_extent(e: &Ext) -> Vec<u8> {
    let mut v = Vec::with_capacity(EXTENT_VAL_BYTES);
    Writer::new(&mut v)
        .u64_le(e.start)
        .u64_le(e.phys)
        .u8(matches!(e.state, ExtState::Unwritten) as u8);
    v
}

pub fn decode_extent(key: &[u8], v: &[u8]) -> Result<Ext, String> {
    const BAD: &str = "bad extent record";
    let bad = |_: bytecodec::Error| String::from(BAD);
    if key.len() != PAIR_KEY_BYTES {
        return Err(BAD.into());
    }
    let mut r = Reader::new(v);
    let start = r.u64_le().map_err(bad)?;
    let phys = r.u64_le().map_err(bad)?;
    let state = match r.u8().map_err(bad)? {
        0 => ExtState::Written,
        1 => ExtState::Unwritten,
        _ => return Err(BAD.into()),
    };
    r.finish().map_err(bad)?;
    let e = Ext {
        start,
        end: get_u64_be(key, 9).map_err(bad)?,
        phys,
        state,
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
    Writer::new(&mut k).u16_be(chunk);
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
    // Both reads are inside the 16 bytes: the default is never taken.
    let half = |o| get_u64_le(uuid, o).unwrap_or_default();
    (half(0), half(8))
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

    /// Keys and values as bytes, pinned: keys big-endian (they sort as byte strings), values
    /// little-endian.
    #[test]
    fn record_bytes_are_pinned() {
        assert_eq!(ino_key(K_INODE, 0x0102), [1, 0, 0, 0, 0, 0, 0, 1, 2]);
        let k = pair_key(K_EXTENT, 1, 0x0203);
        assert_eq!(k, [3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 2, 3]);
        assert_eq!(key_u64(&k, 9), Ok(0x0203));
        assert!(key_u64(&k, 1).is_err() && key_u64(&k, 18).is_err());
        assert_eq!(
            xattr_chunk_key(&xattr_prefix(1, b"n"), 0x0102),
            [4, 0, 0, 0, 0, 0, 0, 0, 1, b'n', 0, 1, 2]
        );
        assert_eq!(encode_dirent(0x0102, b"a"), [2, 1, 0, 0, 0, 0, 0, 0, b'a']);
        assert!(decode_dirent(&[0; 8]).is_err());
        let e = Ext {
            start: 1,
            end: 0x0203,
            phys: 0x0405,
            state: ExtState::Unwritten,
        };
        let v = encode_extent(&e);
        assert_eq!(v, [1, 0, 0, 0, 0, 0, 0, 0, 5, 4, 0, 0, 0, 0, 0, 0, 1]);
        assert!(decode_extent(&k, &v[..16]).is_err());
        assert!(decode_extent(&k[..16], &v).is_err());
        let mut v2 = v.clone();
        v2[16] = 2;
        assert!(decode_extent(&k, &v2).is_err());
        v2.push(0);
        assert!(decode_extent(&k, &v2).is_err());
        v2[16] = 0;
        v2.pop();
        assert_eq!(
            decode_extent(&k, &v2),
            Ok(Ext {
                state: ExtState::Written,
                ..e
            })
        );
        let uuid = [1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(hash_key(&uuid), (1, 2));
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
