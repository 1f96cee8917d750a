//! Store tests over a temporary volume file (and metalog's crash device for kill tests).

use super::*;

pub(super) const VOL: u64 = 16 << 20;

pub(super) fn fresh() -> (tempfile::TempDir, std::path::PathBuf, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    Store::mkfs(&path, VOL, false).unwrap();
    let s = Store::open(&path, StoreOptions::default()).unwrap();
    (dir, path, s)
}

pub(super) fn mk(s: &Store, dir: Ino, name: &str, node: NewNode) -> Attr {
    s.create(
        dir,
        name.as_bytes(),
        node,
        &SetAttrs::default(),
        (1000, 1000),
    )
    .unwrap()
    .0
}

pub(super) fn names(s: &Store, dir: Ino) -> Vec<String> {
    let mut v: Vec<String> = s
        .readdir(dir, 0, 1000)
        .unwrap()
        .entries
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn mkfs_refuses_a_formatted_volume_without_force() {
    let (_d, path, s) = fresh();
    s.unmount().unwrap();
    drop(s);
    assert_eq!(Store::mkfs(&path, VOL, false), Err(StoreError::Exist));
    Store::mkfs(&path, VOL, true).unwrap();
    let s = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(s.getattr(ROOT_INO).unwrap().ftype, FileType::Directory);
    assert_eq!(s.getattr(ROOT_INO).unwrap().nlink, 2);
    s.unmount().unwrap();
}

#[test]
fn create_lookup_remove_and_names() {
    let (_d, _p, s) = fresh();
    let root = s.getattr(ROOT_INO).unwrap();
    let (a, dc) = s
        .create(
            ROOT_INO,
            b"a",
            NewNode::Regular,
            &SetAttrs::default(),
            (5, 6),
        )
        .unwrap();
    assert!(dc.after > dc.before);
    assert_eq!(
        (a.uid, a.gid, a.nlink, a.ftype),
        (5, 6, 1, FileType::Regular)
    );
    assert_eq!(s.lookup(ROOT_INO, b"a").unwrap().ino, a.ino);
    let r = s.create(
        ROOT_INO,
        b"a",
        NewNode::Regular,
        &SetAttrs::default(),
        (0, 0),
    );
    assert_eq!(r.unwrap_err(), StoreError::Exist);
    let d = mk(&s, ROOT_INO, "d", NewNode::Directory);
    assert_eq!(s.getattr(ROOT_INO).unwrap().nlink, root.nlink + 1);
    assert_eq!(d.parent, ROOT_INO);
    mk(&s, d.ino, "inner", NewNode::Regular);
    assert_eq!(s.remove(ROOT_INO, b"d").unwrap_err(), StoreError::NotEmpty);
    for bad in [&b"."[..], b"..", b"a/b", b"a\0b"] {
        assert_eq!(s.lookup(ROOT_INO, bad).unwrap_err(), StoreError::BadName);
        let r = s.create(
            ROOT_INO,
            bad,
            NewNode::Regular,
            &SetAttrs::default(),
            (0, 0),
        );
        assert_eq!(r.unwrap_err(), StoreError::BadName);
    }
    assert_eq!(s.lookup(ROOT_INO, b"").unwrap_err(), StoreError::Inval);
    let long = vec![b'x'; 256];
    assert_eq!(
        s.lookup(ROOT_INO, &long).unwrap_err(),
        StoreError::NameTooLong
    );
    mk(&s, ROOT_INO, &"y".repeat(255), NewNode::Regular);
    let (_, un) = s.remove(ROOT_INO, b"a").unwrap();
    assert!(un.last_link);
    assert_eq!(s.getattr(a.ino).unwrap_err(), StoreError::Stale);
    assert_eq!(s.lookup(ROOT_INO, b"a").unwrap_err(), StoreError::NoEnt);
    s.remove(d.ino, b"inner").unwrap();
    s.remove(ROOT_INO, b"d").unwrap();
    assert_eq!(s.getattr(ROOT_INO).unwrap().nlink, root.nlink);
    // A reused inode number gets a new generation: old filehandles go stale.
    let b = mk(&s, ROOT_INO, "b", NewNode::Regular);
    if b.ino == a.ino {
        assert!(b.generation > a.generation);
        assert_eq!(
            s.getattr_gen(a.ino, a.generation).unwrap_err(),
            StoreError::Stale
        );
    }
    s.unmount().unwrap();
}

#[test]
fn readdir_cookies_are_stable_and_resumable() {
    let (_d, _p, s) = fresh();
    for i in 0..10 {
        mk(&s, ROOT_INO, &format!("f{i}"), NewNode::Regular);
    }
    let first = s.readdir(ROOT_INO, 0, 4).unwrap();
    assert_eq!(first.entries.len(), 4);
    assert!(!first.eof);
    assert!(first.entries.iter().all(|e| e.cookie >= 3));
    // Removing an entry already returned does not disturb resuming after it.
    s.remove(ROOT_INO, &first.entries[0].name).unwrap();
    let c = first.entries[3].cookie;
    let rest = s.readdir(ROOT_INO, c, 100).unwrap();
    assert!(rest.eof);
    assert_eq!(rest.entries.len(), 6);
    let again = s.readdir(ROOT_INO, first.entries[1].cookie, 1).unwrap();
    assert_eq!(again.entries[0].name, first.entries[2].name);
    assert_eq!(again.entries[0].cookie, first.entries[2].cookie);
    // Cookies are hash positions: below 256 none is ever handed out; any other resumes
    // after its position (an entry removed meanwhile does not invalidate it).
    for bad in [1, 2, 5, 255] {
        assert_eq!(
            s.readdir(ROOT_INO, bad, 10).unwrap_err(),
            StoreError::BadCookie
        );
    }
    let last = s
        .readdir(ROOT_INO, 0, 100)
        .unwrap()
        .entries
        .last()
        .unwrap()
        .cookie;
    let past = s.readdir(ROOT_INO, last, 10).unwrap();
    assert!(past.eof && past.entries.is_empty());
    let f = s.lookup(ROOT_INO, &rest.entries[0].name).unwrap();
    assert_eq!(s.readdir(f.ino, 0, 10).unwrap_err(), StoreError::NotDir);
    s.unmount().unwrap();
}

#[test]
fn rename_cases() {
    let (_d, _p, s) = fresh();
    let a = mk(&s, ROOT_INO, "a", NewNode::Regular);
    let b = mk(&s, ROOT_INO, "b", NewNode::Regular);
    // Over an existing file: the old target loses its last link.
    let (_, _, un) = s.rename(ROOT_INO, b"a", ROOT_INO, b"b").unwrap();
    let un = un.unwrap();
    assert_eq!(un.ino, b.ino);
    assert!(un.last_link);
    assert_eq!(s.lookup(ROOT_INO, b"b").unwrap().ino, a.ino);
    assert_eq!(s.lookup(ROOT_INO, b"a").unwrap_err(), StoreError::NoEnt);
    // Directories: into another directory updates both link counts and the parent.
    let d1 = mk(&s, ROOT_INO, "d1", NewNode::Directory);
    let d2 = mk(&s, ROOT_INO, "d2", NewNode::Directory);
    let sub = mk(&s, d1.ino, "sub", NewNode::Directory);
    assert_eq!(s.getattr(d1.ino).unwrap().nlink, 3);
    s.rename(d1.ino, b"sub", d2.ino, b"sub").unwrap();
    assert_eq!(s.getattr(d1.ino).unwrap().nlink, 2);
    assert_eq!(s.getattr(d2.ino).unwrap().nlink, 3);
    assert_eq!(s.getattr(sub.ino).unwrap().parent, d2.ino);
    // A directory into its own subtree, or onto itself as parent.
    assert_eq!(
        s.rename(ROOT_INO, b"d2", sub.ino, b"x").unwrap_err(),
        StoreError::Inval
    );
    assert_eq!(
        s.rename(ROOT_INO, b"d2", d2.ino, b"x").unwrap_err(),
        StoreError::Inval
    );
    // File over directory and directory over file.
    assert_eq!(
        s.rename(ROOT_INO, b"b", ROOT_INO, b"d1").unwrap_err(),
        StoreError::Exist
    );
    assert_eq!(
        s.rename(ROOT_INO, b"d1", ROOT_INO, b"b").unwrap_err(),
        StoreError::Exist
    );
    // Directory over a non-empty directory; over an empty one.
    assert_eq!(
        s.rename(ROOT_INO, b"d1", ROOT_INO, b"d2").unwrap_err(),
        StoreError::NotEmpty
    );
    let root_links = s.getattr(ROOT_INO).unwrap().nlink;
    let (_, _, un) = s.rename(d2.ino, b"sub", ROOT_INO, b"d1").unwrap();
    assert_eq!(un.unwrap().ino, d1.ino);
    assert_eq!(s.getattr(ROOT_INO).unwrap().nlink, root_links);
    assert_eq!(s.getattr(d2.ino).unwrap().nlink, 2);
    // Same name: nothing happens.
    let (x, _, un) = s.rename(ROOT_INO, b"b", ROOT_INO, b"b").unwrap();
    assert_eq!(x.before, x.after);
    assert!(un.is_none());
    assert_eq!(
        s.rename(ROOT_INO, b"nope", ROOT_INO, b"z").unwrap_err(),
        StoreError::NoEnt
    );
    s.unmount().unwrap();
}

#[test]
fn link_and_nlink() {
    let (_d, _p, s) = fresh();
    let a = mk(&s, ROOT_INO, "a", NewNode::Regular);
    let d = mk(&s, ROOT_INO, "d", NewNode::Directory);
    s.link(a.ino, d.ino, b"a2").unwrap();
    assert_eq!(s.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(s.link(a.ino, d.ino, b"a2").unwrap_err(), StoreError::Exist);
    assert_eq!(
        s.link(d.ino, ROOT_INO, b"dd").unwrap_err(),
        StoreError::IsDir
    );
    let (_, un) = s.remove(ROOT_INO, b"a").unwrap();
    assert!(!un.last_link);
    assert_eq!(s.lookup(d.ino, b"a2").unwrap().nlink, 1);
    // Rename onto another name of the same file is a no-op.
    s.link(a.ino, ROOT_INO, b"a3").unwrap();
    let (_, _, un) = s.rename(ROOT_INO, b"a3", d.ino, b"a2").unwrap();
    assert!(un.is_none());
    assert_eq!(s.getattr(a.ino).unwrap().nlink, 2);
    s.unmount().unwrap();
}

#[test]
fn symlink_and_special_files() {
    let (_d, _p, s) = fresh();
    let l = mk(&s, ROOT_INO, "l", NewNode::Symlink(b"/target/x".to_vec()));
    assert_eq!(l.size, 9);
    assert_eq!(s.readlink(l.ino).unwrap(), b"/target/x");
    let c = mk(&s, ROOT_INO, "c", NewNode::CharDev { major: 1, minor: 3 });
    assert_eq!(c.rdev, (1, 3));
    assert_eq!(s.readlink(c.ino).unwrap_err(), StoreError::Inval);
    assert_eq!(s.read(c.ino, 0, 1).unwrap_err(), StoreError::Inval);
    assert_eq!(s.read(ROOT_INO, 0, 1).unwrap_err(), StoreError::IsDir);
    s.unmount().unwrap();
}

#[test]
fn read_write_round_trip_and_truncate_frees() {
    let (_d, _p, s) = fresh();
    let f = mk(&s, ROOT_INO, "f", NewNode::Regular);
    let free0 = s.fsstat().free_bytes;
    let data: Vec<u8> = (0..20000u32).map(|i| (i * 7 % 251) as u8).collect();
    let (n, st) = s.write(f.ino, 1000, &data, Stable::FileSync).unwrap();
    assert_eq!((n, st), (20000, Stable::FileSync));
    let a = s.getattr(f.ino).unwrap();
    assert_eq!(a.size, 21000);
    assert_eq!(a.used, 6 * BLOCK);
    let (got, eof) = s.read(f.ino, 0, 30000).unwrap();
    assert!(eof);
    assert_eq!(got.len(), 21000);
    assert!(got[..1000].iter().all(|&b| b == 0));
    assert_eq!(&got[1000..], &data[..]);
    // Partial overwrite keeps the bytes around it.
    s.write(f.ino, 4090, b"HELLO", Stable::Unstable).unwrap();
    let (got, eof) = s.read(f.ino, 4088, 9).unwrap();
    assert!(!eof);
    assert_eq!(&got[2..7], b"HELLO");
    assert_eq!(got[0], data[3088]);
    assert_eq!(got[8], data[3096]);
    s.commit(f.ino).unwrap();
    // Sparse write far away: a hole in between reads as zeros.
    s.write(f.ino, 1 << 20, b"end", Stable::DataSync).unwrap();
    let (got, _) = s.read(f.ino, 500_000, 10).unwrap();
    assert_eq!(got, vec![0u8; 10]);
    // Truncate frees the blocks past the new size and zeroes the tail of the last block.
    s.setattr(
        f.ino,
        &SetAttrs {
            size: Some(5000),
            ..Default::default()
        },
    )
    .unwrap();
    let a = s.getattr(f.ino).unwrap();
    assert_eq!((a.size, a.used), (5000, 2 * BLOCK));
    s.setattr(
        f.ino,
        &SetAttrs {
            size: Some(8192),
            ..Default::default()
        },
    )
    .unwrap();
    let (got, _) = s.read(f.ino, 5000, 3192).unwrap();
    assert!(
        got.iter().all(|&b| b == 0),
        "bytes past a truncation read as zeros"
    );
    s.setattr(
        f.ino,
        &SetAttrs {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    s.write_back().unwrap();
    // The freed blocks return once their transaction is durable (all of it is, by now).
    let _ = s.write(f.ino, 0, b"x", Stable::FileSync).unwrap();
    assert_eq!(s.fsstat().free_bytes, free0 - BLOCK);
    let d = mk(&s, ROOT_INO, "d", NewNode::Directory);
    let r = s.setattr(
        d.ino,
        &SetAttrs {
            size: Some(0),
            ..Default::default()
        },
    );
    assert_eq!(r.unwrap_err(), StoreError::IsDir);
    s.unmount().unwrap();
}

#[test]
fn allocate_deallocate_seek() {
    let (_d, _p, s) = fresh();
    let f = mk(&s, ROOT_INO, "f", NewNode::Regular);
    s.allocate(f.ino, 0, 4 * BLOCK).unwrap();
    let a = s.getattr(f.ino).unwrap();
    assert_eq!((a.size, a.used), (4 * BLOCK, 4 * BLOCK));
    // Unwritten blocks read as zeros and count as a hole for SEEK.
    assert_eq!(s.read(f.ino, 0, 100).unwrap().0, vec![0u8; 100]);
    assert_eq!(s.seek(f.ino, 0, SeekWhat::Data).unwrap(), (true, None));
    s.write(f.ino, 2 * BLOCK, &[7u8; 4096], Stable::FileSync)
        .unwrap();
    assert_eq!(
        s.getattr(f.ino).unwrap().used,
        4 * BLOCK,
        "writes into allocated blocks"
    );
    assert_eq!(
        s.seek(f.ino, 0, SeekWhat::Data).unwrap(),
        (false, Some(2 * BLOCK))
    );
    assert_eq!(
        s.seek(f.ino, 2 * BLOCK + 5, SeekWhat::Hole).unwrap(),
        (false, Some(3 * BLOCK))
    );
    assert_eq!(
        s.seek(f.ino, 5 * BLOCK, SeekWhat::Data).unwrap(),
        (true, None)
    );
    s.write(f.ino, 0, &[9u8; 3 * 4096], Stable::FileSync)
        .unwrap();
    // Punch the middle: whole block 1 is freed, partial edges are zeroed.
    s.deallocate(f.ino, 100, 2 * BLOCK).unwrap();
    let a = s.getattr(f.ino).unwrap();
    assert_eq!(a.size, 4 * BLOCK);
    assert_eq!(a.used, 3 * BLOCK);
    let (got, _) = s.read(f.ino, 0, 3 * 4096).unwrap();
    assert!(got[..100].iter().all(|&b| b == 9));
    assert!(got[100..2 * 4096 + 100].iter().all(|&b| b == 0));
    assert!(got[2 * 4096 + 100..].iter().all(|&b| b == 9));
    assert_eq!(
        s.seek(f.ino, 0, SeekWhat::Hole).unwrap(),
        (false, Some(BLOCK))
    );
    s.unmount().unwrap();
}

#[test]
fn clean_unmount_and_reopen_keeps_everything() {
    let (_d, path, s) = fresh();
    let d = mk(&s, ROOT_INO, "d", NewNode::Directory);
    let f = mk(&s, d.ino, "f", NewNode::Regular);
    s.write(f.ino, 0, b"persist me", Stable::FileSync).unwrap();
    mk(&s, ROOT_INO, "l", NewNode::Symlink(b"d/f".to_vec()));
    s.put_client_record(b"client-1", Some(b"v1")).unwrap();
    let cookies = s.readdir(ROOT_INO, 0, 100).unwrap();
    s.unmount().unwrap();
    drop(s);
    let s = Store::open(&path, StoreOptions::default()).unwrap();
    // Clean unmount: the log replays nothing; every object comes from the metadata area.
    assert_eq!(s.mount_stats().items_replayed, 0);
    // Superblock, two checkpoint slots, the free-space list: nothing per file.
    assert!(s.mount_stats().blocks_read <= 6, "{:?}", s.mount_stats());
    assert_eq!(names(&s, ROOT_INO), vec!["d", "l"]);
    assert_eq!(
        s.readdir(ROOT_INO, 0, 100).unwrap().entries,
        cookies.entries
    );
    let f2 = s.lookup(d.ino, b"f").unwrap();
    assert_eq!(f2, s.getattr(f.ino).unwrap());
    assert_eq!(s.read(f.ino, 0, 100).unwrap().0, b"persist me");
    let l = s.lookup(ROOT_INO, b"l").unwrap();
    assert_eq!(s.readlink(l.ino).unwrap(), b"d/f");
    assert_eq!(
        s.client_records(),
        vec![(b"client-1".to_vec(), b"v1".to_vec())]
    );
    // A new entry gets a cookie of its own; the old ones keep theirs.
    let n = mk(&s, ROOT_INO, "n", NewNode::Regular);
    let all = s.readdir(ROOT_INO, 0, 100).unwrap().entries;
    let nc = all.iter().find(|e| e.attr.ino == n.ino).unwrap().cookie;
    assert!(cookies.entries.iter().all(|e| e.cookie != nc));
    for e in &cookies.entries {
        assert!(all.iter().any(|x| x.cookie == e.cookie && x.name == e.name));
    }
    s.unmount().unwrap();
}

/// Figures (not a timing test): `cargo test --release -p store --lib
/// capacity_figures -- --ignored --nocapture`. The default 8 GiB volume takes 2,000,000 empty
/// files and a 1 GiB one 200,000 (in 1,000-entry directories), with room to spare; prints
/// the on-disk metadata per file and what `fsstat` says is left.
#[test]
#[ignore]
fn capacity_figures() {
    for (size, n) in [(1u64 << 30, 200_000u64), (8 << 30, 2_000_000)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vol.img");
        Store::mkfs(&path, size, false).unwrap();
        let opts = StoreOptions {
            sync: false,
            ..StoreOptions::default()
        };
        let s = Store::open(&path, opts.clone()).unwrap();
        let st0 = s.fsstat();
        let t = std::time::Instant::now();
        let mut d = ROOT_INO;
        for i in 0..n {
            if i % 1000 == 0 {
                d = mk(&s, ROOT_INO, &format!("d{}", i / 1000), NewNode::Directory).ino;
            }
            mk(&s, d, &format!("file-{i}"), NewNode::Regular);
        }
        let secs = t.elapsed().as_secs_f64();
        s.unmount().unwrap();
        drop(s);
        let s = Store::open(&path, opts).unwrap();
        let st = s.fsstat();
        let used = st0.free_bytes - st.free_bytes;
        let (nodes, _, _) = s.metadata_usage();
        let meta = s.meta_blocks();
        let t0 = std::time::Instant::now();
        while !meta.is_ready() && t0.elapsed().as_secs() < 60 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let (walked, walk_ms) = meta.walked().unwrap();
        println!(
            "  NVMe guard's walk after the mount: {walked} tree nodes in {walk_ms} ms, {} runs",
            meta.size().0
        );
        println!(
            "{} GiB volume: {n} files in {secs:.1} s ({:.0}/s in-process); metadata {:.1} MiB \
             ({} tree nodes), {:.0} bytes per file; fsstat: {} files, {} more would fit; clean \
             mount read {} blocks",
            size >> 30,
            n as f64 / secs,
            used as f64 / (1 << 20) as f64,
            nodes,
            used as f64 / n as f64,
            st.total_files - st.free_files,
            st.free_files,
            s.mount_stats().blocks_read
        );
        assert!(st.free_files > 0);
        assert_eq!(
            s.lookup(
                Ino(s
                    .lookup(ROOT_INO, format!("d{}", (n - 1) / 1000).as_bytes())
                    .unwrap()
                    .ino
                    .0),
                format!("file-{}", n - 1).as_bytes()
            )
            .unwrap()
            .ftype,
            FileType::Regular
        );
        s.unmount().unwrap();
    }
}

/// A READDIR walked page by page while entries come and go, with a power
/// loss and a remount in the middle, returns every entry that lived through the whole walk
/// exactly once, never one removed before the walk reached it, and no name twice; the
/// cookies the first half handed out resume the walk on the remounted volume.
#[test]
fn readdir_cookies_survive_concurrent_changes_and_a_restart() {
    use std::collections::{BTreeSet, HashMap};
    let dev = super::crash_tests::crash_vol(21);
    let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
    let d = mk(&s, ROOT_INO, "d", NewNode::Directory).ino;
    let n = 3000;
    for i in 0..n {
        mk(&s, d, &format!("e{i}"), NewNode::Regular);
    }
    s.write_back().unwrap();
    let mut seen: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut removed: BTreeSet<String> = BTreeSet::new();
    let mut cookie = 0;
    let mut s = s;
    let mut dev = dev;
    let mut page = 0;
    loop {
        let r = s.readdir(d, cookie, 97).unwrap();
        for e in &r.entries {
            assert!(e.cookie > cookie, "cookies go forward");
            assert!(
                seen.insert(e.name.clone(), e.cookie).is_none(),
                "{:?} twice",
                e.name
            );
            assert!(!removed.contains(std::str::from_utf8(&e.name).unwrap()));
        }
        if let Some(l) = r.entries.last() {
            cookie = l.cookie;
        }
        if r.eof {
            break;
        }
        page += 1;
        // Between pages: new names, and removals of names both seen and not yet seen.
        for j in 0..20 {
            mk(&s, d, &format!("n{page}-{j}"), NewNode::Regular);
            let victim = format!("e{}", (page * 131 + j * 17) % n);
            if !removed.contains(&victim) && !seen.contains_key(victim.as_bytes()) {
                s.remove(d, victim.as_bytes()).unwrap();
                removed.insert(victim);
            }
        }
        if page == 12 {
            // Power loss half way (every change above was acknowledged on a sync export).
            let dev2 = super::crash_tests::kill(&dev);
            drop(s);
            s = Store::open_dev(dev2.clone(), StoreOptions::default()).unwrap();
            dev = dev2;
        }
        assert!(page < 1000);
    }
    // Everything that lived through the walk came back once; removed names never did.
    for i in 0..n {
        let name = format!("e{i}");
        assert_eq!(
            seen.contains_key(name.as_bytes()),
            !removed.contains(&name),
            "{name}"
        );
    }
    assert!(removed.len() > 100, "{} removed", removed.len());
    // The cookie of an entry is the same after the restart.
    let all = s.readdir(d, 0, 100_000).unwrap().entries;
    for e in &all {
        if let Some(c) = seen.get(&e.name) {
            assert_eq!(*c, e.cookie, "{:?}", e.name);
        }
    }
    super::crash_tests::fsck(&s);
    s.unmount().unwrap();
}

fn rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |f: &str| -> f64 {
        s.lines()
            .find(|l| l.starts_with(f))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    kib("VmRSS:") / 1024.0
}

/// Figures, not a test: `cargo test --release -p store --lib memory_figures -- --ignored
/// --nocapture` (FILES, CACHE_MIB). The process's RSS against `metadata_cache` while one
/// directory fills, then while it is read whole, page by page as READDIR does.
#[test]
#[ignore]
fn memory_figures() {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n = env("FILES", 400_000);
    let cache = env("CACHE_MIB", 64) << 20;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    Store::mkfs(&path, 8 << 30, false).unwrap();
    let opts = StoreOptions {
        sync: false,
        metadata_cache: cache,
        ..StoreOptions::default()
    };
    let s = Store::open(&path, opts).unwrap();
    let r0 = rss_mib();
    let d = mk(&s, ROOT_INO, "big", NewNode::Directory).ino;
    let mut peak: f64 = 0.0;
    let mut rates = Vec::new();
    let mut t = std::time::Instant::now();
    for i in 0..n {
        mk(&s, d, &format!("entry-{i}"), NewNode::Regular);
        if i % 20_000 == 0 {
            peak = peak.max(rss_mib());
        }
        if (i + 1) % 100_000 == 0 {
            rates.push(100_000.0 / t.elapsed().as_secs_f64());
            t = std::time::Instant::now();
        }
    }
    let r: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    println!("creates/s per 100,000 (in-process, async): {}", r.join(" "));
    let (nodes, pending, pages) = s.metadata_usage();
    println!(
        "cache {} MiB: RSS {r0:.0} MiB empty; {n} creates: peak {peak:.0} MiB, now {:.0} MiB ({pages} cached pages = {:.0} MiB, {:.1} MiB pending, {nodes} nodes)",
        cache >> 20,
        rss_mib(),
        pages as f64 * 4.1 / 1024.0,
        pending as f64 / 1048576.0
    );
    let mut cookie = 0;
    let mut seen = 0;
    let mut peak2: f64 = 0.0;
    loop {
        let r = s.readdir(d, cookie, 292).unwrap();
        seen += r.entries.len();
        if seen % 50_000 < 292 {
            peak2 = peak2.max(rss_mib());
        }
        match r.entries.last() {
            Some(e) if !r.eof => cookie = e.cookie,
            _ => break,
        }
    }
    let (_, _, pages) = s.metadata_usage();
    println!(
        "  READDIR of {seen}: peak {peak2:.0} MiB, now {:.0} MiB ({pages} cached pages)",
        rss_mib()
    );
    s.unmount().unwrap();
}

/// Figures, not a test: `cargo test --release -p store --lib dir_scale_figures -- --ignored
/// --nocapture` (ENTRIES, default 1,000,000; CACHE_MIB, default 256). The store's work per
/// lookup, create and remove in an ENTRIES-entry directory against a 100-entry one (the
/// bound: ≤ 1.5×), on tmpfs when there is one, async (no log force in the figure): medians of
/// ROUNDS (default 7; 0: none) interleaved rounds of 200 calls, µs per call. "create+wb"
/// adds the write-back of what the creates dirtied (the leaf rewrites the log worker does
/// beside the server), per create. SCAN_ROUNDS (default 0): then that many pairs of cold
/// scans of the big directory's filter, each after a remount, with and without read-ahead
/// (dirfilter.rs `SCAN_AHEAD`), interleaved: time and nodes read. VOLUME_DIR: where the
/// volume goes instead of tmpfs (a disk, for what a cold read costs).
#[test]
#[ignore]
fn dir_scale_figures() {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let big_n = env("ENTRIES", 1_000_000);
    let cache = env("CACHE_MIB", 256) << 20;
    let shm = std::path::Path::new("/dev/shm");
    let tmp = if let Ok(d) = std::env::var("VOLUME_DIR") {
        tempfile::tempdir_in(d).unwrap()
    } else if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let path = tmp.path().join("vol.img");
    Store::mkfs(&path, 16 << 30, false).unwrap();
    let opts = StoreOptions {
        sync: false,
        metadata_cache: cache,
        ..StoreOptions::default()
    };
    let s = Store::open(&path, opts.clone()).unwrap();
    // NO_DIR_FILTER=1: without the directory filters (dirfilter.rs), for a comparison.
    if env("NO_DIR_FILTER", 0) == 1 {
        s.inner.wr().filters.enabled = false;
    }
    let t = std::time::Instant::now();
    let big = mk(&s, ROOT_INO, "big", NewNode::Directory).ino;
    for i in 0..big_n {
        mk(&s, big, &format!("entry-{i}"), NewNode::Regular);
    }
    let small = mk(&s, ROOT_INO, "small", NewNode::Directory).ino;
    for i in 0..100 {
        mk(&s, small, &format!("entry-{i}"), NewNode::Regular);
    }
    s.write_back().unwrap();
    let (nodes, _, pages) = s.metadata_usage();
    println!(
        "load average {}; {big_n} entries made in {:.1} s; tree {nodes} nodes, {pages} cached pages, cache {} MiB",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim(),
        t.elapsed().as_secs_f64(),
        cache >> 20
    );
    let ops = 200u64;
    let rows = ["lookup", "create", "remove", "create+wb"];
    // Tree nodes each lookup asks the page cache for (hits and misses), and the misses.
    let gets = || {
        let c = &s.inner.cache;
        let h = c.hits.load(std::sync::atomic::Ordering::Relaxed);
        let m = c.misses.load(std::sync::atomic::Ordering::Relaxed);
        (h + m, m)
    };
    let mut node_gets = [(0u64, 0u64); 2];
    // Tree nodes read from the volume by the creates.
    let mut create_misses = [0u64; 2];
    let f0 = s.dir_filter_counts();
    let mut us = [vec![Vec::new(); 4], vec![Vec::new(); 4]];
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let rounds = env("ROUNDS", 7);
    for round in 0..rounds {
        for (k, (dir, n)) in [(big, big_n), (small, 100)].into_iter().enumerate() {
            let per = |t: std::time::Instant| t.elapsed().as_secs_f64() * 1e6 / ops as f64;
            // Settle what the previous figures dirtied, untimed.
            s.write_back().unwrap();
            let g0 = gets();
            let t = std::time::Instant::now();
            for i in 0..ops {
                let e = (i * 7919 + round * 104_729) % n;
                s.lookup(dir, format!("entry-{e}").as_bytes()).unwrap();
            }
            us[k][0].push(per(t));
            let g1 = gets();
            node_gets[k].0 += g1.0 - g0.0;
            node_gets[k].1 += g1.1 - g0.1;
            let name = |i: u64| format!("new-{round}-{i}");
            let m0 = gets().1;
            let t = std::time::Instant::now();
            for i in 0..ops {
                mk(&s, dir, &name(i), NewNode::Regular);
            }
            us[k][1].push(per(t));
            create_misses[k] += gets().1 - m0;
            s.write_back().unwrap();
            us[k][3].push(per(t));
            let t = std::time::Instant::now();
            for i in 0..ops {
                s.remove(dir, name(i).as_bytes()).unwrap();
            }
            us[k][2].push(per(t));
        }
    }
    for (i, row) in rows.iter().enumerate().filter(|_| rounds > 0) {
        let (b, sm) = (median(us[0][i].clone()), median(us[1][i].clone()));
        println!(
            "  {row:<10} {big_n}-entry dir {b:8.1} µs, 100-entry dir {sm:8.1} µs ({:.2}×)",
            b / sm
        );
    }
    let calls = (rounds * ops).max(1);
    println!(
        "  lookup node gets per call: {:.1} ({:.2} misses) in the {big_n}-entry dir, {:.1} ({:.2} misses) in the 100-entry dir",
        node_gets[0].0 as f64 / calls as f64,
        node_gets[0].1 as f64 / calls as f64,
        node_gets[1].0 as f64 / calls as f64,
        node_gets[1].1 as f64 / calls as f64
    );
    let f1 = s.dir_filter_counts();
    println!(
        "  create nodes read per call: {:.2} in the {big_n}-entry dir, {:.2} in the 100-entry dir; directory filter: {} lookups answered absent, {} not, {} built",
        create_misses[0] as f64 / calls as f64,
        create_misses[1] as f64 / calls as f64,
        f1.0 - f0.0,
        f1.1 - f0.1,
        f1.2
    );
    s.unmount().unwrap();
    drop(s);
    let scan_rounds = env("SCAN_ROUNDS", 0);
    if scan_rounds == 0 || env("NO_DIR_FILTER", 0) == 1 {
        return;
    }
    use super::dirfilter_tests::{node_reads, scan_now, wait_walked};
    let load = || {
        let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        l.split(' ').take(3).collect::<Vec<_>>().join(" ")
    };
    // [without, with] read-ahead: ms, nodes read, nodes read one at a time.
    let mut scans = [Vec::new(), Vec::new()];
    for round in 0..scan_rounds {
        for ahead in [round % 2 == 0, round % 2 == 1] {
            let s = Store::open(&path, opts.clone()).unwrap();
            wait_walked(&s);
            if !ahead {
                s.inner.wr().filters.scan_ahead = 0;
            }
            let l0 = load();
            let (r0, m0) = node_reads(&s);
            let t = std::time::Instant::now();
            scan_now(&s, big);
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let (r1, m1) = node_reads(&s);
            println!(
                "  cold scan {round} {}: {ms:.0} ms, {} nodes read, {} one at a time (load {l0})",
                if ahead { "with read-ahead" } else { "without" },
                r1 - r0,
                m1 - m0
            );
            scans[usize::from(ahead)].push((ms, r1 - r0, m1 - m0));
            s.unmount().unwrap();
        }
    }
    for (k, tag) in ["without read-ahead", "with read-ahead"].iter().enumerate() {
        let v = &scans[k];
        let ms = median(v.iter().map(|x| x.0).collect());
        let reads = median(v.iter().map(|x| x.1 as f64).collect());
        let single = median(v.iter().map(|x| x.2 as f64).collect());
        println!(
            "  cold scan of the {big_n}-entry dir {tag}: median {ms:.0} ms, {reads:.0} nodes read, {single:.0} one at a time ({scan_rounds} rounds; load now {})",
            load()
        );
    }
}

#[test]
fn a_replay_reads_the_leaves_it_needs_ahead() {
    // The replay after a kill reads the tree leaves a log's worth of changes touch. Read one
    // at a time as each item reached its leaf, they would cost a round trip each; read ahead
    // per batch of items (mount.rs `replay_batch`), the replay itself reads almost none.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    Store::mkfs(&path, 256 << 20, false).unwrap();
    let s = Store::open(&path, StoreOptions::default()).unwrap();
    let dirs: Vec<Ino> = (0..8)
        .map(|d| mk(&s, ROOT_INO, &format!("d{d}"), NewNode::Directory).ino)
        .collect();
    for i in 0..4000 {
        mk(&s, dirs[i % 8], &format!("file-{i}"), NewNode::Regular);
    }
    s.unmount().unwrap();
    drop(s);
    // A cold cache: the late names hash all over the directories' leaves. Not `sync`, so the
    // 1,200 changes share a few log records: one forced record each filled half of this
    // volume's 4 MiB log, which starts a background write-back at a moment that depends on
    // the machine's load, leaving as few as 16 items to replay.
    let s = Store::open(
        &path,
        StoreOptions {
            sync: false,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..600 {
        let a = mk(&s, dirs[i % 8], &format!("late-{i}"), NewNode::Regular);
        s.setattr(
            a.ino,
            &SetAttrs {
                mode: Some(0o600),
                ..Default::default()
            },
        )
        .unwrap();
    }
    s.log().force_all().unwrap();
    assert_eq!(
        s.log().counters().writebacks,
        0,
        "a write-back covered the late changes"
    );
    drop(s); // no unmount: as after a kill
    let s = Store::open(&path, StoreOptions::default()).unwrap();
    let st = s.mount_stats();
    println!("mount after a kill: {st:?}");
    assert!(st.items_replayed >= 1000, "{st:?}");
    assert!(st.blocks_read >= 30, "the replay read no leaves: {st:?}");
    assert!(
        st.replay_single_reads * 10 <= st.blocks_read,
        "the replay read its leaves one at a time: {st:?}"
    );
    for i in [0, 317, 599] {
        let a = s
            .lookup(dirs[i % 8], format!("late-{i}").as_bytes())
            .unwrap();
        assert_eq!(s.getattr(a.ino).unwrap().mode & 0o777, 0o600);
    }
    assert!(s.lookup(dirs[3], b"file-3995").is_ok());
    s.unmount().unwrap();
}
