//! Write-back of dirty objects to the metadata area (design.md §2): the cost of a write-back
//! grows with the objects changed since the last one, not with all metadata.
//!
//! Protocol, copy-on-write (so a crash at any point leaves each slot old-or-new, and the log
//! still holds everything past the old tail):
//! 1. under the state lock: take the dirty set, serialize those objects, read `C =
//!    last_committed()` (commits happen under the same lock, so the snapshot holds every commit
//!    `≤ C`; C is lowered by one if its checkpoint is still open, see `write_back_now`);
//! 2. `force_seq(C)`: the log must hold what the objects hold before they land (write-ahead);
//! 3. write each object to freshly allocated metadata blocks, flush;
//! 4. rewrite the table entries (each 32-byte entry sits inside one sector), flush;
//! 5. free the objects' old blocks; return `C` and the log moves its tail past it.

use std::collections::{BTreeMap, HashMap};

use layout::{Allocator, Geometry};
use metalog::{BlockDev, Csn, Writeback};

use super::format::{self, TableEntry, ENTRIES_PER_BLOCK, TABLE_ENTRY};
use super::inner::{io_err, Inner};
use super::inode::{State, MISC_SLOT};
use super::{StoreError, BLOCK};

/// Write-back state: serialized by its own mutex (taken before the state lock).
pub struct Wb {
    pub table_start: u64,
    /// Free space of the object part of the metadata area.
    pub meta_alloc: Allocator,
    /// On-disk entry of every slot that has one.
    pub entries: HashMap<u64, TableEntry>,
    /// Counters: write-backs done, objects written.
    pub runs: u64,
    pub objects_written: u64,
}

/// Table blocks for a metadata area. Each slot gets four object blocks of room: one for the
/// object, one for its copy-on-write successor during a write-back, and slack for objects
/// bigger than a block (directories, fragmented files).
pub fn table_blocks(g: &Geometry) -> u64 {
    g.meta_blocks.div_ceil(4 * ENTRIES_PER_BLOCK + 1)
}

/// The highest inode number the table can hold.
pub fn max_ino(g: &Geometry) -> u64 {
    table_blocks(g) * ENTRIES_PER_BLOCK - 1
}

/// Read the object table and every object it names (mount).
pub fn load(dev: &dyn BlockDev, g: &Geometry) -> Result<(Wb, State), StoreError> {
    let tb = table_blocks(g);
    let table_start = g.meta_start;
    let mut meta_alloc = Allocator::new_free(table_start + tb, g.meta_blocks - tb);
    let mut entries = HashMap::new();
    let mut st = State::default();
    const CHUNK: u64 = 256; // blocks per table read: 1 MiB
    let mut blk = 0;
    while blk < tb {
        let n = CHUNK.min(tb - blk);
        let mut buf = vec![0u8; (n * BLOCK) as usize];
        dev.read_at(&mut buf, (table_start + blk) * BLOCK)
            .map_err(io_err)?;
        for (i, e) in buf.chunks(TABLE_ENTRY).enumerate() {
            let slot = blk * ENTRIES_PER_BLOCK + i as u64;
            let Some(ent) = TableEntry::decode(slot, e).map_err(StoreError::Io)? else {
                continue;
            };
            if ent.start == 0 {
                if slot != MISC_SLOT {
                    st.freed_gens.insert(slot, ent.gen);
                }
                continue;
            }
            meta_alloc
                .mark_used(ent.start, ent.nblocks as u64)
                .map_err(|e| StoreError::Io(format!("object table slot {slot}: {e}")))?;
            entries.insert(slot, ent);
        }
        blk += n;
    }
    load_objects(dev, &entries, &mut st)?;
    st.next_fresh = st.inodes.keys().max().map_or(2, |m| m + 1).max(2);
    st.free_inos = (2..st.next_fresh)
        .filter(|i| !st.inodes.contains_key(i))
        .collect();
    Ok((
        Wb {
            table_start,
            meta_alloc,
            entries,
            runs: 0,
            objects_written: 0,
        },
        st,
    ))
}

/// Largest single read or write of object blocks (bounded memory, big sequential I/O).
const IO_RUN: u64 = 1024; // blocks: 4 MiB

