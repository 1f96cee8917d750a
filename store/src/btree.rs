//! The on-disk copy-on-write B+tree of the store (docs/store.md).
//!
//! One tree holds every keyed record (keys.rs: inodes, directory entries, extents, extended
//! attributes, orphans). Nodes are 4 KiB blocks allocated from the volume's free space. A node
//! is never written in place: a write-back merges a sorted batch of changes into the tree
//! (`merge`), writing every node on a changed path to a fresh block, so the previous tree stays
//! intact on disk until the checkpoint that names the new root is durable (writeback.rs).
//!
//! Node format (little-endian; docs/design.md, house rule 4):
//!
//! ```text
//! 0   magic u32 "PNBT"   4 level u8 (0 = leaf)   5 pad   6 count u16   8 crc u32
//! 12  pad u32            16 slots: count × u16 offset of each entry, in key order
//! ... free ...           entries packed from the end: key_len u16 | val_len u16 | key | val
//! ```
//! A leaf's values are the records; an internal node's are child block numbers (u64) and its
//! keys the first key of each child's subtree. The CRC32C covers the whole block with the crc
//! field zero, seeded with the block number, so a node read from the wrong place fails.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytecodec::{get_array, get_u32_le, get_u64_le, put_bytes, put_u16_le, put_u32_le, Writer};

use super::types::{StoreError, BLOCK};

pub const PAGE: usize = BLOCK as usize;
const MAGIC: u32 = 0x5442_4e50; // "PNBT"
                                // The header's fields, at the offsets the module comment gives.
const OFF_MAGIC: usize = 0;
const OFF_LEVEL: usize = 4;
const OFF_COUNT: usize = 6;
const OFF_CRC: usize = 8;
const HEADER: usize = 16;
/// A slot: the u16 offset of one entry.
const SLOT: usize = 2;
/// An entry's head: key_len u16, val_len u16.
const ENTRY_HEAD: usize = 4;
/// An internal node's value: the child's block number, u64.
const CHILD: usize = 8;
const _: () = assert!(OFF_CRC + 4 <= HEADER);
// Every offset in a node fits its u16 slot.
const _: () = assert!(PAGE - 1 <= u16::MAX as usize);
/// Largest key and value (keys.rs stays below both; xattr values are chunked to fit): three
/// maximal entries fit a node, so a split always leaves every node with at least one entry.
pub const MAX_KEY: usize = 300;
pub const MAX_VAL: usize = 1024;
const _: () = assert!(3 * (MAX_KEY + MAX_VAL + SLOT + ENTRY_HEAD) <= PAGE - HEADER);

/// A sorted batch of changes: `Some` puts, `None` deletes.
pub type Changes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// One (key, value) entry of a node.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A tree root: block and level (0: the root is a leaf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Root {
    pub block: u64,
    pub level: u8,
}

/// One node, as read from (or about to be written to) its block.
pub struct Page {
    buf: Box<[u8]>,
}

/// The u16 at `o` of a node. `parse` checks every offset and length before it is used, so on
/// a parsed page this never falls back; past the end of a buffer it reads 0, which `parse`
/// refuses as an offset and bounds as a length. Through `get_array` (generic, so compiled into
/// this crate and inlined): this is the inner loop of every key search, and a call per read
/// doubled a lookup's time.
#[inline]
fn u16at(b: &[u8], o: usize) -> usize {
    get_array::<2>(b, o).map_or(0, |a| usize::from(u16::from_le_bytes(a)))
}

/// The block number an internal node's value names; 0 (the superblock, never a node, so the
/// read fails as "not a B+tree node") for a value of the wrong size, which `parse` refuses.
fn child_of(v: &[u8]) -> u64 {
    match v.len() {
        CHILD => get_u64_le(v, 0).unwrap_or(0),
        _ => 0,
    }
}

/// The value of an internal node's entry for child `blk`.
fn child_val(blk: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(CHILD);
    Writer::new(&mut v).u64_le(blk);
    v
}

fn corrupt(block: u64, what: &str) -> StoreError {
    StoreError::Io(format!("metadata block {block}: {what}"))
}

impl Page {
    #[cfg(test)]
    pub fn empty_leaf() -> Page {
        Page::build(0, &[], 0)
    }

