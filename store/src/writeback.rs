//! Write-back: the changes committed since the last checkpoint are merged into the B+tree,
//! copy-on-write, and a new checkpoint names the new root (docs/design.md §2).
//! Its cost follows the changed records, not all metadata; returning the CSN it covers lets
//! the log move its tail past it, as XFS's AIL does once buffers are on disk.
//!
//! 1. Under the state lock: `C = last_committed()` (lowered by one while that checkpoint is
//!    open, see below), the live changes become the frozen set, and the logical free space
//!    (allocator + reserved + busy) is copied. Blocks freed by anything after the previous
//!    checkpoint's CSN stay busy until step 5 (`Core::wb_hold`): a mount replays exactly
//!    those items (it skips what a checkpoint covers), and an item that frees a block must
//!    never be replayed over a tree whose nodes took that block.
//! 2. `force_seq(C)`: the log holds what the new tree holds before it lands (write-ahead).
//! 3. No lock: merge the frozen changes into the tree; new nodes go to blocks taken from the
//!    allocator (free in the frozen state too), old ones are only listed.
//! 4. Write the client records (if changed) and the free-space list of the new checkpoint
//!    (frozen free space − new nodes and blobs + replaced nodes and old blobs), flush, then
//!    the checkpoint itself into the other slot (FUA). A crash before that leaves the old
//!    checkpoint and the log, which still holds everything after its CSN.
//! 5. Under the state lock: the new root is in, the frozen set is dropped, replaced nodes
//!    and old blobs go back to the allocator (and out of the cache).
//!
//! When free space is short (a volume filled with files, then emptied), steps 3–5 run in
//! parts, each merging one key range of the frozen set with the space the previous part gave
//! back; all parts but the last keep the old covered CSN, so a crash between them replays
//! the same items over a tree that holds part of them, which converges (state.rs).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use layout::Allocator;
use metalog::{Csn, Writeback};

use super::btree::{self, Changes, NodeRead, NodeWrite, Page};
use super::format::{self, BlobRef, Checkpoint, Wb};
use super::inner::Inner;
use super::kv::Reader;
use super::types::{StoreError, BLOCK};

/// Blocks one allocation for new nodes takes at a time.
const NODE_RUN: u64 = 256;
/// New nodes are written in batches of this many blocks (sorted, merged into long writes).
const WRITE_BATCH: usize = 256;

/// The merge's view of the device: nodes through the cache, new blocks from the allocator.
struct Sink<'a> {
    inner: &'a Inner,
    rd: Reader,
    run: (u64, u64),
    /// Every block handed out for new nodes (to count as used, or to give back on failure).
    taken: Vec<(u64, u64)>,
    replaced: Vec<u64>,
    /// Written nodes not yet on the device (a merge may read one back: a collapsing root).
    pending: Vec<(u64, Arc<Page>)>,
    written: u64,
}

impl NodeRead for Sink<'_> {
    fn node(&self, block: u64, level: u8) -> Result<Arc<Page>, StoreError> {
        if let Some((_, p)) = self.pending.iter().rev().find(|(b, _)| *b == block) {
            return Ok(p.clone());
        }
        self.rd.node(block, level)
    }
}

impl NodeWrite for Sink<'_> {
    fn alloc(&mut self) -> Result<u64, StoreError> {
        if self.run.1 == 0 {
            let goal = self.taken.last().map_or(0, |&(s, l)| s + l);
            let got = self.inner.wr().alloc.alloc_nodes(goal, NODE_RUN);
            let Some((s, l)) = got else {
                return Err(StoreError::NoSpace);
            };
            self.taken.push((s, l));
            self.inner.meta_blocks.insert(s, l);
            self.run = (s, l);
        }
        let b = self.run.0;
        self.run = (b + 1, self.run.1 - 1);
        Ok(b)
    }

    fn write(&mut self, block: u64, page: Page) -> Result<(), StoreError> {
        self.pending.push((block, Arc::new(page)));
        self.written += 1;
        if self.pending.len() >= WRITE_BATCH {
            self.flush_writes()?;
        }
        Ok(())
    }

    fn replaced(&mut self, block: u64) {
        self.replaced.push(block);
    }
}

