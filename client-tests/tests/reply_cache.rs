//! The session reply cache (RFC 8881 §2.10.6.1): a retry on the same slot and sequence id is
//! answered from the cache without running the operations again; a different request with the
//! same slot and sequence id is a false retry; a sequence id out of step is misordered.

use client_tests::attrs::basic;
use client_tests::fs::{server_and_root, server_and_session};
use client_tests::ops::{Op, SequenceArgs};
use client_tests::{Compound, NfsStat};

#[tokio::test]
async fn retry_is_answered_from_the_cache_with_the_same_bytes() {
    let (_srv, s, root) = server_and_root().await.unwrap();

    let mut slot = s.take_slot().await.unwrap();
    let c = Compound::new()
        .putfh(&root)
        .mkdir("once", 0o755)
        .getfh()
        .getattr(basic());
    let first = s.send_on(&slot, &c, true).await.unwrap().ok().unwrap();
    // Running the CREATE again would fail with EXIST: the same bytes prove it was not re-run.
    let retry = s.send_on(&slot, &c, true).await.unwrap();
    assert_eq!(
        retry.status,
        NfsStat::OK,
        "retry was re-executed: {:?}",
        retry.first_error()
    );
    assert!(
        retry.raw == first.raw,
        "a retry must get the cached reply byte for byte"
    );
    // And a third time, still the cache.
    let again = s.send_on(&slot, &c, true).await.unwrap();
    assert!(again.raw == first.raw);

    // A different request on the same slot and seqid is a false retry (§2.10.6.1.3.1).
    let other = Compound::new().putfh(&root).mkdir("other", 0o755);
    let fr = s.send_on(&slot, &other, true).await.unwrap();
    assert_eq!(fr.status, NfsStat::SEQ_FALSE_RETRY);
    assert_eq!(
        fr.results.len(),
        1,
        "only SEQUENCE is answered: {:?}",
        fr.results
    );
    let rep = s
        .run(Compound::new().putfh(&root).lookup("other"))
        .await
        .unwrap();
    assert_eq!(rep.status, NfsStat::NOENT, "a false retry must not run");

    // Skipping a sequence id is misordered; the next one works.
    slot.advance();
    slot.advance();
    let mis = s
        .send_on(&slot, &Compound::new().putrootfh(), false)
        .await
        .unwrap();
    assert_eq!(mis.status, NfsStat::SEQ_MISORDERED);
    slot.seqid -= 1;
    s.send_on(&slot, &Compound::new().putrootfh(), false)
        .await
        .unwrap()
        .ok()
        .unwrap();
    slot.advance();
    drop(slot);

    // The directory exists exactly once.
    assert_eq!(s.list(&root).await.unwrap(), vec!["once"]);
}

#[tokio::test]
async fn retry_of_an_uncached_reply() {
    let (_srv, s, root) = server_and_root().await.unwrap();
    let slot = s.take_slot().await.unwrap();
    let c = Compound::new().putfh(&root).mkdir("nc", 0o755);
    let first = s.send_on(&slot, &c, false).await.unwrap().ok().unwrap();
    // Not asked to cache: the server answers from its cache anyway, or RETRY_UNCACHED_REP;
    // it never runs the CREATE twice (that would be EXIST).
    let retry = s.send_on(&slot, &c, false).await.unwrap();
    assert!(
        retry.raw == first.raw || retry.status == NfsStat::RETRY_UNCACHED_REP,
        "uncached retry answered {}",
        retry.status.name()
    );
}

#[tokio::test]
async fn slot_and_session_errors() {
    let (_srv, s) = server_and_session().await.unwrap();
    let n = s.slot_count();
    let seq = |sessionid: [u8; 16], slotid: u32, sequenceid: u32, highest: u32| {
        Compound::new().op(Op::Sequence(SequenceArgs::uncached(
            sessionid, slotid, sequenceid, highest,
        )))
    };
    // A slot beyond the table → BADSLOT (§18.46.3).
    let st = s.conn.status(&seq(s.sessionid, n, 1, n)).await.unwrap();
    assert_eq!(st, NfsStat::BADSLOT);
    // An unknown session → BADSESSION.
    let st = s.conn.status(&seq([0xab; 16], 0, 1, 0)).await.unwrap();
    assert_eq!(st, NfsStat::BADSESSION);
    // A fresh slot starts at seqid 1: 5 is misordered.
    let slot = s.take_slot().await.unwrap();
    let misordered = seq(s.sessionid, slot.slotid, slot.seqid + 4, n - 1);
    let st = s.conn.status(&misordered).await.unwrap();
    assert_eq!(st, NfsStat::SEQ_MISORDERED);
}

/// A client whose connection broke resends on a new connection (bound to the session): the
/// retry is still answered from the reply cache (RFC 8881 §2.10.6.1, §2.10.6.2).
#[tokio::test]
async fn retry_on_a_new_connection_after_the_old_one_broke() {
    let (srv, s, root) = server_and_root().await.unwrap();
    let slot = s.take_slot().await.unwrap();
    let c = Compound::new().putfh(&root).mkdir("across", 0o755).getfh();
    let first = s.send_on(&slot, &c, true).await.unwrap().ok().unwrap();
    s.conn.close().await.unwrap();

    let conn2 = client_tests::Connection::connect(srv.addr()).await.unwrap();
    conn2
        .compound(1, &Compound::new().op(Op::bind_conn(s.sessionid, 3)))
        .await
        .unwrap()
        .ok()
        .unwrap();
    let retry = s.send_via(&conn2, &slot, &c, true).await.unwrap();
    assert_eq!(
        retry.status,
        NfsStat::OK,
        "retry re-executed: {:?}",
        retry.first_error()
    );
    assert!(retry.raw == first.raw, "the cached reply, byte for byte");
}
