//! Durability across a crash and a clean stop: on the default `sync` export every
//! acknowledged change is durable (docs/design.md §4), so after SIGKILL and a restart on the same
//! data directory everything acknowledged is there — names, sizes, data, links, modes.
//! After a restart the same clients come back (same owner and verifier) and send
//! RECLAIM_COMPLETE, as a Linux client does: that ends the grace period early (RFC 8881
//! §8.4.2), so READ with the anonymous stateid is not held back with NFS4ERR_GRACE.

use client_tests::attrs::{basic, ftype, SetAttrs};
use client_tests::fs::server_and_session;
use client_tests::harness::pattern;
use client_tests::ops::Stable;
use client_tests::{Compound, PnfsdProcess, Session, Stateid};

/// What the "before" phase leaves behind, checked by `verify`.
struct Expect {
    big: Vec<u8>,
    small: Vec<u8>,
    unstable: Vec<u8>,
    write_verf: [u8; 8],
}

async fn populate(s: &Session) -> Expect {
    let root = s.lookup_path("").await.unwrap();
    let top = s.mkdir(&root, "top", 0o755).await.unwrap();
    let sub = s.mkdir(&top, "sub", 0o700).await.unwrap();
    s.mkdir(&root, "gone-dir", 0o755).await.unwrap();

    // A 1 MiB file in FILE_SYNC writes.
    let big = pattern(10, 1 << 20);
    let f = s.create_file(&top, "big", 0o644).await.unwrap();
    s.write_all(&f, 0, &big, Stable::FileSync).await.unwrap();
    s.close_file(&f).await.unwrap();

    // A small file, renamed across directories and hard-linked.
    let small = b"small file contents\n".to_vec();
    let g = s.create_file(&root, "small-old", 0o640).await.unwrap();
    s.write_all(&g, 0, &small, Stable::DataSync).await.unwrap();
    s.close_file(&g).await.unwrap();
    s.run_ok(
        Compound::new()
            .putfh(&root)
            .savefh()
            .putfh(&sub)
            .rename("small-old", "small"),
    )
    .await
    .unwrap();
    s.run_ok(
        Compound::new()
            .putfh(&g.fh)
            .savefh()
            .putfh(&top)
            .link("small-link"),
    )
    .await
    .unwrap();

    // UNSTABLE writes made durable by COMMIT.
    let unstable = pattern(11, 200_000);
    let u = s.create_file(&top, "unstable", 0o600).await.unwrap();
    let write_verf = s
        .write_all(&u, 0, &unstable, Stable::Unstable)
        .await
        .unwrap();
    let v = s
        .run_ok(Compound::new().putfh(&u.fh).commit(0, 0))
        .await
        .unwrap()
        .commit_verf()
        .unwrap();
    assert_eq!(v, write_verf);

    // Truncated, then mode changed.
    let t = s.create_file(&top, "trunc", 0o644).await.unwrap();
    s.write_all(&t, 0, &pattern(12, 50_000), Stable::FileSync)
        .await
        .unwrap();
    s.run_ok(
        Compound::new()
            .putfh(&t.fh)
            .setattr(t.stateid, SetAttrs::size(1234)),
    )
    .await
    .unwrap();
    s.run_ok(
        Compound::new()
            .putfh(&t.fh)
            .setattr(Stateid::ANONYMOUS, SetAttrs::mode(0o604)),
    )
    .await
    .unwrap();
    s.close_file(&t).await.unwrap();

    // A symlink, a removed file and a removed directory.
    s.run_ok(Compound::new().putfh(&top).symlink("sym", "sub/small"))
        .await
        .unwrap();
    let x = s.create_file(&top, "removed", 0o644).await.unwrap();
    s.write_all(&x, 0, b"should be gone", Stable::FileSync)
        .await
        .unwrap();
    s.close_file(&x).await.unwrap();
    s.run_ok(Compound::new().putfh(&top).remove("removed"))
        .await
        .unwrap();
    s.run_ok(Compound::new().putfh(&root).remove("gone-dir"))
        .await
        .unwrap();

    Expect {
        big,
        small,
        unstable,
        write_verf,
    }
}

async fn read_path(s: &Session, path: &str, len: usize) -> Vec<u8> {
    let fh = s.lookup_path(path).await.unwrap();
    let f = client_tests::fs::OpenFile {
        fh,
        stateid: Stateid::ANONYMOUS,
    };
    s.read_all(&f, 0, len).await.unwrap()
}

