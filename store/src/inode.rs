//! The inode core, defined once: `Meta` is the in-memory record, `Meta::core_item` /
//! `Meta::from_core_item` map it to and from the log's `InodeCore` item, and
//! `encode_inode` / `decode_inode` are its B+tree record (the inode kind of keys.rs).
//! A new core field is added here, in those four places, and nowhere else.

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

pub const INODE_REC: usize = 110;

/// Encode an inode record (its core fields and its block count, XFS `di_nblocks`).
pub fn encode_inode(m: &Meta) -> Vec<u8> {
    let mut w = Vec::with_capacity(INODE_REC);
    w.push(1u8); // record version
    w.extend_from_slice(&m.gen.to_le_bytes());
    w.push(ftype_to_u8(m.ftype));
    for v in [m.mode, m.uid, m.gid, m.nlink, m.rdev.0, m.rdev.1] {
        w.extend_from_slice(&v.to_le_bytes());
    }
    w.extend_from_slice(&m.size.to_le_bytes());
    for t in [m.atime, m.mtime, m.ctime, m.crtime] {
        w.extend_from_slice(&(t.sec as u64).to_le_bytes());
        w.extend_from_slice(&t.nsec.to_le_bytes());
    }
    w.extend_from_slice(&m.change.to_le_bytes());
    w.extend_from_slice(&m.parent.to_le_bytes());
    w.extend_from_slice(&m.nblocks.to_le_bytes());
    debug_assert_eq!(w.len(), INODE_REC);
    w
}

pub fn decode_inode(b: &[u8]) -> Result<Meta, String> {
    if b.len() != INODE_REC || b[0] != 1 {
        return Err("bad inode record".into());
    }
    let ftype = ftype_from_u8(b[5]).ok_or("bad inode type")?;
    let ts = |o: usize| Timespec {
        sec: le64(b, o) as i64,
        nsec: le32(b, o + 8),
    };
    Ok(Meta {
        gen: le32(b, 1),
        ftype,
        mode: le32(b, 6),
        uid: le32(b, 10),
        gid: le32(b, 14),
        nlink: le32(b, 18),
        rdev: (le32(b, 22), le32(b, 26)),
        size: le64(b, 30),
        atime: ts(38),
        mtime: ts(50),
        ctime: ts(62),
        crtime: ts(74),
        change: le64(b, 86),
        parent: le64(b, 94),
        nblocks: le64(b, 102),
    })
}

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

pub fn ino_key(ino: u64) -> Vec<u8> {
    ino.to_le_bytes().to_vec()
}

pub fn key_ino(key: &[u8]) -> Result<u64, String> {
    let a: [u8; 8] = key.try_into().map_err(|_| "bad symlink key".to_string())?;
    Ok(u64::from_le_bytes(a))
}

/// The `Opaque` key of an extended attribute.
pub fn xattr_key(ino: u64, gen: u32, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(12 + name.len());
    k.extend_from_slice(&ino.to_le_bytes());
    k.extend_from_slice(&gen.to_le_bytes());
    k.extend_from_slice(name);
    k
}

pub fn xattr_key_split(key: &[u8]) -> Result<(u64, u32, &[u8]), String> {
    if key.len() < 12 {
        return Err("bad xattr key".to_string());
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&key[..8]);
    let mut b = [0u8; 4];
    b.copy_from_slice(&key[8..12]);
    Ok((u64::from_le_bytes(a), u32::from_le_bytes(b), &key[12..]))
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
    }
}