/// Read the objects in disk order, merging neighbours into runs of up to `IO_RUN` blocks (a
/// write-back lays its objects out contiguously, so a mount reads mostly sequentially).
fn load_objects(
    dev: &dyn BlockDev,
    entries: &HashMap<u64, TableEntry>,
    st: &mut State,
) -> Result<(), StoreError> {
    let mut order: Vec<(u64, &TableEntry)> = entries
        .iter()
        .filter(|(_, e)| e.start != 0)
        .map(|(&s, e)| (s, e))
        .collect();
    order.sort_by_key(|(_, e)| e.start);
    let mut i = 0;
    while i < order.len() {
        let run_start = order[i].1.start;
        let mut run_end = run_start + order[i].1.nblocks as u64;
        let mut j = i + 1;
        while j < order.len()
            && order[j].1.start == run_end
            && run_end + order[j].1.nblocks as u64 - run_start <= IO_RUN
        {
            run_end += order[j].1.nblocks as u64;
            j += 1;
        }
        let mut buf = vec![0u8; ((run_end - run_start) * BLOCK) as usize];
        dev.read_at(&mut buf, run_start * BLOCK).map_err(io_err)?;
        for &(slot, ent) in &order[i..j] {
            let off = ((ent.start - run_start) * BLOCK) as usize;
            let body = buf
                .get(off..off + ent.obj_len as usize)
                .filter(|_| ent.obj_len as u64 <= ent.nblocks as u64 * BLOCK)
                .ok_or_else(|| StoreError::Io(format!("object {slot}: bad length")))?;
            if crc32c::crc32c(body) != ent.obj_crc {
                return Err(StoreError::Io(format!("object {slot}: bad checksum")));
            }
            if slot == MISC_SLOT {
                st.clients = format::decode_clients(body)
                    .map_err(StoreError::Io)?
                    .into_iter()
                    .collect();
            } else {
                let (ino, inode) = format::decode_inode(body).map_err(StoreError::Io)?;
                if ino != slot {
                    return Err(StoreError::Io(format!("object in slot {slot} says {ino}")));
                }
                st.inodes.insert(ino, inode);
            }
        }
        i = j;
    }
    Ok(())
}

impl Inner {
    /// One write-back pass; returns the CSN the metadata area now covers.
    pub fn write_back_now(&self) -> Result<Csn, StoreError> {
        let mut wb = self.wb.lock().unwrap_or_else(|e| e.into_inner());
        // Close and force what is committed now, so that the C read under the lock below is
        // usually a closed, durable checkpoint (see `covered`).
        self.force(self.log.last_committed())?;
        // 1. snapshot
        let (c, snap) = {
            let mut g = self.wr();
            let c = self.log.last_committed();
            // `last_committed` may name the still-open checkpoint: commits made after we drop
            // the lock join that same CSN, and moving the tail past it would drop them from the
            // log while they are in no object we write. So claim C only if its checkpoint was
            // already closed (durable); otherwise C - 1, and checkpoint C stays in the log and
            // is replayed over objects that already hold part of it (items are blind sets).
            let c = if self.log.durable_csn() >= c {
                c
            } else {
                Csn(c.0.saturating_sub(1))
            };
            let dirty: Vec<u64> = g.s.dirty.drain().collect();
            let mut snap: Vec<(u64, Option<Vec<u8>>, u32)> = Vec::with_capacity(dirty.len());
            for slot in dirty {
                if slot == MISC_SLOT {
                    snap.push((slot, Some(format::encode_clients(g.s.clients.iter())), 0));
                } else if let Some(i) = g.s.inodes.get(&slot) {
                    snap.push((slot, Some(format::encode_inode(slot, i)), i.m.gen));
                } else {
                    let gen = g.s.freed_gens.get(&slot).copied().unwrap_or(0);
                    snap.push((slot, None, gen));
                }
            }
            (c, snap)
        };
        if snap.is_empty() {
            return Ok(c);
        }
        let res = self.write_snapshot(&mut wb, c, &snap);
        if res.is_err() {
            // Nothing moved the tail: mark them dirty again for the next pass.
            let mut g = self.wr();
            g.s.dirty.extend(snap.iter().map(|s| s.0));
        }
        res
    }

