//! In-memory inodes and directories, and how one logical log item changes them (`apply`).
//!
//! Every change, live or replayed, goes through `State::apply`, so a mount that replays the log
//! rebuilds exactly what the live server had (design.md §3: items are idempotent blind sets;
//! replaying a suffix of the log over an object that already holds some of it converges).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use layout::{ExtState, ExtentMap};
use metalog::Item;

use super::{Attr, FileType, Ino, Timespec, BLOCK};

/// `Opaque` item kinds the store logs.
pub const OPAQUE_SYMLINK: u16 = 1;
pub const OPAQUE_CLIENT: u16 = 2;
/// Extended attribute of an inode (RFC 8276): key = ino (u64 LE) + generation (u32 LE) + name.
pub const OPAQUE_XATTR: u16 = 3;
/// Object slot 0 holds the client records (there is no inode 0).
pub const MISC_SLOT: u64 = 0;
/// First READDIR cookie handed out: 0, 1 and 2 are reserved (RFC 8881 §18.23.3).
pub const FIRST_COOKIE: u64 = 3;

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

/// A directory's entries with stable cookies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dir {
    pub by_name: HashMap<Vec<u8>, (u64, u64)>,
    pub by_cookie: BTreeMap<u64, Vec<u8>>,
    pub next_cookie: u64,
}

