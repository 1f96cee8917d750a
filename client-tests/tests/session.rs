//! Session setup and use against the real pnfsd (RFC 8881 §2.10, §18.35–18.37, §18.46).

use std::sync::Arc;

use client_tests::attrs::{attr, basic, bitmap};
use client_tests::fs::server_and_session;
use client_tests::ops::{exchgid_flag, session_flag, Op};
use client_tests::{Compound, Connection, NfsStat, PnfsdProcess, Session, SessionOptions};
use pnfsd::nfs4::opcode::NfsOp;

#[tokio::test]
async fn session_setup_sequence_and_teardown() {
    let srv = PnfsdProcess::start().unwrap();
    let conn = Arc::new(Connection::connect(srv.addr()).await.unwrap());
    conn.null().await.unwrap();

    let o = SessionOptions::new("setup");
    let x = Session::exchange_id(&conn, &o).await.unwrap();
    assert_ne!(
        x.flags & exchgid_flag::USE_PNFS_MDS,
        0,
        "EXCHANGE_ID must offer the MDS role: {:#x}",
        x.flags
    );
    assert_eq!(
        x.flags & exchgid_flag::CONFIRMED_R,
        0,
        "a new client is not confirmed"
    );
    // The same owner and verifier again: an unconfirmed record may be replaced by a new
    // client id (RFC 8881 §18.35.5 case 5), so use the latest answer.
    let x = Session::exchange_id(&conn, &o).await.unwrap();

    let cs = Session::create_session(&conn, &o, x.clientid, x.sequenceid)
        .await
        .unwrap();
    assert_ne!(cs.sessionid, [0; 16]);
    assert!(
        cs.fore.maxoperations >= 2 && cs.fore.maxoperations <= o.fore.maxoperations,
        "{:?}",
        cs.fore
    );
    assert!(
        cs.fore.maxrequests >= 1 && cs.fore.maxrequests <= o.fore.maxrequests,
        "{:?}",
        cs.fore
    );
    assert!(cs.fore.maxrequestsize <= o.fore.maxrequestsize);
    assert_ne!(
        cs.flags & session_flag::CONN_BACK_CHAN,
        0,
        "backchannel on the fore connection"
    );
    // Now confirmed.
    let x3 = Session::exchange_id(&conn, &o).await.unwrap();
    assert_eq!(x3.clientid, x.clientid);
    assert_ne!(x3.flags & exchgid_flag::CONFIRMED_R, 0);

    let s = Session::establish(conn.clone(), SessionOptions::new("setup2"))
        .await
        .unwrap();
    let again = s
        .run(Compound::new().op(Op::ReclaimComplete { one_fs: false }))
        .await
        .unwrap();
    assert_eq!(again.status, NfsStat::COMPLETE_ALREADY);

    // A SEQUENCE-only COMPOUND echoes the session and slot.
    let slot = s.take_slot().await.unwrap();
    let (slotid, seqid) = (slot.slotid, slot.seqid);
    let rep = s
        .send_on(&slot, &Compound::new(), false)
        .await
        .unwrap()
        .ok()
        .unwrap();
    let seq = rep.sequence().unwrap();
    assert_eq!(seq.sessionid, s.sessionid);
    assert_eq!((seq.slotid, seq.sequenceid), (slotid, seqid));
    assert!(seq.highest_slotid < s.slot_count());
    // The backchannel on the fore connection is usable: no SEQ4_STATUS_CB_PATH_DOWN (0x1) or
    // CB_PATH_DOWN_SESSION (0x200) (RFC 8881 §18.46.3).
    assert_eq!(
        seq.status_flags & 0x201,
        0,
        "status flags {:#x}",
        seq.status_flags
    );
    drop(slot);
    eprintln!("callbacks so far: {:?}", conn.callbacks.drain());

    let sid = s.sessionid;
    s.destroy().await.unwrap();
    // The destroyed session is gone.
    let seq = client_tests::ops::SequenceArgs::uncached(sid, 0, 2, 0);
    let st = conn
        .status(&Compound::new().op(Op::Sequence(seq)))
        .await
        .unwrap();
    assert_eq!(st, NfsStat::BADSESSION);
}

