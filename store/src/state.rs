//! What the state lock protects (`Core`), and how one logical log item changes it (`apply`).
//!
//! Every change, live or replayed, goes through `Core::apply`, so a mount that replays the log
//! rebuilds exactly what the live server had (docs/design.md §3). Items are blind sets of keyed
//! records, or frees of what a key range holds; replaying a suffix of the log over a tree that
//! already holds part of it converges to the same records: an item replayed early may
//! briefly undo a later one, and the later one, replayed after it, sets its keys again.
//! Free space follows the same rule: `apply` reports the blocks an item maps and unmaps, and
//! the replay sets them used and free in log order (mount.rs); the live caller has already
//! taken them from the allocator, and keeps what it frees busy until that is durable.

use std::collections::BTreeMap;

use layout::{Allocator, ExtState};
use metalog::Item;

use super::dirfilter::{DirFilters, ReadAhead};
use super::extents;
use super::inode::{
    from_ts, key_ino, xattr_key_split, Meta, OPAQUE_CLIENT, OPAQUE_SYMLINK, OPAQUE_XATTR,
};
use super::keys::{
    self, cookie_base, decode_dirent, decode_inode, encode_dirent, encode_inode, ino_end, ino_key,
    pair_key, xattr_chunk_key, xattr_name, xattr_prefix, COOKIE_SLOTS, K_DIRENT, K_EOFB, K_INODE,
    K_ORPHAN, K_XATTR, XATTR_CHUNK,
};
use super::kv::Kv;
use super::types::{FileType, StoreError, BLOCK, ROOT_INO};

type R<T> = Result<T, StoreError>;

/// A freed extent waiting to be reusable.
#[derive(Debug, Clone, Copy)]
pub struct Busy {
    /// The CSN of the freeing transaction: reusable once durable.
    pub csn: u64,
    /// Data I/O tickets below this one may still target the blocks (a READ or WRITE that
    /// looked the extent up before it was freed): reusable once they all ended.
    pub io_ticket: u64,
    pub phys: u64,
    pub len: u64,
}

/// The metadata of a mounted volume, under the state lock.
pub struct Core {
    pub kv: Kv,
    /// Free space, as the live server may hand it out: the logical free space (what the
    /// committed items say) minus `reserved` and `busy`.
    pub alloc: Allocator,
    /// Blocks freed by a transaction that may not be durable yet: reusing them before it is
    /// would let a crash hand another file's data to the old owner (XFS "busy extents").
    pub busy: Vec<Busy>,
    /// Blocks taken from `alloc` for a write or a write-back that has not committed them yet
    /// (start → len): free as far as the log and the checkpoints know.
    pub reserved: BTreeMap<u64, u64>,
    /// Client records (RFC 8881 §8.4.3): few, kept whole in memory and in each checkpoint.
    pub clients: BTreeMap<Vec<u8>, Vec<u8>>,
    pub clients_dirty: bool,
    /// Inode numbers are never reused: the next one, and how many inodes exist.
    pub next_ino: u64,
    pub files: u64,
    /// While a write-back is in flight: the CSN its snapshot covers. Blocks freed after the
    /// snapshot stay busy until its checkpoint is in (writeback.rs).
    pub wb_hold: Option<u64>,
    /// Keyed hash of directory entry names (keys.rs `cookie_base`).
    pub hash_key: (u64, u64),
    /// All ones, except in tests that force hash collisions (`name_base`).
    pub hash_mask: u64,
    /// Negative-name filters of large directories (dirfilter.rs).
    pub filters: DirFilters,
}

/// A directory entry as `dir_scan` returns it: (cookie, name, child).
pub type DirEnt = (u64, Vec<u8>, u64);

/// What one applied item did to free space.
#[derive(Debug, Default)]
pub struct Applied {
    /// Physical extents it mapped.
    pub used: Vec<(u64, u64)>,
    /// Physical extents it unmapped.
    pub freed: Vec<(u64, u64)>,
}

fn bad(e: String) -> StoreError {
    StoreError::Io(e)
}

impl Core {
    /// Blocks file data may still take, `reserve` being the metadata reserve (ns.rs
    /// `meta_reserve`): on a split volume the reserve is the node area's and data has all
    /// of its own area.
    pub fn data_room(&self, reserve: u64) -> u64 {
        match self.alloc.is_split() {
            true => self.alloc.free_data_blocks(),
            false => self.alloc.free_blocks().saturating_sub(reserve),
        }
    }

