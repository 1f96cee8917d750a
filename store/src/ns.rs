//! Namespace operations: lookup, create, remove, rename, link, readdir, readlink, setattr.
//!
//! Pattern of every mutation: under the state lock, check, build the items, apply + commit
//! (`commit_locked`); drop the lock; on a `sync` export force the commit's CSN (docs/design.md §4),
//! never holding the lock across the force.

use metalog::Item;

use super::inner::Inner;
use super::inode::{ino_key, Meta, OPAQUE_SYMLINK};
use super::state::Core;
use super::types::{
    Attr, DirChange, DirEntry, FileType, Ino, NewNode, ReadDir, Result, SetAttrs, SetTime,
    StoreError, Timespec, Unlinked,
};
use super::Store;

/// Blocks a new inode needs at most once written back (its records share nodes with others:
/// this is the bound `fsstat` divides free space by, measured ≈ 200 bytes per empty file).
pub const INODE_BYTES: u64 = 256;

/// NFS names: at most 255 bytes (what Linux and `maxname` allow).
pub const NAME_MAX: usize = 255;
/// Links per inode (subdirectories per directory): the Linux `nlink` limit of ext4.
pub const LINK_MAX: u32 = 65000;

/// RFC 8881 §18.x: empty → INVAL, too long → NAMETOOLONG, "." / ".." / '/' / NUL → BADNAME.
pub fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return Err(StoreError::Inval);
    }
    if name.len() > NAME_MAX {
        return Err(StoreError::NameTooLong);
    }
    if name == b"." || name == b".." || name.iter().any(|&c| c == b'/' || c == 0) {
        return Err(StoreError::BadName);
    }
    Ok(())
}

/// The core of a directory (`NotDir` for anything else).
pub(super) fn dir_of(core: &Core, dir: Ino) -> Result<Meta> {
    let d = core.meta(dir.0)?;
    if d.ftype != FileType::Directory {
        return Err(StoreError::NotDir);
    }
    Ok(d)
}

/// A directory that can still get entries: not removed (an open, unlinked directory keeps
/// its inode but takes no new names).
pub(super) fn live_dir_of(core: &Core, dir: Ino) -> Result<Meta> {
    let d = dir_of(core, dir)?;
    if d.nlink == 0 {
        return Err(StoreError::NoEnt);
    }
    Ok(d)
}

/// `(child, cookie)` of `name` in `dir`.
pub(super) fn entry(core: &Core, dir: Ino, name: &[u8]) -> Result<(u64, u64)> {
    dir_of(core, dir)?;
    core.dir_lookup(dir.0, name)?.ok_or(StoreError::NoEnt)
}

/// The cookie a new entry gets (`NoSpace` if every collision slot of its hash is taken,
/// which a keyed 55-bit hash makes practically impossible).
pub(super) fn next_cookie(core: &Core, dir: Ino, name: &[u8]) -> Result<u64> {
    core.new_cookie(dir.0, name)?.ok_or(StoreError::NoSpace)
}

pub(super) fn meta(core: &Core, ino: u64) -> Result<Meta> {
    core.meta(ino)
}

pub(super) fn resolve(t: SetTime, now: Timespec) -> Timespec {
    match t {
        SetTime::ServerNow => now,
        SetTime::Client(t) => t,
    }
}

/// Items and objects of one transaction under construction.
#[derive(Default)]
pub struct Tx {
    pub items: Vec<Item>,
    pub objs: Vec<metalog::TxObject>,
}

impl Tx {
    pub(super) fn obj(&mut self, ino: u64, timestamps_only: bool) {
        match self.objs.iter_mut().find(|o| o.id == ino) {
            Some(o) => o.timestamps_only &= timestamps_only,
            None => self.objs.push(Inner::tx(ino, timestamps_only)),
        }
    }
    pub(super) fn core(&mut self, ino: u64, m: &Meta) {
        self.items.push(m.core_item(ino));
        self.obj(ino, false);
    }
}

impl Store {
    pub fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Attr> {
        check_name(name)?;
        let g = self.rd();
        let (ino, _) = entry(&g, dir, name)?;
        Ok(g.meta(ino)?.attr(ino))
    }

    /// Drop one link of `ino` (a name of it is going away in this transaction). A directory
    /// loses all its links and its parent one. Returns what happened to it.
    pub(super) fn unlink_inode(
        &self,
        g: &Core,
        tx: &mut Tx,
        ino: u64,
        now: Timespec,
    ) -> Result<Unlinked> {
        let mut m = meta(g, ino)?;
        if m.ftype == FileType::Directory {
            m.nlink = 0;
        } else {
            m.nlink = m.nlink.saturating_sub(1);
        }
        m.touch_c(now);
        let open = m.nlink == 0
            && self
                .open_probe
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .is_some_and(|p| p(Ino(ino)));
        let last_link = m.nlink == 0 && !open;
        if last_link {
            tx.items.push(Item::InodeFree { ino });
            tx.obj(ino, false);
        } else {
            tx.core(ino, &m);
        }
        Ok(Unlinked {
            ino: Ino(ino),
            last_link,
        })
    }

