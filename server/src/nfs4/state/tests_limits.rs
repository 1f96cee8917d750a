//! Client state bounds (docs/robustness.md "Client state bounds"): the client and
//! session caps, the reply-cache memory budget at CREATE_SESSION, lease expiry of clients
//! without state, and the bounds on courtesy clients.

use std::sync::atomic::Ordering;

use super::session::slot_charge;
use super::tests::{attrs, cs_req, env, exid, mount, seq, Env};
use super::tests_files::open;
use super::*;

fn limited(f: impl FnOnce(&mut ClientLimits)) -> Env {
    let e = env();
    let mut l = ClientLimits::default();
    f(&mut l);
    e.sm.set_limits(l);
    e
}

fn at(e: &Env, t: u64) {
    e.clock.0.store(t, Ordering::SeqCst);
    e.sm.tick();
}

#[test]
fn clients_over_the_cap_get_resource() {
    let e = limited(|l| l.max_clients = 3);
    for o in [&b"a"[..], b"b", b"c"] {
        e.sm.exchange_id(&exid(o, 1, 0, 0)).unwrap();
    }
    assert_eq!(
        e.sm.exchange_id(&exid(b"d", 1, 0, 0)),
        Err(NfsStat::RESOURCE)
    );
    // The same client again, or its replacement record, is no new client.
    assert!(e.sm.exchange_id(&exid(b"a", 1, 0, 0)).is_ok());
    assert!(e.sm.exchange_id(&exid(b"b", 2, 0, 0)).is_ok());
    assert_eq!(e.sm.client_state_usage().clients, 3);
}

#[test]
fn at_the_client_cap_a_courtesy_client_makes_room_oldest_first() {
    let e = limited(|l| l.max_clients = 2);
    let (a, _) = mount(&e, b"a");
    let oa = open(&e, a, b"o", 3, 1, 0).unwrap();
    e.clock.0.store(10, Ordering::SeqCst);
    let (b, _) = mount(&e, b"b");
    let ob = open(&e, b, b"o", 4, 1, 0).unwrap();
    // Both leases run out; both hold state: courtesy clients.
    at(&e, 200);
    assert_eq!(e.sm.client_state_usage().courtesy_clients, 2);
    e.sm.exchange_id(&exid(b"c", 1, 0, 0)).unwrap();
    // a expired first and went; b stays.
    assert_eq!(e.sm.test_stateid(a, &oa), NfsStat::BAD_STATEID);
    assert_eq!(e.sm.test_stateid(b, &ob), NfsStat::OK);
    // Then b makes room; with no courtesy client left to go, the cap holds.
    e.sm.exchange_id(&exid(b"d", 1, 0, 0)).unwrap();
    assert_eq!(e.sm.test_stateid(b, &ob), NfsStat::BAD_STATEID);
    assert_eq!(
        e.sm.exchange_id(&exid(b"e", 1, 0, 0)),
        Err(NfsStat::RESOURCE)
    );
}

#[test]
fn sessions_over_the_per_client_cap_get_resource() {
    let e = limited(|l| l.max_sessions_per_client = 2);
    let r = e.sm.exchange_id(&exid(b"a", 1, 0, 0)).unwrap();
    let s1 = e.sm.create_session(cs_req(r.clientid, 1, 0)).unwrap();
    e.sm.create_session(cs_req(r.clientid, 2, 0)).unwrap();
    assert_eq!(
        e.sm.create_session(cs_req(r.clientid, 3, 0)).map(|_| ()),
        Err(NfsStat::RESOURCE)
    );
    // A replay of the last CREATE_SESSION is no new session.
    assert!(e.sm.create_session(cs_req(r.clientid, 2, 0)).is_ok());
    e.sm.destroy_session(&s1.sessionid, false, 1).unwrap();
    assert!(e.sm.create_session(cs_req(r.clientid, 3, 0)).is_ok());
    assert_eq!(e.sm.client_state_usage().sessions, 2);
}

