//! The store's on-disk structures under a fuzzer (`fuzz/` target `store_image`,
//! docs/fuzzing.md): a volume a real store wrote, with its metadata blocks — checkpoint
//! slots, B+tree nodes, the blobs of the free-space list and client records, any data-area
//! block — edited by the input, then mounted, walked, changed, written back and mounted
//! again. The edits are sealed again (node and checkpoint CRCs, blob checksums) unless the
//! input says not to, so the decoders behind the checksums see arbitrary contents: a disk
//! may say anything, and nothing it says may panic, hang or allocate without bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use metalog::BlockDev;

use super::btree::{self, Root, PAGE};
use super::format::{self, BlobRef, Checkpoint};
use super::types::ROOT_INO;
use super::types::{FileType, Ino, NewNode, SetAttrs, Stable, StoreOptions, BLOCK};
use super::XATTR_SIZE_MAX;
use super::{Store, XattrSet};

/// The base volume: the smallest `mkfs` makes (4 MiB of log, 1 MiB and a bit of data).
const VOLUME: u64 = 6 << 20;
/// Entries the base holds: enough for a tree of two levels (a root over two leaves), and no
/// more: every input walks each entry, and the walk is most of an input's time (with 120
/// files and eleven leaves, 75 % of it, for no other kind of block or record).
const BASE_FILES: usize = 20;
/// Bounds of the walk of a mounted image (so a corrupt tree cannot make one input slow).
/// The base has `BASE_FILES` + 2 entries; past that only a corrupt tree (a directory that
/// holds itself or an ancestor) goes, and each entry costs a lookup and five reads.
const WALK_ENTRIES: usize = 48;
const WALK_DEPTH: usize = 6;
/// Entries per READDIR: fewer than each directory of the base holds, so that the walk also
/// resumes from a cookie.
const READDIR_ENTRIES: usize = 6;

/// Input: `flags`, then edits `(target u8, offset u16 le, len u8, bytes)` until it ends.
pub mod flag {
    /// Re-seal edited tree nodes (their CRC).
    pub const SEAL_NODES: u8 = 1;
    /// Re-seal the checkpoint slots (their CRC) and the checksums of the blobs they name.
    pub const SEAL_CHECKPOINTS: u8 = 2;
    /// After the walk: change the namespace, write back, unmount, mount and walk again.
    pub const CHANGE: u8 = 4;
}

/// What a metadata block of the base volume is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Checkpoint(u64),
    Node,
    Blob,
}

struct Base {
    image: Arc<Vec<u8>>,
    /// Metadata blocks an edit may target, then any data-area block.
    targets: Vec<(u64, Kind)>,
    data_start: u64,
    data_blocks: u64,
    meta_start: u64,
    /// The tree nodes of the newest checkpoint (the one a mount uses).
    live_nodes: Vec<u64>,
}

/// One input against the base volume.
pub fn image(data: &[u8]) {
    let Some(base) = base() else {
        return;
    };
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let dev = Arc::new(Overlay::new(base.image.clone()));
    let mut edited_nodes = Vec::new();
    while rest.len() >= 4 {
        let t = rest[0] as usize;
        let off = u16::from_le_bytes([rest[1], rest[2]]) as usize % PAGE;
        let len = (rest[3] as usize).min(rest.len() - 4).min(PAGE - off);
        let bytes = &rest[4..4 + len];
        rest = &rest[4 + len..];
        let block = match base.targets.get(t % (base.targets.len() + 1)) {
            Some(&(b, kind)) => {
                if kind == Kind::Node {
                    edited_nodes.push(b);
                }
                b
            }
            // Any block of the data area, named by the edit's offset.
            None => base.data_start + off as u64 % base.data_blocks.max(1),
        };
        dev.patch(block, off, bytes);
    }
    if flags & flag::SEAL_NODES != 0 {
        for b in edited_nodes {
            dev.with_block(b, |buf| btree::seal(buf, b));
        }
    }
    if flags & flag::SEAL_CHECKPOINTS != 0 {
        for slot in 0..2 {
            seal_checkpoint(&dev, base.meta_start, slot);
        }
    }
    let opts = StoreOptions {
        sync: false,
        // Small, so that evictions and re-reads of corrupt nodes happen too.
        metadata_cache: 64 * BLOCK,
        ..StoreOptions::default()
    };
    let Ok(store) = Store::open_dev(dev.clone(), opts.clone()) else {
        return;
    };
    walk(&store);
    if flags & flag::CHANGE == 0 {
        return;
    }
    change(&store);
    let _ = store.write_back();
    let _ = store.unmount();
    drop(store);
    if let Ok(store) = Store::open_dev(dev, opts) {
        walk(&store);
    }
}