    pub fn meta_opt(&self, ino: u64) -> R<Option<Meta>> {
        match self.kv.get(&ino_key(K_INODE, ino))? {
            Some(v) => Ok(Some(decode_inode(&v).map_err(bad)?)),
            None => Ok(None),
        }
    }

    /// The inode a filehandle names: `Stale` if it is gone.
    pub fn meta(&self, ino: u64) -> R<Meta> {
        self.meta_opt(ino)?.ok_or(StoreError::Stale)
    }

    fn put_meta(&mut self, ino: u64, m: &Meta) {
        self.kv.put(ino_key(K_INODE, ino), encode_inode(m));
    }

    /// The cookie base of `name` (keys.rs `cookie_base`): the hash the directory filters
    /// hold. `hash_mask` narrows it in tests, to force collisions.
    pub fn name_base(&self, name: &[u8]) -> u64 {
        let b = cookie_base(self.hash_key, name);
        if self.hash_mask == u64::MAX {
            return b;
        }
        (((b >> 8) & self.hash_mask) | 1) << 8
    }

    /// `(child, cookie)` of `name` in `dir`. A directory filter that proves the hash absent
    /// answers without reading the tree (dirfilter.rs).
    pub fn dir_lookup(&self, dir: u64, name: &[u8]) -> R<Option<(u64, u64)>> {
        let base = self.name_base(name);
        if self.filters.absent(dir, base) {
            return Ok(None);
        }
        let mut out = None;
        self.kv.scan(
            &pair_key(K_DIRENT, dir, base),
            &pair_key(K_DIRENT, dir, base + COOKIE_SLOTS),
            &mut |k, v| {
                let (ino, n) = decode_dirent(v).map_err(bad)?;
                if n == name {
                    out = Some((ino, keys::key_u64(k, 9).map_err(bad)?));
                    return Ok(false);
                }
                Ok(true)
            },
        )?;
        Ok(out)
    }

    /// The cookie a new entry `name` gets in `dir`: the first free collision slot of its hash
    /// (slot 0 when a directory filter proves no entry has the hash).
    pub fn new_cookie(&self, dir: u64, name: &[u8]) -> R<Option<u64>> {
        let base = self.name_base(name);
        if self.filters.absent(dir, base) {
            return Ok(Some(base));
        }
        let mut next = base;
        let mut found = None;
        self.kv.scan(
            &pair_key(K_DIRENT, dir, base),
            &pair_key(K_DIRENT, dir, base + COOKIE_SLOTS),
            &mut |k, _| {
                let c = keys::key_u64(k, 9).map_err(bad)?;
                if c > next {
                    found = Some(next);
                    return Ok(false);
                }
                next = c.saturating_add(1);
                Ok(true)
            },
        )?;
        Ok(found.or((next < base + COOKIE_SLOTS).then_some(next)))
    }

    /// Entries of `dir` with cookies above `after`, at most `max`: (cookie, name hash); and
    /// whether that was the last of them (a directory filter's scan, dirfilter.rs).
    pub fn dir_hashes(&self, dir: u64, after: u64, max: usize) -> R<(Vec<(u64, u64)>, bool)> {
        self.dirents_after(dir, after, max, |cookie, name, _| {
            (cookie, self.name_base(name))
        })
    }

    /// Reads ahead, together, the leaves the next chunks of a scan of `dir` past cookie
    /// `after` will walk (dirfilter.rs `scan_dir`): a window of `ra.leaves` leaves, read again
    /// once the scan is half-way through it (so each batch brings about half a window of new
    /// leaves), or at once if a write-back swapped the tree since. Cached only: errors are
    /// left for the chunk's own reads to report.
    pub fn dir_read_ahead(&self, dir: u64, after: u64, ra: &mut ReadAhead) {
        if ra.leaves == 0 {
            return;
        }
        let from = pair_key(K_DIRENT, dir, after.saturating_add(1));
        let due = match (&ra.read, &ra.again) {
            (None, _) => true,
            (Some(root), _) if *root != self.kv.root => true,
            (Some(_), Some(again)) => from >= *again,
            // The last window reached the directory's end: its leaves are cached.
            (Some(_), None) => false,
        };
        if !due {
            return;
        }
        ra.batches += 1;
        ra.read = Some(self.kv.root);
        match self
            .kv
            .prefetch_range(&from, &ino_end(K_DIRENT, dir), ra.leaves)
        {
            Ok(again) => ra.again = again,
            // Tried again at the next chunk (which reads, and reports, a bad node itself).
            Err(_) => ra.read = None,
        }
    }

