//! Typed, idempotent, logical log items (docs/design.md §3). Each item has set semantics —
//! replaying it twice, or replaying an older suffix of the log over a newer image, ends in the same
//! state — which is what makes recovery re-runnable.
//!
//! Wire form of one item: `tag u8 | body_len u32 | body`; a checkpoint's payload is a sequence
//! of items. Each family (one file each) implements [`ItemOps`].

mod codec;
mod dirent;
mod extent;
mod inode;
mod intent;
mod opaque;
mod space;

pub use codec::{DecodeError, Reader};

/// A timestamp: seconds and nanoseconds.
pub type Time = (i64, u32);

/// One logical change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// The full inode core (set semantics).
    InodeCore {
        ino: u64,
        gen: u32,
        ftype: u8,
        mode: u32,
        uid: u32,
        gid: u32,
        nlink: u32,
        rdev: (u32, u32),
        size: u64,
        atime: Time,
        mtime: Time,
        ctime: Time,
        crtime: Time,
        change: u64,
        parent: u64,
    },
    /// Timestamps and change attribute only (the lazily-logged LAYOUTCOMMIT case of seed 002).
    Timestamps {
        ino: u64,
        atime: Time,
        mtime: Time,
        ctime: Time,
        change: u64,
    },
    /// File size.
    Size { ino: u64, size: u64 },
    /// Map `[file_block, +len_blocks)` to `phys_block`, unwritten or written.
    ExtentSet {
        ino: u64,
        file_block: u64,
        len_blocks: u64,
        phys_block: u64,
        unwritten: bool,
    },
    /// Mark a mapped range written (client data landed: docs/design.md §3 flush rule).
    ExtentConvert {
        ino: u64,
        file_block: u64,
        len_blocks: u64,
    },
    /// Punch a range from the map.
    ExtentFree {
        ino: u64,
        file_block: u64,
        len_blocks: u64,
    },
    /// Add (or replace) a directory entry.
    DirentAdd {
        dir: u64,
        name: Vec<u8>,
        ino: u64,
        cookie: u64,
    },
    /// Remove a directory entry.
    DirentRemove { dir: u64, name: Vec<u8> },
    /// The inode is free.
    InodeFree { ino: u64 },
    /// Blocks became allocated.
    SpaceAlloc { start_block: u64, len_blocks: u64 },
    /// Blocks became free.
    SpaceFree { start_block: u64, len_blocks: u64 },
    /// A promise to apply `body`; replayed unless a `Done { id }` follows in the log.
    Intent { id: u64, body: Vec<Item> },
    /// The intent `id` was carried out.
    Done { id: u64 },
    /// A store-specific record; `value: None` deletes `(kind, key)`.
    Opaque {
        kind: u16,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    },
}

impl Item {
    /// Whether this item makes client-written blocks readable as data: with an external log the
    /// data device must be flushed before its checkpoint is written (docs/design.md §3 flush
    /// rules).
    pub fn converts(&self) -> bool {
        match self {
            Item::ExtentConvert { .. } => true,
            Item::ExtentSet { unwritten, .. } => !unwritten,
            Item::Intent { body, .. } => body.iter().any(Item::converts),
            _ => false,
        }
    }
}

/// Encode/decode of one item family (docs/design.md, house rule 5, as `xlog_recover_item_ops`).
pub(crate) trait ItemOps {
    /// The wire tags this family owns.
    const TAGS: &'static [u8];
    /// Append the body of `item` if it belongs to this family, returning its tag.
    fn encode_body(item: &Item, w: &mut Vec<u8>) -> Option<u8>;
    /// Decode the body of an item with `tag` (one of `TAGS`).
    fn decode_body(tag: u8, r: &mut Reader) -> Result<Item, DecodeError>;
}

fn encode_with<F: ItemOps>(item: &Item, w: &mut Vec<u8>) -> bool {
    let at = w.len();
    w.extend_from_slice(&[0u8; 5]);
    match F::encode_body(item, w) {
        Some(tag) => {
            let len = (w.len() - at - 5) as u32;
            w[at] = tag;
            bytecodec::put_u32_le(w, at + 1, len);
            true
        }
        None => {
            w.truncate(at);
            false
        }
    }
}

/// Append the wire form of `item` to `w`.
pub fn encode_item(item: &Item, w: &mut Vec<u8>) {
    let _ = encode_with::<inode::InodeItems>(item, w)
        || encode_with::<extent::ExtentItems>(item, w)
        || encode_with::<dirent::DirentItems>(item, w)
        || encode_with::<space::SpaceItems>(item, w)
        || encode_with::<intent::IntentItems>(item, w)
        || encode_with::<opaque::OpaqueItems>(item, w);
}

