//! The page cache: clean B+tree nodes by block number, bounded by `metadata_cache` bytes
//!. Nodes are immutable once written (copy-on-write, btree.rs), so a cached
//! page never goes stale while its block is part of the tree; blocks a write-back frees are
//! evicted before they can be reused.
//!
//! Eviction is CLOCK (second chance): a hit sets the page's reference bit; the hand clears set
//! bits and evicts the first page whose bit is clear. Internal nodes are passed over while they
//! hold at most half the pages: they are about one node in a hundred, and every descent goes
//! through them, so a leaf read once (a create in a cold directory, a READDIR) must not push
//! out the path to the next leaf (docs/benchmarks.md). A page read ahead
//! (`insert_ahead`: a replay's batch, a directory scan's window) keeps its bit until its first
//! use, which clears it instead of setting it: unused, it survives the hand once (so a window
//! is not evicted before its scan walks it); used once, it is as cold as a page read when it
//! was needed (so a scan's leaves do not look hot). One mutex; no I/O under it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::btree::Page;

/// Bytes one cached page costs: the 4 KiB buffer plus the map slot, the ring slot and the Arc.
pub const PAGE_COST: u64 = 4096 + 96;

struct Slot {
    page: Arc<Page>,
    referenced: bool,
    /// Read ahead and not used yet.
    ahead: bool,
}

struct Inner {
    map: HashMap<u64, Slot>,
    ring: VecDeque<u64>,
    /// Cached internal nodes (level > 0).
    inner_pages: usize,
}

pub struct PageCache {
    cap_pages: usize,
    inner: Mutex<Inner>,
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl PageCache {
    /// A cache of at most `bytes` (at least 64 pages, so a descent never evicts its own path).
    pub fn new(bytes: u64) -> PageCache {
        PageCache {
            cap_pages: ((bytes / PAGE_COST) as usize).max(64),
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                ring: VecDeque::new(),
                inner_pages: 0,
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, block: u64) -> Option<Arc<Page>> {
        let mut g = self.lock();
        match g.map.get_mut(&block) {
            Some(s) => {
                // The first use of a page read ahead is the use a read on demand would have
                // served: it leaves the page as cold as that read would.
                s.referenced = !s.ahead;
                s.ahead = false;
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(s.page.clone())
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Whether `block` is cached, without counting a hit or a miss or setting its bit.
    pub fn contains(&self, block: u64) -> bool {
        self.lock().map.contains_key(&block)
    }

    pub fn insert(&self, block: u64, page: Arc<Page>) {
        self.put(block, page, false);
    }

    /// Insert a page read ahead of its use (see the module comment).
    pub fn insert_ahead(&self, block: u64, page: Arc<Page>) {
        self.put(block, page, true);
    }

    fn put(&self, block: u64, page: Arc<Page>, ahead: bool) {
        let mut g = self.lock();
        let inner = usize::from(page.level() > 0);
        if let Some(s) = g.map.get_mut(&block) {
            let was = usize::from(s.page.level() > 0);
            s.page = page;
            g.inner_pages = g.inner_pages + inner - was;
            return;
        }
        // Internal nodes are kept while they are at most half the pages, so there is always a
        // leaf to evict and the hand stops within two turns.
        let keep_inner = self.cap_pages / 2;
        while g.map.len() >= self.cap_pages {
            let Some(b) = g.ring.pop_front() else { break };
            let protect = g.inner_pages <= keep_inner;
            match g.map.get_mut(&b) {
                Some(s) if s.referenced || (protect && s.page.level() > 0) => {
                    s.referenced = false;
                    g.ring.push_back(b);
                }
                Some(_) => {
                    if let Some(s) = g.map.remove(&b) {
                        g.inner_pages -= usize::from(s.page.level() > 0);
                    }
                }
                None => {}
            }
        }
        g.inner_pages += inner;
        g.map.insert(
            block,
            Slot {
                page,
                referenced: ahead,
                ahead,
            },
        );
        g.ring.push_back(block);
    }

    /// Forget `block` (it was freed; its number may be reused for something else).
    pub fn evict(&self, block: u64) {
        // The ring keeps the number until the hand passes it; the map no longer does.
        let mut g = self.lock();
        if let Some(s) = g.map.remove(&block) {
            g.inner_pages -= usize::from(s.page.level() > 0);
        }
    }

    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Pages it holds at most.
    pub fn capacity(&self) -> usize {
        self.cap_pages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_second_chance() {
        let c = PageCache::new(0);
        assert_eq!(c.capacity(), 64);
        for b in 0..64 {
            c.insert(b, Arc::new(Page::empty_leaf()));
        }
        // Block 0 is hot: it survives the next round of inserts, the cold ones go first.
        assert!(c.get(0).is_some());
        for b in 64..100 {
            c.insert(b, Arc::new(Page::empty_leaf()));
        }
        assert_eq!(c.len(), 64);
        assert!(c.get(0).is_some(), "referenced page evicted");
        assert!(c.get(1).is_none(), "cold page kept");
        c.evict(0);
        assert!(c.get(0).is_none());
    }

    /// A page read ahead survives one turn of the hand before its use; once used it is as
    /// cold as a page read on demand, which goes before a page used twice.
    #[test]
    fn pages_read_ahead_wait_for_their_use_then_go_cold() {
        let c = PageCache::new(0);
        for b in 0..32 {
            c.insert(b, Arc::new(Page::empty_leaf()));
            assert!(c.get(b).is_some()); // used twice: referenced
        }
        for b in 100..132 {
            c.insert_ahead(b, Arc::new(Page::empty_leaf()));
        }
        // A full cache and 16 more reads: the hand passes every page once, clearing its bit
        // (the used pages and those read ahead alike), then evicts the oldest, 0 to 15.
        for b in 200..216 {
            c.insert(b, Arc::new(Page::empty_leaf()));
        }
        assert!(
            (100..132).all(|b| c.contains(b)),
            "read ahead, evicted unused"
        );
        // Used once now: cold again, like the on-demand pages; the used-twice pages were
        // cleared by the same pass, so both go in ring order from here.
        for b in 100..132 {
            assert!(c.get(b).is_some());
        }
        let g = c.lock();
        assert!((100..132).all(|b| !g.map[&b].referenced && !g.map[&b].ahead));
    }

    /// Leaves read once (a stream of cold creates, a READDIR) do not push out the internal
    /// nodes above them, however many pass through; internal nodes beyond half the pages are
    /// evicted like leaves, so the bound holds.
    #[test]
    fn internal_nodes_outlive_a_stream_of_leaves() {
        let c = PageCache::new(0);
        for b in 0..20 {
            c.insert(b, Arc::new(Page::empty_inner()));
        }
        for b in 1000..1500 {
            c.insert(b, Arc::new(Page::empty_leaf()));
        }
        assert_eq!(c.len(), 64);
        for b in 0..20 {
            assert!(
                c.contains(b),
                "internal node {b} evicted by leaves read once"
            );
        }
        // Evicting an internal node forgets it in the count too.
        c.evict(0);
        for b in 2000..2200 {
            c.insert(b, Arc::new(Page::empty_inner()));
        }
        assert_eq!(c.len(), 64, "internal nodes beyond half the pages must go");
        let g = c.lock();
        let counted = g.map.values().filter(|s| s.page.level() > 0).count();
        assert_eq!(g.inner_pages, counted);
    }
}
