//! The errors a client relies on for namespace misuse (RFC 8881 §18, "ERRORS" of each
//! operation), and the special file types of CREATE.

use client_tests::attrs::{attr, basic, bitmap, ftype, SetAttrs};
use client_tests::fs::server_and_root;
use client_tests::ops::{share, CreateKind, Op, OpenClaim, Stable};
use client_tests::{Compound, NfsStat, PnfsdProcess, Session, Stateid};
use pnfsd::nfs4::opcode::NfsOp;
use pnfsd::xdr::XdrWriter;

async fn setup() -> (PnfsdProcess, Session, Vec<u8>) {
    let (srv, s, root) = server_and_root().await.unwrap();
    (srv, s, root)
}

fn one_of(st: NfsStat, ok: &[NfsStat], what: &str) {
    assert!(
        ok.contains(&st),
        "{what}: got {}, expected one of {:?}",
        st.name(),
        ok.iter().map(|s| s.name()).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn wrong_types_for_the_operation() {
    let (_srv, s, root) = setup().await;
    let d = s.mkdir(&root, "d", 0o755).await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    s.write_all(&f, 0, b"data", Stable::FileSync).await.unwrap();
    s.run_ok(Compound::new().putfh(&root).symlink("l", "f"))
        .await
        .unwrap();

    // READ / WRITE of a directory → ISDIR (§18.22.4, §18.32.4).
    let st = s
        .run(Compound::new().putfh(&d).read(Stateid::ANONYMOUS, 0, 10))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::ISDIR], "READ of a directory");
    let st = s
        .run(
            Compound::new()
                .putfh(&d)
                .write(Stateid::ANONYMOUS, 0, Stable::FileSync, b"x"),
        )
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::ISDIR], "WRITE to a directory");
    // OPEN of a directory → ISDIR, of a symlink → SYMLINK (§18.16.4).
    let args = s.open_args(share::ACCESS_READ, None, OpenClaim::Null(b"d".to_vec()));
    let st = s
        .run(Compound::new().putfh(&root).open(args))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::ISDIR], "OPEN of a directory");
    let args = s.open_args(share::ACCESS_READ, None, OpenClaim::Null(b"l".to_vec()));
    let st = s
        .run(Compound::new().putfh(&root).open(args))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::SYMLINK], "OPEN of a symlink");
    // READLINK of a regular file → INVAL (§18.24.4).
    let st = s
        .run(Compound::new().putfh(&f.fh).readlink())
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::INVAL], "READLINK of a file");
    // LINK of a directory → ISDIR (§18.9.4).
    let st = s
        .run(Compound::new().putfh(&d).savefh().putfh(&root).link("d2"))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::ISDIR], "LINK of a directory");
    // CREATE / REMOVE / READDIR with a file as the directory → NOTDIR.
    let st = s
        .run(Compound::new().putfh(&f.fh).mkdir("x", 0o755))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::NOTDIR], "CREATE in a file");
    let st = s
        .run(Compound::new().putfh(&f.fh).remove("x"))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::NOTDIR], "REMOVE in a file");
    let st = s
        .run(
            Compound::new()
                .putfh(&f.fh)
                .readdir(0, [0; 8], 4096, Default::default()),
        )
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::NOTDIR], "READDIR of a file");
    // CREATE of a regular file → BADTYPE (§18.4.4: regular files are made by OPEN).
    let mut body = XdrWriter::new();
    body.u32(ftype::REG);
    body.string(b"reg");
    SetAttrs::default().encode(&mut body);
    let st = s
        .run(Compound::new().putfh(&root).op(Op::Raw {
            opnum: NfsOp::CREATE,
            body: body.buf,
        }))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::BADTYPE], "CREATE NF4REG");
    // SETATTR of the size of a directory → ISDIR or INVAL.
    let st = s
        .run(
            Compound::new()
                .putfh(&d)
                .setattr(Stateid::ANONYMOUS, SetAttrs::size(0)),
        )
        .await
        .unwrap()
        .status;
    one_of(
        st,
        &[NfsStat::ISDIR, NfsStat::INVAL],
        "SETATTR size of a directory",
    );
}