fn decode_with<F: ItemOps>(tag: u8, r: &mut Reader) -> Option<Result<Item, DecodeError>> {
    F::TAGS.contains(&tag).then(|| {
        let it = F::decode_body(tag, r)?;
        r.finish()?;
        Ok(it)
    })
}

/// Decode one item from `r`.
pub fn decode_item(r: &mut Reader) -> Result<Item, DecodeError> {
    let tag = r.u8()?;
    let len = r.u32()? as usize;
    let mut body = r.sub(len)?;
    decode_with::<inode::InodeItems>(tag, &mut body)
        .or_else(|| decode_with::<extent::ExtentItems>(tag, &mut body))
        .or_else(|| decode_with::<dirent::DirentItems>(tag, &mut body))
        .or_else(|| decode_with::<space::SpaceItems>(tag, &mut body))
        .or_else(|| decode_with::<intent::IntentItems>(tag, &mut body))
        .or_else(|| decode_with::<opaque::OpaqueItems>(tag, &mut body))
        .unwrap_or(Err(DecodeError("unknown item tag")))
}

/// Decode a whole checkpoint payload.
pub fn decode_all(b: &[u8]) -> Result<Vec<Item>, DecodeError> {
    let mut r = Reader::new(b);
    let mut out = Vec::new();
    while r.remaining() > 0 {
        out.push(decode_item(&mut r)?);
    }
    Ok(out)
}

/// One item of each kind (and both forms of `Opaque`): the round-trip tests and the fuzz seeds
/// (`crate::fuzzing`) start from the same list.
pub fn sample_items() -> Vec<Item> {
    vec![
        Item::InodeCore {
            ino: 5,
            gen: 2,
            ftype: 1,
            mode: 0o644,
            uid: 1000,
            gid: 100,
            nlink: 1,
            rdev: (0, 0),
            size: 77,
            atime: (1, 2),
            mtime: (-3, 4),
            ctime: (5, 6),
            crtime: (7, 8),
            change: 9,
            parent: 1,
        },
        Item::Timestamps {
            ino: 5,
            atime: (1, 1),
            mtime: (2, 2),
            ctime: (3, 3),
            change: 10,
        },
        Item::Size { ino: 5, size: 4096 },
        Item::ExtentSet {
            ino: 5,
            file_block: 0,
            len_blocks: 8,
            phys_block: 100,
            unwritten: true,
        },
        Item::ExtentConvert {
            ino: 5,
            file_block: 0,
            len_blocks: 8,
        },
        Item::ExtentFree {
            ino: 5,
            file_block: 4,
            len_blocks: 4,
        },
        Item::DirentAdd {
            dir: 1,
            name: b"a.txt".to_vec(),
            ino: 5,
            cookie: 3,
        },
        Item::DirentRemove {
            dir: 1,
            name: b"a.txt".to_vec(),
        },
        Item::InodeFree { ino: 5 },
        Item::SpaceAlloc {
            start_block: 100,
            len_blocks: 8,
        },
        Item::SpaceFree {
            start_block: 104,
            len_blocks: 4,
        },
        Item::Intent {
            id: 1,
            body: vec![Item::SpaceFree {
                start_block: 1,
                len_blocks: 2,
            }],
        },
        Item::Done { id: 1 },
        Item::Opaque {
            kind: 7,
            key: b"k".to_vec(),
            value: Some(b"v".to_vec()),
        },
        Item::Opaque {
            kind: 7,
            key: b"k".to_vec(),
            value: None,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_roundtrips() {
        let items = sample_items();
        let mut w = Vec::new();
        for it in &items {
            encode_item(it, &mut w);
        }
        assert_eq!(decode_all(&w).unwrap(), items);
    }

    #[test]
    fn truncation_and_garbage_are_errors_not_panics() {
        let mut w = Vec::new();
        for it in sample_items() {
            encode_item(&it, &mut w);
        }
        for cut in 0..w.len() {
            let _ = decode_all(&w[..cut]);
        }
        assert!(decode_all(&w[..w.len() - 1]).is_err());
        assert!(decode_all(&[99, 0, 0, 0, 0]).is_err());
        // Trailing bytes inside a body are rejected.
        assert!(
            decode_all(&[3, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
                .is_err()
        );
    }

    #[test]
    fn nested_intents_are_rejected() {
        let inner = Item::Intent {
            id: 2,
            body: vec![],
        };
        let mut w = Vec::new();
        encode_item(
            &Item::Intent {
                id: 1,
                body: vec![inner],
            },
            &mut w,
        );
        assert!(decode_all(&w).is_err());
    }

    #[test]
    fn converts_flags_conversions() {
        let c: Vec<bool> = sample_items().iter().map(Item::converts).collect();
        assert_eq!(c.iter().filter(|&&b| b).count(), 1);
    }
}