#[test]
fn the_memory_budget_shrinks_the_negotiated_slots_and_cache() {
    // attrs(): 8 slots of 8 KiB asked for. Room for 5 such slots and a bit.
    let per = slot_charge(attrs().maxresponsesize_cached);
    let e = limited(|l| l.max_client_memory = 5 * per + 3000);
    let r = e.sm.exchange_id(&exid(b"a", 1, 0, 0)).unwrap();
    let s = e.sm.create_session(cs_req(r.clientid, 1, 0)).unwrap();
    assert_eq!(s.fore.maxrequests, 5, "{:?}", s.fore);
    assert_eq!(s.fore.maxresponsesize_cached, 8192);
    // 3,000 bytes left: one slot with a smaller cache.
    let s2 = e.sm.create_session(cs_req(r.clientid, 2, 0)).unwrap();
    assert_eq!(s2.fore.maxrequests, 1);
    assert!(s2.fore.maxresponsesize_cached < 3000, "{:?}", s2.fore);
    let u = e.sm.client_state_usage();
    assert!(u.reserved_bytes <= u.max_client_memory, "{u:?}");
    // Nothing left: DELAY (a retry succeeds once a session goes).
    assert_eq!(
        e.sm.create_session(cs_req(r.clientid, 3, 0)).map(|_| ()),
        Err(NfsStat::DELAY)
    );
    e.sm.destroy_session(&s.sessionid, false, 1).unwrap();
    let s3 = e.sm.create_session(cs_req(r.clientid, 3, 0)).unwrap();
    assert_eq!(s3.fore.maxrequests, 5);
}

#[test]
fn memory_short_sends_courtesy_clients_first() {
    let per = slot_charge(attrs().maxresponsesize_cached);
    let e = limited(|l| l.max_client_memory = 8 * per);
    let (a, _) = mount(&e, b"a");
    let oa = open(&e, a, b"o", 3, 1, 0).unwrap();
    at(&e, 100);
    // a is a courtesy client holding the whole budget; b's session takes its place.
    let r = e.sm.exchange_id(&exid(b"b", 1, 0, 0)).unwrap();
    let s = e.sm.create_session(cs_req(r.clientid, 1, 0)).unwrap();
    assert_eq!(s.fore.maxrequests, 8);
    assert_eq!(e.sm.test_stateid(a, &oa), NfsStat::BAD_STATEID);
}

#[test]
fn a_client_without_state_is_gone_after_one_lease_with_its_reply_cache() {
    let e = env();
    let (_, sa) = mount(&e, b"a");
    match e.sm.sequence(&seq(sa, 0, 1, 1)).unwrap() {
        SequenceOutcome::New { slot, .. } => e.sm.slot_done(&slot, &[5; 4000]),
        other => panic!("{other:?}"),
    }
    let u = e.sm.client_state_usage();
    assert_eq!((u.clients, u.sessions, u.reply_cache_bytes), (1, 1, 4000));
    // Within the lease (90 s) it stays.
    at(&e, 90);
    assert_eq!(e.sm.client_state_usage().clients, 1);
    // One lease and a tick later it is gone, sessions and cached replies with it.
    at(&e, 91);
    assert_eq!(
        e.sm.client_state_usage(),
        ClientStateUsage {
            max_client_memory: u.max_client_memory,
            max_clients: u.max_clients,
            ..Default::default()
        }
    );
    assert_eq!(
        e.sm.sequence(&seq(sa, 0, 2, 2)).map(|_| ()),
        Err(NfsStat::BADSESSION)
    );
    assert!(e.records.list().iter().all(|(k, _)| k != b"a"));
}

#[test]
fn courtesy_clients_are_bounded_oldest_first_and_their_layouts_go_to_the_engine() {
    let e = limited(|l| l.max_courtesy_clients = 2);
    let mut held = vec![];
    for (i, o) in [&b"a"[..], b"b", b"c"].into_iter().enumerate() {
        e.clock.0.store(i as u64 * 10, Ordering::SeqCst);
        let (c, _) = mount(&e, o);
        let st = open(&e, c, b"o", 10 + i as u64, 1, 0).unwrap();
        let l = e.sm.layout_stateid(c, Ino(10 + i as u64), &st).unwrap();
        held.push((c, st, l));
    }
    let _ = e.sm.take_dropped_layouts();
    // All three leases are over: two stay as courtesy clients, the oldest (a) goes.
    at(&e, 200);
    let u = e.sm.client_state_usage();
    assert_eq!((u.clients, u.courtesy_clients), (2, 2), "{u:?}");
    assert_eq!(
        e.sm.test_stateid(held[0].0, &held[0].1),
        NfsStat::BAD_STATEID
    );
    for (c, st, _) in &held[1..] {
        assert_eq!(e.sm.test_stateid(*c, st), NfsStat::OK);
    }
    // a's layout is handed to the layout engine's expiry (fencing), not dropped silently.
    assert_eq!(e.sm.take_dropped_layouts(), vec![(held[0].0, Ino(10))]);
    // And courtesy lasts COURTESY_SECONDS at most.
    at(&e, 200 + COURTESY_SECONDS);
    assert_eq!(e.sm.client_state_usage().clients, 0);
}