    /// An internal node without children (cache tests).
    #[cfg(test)]
    pub fn empty_inner() -> Page {
        Page::build(1, &[], 0)
    }

    /// Validate a block read from the device (decoding never trusts a length).
    pub fn parse(buf: Vec<u8>, block: u64, level: Option<u8>) -> Result<Page, StoreError> {
        if buf.len() != PAGE || get_u32_le(&buf, OFF_MAGIC) != Ok(MAGIC) {
            return Err(corrupt(block, "not a B+tree node"));
        }
        if get_u32_le(&buf, OFF_CRC) != Ok(crc(&buf, block)) {
            return Err(corrupt(block, "bad checksum"));
        }
        if level.is_some_and(|l| l != buf[OFF_LEVEL]) {
            return Err(corrupt(block, "node at the wrong level"));
        }
        let count = u16at(&buf, OFF_COUNT);
        if HEADER + SLOT * count > PAGE {
            return Err(corrupt(block, "bad entry count"));
        }
        let p = Page {
            buf: buf.into_boxed_slice(),
        };
        for i in 0..count {
            let o = u16at(&p.buf, HEADER + SLOT * i);
            if o < HEADER + SLOT * count || o + ENTRY_HEAD > PAGE {
                return Err(corrupt(block, "bad entry offset"));
            }
            let (kl, vl) = (u16at(&p.buf, o), u16at(&p.buf, o + 2));
            if kl > MAX_KEY || vl > MAX_VAL || o + ENTRY_HEAD + kl + vl > PAGE {
                return Err(corrupt(block, "bad entry length"));
            }
            if p.level() > 0 && vl != CHILD {
                return Err(corrupt(block, "bad child pointer"));
            }
            if i > 0 && p.key(i - 1) >= p.key(i) {
                return Err(corrupt(block, "keys out of order"));
            }
        }
        Ok(p)
    }

    /// Encode `entries` (sorted, fitting: see `fits`) as a node for `block`.
    fn build(level: u8, entries: &[(Vec<u8>, Vec<u8>)], block: u64) -> Page {
        let mut b = vec![0u8; PAGE];
        put_u32_le(&mut b, OFF_MAGIC, MAGIC);
        b[OFF_LEVEL] = level;
        put_u16_le(&mut b, OFF_COUNT, entries.len() as u16);
        let mut end = PAGE;
        for (i, (k, v)) in entries.iter().enumerate() {
            end -= ENTRY_HEAD + k.len() + v.len();
            put_u16_le(&mut b, end, k.len() as u16);
            put_u16_le(&mut b, end + 2, v.len() as u16);
            put_bytes(&mut b, end + ENTRY_HEAD, k);
            put_bytes(&mut b, end + ENTRY_HEAD + k.len(), v);
            put_u16_le(&mut b, HEADER + SLOT * i, end as u16);
        }
        let c = crc(&b, block);
        put_u32_le(&mut b, OFF_CRC, c);
        Page {
            buf: b.into_boxed_slice(),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }
    pub fn level(&self) -> u8 {
        self.buf[OFF_LEVEL]
    }
    pub fn count(&self) -> usize {
        u16at(&self.buf, OFF_COUNT)
    }
    fn off(&self, i: usize) -> usize {
        u16at(&self.buf, HEADER + SLOT * i)
    }
    pub fn key(&self, i: usize) -> &[u8] {
        let o = self.off(i);
        let kl = u16at(&self.buf, o);
        &self.buf[o + ENTRY_HEAD..o + ENTRY_HEAD + kl]
    }
    pub fn val(&self, i: usize) -> &[u8] {
        let o = self.off(i);
        let (kl, vl) = (u16at(&self.buf, o), u16at(&self.buf, o + 2));
        &self.buf[o + ENTRY_HEAD + kl..o + ENTRY_HEAD + kl + vl]
    }
    fn child(&self, i: usize) -> u64 {
        child_of(self.val(i))
    }
    /// First entry with key ≥ `k`.
    fn lower_bound(&self, k: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.count());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.key(mid) < k {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
    /// The child of an internal node whose subtree holds `k` (child 0 for keys below all).
    fn child_for(&self, k: &[u8]) -> usize {
        let i = self.lower_bound(k);
        if i < self.count() && self.key(i) == k {
            i
        } else {
            i.saturating_sub(1)
        }
    }
    fn entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..self.count())
            .map(|i| (self.key(i).to_vec(), self.val(i).to_vec()))
            .collect()
    }
}

