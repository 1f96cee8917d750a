//! Open state and stateids as READ / WRITE / CLOSE see them (RFC 8881 §8.2, §16.2.3.1.2,
//! §18.16, §18.2), and two clients sharing the namespace.

use client_tests::attrs::basic;
use client_tests::fs::server_and_root;
use client_tests::ops::{share, OpenClaim, Stable};
use client_tests::{Compound, NfsStat, PnfsdProcess, Session, Stateid};

#[tokio::test]
async fn stateids_of_open_and_close() {
    let (_srv, s, root) = server_and_root().await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    assert_ne!(
        f.stateid.other, [0; 12],
        "an open stateid is not a special one"
    );
    s.write_all(&f, 0, b"0123456789", Stable::FileSync)
        .await
        .unwrap();

    // A forged stateid → BAD_STATEID (a server that keeps its boot time in the stateid may say
    // STALE_STATEID, as NFS-Ganesha does).
    let forged = Stateid {
        seqid: 1,
        other: [0x5a; 12],
    };
    let rep = s
        .run(Compound::new().putfh(&f.fh).read(forged, 0, 10))
        .await
        .unwrap();
    assert!(
        matches!(rep.status, NfsStat::BAD_STATEID | NfsStat::STALE_STATEID),
        "READ with a forged stateid → {}",
        rep.status.name()
    );

    // CLOSE answers a stateid and the old one is then unusable.
    // (What CLOSE answers is deprecated in 4.1, RFC 8881 §18.2.4: not checked.)
    s.run_ok(Compound::new().putfh(&f.fh).close(f.stateid))
        .await
        .unwrap()
        .close()
        .unwrap();
    let rep = s
        .run(Compound::new().putfh(&f.fh).read(f.stateid, 0, 10))
        .await
        .unwrap();
    assert!(
        matches!(rep.status, NfsStat::BAD_STATEID | NfsStat::OLD_STATEID),
        "READ with a closed stateid → {}",
        rep.status.name()
    );
    // CLOSE twice → BAD_STATEID.
    let rep = s
        .run(Compound::new().putfh(&f.fh).close(f.stateid))
        .await
        .unwrap();
    assert!(
        matches!(rep.status, NfsStat::BAD_STATEID | NfsStat::OLD_STATEID),
        "{}",
        rep.status.name()
    );

    // A read-only open cannot WRITE (OPENMODE).
    let args = s.open_args(share::ACCESS_READ, None, OpenClaim::Fh);
    let ro = s
        .run_ok(Compound::new().putfh(&f.fh).open(args))
        .await
        .unwrap()
        .open()
        .unwrap()
        .stateid;
    let rep = s
        .run(
            Compound::new()
                .putfh(&f.fh)
                .write(ro, 0, Stable::FileSync, b"x"),
        )
        .await
        .unwrap();
    assert_eq!(rep.status, NfsStat::OPENMODE);
    let rep = s
        .run_ok(Compound::new().putfh(&f.fh).read(ro, 0, 10))
        .await
        .unwrap();
    assert_eq!(rep.read().unwrap().data, b"0123456789");
}

#[tokio::test]
async fn current_stateid_flows_from_open_to_write_and_close() {
    let (_srv, s, root) = server_and_root().await.unwrap();
    // OPEN(create) + WRITE(current stateid) + CLOSE(current stateid) in one COMPOUND
    // (RFC 8881 §16.2.3.1.2): what a client does for a small new file.
    let args = s.create_args("one-shot");
    let rep = s
        .run_ok(
            Compound::new()
                .putfh(&root)
                .open(args)
                .getfh()
                .write(
                    Stateid::CURRENT,
                    0,
                    Stable::FileSync,
                    b"written via the current stateid",
                )
                .close(Stateid::CURRENT),
        )
        .await
        .unwrap();
    let fh = rep.fh().unwrap();
    assert_eq!(s.getattr_fh(&fh, basic()).await.unwrap().size, Some(31));
}

#[tokio::test]
async fn two_clients_see_each_other() {
    let srv = PnfsdProcess::start().unwrap();
    let a = Session::connect(srv.addr()).await.unwrap();
    let b = Session::connect(srv.addr()).await.unwrap();
    assert_ne!(a.clientid, b.clientid);
    assert_ne!(a.sessionid, b.sessionid);
    let root = a.lookup_path("").await.unwrap();
    let f = a.create_file(&root, "shared", 0o666).await.unwrap();
    a.write_all(&f, 0, b"from a", Stable::FileSync)
        .await
        .unwrap();
    // b opens the same file and reads a's bytes, then appends.
    let bf = b
        .open_fh(&b.lookup_path("shared").await.unwrap())
        .await
        .unwrap();
    assert_eq!(b.read_all(&bf, 0, 100).await.unwrap(), b"from a");
    b.write_all(&bf, 6, b" and b", Stable::FileSync)
        .await
        .unwrap();
    assert_eq!(a.read_all(&f, 0, 100).await.unwrap(), b"from a and b");
    b.close_file(&bf).await.unwrap();
    a.close_file(&f).await.unwrap();
    // A client with a session cannot be destroyed (CLIENTID_BUSY), and after DESTROY_SESSION it can.
    let rep = a
        .conn
        .compound(
            1,
            &Compound::new().op(client_tests::ops::Op::DestroyClientid(b.clientid)),
        )
        .await
        .unwrap();
    assert_eq!(rep.status, NfsStat::CLIENTID_BUSY);
    b.destroy().await.unwrap();
    a.run_ok(Compound::new().putfh(&root).lookup("shared"))
        .await
        .unwrap();
}

