use std::sync::atomic::Ordering;

use super::*;
use crate::nfs4::state::tests::{env, mount, seq, Env};
use crate::nfs4::state::tests_files::open;
use crate::nfs4::state::{seq4, IoAccess, SequenceOutcome};

fn flags(e: &Env, sid: [u8; 16], seqid: u32) -> u32 {
    match e.sm.sequence(&seq(sid, 0, seqid, seqid as u64)).unwrap() {
        SequenceOutcome::New { status_flags, .. } => status_flags,
        SequenceOutcome::Replay(_) => panic!("replay"),
    }
}

#[test]
fn grant_rules() {
    let e = env();
    let (a, _) = mount(&e, b"a");
    let (b, _) = mount(&e, b"b");
    // A write open of another client forbids a read delegation.
    open(&e, b, b"ob", 10, 2, 0).unwrap();
    open(&e, a, b"oa", 10, 1, 0).unwrap();
    assert_eq!(
        e.sm.grant_deleg(a, Ino(10), false),
        Err(NoDeleg::Contention)
    );
    // Readers share read delegations, but one each, and no write delegation then.
    open(&e, a, b"oa", 11, 1, 0).unwrap();
    open(&e, b, b"ob", 11, 1, 0).unwrap();
    assert!(e.sm.grant_deleg(a, Ino(11), false).is_ok());
    assert_eq!(
        e.sm.grant_deleg(a, Ino(11), false),
        Err(NoDeleg::Contention)
    );
    assert!(e.sm.grant_deleg(b, Ino(11), false).is_ok());
    assert_eq!(e.sm.grant_deleg(b, Ino(11), true), Err(NoDeleg::Contention));
    // A write delegation needs the file to itself.
    open(&e, a, b"oa", 12, 3, 0).unwrap();
    let w = e.sm.grant_deleg(a, Ino(12), true).unwrap();
    assert_eq!(e.sm.check_io(Some(a), &w, Ino(12), IoAccess::Write), Ok(()));
    // A reader of another client conflicts with it; the holder's own opens do not.
    assert!(e.sm.deleg_conflicts(a, Ino(12), true).is_empty());
    let r = e.sm.deleg_conflicts(b, Ino(12), false);
    assert_eq!(r.len(), 1);
    assert!(r[0].send && r[0].client == a && r[0].stateid == w);
}

/// A reclaimed delegation (OPEN CLAIM_PREVIOUS) is given back even when it cannot
/// stay: with another client's reclaimed write open in the way, or `give_back`, it comes
/// recalled, and the tick revokes it a lease later unless returned. Without a conflict
/// it is a plain delegation; the same reclaim again finds it.
#[test]
fn a_reclaimed_delegation_in_the_way_comes_recalled() {
    let e = env();
    let (a, _) = mount(&e, b"a");
    let (b, _) = mount(&e, b"b");
    let (d, recall) = e.sm.reclaim_deleg(a, Ino(10), false, false);
    assert!(!recall);
    assert_eq!(e.sm.reclaim_deleg(a, Ino(10), false, false), (d, false));
    open(&e, b, b"ob", 11, 3, 0).unwrap();
    let (w, recall) = e.sm.reclaim_deleg(a, Ino(11), false, false);
    assert!(recall, "b writes the file");
    let (g, recall) = e.sm.reclaim_deleg(a, Ino(12), false, true);
    assert!(recall, "give_back");
    assert_eq!(e.sm.deleg_counters().granted, 3);
    assert_eq!(e.sm.delegreturn(a, &g, Ino(12)), Ok(()));
    e.clock.0.store(90, Ordering::SeqCst);
    e.sm.tick();
    assert_eq!(e.sm.test_stateid(a, &w), NfsStat::DELEG_REVOKED);
    assert_eq!(e.sm.test_stateid(a, &d), NfsStat::OK);
}

