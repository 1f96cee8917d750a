//! Opens, locks and stateids through `StateManager` (harness in tests.rs).

use std::sync::Arc;

use super::tests::*;
use super::*;

pub(crate) fn open(
    e: &Env,
    cid: u64,
    owner: &[u8],
    ino: u64,
    access: u32,
    deny: u32,
) -> Result<Stateid, NfsStat> {
    e.sm.open(&OpenReq {
        clientid: cid,
        owner,
        ino: Ino(ino),
        share: ShareAccess::new(access, deny)?,
    })
}

#[test]
fn share_reservations_conflict_between_owners_only() {
    let e = env();
    let (a, _) = mount(&e, b"a");
    let (b, _) = mount(&e, b"b");
    let s1 = open(&e, a, b"o1", 10, 1, 2).unwrap();
    assert_eq!(s1.seqid, 1);
    // Another owner (same or other client) may not write: DENY_WRITE.
    assert_eq!(open(&e, a, b"o2", 10, 2, 0), Err(NfsStat::SHARE_DENIED));
    assert_eq!(open(&e, b, b"o1", 10, 3, 0), Err(NfsStat::SHARE_DENIED));
    // Nor deny a read that is open.
    assert_eq!(open(&e, b, b"o1", 10, 1, 1), Err(NfsStat::SHARE_DENIED));
    assert!(open(&e, b, b"o1", 10, 1, 0).is_ok());
    // The same owner upgrades its own state: same other, seqid bumped.
    let s2 = open(&e, a, b"o1", 10, 2, 0).unwrap();
    assert_eq!(s2.other, s1.other);
    assert_eq!(s2.seqid, 2);
    assert_eq!(ShareAccess::new(0, 0), Err(NfsStat::INVAL));
    assert_eq!(ShareAccess::new(1, 4), Err(NfsStat::INVAL));
    // Downgrade back to READ/DENY_WRITE (opened with), not to DENY_READ (never was).
    assert_eq!(
        e.sm.open_downgrade(a, &s2, Ino(10), ShareAccess::new(1, 1).unwrap()),
        Err(NfsStat::INVAL)
    );
    let s3 =
        e.sm.open_downgrade(a, &s2, Ino(10), ShareAccess::new(1, 2).unwrap())
            .unwrap();
    assert_eq!(s3.seqid, 3);
    // The old seqid is now OLD_STATEID; one never given out is BAD_STATEID.
    assert_eq!(e.sm.close(a, &s2, Ino(10)), Err(NfsStat::OLD_STATEID));
    let future = Stateid { seqid: 9, ..s3 };
    assert_eq!(e.sm.close(a, &future, Ino(10)), Err(NfsStat::BAD_STATEID));
    assert_eq!(e.sm.close(b, &s3, Ino(10)), Err(NfsStat::BAD_STATEID));
    assert_eq!(e.sm.close(a, &s3, Ino(11)), Err(NfsStat::BAD_STATEID));
    assert!(e.sm.file_is_open(Ino(10)));
    let probe = e.sm.open_probe();
    assert!(probe(Ino(10)));
    assert!(!probe(Ino(11)));
    // b's open remains after a's close.
    assert_eq!(e.sm.close(a, &s3, Ino(10)), Ok(false));
    assert_eq!(e.sm.test_stateid(a, &s3), NfsStat::BAD_STATEID);
}

#[test]
fn io_checks_follow_the_open_mode() {
    let e = env();
    let (a, _) = mount(&e, b"a");
    let r = open(&e, a, b"o", 5, 1, 2).unwrap();
    assert_eq!(e.sm.check_io(Some(a), &r, Ino(5), IoAccess::Read), Ok(()));
    assert_eq!(
        e.sm.check_io(Some(a), &r, Ino(5), IoAccess::Write),
        Err(NfsStat::OPENMODE)
    );
    assert_eq!(
        e.sm.check_io(Some(a), &r, Ino(6), IoAccess::Read),
        Err(NfsStat::BAD_STATEID)
    );
    // Anonymous writes meet the DENY_WRITE reservation; reads do not.
    assert_eq!(
        e.sm.check_io(None, &Stateid::ANONYMOUS, Ino(5), IoAccess::Write),
        Err(NfsStat::LOCKED)
    );
    assert_eq!(
        e.sm.check_io(None, &Stateid::ANONYMOUS, Ino(5), IoAccess::Read),
        Ok(())
    );
}

#[test]
fn stateids_of_an_earlier_boot_are_stale() {
    let records = Arc::new(MemRecords::default());
    let e1 = env_with(records.clone(), 1);
    let (a, _) = mount(&e1, b"a");
    let s = open(&e1, a, b"o", 5, 3, 0).unwrap();
    let e2 = env_with(records, 2);
    let (a2, _) = mount(&e2, b"other");
    assert_eq!(e2.sm.test_stateid(a2, &s), NfsStat::STALE_STATEID);
    assert_eq!(
        e2.sm.test_stateid(a2, &Stateid::ANONYMOUS),
        NfsStat::BAD_STATEID
    );
    assert_eq!(
        e2.sm.reclaim_complete(a, false),
        Err(NfsStat::STALE_CLIENTID)
    );
}

