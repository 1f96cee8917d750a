//! File data through the server: READ, WRITE, COMMIT, ALLOCATE, DEALLOCATE, SEEK, truncation's
//! tail zeroing. Data goes to the data area of the volume through the file's extent map.
//!
//! WRITE (docs/design.md §3–4): allocate under the lock (blocks reserved in the allocator, not yet
//! in the map) → write the data, state lock dropped → commit the extents as written plus the
//! size → for DATA_SYNC / FILE_SYNC force that commit. No explicit data flush is needed before
//! the commit: metalog flushes the device before any checkpoint holding a converting item
//! (`Item::converts`: ExtentSet written, ExtentConvert) reaches the log — the PREFLUSH of
//! docs/design.md §3 — and our data write completed before the commit, so no extent is ever durably
//! `written` ahead of its data, UNSTABLE writes included. A crash before the commit leaves the
//! reserved blocks free (nothing logged named them). A force that did not write the log
//! (`wrote_log == false`) is followed by a data flush.

use layout::{ExtState, Segment};
use metalog::Item;

use super::extents;
use super::inner::{log_err, reserve_blocks, unreserve_blocks, Inner};
use super::ns::Tx;
use super::state::Core;
use super::types::{
    FileType, Ino, Result, SeekWhat, Stable, StoreError, Timespec, BLOCK, MAX_FILE_SIZE,
};
use super::Store;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Freshly allocated for this write (reserved, not in the map yet).
    New,
    /// Allocated unwritten: convert after the write.
    Unwritten,
    Written,
}

#[derive(Debug, Clone, Copy)]
struct Piece {
    file_block: u64,
    phys: u64,
    len: u64,
    kind: Kind,
}

fn regular(ft: FileType) -> Result<()> {
    match ft {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(StoreError::IsDir),
        _ => Err(StoreError::Inval),
    }
}

impl Store {
    /// Reserve blocks for the holes of `[fb, fb+n)`; `None` if the volume is full (the
    /// reservation is undone).
    fn plan(&self, ino: Ino, fb: u64, n: u64, alloc_holes: bool) -> Result<Option<Vec<Piece>>> {
        let mut g = self.wr();
        self.plan_in(&mut g, ino, fb, n, alloc_holes)
    }

    fn plan_in(
        &self,
        g: &mut Core,
        ino: Ino,
        fb: u64,
        n: u64,
        alloc_holes: bool,
    ) -> Result<Option<Vec<Piece>>> {
        self.reclaim_busy(g);
        let i = g.meta(ino.0)?;
        regular(i.ftype)?;
        let segs = extents::lookup(&g.kv, ino.0, fb, n)?;
        // Goal: continue the extent that ends just before the range, so files stay contiguous.
        let mut goal = match extents::lookup(&g.kv, ino.0, fb.saturating_sub(1), 1)?.first() {
            Some(Segment::Mapped { phys_block, .. }) if fb > 0 => phys_block + 1,
            _ => 0,
        };
        // Data never takes the blocks the next write-back needs.
        let reserve = self.meta_reserve(g);
        let mut out = Vec::new();
        for s in segs {
            match s {
                Segment::Mapped {
                    file_block,
                    phys_block,
                    len,
                    state,
                } => {
                    let kind = if state == ExtState::Written {
                        Kind::Written
                    } else {
                        Kind::Unwritten
                    };
                    out.push(Piece {
                        file_block,
                        phys: phys_block,
                        len,
                        kind,
                    });
                    goal = phys_block + len;
                }
                Segment::Hole { file_block, len } if alloc_holes => {
                    let mut done = 0;
                    while done < len {
                        let room = g.data_room(reserve);
                        let got = if room == 0 {
                            None
                        } else {
                            g.alloc.alloc_data(goal, (len - done).min(room))
                        };
                        let Some((p, l)) = got else {
                            for pc in out.iter().filter(|p: &&Piece| p.kind == Kind::New) {
                                unreserve_blocks(g, pc.phys, pc.len);
                            }
                            return Ok(None);
                        };
                        reserve_blocks(g, p, l);
                        out.push(Piece {
                            file_block: file_block + done,
                            phys: p,
                            len: l,
                            kind: Kind::New,
                        });
                        done += l;
                        goal = p + l;
                    }
                }
                Segment::Hole { .. } => {}
            }
        }
        Ok(Some(out))
    }

