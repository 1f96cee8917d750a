//! The inode core, defined once: `Meta` is the in-memory record, `Meta::core_item` /
//! `Meta::from_core_item` map it to and from the log's `InodeCore` item, and
//! `encode_inode` / `decode_inode` are its B+tree record (the inode kind of keys.rs).
//! A new core field is added here, in those four places, and nowhere else.

use bytecodec::{Reader, Writer};
use metalog::Item;

use super::types::{Attr, FileType, Ino, Timespec, BLOCK};

/// `Opaque` item kinds the store logs.
pub const OPAQUE_SYMLINK: u16 = 1;
pub const OPAQUE_CLIENT: u16 = 2;
/// Extended attribute of an inode (RFC 8276): key = ino (u64 LE) + generation (u32 LE) + name.
pub const OPAQUE_XATTR: u16 = 3;
/// The log object id of the client records (there is no inode 0).
pub const MISC_SLOT: u64 = 0;

pub fn ftype_to_u8(t: FileType) -> u8 {
    match t {
        FileType::Regular => 1,
        FileType::Directory => 2,
        FileType::Symlink => 3,
        FileType::BlockDev => 4,
        FileType::CharDev => 5,
        FileType::Fifo => 6,
        FileType::Socket => 7,
    }
}

pub fn ftype_from_u8(v: u8) -> Option<FileType> {
    Some(match v {
        1 => FileType::Regular,
        2 => FileType::Directory,
        3 => FileType::Symlink,
        4 => FileType::BlockDev,
        5 => FileType::CharDev,
        6 => FileType::Fifo,
        7 => FileType::Socket,
        _ => return None,
    })
}

pub fn ts(t: Timespec) -> (i64, u32) {
    (t.sec, t.nsec)
}
pub fn from_ts(t: (i64, u32)) -> Timespec {
    Timespec {
        sec: t.0,
        nsec: t.1,
    }
}

/// The scalar fields of an inode (cheap to copy, edit and log as one `InodeCore` item).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub gen: u32,
    pub ftype: FileType,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub rdev: (u32, u32),
    pub size: u64,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    pub change: u64,
    pub parent: u64,
    /// Blocks mapped (written + unwritten), kept with every extent change (XFS `di_nblocks`).
    pub nblocks: u64,
}

impl Meta {
    /// A new inode of `ftype`, created `now`: no links, no blocks, size 0, change 0, uid/gid
    /// 0, mode 0; callers set what differs with struct-update syntax.
    pub fn new(gen: u32, ftype: FileType, now: Timespec) -> Meta {
        Meta {
            gen,
            ftype,
            mode: 0,
            uid: 0,
            gid: 0,
            nlink: 0,
            rdev: (0, 0),
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            change: 0,
            parent: 0,
            nblocks: 0,
        }
    }

    pub fn attr(&self, ino: u64) -> Attr {
        Attr {
            ino: Ino(ino),
            generation: self.gen,
            ftype: self.ftype,
            mode: self.mode,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            used: self.nblocks * BLOCK,
            rdev: self.rdev,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            crtime: self.crtime,
            change: self.change,
            parent: Ino(self.parent),
        }
    }
}

impl Meta {
    /// The `InodeCore` item that sets this inode's core fields.
    pub fn core_item(&self, ino: u64) -> Item {
        Item::InodeCore {
            ino,
            gen: self.gen,
            ftype: ftype_to_u8(self.ftype),
            mode: self.mode,
            uid: self.uid,
            gid: self.gid,
            nlink: self.nlink,
            rdev: self.rdev,
            size: self.size,
            atime: ts(self.atime),
            mtime: ts(self.mtime),
            ctime: ts(self.ctime),
            crtime: ts(self.crtime),
            change: self.change,
            parent: self.parent,
        }
    }

