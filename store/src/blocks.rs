//! Block-level access for the pNFS layout work: what LAYOUTGET and LAYOUTCOMMIT
//! need from the extent maps and the allocator. The layout bodies, stateids and recalls live
//! elsewhere; this file only maps, allocates and converts, with docs/design.md §4's durability.

use layout::{ExtState, Segment};
use metalog::Item;

use super::extents;
use super::ns::Tx;
use super::types::{FileType, Ino, Result, StoreError, Timespec, BLOCK, MAX_FILE_SIZE};
use super::Store;

/// One extent a client says it wrote: file block, length, and the volume block it was given.
/// `phys_block: None` means "the file's own unwritten blocks of this range" (what a client
/// that tracks file ranges only names, e.g. Linux's storage offset 0, or the SCSI body).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenExtent {
    pub file_block: u64,
    pub len_blocks: u64,
    pub phys_block: Option<u64>,
}

/// What a block commit did (for LAYOUTCOMMIT's counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockCommit {
    /// Unwritten blocks that became written.
    pub converted_blocks: u64,
    /// The new size, if the size grew.
    pub new_size: Option<u64>,
    /// The log was forced and that force wrote (and flushed) the log.
    pub log_written: bool,
    /// Data-volume flushes this call issued itself.
    pub data_flushes_issued: u32,
    /// Data-volume flushes this call waited for but another caller issued (flush sharing,
    /// docs/design.md §3): each commit needs one or the other, so sharing shows as issued < commits.
    pub data_flushes_joined: u32,
}

fn check_file(ft: FileType) -> Result<()> {
    match ft {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(StoreError::IsDir),
        _ => Err(StoreError::Inval),
    }
}

impl Store {
    /// The extent map over `[file_block, +len_blocks)`: segments that cover it exactly.
    pub fn extents(&self, ino: Ino, file_block: u64, len_blocks: u64) -> Result<Vec<Segment>> {
        let g = self.rd();
        let i = g.meta(ino.0)?;
        check_file(i.ftype)?;
        extents::lookup(&g.kv, ino.0, file_block, len_blocks)
    }

    /// Allocate unwritten blocks over the holes of the range and make that durable before
    /// returning (docs/design.md §4: LAYOUTGET that allocates → `force_seq(datasync_seq)`).
    pub fn alloc_unwritten(
        &self,
        ino: Ino,
        file_block: u64,
        len_blocks: u64,
    ) -> Result<Vec<Segment>> {
        let end = file_block
            .checked_add(len_blocks)
            .ok_or(StoreError::FileTooBig)?;
        if end.saturating_mul(BLOCK) > MAX_FILE_SIZE {
            return Err(StoreError::FileTooBig);
        }
        if len_blocks == 0 {
            return Err(StoreError::Inval);
        }
        let now = Timespec::now();
        let csn = {
            let _w = self.file_lock(ino);
            self.allocate_blocks(ino, file_block, len_blocks, None, now)?
        };
        if let Some((csn, _)) = csn {
            self.force(csn)?;
        }
        self.extents(ino, file_block, len_blocks)
    }

    /// LAYOUTCOMMIT: convert the client's extents where the file owns them unwritten at that
    /// very volume block (never a block of another file), grow the size to `last_byte + 1`,
    /// set mtime. Durability (docs/design.md §4): a conversion or a new size forces the log to the
    /// inode's datasync_seq (the internal log's flush covers the data written before it);
    /// otherwise the timestamps are logged lazily and only the data volume is flushed.
    /// `force_log` is `layoutcommit = "sync"`: always force (the old XFS behaviour).
    pub fn commit_blocks(
        &self,
        ino: Ino,
        written: &[WrittenExtent],
        last_byte: Option<u64>,
        mtime: Option<Timespec>,
        force_log: bool,
    ) -> Result<BlockCommit> {
        let now = Timespec::now();
        let mut out = BlockCommit::default();
        let res = self.reserve(64 * written.len() as u64)?;
        let (csn, meta) = {
            // Not across the force below: concurrent LAYOUTCOMMITs share one log write.
            let _w = self.file_lock(ino);
            let mut g = self.wr();
            let mut m = g.meta(ino.0)?;
            check_file(m.ftype)?;
            let mut tx = Tx::default();
            // Nothing past the new EOF was written (`last_byte` is the last byte the client
            // wrote, RFC 8881 §18.42.3): a client that commits its whole layout, speculative
            // blocks included (docs/pnfs.md "Preallocation"), must not turn blocks it never
            // wrote into written ones, whose old bytes a later extension would expose. They
            // stay unwritten (zeros) and the trim past EOF frees them.
            let eof_block = last_byte
                .map_or(m.size, |lb| lb.saturating_add(1).max(m.size))
                .div_ceil(BLOCK);
            for w in written {
                let len = w.len_blocks.min(eof_block.saturating_sub(w.file_block));
                if len == 0 {
                    continue;
                }
                for s in extents::lookup(&g.kv, ino.0, w.file_block, len)? {
                    if let Segment::Mapped {
                        file_block,
                        phys_block,
                        len,
                        state: ExtState::Unwritten,
                    } = s
                    {
                        // A named volume block must be where the file owns it: a commit
                        // never converts another file's block (docs/design.md §2).
                        let owned = w
                            .phys_block
                            .is_none_or(|p| phys_block == p + (file_block - w.file_block));
                        if owned {
                            tx.items.push(Item::ExtentConvert {
                                ino: ino.0,
                                file_block,
                                len_blocks: len,
                            });
                            out.converted_blocks += len;
                        }
                    }
                }
            }
            if let Some(lb) = last_byte {
                let size = lb.saturating_add(1);
                if size > m.size && size <= MAX_FILE_SIZE {
                    m.size = size;
                    out.new_size = Some(size);
                    tx.items.push(Item::Size { ino: ino.0, size });
                }
            }
            m.mtime = mtime.unwrap_or(now);
            m.ctime = now;
            m.touch_change(now);
            tx.items.push(m.times_item(ino.0));
            let meta = out.converted_blocks > 0 || out.new_size.is_some();
            tx.obj(ino.0, !meta);
            (self.commit_locked(&mut g, res, tx.items, tx.objs)?, meta)
        };
        // Conversions and a new size set the inode's datasync_seq to `csn`; forcing to the
        // inode's datasync_seq (not to `csn`) also covers an earlier conversion of this file
        // that is not durable yet, and costs nothing when there is none (seed 002: like
        // `__xfs_log_force_inode(ip, true, &log_flushed)`). `layoutcommit = "sync"` forces
        // this commit's own checkpoint, timestamps included, every time.
        let forced = if force_log {
            self.force(csn)?
        } else {
            self.log
                .force_object(ino.0, true)
                .map_err(super::inner::log_err)?
                .wrote_log
        };
        debug_assert!(force_log || !meta || self.log.durable_csn() >= csn);
        out.log_written = forced;
        if !out.log_written {
            // Nothing wrote the log on this device (the log is internal, docs/design.md §2, so a
            // log write would have flushed it): the client's data still needs its flush.
            if self.flush_data()?.issued {
                out.data_flushes_issued += 1;
            } else {
                out.data_flushes_joined += 1;
            }
        }
        Ok(out)
    }
}
