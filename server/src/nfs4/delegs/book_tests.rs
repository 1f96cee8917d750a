//! The count of write delegations held, which lets GETATTR skip the state lock while it is
//! zero (`StateManager::write_deleg_holder`): after every path that creates, revokes or
//! drops a delegation it equals a walk of every state (harness in state/tests.rs).
//!
//! Each step below checks the kept counts against the walk (`held`), so a path that forgets
//! to count a delegation in or out fails here by name; debug test builds also check after
//! every state change of every test (`StateManager::with`).

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use crate::nfs4::state::tests::{cs_req, env, env_with, exid, mount, seq, Env, MemRecords};
use crate::nfs4::state::tests_files::open;
use crate::nfs4::state::*;
use crate::nfs4::status::NfsStat;
use crate::store::Ino;

/// (delegations held, write delegations held), once checked against the walk.
fn held(e: &Env) -> (usize, usize) {
    let walk = e.sm.lock().deleg_counts_by_walk();
    e.sm.check_deleg_counts();
    assert_eq!(e.sm.write_delegations_held(), walk.1);
    walk
}

fn at(e: &Env, t: u64) {
    e.clock.0.store(t, Ordering::SeqCst);
}

/// A grant counts in, DELEGRETURN counts out; read delegations are not write ones. The
/// GETATTR check finds the holder only for another client.
#[test]
fn a_grant_counts_in_and_delegreturn_counts_out() {
    let e = env();
    let (a, _) = mount(&e, b"a");
    let (b, _) = mount(&e, b"b");
    assert_eq!(held(&e), (0, 0));
    open(&e, a, b"oa", 10, 3, 0).unwrap();
    let w = e.sm.grant_deleg(a, Ino(10), true).unwrap();
    assert_eq!(held(&e), (1, 1));
    open(&e, a, b"oa", 11, 1, 0).unwrap();
    let r = e.sm.grant_deleg(a, Ino(11), false).unwrap();
    assert_eq!(held(&e), (2, 1));
    assert_eq!(
        e.sm.write_deleg_holder(b, Ino(10)).map(|h| h.stateid),
        Some(w)
    );
    assert_eq!(
        e.sm.write_deleg_holder(a, Ino(10)),
        None,
        "the holder itself"
    );
    assert_eq!(
        e.sm.write_deleg_holder(b, Ino(11)),
        None,
        "a read delegation"
    );
    // A refused grant counts nothing.
    assert!(e.sm.grant_deleg(b, Ino(10), true).is_err());
    assert_eq!(held(&e), (2, 1));
    e.sm.delegreturn(a, &w, Ino(10)).unwrap();
    assert_eq!(held(&e), (1, 0));
    assert_eq!(e.sm.write_deleg_holder(b, Ino(10)), None);
    e.sm.delegreturn(a, &r, Ino(11)).unwrap();
    assert_eq!(held(&e), (0, 0));
}

/// A recall left unanswered for a lease revokes the delegation (the tick, or the GETATTR
/// check itself): counted out once, and FREE_STATEID of the revoked stateid counts nothing
/// more. The write delegation of a fenced client (`revoke`, ADMIN_REVOKED) too.
#[test]
fn a_revocation_counts_out_once() {
    let e = env();
    let (a, sa) = mount(&e, b"a");
    let (b, sb) = mount(&e, b"b");
    for ino in [10, 11, 12] {
        open(&e, a, b"oa", ino, 3, 0).unwrap();
    }
    let d10 = e.sm.grant_deleg(a, Ino(10), true).unwrap();
    let d11 = e.sm.grant_deleg(a, Ino(11), true).unwrap();
    let d12 = e.sm.grant_deleg(a, Ino(12), true).unwrap();
    assert_eq!(held(&e), (3, 3));
    at(&e, 5);
    assert!(e.sm.deleg_conflicts(b, Ino(10), false)[0].send);
    assert!(e.sm.deleg_conflicts(b, Ino(11), false)[0].send);
    at(&e, 60);
    e.sm.sequence(&seq(sa, 0, 1, 1)).unwrap();
    e.sm.sequence(&seq(sb, 0, 1, 1)).unwrap();
    at(&e, 95);
    // The tick revokes 10; the GETATTR check revokes 11 itself (a lease after its recall).
    let h = e.sm.write_deleg_holder(b, Ino(11));
    assert_eq!(h, None, "a lease-old recall is not asked");
    assert_eq!(e.sm.test_stateid(a, &d11), NfsStat::DELEG_REVOKED);
    assert_eq!(held(&e), (2, 2));
    e.sm.tick();
    assert_eq!(e.sm.test_stateid(a, &d10), NfsStat::DELEG_REVOKED);
    assert_eq!(held(&e), (1, 1));
    e.sm.free_stateid(a, &d10).unwrap();
    e.sm.free_stateid(a, &d11).unwrap();
    assert_eq!(held(&e), (1, 1));
    e.sm.revoke(&d12);
    assert_eq!(e.sm.test_stateid(a, &d12), NfsStat::ADMIN_REVOKED);
    assert_eq!(held(&e), (0, 0));
    assert_eq!(e.sm.write_deleg_holder(b, Ino(12)), None);
}