/// TEST_STATEID answers per stateid; FREE_STATEID refuses a stateid still open (RFC 8881
/// §18.48, §18.38).
#[tokio::test]
async fn test_stateid_and_free_stateid() {
    use client_tests::ops::Op;
    use client_tests::results::OpRes;
    use pnfsd::nfs4::opcode::NfsOp;
    use pnfsd::xdr::{Xdr, XdrReader, XdrWriter};
    let (_srv, s, root) = server_and_root().await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    let forged = Stateid {
        seqid: 1,
        other: [0x5a; 12],
    };
    let mut w = XdrWriter::new();
    w.u32(2);
    f.stateid.encode(&mut w);
    forged.encode(&mut w);
    let rep = s
        .run_ok(Compound::new().op(Op::Raw {
            opnum: NfsOp::TEST_STATEID,
            body: w.buf,
        }))
        .await
        .unwrap();
    let codes = match &rep.results.last().unwrap().res {
        OpRes::Undecoded(b) => {
            let mut r = XdrReader::new(b);
            let v: Vec<u32> = r.vec(16, 4).unwrap();
            r.finish().unwrap();
            v
        }
        x => panic!("{x:?}"),
    };
    assert_eq!(codes.len(), 2);
    assert_eq!(NfsStat(codes[0]), NfsStat::OK);
    assert!(
        matches!(
            NfsStat(codes[1]),
            NfsStat::BAD_STATEID | NfsStat::STALE_STATEID
        ),
        "forged → {}",
        NfsStat(codes[1]).name()
    );
    let mut w = XdrWriter::new();
    f.stateid.encode(&mut w);
    let st = s
        .run(Compound::new().op(Op::Raw {
            opnum: NfsOp::FREE_STATEID,
            body: w.buf,
        }))
        .await
        .unwrap()
        .status;
    assert_eq!(
        st,
        NfsStat::LOCKS_HELD,
        "FREE_STATEID of an open stateid → {}",
        st.name()
    );
}

/// A file removed while open (RFC 8881 §18.16.4 OPEN4_RESULT_PRESERVE_UNLINKED, 0x8): if the
/// server said it preserves unlinked files, the open stateid still reads and writes after
/// REMOVE, and the handle goes stale once the last open is closed.
#[tokio::test]
async fn removed_while_open() {
    use client_tests::ops::Stable;
    let (_srv, s, root) = server_and_root().await.unwrap();
    let args = s.create_args("doomed");
    let rep = s
        .run_ok(Compound::new().putfh(&root).open(args).getfh())
        .await
        .unwrap();
    let preserve = rep.open().unwrap().rflags & 0x8 != 0;
    let f = client_tests::fs::OpenFile {
        fh: rep.fh().unwrap(),
        stateid: rep.open().unwrap().stateid,
    };
    s.write_all(&f, 0, b"still here", Stable::FileSync)
        .await
        .unwrap();
    s.run_ok(Compound::new().putfh(&root).remove("doomed"))
        .await
        .unwrap();
    assert!(s.list(&root).await.unwrap().is_empty());
    if !preserve {
        let st = s
            .run(Compound::new().putfh(&f.fh).read(f.stateid, 0, 100))
            .await
            .unwrap();
        eprintln!(
            "server does not preserve unlinked open files: READ after REMOVE → {} {:?}",
            st.status.name(),
            st.read().map(|r| r.data.len())
        );
        return;
    }
    assert_eq!(s.read_all(&f, 0, 100).await.unwrap(), b"still here");
    s.write_all(&f, 10, b"!", Stable::FileSync).await.unwrap();
    assert_eq!(
        s.getattr_fh(&f.fh, basic()).await.unwrap().numlinks,
        Some(0)
    );
    s.close_file(&f).await.unwrap();
    let st = s
        .run(Compound::new().putfh(&f.fh).getattr(basic()))
        .await
        .unwrap()
        .status;
    assert_eq!(st, NfsStat::STALE, "the last close frees an unlinked file");
}
