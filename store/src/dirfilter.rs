//! Negative-name filters of large directories (docs/store.md "Negative-name
//! filters"): a Bloom filter over the name hashes (`Core::name_base`) of every entry of a
//! directory, so that a create of a new name in a directory of a million entries proves the
//! name absent, and collision slot 0 of its hash free, without reading the directory's leaf.
//!
//! ```text
//!  no entry ──64 adds──▶ Building (one scan at a time, chunked under the read lock)
//!     ▲                     │ finish (write lock): < min_entries ─▶ Idle (rescan later)
//!     └──── evicted ────────┴─▶ Ready ──adds or removes > n/2──▶ Building (old answers)
//! ```
//! The rules that make "absent" exact: an entry is registered as `Building` under the write
//! lock before its scan reads anything; from then on every `DirentAdd` applied to the
//! directory adds its hash (`on_add`, under the same lock); each chunk of the scan reads a
//! consistent view (tree + changes) under the read lock. So an entry that exists when the
//! filter turns `Ready` was either added since the registration (hooked) or existed
//! throughout the scan (scanned when the scan passed its cookie). Removals never clear bits.
//! Filters live only in memory; a mount starts without any.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Directories with fewer entries get no filter: their lookups read a leaf or two that stay
/// cached (a 4,096-entry directory is ~80 leaves, a 100-entry one 2).
pub const MIN_ENTRIES: u64 = 4096;
/// Entries added to a directory without a filter (counted in `TRIGGER_SLOTS` shared
/// counters) before its scan starts: a directory must be busy to be scanned.
const TRIGGER_ADDS: u32 = 64;
const TRIGGER_SLOTS: usize = 256;
/// Entries per chunk of a scan (each chunk holds the read lock: ~5 leaves when cold).
const SCAN_CHUNK: usize = 256;
/// Leaves a scan reads ahead at once, at most (`ReadAhead`): 128 leaves (512 KiB, ~10,000
/// entries), read again half-way, so each batch brings ~64 new leaves, ~4 per reader thread
/// (kv.rs `READ_AHEAD_THREADS`). Also at most an eighth of the page cache: a leaf read ahead
/// survives one turn of CLOCK's hand before its use (cache.rs `insert_ahead`), and a window
/// that small is walked long before a second turn (without that survival, a window met
/// by the hand would lose up to 63 unwalked leaves, read again one at a time). A cold scan
/// reads the same leaves either way (the cache's churn is the scan's, not the window's), and
/// internal nodes stay protected by the cache's own rule (cache.rs).
const SCAN_AHEAD: usize = 128;
/// Hash probes per name: optimal for 8–9 bits per entry (≈2% false positives at 8).
const PROBES: u64 = 6;
/// Bits per entry a finished filter is folded down to (at least): after it grows by half
/// (the rebuild point) it still has 8.
const BITS_PER_ENTRY: u64 = 12;
/// Bits per entry below which a filter is not worth its memory (≈ 15% false positives).
const MIN_BITS_PER_ENTRY: u64 = 4;
/// Memory of a filter's record beside its bits (counted against the share).
const ENTRY_COST: u64 = 128;
/// Records at most (filters and "too small, rescan later" marks).
const MAX_ENTRIES: usize = 4096;

/// The counters a run reads (metrics: `pnfsd_dir_filter_*`).
#[derive(Debug, Default)]
pub struct FilterCounters {
    /// Lookups a filter answered "absent" (no tree read).
    pub hits: AtomicU64,
    /// Lookups a filter could not answer (the hash is there, or a false positive).
    pub misses: AtomicU64,
    /// Scans finished into a filter.
    pub builds: AtomicU64,
    /// Filters dropped to stay within the share.
    pub evictions: AtomicU64,
}