async fn verify(s: &Session, e: &Expect) {
    let root = s.lookup_path("").await.unwrap();
    assert_eq!(s.list(&root).await.unwrap(), vec!["top"]);
    let top = s.lookup_path("top").await.unwrap();
    assert_eq!(
        s.list(&top).await.unwrap(),
        vec!["big", "small-link", "sub", "sym", "trunc", "unstable"]
    );
    assert_eq!(
        s.list(&s.lookup_path("top/sub").await.unwrap())
            .await
            .unwrap(),
        vec!["small"]
    );

    let a = s.stat("top/big").await.unwrap();
    assert_eq!(a.size, Some(e.big.len() as u64));
    assert_eq!(a.ftype, Some(ftype::REG));
    assert!(
        read_path(s, "top/big", e.big.len()).await == e.big,
        "top/big data differs"
    );

    let a = s.stat("top/sub/small").await.unwrap();
    assert_eq!(a.numlinks, Some(2));
    assert_eq!(a.mode.map(|m| m & 0o7777), Some(0o640));
    assert_eq!(s.stat("top/small-link").await.unwrap().fileid, a.fileid);
    assert_eq!(read_path(s, "top/small-link", 100).await, e.small);

    assert_eq!(
        s.stat("top/unstable").await.unwrap().size,
        Some(e.unstable.len() as u64)
    );
    assert!(
        read_path(s, "top/unstable", e.unstable.len()).await == e.unstable,
        "committed data differs"
    );

    let a = s.stat("top/trunc").await.unwrap();
    assert_eq!(a.size, Some(1234));
    assert_eq!(a.mode.map(|m| m & 0o7777), Some(0o604));
    assert_eq!(
        read_path(s, "top/trunc", 5000).await,
        &pattern(12, 50_000)[..1234]
    );

    let rep = s
        .run_ok(Compound::new().walk("top/sym").readlink())
        .await
        .unwrap();
    assert_eq!(rep.readlink().unwrap(), b"sub/small");
    let a = s.stat("top/sub").await.unwrap();
    assert_eq!(a.ftype, Some(ftype::DIR));
    assert_eq!(a.mode.map(|m| m & 0o7777), Some(0o700));
    assert!(s.stat("top/removed").await.is_err());
    assert!(s.stat("gone-dir").await.is_err());
}

#[tokio::test]
async fn sigkill_after_acknowledged_operations_loses_nothing() {
    let mut srv = PnfsdProcess::start().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let opts = s.options.clone();
    let e = populate(&s).await;
    let top_fh = s.lookup_path("top/big").await.unwrap();
    drop(s);
    srv.kill().unwrap();

    srv.restart().unwrap();
    let s = Session::connect_with(srv.addr(), opts.clone())
        .await
        .unwrap();
    verify(&s, &e).await;
    // Filehandles survive a restart (they are persistent, RFC 8881 §4.2.2).
    assert_eq!(s.lookup_path("top/big").await.unwrap(), top_fh);
    assert_eq!(
        s.getattr_fh(&top_fh, basic()).await.unwrap().size,
        Some(e.big.len() as u64)
    );
    // The write verifier changes on restart, so a client knows to resend UNSTABLE data.
    let u = s.lookup_path("top/unstable").await.unwrap();
    let v = s
        .run_ok(Compound::new().putfh(&u).commit(0, 0))
        .await
        .unwrap()
        .commit_verf()
        .unwrap();
    assert_ne!(
        v, e.write_verf,
        "write verifier must change across a restart"
    );

    // A second crash right after recovery, and again: recovery is repeatable.
    drop(s);
    srv.kill().unwrap();
    srv.restart().unwrap();
    let s = Session::connect_with(srv.addr(), opts).await.unwrap();
    verify(&s, &e).await;
}

#[tokio::test]
async fn sigterm_stops_cleanly_and_restarts() {
    let mut srv = PnfsdProcess::start().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let opts = s.options.clone();
    let e = populate(&s).await;
    drop(s);
    let st = srv.terminate().unwrap();
    assert!(st.success(), "pnfsd exit status after SIGTERM: {st}");
    srv.restart().unwrap();
    let s = Session::connect_with(srv.addr(), opts).await.unwrap();
    verify(&s, &e).await;
    // Still writable after the restart: a new file in a new session.
    let top = s.lookup_path("top").await.unwrap();
    let mk = s
        .run(Compound::new().putfh(&top).mkdir("after", 0o755))
        .await
        .unwrap();
    assert_eq!(
        mk.status,
        client_tests::NfsStat::OK,
        "mkdir after restart: {}",
        mk.status.name()
    );
    drop(s);
    assert!(srv.terminate().unwrap().success());
}

#[tokio::test]
async fn sigkill_while_idle_on_a_fresh_volume() {
    // The volume is formatted at first start; a crash right after must not corrupt it.
    let mut srv = PnfsdProcess::start().unwrap();
    srv.kill().unwrap();
    srv.restart().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    assert!(s.list(&root).await.unwrap().is_empty());
}

