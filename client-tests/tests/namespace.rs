//! Namespace and I/O operations over loopback: create / write / read / rename / link / remove /
//! readdir, plus the error cases a client relies on (RFC 8881 §18).

use client_tests::attrs::{attr, basic, bitmap, ftype, SetAttrs};
use client_tests::fs::server_and_root;
use client_tests::harness::pattern;
use client_tests::ops::{share, CreateHow, OpenClaim, Stable};
use client_tests::{Compound, NfsStat, PnfsdProcess, Session, Stateid};

async fn setup() -> (PnfsdProcess, Session, Vec<u8>) {
    let (srv, s, root) = server_and_root().await.unwrap();
    (srv, s, root)
}

#[tokio::test]
async fn create_write_read_and_attributes() {
    let (_srv, s, root) = setup().await;
    let f = s.create_file(&root, "file", 0o644).await.unwrap();
    let a = s.getattr_fh(&f.fh, basic()).await.unwrap();
    assert_eq!(a.ftype, Some(ftype::REG));
    assert_eq!(a.size, Some(0));
    assert_eq!(a.numlinks, Some(1));
    assert_eq!(a.mode.map(|m| m & 0o7777), Some(0o644));
    let change0 = a.change.unwrap();

    // 300 KiB + 5 bytes: several WRITEs, one not block-aligned.
    let data = pattern(1, (300 << 10) + 5);
    s.write_all(&f, 0, &data, Stable::FileSync).await.unwrap();
    let a = s.getattr_fh(&f.fh, basic()).await.unwrap();
    assert_eq!(a.size, Some(data.len() as u64));
    assert_ne!(
        a.change.unwrap(),
        change0,
        "change attribute must move on WRITE"
    );
    assert_eq!(s.read_all(&f, 0, data.len() + 100).await.unwrap(), data);

    // A READ in the middle and one past EOF.
    let rep = s
        .run_ok(Compound::new().putfh(&f.fh).read(f.stateid, 4000, 1000))
        .await
        .unwrap();
    assert_eq!(rep.read().unwrap().data, &data[4000..5000]);
    assert!(!rep.read().unwrap().eof);
    let rep = s
        .run_ok(
            Compound::new()
                .putfh(&f.fh)
                .read(f.stateid, data.len() as u64 + 10, 100),
        )
        .await
        .unwrap();
    assert!(rep.read().unwrap().eof);
    assert!(rep.read().unwrap().data.is_empty());

    // Overwrite in the middle, and a write past EOF leaves a hole of zeros.
    let patch = pattern(2, 777);
    s.write_all(&f, 1000, &patch, Stable::FileSync)
        .await
        .unwrap();
    let far = data.len() as u64 + 8192;
    s.write_all(&f, far, b"tail", Stable::FileSync)
        .await
        .unwrap();
    let all = s.read_all(&f, 0, far as usize + 4).await.unwrap();
    let mut want = data.clone();
    want[1000..1777].copy_from_slice(&patch);
    want.resize(far as usize, 0);
    want.extend_from_slice(b"tail");
    assert_eq!(all.len(), want.len());
    assert!(all == want, "file contents differ after overwrite and hole");

    // The anonymous stateid reads too (RFC 8881 §8.2.3).
    let rep = s
        .run_ok(Compound::new().putfh(&f.fh).read(Stateid::ANONYMOUS, 0, 16))
        .await
        .unwrap();
    assert_eq!(rep.read().unwrap().data, &want[..16]);
    s.close_file(&f).await.unwrap();
}

#[tokio::test]
async fn unstable_write_then_commit_has_the_same_verifier() {
    let (_srv, s, root) = setup().await;
    let f = s.create_file(&root, "u", 0o600).await.unwrap();
    let data = pattern(3, 65536);
    let v1 = s.write_all(&f, 0, &data, Stable::Unstable).await.unwrap();
    let rep = s
        .run_ok(Compound::new().putfh(&f.fh).commit(0, 0))
        .await
        .unwrap();
    assert_eq!(rep.commit_verf().unwrap(), v1);
    assert_eq!(s.read_all(&f, 0, data.len()).await.unwrap(), data);
}