#[cfg(feature = "fuzzing")]
/// Give an edited node the CRC of `block` (the fuzz harness: fuzzing.rs).
pub fn seal(b: &mut [u8], block: u64) {
    if b.len() == PAGE {
        let c = crc(b, block);
        put_u32_le(b, OFF_CRC, c);
    }
}

fn crc(b: &[u8], block: u64) -> u32 {
    let c = crc32c::crc32c_append(crc32c::crc32c(&block.to_le_bytes()), &b[..OFF_CRC]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &b[OFF_CRC + 4..])
}

/// What an entry takes of a node: its slot, its head, its key and value.
fn entry_cost(k: &[u8], v: &[u8]) -> usize {
    SLOT + ENTRY_HEAD + k.len() + v.len()
}

/// How the tree reads nodes (through the page cache).
pub trait NodeRead {
    fn node(&self, block: u64, level: u8) -> Result<Arc<Page>, StoreError>;
    /// Bring `nodes` (block, level) into the cache ahead of their use, together; what cannot
    /// be read is left for `node` to report. The default reads nothing.
    fn read_ahead(&self, _nodes: &[(u64, u8)]) {}
}

/// What a merge needs besides reading: fresh blocks, writing nodes, and the old blocks it
/// replaced (freed only once the new root is durable: the caller's business).
pub trait NodeWrite: NodeRead {
    fn alloc(&mut self) -> Result<u64, StoreError>;
    fn write(&mut self, block: u64, page: Page) -> Result<(), StoreError>;
    fn replaced(&mut self, block: u64);
}

/// The value at `key`.
pub fn get(
    r: &dyn NodeRead,
    root: Option<Root>,
    key: &[u8],
) -> Result<Option<Vec<u8>>, StoreError> {
    let Some(root) = root else { return Ok(None) };
    let mut p = r.node(root.block, root.level)?;
    while p.level() > 0 {
        if p.count() == 0 {
            return Ok(None);
        }
        let c = p.child_for(key);
        let lvl = p.level() - 1;
        p = r.node(p.child(c), lvl)?;
    }
    let i = p.lower_bound(key);
    Ok((i < p.count() && p.key(i) == key).then(|| p.val(i).to_vec()))
}

/// Reads ahead the path to every key of `keys` (sorted and deduplicated here), one level at a
/// time: each level's nodes are asked of `read_ahead` together, so a batch of lookups costs
/// about one device round trip per level instead of one per node (log replay, mount.rs).
/// The nodes are only cached: a later `get` or `seek` reads them, and reports what is wrong.
pub fn prefetch(
    r: &dyn NodeRead,
    root: Option<Root>,
    keys: &mut Vec<Vec<u8>>,
) -> Result<(), StoreError> {
    let Some(root) = root else { return Ok(()) };
    keys.sort_unstable();
    keys.dedup();
    // Each node of the level, with the range of `keys` whose path goes through it.
    let mut level = vec![(root.block, 0..keys.len())];
    let mut lvl = root.level;
    loop {
        let nodes: Vec<(u64, u8)> = level.iter().map(|(b, _)| (*b, lvl)).collect();
        r.read_ahead(&nodes);
        if lvl == 0 || keys.is_empty() {
            return Ok(());
        }
        let mut next = Vec::new();
        for (b, range) in &level {
            let p = r.node(*b, lvl)?;
            if p.count() == 0 {
                continue;
            }
            let mut i = range.start;
            while i < range.end {
                let c = p.child_for(&keys[i]);
                let mut j = i + 1;
                while j < range.end && p.child_for(&keys[j]) == c {
                    j += 1;
                }
                next.push((p.child(c), i..j));
                i = j;
            }
        }
        level = next;
        lvl -= 1;
    }
}