    /// The inode number and core of an `InodeCore` item (`None` for any other item). The block
    /// count is not logged with the core: it comes back 0 and the caller keeps the old one.
    pub fn from_core_item(item: &Item) -> Option<Result<(u64, Meta), String>> {
        let Item::InodeCore {
            ino,
            gen,
            ftype,
            mode,
            uid,
            gid,
            nlink,
            rdev,
            size,
            atime,
            mtime,
            ctime,
            crtime,
            change,
            parent,
        } = item
        else {
            return None;
        };
        let Some(ftype) = ftype_from_u8(*ftype) else {
            return Some(Err(format!("bad ftype {ftype}")));
        };
        Some(Ok((
            *ino,
            Meta {
                gen: *gen,
                ftype,
                mode: *mode,
                uid: *uid,
                gid: *gid,
                nlink: *nlink,
                rdev: *rdev,
                size: *size,
                atime: from_ts(*atime),
                mtime: from_ts(*mtime),
                ctime: from_ts(*ctime),
                crtime: from_ts(*crtime),
                change: *change,
                parent: *parent,
                nblocks: 0,
            },
        )))
    }

    pub fn times_item(&self, ino: u64) -> Item {
        Item::Timestamps {
            ino,
            atime: ts(self.atime),
            mtime: ts(self.mtime),
            ctime: ts(self.ctime),
            change: self.change,
        }
    }

