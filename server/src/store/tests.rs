//! Store tests over a temporary volume file (and metalog's crash device for kill tests).

use super::*;

const VOL: u64 = 16 << 20;

fn fresh() -> (tempfile::TempDir, std::path::PathBuf, Store) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    Store::mkfs(&path, VOL, false).unwrap();
    let s = Store::open(&path, StoreOptions::default()).unwrap();
    (dir, path, s)
}

fn mk(s: &Store, dir: Ino, name: &str, node: NewNode) -> Attr {
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

fn names(s: &Store, dir: Ino) -> Vec<String> {
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
    assert_eq!(
        s.readdir(ROOT_INO, 1 << 40, 10).unwrap_err(),
        StoreError::BadCookie
    );
    let f = s.lookup(ROOT_INO, b"f5").unwrap();
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
    assert_eq!(s.mount_stats().objects_loaded, 4);
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
    // New cookies continue after the old ones.
    mk(&s, ROOT_INO, "n", NewNode::Regular);
    let all = s.readdir(ROOT_INO, 0, 100).unwrap().entries;
    assert!(all.last().unwrap().cookie > cookies.entries.last().unwrap().cookie);
    s.unmount().unwrap();
}

// ---- crash tests on metalog's crash-simulating device ----

use metalog::CrashDev;

fn crash_vol(seed: u64) -> Arc<CrashDev> {
    let dev = Arc::new(CrashDev::new(VOL, seed));
    Store::mkfs_dev(dev.clone(), false).unwrap();
    dev
}

/// Power loss: the old store's threads can no longer write; the survivor image is remounted.
fn kill(dev: &Arc<CrashDev>) -> Arc<CrashDev> {
    let survivor = Arc::new(dev.crash());
    dev.freeze();
    survivor
}

/// Structural invariants of a mounted store: entries name live inodes, link counts match the
/// entries, parents are right, no block is owned twice (the mount's allocator rebuild already
/// refuses that) and free + used = total.
fn fsck(s: &Store) {
    let g = s.inner.rd();
    let mut links: std::collections::HashMap<u64, u32> = Default::default();
    let mut subdirs: std::collections::HashMap<u64, u32> = Default::default();
    for (&ino, i) in &g.s.inodes {
        if let Some(d) = &i.dir {
            for (name, &(child, cookie)) in &d.by_name {
                assert!(cookie >= 3 && cookie < d.next_cookie);
                assert_eq!(d.by_cookie.get(&cookie), Some(name));
                let c =
                    g.s.inodes
                        .get(&child)
                        .unwrap_or_else(|| panic!("dangling {child}"));
                if c.m.ftype == FileType::Directory {
                    assert_eq!(c.m.parent, ino, "parent of dir {child}");
                    *subdirs.entry(ino).or_default() += 1;
                }
                *links.entry(child).or_default() += 1;
            }
        }
    }
    let mut used = 0;
    for (&ino, i) in &g.s.inodes {
        if i.m.ftype == FileType::Directory {
            assert_eq!(
                i.m.nlink,
                2 + subdirs.get(&ino).copied().unwrap_or(0),
                "dir {ino}"
            );
        } else {
            assert_eq!(
                i.m.nlink,
                links.get(&ino).copied().unwrap_or(0),
                "nlink of {ino}"
            );
        }
        used += i.ext.mapped_blocks();
    }
    let busy: u64 = g.busy.iter().map(|b| b.len).sum();
    assert_eq!(g.alloc.used_blocks(), used + busy);
    assert_eq!(
        g.alloc.free_blocks() + g.alloc.used_blocks(),
        g.alloc.total_blocks()
    );
}

#[test]
fn acknowledged_sync_operations_survive_a_kill() {
    let dev = crash_vol(1);
    let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
    let d = mk(&s, ROOT_INO, "d", NewNode::Directory);
    let f = mk(&s, d.ino, "f", NewNode::Regular);
    s.write(f.ino, 0, &[0xabu8; 10000], Stable::FileSync)
        .unwrap();
    mk(&s, ROOT_INO, "gone", NewNode::Regular);
    s.remove(ROOT_INO, b"gone").unwrap();
    s.rename(d.ino, b"f", ROOT_INO, b"f2").unwrap();
    s.link(f.ino, d.ino, b"hard").unwrap();
    s.setattr(
        f.ino,
        &SetAttrs {
            mode: Some(0o600),
            ..Default::default()
        },
    )
    .unwrap();
    // An unstable write followed by COMMIT is durable too.
    s.write(f.ino, 10000, &[0xcdu8; 100], Stable::Unstable)
        .unwrap();
    s.commit(f.ino).unwrap();
    let want = s.getattr(f.ino).unwrap();
    let dev2 = kill(&dev);
    drop(s);
    let s = Store::open_dev(dev2.clone(), StoreOptions::default()).unwrap();
    assert!(
        s.mount_stats().items_replayed > 0,
        "a kill leaves work for recovery"
    );
    fsck(&s);
    assert_eq!(names(&s, ROOT_INO), vec!["d", "f2"]);
    assert_eq!(names(&s, d.ino), vec!["hard"]);
    let got = s.getattr(f.ino).unwrap();
    assert_eq!(
        (got.size, got.mode, got.nlink, got.used),
        (want.size, 0o600, 2, want.used)
    );
    let (data, _) = s.read(f.ino, 0, 20000).unwrap();
    assert!(data[..10000].iter().all(|&b| b == 0xab));
    assert!(data[10000..].iter().all(|&b| b == 0xcd));
    s.unmount().unwrap();
}

#[test]
fn write_back_then_kill_replays_over_the_metadata_area() {
    let dev = crash_vol(2);
    let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
    for i in 0..50 {
        let a = mk(&s, ROOT_INO, &format!("f{i}"), NewNode::Regular);
        s.write(a.ino, 0, format!("data {i}").as_bytes(), Stable::FileSync)
            .unwrap();
    }
    s.write_back().unwrap();
    let (runs, objs) = s.writeback_counters();
    assert!(runs >= 1 && objs >= 51);
    // After the write-back, only what changes is written again.
    for i in 0..50 {
        if i % 2 == 0 {
            s.remove(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
        }
    }
    mk(&s, ROOT_INO, "late", NewNode::Directory);
    s.write_back().unwrap();
    let (_, objs2) = s.writeback_counters();
    assert!(
        objs2 - objs <= 27,
        "second pass wrote {} objects",
        objs2 - objs
    );
    s.rename(ROOT_INO, b"f1", ROOT_INO, b"late2").unwrap();
    let dev2 = kill(&dev);
    drop(s);
    let s = Store::open_dev(dev2, StoreOptions::default()).unwrap();
    fsck(&s);
    let n = names(&s, ROOT_INO);
    assert_eq!(n.len(), 25 + 1); // 25 odd files (f1 renamed to late2) + late
    assert!(n.contains(&"late2".to_string()) && !n.contains(&"f1".to_string()));
    let f3 = s.lookup(ROOT_INO, b"f3").unwrap();
    assert_eq!(s.read(f3.ino, 0, 100).unwrap().0, b"data 3");
    s.unmount().unwrap();
}

#[test]
fn crash_at_random_points_always_mounts_consistent() {
    // Snapshots of the device at random moments during a workload: each must mount, pass
    // fsck, and hold every operation acknowledged before the snapshot was taken.
    let dev = crash_vol(3);
    dev.set_snapshot_prob(0.015);
    let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
    let mut acked: Vec<(u64, String)> = Vec::new();
    for i in 0..40u32 {
        let name = format!("n{i}");
        let a = mk(&s, ROOT_INO, &name, NewNode::Regular);
        s.write(a.ino, (i as u64) * 100, &[i as u8; 300], Stable::FileSync)
            .unwrap();
        if i % 3 == 0 {
            s.remove(ROOT_INO, name.as_bytes()).unwrap();
        } else {
            acked.push((dev.op_count(), name));
        }
        if i % 10 == 9 {
            s.write_back().unwrap();
        }
    }
    let snaps = dev.take_snapshots();
    assert!(!snaps.is_empty());
    for (ops, img) in snaps.into_iter().take(12) {
        let d = Arc::new(CrashDev::from_image(img, 9));
        let s2 = Store::open_dev(d, StoreOptions::default()).unwrap();
        fsck(&s2);
        let present = names(&s2, ROOT_INO);
        for (at, name) in &acked {
            if *at <= ops {
                assert!(
                    present.contains(name),
                    "{name} acknowledged at op {at} lost at {ops}"
                );
            }
        }
        drop(s2);
    }
    s.unmount().unwrap();
}

#[test]
fn async_export_forces_nothing_but_unmount_keeps_all() {
    let dev = crash_vol(4);
    let opts = StoreOptions {
        sync: false,
        ..StoreOptions::default()
    };
    let s = Store::open_dev(dev.clone(), opts.clone()).unwrap();
    let before = s.log().counters().forces;
    for i in 0..20 {
        mk(&s, ROOT_INO, &format!("a{i}"), NewNode::Regular);
    }
    assert_eq!(
        s.log().counters().forces,
        before,
        "async creates force nothing"
    );
    s.unmount().unwrap();
    drop(s);
    let s = Store::open_dev(dev, opts).unwrap();
    assert_eq!(names(&s, ROOT_INO).len(), 20);
    fsck(&s);
    s.unmount().unwrap();
}

#[test]
fn log_wraps_many_times_through_write_back() {
    // Every sync create writes at least one 4 KiB record: 3000 of them overrun the 4 MiB log
    // several times, so the log must call our write-back to move its tail.
    let dev = crash_vol(5);
    let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
    for i in 0..1500u32 {
        let name = format!("w{}", i % 100);
        if i >= 100 {
            s.remove(ROOT_INO, name.as_bytes()).unwrap();
        }
        mk(&s, ROOT_INO, &name, NewNode::Regular);
    }
    assert!(
        s.log().counters().writebacks > 0,
        "the log never needed write-back"
    );
    let dev2 = kill(&dev);
    drop(s);
    let s = Store::open_dev(dev2, StoreOptions::default()).unwrap();
    fsck(&s);
    assert_eq!(names(&s, ROOT_INO).len(), 100);
    s.unmount().unwrap();
}

fn phys_blocks(s: &Store, ino: Ino) -> Vec<u64> {
    let g = s.inner.rd();
    g.s.inodes[&ino.0]
        .ext
        .iter()
        .flat_map(|(_, p, l, _)| p..p + l)
        .collect()
}

#[test]
fn freed_blocks_wait_for_durability_and_for_io_in_flight() {
    let (_d, _p, s) = fresh();
    let a = mk(&s, ROOT_INO, "a", NewNode::Regular);
    s.write(a.ino, 0, &[1u8; 8192], Stable::FileSync).unwrap();
    let old = phys_blocks(&s, a.ino);
    // A READ of `a` that looked its extents up is still in flight while `a` is truncated.
    let io = s.inner.io_begin();
    s.setattr(
        a.ino,
        &SetAttrs {
            size: Some(0),
            ..Default::default()
        },
    )
    .unwrap();
    let b = mk(&s, ROOT_INO, "b", NewNode::Regular);
    s.write(b.ino, 0, &[2u8; 8192], Stable::FileSync).unwrap();
    assert!(
        phys_blocks(&s, b.ino).iter().all(|p| !old.contains(p)),
        "reused under a read"
    );
    drop(io);
    // Durable and no I/O left: the goal (right after b's blocks) may now take them, and a
    // file sized to fill the volume certainly does.
    let c = mk(&s, ROOT_INO, "c", NewNode::Regular);
    let free = s.fsstat().free_bytes;
    s.write(c.ino, 0, &vec![3u8; free as usize], Stable::Unstable)
        .unwrap();
    let cb = phys_blocks(&s, c.ino);
    assert!(old.iter().all(|p| cb.contains(p)));
    assert_eq!(s.fsstat().free_bytes, 0);
    let r = s.write(a.ino, 0, b"x", Stable::Unstable);
    assert_eq!(r.unwrap_err(), StoreError::NoSpace);
    s.unmount().unwrap();
}