fn lock(
    e: &Env,
    cid: u64,
    ino: u64,
    locker: Locker<'_>,
    write: bool,
    off: u64,
    len: u64,
) -> Result<Stateid, LockError> {
    let (start, end) = range_of(off, len)?;
    e.sm.lock_range(&LockReq {
        clientid: cid,
        ino: Ino(ino),
        write,
        reclaim: false,
        start,
        end,
        locker,
    })
}

/// A first lock by `owner` under the open stateid `open`.
fn new_locker(open: Stateid, owner: &[u8]) -> Locker<'_> {
    Locker::New { open, owner }
}

#[test]
fn locks_conflict_split_and_hold_the_open() {
    let e = env();
    let (a, _) = mount(&e, b"a");
    let (b, _) = mount(&e, b"b");
    let oa = open(&e, a, b"o", 7, 3, 0).unwrap();
    let ob = open(&e, b, b"o", 7, 1, 0).unwrap();
    let la = lock(&e, a, 7, new_locker(oa, b"la"), true, 0, 100).unwrap();
    assert_eq!(la.seqid, 1);
    // b's read lock over a's write lock is denied, with a's lock in the answer.
    let d = lock(&e, b, 7, new_locker(ob, b"lb"), false, 50, 10).unwrap_err();
    assert_eq!(
        d,
        LockError::Denied(Denied {
            offset: 0,
            length: 100,
            write: true,
            clientid: a,
            owner: b"la".to_vec()
        })
    );
    // A write lock through a read-only open is OPENMODE.
    let r = lock(&e, b, 7, new_locker(ob, b"lb"), true, 200, 10);
    assert_eq!(r, Err(LockError::Status(NfsStat::OPENMODE)));
    // Unlock the middle of a's lock; b can lock there now.
    let la2 = e.sm.locku(a, &la, Ino(7), 40, 59).unwrap();
    assert_eq!(la2.seqid, 2);
    let lb = lock(&e, b, 7, new_locker(ob, b"lb"), false, 45, 10).unwrap();
    // LOCKT: a's owner sees b's read; b's owner does not conflict with itself.
    assert!(matches!(
        e.sm.lockt(a, b"la", Ino(7), true, 40, 50),
        Err(LockError::Denied(_))
    ));
    assert_eq!(e.sm.lockt(b, b"lb", Ino(7), true, 45, 54), Ok(()));
    assert!(e.sm.lockt(b, b"lb", Ino(7), false, 0, u64::MAX).is_err());
    // CLOSE and FREE_STATEID refuse while locks are held.
    assert_eq!(e.sm.close(b, &ob, Ino(7)), Err(NfsStat::LOCKS_HELD));
    assert_eq!(e.sm.free_stateid(b, &lb), Err(NfsStat::LOCKS_HELD));
    assert_eq!(e.sm.free_stateid(b, &ob), Err(NfsStat::LOCKS_HELD));
    let lb2 = e.sm.locku(b, &lb, Ino(7), 0, u64::MAX).unwrap();
    // Existing lock-owner: the lock stateid continues.
    let lb3 = lock(&e, b, 7, Locker::Existing { lock: lb2 }, false, 300, 1).unwrap();
    assert_eq!(lb3.seqid, lb2.seqid + 1);
    e.sm.locku(b, &lb3, Ino(7), 300, 300).unwrap();
    e.sm.free_stateid(b, &lb3).unwrap();
    assert_eq!(e.sm.test_stateid(b, &lb3), NfsStat::BAD_STATEID);
    assert_eq!(e.sm.close(b, &ob, Ino(7)), Ok(false));
    // Closing a's open is refused until its locks go; then it drops the lock state too.
    assert_eq!(e.sm.close(a, &oa, Ino(7)), Err(NfsStat::LOCKS_HELD));
    let la3 = e.sm.locku(a, &la2, Ino(7), 0, u64::MAX).unwrap();
    assert_eq!(e.sm.close(a, &oa, Ino(7)), Ok(true));
    assert_eq!(e.sm.test_stateid(a, &la3), NfsStat::BAD_STATEID);
}

#[test]
fn a_courtesy_clients_lock_gives_way() {
    let e = env();
    let (a, _) = mount(&e, b"a");
    let (b, sb) = mount(&e, b"b");
    let oa = open(&e, a, b"o", 7, 3, 0).unwrap();
    let ob = open(&e, b, b"o", 7, 3, 0).unwrap();
    let la = lock(&e, a, 7, new_locker(oa, b"la"), true, 0, 10).unwrap();
    let new_b = || new_locker(ob, b"lb");
    assert!(matches!(
        lock(&e, b, 7, new_b(), true, 5, 1),
        Err(LockError::Denied(_))
    ));
    // a's lease runs out while b renews: a's lock no longer holds b up.
    e.clock.0.store(100, std::sync::atomic::Ordering::SeqCst);
    e.sm.sequence(&seq(sb, 0, 1, 0)).unwrap();
    e.sm.tick();
    assert!(lock(&e, b, 7, new_b(), true, 5, 1).is_ok());
    assert_eq!(e.sm.test_stateid(a, &la), NfsStat::EXPIRED);
    assert_eq!(e.sm.test_stateid(a, &oa), NfsStat::EXPIRED);
}