/// Reads ahead the first `leaves` leaves (at least 2) whose keys may lie in `[from, to)` and
/// the internal nodes above them, one level at a time as `prefetch` does: a forward scan of
/// the range then finds them cached instead of reading one leaf per round trip (a directory
/// filter's scan, dirfilter.rs). Returns the first key of the leaf half-way through the
/// window, where the scan should read ahead again; None when the window reaches `to` (or the
/// tree's end). The nodes are only cached: the scan reads them, and reports what is wrong.
pub fn prefetch_range(
    r: &dyn NodeRead,
    root: Option<Root>,
    from: &[u8],
    to: &[u8],
    leaves: usize,
) -> Result<Option<Vec<u8>>, StoreError> {
    let Some(root) = root else { return Ok(None) };
    let leaves = leaves.max(2);
    // The nodes of the level, in key order, with their lowest key (None: the one holding
    // `from`); and whether the range goes on past them (a level cut at `leaves` nodes).
    let mut level: Vec<(u64, Option<Vec<u8>>)> = vec![(root.block, None)];
    let mut cut = false;
    let mut lvl = root.level;
    while lvl > 0 {
        let nodes: Vec<(u64, u8)> = level.iter().map(|(b, _)| (*b, lvl)).collect();
        r.read_ahead(&nodes);
        let mut next = Vec::new();
        'nodes: for (n, (b, _)) in level.iter().enumerate() {
            let p = r.node(*b, lvl)?;
            let start = if n == 0 { p.child_for(from) } else { 0 };
            for i in start..p.count() {
                let first = (n > 0 || i > start).then(|| p.key(i));
                if first.is_some_and(|k| k >= to) {
                    break 'nodes;
                }
                if next.len() == leaves {
                    cut = true;
                    break 'nodes;
                }
                next.push((p.child(i), first.map(<[u8]>::to_vec)));
            }
        }
        level = next;
        lvl -= 1;
    }
    let nodes: Vec<(u64, u8)> = level.iter().map(|(b, _)| (*b, 0)).collect();
    r.read_ahead(&nodes);
    if !cut || level.len() < 2 {
        return Ok(None);
    }
    Ok(level.swap_remove(level.len() / 2).1)
}

/// A forward cursor over `[from, ..)`: holds the path from the root to the current leaf.
pub struct Cursor {
    stack: Vec<(Arc<Page>, usize)>,
}

impl Cursor {
    pub fn seek(r: &dyn NodeRead, root: Option<Root>, from: &[u8]) -> Result<Cursor, StoreError> {
        let mut stack = Vec::new();
        if let Some(root) = root {
            let mut p = r.node(root.block, root.level)?;
            while p.level() > 0 && p.count() > 0 {
                let c = p.child_for(from);
                let next = r.node(p.child(c), p.level() - 1)?;
                stack.push((p, c));
                p = next;
            }
            if p.level() == 0 {
                let i = p.lower_bound(from);
                stack.push((p, i));
            }
        }
        Ok(Cursor { stack })
    }

    /// The next entry (key, value), or None at the end of the tree.
    pub fn next(&mut self, r: &dyn NodeRead) -> Result<Option<Entry>, StoreError> {
        loop {
            let Some((p, i)) = self.stack.last_mut() else {
                return Ok(None);
            };
            if p.level() == 0 {
                if *i < p.count() {
                    let e = (p.key(*i).to_vec(), p.val(*i).to_vec());
                    *i += 1;
                    return Ok(Some(e));
                }
                self.stack.pop();
                continue;
            }
            // An internal node: step to its next child and descend to that child's first leaf.
            *i += 1;
            if *i >= p.count() {
                self.stack.pop();
                continue;
            }
            let (mut blk, mut lvl) = (p.child(*i), p.level() - 1);
            loop {
                let c = r.node(blk, lvl)?;
                if c.level() == 0 {
                    self.stack.push((c, 0));
                    break;
                }
                blk = c.child(0);
                lvl = c.level() - 1;
                self.stack.push((c, 0));
            }
        }
    }
}