impl Dir {
    pub fn new() -> Dir {
        Dir {
            next_cookie: FIRST_COOKIE,
            ..Dir::default()
        }
    }
    pub fn add(&mut self, name: &[u8], ino: u64, cookie: u64) {
        self.remove(name);
        self.by_name.insert(name.to_vec(), (ino, cookie));
        self.by_cookie.insert(cookie, name.to_vec());
        self.next_cookie = self.next_cookie.max(cookie + 1);
    }
    pub fn remove(&mut self, name: &[u8]) -> Option<(u64, u64)> {
        let (ino, cookie) = self.by_name.remove(name)?;
        self.by_cookie.remove(&cookie);
        Some((ino, cookie))
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inode {
    pub m: Meta,
    pub ext: ExtentMap,
    pub dir: Option<Dir>,
    pub symlink: Vec<u8>,
    /// Extended attributes (RFC 8276), by name.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Inode {
    pub fn new(m: Meta) -> Inode {
        Inode {
            m,
            ext: ExtentMap::new(),
            dir: (m.ftype == FileType::Directory).then(Dir::new),
            symlink: Vec::new(),
            xattrs: BTreeMap::new(),
        }
    }

    pub fn attr(&self, ino: u64) -> Attr {
        let m = &self.m;
        Attr {
            ino: Ino(ino),
            generation: m.gen,
            ftype: m.ftype,
            mode: m.mode,
            nlink: m.nlink,
            uid: m.uid,
            gid: m.gid,
            size: m.size,
            used: self.ext.mapped_blocks() * BLOCK,
            rdev: m.rdev,
            atime: m.atime,
            mtime: m.mtime,
            ctime: m.ctime,
            crtime: m.crtime,
            change: m.change,
            parent: Ino(m.parent),
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

/// The whole in-memory metadata of a volume.
#[derive(Debug, Default)]
pub struct State {
    pub inodes: HashMap<u64, Inode>,
    /// Generation of each freed inode slot (a reused slot gets gen + 1).
    pub freed_gens: HashMap<u64, u32>,
    pub clients: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Objects changed since the last write-back (slot 0 = client records).
    pub dirty: HashSet<u64>,
    /// Free inode numbers below `next_fresh`.
    pub free_inos: BTreeSet<u64>,
    pub next_fresh: u64,
}

/// Replay-time error: a log item that does not fit the state.
pub type ApplyResult = Result<Vec<(u64, u64)>, String>;

impl State {
    /// Apply one item. Returns the physical extents an extent item displaced (the live caller
    /// frees them; replay ignores them: the allocator is rebuilt from the maps after replay).
    pub fn apply(&mut self, item: &Item) -> ApplyResult {
        let mut freed = Vec::new();
        match item {
            Item::InodeCore {
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
            } => {
                let ft = ftype_from_u8(*ftype).ok_or_else(|| format!("bad ftype {ftype}"))?;
                let m = Meta {
                    gen: *gen,
                    ftype: ft,
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
                };
                match self.inodes.get_mut(ino) {
                    // Same incarnation: a blind set of the core fields.
                    Some(i) if i.m.gen == m.gen && i.m.ftype == m.ftype => i.m = m,
                    _ => {
                        self.inodes.insert(*ino, Inode::new(m));
                        self.freed_gens.remove(ino);
                        self.free_inos.remove(ino);
                        self.next_fresh = self.next_fresh.max(ino + 1);
                    }
                }
                self.dirty.insert(*ino);
            }
            Item::Timestamps {
                ino,
                atime,
                mtime,
                ctime,
                change,
            } => {
                if let Some(i) = self.inodes.get_mut(ino) {
                    i.m.atime = from_ts(*atime);
                    i.m.mtime = from_ts(*mtime);
                    i.m.ctime = from_ts(*ctime);
                    i.m.change = *change;
                    self.dirty.insert(*ino);
                }
            }
            Item::Size { ino, size } => {
                if let Some(i) = self.inodes.get_mut(ino) {
                    i.m.size = *size;
                    self.dirty.insert(*ino);
                }
            }
            Item::ExtentSet {
                ino,
                file_block,
                len_blocks,
                phys_block,
                unwritten,
            } => {
                if !super::format::extent_ok(*file_block, *phys_block, *len_blocks) {
                    return Err(format!(
                        "extent item {file_block}+{len_blocks} at {phys_block}"
                    ));
                }
                if let Some(i) = self.inodes.get_mut(ino) {
                    let st = if *unwritten {
                        ExtState::Unwritten
                    } else {
                        ExtState::Written
                    };
                    freed = i.ext.set(*file_block, *phys_block, *len_blocks, st);
                    self.dirty.insert(*ino);
                }
            }
            Item::ExtentConvert {
                ino,
                file_block,
                len_blocks,
            } => {
                if let Some(i) = self.inodes.get_mut(ino) {
                    i.ext.convert(*file_block, *len_blocks);
                    self.dirty.insert(*ino);
                }
            }
            Item::ExtentFree {
                ino,
                file_block,
                len_blocks,
            } => {
                if let Some(i) = self.inodes.get_mut(ino) {
                    freed = i.ext.punch(*file_block, *len_blocks);
                    self.dirty.insert(*ino);
                }
            }
            Item::DirentAdd {
                dir,
                name,
                ino,
                cookie,
            } => {
                if let Some(d) = self.inodes.get_mut(dir).and_then(|i| i.dir.as_mut()) {
                    d.add(name, *ino, *cookie);
                    self.dirty.insert(*dir);
                }
            }
            Item::DirentRemove { dir, name } => {
                if let Some(d) = self.inodes.get_mut(dir).and_then(|i| i.dir.as_mut()) {
                    d.remove(name);
                    self.dirty.insert(*dir);
                }
            }
            Item::InodeFree { ino } => {
                if let Some(i) = self.inodes.remove(ino) {
                    freed = i.ext.iter().map(|(_, p, l, _)| (p, l)).collect();
                    self.freed_gens.insert(*ino, i.m.gen);
                    if *ino < self.next_fresh {
                        self.free_inos.insert(*ino);
                    }
                    self.dirty.insert(*ino);
                }
            }
            Item::Opaque { kind, key, value } => match *kind {
                OPAQUE_SYMLINK => {
                    let ino = key_ino(key)?;
                    if let Some(i) = self.inodes.get_mut(&ino) {
                        i.symlink = value.clone().unwrap_or_default();
                        self.dirty.insert(ino);
                    }
                }
                OPAQUE_XATTR => {
                    let (ino, gen, name) = xattr_key_split(key)?;
                    // Only the incarnation the item was logged for (a reused slot starts empty).
                    if let Some(i) = self.inodes.get_mut(&ino).filter(|i| i.m.gen == gen) {
                        match value {
                            Some(v) => i.xattrs.insert(name.to_vec(), v.clone()),
                            None => i.xattrs.remove(name),
                        };
                        self.dirty.insert(ino);
                    }
                }
                OPAQUE_CLIENT => {
                    match value {
                        Some(v) => self.clients.insert(key.clone(), v.clone()),
                        None => self.clients.remove(key),
                    };
                    self.dirty.insert(MISC_SLOT);
                }
                _ => return Err(format!("unknown opaque item kind {kind}")),
            },
            // Free-space items are not used: the allocator is rebuilt from the extent maps.
            _ => {}
        }
        Ok(freed)
    }

    /// A free inode number and the generation it gets.
    pub fn pick_ino(&mut self, max_ino: u64) -> Option<(u64, u32)> {
        let ino = match self.free_inos.iter().next() {
            Some(&i) => {
                self.free_inos.remove(&i);
                i
            }
            None => {
                if self.next_fresh > max_ino {
                    return None;
                }
                self.next_fresh += 1;
                self.next_fresh - 1
            }
        };
        let gen = self
            .freed_gens
            .get(&ino)
            .copied()
            .unwrap_or(0)
            .wrapping_add(1)
            .max(1);
        Some((ino, gen))
    }
}

pub fn ino_key(ino: u64) -> Vec<u8> {
    ino.to_le_bytes().to_vec()
}

fn key_ino(key: &[u8]) -> Result<u64, String> {
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

fn xattr_key_split(key: &[u8]) -> Result<(u64, u32, &[u8]), String> {
    if key.len() < 12 {
        return Err("bad xattr key".to_string());
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&key[..8]);
    let mut b = [0u8; 4];
    b.copy_from_slice(&key[8..12]);
    Ok((u64::from_le_bytes(a), u32::from_le_bytes(b), &key[12..]))
}
