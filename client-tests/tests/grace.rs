//! The grace period after a restart (RFC 8881 §8.4.2, §18.51): a client that held an open
//! reclaims it with OPEN(CLAIM_PREVIOUS) before RECLAIM_COMPLETE; a new client's OPEN waits
//! (NFS4ERR_GRACE) until every previous client has completed its reclaim.

use client_tests::ops::{share, OpenClaim, Stable};
use client_tests::{Compound, NfsStat, PnfsdProcess, ServerOptions, Session};

#[tokio::test]
async fn open_is_reclaimed_after_a_crash_and_grace_ends_on_reclaim_complete() {
    // A long grace period, so only RECLAIM_COMPLETE can end it within the test.
    let mut srv = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some("grace_seconds = 300\n".into()),
        ..Default::default()
    })
    .unwrap();
    let a = Session::connect(srv.addr()).await.unwrap();
    let opts = a.options.clone();
    let root = a.lookup_path("").await.unwrap();
    let f = a.create_file(&root, "held", 0o644).await.unwrap();
    a.write_all(&f, 0, b"before", Stable::FileSync)
        .await
        .unwrap();
    drop(a);
    srv.kill().unwrap();
    srv.restart().unwrap();

    // The same client comes back without RECLAIM_COMPLETE yet.
    let mut o = opts.clone();
    o.reclaim_complete = false;
    let a = Session::connect_with(srv.addr(), o).await.unwrap();
    // A new client meanwhile: its OPEN must wait for the grace period.
    let b = Session::connect(srv.addr()).await.unwrap();
    let args = b.open_args(share::ACCESS_READ, None, OpenClaim::Fh);
    let st = b
        .run(Compound::new().putfh(&f.fh).open(args.clone()))
        .await
        .unwrap()
        .status;
    assert_eq!(st, NfsStat::GRACE, "non-reclaim OPEN during grace");

    // Reclaim: OPEN(CLAIM_PREVIOUS) on the file handle, delegation type NONE.
    let rargs = a.open_args(share::ACCESS_BOTH, None, OpenClaim::Previous(0));
    let rep = a
        .run_ok(Compound::new().putfh(&f.fh).open(rargs.clone()))
        .await
        .unwrap();
    let reclaimed = rep.open().unwrap().stateid;
    a.run_ok(Compound::new().op(client_tests::ops::Op::ReclaimComplete { one_fs: false }))
        .await
        .unwrap();
    // The reclaimed stateid writes.
    let fa = client_tests::fs::OpenFile {
        fh: f.fh.clone(),
        stateid: reclaimed,
    };
    a.write_all(&fa, 6, b" after", Stable::FileSync)
        .await
        .unwrap();
    // After RECLAIM_COMPLETE a reclaim is refused (NO_GRACE), and the grace is over for b.
    let st = a
        .run(Compound::new().putfh(&f.fh).open(rargs))
        .await
        .unwrap()
        .status;
    assert_eq!(st, NfsStat::NO_GRACE, "reclaim after RECLAIM_COMPLETE");
    let rep = b
        .run(Compound::new().putfh(&f.fh).open(args))
        .await
        .unwrap();
    assert_eq!(
        rep.status,
        NfsStat::OK,
        "OPEN after every previous client completed its reclaim"
    );
    let fb = client_tests::fs::OpenFile {
        fh: f.fh.clone(),
        stateid: rep.open().unwrap().stateid,
    };
    assert_eq!(b.read_all(&fb, 0, 100).await.unwrap(), b"before after");
}