/// Re-seal a checkpoint slot after edits: its CRC, then the checksums of the blobs it names
/// (computed over the chain as it is now, when the chain can be followed at all).
fn seal_checkpoint(dev: &Overlay, meta_start: u64, slot: u64) {
    let block = meta_start + slot;
    dev.with_block(block, |buf| format::seal_checkpoint(slot, buf));
    let mut buf = vec![0u8; PAGE];
    if dev.read_at(&mut buf, block * BLOCK).is_err() {
        return;
    }
    let Some(mut ck) = Checkpoint::decode(slot, &buf) else {
        return;
    };
    for r in [&mut ck.free, &mut ck.clients] {
        if let Some(crc) = blob_crc(dev, r) {
            r.crc = crc;
        }
    }
    let sealed = ck.encode(slot);
    let _ = dev.write_at(&sealed, block * BLOCK);
}

/// The checksum a blob's chain would need (bounded: a corrupt chain may loop).
fn blob_crc(dev: &Overlay, r: &BlobRef) -> Option<u32> {
    if r.blocks == 0 || r.blocks > 64 {
        return None;
    }
    let mut out = Vec::new();
    let mut at = r.start;
    let mut buf = vec![0u8; PAGE];
    for _ in 0..r.blocks {
        dev.read_at(&mut buf, at.checked_mul(BLOCK)?).ok()?;
        out.extend_from_slice(&buf[8..]);
        at = format::blob_next(&buf);
    }
    out.truncate(r.bytes as usize);
    Some(crc32c::crc32c(&out))
}

/// Everything a client could ask of the namespace, bounded; returns the entries visited.
fn walk(store: &Store) -> usize {
    let mut budget = WALK_ENTRIES;
    let mut stack = vec![(ROOT_INO, 0usize)];
    let _ = store.fsstat();
    let _ = store.client_records();
    while let Some((dir, depth)) = stack.pop() {
        let mut cookie = 0;
        while let Ok(rd) = store.readdir(dir, cookie, READDIR_ENTRIES) {
            for e in &rd.entries {
                if budget == 0 {
                    return WALK_ENTRIES;
                }
                budget -= 1;
                cookie = e.cookie;
                // LOOKUP decodes the inode GETATTR would; GETATTR only where it failed.
                let found = store.lookup(dir, &e.name);
                if !found.is_ok_and(|a| a.ino == e.attr.ino) {
                    let _ = store.getattr(e.attr.ino);
                }
                visit(store, &e.attr);
                if e.attr.ftype == FileType::Directory && depth < WALK_DEPTH {
                    stack.push((e.attr.ino, depth + 1));
                }
            }
            if rd.eof || rd.entries.is_empty() {
                break;
            }
        }
    }
    WALK_ENTRIES - budget
}

fn visit(store: &Store, a: &super::types::Attr) {
    let ino = a.ino;
    match a.ftype {
        FileType::Regular => {
            let _ = store.read(ino, 0, 2 * BLOCK as u32);
            let _ = store.extents(ino, 0, 4);
        }
        FileType::Symlink => {
            let _ = store.readlink(ino);
        }
        _ => {}
    }
    if let Ok(names) = store.listxattrs(ino) {
        for n in names.iter().take(4) {
            let _ = store.getxattr(ino, n);
        }
    }
}

/// A few changes of each kind the tree holds: an inode, a directory entry, extents, an
/// extended attribute, a removal, a client record.
fn change(store: &Store) {
    let attrs = SetAttrs::default();
    if let Ok((f, _)) = store.create(ROOT_INO, b"fz", NewNode::Regular, &attrs, (0, 0)) {
        let _ = store.write(f.ino, 0, &[0x5a; 6000], Stable::Unstable);
        let _ = store.setxattr(f.ino, b"user.fz", &[1; 100], XattrSet::Either);
    }
    let _ = store.create(ROOT_INO, b"fzd", NewNode::Directory, &attrs, (0, 0));
    let _ = store.remove(ROOT_INO, b"f7");
    let _ = store.rename(ROOT_INO, b"f8", ROOT_INO, b"f9");
    let _ = store.put_client_record(b"fz", Some(b"record"));
}