    pub fn dir_has_entries(&self, dir: u64) -> R<bool> {
        Ok(self
            .kv
            .first(&ino_key(K_DIRENT, dir), &ino_end(K_DIRENT, dir))?
            .is_some())
    }

    /// Entries of `dir` with cookies above `after`: (cookie, name, child), at most `max`;
    /// and whether that was the last of them.
    pub fn dir_scan(&self, dir: u64, after: u64, max: usize) -> R<(Vec<DirEnt>, bool)> {
        self.dirents_after(dir, after, max, |cookie, name, ino| {
            (cookie, name.to_vec(), ino)
        })
    }

    /// The walk under `dir_scan` and `dir_hashes`: `each(cookie, name, child)` of the entries
    /// of `dir` with cookies above `after`, at most `max`; and whether that was the last.
    fn dirents_after<T>(
        &self,
        dir: u64,
        after: u64,
        max: usize,
        each: impl Fn(u64, &[u8], u64) -> T,
    ) -> R<(Vec<T>, bool)> {
        let mut out = Vec::new();
        let mut eof = true;
        self.kv.scan(
            &pair_key(K_DIRENT, dir, after.saturating_add(1)),
            &ino_end(K_DIRENT, dir),
            &mut |k, v| {
                if out.len() >= max {
                    eof = false;
                    return Ok(false);
                }
                let (ino, n) = decode_dirent(v).map_err(bad)?;
                out.push(each(keys::key_u64(k, 9).map_err(bad)?, n, ino));
                Ok(true)
            },
        )?;
        Ok((out, eof))
    }

    /// The value of xattr `name` of `ino` ("" is the symlink target).
    pub fn blob_get(&self, ino: u64, name: &[u8]) -> R<Option<Vec<u8>>> {
        let p = xattr_prefix(ino, name);
        let mut out: Option<Vec<u8>> = None;
        self.kv.scan(&p, &blob_end(&p), &mut |_, v| {
            out.get_or_insert_with(Vec::new).extend_from_slice(v);
            Ok(true)
        })?;
        Ok(out)
    }

    fn blob_put(&mut self, ino: u64, name: &[u8], value: Option<&[u8]>) -> R<()> {
        let p = xattr_prefix(ino, name);
        for (k, _) in self.kv.collect(&p, &blob_end(&p))? {
            self.kv.del(k);
        }
        if let Some(v) = value {
            // An empty value still gets its chunk 0, so that it exists.
            let chunks: Vec<&[u8]> = if v.is_empty() {
                vec![v]
            } else {
                v.chunks(XATTR_CHUNK).collect()
            };
            for (i, c) in chunks.into_iter().enumerate() {
                self.kv.put(xattr_chunk_key(&p, i as u16), c.to_vec());
            }
        }
        Ok(())
    }