#[tokio::test]
async fn open_create_modes() {
    let (_srv, s, root) = setup().await;
    s.create_file(&root, "g", 0o644).await.unwrap();
    // GUARDED on an existing name → EXIST.
    let args = s.open_args(
        share::ACCESS_BOTH,
        Some(CreateHow::Guarded(SetAttrs::mode(0o644))),
        OpenClaim::Null(b"g".to_vec()),
    );
    let rep = s
        .run(Compound::new().putfh(&root).open(args))
        .await
        .unwrap();
    assert_eq!(rep.status, NfsStat::EXIST);
    // UNCHECKED on an existing name opens it.
    let args = s.open_args(
        share::ACCESS_READ,
        Some(CreateHow::Unchecked(SetAttrs::default())),
        OpenClaim::Null(b"g".to_vec()),
    );
    s.run_ok(Compound::new().putfh(&root).open(args))
        .await
        .unwrap();
    // NOCREATE of a missing name → NOENT.
    let args = s.open_args(
        share::ACCESS_READ,
        None,
        OpenClaim::Null(b"missing".to_vec()),
    );
    assert_eq!(
        s.run(Compound::new().putfh(&root).open(args))
            .await
            .unwrap()
            .status,
        NfsStat::NOENT
    );

    // EXCLUSIVE4_1: the same verifier again is the same create (a retransmission), another
    // verifier is EXIST (RFC 8881 §18.16.3).
    let ex = |verf: [u8; 8]| {
        s.open_args(
            share::ACCESS_BOTH,
            Some(CreateHow::Exclusive41 {
                verf,
                attrs: SetAttrs::default(),
            }),
            OpenClaim::Null(b"x".to_vec()),
        )
    };
    let r1 = s
        .run_ok(Compound::new().putfh(&root).open(ex([1; 8])).getfh())
        .await
        .unwrap();
    let r2 = s
        .run_ok(Compound::new().putfh(&root).open(ex([1; 8])).getfh())
        .await
        .unwrap();
    assert_eq!(r1.fh().unwrap(), r2.fh().unwrap());
    let r3 = s
        .run(Compound::new().putfh(&root).open(ex([2; 8])))
        .await
        .unwrap();
    assert_eq!(r3.status, NfsStat::EXIST);

    // CLAIM_FH opens by filehandle.
    let f = s.open_fh(&r1.fh().unwrap()).await.unwrap();
    s.write_all(&f, 0, b"abc", Stable::FileSync).await.unwrap();
    s.close_file(&f).await.unwrap();
}

#[tokio::test]
async fn setattr_size_and_mode() {
    let (_srv, s, root) = setup().await;
    let f = s.create_file(&root, "t", 0o644).await.unwrap();
    let data = pattern(4, 10000);
    s.write_all(&f, 0, &data, Stable::FileSync).await.unwrap();
    s.run_ok(
        Compound::new()
            .putfh(&f.fh)
            .setattr(f.stateid, SetAttrs::size(100)),
    )
    .await
    .unwrap();
    assert_eq!(s.getattr_fh(&f.fh, basic()).await.unwrap().size, Some(100));
    assert_eq!(s.read_all(&f, 0, 10000).await.unwrap(), &data[..100]);
    // Growing again reads zeros, never the old bytes.
    s.run_ok(
        Compound::new()
            .putfh(&f.fh)
            .setattr(f.stateid, SetAttrs::size(5000)),
    )
    .await
    .unwrap();
    let back = s.read_all(&f, 0, 5000).await.unwrap();
    assert_eq!(&back[..100], &data[..100]);
    assert!(
        back[100..].iter().all(|b| *b == 0),
        "truncated bytes came back"
    );
    let rep = s
        .run_ok(
            Compound::new()
                .putfh(&f.fh)
                .setattr(Stateid::ANONYMOUS, SetAttrs::mode(0o600))
                .getattr(basic()),
        )
        .await
        .unwrap();
    assert_eq!(rep.attrs().unwrap().mode.map(|m| m & 0o7777), Some(0o600));
}

