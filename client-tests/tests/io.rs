//! READ / WRITE edge cases: sparse files far out, concurrent writers on one file, offsets past
//! the largest file, and a reply too big for the reply cache.

use std::sync::Arc;

use client_tests::attrs::basic;
use client_tests::fs::server_and_root;
use client_tests::harness::pattern;
use client_tests::ops::Stable;
use client_tests::{Compound, NfsStat, PnfsdProcess, Session};

#[tokio::test]
async fn sparse_write_far_out() {
    let (_srv, s, root) = server_and_root().await.unwrap();
    let f = s.create_file(&root, "sparse", 0o644).await.unwrap();
    let far = 5u64 << 30; // 5 GiB: far beyond what is allocated, and not aligned below
    let data = pattern(40, 5000);
    s.write_all(&f, far + 100, &data, Stable::FileSync)
        .await
        .unwrap();
    let a = s.getattr_fh(&f.fh, basic()).await.unwrap();
    assert_eq!(a.size, Some(far + 100 + 5000));
    assert_eq!(s.read_all(&f, far + 100, 5000).await.unwrap(), data);
    let before = s.read_all(&f, far - 4096, 4196).await.unwrap();
    assert!(before.iter().all(|b| *b == 0), "the hole reads as zeros");
    let start = s.read_all(&f, 0, 8192).await.unwrap();
    assert!(start.iter().all(|b| *b == 0));
    // Space used counts blocks, not the hole.
    let used = s
        .getattr_fh(
            &f.fh,
            client_tests::attrs::bitmap(&[client_tests::attrs::attr::SPACE_USED]),
        )
        .await
        .unwrap()
        .space_used;
    assert!(
        used.unwrap_or(0) < 1 << 20,
        "space_used {used:?} for 5000 bytes of data"
    );
}

#[tokio::test]
async fn offsets_past_the_largest_file_are_refused() {
    let (_srv, s, root) = server_and_root().await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    let rep = s
        .run(Compound::new().putfh(&f.fh).write(
            f.stateid,
            u64::MAX - 10,
            Stable::FileSync,
            &[1; 100],
        ))
        .await
        .unwrap();
    assert!(
        matches!(rep.status, NfsStat::FBIG | NfsStat::INVAL),
        "WRITE ending past 2^64 → {}",
        rep.status.name()
    );
    assert_eq!(s.getattr_fh(&f.fh, basic()).await.unwrap().size, Some(0));
    // READ far past EOF is just EOF.
    let rep = s
        .run_ok(
            Compound::new()
                .putfh(&f.fh)
                .read(f.stateid, u64::MAX - 10, 100),
        )
        .await
        .unwrap();
    assert!(rep.read().unwrap().eof && rep.read().unwrap().data.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_on_one_file() {
    let srv = PnfsdProcess::start().unwrap();
    let s = Arc::new(Session::connect(srv.addr()).await.unwrap());
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "shared", 0o644).await.unwrap();
    // 16 writers, each its own 64 KiB stripe, written in 4 KiB pieces in an interleaved order.
    const STRIPE: usize = 64 << 10;
    let mut tasks = Vec::new();
    for w in 0..16u64 {
        let (s, f) = (s.clone(), f.clone());
        tasks.push(tokio::spawn(async move {
            let data = pattern(100 + w, STRIPE);
            for i in (0..16).rev() {
                let off = w as usize * STRIPE + i * 4096;
                s.write_all(
                    &f,
                    off as u64,
                    &data[i * 4096..(i + 1) * 4096],
                    Stable::Unstable,
                )
                .await?;
            }
            Ok::<_, client_tests::ClientError>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    s.run_ok(Compound::new().putfh(&f.fh).commit(0, 0))
        .await
        .unwrap();
    let all = s.read_all(&f, 0, 16 * STRIPE).await.unwrap();
    assert_eq!(all.len(), 16 * STRIPE);
    for w in 0..16usize {
        assert!(
            all[w * STRIPE..(w + 1) * STRIPE] == pattern(100 + w as u64, STRIPE)[..],
            "stripe {w} differs"
        );
    }
}

#[tokio::test]
async fn reply_too_big_to_cache() {
    let (_srv, s, root) = server_and_root().await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    let cached_max = s.created.fore.maxresponsesize_cached as usize;
    let len = (cached_max + 8192).min(s.max_io());
    s.write_all(&f, 0, &pattern(50, len), Stable::FileSync)
        .await
        .unwrap();
    if len <= cached_max {
        eprintln!("maxresponsesize_cached {cached_max} ≥ max I/O {len}: nothing to test");
        return;
    }
    // READ with sa_cachethis: a reply larger than ca_maxresponsesize_cached cannot be cached
    // (RFC 8881 §2.10.6.4 / §18.46.3: REP_TOO_BIG_TO_CACHE).
    let mut slot = s.take_slot().await.unwrap();
    let rep = s
        .send_on(
            &slot,
            &Compound::new().putfh(&f.fh).read(f.stateid, 0, len as u32),
            true,
        )
        .await
        .unwrap();
    slot.settle(&rep);
    assert_eq!(
        rep.status,
        NfsStat::REP_TOO_BIG_TO_CACHE,
        "READ of {len} bytes, cached limit {cached_max}"
    );
    drop(slot);
    // Without cachethis the same READ works.
    assert_eq!(s.read_all(&f, 0, len).await.unwrap(), pattern(50, len));
}
