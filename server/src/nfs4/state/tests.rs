//! State-machine tests through `StateManager`, with an in-memory record keeper and a clock
//! the tests move.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::tests_files::open;
use super::*;

#[derive(Default)]
pub(crate) struct MemRecords(Mutex<BTreeMap<Vec<u8>, Vec<u8>>>);

impl ClientRecords for MemRecords {
    fn put(&self, key: &[u8], value: Option<&[u8]>) -> Result<(), NfsStat> {
        let mut m = self.0.lock().unwrap();
        match value {
            Some(v) => m.insert(key.to_vec(), v.to_vec()),
            None => m.remove(key),
        };
        Ok(())
    }
    fn list(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.0
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

#[derive(Default)]
pub(crate) struct TestClock(pub AtomicU64);

impl Clock for TestClock {
    fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

pub(crate) struct Env {
    pub sm: StateManager,
    pub clock: Arc<TestClock>,
    pub records: Arc<MemRecords>,
}

pub(crate) fn env_with(records: Arc<MemRecords>, boot: u64) -> Env {
    let clock = Arc::new(TestClock::default());
    let cfg = StateConfig {
        lease_seconds: 90,
        grace_seconds: 90,
        boot_verifier: boot,
    };
    Env {
        sm: StateManager::with_parts(cfg, records.clone(), clock.clone()),
        clock,
        records,
    }
}

pub(crate) fn env() -> Env {
    env_with(Arc::new(MemRecords::default()), 0x1111_2222_3333_4444)
}

pub(crate) fn princ(uid: u32) -> Principal {
    Principal { flavor: 1, uid }
}

pub(crate) fn exid(owner: &[u8], verf: u8, uid: u32, flags: u32) -> ExchangeIdReq {
    ExchangeIdReq {
        owner: owner.to_vec(),
        verifier: [verf; 8],
        flags,
        principal: princ(uid),
    }
}

pub(crate) fn attrs() -> ChannelAttrs {
    ChannelAttrs {
        headerpadsize: 0,
        maxrequestsize: 1 << 20,
        maxresponsesize: 1 << 20,
        maxresponsesize_cached: 8192,
        maxoperations: 16,
        maxrequests: 8,
        rdma_ird: None,
    }
}

pub(crate) fn cs_req(clientid: u64, sequence: u32, uid: u32) -> CreateSessionReq {
    CreateSessionReq {
        clientid,
        sequence,
        flags: 0,
        fore: attrs(),
        back: attrs(),
        cb_program: 0x4000_0000,
        principal: princ(uid),
        conn: 1,
        peer: std::net::SocketAddr::from(([127, 0, 0, 1], 700)),
        backchannel: None,
    }
}

/// EXCHANGE_ID + CREATE_SESSION: a confirmed client and its session.
pub(crate) fn mount(e: &Env, owner: &[u8]) -> (u64, [u8; 16]) {
    let r = e.sm.exchange_id(&exid(owner, 1, 0, 0)).unwrap();
    let s =
        e.sm.create_session(cs_req(r.clientid, r.sequenceid, 0))
            .unwrap();
    (r.clientid, s.sessionid)
}

pub(crate) fn seq(sessionid: [u8; 16], slot: u32, seqid: u32, hash: u64) -> SequenceReq {
    SequenceReq {
        sessionid,
        sequenceid: seqid,
        slot,
        highest_slot: 0,
        cachethis: true,
        hash,
        solo: false,
        conn: 1,
    }
}

#[test]
fn exchange_id_record_cases() {
    let e = env();
    // Case 1: a new owner gets an unconfirmed record.
    let r1 = e.sm.exchange_id(&exid(b"a", 1, 0, 0)).unwrap();
    assert_eq!(r1.flags & exchgid::CONFIRMED_R, 0);
    assert_ne!(r1.flags & exchgid::USE_PNFS_MDS, 0);
    assert_eq!(r1.sequenceid, 1);
    // Case 5: again before CREATE_SESSION: the unconfirmed record is replaced.
    let r2 = e.sm.exchange_id(&exid(b"a", 1, 0, 0)).unwrap();
    assert_ne!(r1.clientid, r2.clientid);
    assert_eq!(
        e.sm.create_session(cs_req(r1.clientid, 1, 0)).err(),
        Some(NfsStat::STALE_CLIENTID)
    );
    e.sm.create_session(cs_req(r2.clientid, 1, 0)).unwrap();
    // Case 2: same verifier and principal: the same, confirmed, clientid.
    let r3 = e.sm.exchange_id(&exid(b"a", 1, 0, 0)).unwrap();
    assert_eq!(r3.clientid, r2.clientid);
    assert_ne!(r3.flags & exchgid::CONFIRMED_R, 0);
    assert_eq!(r3.sequenceid, 2);
    // Case 6–8: updates.
    let upd = exchgid::UPD_CONFIRMED_REC_A;
    assert_eq!(
        e.sm.exchange_id(&exid(b"a", 1, 0, upd)).unwrap().clientid,
        r2.clientid
    );
    assert_eq!(
        e.sm.exchange_id(&exid(b"a", 2, 0, upd)),
        Err(NfsStat::NOT_SAME)
    );
    assert_eq!(e.sm.exchange_id(&exid(b"a", 1, 5, upd)), Err(NfsStat::PERM));
    // Case 9: update of nothing.
    assert_eq!(
        e.sm.exchange_id(&exid(b"zz", 1, 0, upd)),
        Err(NfsStat::NOENT)
    );
    // Case 3: another principal while the lease holds (the client has a session).
    assert_eq!(
        e.sm.exchange_id(&exid(b"a", 1, 5, 0)),
        Err(NfsStat::CLID_INUSE)
    );
    // Case 4: the client restarted (new verifier): a new record, the old one stays until
    // the new one is confirmed.
    let r4 = e.sm.exchange_id(&exid(b"a", 9, 0, 0)).unwrap();
    assert_ne!(r4.clientid, r2.clientid);
    assert_eq!(r4.flags & exchgid::CONFIRMED_R, 0);
    assert!(e.sm.reclaim_complete(r2.clientid, false).is_ok());
    e.sm.create_session(cs_req(r4.clientid, r4.sequenceid, 0))
        .unwrap();
    assert_eq!(
        e.sm.reclaim_complete(r2.clientid, false),
        Err(NfsStat::STALE_CLIENTID)
    );
    // Unknown flags are refused.
    assert_eq!(
        e.sm.exchange_id(&exid(b"b", 1, 0, 0x800)),
        Err(NfsStat::INVAL)
    );
    assert_eq!(
        e.sm.exchange_id(&exid(b"b", 1, 0, 0x4)),
        Err(NfsStat::INVAL)
    );
    assert_eq!(
        e.sm.exchange_id(&exid(b"b", 1, 0, exchgid::CONFIRMED_R)),
        Err(NfsStat::INVAL)
    );
}

#[test]
fn create_session_sequence_rules() {
    let e = env();
    let r = e.sm.exchange_id(&exid(b"c", 1, 0, 0)).unwrap();
    assert_eq!(
        e.sm.create_session(cs_req(r.clientid, 5, 0)).err(),
        Some(NfsStat::SEQ_MISORDERED)
    );
    assert_eq!(
        e.sm.create_session(cs_req(r.clientid, 1, 7)).err(),
        Some(NfsStat::CLID_INUSE)
    );
    let s1 = e.sm.create_session(cs_req(r.clientid, 1, 0)).unwrap();
    // A replay gets the same session back, not a new one, even with other arguments
    // (the sequence alone defines the replay, RFC 8881 §18.36.4).
    let again = e.sm.create_session(cs_req(r.clientid, 1, 0)).unwrap();
    assert_eq!(again, s1);
    let mut other = cs_req(r.clientid, 1, 0);
    other.cb_program = 99;
    assert_eq!(e.sm.create_session(other).unwrap(), s1);
    // Once confirmed, another principal may add sessions.
    let s2 = e.sm.create_session(cs_req(r.clientid, 2, 7)).unwrap();
    assert_ne!(s2.sessionid, s1.sessionid);
    assert_eq!(
        e.sm.create_session(cs_req(r.clientid, 4, 0)).err(),
        Some(NfsStat::SEQ_MISORDERED)
    );
    // The confirmed record was persisted for reclaim after a restart.
    assert_eq!(e.records.list().len(), 1);
    // DESTROY_CLIENTID waits for the sessions to go.
    assert_eq!(
        e.sm.destroy_clientid(r.clientid),
        Err(NfsStat::CLIENTID_BUSY)
    );
    e.sm.destroy_session(&s1.sessionid, false, 1).unwrap();
    assert_eq!(
        e.sm.destroy_session(&s1.sessionid, false, 1),
        Err(NfsStat::BADSESSION)
    );
    e.sm.destroy_session(&s2.sessionid, false, 1).unwrap();
    e.sm.destroy_clientid(r.clientid).unwrap();
    assert!(e.records.list().is_empty());
    assert_eq!(
        e.sm.destroy_clientid(r.clientid),
        Err(NfsStat::STALE_CLIENTID)
    );
}

#[test]
fn sequence_replays_from_the_cache_and_detects_false_retries() {
    let e = env();
    let (_, sid) = mount(&e, b"s");
    let SequenceOutcome::New { slot, .. } = e.sm.sequence(&seq(sid, 0, 1, 42)).unwrap() else {
        panic!("expected a new request");
    };
    e.sm.slot_done(&slot, b"encoded reply");
    match e.sm.sequence(&seq(sid, 0, 1, 42)).unwrap() {
        SequenceOutcome::Replay(b) => assert_eq!(b, b"encoded reply"),
        _ => panic!("expected a replay"),
    }
    assert!(matches!(
        e.sm.sequence(&seq(sid, 0, 1, 43)),
        Err(NfsStat::SEQ_FALSE_RETRY)
    ));
    assert!(matches!(
        e.sm.sequence(&seq(sid, 0, 3, 43)),
        Err(NfsStat::SEQ_MISORDERED)
    ));
    assert!(matches!(
        e.sm.sequence(&seq(sid, 99, 1, 43)),
        Err(NfsStat::BADSLOT)
    ));
    assert!(matches!(
        e.sm.sequence(&seq([9; 16], 0, 1, 43)),
        Err(NfsStat::BADSESSION)
    ));
    // Not cached unless asked (or SEQUENCE alone).
    let mut r = seq(sid, 1, 1, 7);
    r.cachethis = false;
    let SequenceOutcome::New { slot, .. } = e.sm.sequence(&r).unwrap() else {
        panic!()
    };
    e.sm.slot_done(&slot, b"x");
    assert!(matches!(
        e.sm.sequence(&r),
        Err(NfsStat::RETRY_UNCACHED_REP)
    ));
}

#[test]
fn sequence_reports_slots_and_missing_backchannel() {
    let e = env();
    let r = e.sm.exchange_id(&exid(b"b", 1, 0, 0)).unwrap();
    let mut req = cs_req(r.clientid, 1, 0);
    req.flags = CS_FLAG_CONN_BACK_CHAN;
    // The transport gave no backchannel sender: the flag is not granted.
    let s = e.sm.create_session(req).unwrap();
    assert_eq!(s.flags & CS_FLAG_CONN_BACK_CHAN, 0);
    assert_eq!(s.fore.maxrequests, 8);
    let SequenceOutcome::New {
        highest_slot,
        status_flags,
        slot,
        ..
    } = e.sm.sequence(&seq(s.sessionid, 0, 1, 0)).unwrap()
    else {
        panic!()
    };
    assert_eq!(highest_slot, 7);
    assert_eq!(slot.max_ops, 16);
    // Nothing was granted, so nothing is reported down.
    assert_eq!(status_flags & seq4::CB_PATH_DOWN_SESSION, 0);
}

#[derive(Debug)]
struct NullBackchannel;

impl crate::rpc::Backchannel for NullBackchannel {
    fn call(&self, _: u32, _: u32, _: crate::xdr::XdrWriter) -> std::io::Result<Vec<u8>> {
        Ok(Vec::new())
    }
}

/// The CB_NULL probe decides whether the backchannel works (RFC 8881 §18.36.3): a failed
/// probe is CB_PATH_DOWN_SESSION (and CB_PATH_DOWN once the client holds state) and no
/// delegation, an answer of an older probe changes nothing, and a connection bound again
/// is probed afresh.
#[test]
fn a_failed_probe_reports_the_path_down_until_a_new_probe_answers() {
    let e = env();
    let r = e.sm.exchange_id(&exid(b"p", 1, 0, 0)).unwrap();
    let mut req = cs_req(r.clientid, 1, 0);
    req.flags = CS_FLAG_CONN_BACK_CHAN;
    req.backchannel = Some(Arc::new(NullBackchannel));
    let s = e.sm.create_session(req).unwrap();
    let mut seqid = 0;
    let mut flags = |e: &Env| {
        seqid += 1;
        match e.sm.sequence(&seq(s.sessionid, 0, seqid, 0)) {
            Ok(SequenceOutcome::New {
                slot, status_flags, ..
            }) => {
                e.sm.slot_done(&slot, b"");
                status_flags & (seq4::CB_PATH_DOWN | seq4::CB_PATH_DOWN_SESSION)
            }
            other => panic!("{other:?}"),
        }
    };
    // Being probed counts as working.
    let (client, g1) = e.sm.probe_start(&s.sessionid).unwrap();
    assert_eq!(client, r.clientid);
    assert_eq!(flags(&e), 0);
    assert!(e.sm.backchannel_works(client));
    assert!(e.sm.probe_target(&s.sessionid, g1).is_some());
    e.sm.probe_done(&s.sessionid, g1, false);
    assert!(!e.sm.backchannel_works(client));
    assert_eq!(flags(&e), seq4::CB_PATH_DOWN_SESSION | seq4::CB_PATH_DOWN);
    // A new connection for the backchannel: probed again; the old probe is moot.
    e.sm.bind_conn_to_session(
        &s.sessionid,
        BindDir::Back,
        2,
        Some(Arc::new(NullBackchannel)),
    )
    .unwrap();
    let (_, g2) = e.sm.probe_start(&s.sessionid).unwrap();
    assert!(e.sm.probe_target(&s.sessionid, g1).is_none());
    e.sm.probe_done(&s.sessionid, g2, true);
    e.sm.probe_done(&s.sessionid, g1, false);
    assert!(e.sm.backchannel_works(client));
    assert_eq!(flags(&e), 0);
    // A callback that gets no answer takes the path down too.
    let cb = e.sm.cb_begin(client).unwrap();
    e.sm.cb_done(&cb, false);
    assert!(!e.sm.backchannel_works(client));
    assert_ne!(flags(&e) & seq4::CB_PATH_DOWN_SESSION, 0);
    // Without a backchannel there is nothing to probe.
    e.sm.conn_closed(2);
    assert_eq!(e.sm.probe_start(&s.sessionid), None);
}

#[test]
fn backchannel_on_the_fore_connection_and_its_loss() {
    let e = env();
    let r = e.sm.exchange_id(&exid(b"b", 1, 0, 0)).unwrap();
    let mut req = cs_req(r.clientid, 1, 0);
    req.flags = CS_FLAG_CONN_BACK_CHAN;
    req.backchannel = Some(Arc::new(NullBackchannel));
    let s = e.sm.create_session(req).unwrap();
    assert_ne!(s.flags & CS_FLAG_CONN_BACK_CHAN, 0);
    assert!(e.sm.backchannel_of(r.clientid).is_some());
    let flags = |e: &Env, seqid: u32| match e.sm.sequence(&seq(s.sessionid, 0, seqid, 0)) {
        Ok(SequenceOutcome::New {
            slot, status_flags, ..
        }) => {
            e.sm.slot_done(&slot, b"");
            status_flags
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(flags(&e, 1), 0);
    e.sm.conn_closed(1);
    assert!(e.sm.backchannel_of(r.clientid).is_none());
    assert_ne!(flags(&e, 2) & seq4::CB_PATH_DOWN_SESSION, 0);
    assert_eq!(e.sm.cb_begin(r.clientid).err(), Some(NfsStat::CB_PATH_DOWN));
    // The client binds a new connection for both directions.
    let got =
        e.sm.bind_conn_to_session(
            &s.sessionid,
            BindDir::BackOrBoth,
            2,
            Some(Arc::new(NullBackchannel)),
        )
        .unwrap();
    assert_eq!(got, BindDir::Both);
    assert_eq!(flags(&e, 3), 0);
    // Callbacks go over it, one at a time, with CB_SEQUENCE seqids 1, 2, ...
    let cb = e.sm.cb_begin(r.clientid).unwrap();
    assert_eq!(
        (cb.sessionid, cb.slot, cb.seqid, cb.program),
        (s.sessionid, 0, 1, 0x4000_0000)
    );
    assert_eq!(e.sm.cb_begin(r.clientid).err(), Some(NfsStat::DELAY));
    // No answer: the seqid is retried.
    e.sm.cb_done(&cb, false);
    let cb = e.sm.cb_begin(r.clientid).unwrap();
    assert_eq!(cb.seqid, 1);
    e.sm.cb_done(&cb, true);
    assert_eq!(e.sm.cb_begin(r.clientid).unwrap().seqid, 2);
    // A connection without a sender cannot take the backchannel alone.
    assert_eq!(
        e.sm.bind_conn_to_session(&s.sessionid, BindDir::Back, 3, None),
        Err(NfsStat::INVAL)
    );
    assert_eq!(
        e.sm.bind_conn_to_session(&[0; 16], BindDir::Fore, 3, None),
        Err(NfsStat::BADSESSION)
    );
}

#[test]
fn destroy_session_waits_for_other_requests() {
    let e = env();
    let (_, sid) = mount(&e, b"d");
    let SequenceOutcome::New { slot, .. } = e.sm.sequence(&seq(sid, 0, 1, 0)).unwrap() else {
        panic!()
    };
    // From another session's COMPOUND: slot 0 still runs.
    assert_eq!(e.sm.destroy_session(&sid, false, 1), Err(NfsStat::DELAY));
    // Over a connection the session never saw.
    assert_eq!(
        e.sm.destroy_session(&sid, false, 9),
        Err(NfsStat::CONN_NOT_BOUND_TO_SESSION)
    );
    // From its own COMPOUND (the running request is ours).
    assert_eq!(e.sm.destroy_session(&sid, true, 9), Ok(()));
    e.sm.slot_done(&slot, b"");
}

#[test]
fn expired_lease_makes_a_courtesy_client_that_loses_state_on_conflict() {
    let e = env();
    let (a, sa) = mount(&e, b"a");
    let (b, sb) = mount(&e, b"b");
    let oa = open(&e, a, b"o", 3, 3, 3).unwrap();
    let oa4 = open(&e, a, b"o", 4, 1, 0).unwrap();
    // b keeps renewing; a goes quiet past its lease.
    e.clock.0.store(100, Ordering::SeqCst);
    let _ = e.sm.sequence(&seq(sb, 0, 1, 0)).unwrap();
    e.sm.tick();
    // a is a courtesy client: its state is still there.
    assert_eq!(e.sm.test_stateid(a, &oa), NfsStat::OK);
    // ... until b conflicts with it: then all of a's state is revoked as EXPIRED, and no
    // longer reserves anything.
    assert!(open(&e, b, b"o", 3, 3, 0).is_ok());
    assert_eq!(e.sm.test_stateid(a, &oa), NfsStat::EXPIRED);
    assert_eq!(e.sm.close(a, &oa, Ino(3)), Err(NfsStat::EXPIRED));
    assert!(!e.sm.file_is_open(Ino(4)));
    // a comes back: its session still works and SEQUENCE says what happened.
    let flags = |seqid: u32| match e.sm.sequence(&seq(sa, 0, seqid, seqid as u64)) {
        Ok(SequenceOutcome::New {
            slot, status_flags, ..
        }) => {
            e.sm.slot_done(&slot, b"");
            status_flags
        }
        other => panic!("{other:?}"),
    };
    assert_ne!(flags(1) & seq4::EXPIRED_ALL_STATE_REVOKED, 0);
    // The client frees what it lost; then the flag is gone.
    e.sm.free_stateid(a, &oa).unwrap();
    assert_eq!(e.sm.test_stateid(a, &oa), NfsStat::BAD_STATEID);
    let f = flags(2);
    assert_ne!(
        f & seq4::EXPIRED_ALL_STATE_REVOKED,
        0,
        "the open of ino 4 is still unfreed"
    );
    assert_eq!(e.sm.test_stateid(a, &oa4), NfsStat::EXPIRED);
    e.sm.free_stateid(a, &oa4).unwrap();
    assert_eq!(flags(3), 0);
    // A courtesy client that comes back in time keeps everything.
    let (c, sc) = mount(&e, b"c");
    let oc = open(&e, c, b"o", 9, 1, 0).unwrap();
    e.clock.0.store(300, Ordering::SeqCst);
    e.sm.tick();
    assert!(e.sm.sequence(&seq(sc, 0, 1, 0)).is_ok());
    assert_eq!(e.sm.test_stateid(c, &oc), NfsStat::OK);
    // After the courtesy time everything goes.
    e.clock
        .0
        .store(300 + 91 + COURTESY_SECONDS, Ordering::SeqCst);
    e.sm.tick();
    assert_eq!(e.sm.test_stateid(c, &oc), NfsStat::BAD_STATEID);
    assert!(e.sm.sequence(&seq(sc, 1, 1, 0)).is_err());
    assert!(e.records.list().iter().all(|(k, _)| k != b"c"));
}

#[test]
fn unconfirmed_clients_expire_after_a_lease() {
    let e = env();
    let r = e.sm.exchange_id(&exid(b"u", 1, 0, 0)).unwrap();
    e.clock.0.store(91, Ordering::SeqCst);
    e.sm.tick();
    assert_eq!(
        e.sm.create_session(cs_req(r.clientid, 1, 0)).err(),
        Some(NfsStat::STALE_CLIENTID)
    );
}

#[test]
fn grace_period_after_restart_allows_reclaim_only() {
    let records = Arc::new(MemRecords::default());
    let e1 = env_with(records.clone(), 1);
    mount(&e1, b"old");
    assert!(!e1.sm.in_grace());
    // Restart: the old client's record starts a grace period.
    let e2 = env_with(records.clone(), 2);
    assert!(e2.sm.in_grace());
    let (old, _) = mount(&e2, b"old");
    let (new, _) = mount(&e2, b"new");
    assert_eq!(e2.sm.check_open_reclaim(new, false), Err(NfsStat::GRACE));
    assert_eq!(
        e2.sm.check_open_reclaim(new, true),
        Err(NfsStat::RECLAIM_BAD)
    );
    assert_eq!(e2.sm.check_open_reclaim(old, true), Ok(()));
    assert_eq!(e2.sm.reclaim_complete(old, false), Ok(()));
    assert_eq!(
        e2.sm.reclaim_complete(old, false),
        Err(NfsStat::COMPLETE_ALREADY)
    );
    // Everyone who could reclaim has: grace is over early. A client still opens only after
    // its own RECLAIM_COMPLETE.
    assert!(!e2.sm.in_grace());
    assert_eq!(e2.sm.check_open_reclaim(new, false), Err(NfsStat::GRACE));
    e2.sm.reclaim_complete(new, false).unwrap();
    assert_eq!(e2.sm.check_open_reclaim(new, false), Ok(()));
    assert_eq!(e2.sm.check_open_reclaim(old, true), Err(NfsStat::NO_GRACE));
    let keys: Vec<Vec<u8>> = records.list().into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, vec![b"new".to_vec(), b"old".to_vec()]);
}

#[test]
fn grace_ends_by_time_and_forgets_absent_clients() {
    let records = Arc::new(MemRecords::default());
    let e1 = env_with(records.clone(), 1);
    mount(&e1, b"gone");
    let e2 = env_with(records.clone(), 2);
    assert!(e2.sm.in_grace());
    e2.clock.0.store(91, Ordering::SeqCst);
    e2.sm.tick();
    assert!(!e2.sm.in_grace());
    assert!(records.list().is_empty());
}