#[test]
fn recall_then_return_or_revoke() {
    let e = env();
    let (a, sa) = mount(&e, b"a");
    let (b, _) = mount(&e, b"b");
    open(&e, a, b"oa", 10, 1, 0).unwrap();
    let d = e.sm.grant_deleg(a, Ino(10), false).unwrap();
    // Another reader does not conflict with a read delegation; a writer does, once
    // sent, then only waited for.
    assert!(e.sm.deleg_conflicts(b, Ino(10), false).is_empty());
    assert!(e.sm.deleg_conflicts(b, Ino(10), true)[0].send);
    assert!(!e.sm.deleg_conflicts(b, Ino(10), true)[0].send);
    // DELEGRETURN ends it (not of another file, not another kind of stateid).
    assert_eq!(e.sm.delegreturn(a, &d, Ino(11)), Err(NfsStat::BAD_STATEID));
    assert_eq!(e.sm.delegreturn(a, &d, Ino(10)), Ok(()));
    assert!(e.sm.deleg_conflicts(b, Ino(10), true).is_empty());
    assert_eq!(e.sm.delegreturn(a, &d, Ino(10)), Err(NfsStat::BAD_STATEID));

    // Not returned within a lease of the recall: revoked.
    let d = e.sm.grant_deleg(a, Ino(10), false).unwrap();
    assert_eq!(flags(&e, sa, 1) & seq4::RECALLABLE_STATE_REVOKED, 0);
    e.clock.0.store(10, Ordering::SeqCst);
    assert_eq!(e.sm.deleg_conflicts(b, Ino(10), true).len(), 1);
    e.clock.0.store(60, Ordering::SeqCst);
    assert_eq!(e.sm.deleg_conflicts(b, Ino(10), true).len(), 1);
    e.sm.sequence(&seq(sa, 0, 2, 2)).unwrap();
    e.clock.0.store(100, Ordering::SeqCst);
    assert!(e.sm.deleg_conflicts(b, Ino(10), true).is_empty());
    assert_eq!(e.sm.test_stateid(a, &d), NfsStat::DELEG_REVOKED);
    assert_eq!(
        e.sm.check_io(Some(a), &d, Ino(10), IoAccess::Read),
        Err(NfsStat::DELEG_REVOKED)
    );
    assert_ne!(flags(&e, sa, 3) & seq4::RECALLABLE_STATE_REVOKED, 0);
    e.sm.free_stateid(a, &d).unwrap();
    assert_eq!(flags(&e, sa, 4) & seq4::RECALLABLE_STATE_REVOKED, 0);
}

/// The tick revokes a recalled delegation a lease after its recall even when nobody
/// asks again (the conflicting client may have given up), and counts it; a returned one
/// is only forgotten.
#[test]
fn the_tick_revokes_an_unreturned_recall_after_a_lease() {
    let e = env();
    let (a, sa) = mount(&e, b"a");
    let (b, _) = mount(&e, b"b");
    open(&e, a, b"oa", 10, 1, 0).unwrap();
    open(&e, a, b"oa", 11, 1, 0).unwrap();
    let d = e.sm.grant_deleg(a, Ino(10), false).unwrap();
    let kept = e.sm.grant_deleg(a, Ino(11), false).unwrap();
    e.clock.0.store(5, Ordering::SeqCst);
    assert!(e.sm.deleg_conflicts(b, Ino(10), true)[0].send);
    assert!(e.sm.deleg_conflicts(b, Ino(11), true)[0].send);
    assert!(e.sm.deleg_recall_pending(a, &d));
    assert!(!e.sm.deleg_recall_pending(b, &d));
    e.sm.delegreturn(a, &kept, Ino(11)).unwrap();
    assert!(!e.sm.deleg_recall_pending(a, &kept));
    e.sm.sequence(&seq(sa, 0, 1, 1)).unwrap();
    e.clock.0.store(94, Ordering::SeqCst);
    e.sm.tick();
    assert_eq!(e.sm.test_stateid(a, &d), NfsStat::OK);
    e.clock.0.store(95, Ordering::SeqCst);
    e.sm.tick();
    assert_eq!(e.sm.test_stateid(a, &d), NfsStat::DELEG_REVOKED);
    assert!(!e.sm.deleg_recall_pending(a, &d));
    assert_ne!(flags(&e, sa, 2) & seq4::RECALLABLE_STATE_REVOKED, 0);
    let c = e.sm.deleg_counters();
    assert_eq!((c.granted, c.recalled, c.revoked), (2, 2, 1));
    assert_eq!(e.sm.delegations_held(), 0, "one returned, one revoked");
    // The conflict is gone: the other client's access goes on.
    assert!(e.sm.deleg_conflicts(b, Ino(10), true).is_empty());
}

