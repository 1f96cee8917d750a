//! A split volume (`metadata_volume`, docs/store.md "Split volume") served by the real
//! `pnfsd`: formatted by `pnfsd mkfs --metadata-volume`, its data survives a SIGKILL and a
//! clean restart, and the file data is on the data member, not on the metadata member.

use client_tests::harness::{pattern, pnfsd_bin};
use client_tests::ops::Stable;
use client_tests::{PnfsdProcess, ServerOptions, Session};

#[tokio::test]
async fn a_split_volume_keeps_its_data_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("meta.img"), dir.path().join("data.img"));
    let out = std::process::Command::new(pnfsd_bin().unwrap())
        .arg("mkfs")
        .arg("--size")
        .arg("256M")
        .arg("--metadata-volume")
        .arg(&meta)
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::metadata(&data).unwrap().len(), 256 << 20);
    assert_eq!(std::fs::metadata(&meta).unwrap().len(), 64 << 20);
    let toml = format!(
        "volume = {:?}\nmetadata_volume = {:?}\nlease_seconds = 5\n",
        data.display().to_string(),
        meta.display().to_string()
    );
    let mut srv = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(toml),
        ..ServerOptions::default()
    })
    .unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let opts = s.options.clone();
    let root = s.lookup_path("").await.unwrap();
    let body = pattern(21, 300_000);
    let f = s.create_file(&root, "kept", 0o644).await.unwrap();
    s.write_all(&f, 0, &body, Stable::FileSync).await.unwrap();
    s.close_file(&f).await.unwrap();
    drop(s);

    // SIGKILL: the log on the metadata member replays; the data is on the data member.
    srv.kill().unwrap();
    srv.restart().unwrap();
    let s = Session::connect_with(srv.addr(), opts.clone())
        .await
        .unwrap();
    let fh = s.lookup_path("kept").await.unwrap();
    let f = s.open_fh(&fh).await.unwrap();
    assert!(s.read_all(&f, 0, body.len()).await.unwrap() == body);
    s.close_file(&f).await.unwrap();
    drop(s);

    // A clean stop and start.
    assert!(srv.terminate().unwrap().success(), "{}", srv.log_text());
    srv.restart().unwrap();
    let s = Session::connect_with(srv.addr(), opts).await.unwrap();
    let fh = s.lookup_path("kept").await.unwrap();
    let f = s.open_fh(&fh).await.unwrap();
    assert!(s.read_all(&f, 0, body.len()).await.unwrap() == body);
    drop(s);
    assert!(srv.terminate().unwrap().success());

    // The file's first 4 KiB are somewhere on the data member and nowhere on the metadata
    // member.
    let first = &body[..4096];
    let has = |p: &std::path::Path| std::fs::read(p).unwrap().chunks(4096).any(|c| c == first);
    assert!(has(&data) && !has(&meta));
}