#[tokio::test]
async fn ops_need_a_session_and_sequence_comes_first() {
    let srv = PnfsdProcess::start().unwrap();
    let conn = Arc::new(Connection::connect(srv.addr()).await.unwrap());
    // RFC 8881 §2.6.3.1.1.8: a non-session op without SEQUENCE → OP_NOT_IN_SESSION.
    let rep = conn
        .compound(1, &Compound::new().putrootfh().getfh())
        .await
        .unwrap();
    assert_eq!(rep.status, NfsStat::OP_NOT_IN_SESSION);
    assert!(rep.results.len() <= 1, "{:?}", rep.results);
    // A second SEQUENCE (not first) → SEQUENCE_POS on it (RFC 8881 §18.46.3).
    let s = Session::establish(conn.clone(), SessionOptions::new("pos"))
        .await
        .unwrap();
    let slot = s.take_slot().await.unwrap();
    let seq = s.sequence_op(&slot, false);
    let rep = s
        .send_on(&slot, &Compound::new().putrootfh().op(seq), false)
        .await
        .unwrap();
    assert_eq!(rep.results.len(), 3, "{:?}", rep.results);
    assert_eq!(rep.status, NfsStat::SEQUENCE_POS);
}

#[tokio::test]
async fn minor_version_0_and_3_are_mismatched() {
    let srv = PnfsdProcess::start().unwrap();
    let conn = Connection::connect(srv.addr()).await.unwrap();
    for minor in [0, 3, 100] {
        let rep = conn
            .compound(minor, &Compound::new().tag("mv").putrootfh().getfh())
            .await
            .unwrap();
        assert_eq!(rep.status, NfsStat::MINOR_VERS_MISMATCH, "minor {minor}");
        // RFC 8881 §16.2.3: no operation is run, the result array is empty; the tag echoes.
        assert!(rep.results.is_empty(), "minor {minor}: {:?}", rep.results);
        assert_eq!(rep.tag, b"mv");
    }
    // The connection is still good.
    conn.null().await.unwrap();
}

#[tokio::test]
async fn minor_version_2_session_works() {
    let srv = PnfsdProcess::start().unwrap();
    let conn = Arc::new(Connection::connect(srv.addr()).await.unwrap());
    let mut o = SessionOptions::new("v42");
    o.minor = 2;
    let s = Session::establish(conn, o).await.unwrap();
    let rep = s
        .run_ok(Compound::new().putrootfh().getattr(basic()))
        .await
        .unwrap();
    assert_eq!(
        rep.attrs().unwrap().ftype,
        Some(client_tests::attrs::ftype::DIR)
    );
}

#[tokio::test]
async fn root_attributes_a_linux_client_asks_for() {
    let (_srv, s) = server_and_session().await.unwrap();
    let mask = bitmap(&[
        attr::SUPPORTED_ATTRS,
        attr::TYPE,
        attr::FH_EXPIRE_TYPE,
        attr::CHANGE,
        attr::SIZE,
        attr::FSID,
        attr::LEASE_TIME,
        attr::FILEID,
        attr::MODE,
        attr::NUMLINKS,
        attr::FS_LAYOUT_TYPES,
        attr::LAYOUT_BLKSIZE,
    ]);
    let rep = s
        .run_ok(Compound::new().putrootfh().getattr(mask))
        .await
        .unwrap();
    let a = rep.attrs().unwrap();
    let sup = a.supported.clone().expect("supported_attrs");
    for bit in [
        attr::TYPE,
        attr::CHANGE,
        attr::SIZE,
        attr::FILEID,
        attr::MODE,
        attr::NUMLINKS,
    ] {
        assert!(sup.is_set(bit), "attribute {bit} not supported: {sup:?}");
    }
    assert_eq!(a.ftype, Some(client_tests::attrs::ftype::DIR));
    assert!(a.lease_time.unwrap_or(0) > 0);
    assert!(a.numlinks.unwrap_or(0) >= 2);
    // docs/design.md §5: the block layout is offered and layout_blksize is the block size.
    assert_eq!(a.fs_layout_types.as_deref(), Some(&[3u32][..]));
    assert_eq!(a.layout_blksize, Some(4096));
    // The GETATTR answer is in ascending attribute order and nothing more than asked.
    for b in a.mask.iter() {
        assert!(
            [0, 1, 2, 3, 4, 8, 10, 20, 33, 35, 62, 65].contains(&b),
            "attribute {b} returned but not asked"
        );
    }
    let _ = NfsOp::GETATTR;
}

