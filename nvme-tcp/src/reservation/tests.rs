use super::*;

fn host(n: u8) -> Requester {
    Requester {
        hostid: [n; 16],
        cntlid: n as u16,
    }
}

#[test]
fn register_conflicts_and_replace() {
    let mut r = Reservations::default();
    let a = host(1);
    r.register(&a, RegisterAction::Register, false, 0, 10)
        .unwrap();
    r.register(&a, RegisterAction::Register, false, 0, 10)
        .unwrap();
    assert_eq!(
        r.register(&a, RegisterAction::Register, false, 0, 11),
        Err(CONFLICT)
    );
    assert_eq!(
        r.register(&a, RegisterAction::Replace, false, 99, 11),
        Err(CONFLICT)
    );
    r.register(&a, RegisterAction::Replace, false, 10, 11)
        .unwrap();
    assert_eq!(r.registrants()[0].key, 11);
    assert_eq!(
        r.register(&host(2), RegisterAction::Unregister, false, 0, 0),
        Err(CONFLICT)
    );
    r.register(&a, RegisterAction::Unregister, false, 11, 0)
        .unwrap();
    assert!(r.registrants().is_empty());
    assert_eq!(r.generation(), 3);
}

#[test]
fn exclusive_access_registrants_only_and_preempt() {
    let mut r = Reservations::default();
    let (mds, client, stranger) = (host(1), host(2), host(3));
    r.register(&mds, RegisterAction::Register, false, 0, 0xA)
        .unwrap();
    r.register(&client, RegisterAction::Register, false, 0, 0xB)
        .unwrap();
    let t = RType::EXCLUSIVE_ACCESS_REG_ONLY;
    r.acquire(&mds, AcquireAction::Acquire, false, t, 0xA, 0)
        .unwrap();
    // The client (registered) may read and write; the stranger may not.
    assert!(r.check(&client.hostid, Access::Write).is_ok());
    assert_eq!(r.check(&stranger.hostid, Access::Read), Err(CONFLICT));
    // A second acquire by the client conflicts; wrong key conflicts.
    assert_eq!(
        r.acquire(&client, AcquireAction::Acquire, false, t, 0xB, 0),
        Err(CONFLICT)
    );
    assert_eq!(
        r.acquire(&client, AcquireAction::Acquire, false, t, 0xC, 0),
        Err(CONFLICT)
    );
    // Fence: the MDS preempts-and-aborts the client's key.
    let gone = r
        .acquire(&mds, AcquireAction::PreemptAndAbort, false, t, 0xA, 0xB)
        .unwrap();
    assert_eq!(gone, vec![client.hostid]);
    assert_eq!(r.check(&client.hostid, Access::Write), Err(CONFLICT));
    assert!(r.check(&mds.hostid, Access::Write).is_ok());
    // Preempting a key nobody has conflicts.
    assert_eq!(
        r.acquire(&mds, AcquireAction::Preempt, false, t, 0xA, 0xB),
        Err(CONFLICT)
    );
}

#[test]
fn preempting_the_holder_moves_the_reservation() {
    let mut r = Reservations::default();
    let (a, b) = (host(1), host(2));
    r.register(&a, RegisterAction::Register, false, 0, 1)
        .unwrap();
    r.register(&b, RegisterAction::Register, false, 0, 2)
        .unwrap();
    r.acquire(
        &a,
        AcquireAction::Acquire,
        false,
        RType::WRITE_EXCLUSIVE,
        1,
        0,
    )
    .unwrap();
    assert_eq!(r.check(&b.hostid, Access::Write), Err(CONFLICT));
    assert!(r.check(&b.hostid, Access::Read).is_ok());
    r.acquire(
        &b,
        AcquireAction::Preempt,
        false,
        RType::EXCLUSIVE_ACCESS,
        2,
        1,
    )
    .unwrap();
    assert_eq!(r.rtype(), Some(RType::EXCLUSIVE_ACCESS));
    assert_eq!(r.check(&a.hostid, Access::Read), Err(CONFLICT));
    assert_eq!(r.registrants().len(), 1);
    // Release with the wrong type is an invalid field; the right type releases.
    assert_eq!(
        r.release(&b, ReleaseAction::Release, false, RType::WRITE_EXCLUSIVE, 2),
        Err(Status::INVALID_FIELD)
    );
    r.release(
        &b,
        ReleaseAction::Release,
        false,
        RType::EXCLUSIVE_ACCESS,
        2,
    )
    .unwrap();
    assert_eq!(r.rtype(), None);
}