/// A revoked delegation takes with it the layouts it kept past the holder's last CLOSE
/// (the layout stateid goes; the layouts service fences and forgets the grants), but not
/// those of a file the holder still has open.
#[test]
fn a_revoked_delegation_drops_the_layouts_it_kept_past_close() {
    let e = env();
    let (a, sa) = mount(&e, b"a");
    let (b, _) = mount(&e, b"b");
    let mut opens = Vec::new();
    for ino in [10, 11] {
        let s = open(&e, a, b"oa", ino, 1, 0).unwrap();
        e.sm.grant_deleg(a, Ino(ino), false).unwrap();
        e.sm.layout_stateid(a, Ino(ino), &s).unwrap();
        assert_eq!(e.sm.deleg_of(a, Ino(ino)), Some(false));
        opens.push(s);
    }
    e.sm.close(a, &opens[0], Ino(10)).unwrap();
    assert_eq!(e.sm.layouts_of_file(Ino(10)).len(), 1, "kept past CLOSE");
    e.clock.0.store(5, Ordering::SeqCst);
    for ino in [10, 11] {
        assert!(e.sm.deleg_conflicts(b, Ino(ino), true)[0].send);
    }
    e.sm.sequence(&seq(sa, 0, 1, 1)).unwrap();
    e.clock.0.store(95, Ordering::SeqCst);
    e.sm.tick();
    assert_eq!(e.sm.deleg_of(a, Ino(10)), None);
    assert_eq!(e.sm.take_dropped_layouts(), vec![(a, Ino(10))]);
    assert!(e.sm.layouts_of_file(Ino(10)).is_empty());
    // Still open: the layout stays for the last CLOSE (layouts `on_close`).
    assert_eq!(e.sm.layouts_of_file(Ino(11)).len(), 1);
    assert_eq!(e.sm.deleg_counters().revoked, 2);
}

/// `max_delegations` caps the delegations held server-wide (WND4_RESOURCE); a returned
/// or revoked one makes room. A file whose delegation is being recalled gets no new one.
#[test]
fn the_cap_and_a_pending_recall_refuse_new_delegations() {
    let e = env();
    e.sm.set_limits(crate::nfs4::state::ClientLimits {
        max_delegations: 2,
        ..Default::default()
    });
    let (a, _) = mount(&e, b"a");
    let (b, _) = mount(&e, b"b");
    for ino in 10..13 {
        open(&e, a, b"oa", ino, 1, 0).unwrap();
    }
    let d10 = e.sm.grant_deleg(a, Ino(10), false).unwrap();
    e.sm.grant_deleg(a, Ino(11), false).unwrap();
    assert_eq!(e.sm.grant_deleg(a, Ino(12), false), Err(NoDeleg::Resource));
    assert_eq!(e.sm.delegations_held(), 2);
    e.sm.delegreturn(a, &d10, Ino(10)).unwrap();
    let d12 = e.sm.grant_deleg(a, Ino(12), false).unwrap();
    // Recalled for b's write: no other client gets one of that file meanwhile.
    assert!(e.sm.deleg_conflicts(b, Ino(12), true)[0].send);
    open(&e, b, b"ob", 12, 1, 0).unwrap();
    e.sm.delegreturn(a, &d12, Ino(12)).unwrap();
    assert!(e.sm.grant_deleg(b, Ino(12), false).is_ok());
    // Revoked, it no longer counts.
    let (c, _) = mount(&e, b"c");
    open(&e, c, b"oc", 13, 1, 0).unwrap();
    assert_eq!(e.sm.grant_deleg(c, Ino(13), false), Err(NoDeleg::Resource));
    assert!(e.sm.deleg_conflicts(b, Ino(11), true)[0].send);
    e.clock.0.store(100, Ordering::SeqCst);
    e.sm.tick();
    assert!(e.sm.grant_deleg(c, Ino(13), false).is_ok());
}