    /// Names of the extended attributes of `ino`, in byte order.
    pub fn xattr_names(&self, ino: u64) -> R<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        self.kv.scan(
            &ino_key(K_XATTR, ino),
            &ino_end(K_XATTR, ino),
            &mut |k, _| {
                if let Some(n) = xattr_name(k) {
                    if out.last().is_none_or(|l| l.as_slice() != n) {
                        out.push(n.to_vec());
                    }
                }
                Ok(true)
            },
        )?;
        Ok(out)
    }

    /// Inode numbers recorded under `kind` (orphans, eofblocks), from `from`, at most `max`.
    pub fn marked(&self, kind: u8, from: u64, max: usize) -> R<Vec<u64>> {
        let mut out = Vec::new();
        self.kv
            .scan(&ino_key(kind, from), &[kind + 1], &mut |k, _| {
                out.push(keys::key_u64(k, 1).map_err(bad)?);
                Ok(out.len() < max)
            })?;
        Ok(out)
    }

    pub fn mark(&mut self, kind: u8, ino: u64, on: bool) -> R<()> {
        let k = ino_key(kind, ino);
        let has = self.kv.get(&k)?.is_some();
        if on && !has {
            self.kv.put(k, Vec::new());
        } else if !on && has {
            self.kv.del(k);
        }
        Ok(())
    }

    /// Remove `ino` and everything keyed under it; returns its blocks.
    fn free_inode(&mut self, ino: u64) -> R<Vec<(u64, u64)>> {
        let mut freed = Vec::new();
        if self.meta_opt(ino)?.is_none() {
            return Ok(freed);
        }
        self.kv.del(ino_key(K_INODE, ino));
        self.files = self.files.saturating_sub(1);
        for e in extents::all(&self.kv, ino)? {
            self.kv.del(pair_key(keys::K_EXTENT, ino, e.end));
            freed.push((e.phys, e.end - e.start));
        }
        for (k, _) in self
            .kv
            .collect(&ino_key(K_XATTR, ino), &ino_end(K_XATTR, ino))?
        {
            self.kv.del(k);
        }
        self.mark(K_ORPHAN, ino, false)?;
        self.mark(K_EOFB, ino, false)?;
        Ok(freed)
    }

    /// Apply one item (see the module comment).
    #[allow(clippy::collapsible_match)] // one arm per item kind reads better
    /// The first key of each lookup `apply` makes for `item` in the tree, for a replay to
    /// read their leaves ahead in one batch (mount.rs). A key left out costs only its read
    /// later; a key too many, one read ahead.
    pub fn replay_keys(&self, item: &Item, out: &mut Vec<Vec<u8>>) {
        let ino = match item {
            Item::InodeCore { ino, .. } => {
                out.push(ino_key(K_ORPHAN, *ino));
                *ino
            }
            Item::Timestamps { ino, .. } | Item::Size { ino, .. } | Item::InodeFree { ino } => *ino,
            Item::ExtentSet {
                ino, file_block, ..
            }
            | Item::ExtentConvert {
                ino, file_block, ..
            }
            | Item::ExtentFree {
                ino, file_block, ..
            } => {
                out.push(pair_key(keys::K_EXTENT, *ino, file_block.saturating_add(1)));
                *ino
            }
            Item::DirentAdd { dir, name, .. } | Item::DirentRemove { dir, name } => {
                out.push(pair_key(K_DIRENT, *dir, self.name_base(name)));
                *dir
            }
            Item::Opaque { kind, key, .. } => {
                let ino = match *kind {
                    OPAQUE_SYMLINK => key_ino(key).ok(),
                    OPAQUE_XATTR => xattr_key_split(key).ok().map(|(ino, _, _)| ino),
                    _ => None,
                };
                match ino {
                    Some(ino) => ino,
                    None => return,
                }
            }
            _ => return,
        };
        out.push(ino_key(K_INODE, ino));
    }

    pub fn apply(&mut self, item: &Item) -> R<Applied> {
        let mut out = Applied::default();
        match item {
            Item::InodeCore { .. } => {
                // The arm matched, so the mapping is there: `None` cannot happen.
                let Some(core) = Meta::from_core_item(item) else {
                    return Ok(out);
                };
                let (ino, mut m) = core.map_err(bad)?;
                let ino = &ino;
                match self.meta_opt(*ino)? {
                    // Same incarnation: a blind set of the core fields.
                    Some(o) if o.gen == m.gen && o.ftype == m.ftype => m.nblocks = o.nblocks,
                    Some(_) => {
                        out.freed = self.free_inode(*ino)?;
                        self.files += 1;
                    }
                    None => self.files += 1,
                }
                self.next_ino = self.next_ino.max(ino + 1);
                self.mark(K_ORPHAN, *ino, m.nlink == 0 && *ino != ROOT_INO.0)?;
                self.put_meta(*ino, &m);
            }
            Item::Timestamps {
                ino,
                atime,
                mtime,
                ctime,
                change,
            } => {
                if let Some(mut m) = self.meta_opt(*ino)? {
                    m.atime = from_ts(*atime);
                    m.mtime = from_ts(*mtime);
                    m.ctime = from_ts(*ctime);
                    m.change = *change;
                    self.put_meta(*ino, &m);
                }
            }
            Item::Size { ino, size } => {
                if let Some(mut m) = self.meta_opt(*ino)? {
                    m.size = *size;
                    self.put_meta(*ino, &m);
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
                    return Err(bad(format!(
                        "extent item {file_block}+{len_blocks} at {phys_block}"
                    )));
                }
                if let Some(mut m) = self.meta_opt(*ino)? {
                    let st = if *unwritten {
                        ExtState::Unwritten
                    } else {
                        ExtState::Written
                    };
                    let d = extents::set(
                        &mut self.kv,
                        *ino,
                        *file_block,
                        *len_blocks,
                        *phys_block,
                        st,
                    )?;
                    let gone: u64 = d.iter().map(|x| x.1).sum();
                    m.nblocks = (m.nblocks + len_blocks).saturating_sub(gone);
                    // A replay may set an extent that is already there: its own blocks are
                    // not freed by it.
                    let d = subtract(d, (*phys_block, *len_blocks));
                    self.put_meta(*ino, &m);
                    if file_block + len_blocks > m.size.div_ceil(BLOCK) {
                        self.mark(K_EOFB, *ino, true)?;
                    }
                    out.used.push((*phys_block, *len_blocks));
                    out.freed = d;
                }
            }
            Item::ExtentConvert {
                ino,
                file_block,
                len_blocks,
            } if self.meta_opt(*ino)?.is_some() => {
                extents::convert(&mut self.kv, *ino, *file_block, *len_blocks)?;
            }
            Item::ExtentFree {
                ino,
                file_block,
                len_blocks,
            } => {
                if let Some(mut m) = self.meta_opt(*ino)? {
                    let d = extents::punch(&mut self.kv, *ino, *file_block, *len_blocks)?;
                    let gone: u64 = d.iter().map(|x| x.1).sum();
                    if gone > 0 {
                        m.nblocks = m.nblocks.saturating_sub(gone);
                        self.put_meta(*ino, &m);
                    }
                    out.freed = d;
                }
            }
            Item::DirentAdd {
                dir,
                name,
                ino,
                cookie,
            } if self
                .meta_opt(*dir)?
                .is_some_and(|m| m.ftype == FileType::Directory) =>
            {
                if let Some((_, c)) = self.dir_lookup(*dir, name)? {
                    if c != *cookie {
                        self.kv.del(pair_key(K_DIRENT, *dir, c));
                    }
                }
                self.kv
                    .put(pair_key(K_DIRENT, *dir, *cookie), encode_dirent(*ino, name));
                let h = self.name_base(name);
                self.filters.on_add(*dir, h);
            }
            Item::DirentRemove { dir, name } => {
                if let Some((_, c)) = self.dir_lookup(*dir, name)? {
                    self.kv.del(pair_key(K_DIRENT, *dir, c));
                    self.filters.on_remove(*dir);
                }
            }
            Item::InodeFree { ino } => {
                out.freed = self.free_inode(*ino)?;
                self.filters.on_free(*ino);
            }
            Item::Opaque { kind, key, value } => match *kind {
                OPAQUE_SYMLINK => {
                    let ino = key_ino(key).map_err(bad)?;
                    if self.meta_opt(ino)?.is_some() {
                        self.blob_put(ino, b"", value.as_deref())?;
                    }
                }
                OPAQUE_XATTR => {
                    let (ino, gen, name) = xattr_key_split(key).map_err(bad)?;
                    // Only the incarnation the item was logged for.
                    if self.meta_opt(ino)?.is_some_and(|m| m.gen == gen) && !name.is_empty() {
                        self.blob_put(ino, name, value.as_deref())?;
                    }
                }
                OPAQUE_CLIENT => {
                    match value {
                        Some(v) => self.clients.insert(key.clone(), v.clone()),
                        None => self.clients.remove(key),
                    };
                    self.clients_dirty = true;
                }
                _ => return Err(bad(format!("unknown opaque item kind {kind}"))),
            },
            // Free space follows the extent items (module comment); intents are unpacked by
            // the log's recovery.
            _ => {}
        }
        Ok(out)
    }

    /// Take a fresh inode number.
    pub fn pick_ino(&mut self) -> u64 {
        let i = self.next_ino.max(ROOT_INO.0 + 1);
        self.next_ino = i + 1;
        i
    }
}

/// `ext` without the blocks of `cut`.
fn subtract(ext: Vec<(u64, u64)>, cut: (u64, u64)) -> Vec<(u64, u64)> {
    let (cs, ce) = (cut.0, cut.0 + cut.1);
    let mut out = Vec::with_capacity(ext.len());
    for (s, l) in ext {
        let e = s + l;
        if e <= cs || s >= ce {
            out.push((s, l));
            continue;
        }
        if s < cs {
            out.push((s, cs - s));
        }
        if e > ce {
            out.push((ce, e - ce));
        }
    }
    out
}

/// The key past every chunk key starting with `prefix`.
fn blob_end(prefix: &[u8]) -> Vec<u8> {
    let mut e = prefix.to_vec();
    e.extend_from_slice(&[0xff, 0xff, 0xff]);
    e
}
