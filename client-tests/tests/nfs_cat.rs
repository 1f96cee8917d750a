//! The `nfs-cat` binary against a real pnfsd: it prints exactly the file's bytes (several READs'
//! worth, in a subdirectory, on both minor versions), nothing for an empty file, and fails with
//! a message and no output for a path that does not exist.

use std::process::{Command, Output};

use client_tests::fs::server_and_root;
use client_tests::harness::pattern;
use client_tests::ops::Stable;

fn nfs_cat(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nfs-cat"))
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
async fn nfs_cat_prints_the_bytes_the_server_serves() {
    let (srv, s, root) = server_and_root().await.unwrap();
    let dir = s.mkdir(&root, "d", 0o755).await.unwrap();
    // Bigger than one READ (max_io), not a multiple of anything.
    let data = pattern(7, 3 * s.max_io() + 12345);
    let f = s.create_file(&dir, "f.bin", 0o644).await.unwrap();
    s.write_all(&f, 0, &data, Stable::FileSync).await.unwrap();
    s.close_file(&f).await.unwrap();
    let e = s.create_file(&root, "empty", 0o644).await.unwrap();
    s.close_file(&e).await.unwrap();
    let addr = srv.addr().to_string();

    for minor in ["1", "2"] {
        let out = nfs_cat(&["--minor", minor, &addr, "d/f.bin"]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout.len(), data.len());
        assert!(out.stdout == data, "bytes differ (minor {minor})");
    }
    let out = nfs_cat(&[&addr, "/empty"]);
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty());

    let out = nfs_cat(&[&addr, "d/missing"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("NOENT"),
        "{out:?}"
    );
    // Usage errors exit 2.
    assert_eq!(nfs_cat(&[&addr]).status.code(), Some(2));
    assert_eq!(nfs_cat(&["not-an-address", "x"]).status.code(), Some(2));
}