/// Every block of the tree, root first, then level by level; reads only the internal nodes
/// (the NVMe guard's walk after a mount, meta_blocks.rs; fsck).
pub fn all_blocks(r: &dyn NodeRead, root: Option<Root>) -> Result<Vec<u64>, StoreError> {
    let mut out = Vec::new();
    let Some(root) = root else { return Ok(out) };
    let mut level = vec![root.block];
    let mut lvl = root.level;
    loop {
        out.extend(&level);
        if lvl == 0 {
            return Ok(out);
        }
        let mut next = Vec::new();
        for b in level {
            let p = r.node(b, lvl)?;
            next.extend((0..p.count()).map(|i| p.child(i)));
        }
        level = next;
        lvl -= 1;
    }
}

/// Merge `changes` into the tree at `root`, copy-on-write; returns the new root (None: the
/// tree is empty) and how many keys starting with byte `kind` it added (less those it
/// removed): the checkpoint's inode count follows its tree exactly.
pub fn merge(
    w: &mut dyn NodeWrite,
    root: Option<Root>,
    changes: &Changes,
    kind: u8,
) -> Result<(Option<Root>, i64), StoreError> {
    let ch: Vec<(&Vec<u8>, &Option<Vec<u8>>)> = changes.iter().collect();
    let mut delta = 0i64;
    let (entries, level) = match root {
        None => (apply_leaf(Vec::new(), &ch, kind, &mut delta), 0),
        Some(r) => {
            let p = w.node(r.block, r.level)?;
            w.replaced(r.block);
            (merge_node(w, &p, &ch, kind, &mut delta)?, r.level)
        }
    };
    Ok((finish_root(w, entries, level)?, delta))
}

fn finish_root(
    w: &mut dyn NodeWrite,
    mut entries: Vec<(Vec<u8>, Vec<u8>)>,
    mut level: u8,
) -> Result<Option<Root>, StoreError> {
    loop {
        if entries.is_empty() {
            return Ok(None);
        }
        if level > 0 && entries.len() == 1 {
            // A root with one child: the child is the root (the tree got shorter).
            let mut blk = child_of(&entries[0].1);
            let mut lvl = level - 1;
            loop {
                let p = w.node(blk, lvl)?;
                if lvl == 0 || p.count() != 1 {
                    return Ok(Some(Root {
                        block: blk,
                        level: lvl,
                    }));
                }
                w.replaced(blk);
                blk = p.child(0);
                lvl -= 1;
            }
        }
        let packed = pack(w, level, entries)?;
        if packed.len() == 1 {
            return Ok(Some(Root {
                block: child_of(&packed[0].1),
                level,
            }));
        }
        entries = packed;
        level += 1;
    }
}

fn apply_leaf(
    old: Vec<(Vec<u8>, Vec<u8>)>,
    ch: &[(&Vec<u8>, &Option<Vec<u8>>)],
    kind: u8,
    delta: &mut i64,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::with_capacity(old.len() + ch.len());
    let mut old = old.into_iter().peekable();
    for (k, v) in ch {
        while old.peek().is_some_and(|(ok, _)| ok < *k) {
            out.extend(old.next());
        }
        let had = old.peek().is_some_and(|(ok, _)| ok == *k);
        if had {
            old.next();
        }
        if k.first() == Some(&kind) {
            *delta += v.is_some() as i64 - had as i64;
        }
        if let Some(v) = v {
            out.push(((*k).clone(), v.clone()));
        }
    }
    out.extend(old);
    out
}

