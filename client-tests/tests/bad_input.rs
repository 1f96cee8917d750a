//! Bad input must be answered, never a dropped connection or a crash: malformed
//! XDR, unknown programs / versions / procedures / operations, a COMPOUND longer than the
//! session allows, fragmented records.

use std::sync::Arc;

use client_tests::fs::{server_and_root, server_and_session};
use client_tests::ops::Op;
use client_tests::rpc::{self, Cred};
use client_tests::{ClientError, Compound, Connection, NfsStat, PnfsdProcess, RpcError, Session};
use pnfsd::nfs4::opcode::NfsOp;
use pnfsd::xdr::XdrWriter;

/// The session must still work on the same connection.
async fn still_alive(s: &Session) {
    assert!(!s.conn.is_closed(), "the server dropped the connection");
    s.conn.null().await.unwrap();
    s.run_ok(Compound::new().putrootfh().getfh()).await.unwrap();
}

/// A COMPOUND4res status, or GARBAGE_ARGS at the RPC level: both are acceptable answers to
/// undecodable arguments (RFC 8881 §15.1.1.1 NFS4ERR_BADXDR).
fn badxdr_or_garbage(r: Result<client_tests::Reply, ClientError>) -> String {
    match r {
        Ok(rep) => {
            assert_eq!(rep.status, NfsStat::BADXDR, "results {:?}", rep.results);
            "BADXDR".into()
        }
        Err(ClientError::Rpc(RpcError::GarbageArgs)) => "GARBAGE_ARGS".into(),
        Err(e) => panic!("expected BADXDR or GARBAGE_ARGS, got {e}"),
    }
}

/// Sends `c` in the session (the slot settled whatever came back), expects BADXDR or
/// GARBAGE_ARGS, and checks that the session still works.
async fn in_session_badxdr(s: &Session, c: &Compound) {
    let mut slot = s.take_slot().await.unwrap();
    let r = s.send_on(&slot, c, false).await;
    if let Ok(rep) = &r {
        slot.settle(rep);
    }
    badxdr_or_garbage(r);
    drop(slot);
    still_alive(s).await;
}

/// Sends raw COMPOUND4args outside the session, expects BADXDR or GARBAGE_ARGS (returned, to
/// name it), and checks that the session still works.
async fn raw_badxdr(s: &Session, args: &[u8]) -> String {
    let r = s
        .conn
        .compound_bytes(args)
        .await
        .and_then(client_tests::Reply::decode);
    let got = badxdr_or_garbage(r);
    still_alive(s).await;
    got
}

#[tokio::test]
async fn too_many_ops() {
    let (_srv, s) = server_and_session().await.unwrap();
    let max = s.created.fore.maxoperations;
    // SEQUENCE + (max - 1) ops is allowed...
    let ok = (1..max).fold(Compound::new(), |c, _| c.putrootfh());
    s.run_ok(ok).await.unwrap();
    // ...SEQUENCE + max ops is one too many (RFC 8881 §2.10.6.4? §18.46.3: TOO_MANY_OPS).
    let big = (0..max).fold(Compound::new(), |c, _| c.putrootfh());
    let rep = s.run(big).await.unwrap();
    assert_eq!(
        rep.status,
        NfsStat::TOO_MANY_OPS,
        "{} ops with maxoperations {max}",
        max + 1
    );
    still_alive(&s).await;
}

#[tokio::test]
async fn malformed_compounds_get_badxdr_and_keep_the_connection() {
    let (_srv, s) = server_and_session().await.unwrap();

    // 1. Arguments that end inside the tag.
    let mut w = XdrWriter::new();
    w.u32(100);
    w.u32(0x41414141);
    let got = raw_badxdr(&s, &w.buf).await;
    eprintln!("truncated tag → {got}");

    // 2. An operation count far larger than the bytes that follow.
    let mut w = XdrWriter::new();
    w.string(b"");
    w.u32(1);
    w.u32(0x7fff_ffff);
    w.u32(NfsOp::PUTROOTFH.0);
    raw_badxdr(&s, &w.buf).await;

    // 3. Inside a session: PUTFH whose length runs past the end.
    let mut body = XdrWriter::new();
    body.u32(4000);
    body.u32(1);
    let c = Compound::new().op(Op::Raw {
        opnum: NfsOp::PUTFH,
        body: body.buf,
    });
    in_session_badxdr(&s, &c).await;

    // 4. A bool that is neither 0 nor 1 (RECLAIM_COMPLETE's rca_one_fs).
    let c = Compound::new().op(Op::Raw {
        opnum: NfsOp::RECLAIM_COMPLETE,
        body: vec![0, 0, 0, 7],
    });
    in_session_badxdr(&s, &c).await;

    // 5. Trailing garbage after a complete COMPOUND.
    let mut args = Compound::new().putrootfh().encode(1);
    args.extend_from_slice(&[1, 2, 3, 4]);
    let r = s
        .conn
        .compound_bytes(&args)
        .await
        .and_then(client_tests::Reply::decode);
    match r {
        Ok(rep) => assert!(
            rep.status == NfsStat::BADXDR || rep.status == NfsStat::OP_NOT_IN_SESSION,
            "trailing bytes → {}",
            rep.status.name()
        ),
        Err(ClientError::Rpc(RpcError::GarbageArgs)) => {}
        Err(e) => panic!("{e}"),
    }
    still_alive(&s).await;
}

