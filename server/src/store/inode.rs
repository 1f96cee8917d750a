//! The inode core (`Meta`, one record of the B+tree, keys.rs) and the log items that set it.

use metalog::Item;

use super::{Attr, FileType, Ino, Timespec, BLOCK};

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