fn base() -> Option<&'static Base> {
    static BASE: OnceLock<Option<Base>> = OnceLock::new();
    BASE.get_or_init(build_base).as_ref()
}

/// A volume with files (some written, with extended attributes), directories and a
/// symlink, written back and cleanly unmounted; the blocks of its metadata listed.
fn build_base() -> Option<Base> {
    let dev = Arc::new(metalog::CrashDev::new(VOLUME, 1));
    Store::mkfs_dev(dev.clone(), false).ok()?;
    let opts = StoreOptions {
        sync: false,
        ..StoreOptions::default()
    };
    let store = Store::open_dev(dev.clone(), opts).ok()?;
    let attrs = SetAttrs::default();
    let d = store
        .create(ROOT_INO, b"d", NewNode::Directory, &attrs, (0, 0))
        .ok()?
        .0;
    for i in 0..BASE_FILES {
        let dir = if i % 3 == 0 { d.ino } else { ROOT_INO };
        let (f, _) = store
            .create(
                dir,
                format!("f{i}").as_bytes(),
                NewNode::Regular,
                &attrs,
                (0, 0),
            )
            .ok()?;
        if i % 10 == 0 {
            store
                .write(f.ino, 0, &[i as u8; 5000], Stable::Unstable)
                .ok()?;
            let big = vec![7u8; XATTR_SIZE_MAX.min(1500)];
            store
                .setxattr(f.ino, b"user.x", &big, XattrSet::Either)
                .ok()?;
        }
    }
    store
        .create(
            ROOT_INO,
            b"l",
            NewNode::Symlink(b"f1".to_vec()),
            &attrs,
            (0, 0),
        )
        .ok()?;
    store.put_client_record(b"client", Some(&[3; 200])).ok()?;
    store.write_back().ok()?;
    store.unmount().ok()?;
    drop(store);

    let mut image = vec![0u8; VOLUME as usize];
    dev.read_at(&mut image, 0).ok()?;
    let sb = layout::Superblock::decode(&image[..PAGE]).ok()?;
    let g = sb.geometry;
    let mut targets = Vec::new();
    let (mut live_nodes, mut live_seq) = (Vec::new(), None);
    let block = |b: u64| -> Option<&[u8]> {
        let s = usize::try_from(b.checked_mul(BLOCK)?).ok()?;
        image.get(s..s + PAGE)
    };
    for slot in 0..2 {
        let b = g.meta_start + slot;
        targets.push((b, Kind::Checkpoint(slot)));
        let Some(ck) = Checkpoint::decode(slot, block(b)?) else {
            continue;
        };
        for r in [ck.free, ck.clients] {
            let mut at = r.start;
            for _ in 0..r.blocks {
                targets.push((at, Kind::Blob));
                at = format::blob_next(block(at)?);
            }
        }
        let newest = ck.seq % 2 == slot && live_seq.is_none_or(|s| ck.seq > s);
        if newest {
            live_seq = Some(ck.seq);
            live_nodes.clear();
        }
        if let Some(root) = ck.root {
            let mut todo = vec![root];
            while let Some(Root { block: b, level }) = todo.pop() {
                let page = btree::Page::parse(block(b)?.to_vec(), b, Some(level)).ok()?;
                targets.push((b, Kind::Node));
                if newest {
                    live_nodes.push(b);
                }
                if level > 0 {
                    for i in 0..page.count() {
                        let v = page.val(i);
                        let child = u64::from_le_bytes(v.try_into().ok()?);
                        todo.push(Root {
                            block: child,
                            level: level - 1,
                        });
                    }
                }
            }
        }
    }
    targets.sort();
    targets.dedup();
    Some(Base {
        image: Arc::new(image),
        targets,
        data_start: g.data_start,
        data_blocks: g.data_blocks,
        meta_start: g.meta_start,
        live_nodes,
    })
}

/// The base image under a private copy-on-write overlay of 4 KiB blocks, so that an input
/// costs what it changes, not a copy of the volume.
struct Overlay {
    base: Arc<Vec<u8>>,
    blocks: Mutex<HashMap<u64, Vec<u8>>>,
}

impl Overlay {
    fn new(base: Arc<Vec<u8>>) -> Overlay {
        Overlay {
            base,
            blocks: Mutex::new(HashMap::new()),
        }
    }

