//! Model-based test: random namespace and data operations on a `sync` store, checked step by
//! step against a simple in-memory model, with write-backs and kills (power loss + remount)
//! at random points. Every operation is acknowledged durable (sync export, FILE_SYNC writes),
//! so after a kill the store must equal the model exactly.

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;

use super::crash_tests::{crash_vol as new_crash_vol, fsck, kill as kill_dev};
use super::*;

const NAMES: [&[u8]; 3] = [b"a", b"b", b"c"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize, usize, bool),
    Remove(usize, usize),
    Rename(usize, usize, usize, usize),
    Link(usize, usize, usize),
    Write(usize, u64, usize, u8),
    Truncate(usize, u64),
    Punch(usize, u64, u64),
    WriteBack,
    Kill,
}

fn op() -> impl Strategy<Value = Op> {
    let i = || 0usize..8;
    let n = || 0usize..NAMES.len();
    prop_oneof![
        4 => (i(), n(), any::<bool>()).prop_map(|(d, n, k)| Op::Create(d, n, k)),
        2 => (i(), n()).prop_map(|(d, n)| Op::Remove(d, n)),
        3 => (i(), n(), i(), n()).prop_map(|(a, b, c, d)| Op::Rename(a, b, c, d)),
        1 => (i(), i(), n()).prop_map(|(f, d, n)| Op::Link(f, d, n)),
        3 => (i(), 0u64..20000, 1usize..9000, any::<u8>()).prop_map(|(f, o, l, b)| Op::Write(f, o, l, b)),
        1 => (i(), 0u64..20000).prop_map(|(f, s)| Op::Truncate(f, s)),
        1 => (i(), 0u64..20000, 1u64..12000).prop_map(|(f, o, l)| Op::Punch(f, o, l)),
        1 => Just(Op::WriteBack),
        1 => Just(Op::Kill),
    ]
}

#[derive(Default, Debug)]
struct Model {
    dirs: BTreeMap<u64, BTreeMap<Vec<u8>, u64>>,
    parent: HashMap<u64, u64>,
    files: BTreeMap<u64, (Vec<u8>, u32)>,
}

impl Model {
    fn dir(&self, i: usize) -> u64 {
        *self.dirs.keys().nth(i % self.dirs.len()).unwrap()
    }
    fn file(&self, i: usize) -> Option<u64> {
        (!self.files.is_empty()).then(|| *self.files.keys().nth(i % self.files.len()).unwrap())
    }
    fn is_dir(&self, ino: u64) -> bool {
        self.dirs.contains_key(&ino)
    }
    /// Drop one name of `ino` (its entry is already gone).
    fn unlink(&mut self, ino: u64) {
        if self.is_dir(ino) {
            self.dirs.remove(&ino);
            self.parent.remove(&ino);
        } else if let Some(f) = self.files.get_mut(&ino) {
            f.1 -= 1;
            if f.1 == 0 {
                self.files.remove(&ino);
            }
        }
    }
    fn in_subtree(&self, mut d: u64, root: u64) -> bool {
        loop {
            if d == root {
                return true;
            }
            if d == ROOT_INO.0 {
                return false;
            }
            d = self.parent[&d];
        }
    }

    fn rename(
        &mut self,
        sd: u64,
        sn: &[u8],
        dd: u64,
        dn: &[u8],
    ) -> std::result::Result<(), StoreError> {
        let src = *self.dirs[&sd].get(sn).ok_or(StoreError::NoEnt)?;
        let existing = self.dirs[&dd].get(dn).copied();
        if (sd == dd && sn == dn) || existing == Some(src) {
            return Ok(());
        }
        if self.is_dir(src) && self.in_subtree(dd, src) {
            return Err(StoreError::Inval);
        }
        if let Some(t) = existing {
            if self.is_dir(t) != self.is_dir(src) {
                return Err(StoreError::Exist);
            }
            if self.is_dir(t) && !self.dirs[&t].is_empty() {
                return Err(StoreError::NotEmpty);
            }
            self.dirs.get_mut(&dd).unwrap().remove(dn);
            self.unlink(t);
        }
        self.dirs.get_mut(&sd).unwrap().remove(sn);
        self.dirs.get_mut(&dd).unwrap().insert(dn.to_vec(), src);
        if self.is_dir(src) {
            self.parent.insert(src, dd);
        }
        Ok(())
    }
}

fn check(s: &Store, m: &Model) {
    fsck(s);
    for (&d, ents) in &m.dirs {
        let rd = s.readdir(Ino(d), 0, 1000).unwrap();
        let got: BTreeMap<Vec<u8>, u64> = rd
            .entries
            .into_iter()
            .map(|e| (e.name, e.attr.ino.0))
            .collect();
        assert_eq!(&got, ents, "entries of dir {d}");
        let subdirs = ents.values().filter(|i| m.is_dir(**i)).count() as u32;
        assert_eq!(s.getattr(Ino(d)).unwrap().nlink, 2 + subdirs);
    }
    for (&f, (data, nlink)) in &m.files {
        let a = s.getattr(Ino(f)).unwrap();
        assert_eq!((a.size, a.nlink), (data.len() as u64, *nlink), "file {f}");
        let (got, _) = s.read(Ino(f), 0, 64 << 10).unwrap();
        assert!(got == *data, "data of file {f}");
    }
}