/// A courtesy holder in another client's way loses its state (revoked EXPIRED): by a
/// conflicting OPEN's recall check, or by the GETATTR check. Its client expiring for good
/// (lease and courtesy time over) drops what is left; DESTROY_CLIENTID drops all of a
/// client's delegations.
#[test]
fn client_expiry_and_destroy_clientid_count_out() {
    let e = env();
    let (a, _) = mount(&e, b"a");
    let (b, sb) = mount(&e, b"b");
    for ino in [10, 11] {
        open(&e, a, b"oa", ino, 3, 0).unwrap();
        e.sm.grant_deleg(a, Ino(ino), true).unwrap();
    }
    assert_eq!(held(&e), (2, 2));
    // a goes quiet past its lease: a courtesy client, still holding both.
    at(&e, 100);
    e.sm.sequence(&seq(sb, 0, 1, 1)).unwrap();
    e.sm.tick();
    assert_eq!(held(&e), (2, 2));
    // b's GETATTR finds a courtesy holder in its way: all of a's state is revoked.
    assert_eq!(e.sm.write_deleg_holder(b, Ino(10)), None);
    assert_eq!(held(&e), (0, 0));

    // A courtesy client whose time runs out goes with its delegations.
    let (c, _) = mount(&e, b"c");
    open(&e, c, b"oc", 12, 3, 0).unwrap();
    e.sm.grant_deleg(c, Ino(12), true).unwrap();
    assert_eq!(held(&e), (1, 1));
    at(&e, 100 + 91 + COURTESY_SECONDS);
    e.sm.tick();
    assert_eq!(e.sm.deleg_of(c, Ino(12)), None);
    assert_eq!(held(&e), (0, 0));

    // DESTROY_CLIENTID (its session destroyed first) drops its delegations.
    let (d, sd) = mount(&e, b"d");
    for ino in [13, 14] {
        open(&e, d, b"od", ino, 3, 0).unwrap();
        e.sm.grant_deleg(d, Ino(ino), ino == 13).unwrap();
    }
    assert_eq!(held(&e), (2, 1));
    e.sm.destroy_session(&sd, true, 1).unwrap();
    e.sm.destroy_clientid(d).unwrap();
    assert_eq!(held(&e), (0, 0));
}

/// A client that comes back as a new incarnation (EXCHANGE_ID with a new verifier, then
/// CREATE_SESSION) replaces the old one, whose delegations go with it.
#[test]
fn a_new_incarnation_counts_out_the_old_ones() {
    let e = env();
    let (a, _) = mount(&e, b"a");
    open(&e, a, b"oa", 10, 3, 0).unwrap();
    e.sm.grant_deleg(a, Ino(10), true).unwrap();
    assert_eq!(held(&e), (1, 1));
    let r = e.sm.exchange_id(&exid(b"a", 2, 0, 0)).unwrap();
    e.sm.create_session(cs_req(r.clientid, r.sequenceid, 0))
        .unwrap();
    assert_eq!(e.sm.deleg_of(a, Ino(10)), None);
    assert_eq!(held(&e), (0, 0));
}

/// Reclaims after a restart (OPEN CLAIM_PREVIOUS) count in, those granted already
/// recalled too (held until returned or revoked); a second reclaim of the same file
/// counts nothing.
#[test]
fn reclaims_after_a_restart_count_in() {
    let records = Arc::new(MemRecords::default());
    let e1 = env_with(records.clone(), 1);
    mount(&e1, b"a");
    let e = env_with(records, 2);
    let (a, sa) = mount(&e, b"a");
    let (w, recall) = e.sm.reclaim_deleg(a, Ino(10), true, false);
    assert!(!recall);
    assert_eq!(e.sm.reclaim_deleg(a, Ino(10), true, false), (w, false));
    let (g, recall) = e.sm.reclaim_deleg(a, Ino(11), true, true);
    assert!(recall, "give_back");
    assert_eq!(held(&e), (2, 2));
    e.sm.sequence(&seq(sa, 0, 1, 1)).unwrap();
    at(&e, 90);
    e.sm.tick();
    assert_eq!(e.sm.test_stateid(a, &g), NfsStat::DELEG_REVOKED);
    assert_eq!(e.sm.test_stateid(a, &w), NfsStat::OK);
    assert_eq!(held(&e), (1, 1));
}

/// While no write delegation is held, the GETATTR check answers without the state lock:
/// it returns while another thread holds the lock.
#[test]
fn the_getattr_check_takes_no_lock_while_no_write_delegation_is_held() {
    let e = Arc::new(env());
    let (a, _) = mount(&e, b"a");
    open(&e, a, b"oa", 10, 1, 0).unwrap();
    e.sm.grant_deleg(a, Ino(10), false).unwrap();
    let (tx, rx) = mpsc::channel();
    let guard = e.sm.lock();
    let e2 = e.clone();
    let t = std::thread::spawn(move || {
        tx.send(e2.sm.write_deleg_holder(a + 1, Ino(10))).unwrap();
    });
    let got = rx.recv_timeout(Duration::from_secs(10));
    drop(guard);
    t.join().unwrap();
    assert_eq!(got, Ok(None), "the check waited for the lock");
}