    /// CREATE and OPEN(create). `Exist` if the name is taken.
    pub fn create(
        &self,
        dir: Ino,
        name: &[u8],
        node: NewNode,
        attrs: &SetAttrs,
        cred: (u32, u32),
    ) -> Result<(Attr, DirChange)> {
        check_name(name)?;
        let now = Timespec::now();
        let extra = name.len() as u64
            + match &node {
                NewNode::Symlink(t) => t.len() as u64,
                _ => 0,
            };
        // Read what the change touches first, without blocking anyone, so the tree nodes
        // are in the cache when the state lock is held.
        {
            let g = self.rd();
            live_dir_of(&g, dir)?;
            if g.dir_lookup(dir.0, name)?.is_some() {
                return Err(StoreError::Exist);
            }
        }
        let res = self.reserve(extra)?;
        if !self.room_for_inode() {
            // Maybe only because changes not yet written back hold the metadata reserve.
            self.write_back_now()?;
            if !self.room_for_inode() {
                return Err(StoreError::NoSpace);
            }
        }
        let (attr, dc, csn) = {
            let mut g = self.wr();
            let mut dm = live_dir_of(&g, dir)?;
            if g.dir_lookup(dir.0, name)?.is_some() {
                return Err(StoreError::Exist);
            }
            let is_dir = node == NewNode::Directory;
            if is_dir && dm.nlink >= LINK_MAX {
                return Err(StoreError::TooManyLinks);
            }
            let (ftype, rdev, default_mode) = match &node {
                NewNode::Regular => (FileType::Regular, (0, 0), 0o644),
                NewNode::Directory => (FileType::Directory, (0, 0), 0o755),
                NewNode::Symlink(_) => (FileType::Symlink, (0, 0), 0o777),
                NewNode::BlockDev { major, minor } => (FileType::BlockDev, (*major, *minor), 0o644),
                NewNode::CharDev { major, minor } => (FileType::CharDev, (*major, *minor), 0o644),
                NewNode::Fifo => (FileType::Fifo, (0, 0), 0o644),
                NewNode::Socket => (FileType::Socket, (0, 0), 0o644),
            };
            let cookie = next_cookie(&g, dir, name)?;
            let ino = g.pick_ino();
            let gen = self.new_gen();
            let mut m = Meta {
                mode: attrs.mode.unwrap_or(default_mode) & 0o7777,
                uid: attrs.uid.unwrap_or(cred.0),
                gid: attrs.gid.unwrap_or(cred.1),
                nlink: if is_dir { 2 } else { 1 },
                rdev,
                atime: attrs.atime.map_or(now, |t| resolve(t, now)),
                mtime: attrs.mtime.map_or(now, |t| resolve(t, now)),
                parent: if is_dir { dir.0 } else { 0 },
                ..Meta::new(gen, ftype, now)
            };
            if ftype == FileType::Regular {
                // OPEN(create) may carry a size: the file starts sparse at that size.
                m.size = attrs.size.unwrap_or(0).min(super::types::MAX_FILE_SIZE);
            }
            m.touch_change(now);
            let mut tx = Tx::default();
            tx.core(ino, &m);
            if let NewNode::Symlink(target) = &node {
                m.size = target.len() as u64;
                tx.items[0] = m.core_item(ino);
                tx.items.push(Item::Opaque {
                    kind: OPAQUE_SYMLINK,
                    key: ino_key(ino),
                    value: Some(target.clone()),
                });
            }
            tx.items.push(Item::DirentAdd {
                dir: dir.0,
                name: name.to_vec(),
                ino,
                cookie,
            });
            let before = dm.change;
            if is_dir {
                dm.nlink += 1;
            }
            dm.touch_mc(now);
            tx.core(dir.0, &dm);
            let csn = self.commit_locked(&mut g, res, tx.items, tx.objs)?;
            let attr = g.meta(ino)?.attr(ino);
            (
                attr,
                DirChange {
                    before,
                    after: dm.change,
                },
                csn,
            )
        };
        self.force_if_sync(csn)?;
        Ok((attr, dc))
    }

    pub fn remove(&self, dir: Ino, name: &[u8]) -> Result<(DirChange, Unlinked)> {
        check_name(name)?;
        let now = Timespec::now();
        {
            let g = self.rd();
            let (ino, _) = entry(&g, dir, name)?;
            g.meta(ino)?;
        }
        let res = self.reserve(name.len() as u64)?;
        let (dc, un, csn) = {
            let mut g = self.wr();
            let mut dm = dir_of(&g, dir)?;
            let (ino, _) = entry(&g, dir, name)?;
            let target = g.meta(ino)?;
            if target.ftype == FileType::Directory {
                if g.dir_has_entries(ino)? {
                    return Err(StoreError::NotEmpty);
                }
                dm.nlink = dm.nlink.saturating_sub(1);
            }
            let mut tx = Tx::default();
            tx.items.push(Item::DirentRemove {
                dir: dir.0,
                name: name.to_vec(),
            });
            let un = self.unlink_inode(&g, &mut tx, ino, now)?;
            let before = dm.change;
            dm.touch_mc(now);
            tx.core(dir.0, &dm);
            let csn = self.commit_locked(&mut g, res, tx.items, tx.objs)?;
            (
                DirChange {
                    before,
                    after: dm.change,
                },
                un,
                csn,
            )
        };
        self.force_if_sync(csn)?;
        Ok((dc, un))
    }