#[tokio::test]
async fn directories_symlinks_rename_link_remove() {
    let (_srv, s, root) = setup().await;
    let d1 = s.mkdir(&root, "d1", 0o755).await.unwrap();
    let d2 = s.mkdir(&root, "d2", 0o755).await.unwrap();
    assert_eq!(
        s.getattr_fh(&d1, basic()).await.unwrap().ftype,
        Some(ftype::DIR)
    );
    // mkdir of an existing name → EXIST.
    let rep = s
        .run(Compound::new().putfh(&root).mkdir("d1", 0o755))
        .await
        .unwrap();
    assert_eq!(rep.status, NfsStat::EXIST);

    // Symlink and READLINK.
    let rep = s
        .run_ok(
            Compound::new()
                .putfh(&d1)
                .symlink("ln", "../d2/target")
                .getfh(),
        )
        .await
        .unwrap();
    let ln = rep.fh().unwrap();
    let rep = s
        .run_ok(Compound::new().putfh(&ln).readlink().getattr(basic()))
        .await
        .unwrap();
    assert_eq!(rep.readlink().unwrap(), b"../d2/target");
    assert_eq!(rep.attrs().unwrap().ftype, Some(ftype::LNK));

    let f = s.create_file(&d1, "a", 0o644).await.unwrap();
    s.write_all(&f, 0, b"hello", Stable::FileSync)
        .await
        .unwrap();
    let fileid = s.getattr_fh(&f.fh, basic()).await.unwrap().fileid;

    // RENAME within a directory: SAVEFH(source dir), PUTFH(target dir).
    s.run_ok(
        Compound::new()
            .putfh(&d1)
            .savefh()
            .putfh(&d1)
            .rename("a", "b"),
    )
    .await
    .unwrap();
    let rep = s.run(Compound::new().putfh(&d1).lookup("a")).await.unwrap();
    assert_eq!(rep.status, NfsStat::NOENT);
    assert_eq!(s.stat("d1/b").await.unwrap().fileid, fileid);

    // RENAME across directories.
    s.run_ok(
        Compound::new()
            .putfh(&d1)
            .savefh()
            .putfh(&d2)
            .rename("b", "c"),
    )
    .await
    .unwrap();
    assert_eq!(s.stat("d2/c").await.unwrap().fileid, fileid);
    assert_eq!(s.list(&d1).await.unwrap(), vec!["ln"]);

    // LINK: SAVEFH(file), PUTFH(target dir).
    s.run_ok(
        Compound::new()
            .putfh(&f.fh)
            .savefh()
            .putfh(&d1)
            .link("hard"),
    )
    .await
    .unwrap();
    let a = s.stat("d1/hard").await.unwrap();
    assert_eq!(a.fileid, fileid);
    assert_eq!(a.numlinks, Some(2));
    let rep = s
        .run_ok(
            Compound::new()
                .walk("d1/hard")
                .read(Stateid::ANONYMOUS, 0, 100),
        )
        .await
        .unwrap();
    assert_eq!(rep.read().unwrap().data, b"hello");

    // RENAME over an existing file replaces it.
    let g = s.create_file(&d2, "g", 0o644).await.unwrap();
    s.write_all(&g, 0, b"ggg", Stable::FileSync).await.unwrap();
    s.run_ok(
        Compound::new()
            .putfh(&d2)
            .savefh()
            .putfh(&d2)
            .rename("g", "c"),
    )
    .await
    .unwrap();
    let rep = s
        .run_ok(
            Compound::new()
                .walk("d2/c")
                .read(Stateid::ANONYMOUS, 0, 100),
        )
        .await
        .unwrap();
    assert_eq!(rep.read().unwrap().data, b"ggg");
    assert_eq!(s.stat("d1/hard").await.unwrap().numlinks, Some(1));

    // REMOVE: a non-empty directory → NOTEMPTY; a file; then the empty directory.
    let rep = s
        .run(Compound::new().putfh(&root).remove("d2"))
        .await
        .unwrap();
    assert_eq!(rep.status, NfsStat::NOTEMPTY);
    s.run_ok(Compound::new().putfh(&d2).remove("c"))
        .await
        .unwrap();
    s.run_ok(Compound::new().putfh(&root).remove("d2"))
        .await
        .unwrap();
    let rep = s
        .run(Compound::new().putfh(&root).lookup("d2"))
        .await
        .unwrap();
    assert_eq!(rep.status, NfsStat::NOENT);
    // The removed directory's handle is stale now.
    let rep = s
        .run(Compound::new().putfh(&d2).getattr(basic()))
        .await
        .unwrap();
    assert_eq!(rep.status, NfsStat::STALE);
    assert_eq!(s.list(&root).await.unwrap(), vec!["d1"]);
    assert_eq!(s.list(&d1).await.unwrap(), vec!["hard", "ln"]);
}