impl Sink<'_> {
    /// Write the pending nodes, neighbours merged into one write, and cache them (they are
    /// the tree from now on, or garbage if this write-back fails).
    fn flush_writes(&mut self) -> Result<(), StoreError> {
        let mut p = std::mem::take(&mut self.pending);
        p.sort_by_key(|(b, _)| *b);
        let mut i = 0;
        while i < p.len() {
            let mut j = i + 1;
            while j < p.len() && p[j].0 == p[j - 1].0 + 1 {
                j += 1;
            }
            let mut buf = Vec::with_capacity((j - i) * BLOCK as usize);
            for (_, pg) in &p[i..j] {
                buf.extend_from_slice(pg.bytes());
            }
            self.inner.dev.write_at(&buf, p[i].0 * BLOCK)?;
            i = j;
        }
        for (b, pg) in p {
            self.inner.cache.insert(b, pg);
        }
        Ok(())
    }

    /// The unused rest of the current run goes back to the allocator.
    fn finish(&mut self) {
        let (s, l) = self.run;
        self.run = (0, 0);
        if l > 0 {
            let mut g = self.inner.wr();
            let _ = g.alloc.free(s, l);
            self.inner.meta_blocks.remove(s, l);
            if let Some(last) = self.taken.last_mut() {
                last.1 -= l;
            }
        }
        self.taken.retain(|&(_, l)| l > 0);
    }
}

/// What step 1 took.
struct Snapshot {
    c: Csn,
    frozen: Arc<Changes>,
    free: Allocator,
    next_ino: u64,
    files: u64,
    clients: Option<Vec<u8>>,
}

/// What steps 2–4 made.
struct Made {
    ck: Checkpoint,
    free_blocks: Vec<u64>,
    clients_blocks: Vec<u64>,
    /// Blocks to give back once the checkpoint is in (replaced nodes, old blobs).
    release: Vec<(u64, u64)>,
    written: u64,
}

impl Inner {
    /// One write-back pass; returns the CSN the tree on disk now covers.
    pub(super) fn write_back_now(&self) -> Result<Csn, StoreError> {
        let mut wb = self.wb.lock().unwrap_or_else(|e| e.into_inner());
        // Close and force what is committed now, so that the C read under the lock below is
        // usually a closed, durable checkpoint.
        self.force(self.log.last_committed())?;
        let old_csn = wb.ck.csn;
        let snap = {
            let mut g = self.wr();
            let c = self.log.last_committed();
            // `last_committed` may name the still-open checkpoint: commits made after we drop
            // the lock join that same CSN, and moving the tail past it would drop them from the
            // log while they are in no tree we write. So claim C only if its checkpoint was
            // already closed (durable); otherwise C - 1, and checkpoint C stays in the log and
            // is replayed over a tree that already holds part of it (module comment, state.rs).
            let c = if self.log.durable_csn() >= c {
                c
            } else {
                Csn(c.0.saturating_sub(1))
            };
            if g.kv.live.is_empty() && !g.clients_dirty {
                return Ok(c);
            }
            let frozen = Arc::new(std::mem::take(&mut g.kv.live));
            g.kv.live_bytes = 0;
            g.kv.frozen = Some(frozen.clone());
            g.wb_hold = Some(old_csn);
            let mut free = g.alloc.clone();
            let held: Vec<(u64, u64)> = g
                .reserved
                .iter()
                .map(|(&s, &l)| (s, l))
                .chain(g.busy.iter().map(|b| (b.phys, b.len)))
                .collect();
            for (s, l) in held {
                free.set_free(s, l)
                    .map_err(|e| StoreError::Io(e.to_string()))?;
            }
            let clients = g
                .clients_dirty
                .then(|| format::encode_clients(g.clients.iter()));
            g.clients_dirty = false;
            Snapshot {
                c,
                frozen,
                free,
                next_ino: g.next_ino,
                files: g.files,
                clients,
            }
        };
        let had_clients = snap.clients.is_some();
        let frozen = snap.frozen.clone();
        let rd = self.rd().kv.rd.clone();
        let r = self.write_parts(&mut wb, snap, rd);
        let mut g = self.wr();
        g.kv.frozen = None;
        g.wb_hold = None;
        let out = match r {
            Ok(()) => {
                wb.runs += 1;
                Ok(Csn(wb.ck.csn))
            }
            Err(e) => {
                // The last checkpoint stays; the frozen changes go back under the live ones
                // (which are newer): what a part already merged is merged again next time,
                // to the same result.
                for (k, v) in frozen.iter() {
                    if !g.kv.live.contains_key(k) {
                        let cost = super::kv::change_cost(k, v);
                        g.kv.live.insert(k.clone(), v.clone());
                        g.kv.live_bytes += cost;
                    }
                }
                g.clients_dirty |= had_clients;
                Err(e)
            }
        };
        self.pending_bytes.store(g.kv.live_bytes, Ordering::Relaxed);
        drop(g);
        self.wb_done.notify_all();
        out
    }