/// Many COMPOUNDs in flight at once on one connection use several slots and all succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_compounds_use_the_slot_table() {
    let srv = PnfsdProcess::start().unwrap();
    let s = Arc::new(Session::connect(srv.addr()).await.unwrap());
    let root = s.lookup_path("").await.unwrap();
    let n = s.slot_count();
    assert!(n >= 1);
    let mut tasks = Vec::new();
    for i in 0..32u32 {
        let s = s.clone();
        let root = root.clone();
        tasks.push(tokio::spawn(async move {
            let name = format!("d{i}");
            let fh = s.mkdir(&root, &name, 0o755).await?;
            let a = s.getattr_fh(&fh, basic()).await?;
            Ok::<_, client_tests::ClientError>(a.ftype)
        }));
    }
    for t in tasks {
        assert_eq!(
            t.await.unwrap().unwrap(),
            Some(client_tests::attrs::ftype::DIR)
        );
    }
    let names = s.list(&root).await.unwrap();
    assert_eq!(names.len(), 32, "{names:?}");
}

/// BIND_CONN_TO_SESSION (RFC 8881 §18.34): a second connection joins the session and carries
/// its COMPOUNDs; ACCESS answers on it.
#[tokio::test]
async fn a_second_connection_binds_to_the_session() {
    let (srv, s) = server_and_session().await.unwrap();
    let conn2 = Connection::connect(srv.addr()).await.unwrap();
    let rep = conn2
        .compound(
            1,
            &Compound::new().op(Op::bind_conn(s.sessionid, 3)), // CDFC4_FORE_OR_BOTH
        )
        .await
        .unwrap()
        .ok()
        .unwrap();
    match rep.body(NfsOp::BIND_CONN_TO_SESSION).unwrap() {
        client_tests::results::OpRes::BindConnToSession {
            sessionid,
            dir,
            rdma,
        } => {
            assert_eq!(*sessionid, s.sessionid);
            assert!(
                *dir == 1 || *dir == 3,
                "CDFS4_FORE or CDFS4_BOTH, got {dir}"
            );
            assert!(!rdma);
        }
        b => panic!("{b:?}"),
    }
    let mut slot = s.take_slot().await.unwrap();
    // ACCESS4_READ | LOOKUP | MODIFY | EXTEND on the root, over the second connection.
    let rep = s
        .send_via(
            &conn2,
            &slot,
            &Compound::new().putrootfh().op(Op::Access(0x1f)),
            false,
        )
        .await
        .unwrap();
    slot.settle(&rep);
    let rep = rep.ok().unwrap();
    match rep.body(NfsOp::ACCESS).unwrap() {
        client_tests::results::OpRes::Access(supported, granted) => {
            assert_eq!(
                granted & !supported,
                0,
                "granted bits must be supported ones"
            );
            assert_ne!(granted & 0x2, 0, "root may LOOKUP in the root directory");
        }
        b => panic!("{b:?}"),
    }
    // An unknown session → BADSESSION.
    let st = conn2
        .status(&Compound::new().op(Op::bind_conn([0x77; 16], 3)))
        .await
        .unwrap();
    assert_eq!(st, NfsStat::BADSESSION);
}