/// The same checks with no restart: separates "the ops are wrong" from "durability is wrong"
/// when the tests above fail.
#[tokio::test]
async fn populate_then_verify_without_restart() {
    let (_srv, s) = server_and_session().await.unwrap();
    let e = populate(&s).await;
    verify(&s, &e).await;
}

/// SIGKILL while four clients are creating and writing files: every file whose WRITE
/// (FILE_SYNC) was acknowledged before the kill is there afterwards with its data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_concurrent_creates_keeps_every_acknowledged_file() {
    use client_tests::crash::{kill_under_load, restart_as, spawn_clients, wait_for};
    use std::sync::{Arc, Mutex};
    let mut srv = PnfsdProcess::start().unwrap();
    let acked: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let (owners, tasks) = spawn_clients(&srv, 4, |t, s| {
        let acked = acked.clone();
        async move {
            let root = s.lookup_path("").await?;
            for i in 0..10_000u64 {
                let name = format!("w{t}-{i}");
                let seed = t * 100_000 + i;
                let f = s.create_file(&root, &name, 0o644).await?;
                s.write_all(&f, 0, &pattern(seed, 4096), Stable::FileSync)
                    .await?;
                acked.lock().unwrap().push((name, seed));
                s.close_file(&f).await?;
            }
            Ok(())
        }
    })
    .await;
    // Let them run until 60 files are acknowledged, then crash mid-flight.
    let n_before_kill = wait_for(60, || acked.lock().unwrap().len()).await;
    assert!(
        n_before_kill >= 60,
        "only {n_before_kill} files acknowledged in 60 s"
    );
    // Each writer stops with an error once the server is gone.
    kill_under_load(&mut srv, tasks).await;
    let acked = acked.lock().unwrap().clone();

    let back = restart_as(&mut srv, owners).await;
    let s = &back[0];
    let root = s.lookup_path("").await.unwrap();
    let names = s.list(&root).await.unwrap();
    for (name, seed) in &acked {
        assert!(
            names.contains(name),
            "acknowledged {name} is gone after the crash"
        );
        let a = s.stat(name).await.unwrap();
        assert_eq!(a.size, Some(4096), "{name}");
        assert!(
            read_path(s, name, 4096).await == pattern(*seed, 4096),
            "{name}: data differs"
        );
    }
    // Anything else there is a file whose reply was lost in the crash: at most one per writer.
    assert!(
        names.len() <= acked.len() + 4,
        "{} names for {} acknowledged",
        names.len(),
        acked.len()
    );
}

/// SIGKILL while four clients append 64 KiB FILE_SYNC chunks to their own files: after the
/// restart every acknowledged chunk reads back exactly, and each file is at least as long as
/// its acknowledged chunks (the extent maps and sizes written by WRITE are durable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_appends_keeps_every_acknowledged_chunk() {
    use std::sync::{Arc, Mutex};
    const CHUNK: usize = 64 << 10;
    let mut srv = PnfsdProcess::start().unwrap();
    let acked: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(vec![0; 4]));
    let mut owners = Vec::new();
    let mut tasks = Vec::new();
    for t in 0..4u64 {
        let s = Session::connect(srv.addr()).await.unwrap();
        owners.push(s.options.clone());
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let root = s.lookup_path("").await?;
            let f = s.create_file(&root, &format!("app{t}"), 0o644).await?;
            for i in 0..10_000u64 {
                s.write_all(
                    &f,
                    i * CHUNK as u64,
                    &pattern(t * 10_000 + i, CHUNK),
                    Stable::FileSync,
                )
                .await?;
                acked.lock().unwrap()[t as usize] = i + 1;
            }
            Ok::<_, client_tests::ClientError>(())
        }));
    }
    for _ in 0..6000 {
        if acked.lock().unwrap().iter().sum::<u64>() >= 48 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    srv.kill().unwrap();
    for t in tasks {
        assert!(t.await.unwrap().is_err());
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.iter().sum::<u64>() >= 48,
        "too few chunks acknowledged: {acked:?}"
    );

    srv.restart().unwrap();
    let mut back = Vec::new();
    for o in owners {
        back.push(Session::connect_with(srv.addr(), o).await.unwrap());
    }
    let s = &back[0];
    for (t, n) in acked.iter().enumerate() {
        let name = format!("app{t}");
        let size = s.stat(&name).await.unwrap().size.unwrap();
        assert!(
            size >= n * CHUNK as u64,
            "{name}: size {size} < {n} acknowledged chunks"
        );
        let got = read_path(s, &name, *n as usize * CHUNK).await;
        for i in 0..*n as usize {
            assert!(
                got[i * CHUNK..(i + 1) * CHUNK] == pattern(t as u64 * 10_000 + i as u64, CHUNK)[..],
                "{name}: chunk {i} of {n} acknowledged differs"
            );
        }
    }
}
