//! The volume blocks each NFS client's layouts name (docs/pnfs.md "The
//! target enforces the layouts"): what its NVMe hosts may write and read at the embedded
//! target. The ledger (mod.rs `held`) records grants by file range; LAYOUTGET's extents say
//! which volume blocks stand behind them. Per (client, file) this keeps those extents and
//! the LBA ranges they currently give (extents ∩ grants), and per client a reference-counted
//! run map of all of them, updated in the same ledger calls that change the grants (`sync`).
//!
//! The per-command lookup is a `BTreeMap::range` walk over the client's runs: `O(log n)` per
//! run the command spans, no allocation. A hand-kept map, not an interval crate: the runs
//! need per-kind reference counts (a block may be behind a READ and an RW grant, or two
//! overlapping LAYOUTGETs, and only the last release may drop it), which neither
//! `rangemap` (coalescing, no counts) nor `nodit`/`iset` offer without a second structure.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use layout::block::{BlockExtent, ExtentState, IoMode};
use layout::policy::Grants;

use crate::store::Ino;

/// The LBA size of the embedded target's namespace (`layout::LBA_SIZE`): the units here.
const LBA: u64 = layout::LBA_SIZE as u64;

/// What a command wants of its blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Read,
    Write,
}

/// One run of LBAs with how many granted ranges let the client read and write it (a write
/// grant counts in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    end: u64,
    read: u32,
    write: u32,
}

/// A client's runs, start → run; runs never overlap, and a run with both counts at zero is
/// removed. `map` is what changes; `flat`, a copy of it laid out for the lookup, answers the
/// per-command check while it is current (`BlockSets::refresh`).
#[derive(Debug, Default)]
pub struct Runs {
    map: BTreeMap<u64, Run>,
    /// The copy of `map` at generation `gen`; dropped by every change.
    flat: Option<Flat>,
    /// Counts the changes of `map`: a copy built from an older one is not installed.
    gen: u64,
}

/// How many runs a client has before its lookups go to a flat copy: below it the
/// `BTreeMap` stays in cache (measured, `hosts::tests::check_cost`: 10 runs and 10,000 cost
/// the same within noise through the copy and the map, 1,000,000 at random do not).
const FLAT_MIN: usize = 1024;

/// Starts per leaf of a [`Flat`]: 64 × 8 bytes, eight cache lines, searched after the top
/// level (for 1,000,000 runs, 15,625 starts, 125 KB: in L2).
const LEAF: usize = 64;

/// A sorted, read-only copy of a client's runs with a two-level index: `top` holds every
/// [`LEAF`]th start, so a lookup searches `top` (cache-resident at a million runs) and one
/// leaf of `starts`, a few cache misses where the `BTreeMap`'s pointer chase takes one per
/// level.
#[derive(Debug, Default)]
struct Flat {
    starts: Vec<u64>,
    runs: Vec<Run>,
    top: Vec<u64>,
}

impl Flat {
    fn of(map: &BTreeMap<u64, Run>) -> Flat {
        let starts: Vec<u64> = map.keys().copied().collect();
        let top = starts.iter().step_by(LEAF).copied().collect();
        Flat {
            starts,
            runs: map.values().copied().collect(),
            top,
        }
    }

    /// The run that starts at or before `lba`, as `BTreeMap::range(..=lba).next_back()`.
    fn at_or_before(&self, lba: u64) -> Option<&Run> {
        let leaf = self.top.partition_point(|&s| s <= lba).checked_sub(1)?;
        let lo = leaf * LEAF;
        let hi = (lo + LEAF).min(self.starts.len());
        let i = lo + self.starts.get(lo..hi)?.partition_point(|&s| s <= lba);
        self.runs.get(i.checked_sub(1)?)
    }
}

impl Runs {
    /// Splits the run containing `at` (if any) so that a run starts at `at`.
    fn split(&mut self, at: u64) {
        let Some((&s, &r)) = self.map.range(..at).next_back() else {
            return;
        };
        if r.end > at {
            self.map.insert(s, Run { end: at, ..r });
            self.map.insert(at, r);
        }
    }