    fn with_block(&self, block: u64, f: impl FnOnce(&mut [u8])) {
        let mut m = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        let base = &self.base;
        let b = m.entry(block).or_insert_with(|| {
            let s = (block * BLOCK) as usize;
            base.get(s..s + PAGE)
                .map_or_else(|| vec![0; PAGE], |b| b.to_vec())
        });
        f(b);
    }

    fn patch(&self, block: u64, off: usize, bytes: &[u8]) {
        if (block + 1) * BLOCK <= self.size() {
            self.with_block(block, |b| b[off..off + bytes.len()].copy_from_slice(bytes));
        }
    }
}

fn in_range(off: u64, len: usize, size: u64) -> std::io::Result<()> {
    match off.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(std::io::Error::from(std::io::ErrorKind::InvalidInput)),
    }
}

impl BlockDev for Overlay {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        in_range(offset, buf.len(), self.size())?;
        let m = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let (block, inb) = (at / BLOCK, (at % BLOCK) as usize);
            let n = (PAGE - inb).min(buf.len() - done);
            let src = match m.get(&block) {
                Some(b) => &b[inb..inb + n],
                None => &self.base[at as usize..at as usize + n],
            };
            buf[done..done + n].copy_from_slice(src);
            done += n;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        in_range(offset, buf.len(), self.size())?;
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let (block, inb) = (at / BLOCK, (at % BLOCK) as usize);
            let n = (PAGE - inb).min(buf.len() - done);
            self.with_block(block, |b| {
                b[inb..inb + n].copy_from_slice(&buf[done..done + n])
            });
            done += n;
        }
        Ok(())
    }

    fn write_fua(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.write_at(buf, offset)
    }

    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn size(&self) -> u64 {
        self.base.len() as u64
    }
}

/// Seeds: the base as it is with each combination of flags, and an edit of each kind of
/// metadata block (a byte of a node's first entry, a checkpoint's root level, a blob byte).
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut v = Vec::new();
    for f in 0..8u8 {
        v.push((format!("flags{f}"), vec![f]));
    }
    let Some(base) = base() else {
        return v;
    };
    let all = flag::SEAL_NODES | flag::SEAL_CHECKPOINTS | flag::CHANGE;
    for (i, &(_, kind)) in base.targets.iter().enumerate().take(255) {
        let (off, bytes): (u16, &[u8]) = match kind {
            Kind::Checkpoint(_) => (32, &[1]),
            Kind::Node => ((PAGE - 64) as u16, &[0xff, 0x00]),
            Kind::Blob => (8, &[0, 0, 0, 0]),
        };
        let mut d = vec![all, i as u8];
        d.extend_from_slice(&off.to_le_bytes());
        d.push(bytes.len() as u8);
        d.extend_from_slice(bytes);
        v.push((format!("edit{i}-{kind:?}"), d));
    }
    v
}

/// The targets of the base volume by kind: (checkpoints, nodes, nodes of the newest
/// checkpoint's tree, blob blocks).
pub fn base_shape() -> Option<(usize, usize, usize, usize)> {
    let b = base()?;
    let n = |k: fn(&Kind) -> bool| b.targets.iter().filter(|(_, x)| k(x)).count();
    Some((
        n(|k| matches!(k, Kind::Checkpoint(_))),
        n(|k| *k == Kind::Node),
        b.live_nodes.len(),
        n(|k| *k == Kind::Blob),
    ))
}

/// Whether a mount of the base, unedited, walks the whole namespace (the harness's own
/// check that its base and overlay are sound).
pub fn base_mounts_whole() -> bool {
    let Some(base) = base() else {
        return false;
    };
    let dev = Arc::new(Overlay::new(base.image.clone()));
    let Ok(store) = Store::open_dev(dev, StoreOptions::default()) else {
        return false;
    };
    let d = match store.lookup(ROOT_INO, b"d") {
        Ok(a) => a.ino,
        Err(_) => return false,
    };
    (0..BASE_FILES).all(|i| {
        let dir: Ino = if i % 3 == 0 { d } else { ROOT_INO };
        store.lookup(dir, format!("f{i}").as_bytes()).is_ok()
    }) && store.readlink(
        store
            .lookup(ROOT_INO, b"l")
            .map(|a| a.ino)
            .unwrap_or(Ino(0)),
    ) == Ok(b"f1".to_vec())
        && store.client_records().len() == 1
}

