//! NFSv4.2 operations (RFC 7862 §15): SEEK, DEALLOCATE, ALLOCATE, on a 4.2 session;
//! the same operations in a 4.1 COMPOUND are refused.

use std::sync::Arc;

use client_tests::attrs::{attr, basic, bitmap};
use client_tests::fs::server_and_root;
use client_tests::harness::pattern;
use client_tests::ops::{Op, Stable};
use client_tests::results::OpRes;
use client_tests::{Compound, Connection, NfsStat, PnfsdProcess, Session, SessionOptions, Stateid};
use pnfsd::nfs4::opcode::NfsOp;
use pnfsd::xdr::{Xdr, XdrReader, XdrWriter};

const DATA: u32 = 0;
const HOLE: u32 = 1;
const MIB: u64 = 1 << 20;

fn range_op(op: NfsOp, stateid: Stateid, offset: u64, length: u64) -> Op {
    let mut w = XdrWriter::new();
    stateid.encode(&mut w);
    w.u64(offset);
    w.u64(length);
    Op::Raw {
        opnum: op,
        body: w.buf,
    }
}

/// SEEK → (status, eof, offset).
async fn seek(
    s: &Session,
    fh: &[u8],
    stateid: Stateid,
    offset: u64,
    what: u32,
) -> (NfsStat, bool, u64) {
    let mut w = XdrWriter::new();
    stateid.encode(&mut w);
    w.u64(offset);
    w.u32(what);
    let rep = s
        .run(Compound::new().putfh(fh).op(Op::Raw {
            opnum: NfsOp::SEEK,
            body: w.buf,
        }))
        .await
        .unwrap();
    match rep.results.last() {
        Some(r) if r.status == NfsStat::OK => match &r.res {
            OpRes::Undecoded(b) => {
                let mut rd = XdrReader::new(b);
                let eof = rd.bool().unwrap();
                let off = rd.u64().unwrap();
                rd.finish().unwrap();
                (NfsStat::OK, eof, off)
            }
            x => panic!("{x:?}"),
        },
        _ => (rep.status, false, 0),
    }
}

async fn space_used(s: &Session, fh: &[u8]) -> u64 {
    s.getattr_fh(fh, bitmap(&[attr::SPACE_USED]))
        .await
        .unwrap()
        .space_used
        .unwrap()
}

#[tokio::test]
async fn seek_deallocate_allocate() {
    let srv = PnfsdProcess::start().unwrap();
    let mut o = SessionOptions::new("v42");
    o.minor = 2;
    let s = Session::establish(Arc::new(Connection::connect(srv.addr()).await.unwrap()), o)
        .await
        .unwrap();
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "sparse", 0o644).await.unwrap();
    s.write_all(&f, 0, &pattern(1, 4096), Stable::FileSync)
        .await
        .unwrap();
    s.write_all(&f, MIB, &pattern(2, 4096), Stable::FileSync)
        .await
        .unwrap();

    assert_eq!(
        seek(&s, &f.fh, f.stateid, 0, DATA).await,
        (NfsStat::OK, false, 0)
    );
    let (st, _, hole) = seek(&s, &f.fh, f.stateid, 0, HOLE).await;
    assert_eq!(st, NfsStat::OK);
    assert!((4096..MIB).contains(&hole), "first hole at {hole}");
    let (st, _, data) = seek(&s, &f.fh, f.stateid, 8192, DATA).await;
    assert_eq!((st, data), (NfsStat::OK, MIB), "next data after the hole");
    let (st, _, _) = seek(&s, &f.fh, f.stateid, 10 * MIB, DATA).await;
    assert_eq!(st, NfsStat::NXIO, "SEEK past EOF (RFC 7862 §15.11.3)");

    // DEALLOCATE punches the first block: zeros, size kept, a hole at 0 now.
    s.run_ok(
        Compound::new()
            .putfh(&f.fh)
            .op(range_op(NfsOp::DEALLOCATE, f.stateid, 0, 4096)),
    )
    .await
    .unwrap();
    assert!(s
        .read_all(&f, 0, 4096)
        .await
        .unwrap()
        .iter()
        .all(|b| *b == 0));
    assert_eq!(
        s.getattr_fh(&f.fh, basic()).await.unwrap().size,
        Some(MIB + 4096)
    );
    assert_eq!(seek(&s, &f.fh, f.stateid, 0, DATA).await.2, MIB);
    assert_eq!(s.read_all(&f, MIB, 4096).await.unwrap(), pattern(2, 4096));

    // ALLOCATE reserves blocks in the hole: space_used grows, the bytes read as zeros.
    let before = space_used(&s, &f.fh).await;
    s.run_ok(Compound::new().putfh(&f.fh).op(range_op(
        NfsOp::ALLOCATE,
        f.stateid,
        64 << 10,
        256 << 10,
    )))
    .await
    .unwrap();
    let after = space_used(&s, &f.fh).await;
    assert!(
        after >= before + (256 << 10),
        "space_used {before} → {after}"
    );
    assert!(s
        .read_all(&f, 64 << 10, 256 << 10)
        .await
        .unwrap()
        .iter()
        .all(|b| *b == 0));
}

#[tokio::test]
async fn v42_operations_are_not_in_v41() {
    let (_srv, s, root) = server_and_root().await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    for op in [NfsOp::ALLOCATE, NfsOp::DEALLOCATE] {
        let st = s
            .run(
                Compound::new()
                    .putfh(&f.fh)
                    .op(range_op(op, f.stateid, 0, 4096)),
            )
            .await
            .unwrap()
            .status;
        assert!(
            matches!(st, NfsStat::OP_ILLEGAL | NfsStat::NOTSUPP),
            "op {op} in 4.1 → {}",
            st.name()
        );
    }
}