/// A Bloom filter of `2^n` bits (a power of two, so it folds in half: `fold`).
pub struct Bloom {
    bits: Vec<u64>,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Bloom {
    pub fn new(bits: u64) -> Bloom {
        let words = (bits.next_power_of_two() / 64).max(1);
        Bloom {
            bits: vec![0; words as usize],
        }
    }

    fn probes(h: u64) -> impl Iterator<Item = u64> {
        // Double hashing over two mixes of the hash (splitmix64's finaliser: every bit of the
        // hash reaches the low bits the mask keeps, even for hashes narrowed in tests).
        let h1 = mix(h);
        let h2 = mix(h1) | 1;
        (0..PROBES).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)))
    }

    fn mask(&self) -> u64 {
        self.bits.len() as u64 * 64 - 1
    }

    pub fn add(&mut self, h: u64) {
        let m = self.mask();
        for p in Self::probes(h) {
            let b = p & m;
            self.bits[(b / 64) as usize] |= 1 << (b % 64);
        }
    }

    pub fn may_hold(&self, h: u64) -> bool {
        let m = self.mask();
        Self::probes(h).all(|p| {
            let b = p & m;
            self.bits[(b / 64) as usize] & (1 << (b % 64)) != 0
        })
    }

    pub fn bit_len(&self) -> u64 {
        self.bits.len() as u64 * 64
    }

    pub fn bytes(&self) -> u64 {
        self.bits.len() as u64 * 8
    }

    /// Halve it while it keeps at least `min_bits`: bit j of the half is bit j or bit
    /// j + half of the whole, which is what `p & mask` gives with the smaller mask.
    fn fold_to(&mut self, min_bits: u64) {
        while self.bits.len() > 1 && self.bit_len() / 2 >= min_bits {
            let half = self.bits.len() / 2;
            let (a, b) = self.bits.split_at_mut(half);
            for (x, y) in a.iter_mut().zip(b.iter()) {
                *x |= *y;
            }
            self.bits.truncate(half);
        }
        self.bits.shrink_to_fit();
    }
}

/// A filter that answers: entries at its build (`n`), added and removed since.
pub struct Ready {
    bloom: Bloom,
    n: u64,
    adds: u64,
    removes: u64,
}

enum State {
    /// A scan (`id`) is running: hashes added since its registration, and the filter it
    /// replaces (still answering, still added to).
    Building {
        id: u64,
        added: Vec<u64>,
        old: Option<Ready>,
    },
    Ready(Ready),
    /// Scanned and left without a filter (too few entries, or too many for the share):
    /// scanned again after `until` more adds.
    Idle {
        adds: u64,
        until: u64,
    },
}

struct Entry {
    state: State,
    /// `DirFilters::tick` when last asked (least recently used goes first).
    used: AtomicU64,
}

impl Entry {
    fn cost(&self) -> u64 {
        ENTRY_COST
            + match &self.state {
                State::Ready(r) => r.bloom.bytes(),
                State::Building { old, added, .. } => {
                    old.as_ref().map_or(0, |r| r.bloom.bytes()) + added.len() as u64 * 8
                }
                State::Idle { .. } => 0,
            }
    }
}

/// The filters of one mounted store, in `Core` (under the state lock): asked under the read
/// lock, changed under the write lock.
pub struct DirFilters {
    map: HashMap<u64, Entry>,
    /// Set once the mount is done (the replay adds no filters).
    pub enabled: bool,
    /// Bytes the filters may hold (a sixteenth of `metadata_cache`, mount.rs `budget`).
    pub share: u64,
    /// Test hooks: the threshold, the adds that trigger a scan, the entries per chunk.
    pub min_entries: u64,
    pub trigger_adds: u32,
    pub scan_chunk: usize,
    /// Leaves a scan reads ahead (`SCAN_AHEAD`; 0: none).
    pub scan_ahead: usize,
    trigger: [u32; TRIGGER_SLOTS],
    /// The scan in flight (one at a time).
    scanning: Option<u64>,
    next_id: u64,
    /// A scan registered by the last `apply`s, for `commit_locked` to start.
    pub wanted: Option<(u64, u64)>,
    tick: AtomicU64,
    pub counters: Arc<FilterCounters>,
}

impl DirFilters {
    pub fn new(share: u64, counters: Arc<FilterCounters>) -> DirFilters {
        DirFilters {
            map: HashMap::new(),
            enabled: false,
            share,
            min_entries: MIN_ENTRIES,
            trigger_adds: TRIGGER_ADDS,
            scan_chunk: SCAN_CHUNK,
            scan_ahead: SCAN_AHEAD,
            trigger: [0; TRIGGER_SLOTS],
            scanning: None,
            next_id: 1,
            wanted: None,
            tick: AtomicU64::new(0),
            counters,
        }
    }

    /// Whether `dir` surely holds no entry whose name hashes to `h` (false: don't know).
    pub fn absent(&self, dir: u64, h: u64) -> bool {
        let Some(e) = self.map.get(&dir) else {
            return false;
        };
        let r = match &e.state {
            State::Ready(r) => r,
            State::Building { old: Some(r), .. } => r,
            _ => return false,
        };
        e.used.store(self.tick.fetch_add(1, Relaxed), Relaxed);
        if r.bloom.may_hold(h) {
            self.counters.misses.fetch_add(1, Relaxed);
            false
        } else {
            self.counters.hits.fetch_add(1, Relaxed);
            true
        }
    }