#[tokio::test]
async fn readdir_pages_with_cookies_and_attributes() {
    let (_srv, s, root) = setup().await;
    let d = s.mkdir(&root, "many", 0o755).await.unwrap();
    let n = 300;
    for i in 0..n {
        s.run_ok(
            Compound::new()
                .putfh(&d)
                .mkdir(&format!("entry-with-a-longish-name-{i:04}"), 0o755),
        )
        .await
        .unwrap();
    }
    let entries = s
        .readdir_all(&d, bitmap(&[attr::TYPE, attr::FILEID]))
        .await
        .unwrap();
    let mut names: Vec<String> = entries
        .iter()
        .map(|e| String::from_utf8_lossy(&e.name).into_owned())
        .collect();
    names.sort();
    let want: Vec<String> = (0..n)
        .map(|i| format!("entry-with-a-longish-name-{i:04}"))
        .collect();
    assert_eq!(names, want);
    // "." and ".." are never returned (RFC 8881 §18.23.4); each entry has its attributes.
    for e in &entries {
        assert_eq!(e.attrs.ftype, Some(ftype::DIR));
        assert!(e.attrs.fileid.is_some());
        assert!(
            e.cookie > 2,
            "cookies 0, 1 and 2 are reserved: {}",
            e.cookie
        );
    }
    let a = s.getattr_fh(&d, basic()).await.unwrap();
    assert_eq!(a.numlinks, Some(2 + n as u32));
}

#[tokio::test]
async fn lookups_and_filehandle_errors() {
    let (_srv, s, root) = setup().await;
    assert_eq!(
        s.run(Compound::new().putfh(&root).lookup("nope"))
            .await
            .unwrap()
            .status,
        NfsStat::NOENT
    );
    // LOOKUP in a file → NOTDIR.
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    assert_eq!(
        s.run(Compound::new().putfh(&f.fh).lookup("x"))
            .await
            .unwrap()
            .status,
        NfsStat::NOTDIR
    );
    // No current filehandle → NOFILEHANDLE.
    assert_eq!(
        s.run(Compound::new().getfh()).await.unwrap().status,
        NfsStat::NOFILEHANDLE
    );
    // A handle that is not ours → BADHANDLE.
    assert_eq!(
        s.run(Compound::new().putfh(&[0xee; 20]).getattr(basic()))
            .await
            .unwrap()
            .status,
        NfsStat::BADHANDLE
    );
    // RESTOREFH with nothing saved → RESTOREFH.
    assert_eq!(
        s.run(Compound::new().putrootfh().restorefh())
            .await
            .unwrap()
            .status,
        NfsStat::RESTOREFH
    );
    // SAVEFH / RESTOREFH put the saved handle back.
    let rep = s
        .run_ok(
            Compound::new()
                .putfh(&f.fh)
                .savefh()
                .putrootfh()
                .restorefh()
                .getfh(),
        )
        .await
        .unwrap();
    assert_eq!(rep.fh().unwrap(), f.fh);
    // Names "." and ".." are not valid components, nor is an empty one.
    for bad in [".", "..", ""] {
        let st = s
            .run(Compound::new().putfh(&root).lookup(bad))
            .await
            .unwrap()
            .status;
        assert!(
            matches!(st, NfsStat::BADNAME | NfsStat::INVAL | NfsStat::NOENT),
            "LOOKUP {bad:?}: {}",
            st.name()
        );
    }
}

/// O_CREAT|O_TRUNC as Linux sends it: OPEN(UNCHECKED) of an existing file with size 0 in the
/// create attributes truncates it (RFC 8881 §18.16.3: UNCHECKED4 applies the attributes).
#[tokio::test]
async fn open_unchecked_with_size_zero_truncates() {
    let (_srv, s, root) = setup().await;
    let f = s.create_file(&root, "t", 0o644).await.unwrap();
    s.write_all(&f, 0, &pattern(9, 10_000), Stable::FileSync)
        .await
        .unwrap();
    s.close_file(&f).await.unwrap();
    let args = s.open_args(
        share::ACCESS_BOTH,
        Some(CreateHow::Unchecked(SetAttrs::size(0))),
        OpenClaim::Null(b"t".to_vec()),
    );
    let rep = s
        .run_ok(Compound::new().putfh(&root).open(args).getattr(basic()))
        .await
        .unwrap();
    assert_eq!(rep.attrs().unwrap().size, Some(0));
    assert_eq!(
        rep.attrs().unwrap().fileid,
        s.getattr_fh(&f.fh, basic()).await.unwrap().fileid,
        "same file"
    );
}
