//! The keyed view the store works on: the durable B+tree (read through the page cache) under
//! the changes made since its checkpoint (docs/design.md §2: "in-memory indexes ... write-back
//! grows with dirty metadata").
//!
//! ```text
//!  get / scan ─▶ live changes ─▶ frozen changes (a write-back in flight) ─▶ tree at `root`
//!  put / del  ─▶ live changes          write-back: live → frozen → merged into a new tree
//! ```
//! `live` holds what was committed since the last write-back started; `frozen` what that
//! write-back is merging (readable until its checkpoint is durable and the new root is in).
//! Both are bounded by the write-back trigger (writeback.rs), the tree by the page cache.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use metalog::BlockDev;

use super::btree::{self, Changes, Cursor, Entry, NodeRead, Page, Root};
use super::cache::PageCache;
use super::types::{StoreError, BLOCK};

/// Reads tree nodes through the cache.
#[derive(Clone)]
pub struct Reader {
    pub dev: Arc<dyn BlockDev>,
    pub cache: Arc<PageCache>,
    /// Blocks read from the device (mount statistics).
    pub reads: Arc<AtomicU64>,
}

impl NodeRead for Reader {
    fn node(&self, block: u64, level: u8) -> Result<Arc<Page>, StoreError> {
        if let Some(p) = self.cache.get(block) {
            if p.level() == level {
                return Ok(p);
            }
        }
        let mut buf = vec![0u8; BLOCK as usize];
        self.dev.read_at(&mut buf, block * BLOCK)?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        let p = Arc::new(Page::parse(buf, block, Some(level))?);
        self.cache.insert(block, p.clone());
        Ok(p)
    }

    /// The nodes not cached, read as runs of adjacent blocks (a write-back writes its nodes
    /// in runs, writeback.rs) by up to `READ_AHEAD_THREADS` reads in flight: the device's
    /// queue depth instead of one round trip per node.
    fn read_ahead(&self, nodes: &[(u64, u8)]) {
        let mut want: Vec<(u64, u8)> = nodes
            .iter()
            .copied()
            .filter(|(b, _)| !self.cache.contains(*b))
            .collect();
        want.sort_unstable();
        want.dedup_by_key(|n| n.0);
        let mut runs: Vec<&[(u64, u8)]> = Vec::new();
        let mut start = 0;
        for i in 1..=want.len() {
            if i == want.len() || want[i].0 != want[i - 1].0 + 1 || i - start == READ_AHEAD_RUN {
                runs.push(&want[start..i]);
                start = i;
            }
        }
        if runs.len() <= 1 {
            runs.iter().for_each(|r| self.read_run(r));
            return;
        }
        let per = runs.len().div_ceil(READ_AHEAD_THREADS);
        std::thread::scope(|s| {
            for share in runs.chunks(per) {
                s.spawn(move || share.iter().for_each(|r| self.read_run(r)));
            }
        });
    }
}

/// Reads in flight at once when the tree is read ahead (`NodeRead::read_ahead`).
const READ_AHEAD_THREADS: usize = 16;
/// Longest run of adjacent nodes read ahead by one read (256 KiB).
const READ_AHEAD_RUN: usize = 64;

impl Reader {
    /// One read of `run` (adjacent blocks, ascending): every node that parses is cached; a
    /// failed read or a bad node is left for `node` to report when it is used.
    fn read_run(&self, run: &[(u64, u8)]) {
        let Some(&(first, _)) = run.first() else {
            return;
        };
        let mut buf = vec![0u8; run.len() * BLOCK as usize];
        if self.dev.read_at(&mut buf, first * BLOCK).is_err() {
            return;
        }
        self.reads.fetch_add(run.len() as u64, Ordering::Relaxed);
        for (&(block, level), b) in run.iter().zip(buf.chunks_exact(BLOCK as usize)) {
            if let Ok(p) = Page::parse(b.to_vec(), block, Some(level)) {
                self.cache.insert_ahead(block, Arc::new(p));
            }
        }
    }
}

/// Bytes an entry of a change map costs in memory (key, value, map node share).
pub fn change_cost(k: &[u8], v: &Option<Vec<u8>>) -> u64 {
    (k.len() + v.as_ref().map_or(0, |v| v.len()) + 96) as u64
}

/// What `Kv::scan` calls for each entry: `Ok(false)` stops.
pub type ScanFn<'a> = dyn FnMut(&[u8], &[u8]) -> Result<bool, StoreError> + 'a;

pub struct Kv {
    pub live: Changes,
    pub live_bytes: u64,
    pub frozen: Option<Arc<Changes>>,
    pub root: Option<Root>,
    pub rd: Reader,
}

impl Kv {
    pub fn new(rd: Reader, root: Option<Root>) -> Kv {
        Kv {
            live: Changes::new(),
            live_bytes: 0,
            frozen: None,
            root,
            rd,
        }
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if let Some(v) = self.live.get(key) {
            return Ok(v.clone());
        }
        if let Some(v) = self.frozen.as_ref().and_then(|f| f.get(key)) {
            return Ok(v.clone());
        }
        btree::get(&self.rd, self.root, key)
    }

