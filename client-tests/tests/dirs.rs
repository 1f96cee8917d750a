//! Directory details a Linux client depends on: READDIR continuing from a cookie while the
//! entries before it are removed (the `rm -rf` pattern), and parent link counts and ".." after
//! moving a directory, also across a crash.

use std::collections::BTreeSet;

use client_tests::attrs::basic;
use client_tests::fs::server_and_root;
use client_tests::{Bitmap, Compound, NfsStat, PnfsdProcess, Session};

#[tokio::test]
async fn readdir_continues_while_entries_are_removed() {
    let (_srv, s, root) = server_and_root().await.unwrap();
    let d = s.mkdir(&root, "big", 0o755).await.unwrap();
    let all: BTreeSet<String> = (0..200).map(|i| format!("entry-{i:03}")).collect();
    for n in &all {
        s.run_ok(Compound::new().putfh(&d).mkdir(n, 0o755))
            .await
            .unwrap();
    }
    // Read a page at a time and remove what each page returned before asking for the next,
    // as `rm -rf` does.
    let mut seen = BTreeSet::new();
    let (mut cookie, mut verf) = (0u64, [0u8; 8]);
    for _ in 0..1000 {
        let rep = s
            .run(
                Compound::new()
                    .putfh(&d)
                    .readdir(cookie, verf, 1024, Bitmap::default()),
            )
            .await
            .unwrap();
        assert_eq!(
            rep.status,
            NfsStat::OK,
            "READDIR from cookie {cookie} after removals: {}",
            rep.status.name()
        );
        let rd = rep.readdir().unwrap().clone();
        verf = rd.cookieverf;
        for e in &rd.entries {
            let n = String::from_utf8_lossy(&e.name).into_owned();
            assert!(seen.insert(n.clone()), "{n} returned twice");
            s.run_ok(Compound::new().putfh(&d).remove(&n))
                .await
                .unwrap();
        }
        if rd.eof {
            break;
        }
        cookie = rd
            .entries
            .last()
            .expect("a page with no entries and no eof")
            .cookie;
    }
    assert_eq!(seen, all, "every entry exactly once");
    assert!(s.list(&d).await.unwrap().is_empty());
    s.run_ok(Compound::new().putfh(&root).remove("big"))
        .await
        .unwrap();
}

async fn nlink(s: &Session, path: &str) -> u32 {
    s.stat(path).await.unwrap().numlinks.unwrap()
}

async fn check_moved(s: &Session, sub: &[u8], b: &[u8]) {
    assert_eq!(
        (nlink(s, "a").await, nlink(s, "b").await),
        (2, 3),
        "parent link counts"
    );
    let parent = s.parent_of(sub).await.unwrap();
    assert_eq!(parent, b, "'..' of the moved directory");
    assert_eq!(s.getattr_fh(sub, basic()).await.unwrap().numlinks, Some(2));
}

#[tokio::test]
async fn moving_a_directory_moves_its_parent_link() {
    let mut srv = PnfsdProcess::start().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let opts = s.options.clone();
    let root = s.lookup_path("").await.unwrap();
    let a = s.mkdir(&root, "a", 0o755).await.unwrap();
    let b = s.mkdir(&root, "b", 0o755).await.unwrap();
    let sub = s.mkdir(&a, "sub", 0o755).await.unwrap();
    assert_eq!((nlink(&s, "a").await, nlink(&s, "b").await), (3, 2));
    s.run_ok(
        Compound::new()
            .putfh(&a)
            .savefh()
            .putfh(&b)
            .rename("sub", "moved"),
    )
    .await
    .unwrap();
    check_moved(&s, &sub, &b).await;
    drop(s);
    srv.kill().unwrap();
    srv.restart().unwrap();
    let s = Session::connect_with(srv.addr(), opts).await.unwrap();
    check_moved(&s, &sub, &b).await;
}