    /// Adds (`up`) or removes one reference on `[s, e)`, to read, and to write if `write`.
    fn change(&mut self, s: u64, e: u64, write: bool, up: bool) {
        if s >= e {
            return;
        }
        self.flat = None;
        self.gen += 1;
        self.split(s);
        self.split(e);
        let w = u32::from(write);
        let mut pos = s;
        // The runs inside [s, e), in order, with the gaps between them.
        let keys: Vec<u64> = self.map.range(s..e).map(|(k, _)| *k).collect();
        for k in keys {
            if up && k > pos {
                self.map.insert(
                    pos,
                    Run {
                        end: k,
                        read: 1,
                        write: w,
                    },
                );
            }
            let Some(r) = self.map.get_mut(&k) else {
                continue;
            };
            if up {
                r.read += 1;
                r.write += w;
            } else {
                r.read = r.read.saturating_sub(1);
                r.write = r.write.saturating_sub(w);
            }
            pos = r.end;
            if r.read == 0 && r.write == 0 {
                self.map.remove(&k);
            }
        }
        if up && pos < e {
            self.map.insert(
                pos,
                Run {
                    end: e,
                    read: 1,
                    write: w,
                },
            );
        }
    }

    /// The end of the run at `lba` if it gives `want`.
    fn reach(&self, lba: u64, want: Want) -> Option<u64> {
        let r = match &self.flat {
            Some(f) => f.at_or_before(lba)?,
            None => self.map.range(..=lba).next_back()?.1,
        };
        let ok = match want {
            Want::Read => r.read > 0,
            Want::Write => r.write > 0,
        };
        (ok && r.end > lba).then_some(r.end)
    }

    /// How many runs there are.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether lookups would go faster through a flat copy that is missing.
    fn wants_flat(&self) -> bool {
        self.flat.is_none() && self.map.len() >= FLAT_MIN
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// A flat copy of one client's runs between `BlockSets::build_flat` and `install_flat`.
#[derive(Debug)]
pub struct FlatRuns(Flat);

/// One extent of a layout: file bytes `[file, file_end)` at volume LBA `lba`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    file: u64,
    file_end: u64,
    lba: u64,
    /// RW layout extent with storage the client may write (READ_WRITE or INVALID data).
    writable: bool,
}

/// What one client was told of one file's blocks, and what those give it now.
#[derive(Debug, Default)]
struct FileBlocks {
    pieces: Vec<Piece>,
    /// The ranges added to the client's runs: `(lba, lba_end, write)`.
    given: Vec<(u64, u64, bool)>,
}

impl FileBlocks {
    /// A new LAYOUTGET's extents replace what the file's pieces said of the same bytes.
    fn learn(&mut self, extents: &[BlockExtent], mode: IoMode) {
        for x in extents {
            if x.state == ExtentState::NONE_DATA || x.length == 0 {
                continue;
            }
            let (fs, fe) = (x.file_offset, x.file_offset.saturating_add(x.length));
            let mut keep = Vec::with_capacity(self.pieces.len() + 1);
            for p in self.pieces.drain(..) {
                if p.file_end <= fs || p.file >= fe {
                    keep.push(p);
                    continue;
                }
                if p.file < fs {
                    keep.push(Piece { file_end: fs, ..p });
                }
                if p.file_end > fe {
                    keep.push(Piece {
                        file: fe,
                        lba: p.lba + (fe - p.file) / LBA,
                        ..p
                    });
                }
            }
            keep.push(Piece {
                file: fs,
                file_end: fe,
                lba: x.storage_offset / LBA,
                writable: mode == IoMode::RW
                    && (x.state == ExtentState::READ_WRITE_DATA
                        || x.state == ExtentState::INVALID_DATA),
            });
            self.pieces = keep;
        }
    }

