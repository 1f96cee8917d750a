//! Leases (RFC 8881 §8.3): SEQUENCE renews; a client that stops renewing keeps its state as a
//! courtesy client until someone conflicts with it, and then loses it. Sleeps a few lease
//! periods (lease 2 s): lease expiry cannot be shown without letting time pass.

use std::time::Duration;

use client_tests::ops::{share, OpenClaim};
use client_tests::{Compound, NfsStat, PnfsdProcess, ServerOptions, Session};

const DENY_WRITE: u32 = 2;

#[tokio::test]
async fn renewal_keeps_state_and_an_expired_client_yields_to_a_conflict() {
    let srv = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some("lease_seconds = 2\ngrace_seconds = 2\n".into()),
        ..Default::default()
    })
    .unwrap();
    let a = Session::connect(srv.addr()).await.unwrap();
    let b = Session::connect(srv.addr()).await.unwrap();
    let root = a.lookup_path("").await.unwrap();
    let args = a.create_args("x");
    let rep = a
        .run_ok(Compound::new().putfh(&root).open(args).getfh())
        .await
        .unwrap();
    let (a_fh, a_open) = (rep.fh().unwrap(), rep.open().unwrap().stateid);
    let mut deny = b.open_args(share::ACCESS_READ, None, OpenClaim::Null(b"x".to_vec()));
    deny.share_deny = DENY_WRITE;
    let st = b
        .run(Compound::new().putfh(&root).open(deny.clone()))
        .await
        .unwrap()
        .status;
    assert_eq!(st, NfsStat::SHARE_DENIED, "a writer holds x open");

    // a renews with SEQUENCE for two lease periods: its open still blocks b. (b renews too:
    // a client that holds no state goes at lease end, docs/robustness.md.)
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        a.run_ok(Compound::new()).await.unwrap();
        b.run_ok(Compound::new()).await.unwrap();
    }
    let st = b
        .run(Compound::new().putfh(&root).open(deny.clone()))
        .await
        .unwrap()
        .status;
    assert_eq!(st, NfsStat::SHARE_DENIED, "a renewed its lease");

    // a goes quiet past its lease: b's conflicting OPEN wins (DELAY while a is expired is
    // allowed, so retry that).
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        b.run_ok(Compound::new()).await.unwrap();
    }
    let mut st = NfsStat::DELAY;
    for _ in 0..50 {
        st = b
            .run(Compound::new().putfh(&root).open(deny.clone()))
            .await
            .unwrap()
            .status;
        if st != NfsStat::DELAY {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(st, NfsStat::OK, "OPEN against a client whose lease expired");
    // a's state is gone. Either the whole client went (its session fails), or, on a courteous
    // server that keeps the session, SEQUENCE says state was revoked
    // (SEQ4_STATUS_EXPIRED_ALL_STATE_REVOKED 0x8 / _SOME_ 0x10) and the open stateid is EXPIRED.
    let rep = a.run(Compound::new()).await.unwrap();
    if rep.status == NfsStat::OK {
        let flags = rep.sequence().unwrap().status_flags;
        assert_ne!(
            flags & 0x18,
            0,
            "SEQUENCE must report the revoked state, flags {flags:#x}"
        );
        let st = a
            .run(Compound::new().putfh(&a_fh).read(a_open, 0, 10))
            .await
            .unwrap()
            .status;
        assert!(
            matches!(
                st,
                NfsStat::EXPIRED | NfsStat::BAD_STATEID | NfsStat::ADMIN_REVOKED
            ),
            "READ with a revoked open stateid → {}",
            st.name()
        );
    } else {
        assert!(
            matches!(
                rep.status,
                NfsStat::BADSESSION | NfsStat::DEADSESSION | NfsStat::STALE_CLIENTID
            ),
            "SEQUENCE of an expired client → {}",
            rep.status.name()
        );
    }
}