    /// Steps 2–5, in as many parts as free space asks for (module comment).
    fn write_parts(&self, wb: &mut Wb, snap: Snapshot, rd: Reader) -> Result<(), StoreError> {
        // 2. write-ahead: the log covers C before any tree reflecting it lands.
        self.force(snap.c)?;
        let mut free = snap.free;
        let mut clients = snap.clients;
        let mut from: Option<Vec<u8>> = None;
        loop {
            // A part: as many changes as half the free space can take new nodes for.
            let room = self.rd().alloc.free_node_blocks().saturating_sub(32) / 2;
            let per = (room as usize).max(16);
            // Usually one part: the frozen set itself, not a copy of it.
            let mut part = Changes::new();
            let mut next = None;
            if from.is_some() || snap.frozen.len() > per {
                let range = match &from {
                    None => snap.frozen.range::<Vec<u8>, _>(..),
                    Some(k) => snap.frozen.range::<Vec<u8>, _>(k.clone()..),
                };
                for (k, v) in range {
                    if part.len() >= per {
                        next = Some(k.clone());
                        break;
                    }
                    part.insert(k.clone(), v.clone());
                }
            }
            let whole = from.is_none() && next.is_none();
            let changes: &Changes = if whole { &snap.frozen } else { &part };
            let last = next.is_none();
            let mut sink = Sink {
                inner: self,
                rd: rd.clone(),
                run: (0, 0),
                taken: Vec::new(),
                replaced: Vec::new(),
                pending: Vec::new(),
                written: 0,
            };
            let csn = if last { snap.c.0 } else { wb.ck.csn };
            let made = self.write_checkpoint(
                wb,
                changes,
                &mut free,
                csn,
                clients.take(),
                snap.next_ino,
                &mut sink,
            );
            let mut g = self.wr();
            match made {
                Ok(m) => {
                    for &(s, l) in &m.release {
                        let _ = g.alloc.free(s, l);
                        self.meta_blocks.remove(s, l);
                        for b in s..s + l {
                            self.cache.evict(b);
                        }
                    }
                    g.kv.root = m.ck.root;
                    self.tree_nodes.store(m.ck.nodes, Ordering::Relaxed);
                    wb.ck = m.ck;
                    wb.free_blocks = m.free_blocks;
                    wb.clients_blocks = m.clients_blocks;
                    wb.objects_written += m.written;
                }
                Err(e) => {
                    drop(g);
                    sink.finish();
                    let mut g = self.wr();
                    for &(s, l) in &sink.taken {
                        let _ = g.alloc.free(s, l);
                        self.meta_blocks.remove(s, l);
                        for b in s..s + l {
                            self.cache.evict(b);
                        }
                    }
                    return Err(e);
                }
            }
            drop(g);
            match next {
                Some(k) => from = Some(k),
                None => break,
            }
        }
        debug_assert!(wb.ck.files == snap.files || self.failed.load(Ordering::Relaxed));
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn write_checkpoint(
        &self,
        wb: &Wb,
        changes: &Changes,
        free: &mut Allocator,
        csn: u64,
        clients_bytes: Option<Vec<u8>>,
        next_ino: u64,
        sink: &mut Sink<'_>,
    ) -> Result<Made, StoreError> {
        let old = &wb.ck;
        // 3. the new tree
        let (root, added) = btree::merge(sink, old.root, changes, super::keys::K_INODE)?;
        sink.flush_writes()?;
        sink.finish();
        let mut release: Vec<(u64, u64)> = sink.replaced.iter().map(|&b| (b, 1)).collect();
        // 4. blobs: client records (kept from the old checkpoint if unchanged), free space.
        let (clients, clients_blocks) = match clients_bytes {
            Some(bytes) => {
                let n = bytes.len().div_ceil(format::BLOB_PAYLOAD).max(1) as u64;
                let blocks = self.alloc_blocks(sink, n)?;
                let r = self.write_blob(&bytes, &blocks)?;
                release.extend(wb.clients_blocks.iter().map(|&b| (b, 1)));
                (r, blocks)
            }
            None => (old.clients, wb.clients_blocks.clone()),
        };
        release.extend(wb.free_blocks.iter().map(|&b| (b, 1)));
        for &(s, l) in &sink.taken {
            free.set_used(s, l)
                .map_err(|e| StoreError::Io(e.to_string()))?;
        }
        for &(s, l) in &release {
            free.set_free(s, l)
                .map_err(|e| StoreError::Io(e.to_string()))?;
        }
        // The list's own blocks come from the allocator (free in `free` too); taking each
        // may split one extent, so take until the list fits.
        let mut list_blocks: Vec<u64> = Vec::new();
        loop {
            let need = ((free.extent_count() + 1) * 16)
                .div_ceil(format::BLOB_PAYLOAD)
                .max(1);
            if list_blocks.len() >= need {
                break;
            }
            let more = self.alloc_blocks(sink, (need - list_blocks.len()) as u64)?;
            for &b in &more {
                free.set_used(b, 1)
                    .map_err(|e| StoreError::Io(e.to_string()))?;
            }
            list_blocks.extend(more);
        }
        let list = format::encode_free_list(free.free_extents());
        let free_ref = self.write_blob(&list, &list_blocks)?;
        self.dev.flush()?;
        let nodes = (old.nodes + sink.written).saturating_sub(sink.replaced.len() as u64);
        let ck = Checkpoint {
            seq: old.seq + 1,
            csn,
            root,
            next_ino,
            files: (old.files as i64 + added).max(0) as u64,
            nodes,
            free: free_ref,
            clients,
        };
        let slot = ck.seq % 2;
        let at = (self.sb.geometry.meta_start + slot) * BLOCK;
        if let Err(e) = self.dev.write_fua(&ck.encode(slot), at) {
            // Not known to be durable, not known not to be: nothing it names may be reused,
            // and nothing more is accepted (as the log shuts down after a failed write).
            self.failed.store(true, Ordering::Relaxed);
            sink.taken.clear();
            return Err(e.into());
        }
        Ok(Made {
            ck,
            free_blocks: list_blocks,
            clients_blocks,
            release,
            written: sink.written,
        })
    }

    /// `n` blocks for a blob, contiguous where the allocator has them.
    fn alloc_blocks(&self, sink: &mut Sink<'_>, n: u64) -> Result<Vec<u64>, StoreError> {
        let mut out = Vec::new();
        let mut g = self.wr();
        while (out.len() as u64) < n {
            let goal = out.last().map_or(0, |&b| b + 1);
            let Some((s, l)) = g.alloc.alloc_nodes(goal, n - out.len() as u64) else {
                return Err(StoreError::NoSpace);
            };
            sink.taken.push((s, l));
            self.meta_blocks.insert(s, l);
            out.extend(s..s + l);
        }
        Ok(out)
    }

    fn write_blob(&self, bytes: &[u8], blocks: &[u64]) -> Result<BlobRef, StoreError> {
        if bytes.len() > blocks.len() * format::BLOB_PAYLOAD {
            return Err(StoreError::Io("blob larger than its blocks".into()));
        }
        for (b, buf) in blocks.iter().zip(format::encode_blob(bytes, blocks)) {
            self.dev.write_at(&buf, b * BLOCK)?;
        }
        Ok(BlobRef {
            start: blocks.first().copied().unwrap_or(0),
            blocks: blocks.len() as u32,
            bytes: bytes.len() as u32,
            crc: crc32c::crc32c(bytes),
        })
    }
}

/// Read a blob a checkpoint names: its bytes and its blocks.
pub fn read_blob(
    dev: &dyn metalog::BlockDev,
    r: &BlobRef,
) -> Result<(Vec<u8>, Vec<u64>), StoreError> {
    let mut out = Vec::new();
    let mut blocks = Vec::new();
    if r.blocks == 0 {
        return Ok((out, blocks));
    }
    if r.bytes as u64 > r.blocks as u64 * format::BLOB_PAYLOAD as u64 {
        return Err(StoreError::Io("checkpoint names a bad blob".into()));
    }
    // A chain on a corrupt disk may loop: each block once, so what is read stays within
    // the volume, whatever count the checkpoint says.
    if r.blocks as u64 > dev.size() / BLOCK {
        return Err(StoreError::Io("checkpoint names a bad blob".into()));
    }
    let mut seen = std::collections::HashSet::new();
    let mut at = r.start;
    let mut buf = vec![0u8; BLOCK as usize];
    for i in 0..r.blocks {
        if at == 0 || at.saturating_mul(BLOCK) >= dev.size() {
            return Err(StoreError::Io("checkpoint blob: broken chain".into()));
        }
        if !seen.insert(at) {
            return Err(StoreError::Io("checkpoint blob: the chain loops".into()));
        }
        dev.read_at(&mut buf, at * BLOCK)?;
        blocks.push(at);
        out.extend_from_slice(&buf[8..]);
        at = format::blob_next(&buf);
        if i + 1 == r.blocks && at != 0 {
            return Err(StoreError::Io("checkpoint blob: chain too long".into()));
        }
    }
    out.truncate(r.bytes as usize);
    if crc32c::crc32c(&out) != r.crc {
        return Err(StoreError::Io("checkpoint blob: bad checksum".into()));
    }
    Ok((out, blocks))
}

impl Writeback for Inner {
    fn write_back(&self) -> Result<Csn, String> {
        self.write_back_now().map_err(|e| e.to_string())
    }
}