    /// The LBA ranges the pieces give under `grants`: each piece where the union of the
    /// grants covers it (readable) and where the union of the RW grants does (writable, if
    /// the piece is), whole blocks (a partly returned block is still partly held). The
    /// unions first: the ledger keeps overlapping grants as granted, and each would
    /// otherwise add its own copy of the same runs.
    fn under(&self, grants: &Grants) -> Vec<(u64, u64, bool)> {
        let any = union(grants.ranges().iter().map(|r| (r.0, r.1)));
        let rw = union(
            grants
                .ranges()
                .iter()
                .filter(|r| r.2 == IoMode::RW)
                .map(|r| (r.0, r.1)),
        );
        let mut out = Vec::new();
        for p in &self.pieces {
            let mut emit = |set: &[(u64, u64)], write: bool| {
                for &(gs, ge) in set {
                    let (s, e) = (p.file.max(gs), p.file_end.min(ge));
                    if s < e {
                        let first = p.lba + (s - p.file) / LBA;
                        let end = p.lba + (e - p.file).div_ceil(LBA);
                        out.push((first, end, write));
                    }
                }
            };
            emit(&any, false);
            if p.writable {
                emit(&rw, true);
            }
        }
        out
    }
}

/// The union of byte ranges, sorted, disjoint.
fn union(ranges: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = ranges.filter(|r| r.0 < r.1).collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(l) if s <= l.1 => l.1 = l.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// The sets of all clients, and which clients a host address or owner stands for (hosts.rs).
#[derive(Debug, Default)]
pub struct BlockSets {
    files: HashMap<(u64, Ino), FileBlocks>,
    clients: HashMap<u64, Runs>,
    /// The clients at each address (hosts.rs: a host belongs to the clients at its IP).
    pub(super) by_ip: HashMap<IpAddr, Vec<u64>>,
    /// The clients with each `co_ownerid` (`[nvme_hosts]` names a client by it).
    pub(super) by_owner: HashMap<Vec<u8>, Vec<u64>>,
}

impl BlockSets {
    /// The client's layouts of `ino` are now `grants` (`None`: it holds none of the file);
    /// `extents`: what a LAYOUTGET in `mode` just said of the file's blocks.
    pub fn sync(
        &mut self,
        clientid: u64,
        ino: Ino,
        grants: Option<&Grants>,
        learned: Option<(&[BlockExtent], IoMode)>,
    ) {
        let key = (clientid, ino);
        let mut fb = self.files.remove(&key).unwrap_or_default();
        if let Some((ext, mode)) = learned {
            fb.learn(ext, mode);
        }
        let now = match grants {
            Some(g) if !g.is_empty() => fb.under(g),
            _ => Vec::new(),
        };
        let runs = self.clients.entry(clientid).or_default();
        for &(s, e, w) in &fb.given {
            runs.change(s, e, w, false);
        }
        for &(s, e, w) in &now {
            runs.change(s, e, w, true);
        }
        if runs.is_empty() {
            self.clients.remove(&clientid);
        }
        fb.given = now;
        if grants.is_some_and(|g| !g.is_empty()) {
            self.files.insert(key, fb);
        }
    }

    /// Records where a client comes from (`was`: where it came from before, if it did) and
    /// who it is (LAYOUTGET, hosts.rs `note_client`).
    pub fn note_client(&mut self, clientid: u64, was: Option<IpAddr>, ip: IpAddr, owner: &[u8]) {
        if let Some(old) = was.filter(|o| *o != ip) {
            if let Some(v) = self.by_ip.get_mut(&old) {
                v.retain(|c| *c != clientid);
                if v.is_empty() {
                    self.by_ip.remove(&old);
                }
            }
        }
        let v = self.by_ip.entry(ip).or_default();
        if !v.contains(&clientid) {
            v.push(clientid);
        }
        match self.by_owner.get_mut(owner) {
            Some(o) if o.contains(&clientid) => {}
            Some(o) => o.push(clientid),
            None => {
                self.by_owner.insert(owner.to_vec(), vec![clientid]);
            }
        }
    }

    /// Forgets a client that is gone (hosts.rs `forget_clients`): its sets and its place in
    /// the address and owner indexes.
    pub fn forget_client(&mut self, clientid: u64, ip: IpAddr, owner: &[u8]) {
        if let Some(v) = self.by_ip.get_mut(&ip) {
            v.retain(|c| *c != clientid);
            if v.is_empty() {
                self.by_ip.remove(&ip);
            }
        }
        if let Some(v) = self.by_owner.get_mut(owner) {
            v.retain(|c| *c != clientid);
            if v.is_empty() {
                self.by_owner.remove(owner);
            }
        }
        self.clients.remove(&clientid);
        self.files.retain(|k, _| k.0 != clientid);
    }

    /// Whether the union of `clients`' sets covers `[slba, slba + nlb)` for `want`.
    pub fn covers(&self, clients: &[u64], want: Want, slba: u64, nlb: u64) -> bool {
        let end = slba.saturating_add(nlb);
        let mut pos = slba;
        while pos < end {
            let next = clients
                .iter()
                .filter_map(|c| self.clients.get(c)?.reach(pos, want))
                .max();
            match next {
                Some(n) => pos = n,
                None => return false,
            }
        }
        true
    }

    /// The clients whose lookups want a flat copy of their runs (`refresh`).
    pub fn stale(&self) -> Vec<u64> {
        self.clients
            .iter()
            .filter(|(_, r)| r.wants_flat())
            .map(|(c, _)| *c)
            .collect()
    }

    /// A flat copy of the client's runs, with the generation it copies (`refresh`: built
    /// under the read lock, so the checks go on meanwhile).
    pub fn build_flat(&self, clientid: u64) -> Option<(u64, FlatRuns)> {
        let r = self.clients.get(&clientid)?;
        r.wants_flat().then(|| (r.gen, FlatRuns(Flat::of(&r.map))))
    }

    /// Installs a copy `build_flat` made, unless the runs changed since.
    pub fn install_flat(&mut self, clientid: u64, gen: u64, f: FlatRuns) {
        if let Some(r) = self.clients.get_mut(&clientid) {
            if r.gen == gen {
                r.flat = Some(f.0);
            }
        }
    }

    /// The runs of one client (tests, the figure).
    pub fn runs_of(&self, clientid: u64) -> usize {
        self.clients.get(&clientid).map_or(0, Runs::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(file: u64, len: u64, storage: u64, state: ExtentState) -> BlockExtent {
        BlockExtent {
            deviceid: [0; 16],
            file_offset: file * LBA,
            length: len * LBA,
            storage_offset: storage * LBA,
            state,
        }
    }

    fn grants(v: &[(u64, u64, IoMode)]) -> Grants {
        let mut g = Grants::default();
        for &(s, e, m) in v {
            g.add(s * LBA, e * LBA, m);
        }
        g
    }

    /// Gets, partial returns and overlapping grants move the sets as the grants do: a block
    /// goes with the last grant that named it, RW extents are writable only while an RW
    /// grant covers them, READ extents never.
    #[test]
    fn sets_follow_the_grants() {
        let mut b = BlockSets::default();
        let f = Ino(5);
        let rw = [ext(0, 4, 100, ExtentState::INVALID_DATA)];
        let g1 = grants(&[(0, 4, IoMode::RW)]);
        b.sync(1, f, Some(&g1), Some((&rw, IoMode::RW)));
        assert!(b.covers(&[1], Want::Write, 100, 4));
        assert!(b.covers(&[1], Want::Read, 101, 3));
        assert!(!b.covers(&[1], Want::Write, 99, 2));
        assert!(!b.covers(&[1], Want::Write, 103, 2));
        assert!(!b.covers(&[2], Want::Read, 100, 1));
        // The same blocks again under a READ grant too; then the RW half goes.
        let g2 = grants(&[(0, 4, IoMode::RW), (0, 4, IoMode::READ)]);
        b.sync(1, f, Some(&g2), Some((&rw, IoMode::RW)));
        let mut g3 = g2.clone();
        g3.remove(0, 2 * LBA, IoMode::RW);
        b.sync(1, f, Some(&g3), None);
        assert!(!b.covers(&[1], Want::Write, 100, 1));
        assert!(b.covers(&[1], Want::Read, 100, 1));
        assert!(b.covers(&[1], Want::Write, 102, 2));
        // A READ layout of another file: read only.
        let g = Ino(6);
        let rd = [
            ext(0, 2, 200, ExtentState::READ_DATA),
            ext(2, 2, 0, ExtentState::NONE_DATA),
        ];
        b.sync(
            1,
            g,
            Some(&grants(&[(0, 4, IoMode::READ)])),
            Some((&rd, IoMode::READ)),
        );
        assert!(b.covers(&[1], Want::Read, 200, 2));
        assert!(!b.covers(&[1], Want::Write, 200, 1));
        assert!(
            !b.covers(&[1], Want::Read, 0, 1),
            "NONE_DATA names no blocks"
        );
        // A command spanning both files' runs where they touch is covered by their union.
        b.sync(
            2,
            g,
            Some(&grants(&[(0, 1, IoMode::READ)])),
            Some((&rd, IoMode::READ)),
        );
        assert!(b.covers(&[2], Want::Read, 200, 1));
        assert!(!b.covers(&[2], Want::Read, 200, 2));
        // Everything goes: nothing is left.
        b.sync(1, f, None, None);
        b.sync(1, g, None, None);
        assert!(!b.covers(&[1], Want::Read, 102, 1));
        assert_eq!(b.runs_of(1), 0);
        assert!(
            b.covers(&[1, 2], Want::Read, 200, 1),
            "the union of two clients"
        );
    }

    /// A second LAYOUTGET of part of the file replaces the mapping of those bytes; a
    /// partly returned block stays with what is still held of it.
    #[test]
    fn new_extents_replace_old_and_blocks_round_outward() {
        let mut b = BlockSets::default();
        let f = Ino(9);
        let g = grants(&[(0, 8, IoMode::RW)]);
        b.sync(
            1,
            f,
            Some(&g),
            Some((&[ext(0, 8, 100, ExtentState::INVALID_DATA)], IoMode::RW)),
        );
        b.sync(
            1,
            f,
            Some(&g),
            Some((&[ext(2, 2, 500, ExtentState::READ_WRITE_DATA)], IoMode::RW)),
        );
        assert!(b.covers(&[1], Want::Write, 500, 2));
        assert!(!b.covers(&[1], Want::Write, 102, 1));
        assert!(b.covers(&[1], Want::Write, 100, 2) && b.covers(&[1], Want::Write, 104, 4));
        // The ledger keeps repeated grants as granted: one copy of each run all the same.
        let mut many = Grants::default();
        for _ in 0..100 {
            many.add(0, 8 * LBA, IoMode::RW);
        }
        b.sync(1, f, Some(&many), None);
        assert_eq!(b.files[&(1, f)].given.len(), 6, "3 pieces, read and write");
        assert!(b.covers(&[1], Want::Write, 500, 2));
        let mut half = Grants::default();
        half.add(0, LBA + 1, IoMode::RW);
        b.sync(1, f, Some(&half), None);
        assert!(b.covers(&[1], Want::Write, 100, 2));
        assert!(!b.covers(&[1], Want::Write, 104, 1));
    }

    /// The flat copy the tick installs answers every lookup as the runs themselves do, a
    /// change drops it, and a copy built before a change is not installed (a stale copy
    /// would let the blocks of a returned layout be written).
    #[test]
    fn the_flat_copy_answers_as_the_runs_and_goes_with_a_change() {
        let mut b = BlockSets::default();
        let n = FLAT_MIN as u64 * 3 + 7;
        // One file per run of 2 LBAs, a gap after each; every third one READ only.
        for i in 0..n {
            let (mode, state) = if i % 3 == 0 {
                (IoMode::READ, ExtentState::READ_DATA)
            } else {
                (IoMode::RW, ExtentState::INVALID_DATA)
            };
            b.sync(
                1,
                Ino(i + 10),
                Some(&grants(&[(0, 2, mode)])),
                Some((&[ext(0, 2, 1000 + 3 * i, state)], mode)),
            );
        }
        assert_eq!(b.stale(), vec![1]);
        let lbas = 990..1000 + 3 * n + 5;
        let answers = |b: &BlockSets| -> Vec<(bool, bool, bool)> {
            lbas.clone()
                .map(|l| {
                    (
                        b.covers(&[1], Want::Read, l, 1),
                        b.covers(&[1], Want::Write, l, 1),
                        b.covers(&[1], Want::Write, l, 2),
                    )
                })
                .collect()
        };
        let before = answers(&b);
        assert!(before.iter().any(|a| a.2) && before.iter().any(|a| a.0 && !a.1));
        let (gen, f) = b.build_flat(1).unwrap();
        b.install_flat(1, gen, f);
        assert!(b.stale().is_empty());
        assert_eq!(answers(&b), before);
        // The file of run 1 (LBAs 1003–1004, RW) goes: so does the copy.
        assert!(b.covers(&[1], Want::Write, 1003, 2));
        b.sync(1, Ino(11), None, None);
        assert!(!b.covers(&[1], Want::Write, 1003, 1));
        // A copy built before the file of run 2 went is not installed.
        let (gen, f) = b.build_flat(1).unwrap();
        b.sync(1, Ino(12), None, None);
        b.install_flat(1, gen, f);
        assert!(!b.covers(&[1], Want::Write, 1006, 1));
        assert_eq!(b.stale(), vec![1]);
    }
}
