//! SETATTR: mode, owner, times and size (truncation frees blocks past the new size).

use metalog::Item;

use super::extents;
use super::ns::{meta, resolve, Tx};
use super::types::{
    Attr, FileType, Ino, Result, SetAttrs, StoreError, Timespec, BLOCK, MAX_FILE_SIZE,
};
use super::Store;

/// One past the last file block any file may have.
pub const MAX_BLOCKS: u64 = MAX_FILE_SIZE / BLOCK;

impl Store {
    pub fn setattr(&self, ino: Ino, a: &SetAttrs) -> Result<Attr> {
        let now = Timespec::now();
        // A shrinking truncate zeroes the tail of the new last block first (data I/O, outside
        // the lock); the metadata change then frees the blocks past it.
        let w = a.size.map(|_| self.file_lock(ino));
        if let Some(size) = a.size {
            // Only a shrink can leave old bytes past the new end inside the last block.
            if size < self.check_truncate(ino, size)? {
                self.zero_tail_for_truncate(ino, size)?;
            }
        }
        let res = self.reserve(0)?;
        let (attr, csn) = {
            let mut g = self.wr();
            let mut m = meta(&g, ino.0)?;
            let mut tx = Tx::default();
            let mut only_times = true;
            if let Some(mode) = a.mode {
                m.mode = mode & 0o7777;
                only_times = false;
            }
            if let Some(uid) = a.uid {
                m.uid = uid;
                only_times = false;
            }
            if let Some(gid) = a.gid {
                m.gid = gid;
                only_times = false;
            }
            if let Some(t) = a.atime {
                m.atime = resolve(t, now);
            }
            if let Some(t) = a.mtime {
                m.mtime = resolve(t, now);
            }
            if let Some(size) = a.size {
                if m.ftype != FileType::Regular {
                    return Err(if m.ftype == FileType::Directory {
                        StoreError::IsDir
                    } else {
                        StoreError::Inval
                    });
                }
                if size != m.size {
                    let keep = size.div_ceil(BLOCK);
                    if extents::any_from(&g.kv, ino.0, keep)? {
                        // Everything past the new end: the item frees what the map holds.
                        tx.items.push(Item::ExtentFree {
                            ino: ino.0,
                            file_block: keep,
                            len_blocks: MAX_BLOCKS - keep,
                        });
                    }
                    m.size = size;
                    if a.mtime.is_none() {
                        m.mtime = now;
                    }
                }
                only_times = false;
            }
            m.touch_c(now);
            tx.items.push(m.core_item(ino.0));
            tx.obj(ino.0, only_times);
            let csn = self.commit_locked(&mut g, res, tx.items, tx.objs)?;
            (g.meta(ino.0)?.attr(ino.0), csn)
        };
        // Keep locks short: the force is shared with every concurrent caller (group commit),
        // and the file lock shards would otherwise serialise other files' truncates behind it.
        drop(w);
        self.force_if_sync(csn)?;
        Ok(attr)
    }

    /// Whether `ino` may take a new size; returns its current size.
    fn check_truncate(&self, ino: Ino, size: u64) -> Result<u64> {
        let g = self.rd();
        let i = g.meta(ino.0)?;
        match i.ftype {
            FileType::Regular => {}
            FileType::Directory => return Err(StoreError::IsDir),
            _ => return Err(StoreError::Inval),
        }
        if size > super::types::MAX_FILE_SIZE {
            return Err(StoreError::FileTooBig);
        }
        Ok(i.size)
    }
}