    pub fn link(&self, ino: Ino, dir: Ino, name: &[u8]) -> Result<DirChange> {
        check_name(name)?;
        let now = Timespec::now();
        let res = self.reserve(name.len() as u64)?;
        let (dc, csn) = {
            let mut g = self.wr();
            let mut dm = live_dir_of(&g, dir)?;
            let mut m = meta(&g, ino.0)?;
            if m.ftype == FileType::Directory {
                return Err(StoreError::IsDir);
            }
            if entry(&g, dir, name).is_ok() {
                return Err(StoreError::Exist);
            }
            if m.nlink >= LINK_MAX {
                return Err(StoreError::TooManyLinks);
            }
            if m.nlink == 0 {
                // An unlinked (open) file cannot get a name back.
                return Err(StoreError::Stale);
            }
            m.nlink += 1;
            m.touch_c(now);
            let mut tx = Tx::default();
            tx.core(ino.0, &m);
            tx.items.push(Item::DirentAdd {
                dir: dir.0,
                name: name.to_vec(),
                ino: ino.0,
                cookie: next_cookie(&g, dir, name)?,
            });
            let before = dm.change;
            dm.touch_mc(now);
            tx.core(dir.0, &dm);
            let csn = self.commit_locked(&mut g, res, tx.items, tx.objs)?;
            (
                DirChange {
                    before,
                    after: dm.change,
                },
                csn,
            )
        };
        self.force_if_sync(csn)?;
        Ok(dc)
    }

    pub(super) fn readdir_verifier(&self) -> u64 {
        // Cookies are stable for the life of an entry and across restarts, so one verifier
        // per volume serves every directory.
        let u = self.sb.uuid;
        u64::from_le_bytes([u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7]]) | 1
    }

    /// Entries after `cookie` (0 = from the start) whose encoded size the caller bounds by
    /// asking for at most `max_entries`; `BadCookie` if the cookie is not of this directory.
    pub fn readdir(&self, dir: Ino, cookie: u64, max: usize) -> Result<ReadDir> {
        // Cookies are hash positions (keys.rs): 0 starts, anything else resumes after that
        // position, whether or not its entry still exists; 1..255 are never handed out.
        if cookie != 0 && cookie < super::keys::COOKIE_SLOTS {
            return Err(StoreError::BadCookie);
        }
        let g = self.rd();
        dir_of(&g, dir)?;
        let (ents, eof) = g.dir_scan(dir.0, cookie, max)?;
        let mut entries = Vec::with_capacity(ents.len());
        for (c, name, ino) in ents {
            let Some(m) = g.meta_opt(ino)? else {
                continue;
            };
            entries.push(DirEntry {
                cookie: c,
                name,
                attr: m.attr(ino),
            });
        }
        Ok(ReadDir {
            entries,
            eof,
            verifier: self.readdir_verifier(),
        })
    }

    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let g = self.rd();
        let m = g.meta(ino.0)?;
        if m.ftype != FileType::Symlink {
            return Err(StoreError::Inval);
        }
        Ok(g.blob_get(ino.0, b"")?.unwrap_or_default())
    }

    /// Whether a new inode fits: its records, and the metadata reserve a write-back needs.
    pub(super) fn room_for_inode(&self) -> bool {
        let g = self.rd();
        g.alloc.free_node_blocks() > self.meta_reserve(&g)
    }

    /// Blocks always kept back for write-back (`fsstat` leaves them out): slack for the
    /// tree's root path and the free-space list.
    pub(super) fn base_reserve(&self, g: &Core) -> u64 {
        64 + g.alloc.extent_count() as u64 / 128
    }

    /// Blocks kept free for the next write-back: the base reserve, plus new nodes for every
    /// changed record (at most one per record, at most the tree's size plus what the changes
    /// add). Data and new inodes never take these; when they are short of space only
    /// because of it, they write back first (which brings it down to the base).
    pub(super) fn meta_reserve(&self, g: &Core) -> u64 {
        let changes = (g.kv.live.len() + g.kv.frozen.as_ref().map_or(0, |f| f.len())) as u64;
        let bytes = self
            .pending_bytes
            .load(std::sync::atomic::Ordering::Relaxed);
        let nodes = self.tree_nodes.load(std::sync::atomic::Ordering::Relaxed);
        let dirty = changes.min(nodes + bytes / 1024 + 1);
        self.base_reserve(g) + 2 * dirty
    }

    /// The generation of a new inode: numbers are never reused, but a number handed out
    /// and lost in a crash (never logged durably) may be handed out again; the mount's
    /// generation then makes the old filehandle stale.
    pub(super) fn new_gen(&self) -> u32 {
        ((self.boot ^ (self.boot >> 32)) as u32) | 1
    }
}