    /// Whether `dir` has a filter that answers and no scan is running (tests).
    #[cfg(test)]
    pub fn settled(&self, dir: u64) -> bool {
        self.scanning.is_none()
            && matches!(self.map.get(&dir).map(|e| &e.state), Some(State::Ready(_)))
    }

    /// Whether a scan of some directory is running (tests).
    #[cfg(test)]
    pub fn scan_running(&self) -> bool {
        self.scanning.is_some()
    }

    /// Whether a scan of `dir` registered as `id` is still wanted.
    pub(super) fn building(&self, dir: u64, id: u64) -> bool {
        matches!(self.map.get(&dir).map(|e| &e.state),
            Some(State::Building { id: i, .. }) if *i == id)
    }

    /// An entry named with hash `h` was added to `dir` (every `DirentAdd`, live or replayed).
    pub fn on_add(&mut self, dir: u64, h: u64) {
        let scan = match self.map.get_mut(&dir).map(|e| &mut e.state) {
            Some(State::Ready(r)) => {
                r.bloom.add(h);
                r.adds += 1;
                r.adds > r.n / 2
            }
            Some(State::Building { added, old, .. }) => {
                added.push(h);
                if let Some(r) = old {
                    r.bloom.add(h);
                }
                false
            }
            Some(State::Idle { adds, until }) => {
                *adds += 1;
                adds >= until
            }
            None => {
                let slot = (dir.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize;
                self.trigger[slot % TRIGGER_SLOTS] += 1;
                self.trigger[slot % TRIGGER_SLOTS] >= self.trigger_adds
            }
        };
        if scan {
            self.register(dir);
        }
    }

    /// An entry of `dir` was removed: bits stay (a false positive at worst); past half the
    /// filter's entries, it is rebuilt.
    pub fn on_remove(&mut self, dir: u64) {
        let rebuild = match self.map.get_mut(&dir).map(|e| &mut e.state) {
            Some(State::Ready(r)) => {
                r.removes += 1;
                r.removes > r.n / 2
            }
            _ => false,
        };
        if rebuild {
            self.register(dir);
        }
    }

    /// Inode `ino` is gone: its filter (if a directory) goes with it.
    pub fn on_free(&mut self, ino: u64) {
        self.map.remove(&ino);
    }

    /// Register a scan of `dir` (if none is running): from now on its adds are kept.
    pub(super) fn register(&mut self, dir: u64) {
        if !self.enabled || self.scanning.is_some() {
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        let old = match self.map.remove(&dir).map(|e| e.state) {
            Some(State::Ready(r)) => Some(r),
            _ => None,
        };
        self.map.insert(
            dir,
            Entry {
                state: State::Building {
                    id,
                    added: Vec::new(),
                    old,
                },
                used: AtomicU64::new(self.tick.load(Relaxed)),
            },
        );
        let slot = (dir.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize;
        self.trigger[slot % TRIGGER_SLOTS] = 0;
        self.scanning = Some(id);
        self.wanted = Some((dir, id));
    }

    /// The scan `id` of `dir` stopped without a result (an error, the directory is gone).
    pub fn abandon(&mut self, dir: u64, id: u64) {
        if self.scanning == Some(id) {
            self.scanning = None;
        }
        if self.building(dir, id) {
            self.map.remove(&dir);
        }
    }

    /// The bits a scan starts with: the largest power of two within the share (folded down
    /// at the end; its record's few bytes may take the share just past its bound).
    pub fn scan_bits(&self) -> u64 {
        let bits = (self.share * 8).max(64);
        1 << (63 - bits.leading_zeros())
    }

    /// The scan `id` of `dir` read `n` entries into `bloom`: add what was added meanwhile and
    /// make it answer (or leave the directory without a filter, `Idle`).
    pub fn finish(&mut self, dir: u64, id: u64, mut bloom: Bloom, n: u64) {
        if self.scanning == Some(id) {
            self.scanning = None;
        }
        if !self.building(dir, id) {
            return;
        }
        let Some(State::Building { added, .. }) = self.map.remove(&dir).map(|e| e.state) else {
            return;
        };
        // Counted twice when added behind the scan's position: an over-estimate, the safe side.
        let n = n + added.len() as u64;
        let state = if n < self.min_entries {
            State::Idle {
                adds: 0,
                until: self.min_entries - n,
            }
        } else if bloom.bit_len() < n * MIN_BITS_PER_ENTRY {
            State::Idle { adds: 0, until: n }
        } else {
            for h in added {
                bloom.add(h);
            }
            bloom.fold_to(n * BITS_PER_ENTRY);
            self.counters.builds.fetch_add(1, Relaxed);
            State::Ready(Ready {
                bloom,
                n,
                adds: 0,
                removes: 0,
            })
        };
        // A mark (`Idle`) makes room among marks only: a filter may take the whole share
        // (1,000,000 entries at the 16M cache's 1 MiB), and if every small directory's mark
        // evicted it, the big directory would be scanned again and again and its filter
        // would hardly ever answer.
        let filters_too = !matches!(state, State::Idle { .. });
        let e = Entry {
            state,
            used: AtomicU64::new(self.tick.fetch_add(1, Relaxed)),
        };
        self.evict_for(e.cost(), filters_too);
        self.map.insert(dir, e);
    }

    /// Bytes the filters hold.
    pub fn bytes(&self) -> u64 {
        self.map.values().map(Entry::cost).sum()
    }

    /// Drop the least recently used records (marks only, unless `filters_too`) until `more`
    /// bytes fit in the share. Marks kept beyond it are bounded by `MAX_ENTRIES`
    /// (`ENTRY_COST` each); a mark is kept even then, since without it a directory too large
    /// for the share would be scanned again after every 64 adds.
    fn evict_for(&mut self, more: u64, filters_too: bool) {
        let mut held = self.bytes();
        while (held + more > self.share || self.map.len() >= MAX_ENTRIES) && !self.map.is_empty() {
            let victim = self
                .map
                .iter()
                .filter(|(_, e)| match e.state {
                    State::Building { .. } => false,
                    State::Ready(_) => filters_too,
                    State::Idle { .. } => true,
                })
                .min_by_key(|(_, e)| e.used.load(Relaxed))
                .map(|(d, e)| (*d, e.cost()));
            let Some((d, c)) = victim else { break };
            self.map.remove(&d);
            held -= c;
            self.counters.evictions.fetch_add(1, Relaxed);
        }
    }
}

/// What a scan has read ahead (`Core::dir_read_ahead`): the tree it read (None: nothing
/// yet) and the key from which to read ahead again (None: it reached the directory's end).
pub struct ReadAhead {
    /// Leaves per window (0: no read-ahead).
    pub leaves: usize,
    pub read: Option<Option<super::btree::Root>>,
    pub again: Option<Vec<u8>>,
    /// Windows read (the scan's log line).
    pub batches: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory's filter may take the whole share (a 1,000,000-entry directory at the
    /// 16M cache's 1 MiB, where every small directory's "rescan later" mark would evict
    /// it): a mark never evicts a filter.
    #[test]
    fn a_mark_never_evicts_a_filter() {
        let mut f = DirFilters::new(1 << 10, Default::default());
        f.enabled = true;
        f.min_entries = 16;
        let scan = |f: &mut DirFilters, dir: u64, n: u64| {
            f.register(dir);
            let (d, id) = f.wanted.take().unwrap();
            let mut b = Bloom::new(f.scan_bits());
            (0..n).for_each(|h| b.add(h << 8));
            f.finish(d, id, b, n);
        };
        // 600 entries: 12 bits each is more than half the share's 8,192 bits, so no fold.
        scan(&mut f, 1, 600);
        assert!(f.settled(1));
        assert!(f.bytes() > f.share);
        scan(&mut f, 2, 3);
        assert!(f.settled(1), "a small directory's mark evicted the filter");
        assert_eq!(f.counters.evictions.load(Relaxed), 0);
        // Still answering (a name it holds: "don't know").
        assert!(!f.absent(1, 7 << 8));
        assert_eq!(f.counters.misses.load(Relaxed), 1);
    }

    #[test]
    fn a_bloom_has_no_false_negatives_and_folds() {
        let mut b = Bloom::new(1 << 16);
        let hs: Vec<u64> = (0..2000u64)
            .map(|i| (i.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 9 | 1) << 8)
            .collect();
        for &h in &hs {
            b.add(h);
        }
        b.fold_to(2000 * BITS_PER_ENTRY);
        assert_eq!(b.bit_len(), 1 << 15);
        assert!(hs.iter().all(|&h| b.may_hold(h)));
        let fp = (5000..25_000u64)
            .map(|i| (i.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 9 | 1) << 8)
            .filter(|&h| b.may_hold(h))
            .count();
        assert!(fp < 20_000 / 50, "{fp} false positives of 20,000");
    }
}