/// EXCHANGE_ID and CREATE_SESSION argument checks and the CREATE_SESSION replay rule
/// (RFC 8881 §18.35.4, §18.36.4).
#[tokio::test]
async fn exchange_id_and_create_session_rules() {
    let srv = PnfsdProcess::start().unwrap();
    let conn = Connection::connect(srv.addr()).await.unwrap();
    // Flags the client may not send → INVAL: an undefined bit, and CONFIRMED_R (reply only).
    for flags in [0x0000_0008, exchgid_flag::CONFIRMED_R] {
        let mut o = SessionOptions::new("badflags");
        o.exchange_flags = flags;
        match Session::exchange_id(&conn, &o).await {
            Err(client_tests::ClientError::Nfs { status, .. }) => {
                assert_eq!(status, NfsStat::INVAL, "flags {flags:#x}")
            }
            r => panic!("flags {flags:#x}: {r:?}"),
        }
    }
    let o = SessionOptions::new("cs");
    // CREATE_SESSION for a client id nobody has → STALE_CLIENTID.
    match Session::create_session(&conn, &o, 0x1234_5678_9abc, 1).await {
        Err(client_tests::ClientError::Nfs { status, .. }) => {
            assert_eq!(status, NfsStat::STALE_CLIENTID)
        }
        r => panic!("{r:?}"),
    }
    let x = Session::exchange_id(&conn, &o).await.unwrap();
    // A sequence id ahead of the client's → SEQ_MISORDERED.
    match Session::create_session(&conn, &o, x.clientid, x.sequenceid.wrapping_add(5)).await {
        Err(client_tests::ClientError::Nfs { status, .. }) => {
            assert_eq!(status, NfsStat::SEQ_MISORDERED)
        }
        r => panic!("{r:?}"),
    }
    let first = Session::create_session(&conn, &o, x.clientid, x.sequenceid)
        .await
        .unwrap();
    // The same request again is a replay: the same session comes back, no second session.
    let replay = Session::create_session(&conn, &o, x.clientid, x.sequenceid)
        .await
        .unwrap();
    assert_eq!(replay.sessionid, first.sessionid);
    // The next sequence id makes a second session.
    let second = Session::create_session(&conn, &o, x.clientid, x.sequenceid.wrapping_add(1))
        .await
        .unwrap();
    assert_ne!(second.sessionid, first.sessionid);
}

/// Losing the connection that carries the backchannel: SEQUENCE on another connection says
/// CB_PATH_DOWN_SESSION (0x200, RFC 8881 §18.46.3) until a connection is bound for the back
/// channel again (BIND_CONN_TO_SESSION with CDFC4_BACK_OR_BOTH).
#[tokio::test]
async fn backchannel_loss_is_reported_until_rebound() {
    let (srv, s) = server_and_session().await.unwrap();
    let conn2 = Connection::connect(srv.addr()).await.unwrap();
    let bind = |dir: u32| Compound::new().op(Op::bind_conn(s.sessionid, dir));
    conn2.compound(1, &bind(1)).await.unwrap().ok().unwrap(); // CDFC4_FORE
    s.conn.close().await.unwrap();

    let flags = |rep: &client_tests::Reply| rep.sequence().map(|x| x.status_flags).unwrap_or(0);
    let mut seen = 0;
    for _ in 0..50 {
        let mut slot = s.take_slot().await.unwrap();
        let rep = s
            .send_via(&conn2, &slot, &Compound::new(), false)
            .await
            .unwrap();
        slot.settle(&rep);
        seen = flags(&rep.ok().unwrap());
        if seen & 0x200 != 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_ne!(
        seen & 0x200,
        0,
        "CB_PATH_DOWN_SESSION after the back channel's connection closed: {seen:#x}"
    );

    let rep = conn2.compound(1, &bind(7)).await.unwrap().ok().unwrap(); // CDFC4_BACK_OR_BOTH
    match rep.body(NfsOp::BIND_CONN_TO_SESSION).unwrap() {
        client_tests::results::OpRes::BindConnToSession { dir, .. } => {
            assert!(
                *dir == 2 || *dir == 3,
                "CDFS4_BACK or CDFS4_BOTH, got {dir}"
            )
        }
        b => panic!("{b:?}"),
    }
    let mut slot = s.take_slot().await.unwrap();
    let rep = s
        .send_via(&conn2, &slot, &Compound::new(), false)
        .await
        .unwrap();
    slot.settle(&rep);
    let now = flags(&rep.ok().unwrap());
    assert_eq!(now & 0x201, 0, "back channel rebound, flags {now:#x}");
}

/// Many connections at once, each with its own client and session (the server must
/// take many concurrent connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_clients_at_once() {
    let srv = PnfsdProcess::start().unwrap();
    let addr = srv.addr();
    let mut tasks = Vec::new();
    for i in 0..64 {
        tasks.push(tokio::spawn(async move {
            let s = Session::connect_with(addr, SessionOptions::new(&format!("many{i}"))).await?;
            let root = s.lookup_path("").await?;
            s.mkdir(&root, &format!("c{i}"), 0o755).await?;
            Ok::<_, client_tests::ClientError>(s.clientid)
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        assert!(
            ids.insert(t.await.unwrap().unwrap()),
            "client ids must differ"
        );
    }
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    assert_eq!(s.list(&root).await.unwrap().len(), 64);
}