#[tokio::test]
async fn bad_names_and_missing_names() {
    let (_srv, s, root) = setup().await;
    let long = "n".repeat(300);
    let st = s
        .run(Compound::new().putfh(&root).mkdir(&long, 0o755))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::NAMETOOLONG], "300-byte name");
    for bad in ["a/b", "", ".", ".."] {
        let st = s
            .run(Compound::new().putfh(&root).mkdir(bad, 0o755))
            .await
            .unwrap()
            .status;
        one_of(
            st,
            &[
                NfsStat::BADCHAR,
                NfsStat::BADNAME,
                NfsStat::INVAL,
                NfsStat::EXIST,
            ],
            &format!("mkdir {bad:?}"),
        );
        assert_ne!(st, NfsStat::OK);
    }
    let st = s
        .run(Compound::new().putfh(&root).remove("missing"))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::NOENT], "REMOVE of a missing name");
    let st = s
        .run(Compound::new().putfh(&root).savefh().rename("missing", "x"))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::NOENT], "RENAME of a missing name");
    // The root is still empty: nothing above created anything.
    assert!(s.list(&root).await.unwrap().is_empty());
}

#[tokio::test]
async fn rename_rules() {
    let (_srv, s, root) = setup().await;
    let a = s.mkdir(&root, "a", 0o755).await.unwrap();
    let b = s.mkdir(&a, "b", 0o755).await.unwrap();
    // A directory into its own subtree → INVAL (§18.26.4).
    let st = s
        .run(
            Compound::new()
                .putfh(&root)
                .savefh()
                .putfh(&b)
                .rename("a", "inside"),
        )
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::INVAL], "RENAME a directory under itself");
    // A directory over a non-empty directory → EXIST or NOTEMPTY.
    s.mkdir(&root, "c", 0o755).await.unwrap();
    let st = s
        .run(Compound::new().putfh(&root).savefh().rename("c", "a"))
        .await
        .unwrap()
        .status;
    one_of(
        st,
        &[NfsStat::EXIST, NfsStat::NOTEMPTY],
        "RENAME over a non-empty directory",
    );
    // A file over a directory, a directory over a file → EXIST / ISDIR / NOTDIR.
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    let st = s
        .run(Compound::new().putfh(&root).savefh().rename("f", "c"))
        .await
        .unwrap()
        .status;
    one_of(
        st,
        &[NfsStat::EXIST, NfsStat::ISDIR],
        "RENAME file over directory",
    );
    let st = s
        .run(Compound::new().putfh(&root).savefh().rename("c", "f"))
        .await
        .unwrap()
        .status;
    one_of(
        st,
        &[NfsStat::EXIST, NfsStat::NOTDIR],
        "RENAME directory over file",
    );
    // A directory over an empty directory works; renaming a name onto itself is a no-op.
    s.mkdir(&root, "empty", 0o755).await.unwrap();
    s.run_ok(Compound::new().putfh(&root).savefh().rename("c", "empty"))
        .await
        .unwrap();
    s.run_ok(Compound::new().putfh(&root).savefh().rename("f", "f"))
        .await
        .unwrap();
    assert_eq!(s.list(&root).await.unwrap(), vec!["a", "empty", "f"]);
    // The moved directory's ".." follows: LOOKUPP of a/b is a.
    assert_eq!(s.parent_of(&b).await.unwrap(), a);
    let _ = f;
}

#[tokio::test]
async fn special_files_and_readdir_limits() {
    let (_srv, s, root) = setup().await;
    let kinds = [
        ("fifo", CreateKind::Fifo, ftype::FIFO),
        ("sock", CreateKind::Socket, ftype::SOCK),
        ("chr", CreateKind::Char(4, 64), ftype::CHR),
        ("blk", CreateKind::Block(8, 1), ftype::BLK),
    ];
    for (name, kind, t) in kinds.iter().cloned() {
        let rep = s
            .run_ok(
                Compound::new()
                    .putfh(&root)
                    .op(Op::Create {
                        kind: kind.clone(),
                        name: name.as_bytes().to_vec(),
                        attrs: SetAttrs::mode(0o600),
                    })
                    .getattr(bitmap(&[attr::TYPE, attr::MODE, attr::RAWDEV])),
            )
            .await
            .unwrap();
        let a = rep.attrs().unwrap();
        assert_eq!(a.ftype, Some(t), "{name}");
        assert_eq!(a.mode.map(|m| m & 0o7777), Some(0o600), "{name}");
        match kind {
            CreateKind::Char(ma, mi) | CreateKind::Block(ma, mi) => {
                assert_eq!(a.rawdev, Some((ma, mi)), "{name}")
            }
            _ => {}
        }
    }
    // READDIR with room for no entry at all → TOOSMALL (§18.23.4).
    let st = s
        .run(Compound::new().putfh(&root).readdir(0, [0; 8], 8, basic()))
        .await
        .unwrap()
        .status;
    one_of(st, &[NfsStat::TOOSMALL], "READDIR maxcount 8");
    assert_eq!(
        s.list(&root).await.unwrap(),
        vec!["blk", "chr", "fifo", "sock"]
    );
}