#[cfg(test)]
mod tests {
    use super::super::keys::{be64, K_DIRENT};
    use super::super::StoreError;
    use super::*;

    /// Finding 1 of `store_image` (docs/fuzzing.md): a node with a valid CRC holding a
    /// directory entry whose key is cut short (11 bytes instead of 17) panicked in READDIR,
    /// reading the cookie past the key's end. Now the directory reads as a corrupt block
    /// does, with an error.
    #[test]
    fn a_short_directory_entry_key_is_an_error_not_a_panic() {
        let base = base().unwrap();
        let mut hit = 0;
        for &b in &base.live_nodes {
            let s = (b * BLOCK) as usize;
            let raw = &base.image[s..s + PAGE];
            let Ok(page) = btree::Page::parse(raw.to_vec(), b, Some(0)) else {
                continue;
            };
            let cut = |i: usize| {
                let k = page.key(i);
                k.len() == 17 && k[0] == K_DIRENT && (i == 0 || page.key(i - 1) < &k[..11])
            };
            let Some(i) = (0..page.count()).find(|&i| cut(i)) else {
                continue;
            };
            let (k, v) = (page.key(i).to_vec(), page.val(i).to_vec());
            // The entry is [key_len u16][val_len u16][key][val]; its key is unique in the node.
            let o = raw.windows(k.len()).position(|w| w == &k[..]).unwrap() - 4;
            let dev = Arc::new(Overlay::new(base.image.clone()));
            dev.with_block(b, |buf| {
                buf[o..o + 2].copy_from_slice(&11u16.to_le_bytes());
                buf[o + 4..o + 15].copy_from_slice(&k[..11]);
                buf[o + 15..o + 15 + v.len()].copy_from_slice(&v);
                btree::seal(buf, b);
            });
            let store = Store::open_dev(dev, StoreOptions::default()).unwrap();
            let r = store.readdir(Ino(be64(&k, 1)), 0, 1000);
            assert!(
                matches!(r, Err(StoreError::Io(_))),
                "READDIR over the cut entry: {:?}",
                r.map(|d| d.entries.len())
            );
            hit += 1;
        }
        assert!(hit > 0, "no leaf of the base holds a directory entry");
    }

    /// The walk of the unedited base visits every entry within its budget (so the bound
    /// stops only a corrupt tree), and with the change and a second mount, the new ones.
    #[test]
    fn the_walk_of_the_base_visits_every_entry_within_its_budget() {
        let base = base().unwrap();
        let dev = Arc::new(Overlay::new(base.image.clone()));
        let store = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
        // "d", "l" and the files.
        assert_eq!(walk(&store), BASE_FILES + 2);
        change(&store);
        store.write_back().unwrap();
        store.unmount().unwrap();
        drop(store);
        let store = Store::open_dev(dev, StoreOptions::default()).unwrap();
        // "fz" and "fzd" came, "f7" went; "f8" became "f9" (the other "f9" is in "d").
        let n = walk(&store);
        assert_eq!(n, BASE_FILES + 2 + 2 - 1);
        assert!(n < WALK_ENTRIES);
    }

    /// Found by reading the blob code while writing `store_image` (docs/fuzzing.md): a
    /// checkpoint whose free-space list names 1,000 blocks over a chain that loops on its
    /// first block made the mount read that block 1,000 times into one buffer before the
    /// checksum refused it; any count up to 2^32 was taken (16 TiB). Now a count past the
    /// volume's blocks, and a chain that comes back to a block, are refused at once.
    #[test]
    fn a_blob_chain_that_loops_is_refused_at_once() {
        let base = base().unwrap();
        let dev = Arc::new(Overlay::new(base.image.clone()));
        let mut refused = 0;
        for slot in 0..2 {
            let block = base.meta_start + slot;
            let mut b = vec![0u8; PAGE];
            dev.read_at(&mut b, block * BLOCK).unwrap();
            let Some(mut ck) = Checkpoint::decode(slot, &b) else {
                continue;
            };
            let first = ck.free.start;
            dev.with_block(first, |buf| buf[..8].copy_from_slice(&first.to_le_bytes()));
            ck.free.blocks = 1000;
            dev.write_at(&ck.encode(slot), block * BLOCK).unwrap();
            refused += 1;
        }
        assert!(refused > 0);
        let err = Store::open_dev(dev, StoreOptions::default()).err().unwrap();
        assert!(err.to_string().contains("loops"), "{err}");
    }
}
