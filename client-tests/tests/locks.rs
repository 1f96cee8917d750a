//! Byte-range locks between two clients (RFC 8881 §9, §18.10–18.12): LOCK, LOCKT with the
//! LOCK4denied answer naming the holder, LOCKU, and I/O with a lock stateid.

use client_tests::ops::{lock_type, Locker, Op, Stable};
use client_tests::results::{LockDenied, OpRes};
use client_tests::{Compound, NfsStat, PnfsdProcess, Reply, Session, Stateid};
use pnfsd::nfs4::opcode::NfsOp;

fn denied(rep: &Reply, op: NfsOp) -> LockDenied {
    assert_eq!(rep.status, NfsStat::DENIED, "{:?}", rep.results.last());
    match &rep.results.last().unwrap().res {
        OpRes::Denied(d) if rep.results.last().unwrap().op == op => d.clone(),
        r => panic!("no LOCK4denied: {r:?}"),
    }
}

fn lock_stateid(rep: &Reply) -> Stateid {
    match rep.body(NfsOp::LOCK).unwrap() {
        OpRes::Lock(s) => *s,
        b => panic!("{b:?}"),
    }
}

#[tokio::test]
async fn two_clients_lock_test_and_unlock() {
    let srv = PnfsdProcess::start().unwrap();
    let a = Session::connect(srv.addr()).await.unwrap();
    let b = Session::connect(srv.addr()).await.unwrap();
    let root = a.lookup_path("").await.unwrap();
    let fa = a.create_file(&root, "locked", 0o666).await.unwrap();
    let fb = b.open_fh(&fa.fh).await.unwrap();
    let new_owner = |s: &Session, open: Stateid, owner: &[u8]| Locker::New {
        open_seqid: 0,
        open_stateid: open,
        lock_seqid: 0,
        clientid: s.clientid,
        owner: owner.to_vec(),
    };

    // a write-locks [0, 100).
    let rep = a
        .run_ok(Compound::new().putfh(&fa.fh).op(Op::Lock {
            locktype: lock_type::WRITE,
            reclaim: false,
            offset: 0,
            length: 100,
            locker: new_owner(&a, fa.stateid, b"lo-a"),
        }))
        .await
        .unwrap();
    let la = lock_stateid(&rep);

    // b tests [50, 60): denied, and told who holds it.
    let rep = b
        .run(Compound::new().putfh(&fb.fh).op(Op::LockT {
            locktype: lock_type::WRITE,
            offset: 50,
            length: 10,
            clientid: b.clientid,
            owner: b"lo-b".to_vec(),
        }))
        .await
        .unwrap();
    let d = denied(&rep, NfsOp::LOCKT);
    assert_eq!((d.offset, d.length, d.locktype), (0, 100, lock_type::WRITE));
    assert_eq!((d.clientid, d.owner.as_slice()), (a.clientid, &b"lo-a"[..]));

    // b's read lock overlapping by one byte is denied; the next byte on is free.
    let rep = b
        .run(Compound::new().putfh(&fb.fh).op(Op::Lock {
            locktype: lock_type::READ,
            reclaim: false,
            offset: 99,
            length: 1,
            locker: new_owner(&b, fb.stateid, b"lo-b"),
        }))
        .await
        .unwrap();
    denied(&rep, NfsOp::LOCK);
    let rep = b
        .run_ok(Compound::new().putfh(&fb.fh).op(Op::Lock {
            locktype: lock_type::READ,
            reclaim: false,
            offset: 100,
            length: 10,
            locker: new_owner(&b, fb.stateid, b"lo-b"),
        }))
        .await
        .unwrap();
    let lb = lock_stateid(&rep);

    // a unlocks; b takes [0, 50) for writing with its existing lock owner and writes there
    // with the lock stateid.
    a.run_ok(Compound::new().putfh(&fa.fh).op(Op::LockU {
        locktype: lock_type::WRITE,
        seqid: 0,
        stateid: la,
        offset: 0,
        length: 100,
    }))
    .await
    .unwrap();
    let rep = b
        .run_ok(Compound::new().putfh(&fb.fh).op(Op::Lock {
            locktype: lock_type::WRITE,
            reclaim: false,
            offset: 0,
            length: 50,
            locker: Locker::Existing {
                lock_stateid: lb,
                lock_seqid: 0,
            },
        }))
        .await
        .unwrap();
    let lb2 = lock_stateid(&rep);
    assert_eq!(
        lb2.other, lb.other,
        "the same lock owner keeps its lock stateid"
    );
    assert!(lb2.seqid > lb.seqid, "and its seqid moves on");
    b.run_ok(
        Compound::new()
            .putfh(&fb.fh)
            .write(lb2, 0, Stable::FileSync, b"locked write"),
    )
    .await
    .unwrap();
    // Now a is the one denied.
    let rep = a
        .run(Compound::new().putfh(&fa.fh).op(Op::LockT {
            locktype: lock_type::READ,
            offset: 10,
            length: 1,
            clientid: a.clientid,
            owner: b"lo-a".to_vec(),
        }))
        .await
        .unwrap();
    let d = denied(&rep, NfsOp::LOCKT);
    assert_eq!(d.clientid, b.clientid);
    // CLOSE with locks held → LOCKS_HELD (RFC 8881 §18.2.4); after LOCKU it closes.
    let st = b
        .run(Compound::new().putfh(&fb.fh).close(fb.stateid))
        .await
        .unwrap()
        .status;
    assert_eq!(st, NfsStat::LOCKS_HELD, "CLOSE with locks → {}", st.name());
    // Each LOCKU answers the lock stateid with its seqid moved on; the next one uses that.
    let mut sid = lb2;
    for (off, len) in [(0u64, 50u64), (100, 10)] {
        let rep = b
            .run_ok(Compound::new().putfh(&fb.fh).op(Op::LockU {
                locktype: lock_type::READ,
                seqid: 0,
                stateid: sid,
                offset: off,
                length: len,
            }))
            .await
            .unwrap();
        let next = match rep.body(NfsOp::LOCKU).unwrap() {
            OpRes::Lock(s) => *s,
            b => panic!("{b:?}"),
        };
        assert_eq!(next.other, sid.other);
        assert!(next.seqid > sid.seqid);
        sid = next;
    }
    b.close_file(&fb).await.unwrap();
}