#[tokio::test]
async fn unknown_operation_is_op_illegal() {
    let (_srv, s) = server_and_session().await.unwrap();
    for op in [9999u32, 1, 2, 76] {
        let rep = s
            .run(Compound::new().putrootfh().op(Op::Raw {
                opnum: NfsOp(op),
                body: vec![],
            }))
            .await
            .unwrap();
        assert_eq!(rep.status, NfsStat::OP_ILLEGAL, "opcode {op}");
        // RFC 8881 §15.2: the result of an illegal operation is tagged OP_ILLEGAL (10044).
        assert_eq!(
            rep.results.last().map(|r| r.op),
            Some(NfsOp::ILLEGAL),
            "opcode {op}"
        );
    }
    // A 4.0-only operation in a 4.1 COMPOUND is NOTSUPP (RFC 8881 §18.35… §16.2.3.1).
    let rep = s
        .run(Compound::new().op(Op::Raw {
            opnum: NfsOp::RENEW,
            body: vec![0; 8],
        }))
        .await
        .unwrap();
    assert!(
        matches!(rep.status, NfsStat::NOTSUPP | NfsStat::OP_ILLEGAL),
        "RENEW → {}",
        rep.status.name()
    );
    still_alive(&s).await;
}

#[tokio::test]
async fn rpc_level_errors_are_answered() {
    let srv = PnfsdProcess::start().unwrap();
    let conn = Connection::connect(srv.addr()).await.unwrap();
    // Wrong program, version, procedure (RFC 5531 §9).
    let e = conn.call(100_099, 1, 0, &[]).await.unwrap_err();
    assert!(matches!(e, ClientError::Rpc(RpcError::ProgUnavail)), "{e}");
    let e = conn.call(rpc::NFS_PROGRAM, 3, 0, &[]).await.unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::Rpc(RpcError::ProgMismatch { low: 4, high: 4 })
        ),
        "{e}"
    );
    let e = conn.call(rpc::NFS_PROGRAM, 4, 7, &[]).await.unwrap_err();
    assert!(matches!(e, ClientError::Rpc(RpcError::ProcUnavail)), "{e}");
    // AUTH_NONE is accepted.
    let anon = Connection::connect_with(srv.addr(), Cred::None)
        .await
        .unwrap();
    anon.null().await.unwrap();
    conn.null().await.unwrap();
}

#[tokio::test]
async fn fragmented_and_pipelined_records() {
    let srv = PnfsdProcess::start().unwrap();
    let conn = Arc::new(Connection::connect(srv.addr()).await.unwrap());
    let s = Session::establish(conn.clone(), client_tests::SessionOptions::new("frag"))
        .await
        .unwrap();
    // A COMPOUND cut into 3-byte fragments.
    let mut slot = s.take_slot().await.unwrap();
    let args = Compound {
        tag: b"frag".to_vec(),
        ops: vec![s.sequence_op(&slot, false), Op::PutRootFh, Op::GetFh],
    }
    .encode(1);
    let xid = conn.next_xid();
    let rec = rpc::encode_call(
        xid,
        rpc::NFS_PROGRAM,
        rpc::NFS_V4,
        rpc::PROC_COMPOUND,
        &conn.cred,
        &args,
    );
    let body = conn.call_record(xid, &rec, 3).await.unwrap();
    let rep = client_tests::Reply::decode(body).unwrap();
    slot.settle(&rep);
    let rep = rep.ok().unwrap();
    assert_eq!(rep.tag, b"frag");
    assert!(!rep.fh().unwrap().is_empty());
    drop(slot);
    // Many NULLs in flight at once on one connection.
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let c = conn.clone();
        tasks.push(tokio::spawn(async move { c.null().await }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    // An oversize record is refused without killing the server: a new connection works.
    let huge = Connection::connect(srv.addr()).await.unwrap();
    let mut hdr = (0x8000_0000u32 | 0x7fff_0000).to_be_bytes().to_vec();
    hdr.extend_from_slice(&[0; 64]);
    huge.send_bytes(&hdr).await.unwrap();
    let again = Connection::connect(srv.addr()).await.unwrap();
    again.null().await.unwrap();
    s.run_ok(Compound::new().putrootfh()).await.unwrap();
}

/// A request larger than the session's `ca_maxrequestsize` → NFS4ERR_REQ_TOO_BIG (RFC 8881
/// §2.10.6.4, §18.46.3), the connection kept.
#[tokio::test]
async fn request_bigger_than_the_channel_is_req_too_big() {
    let (_srv, s, root) = server_and_root().await.unwrap();
    let f = s.create_file(&root, "big", 0o644).await.unwrap();
    let max = s.created.fore.maxrequestsize as usize;
    let data = vec![7u8; max + 4096];
    let rep = s
        .run(Compound::new().putfh(&f.fh).write(
            f.stateid,
            0,
            client_tests::ops::Stable::Unstable,
            &data,
        ))
        .await
        .unwrap();
    assert_eq!(
        rep.status,
        NfsStat::REQ_TOO_BIG,
        "{} bytes with maxrequestsize {max}",
        data.len()
    );
    still_alive(&s).await;
    assert_eq!(
        s.getattr_fh(&f.fh, client_tests::attrs::basic())
            .await
            .unwrap()
            .size,
        Some(0)
    );
}