    /// Reads ahead the tree's nodes on the paths to `keys` (`btree::prefetch`).
    pub fn prefetch(&self, keys: &mut Vec<Vec<u8>>) -> Result<(), StoreError> {
        btree::prefetch(&self.rd, self.root, keys)
    }

    /// Reads ahead the first `leaves` leaves of the tree's part of `[from, to)`
    /// (`btree::prefetch_range`): where to read ahead again, None at the range's end.
    pub fn prefetch_range(
        &self,
        from: &[u8],
        to: &[u8],
        leaves: usize,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        btree::prefetch_range(&self.rd, self.root, from, to, leaves)
    }

    pub fn put(&mut self, key: Vec<u8>, val: Vec<u8>) {
        self.set(key, Some(val));
    }

    pub fn del(&mut self, key: Vec<u8>) {
        self.set(key, None);
    }

    fn set(&mut self, key: Vec<u8>, val: Option<Vec<u8>>) {
        let add = change_cost(&key, &val);
        if let Some(old) = self.live.insert(key.clone(), val) {
            self.live_bytes -= change_cost(&key, &old);
        }
        self.live_bytes += add;
    }

    /// Calls `f(key, value)` for every entry in `[from, to)` in key order until it returns
    /// `Ok(false)`.
    pub fn scan(&self, from: &[u8], to: &[u8], f: &mut ScanFn<'_>) -> Result<(), StoreError> {
        if from >= to {
            return Ok(());
        }
        let range = (Bound::Included(from), Bound::Excluded(to));
        let mut live = self.live.range::<[u8], _>(range).peekable();
        let empty = Changes::new();
        let frozen = self.frozen.as_deref().unwrap_or(&empty);
        let mut froz = frozen.range::<[u8], _>(range).peekable();
        let mut cur = Cursor::seek(&self.rd, self.root, from)?;
        let mut base = cur.next(&self.rd)?.filter(|(k, _)| k.as_slice() < to);
        loop {
            // The smallest key of the three sources; the newest source wins a tie.
            let mut best: Option<&[u8]> = None;
            for k in [
                live.peek().map(|(k, _)| k.as_slice()),
                froz.peek().map(|(k, _)| k.as_slice()),
                base.as_ref().map(|(k, _)| k.as_slice()),
            ]
            .into_iter()
            .flatten()
            {
                if best.is_none_or(|b| k < b) {
                    best = Some(k);
                }
            }
            let Some(k) = best.map(|k| k.to_vec()) else {
                return Ok(());
            };
            let mut val: Option<Option<Vec<u8>>> = None;
            if live.peek().is_some_and(|(lk, _)| **lk == k) {
                val = live.next().map(|(_, v)| v.clone());
            }
            if froz.peek().is_some_and(|(fk, _)| **fk == k) {
                let v = froz.next().map(|(_, v)| v.clone());
                val = val.or(v);
            }
            if base.as_ref().is_some_and(|(bk, _)| *bk == k) {
                let v = base.take().map(|(_, v)| Some(v));
                val = val.or(v);
                base = cur.next(&self.rd)?.filter(|(k, _)| k.as_slice() < to);
            }
            if let Some(Some(v)) = val {
                if !f(&k, &v)? {
                    return Ok(());
                }
            }
        }
    }

    /// The first entry in `[from, to)`.
    pub fn first(&self, from: &[u8], to: &[u8]) -> Result<Option<Entry>, StoreError> {
        let mut out = None;
        self.scan(from, to, &mut |k, v| {
            out = Some((k.to_vec(), v.to_vec()));
            Ok(false)
        })?;
        Ok(out)
    }

    /// Every entry in `[from, to)`.
    pub fn collect(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, StoreError> {
        let mut out = Vec::new();
        self.scan(from, to, &mut |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_layer_wins_and_deletes_hide() {
        let rd = Reader {
            dev: Arc::new(metalog::CrashDev::new(1 << 20, 1)),
            cache: Arc::new(PageCache::new(1 << 20)),
            reads: Arc::new(AtomicU64::new(0)),
        };
        let mut kv = Kv::new(rd, None);
        let mut f = Changes::new();
        f.insert(b"a".to_vec(), Some(b"fa".to_vec()));
        f.insert(b"b".to_vec(), Some(b"fb".to_vec()));
        f.insert(b"c".to_vec(), None);
        kv.frozen = Some(Arc::new(f));
        kv.put(b"b".to_vec(), b"lb".to_vec());
        kv.del(b"a".to_vec());
        kv.put(b"c".to_vec(), b"lc".to_vec());
        kv.put(b"d".to_vec(), b"ld".to_vec());
        assert_eq!(kv.get(b"a").unwrap(), None);
        assert_eq!(kv.get(b"b").unwrap(), Some(b"lb".to_vec()));
        let all = kv.collect(b"a", b"z").unwrap();
        let keys: Vec<_> = all.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(
            keys,
            vec![
                (b"b".to_vec(), b"lb".to_vec()),
                (b"c".to_vec(), b"lc".to_vec()),
                (b"d".to_vec(), b"ld".to_vec())
            ]
        );
        assert_eq!(kv.first(b"c", b"d").unwrap().unwrap().0, b"c".to_vec());
        assert_eq!(kv.first(b"e", b"z").unwrap(), None);
    }
}