fn run(ops: Vec<Op>, seed: u64) {
    let mut dev = new_crash_vol(seed);
    let mut s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
    let mut m = Model::default();
    m.dirs.insert(ROOT_INO.0, BTreeMap::new());
    m.parent.insert(ROOT_INO.0, ROOT_INO.0);
    for o in ops {
        match o {
            Op::Create(d, n, is_dir) => {
                let (dir, name) = (m.dir(d), NAMES[n]);
                let node = if is_dir {
                    NewNode::Directory
                } else {
                    NewNode::Regular
                };
                let r = s.create(Ino(dir), name, node, &SetAttrs::default(), (0, 0));
                if m.dirs[&dir].contains_key(name) {
                    assert_eq!(r.unwrap_err(), StoreError::Exist);
                } else {
                    let ino = r.unwrap().0.ino.0;
                    m.dirs.get_mut(&dir).unwrap().insert(name.to_vec(), ino);
                    if is_dir {
                        m.dirs.insert(ino, BTreeMap::new());
                        m.parent.insert(ino, dir);
                    } else {
                        m.files.insert(ino, (Vec::new(), 1));
                    }
                }
            }
            Op::Remove(d, n) => {
                let (dir, name) = (m.dir(d), NAMES[n]);
                let r = s.remove(Ino(dir), name);
                match m.dirs[&dir].get(name).copied() {
                    None => assert_eq!(r.unwrap_err(), StoreError::NoEnt),
                    Some(t) if m.is_dir(t) && !m.dirs[&t].is_empty() => {
                        assert_eq!(r.unwrap_err(), StoreError::NotEmpty)
                    }
                    Some(t) => {
                        let (_, un) = r.unwrap();
                        assert_eq!(un.ino.0, t);
                        m.dirs.get_mut(&dir).unwrap().remove(name);
                        m.unlink(t);
                        assert_eq!(un.last_link, !m.files.contains_key(&t));
                    }
                }
            }
            Op::Rename(a, b, c, d) => {
                let (sd, sn, dd, dn) = (m.dir(a), NAMES[b], m.dir(c), NAMES[d]);
                let want = m.rename(sd, sn, dd, dn);
                let got = s.rename(Ino(sd), sn, Ino(dd), dn).map(|_| ());
                assert_eq!(got, want, "rename {sd}/{sn:?} -> {dd}/{dn:?}");
            }
            Op::Link(f, d, n) => {
                let Some(f) = m.file(f) else { continue };
                let (dir, name) = (m.dir(d), NAMES[n]);
                let r = s.link(Ino(f), Ino(dir), name);
                if m.dirs[&dir].contains_key(name) {
                    assert_eq!(r.unwrap_err(), StoreError::Exist);
                } else {
                    r.unwrap();
                    m.dirs.get_mut(&dir).unwrap().insert(name.to_vec(), f);
                    m.files.get_mut(&f).unwrap().1 += 1;
                }
            }
            Op::Write(f, off, len, byte) => {
                let Some(f) = m.file(f) else { continue };
                let buf = vec![byte | 1; len];
                s.write(Ino(f), off, &buf, Stable::FileSync).unwrap();
                let data = &mut m.files.get_mut(&f).unwrap().0;
                let end = off as usize + len;
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[off as usize..end].copy_from_slice(&buf);
            }
            Op::Truncate(f, size) => {
                let Some(f) = m.file(f) else { continue };
                s.setattr(
                    Ino(f),
                    &SetAttrs {
                        size: Some(size),
                        ..Default::default()
                    },
                )
                .unwrap();
                m.files.get_mut(&f).unwrap().0.resize(size as usize, 0);
            }
            Op::Punch(f, off, len) => {
                let Some(f) = m.file(f) else { continue };
                s.deallocate(Ino(f), off, len).unwrap();
                let data = &mut m.files.get_mut(&f).unwrap().0;
                let end = ((off + len) as usize).min(data.len());
                for b in data.iter_mut().take(end).skip(off as usize) {
                    *b = 0;
                }
            }
            Op::WriteBack => {
                s.write_back().unwrap();
            }
            Op::Kill => {
                let d2 = kill_dev(&dev);
                drop(s);
                dev = d2;
                s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
                check(&s, &m);
            }
        }
    }
    check(&s, &m);
    s.unmount().unwrap();
    drop(s);
    // And a clean remount equals the model too.
    let s = Store::open_dev(dev, StoreOptions::default()).unwrap();
    assert_eq!(s.mount_stats().items_replayed, 0);
    check(&s, &m);
}

proptest! {
    // 24 cases by default; STORE_MODEL_CASES=N for a longer soak.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("STORE_MODEL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]
    #[test]
    fn store_matches_model_across_kills(ops in proptest::collection::vec(op(), 1..60), seed in any::<u64>()) {
        run(ops, seed);
    }
}