#[test]
fn all_registrants_and_clear_and_report() {
    let mut r = Reservations::default();
    let (a, b) = (host(1), host(2));
    r.register(&a, RegisterAction::Register, false, 0, 1)
        .unwrap();
    r.register(&b, RegisterAction::Register, false, 0, 2)
        .unwrap();
    r.acquire(
        &a,
        AcquireAction::Acquire,
        false,
        RType::WRITE_EXCLUSIVE_ALL_REGS,
        1,
        0,
    )
    .unwrap();
    // b is a holder too: it may acquire the same type.
    r.acquire(
        &b,
        AcquireAction::Acquire,
        false,
        RType::WRITE_EXCLUSIVE_ALL_REGS,
        2,
        0,
    )
    .unwrap();
    let rep = r.report(false);
    assert_eq!(rep.len(), 24 + 48);
    assert_eq!(rep[4], 5);
    assert_eq!(rep[24 + 2], 1);
    assert_eq!(&rep[24 + 16..24 + 24], &1u64.to_le_bytes());
    let ext = r.report(true);
    assert_eq!(&ext[64 + 16..64 + 32], &[1u8; 16]);
    r.release(&b, ReleaseAction::Clear, false, RType(0), 2)
        .unwrap();
    assert!(r.registrants().is_empty());
    assert_eq!(r.rtype(), None);
}

/// Register with IEKEY from a host registered with another key replaces the key (Linux's
/// `pr_register(0, key, PR_FL_IGNORE_KEY)` after an MDS restart); without IEKEY it conflicts.
#[test]
fn register_with_iekey_replaces_an_existing_key() {
    let mut r = Reservations::default();
    let a = host(1);
    r.register(&a, RegisterAction::Register, false, 0, 10)
        .unwrap();
    assert_eq!(
        r.register(&a, RegisterAction::Register, false, 0, 11),
        Err(CONFLICT)
    );
    let g = r.generation();
    r.register(&a, RegisterAction::Register, true, 0, 11)
        .unwrap();
    assert_eq!(r.registrants().len(), 1);
    assert_eq!(r.registrants()[0].key, 11);
    assert_eq!(r.generation(), g + 1);
    // Also over Linux's "unregistered" key 0 (Replace with NRKEY 0).
    r.register(&a, RegisterAction::Replace, false, 11, 0)
        .unwrap();
    r.register(&a, RegisterAction::Register, true, 0, 12)
        .unwrap();
    assert_eq!(r.registrants()[0].key, 12);
}

#[test]
fn ptpl_state_is_reported_and_cptpl_decoded() {
    let mut r = Reservations::default();
    assert_eq!(r.report(true)[9], 0);
    r.set_ptpl(true);
    assert_eq!(r.report(true)[9], 1);
    assert_eq!(Cptpl::from_bits(0), Ok(Cptpl::NoChange));
    assert_eq!(Cptpl::from_bits(1), Err(Status::INVALID_FIELD));
    assert_eq!(Cptpl::from_bits(2), Ok(Cptpl::Off));
    assert_eq!(Cptpl::from_bits(3), Ok(Cptpl::Persist));
    for c in [Cptpl::NoChange, Cptpl::Off, Cptpl::Persist] {
        assert_eq!(Cptpl::from_bits(c.bits()), Ok(c));
    }
}