    fn plan_or_nospace(&self, ino: Ino, fb: u64, n: u64) -> Result<Vec<Piece>> {
        if let Some(p) = self.plan(ino, fb, n, true)? {
            return Ok(p);
        }
        // Full: maybe only because freed blocks wait for their transaction to be durable,
        // or changes not yet written back hold the metadata reserve.
        self.drain_busy()?;
        if let Some(p) = self.plan(ino, fb, n, true)? {
            return Ok(p);
        }
        self.write_back_now()?;
        self.drain_busy()?;
        self.plan(ino, fb, n, true)?.ok_or(StoreError::NoSpace)
    }

    fn unreserve(&self, pieces: &[Piece]) {
        let mut g = self.wr();
        for p in pieces.iter().filter(|p| p.kind == Kind::New) {
            unreserve_blocks(&mut g, p.phys, p.len);
        }
    }

    /// WRITE through the server: allocates as needed, writes the data volume, converts,
    /// grows the size. Returns how stable the write is when this returns.
    pub fn write(
        &self,
        ino: Ino,
        offset: u64,
        data: &[u8],
        stable: Stable,
    ) -> Result<(u32, Stable)> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(StoreError::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(StoreError::FileTooBig);
        }
        let gen = {
            let g = self.rd();
            let i = g.meta(ino.0)?;
            regular(i.ftype)?;
            i.gen
        };
        let (fb, lb) = (offset / BLOCK, end.div_ceil(BLOCK));
        // Writes to one file are serialized: two writes into one new block must not each
        // allocate and zero-fill it.
        let w = self.file_lock(ino);
        // Until the commit, no block this write looked up may be handed to another file.
        let io = self.io_begin();
        let pieces = if data.is_empty() {
            Vec::new()
        } else {
            self.plan_or_nospace(ino, fb, lb - fb)?
        };
        if let Err(e) = self.write_pieces(&pieces, offset, data) {
            self.unreserve(&pieces);
            return Err(e);
        }
        let converts = pieces.iter().any(|p| p.kind != Kind::Written);
        let now = Timespec::now();
        let res = match self.reserve(64 * pieces.len() as u64) {
            Ok(r) => r,
            Err(e) => {
                self.unreserve(&pieces);
                return Err(e);
            }
        };
        let (csn, meta_changed) = {
            let mut g = self.wr();
            let mut m = match g.meta_opt(ino.0)? {
                Some(m) if m.gen == gen => m,
                _ => {
                    drop(g);
                    self.unreserve(&pieces);
                    return Err(StoreError::Stale);
                }
            };
            let mut tx = Tx::default();
            for p in &pieces {
                match p.kind {
                    Kind::New => tx.items.push(Item::ExtentSet {
                        ino: ino.0,
                        file_block: p.file_block,
                        len_blocks: p.len,
                        phys_block: p.phys,
                        unwritten: false,
                    }),
                    Kind::Unwritten => tx.items.push(Item::ExtentConvert {
                        ino: ino.0,
                        file_block: p.file_block,
                        len_blocks: p.len,
                    }),
                    Kind::Written => {}
                }
            }
            let grows = end > m.size;
            if grows {
                m.size = end;
                tx.items.push(Item::Size {
                    ino: ino.0,
                    size: end,
                });
            }
            m.touch_mc(now);
            tx.items.push(m.times_item(ino.0));
            // docs/design.md §3: datasync_seq moves for allocation, conversion and size only.
            let meta_changed = converts || grows;
            tx.obj(ino.0, !meta_changed);
            (
                self.commit_locked(&mut g, res, tx.items, tx.objs)?,
                meta_changed,
            )
        };
        // The force and flush below need neither: concurrent writers share them.
        drop(io);
        drop(w);
        let got = match stable {
            Stable::Unstable => Stable::Unstable,
            Stable::DataSync => {
                // Pure overwrite: only the data must be stable; otherwise force to this
                // commit, whose log write flushes the device (our data with it).
                if !meta_changed || !self.force(csn)? {
                    self.flush_data()?;
                }
                Stable::DataSync
            }
            Stable::FileSync => {
                if !self.force(csn)? {
                    self.flush_data()?;
                }
                Stable::FileSync
            }
        };
        Ok((data.len() as u32, got))
    }

    /// Write `data` (at byte `offset`) into the planned pieces, block-aligned; new and
    /// unwritten blocks get zeros around the data, written ones keep their old bytes.
    fn write_pieces(&self, pieces: &[Piece], offset: u64, data: &[u8]) -> Result<()> {
        let end = offset + data.len() as u64;
        for p in pieces {
            let (pstart, pend) = (p.file_block * BLOCK, (p.file_block + p.len) * BLOCK);
            let mut buf = vec![0u8; (pend - pstart) as usize];
            if p.kind == Kind::Written {
                // Keep the bytes of partial edge blocks.
                if offset > pstart {
                    self.dev
                        .read_at(&mut buf[..BLOCK as usize], p.phys * BLOCK)?;
                }
                if end < pend {
                    let lo = buf.len() - BLOCK as usize;
                    self.dev
                        .read_at(&mut buf[lo..], (p.phys + p.len - 1) * BLOCK)?;
                }
            }
            let (s, e) = (offset.max(pstart), end.min(pend));
            buf[(s - pstart) as usize..(e - pstart) as usize]
                .copy_from_slice(&data[(s - offset) as usize..(e - offset) as usize]);
            self.dev.write_at(&buf, p.phys * BLOCK)?;
        }
        Ok(())
    }

    /// READ through the server: bytes of written extents from the data volume, zeros for holes
    /// and unwritten extents; `eof` if the read reaches the end of the file.
    pub fn read(&self, ino: Ino, offset: u64, count: u32) -> Result<(Vec<u8>, bool)> {
        let _io = self.io_begin();
        let (size, segs) = {
            let g = self.rd();
            let i = g.meta(ino.0)?;
            regular(i.ftype)?;
            if offset >= i.size {
                return Ok((Vec::new(), true));
            }
            let end = i.size.min(offset + count as u64);
            let fb = offset / BLOCK;
            (
                i.size,
                (
                    end,
                    extents::lookup(&g.kv, ino.0, fb, end.div_ceil(BLOCK) - fb)?,
                ),
            )
        };
        let (end, segs) = segs;
        let mut out = vec![0u8; (end - offset) as usize];
        for s in segs {
            if let Segment::Mapped {
                file_block,
                phys_block,
                len,
                state: ExtState::Written,
            } = s
            {
                let (ss, se) = (
                    (file_block * BLOCK).max(offset),
                    ((file_block + len) * BLOCK).min(end),
                );
                if ss >= se {
                    continue;
                }
                let dev_off = phys_block * BLOCK + (ss - file_block * BLOCK);
                self.dev.read_at(
                    &mut out[(ss - offset) as usize..(se - offset) as usize],
                    dev_off,
                )?;
            }
        }
        Ok((out, end >= size))
    }

    /// COMMIT (docs/design.md §4): a full fsync — force to the file's commit_seq, plus a data
    /// flush unless that force wrote (and so flushed) the log on this same device.
    pub fn commit(&self, ino: Ino) -> Result<()> {
        {
            let g = self.rd();
            g.meta(ino.0)?;
        }
        let f = self.log.force_object(ino.0, false).map_err(log_err)?;
        if !f.wrote_log {
            self.flush_data()?;
        }
        Ok(())
    }

    /// NFSv4.2 ALLOCATE: unwritten extents over the holes of the range; the size grows.
    pub fn allocate(&self, ino: Ino, offset: u64, len: u64) -> Result<()> {
        let end = offset.checked_add(len).ok_or(StoreError::FileTooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(StoreError::FileTooBig);
        }
        if len == 0 {
            return Err(StoreError::Inval);
        }
        let (fb, lb) = (offset / BLOCK, end.div_ceil(BLOCK));
        let w = self.file_lock(ino);
        let csn = self.allocate_blocks(ino, fb, lb - fb, Some(end), Timespec::now())?;
        // Not across the force (docs/design.md §3 group commit; the lock only orders the change).
        drop(w);
        if let Some((csn, _)) = csn {
            self.force_if_sync(csn)?;
        }
        Ok(())
    }

    /// Allocate unwritten blocks over the holes of `[fb, fb+n)` and grow the size to
    /// `new_size`, planning and committing under one hold of the state lock (two concurrent
    /// callers never both fill one hole). `None` when there was nothing to do; else the
    /// commit and the blocks allocated.
    pub(super) fn allocate_blocks(
        &self,
        ino: Ino,
        fb: u64,
        n: u64,
        new_size: Option<u64>,
        now: Timespec,
    ) -> Result<Option<(metalog::Csn, u64)>> {
        // Each extent item is < 64 bytes; a fragmented volume may need one per block.
        let res = self.reserve(64 * (1 + n.min(4096)))?;
        for attempt in 0..2 {
            let mut g = self.wr();
            let Some(pieces) = self.plan_in(&mut g, ino, fb, n, true)? else {
                if attempt == 0 {
                    drop(g);
                    self.drain_busy()?;
                    continue;
                }
                return Err(StoreError::NoSpace);
            };
            let mut m = g.meta(ino.0)?;
            let mut tx = Tx::default();
            let mut blocks = 0;
            for p in pieces.iter().filter(|p| p.kind == Kind::New) {
                blocks += p.len;
                tx.items.push(Item::ExtentSet {
                    ino: ino.0,
                    file_block: p.file_block,
                    len_blocks: p.len,
                    phys_block: p.phys,
                    unwritten: true,
                });
            }
            let grows = new_size.is_some_and(|s| s > m.size);
            if tx.items.is_empty() && !grows {
                return Ok(None);
            }
            if let Some(s) = new_size.filter(|_| grows) {
                m.size = s;
            }
            m.touch_c(now);
            tx.core(ino.0, &m);
            let csn = self.commit_locked(&mut g, res, tx.items, tx.objs)?;
            return Ok(Some((csn, blocks)));
        }
        Err(StoreError::NoSpace)
    }

    /// Zero bytes `[from, to)` of written blocks (partial blocks of a punch or truncate).
    fn zero_range(&self, ino: Ino, from: u64, to: u64) -> Result<bool> {
        if from >= to {
            return Ok(false);
        }
        let _io = self.io_begin();
        let segs = {
            let g = self.rd();
            let fb = from / BLOCK;
            g.meta(ino.0)?;
            extents::lookup(&g.kv, ino.0, fb, to.div_ceil(BLOCK) - fb)?
        };
        let mut wrote = false;
        for s in segs {
            if let Segment::Mapped {
                file_block,
                phys_block,
                len,
                state: ExtState::Written,
            } = s
            {
                let (ss, se) = (
                    (file_block * BLOCK).max(from),
                    ((file_block + len) * BLOCK).min(to),
                );
                if ss < se {
                    let zeros = vec![0u8; (se - ss) as usize];
                    self.dev
                        .write_at(&zeros, phys_block * BLOCK + (ss - file_block * BLOCK))?;
                    wrote = true;
                }
            }
        }
        Ok(wrote)
    }

    pub(super) fn zero_tail_for_truncate(&self, ino: Ino, size: u64) -> Result<()> {
        if size & (BLOCK - 1) != 0 && self.zero_range(ino, size, size.next_multiple_of(BLOCK))? {
            // The zeros must be on disk before a later extension could expose the block.
            self.flush_data()?;
        }
        Ok(())
    }

    /// NFSv4.2 DEALLOCATE: punch the range (whole blocks freed, partial blocks zeroed).
    pub fn deallocate(&self, ino: Ino, offset: u64, len: u64) -> Result<()> {
        let w = self.file_lock(ino);
        let end = offset
            .checked_add(len)
            .ok_or(StoreError::Inval)?
            .min(MAX_FILE_SIZE);
        {
            let g = self.rd();
            regular(g.meta(ino.0)?.ftype)?;
        }
        let (fb, lb) = (offset.div_ceil(BLOCK), end / BLOCK);
        // Partial blocks at the edges keep their blocks and get zeros.
        let mut zeroed = self.zero_range(ino, offset, end.min(fb * BLOCK))?;
        if lb >= fb {
            zeroed |= self.zero_range(ino, (lb * BLOCK).max(offset), end)?;
        }
        if zeroed {
            self.flush_data()?;
        }
        let now = Timespec::now();
        let res = self.reserve(0)?;
        let csn = {
            let mut g = self.wr();
            let mut m = g.meta(ino.0)?;
            let mut tx = Tx::default();
            if lb > fb {
                tx.items.push(Item::ExtentFree {
                    ino: ino.0,
                    file_block: fb,
                    len_blocks: lb - fb,
                });
            }
            m.touch_mc(now);
            tx.core(ino.0, &m);
            self.commit_locked(&mut g, res, tx.items, tx.objs)?
        };
        // The change is in memory and in the CIL: the force needs no lock (freed blocks stay
        // busy until it is durable), and holding one would serialise other files' forces.
        drop(w);
        self.force_if_sync(csn)?;
        Ok(())
    }

    /// NFSv4.2 SEEK: `(eof, offset)`; `None` offset means NXIO (nothing found before EOF).
    /// SEEK (RFC 7862 §15.11): written blocks are data; holes and unwritten blocks read as
    /// zeros and count as holes. There is a virtual hole at EOF.
    pub fn seek(&self, ino: Ino, offset: u64, what: SeekWhat) -> Result<(bool, Option<u64>)> {
        let g = self.rd();
        let i = g.meta(ino.0)?;
        regular(i.ftype)?;
        let size = i.size;
        if offset >= size {
            return Ok((true, None));
        }
        let nb = size.div_ceil(BLOCK);
        let fb = offset / BLOCK;
        let segs = extents::lookup(&g.kv, ino.0, fb, nb - fb)?;
        let is_data = |s: &Segment| {
            matches!(
                s,
                Segment::Mapped {
                    state: ExtState::Written,
                    ..
                }
            )
        };
        let found = segs
            .iter()
            .find(|s| {
                if what == SeekWhat::Data {
                    is_data(s)
                } else {
                    !is_data(s)
                }
            })
            .map(|s| (s.file_block() * BLOCK).max(offset));
        Ok(match (what, found) {
            (SeekWhat::Data, Some(o)) if o < size => (false, Some(o)),
            (SeekWhat::Data, _) => (true, None),
            (SeekWhat::Hole, Some(o)) if o < size => (false, Some(o)),
            (SeekWhat::Hole, _) => (true, Some(size)),
        })
    }

    /// An open file was unlinked and its last open is gone: free it now.
    pub fn release(&self, ino: Ino) -> Result<()> {
        let res = self.reserve(0)?;
        let csn = {
            let mut g = self.wr();
            match g.meta_opt(ino.0)? {
                Some(i) if i.nlink == 0 => {}
                _ => return Ok(()),
            }
            let items = vec![Item::InodeFree { ino: ino.0 }];
            self.commit_locked(&mut g, res, items, vec![Inner::tx(ino.0, false)])?
        };
        self.force_if_sync(csn)?;
        Ok(())
    }
}