/// The entries of `p`'s level after applying `ch` to its subtree (children of an internal
/// node that changed are rewritten; runs of rewritten neighbours are repacked together, and a
/// run that came out small absorbs an unchanged neighbour, so nodes do not stay near-empty).
fn merge_node(
    w: &mut dyn NodeWrite,
    p: &Page,
    ch: &[(&Vec<u8>, &Option<Vec<u8>>)],
    kind: u8,
    delta: &mut i64,
) -> Result<Vec<Entry>, StoreError> {
    if p.level() == 0 {
        return Ok(apply_leaf(p.entries(), ch, kind, delta));
    }
    let n = p.count();
    let lvl = p.level() - 1;
    let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut acc: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut acc_dirty = false;
    // Whether the last entry of `out` is an unchanged child (one a small run may absorb).
    let mut last_unchanged = false;
    let mut rest = ch;
    for i in 0..n {
        // Changes for child i: keys below child i+1's first key (child 0 also takes the
        // keys below its own first key).
        let take = if i + 1 < n {
            let next = p.key(i + 1);
            rest.partition_point(|(k, _)| k.as_slice() < next)
        } else {
            rest.len()
        };
        let (mine, after) = rest.split_at(take);
        rest = after;
        let blk = p.child(i);
        if !mine.is_empty() {
            let c = w.node(blk, lvl)?;
            w.replaced(blk);
            acc.extend(merge_node(w, &c, mine, kind, delta)?);
            acc_dirty = true;
            continue;
        }
        if acc_dirty && acc_bytes(&acc) < PAGE / 4 {
            // A small rewritten run: take this unchanged neighbour in.
            let c = w.node(blk, lvl)?;
            w.replaced(blk);
            acc.extend(c.entries());
            continue;
        }
        // (out's last entry becomes this unchanged child, whatever the flush pushed.)
        flush(w, lvl, &mut acc, &mut out, &mut acc_dirty)?;
        out.push((p.key(i).to_vec(), p.val(i).to_vec()));
        last_unchanged = true;
    }
    if acc_dirty && acc_bytes(&acc) < PAGE / 4 && last_unchanged {
        // Small at the end: take the unchanged neighbour on the left.
        if let Some((_, v)) = out.last() {
            let blk = child_of(v);
            let c = w.node(blk, lvl)?;
            w.replaced(blk);
            out.pop();
            let mut e = c.entries();
            e.append(&mut acc);
            acc = e;
        }
    }
    flush(w, lvl, &mut acc, &mut out, &mut acc_dirty)?;
    Ok(out)
}

fn acc_bytes(e: &[(Vec<u8>, Vec<u8>)]) -> usize {
    e.iter().map(|(k, v)| entry_cost(k, v)).sum()
}

fn flush(
    w: &mut dyn NodeWrite,
    lvl: u8,
    acc: &mut Vec<(Vec<u8>, Vec<u8>)>,
    out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    dirty: &mut bool,
) -> Result<(), StoreError> {
    if !acc.is_empty() {
        out.extend(pack(w, lvl, std::mem::take(acc))?);
    }
    *dirty = false;
    Ok(())
}

/// Write `entries` as nodes of `level`, filled up (the last two balanced so the last is not
/// tiny); returns one (first key, block) entry per node for the level above.
fn pack(
    w: &mut dyn NodeWrite,
    level: u8,
    entries: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Vec<Entry>, StoreError> {
    let cap = PAGE - HEADER;
    let mut groups: Vec<Vec<(Vec<u8>, Vec<u8>)>> = Vec::new();
    let mut cur = Vec::new();
    let mut used = 0;
    for (k, v) in entries {
        let c = entry_cost(&k, &v);
        if used + c > cap && !cur.is_empty() {
            groups.push(std::mem::take(&mut cur));
            used = 0;
        }
        used += c;
        cur.push((k, v));
    }
    if !cur.is_empty() {
        groups.push(cur);
    }
    let n = groups.len();
    if n >= 2 && acc_bytes(&groups[n - 1]) < cap / 3 {
        // Move entries from the second last into the last until they are about even.
        let mut last = groups.pop().unwrap_or_default();
        let prev = groups.last_mut().map(std::mem::take).unwrap_or_default();
        let total = acc_bytes(&prev) + acc_bytes(&last);
        let mut head = Vec::new();
        let mut hb = 0;
        let mut it = prev.into_iter().peekable();
        while let Some((k, v)) = it.next() {
            hb += entry_cost(&k, &v);
            head.push((k, v));
            if hb >= total / 2 || it.peek().is_none() {
                break;
            }
        }
        let mut tail: Vec<_> = it.collect();
        tail.append(&mut last);
        if let Some(g) = groups.last_mut() {
            *g = head;
        }
        groups.push(tail);
        groups.retain(|g| !g.is_empty());
    }
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        let blk = w.alloc()?;
        let first = g[0].0.clone();
        w.write(blk, Page::build(level, &g, blk))?;
        out.push((first, child_val(blk)));
    }
    Ok(out)
}

#[cfg(test)]
#[path = "btree_tests.rs"]
mod tests;
