//! The page cache: clean B+tree nodes by block number, bounded by `metadata_cache` bytes
//! (issue 11 item 2). Nodes are immutable once written (copy-on-write, btree.rs), so a cached
//! page never goes stale while its block is part of the tree; blocks a write-back frees are
//! evicted before they can be reused.
//!
//! Eviction is CLOCK (second chance): a hit sets the page's reference bit; the hand clears set
//! bits and evicts the first page whose bit is clear. One mutex; no I/O under it.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::btree::Page;

/// Bytes one cached page costs: the 4 KiB buffer plus the map slot, the ring slot and the Arc.
pub const PAGE_COST: u64 = 4096 + 96;

struct Slot {
    page: Arc<Page>,
    referenced: bool,
}

struct Inner {
    map: HashMap<u64, Slot>,
    ring: VecDeque<u64>,
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
                s.referenced = true;
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
        let mut g = self.lock();
        if let Some(s) = g.map.get_mut(&block) {
            s.page = page;
            return;
        }
        while g.map.len() >= self.cap_pages {
            let Some(b) = g.ring.pop_front() else { break };
            match g.map.get_mut(&b) {
                Some(s) if s.referenced => {
                    s.referenced = false;
                    g.ring.push_back(b);
                }
                Some(_) => {
                    g.map.remove(&b);
                }
                None => {}
            }
        }
        g.map.insert(
            block,
            Slot {
                page,
                referenced: false,
            },
        );
        g.ring.push_back(block);
    }

    /// Forget `block` (it was freed; its number may be reused for something else).
    pub fn evict(&self, block: u64) {
        // The ring keeps the number until the hand passes it; the map no longer does.
        self.lock().map.remove(&block);
    }

    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    #[cfg(test)]
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
}