    fn write_snapshot(
        &self,
        wb: &mut Wb,
        c: Csn,
        snap: &[(u64, Option<Vec<u8>>, u32)],
    ) -> Result<Csn, StoreError> {
        // 2. write-ahead: the log covers C before any object reflecting it lands.
        self.force(c)?;
        // 3. objects to fresh blocks
        let mut new_entries: BTreeMap<u64, TableEntry> = BTreeMap::new();
        let mut allocated = Vec::new();
        let r = (|| {
            // Place the objects back to back in as few free extents as possible, then
            // write each extent's run with big writes.
            let mut runs: Vec<(u64, Vec<u8>)> = Vec::new();
            let mut left: u64 = snap
                .iter()
                .filter_map(|(_, b, _)| b.as_ref())
                .map(|b| (b.len() as u64).div_ceil(BLOCK).max(1))
                .sum();
            let mut piece: Option<(u64, u64, u64)> = None; // (start, len, used)
            for (slot, body, gen) in snap {
                let Some(b) = body else {
                    new_entries.insert(
                        *slot,
                        TableEntry {
                            gen: *gen,
                            ..TableEntry::default()
                        },
                    );
                    continue;
                };
                let n = (b.len() as u64).div_ceil(BLOCK).max(1);
                let fits = piece.is_some_and(|(_, l, u)| l - u >= n);
                if !fits {
                    if let Some((ps, pl, pu)) = piece.take() {
                        if pl > pu {
                            let _ = wb.meta_alloc.free(ps + pu, pl - pu);
                            allocated.retain(|&(s, _)| s != ps);
                            allocated.push((ps, pu));
                        }
                    }
                    let (ps, pl) = match wb.meta_alloc.alloc(u64::MAX, left) {
                        Some((ps, pl)) if pl >= n => (ps, pl),
                        Some((ps, pl)) => {
                            let _ = wb.meta_alloc.free(ps, pl);
                            (alloc_contig(&mut wb.meta_alloc, n)?, n)
                        }
                        None => return Err(StoreError::NoSpace),
                    };
                    allocated.push((ps, pl));
                    piece = Some((ps, pl, 0));
                }
                let Some((ps, pl, pu)) = piece else {
                    return Err(StoreError::NoSpace);
                };
                let start = ps + pu;
                piece = Some((ps, pl, pu + n));
                left -= n;
                match runs.last_mut() {
                    Some((rs, rb))
                        if *rs + rb.len() as u64 / BLOCK == start
                            && (rb.len() as u64) < IO_RUN * BLOCK =>
                    {
                        rb.extend_from_slice(b);
                        rb.resize(((start - *rs + n) * BLOCK) as usize, 0);
                    }
                    _ => {
                        let mut rb = b.clone();
                        rb.resize((n * BLOCK) as usize, 0);
                        runs.push((start, rb));
                    }
                }
                new_entries.insert(
                    *slot,
                    TableEntry {
                        start,
                        nblocks: n as u32,
                        gen: *gen,
                        obj_len: b.len() as u32,
                        obj_crc: crc32c::crc32c(b),
                    },
                );
            }
            if let Some((ps, pl, pu)) = piece {
                if pl > pu {
                    let _ = wb.meta_alloc.free(ps + pu, pl - pu);
                    allocated.retain(|&(s, _)| s != ps);
                    allocated.push((ps, pu));
                }
            }
            for (start, rb) in &runs {
                self.dev.write_at(rb, start * BLOCK).map_err(io_err)?;
            }
            // Object blocks durable before any entry points at them.
            self.dev.flush().map_err(io_err)?;
            // 4. table entries, block by block
            let mut by_block: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
            for slot in new_entries.keys() {
                by_block
                    .entry(slot / ENTRIES_PER_BLOCK)
                    .or_default()
                    .push(*slot);
            }
            for (tblk, slots) in by_block {
                let off = (wb.table_start + tblk) * BLOCK;
                let mut buf = vec![0u8; BLOCK as usize];
                self.dev.read_at(&mut buf, off).map_err(io_err)?;
                for slot in slots {
                    let i = (slot % ENTRIES_PER_BLOCK) as usize * TABLE_ENTRY;
                    if let Some(e) = new_entries.get(&slot) {
                        e.encode(slot, &mut buf[i..i + TABLE_ENTRY]);
                    }
                }
                self.dev.write_at(&buf, off).map_err(io_err)?;
            }
            self.dev.flush().map_err(io_err)?;
            Ok::<(), StoreError>(())
        })();
        if let Err(e) = r {
            for (s, n) in allocated {
                let _ = wb.meta_alloc.free(s, n);
            }
            return Err(e);
        }
        // 5. old copies are garbage now that the table no longer names them.
        for (slot, ent) in new_entries {
            if let Some(old) = wb.entries.remove(&slot) {
                if old.start != 0 {
                    let _ = wb.meta_alloc.free(old.start, old.nblocks as u64);
                }
            }
            if ent.start != 0 || ent.gen != 0 {
                wb.entries.insert(slot, ent);
            }
        }
        wb.runs += 1;
        self.meta_free.store(
            wb.meta_alloc.free_blocks(),
            std::sync::atomic::Ordering::Relaxed,
        );
        wb.objects_written += snap.len() as u64;
        Ok(c)
    }
}

fn alloc_contig(a: &mut Allocator, n: u64) -> Result<u64, StoreError> {
    // No goal inside the region: the allocator picks the best fit by size.
    match a.alloc(u64::MAX, n) {
        Some((s, l)) if l == n => Ok(s),
        Some((s, l)) => {
            let _ = a.free(s, l);
            Err(StoreError::NoSpace)
        }
        None => Err(StoreError::NoSpace),
    }
}

impl Writeback for Inner {
    fn write_back(&self) -> Result<Csn, String> {
        self.write_back_now().map_err(|e| e.to_string())
    }
}