    /// Bump the change attribute: strictly increasing, and time-based so that it does not go
    /// back after a crash lost a lazily logged change.
    pub fn touch_change(&mut self, now: Timespec) {
        let ns = (now.sec.max(0) as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(now.nsec as u64);
        self.change = (self.change + 1).max(ns);
    }

    /// ctime + change (any change of the inode).
    pub fn touch_c(&mut self, now: Timespec) {
        self.ctime = now;
        self.touch_change(now);
    }

    /// mtime + ctime + change (the contents changed).
    pub fn touch_mc(&mut self, now: Timespec) {
        self.mtime = now;
        self.touch_c(now);
    }
}

/// An inode record: version u8 (1), gen u32, type u8, mode, uid, gid, nlink, rdev major and
/// minor (u32 each), size u64, atime, mtime, ctime, crtime (sec i64, nsec u32 each), change
/// u64, parent u64, nblocks u64.
pub const INODE_REC: usize = 110;
const _: () = assert!(INODE_REC == 1 + 4 + 1 + 6 * 4 + 8 + 4 * (8 + 4) + 3 * 8);
const _: () = assert!(INODE_REC <= super::btree::MAX_VAL);
const INODE_REC_VERSION: u8 = 1;

/// Encode an inode record (its core fields and its block count, XFS `di_nblocks`).
pub fn encode_inode(m: &Meta) -> Vec<u8> {
    let mut out = Vec::with_capacity(INODE_REC);
    let mut w = Writer::new(&mut out);
    w.u8(INODE_REC_VERSION)
        .u32_le(m.gen)
        .u8(ftype_to_u8(m.ftype));
    for v in [m.mode, m.uid, m.gid, m.nlink, m.rdev.0, m.rdev.1] {
        w.u32_le(v);
    }
    w.u64_le(m.size);
    for t in [m.atime, m.mtime, m.ctime, m.crtime] {
        w.i64_le(t.sec).u32_le(t.nsec);
    }
    w.u64_le(m.change).u64_le(m.parent).u64_le(m.nblocks);
    debug_assert_eq!(out.len(), INODE_REC);
    out
}

pub fn decode_inode(b: &[u8]) -> Result<Meta, String> {
    const BAD: &str = "bad inode record";
    if b.len() != INODE_REC {
        return Err(BAD.into());
    }
    let bad = |_: bytecodec::Error| String::from(BAD);
    let mut r = Reader::new(b);
    if r.u8().map_err(bad)? != INODE_REC_VERSION {
        return Err(BAD.into());
    }
    let gen = r.u32_le().map_err(bad)?;
    let ftype = ftype_from_u8(r.u8().map_err(bad)?).ok_or("bad inode type")?;
    let mut u32s = [0u32; 6];
    for v in &mut u32s {
        *v = r.u32_le().map_err(bad)?;
    }
    let [mode, uid, gid, nlink, major, minor] = u32s;
    let size = r.u64_le().map_err(bad)?;
    let mut times = [Timespec::default(); 4];
    for t in &mut times {
        t.sec = r.i64_le().map_err(bad)?;
        t.nsec = r.u32_le().map_err(bad)?;
    }
    let [atime, mtime, ctime, crtime] = times;
    let (change, parent, nblocks) = (
        r.u64_le().map_err(bad)?,
        r.u64_le().map_err(bad)?,
        r.u64_le().map_err(bad)?,
    );
    r.finish().map_err(bad)?;
    Ok(Meta {
        gen,
        ftype,
        mode,
        uid,
        gid,
        nlink,
        rdev: (major, minor),
        size,
        atime,
        mtime,
        ctime,
        crtime,
        change,
        parent,
        nblocks,
    })
}

/// The `Opaque` key of a symlink target: ino (u64 LE).
pub fn ino_key(ino: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(8);
    Writer::new(&mut k).u64_le(ino);
    k
}

pub fn key_ino(key: &[u8]) -> Result<u64, String> {
    let mut r = Reader::new(key);
    let ino = r.u64_le();
    match (ino, r.finish()) {
        (Ok(ino), Ok(())) => Ok(ino),
        _ => Err("bad symlink key".into()),
    }
}

/// The `Opaque` key of an extended attribute.
pub fn xattr_key(ino: u64, gen: u32, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(12 + name.len());
    Writer::new(&mut k).u64_le(ino).u32_le(gen).bytes(name);
    k
}

pub fn xattr_key_split(key: &[u8]) -> Result<(u64, u32, &[u8]), String> {
    let mut r = Reader::new(key);
    match (r.u64_le(), r.u32_le()) {
        (Ok(ino), Ok(gen)) => Ok((ino, gen, r.rest())),
        _ => Err("bad xattr key".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_record_and_core_item_round_trip() {
        let m = Meta {
            gen: 2,
            ftype: FileType::Directory,
            mode: 0o755,
            uid: 1,
            gid: 2,
            nlink: 3,
            rdev: (4, 5),
            size: 4096,
            atime: Timespec { sec: 1, nsec: 2 },
            mtime: Timespec { sec: -3, nsec: 4 },
            ctime: Timespec { sec: 5, nsec: 6 },
            crtime: Timespec { sec: 7, nsec: 8 },
            change: 99,
            parent: 1,
            nblocks: 12,
        };
        let b = encode_inode(&m);
        assert_eq!(decode_inode(&b).unwrap(), m);
        assert!(decode_inode(&b[..100]).is_err());
        assert_eq!(
            Meta::from_core_item(&m.core_item(7)).unwrap().unwrap(),
            (7, Meta { nblocks: 0, ..m })
        );
        // The record's bytes, pinned (the field order of `INODE_REC`'s comment).
        let mut want = Vec::new();
        want.extend_from_slice(&[1, 2, 0, 0, 0, 2]);
        for v in [0o755u32, 1, 2, 3, 4, 5] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        want.extend_from_slice(&[0, 0x10, 0, 0, 0, 0, 0, 0]);
        for (sec, nsec) in [(1i64, 2u32), (-3, 4), (5, 6), (7, 8)] {
            want.extend_from_slice(&sec.to_le_bytes());
            want.extend_from_slice(&nsec.to_le_bytes());
        }
        for v in [99u64, 1, 12] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(b, want);
        assert_eq!(
            &b[50..58],
            &[0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        let mut bad = b.clone();
        bad[0] = 2;
        assert_eq!(decode_inode(&bad), Err("bad inode record".into()));
        bad[0] = 1;
        bad[5] = 8;
        assert_eq!(decode_inode(&bad), Err("bad inode type".into()));
        assert_eq!(key_ino(&ino_key(0x0102)), Ok(0x0102));
        assert!(key_ino(&[0; 9]).is_err());
        let k = xattr_key(1, 2, b"n");
        assert_eq!(k, [1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, b'n']);
        assert_eq!(xattr_key_split(&k), Ok((1, 2, &b"n"[..])));
        assert!(xattr_key_split(&k[..11]).is_err());
    }
}
