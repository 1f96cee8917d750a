//! Persist Through Power Loss across a restart of the target (a new `Target` on the same
//! volume file and reservation directory, as pnfsd's restart does): what registered hosts
//! and the in-process MDS set up is back before anyone connects, unless PTPL was off.

mod common;

use bytes::Bytes;
use common::{host, BS, NQN, UUID};
use nvme_tcp::pdu::{AdminOpc, Sqe};
use nvme_tcp::{
    AcquireAction, Cptpl, Error, FileBackend, Initiator, NamespaceConfig, RType, RegisterAction,
    RestoredHosts, Status, Target, TargetConfig,
};
use std::path::Path;
use std::sync::Arc;

const MDS: [u8; 16] = *b"in-process-mds-1";
const MDS_KEY: u64 = 0x4D44_5300;
const T: RType = RType::EXCLUSIVE_ACCESS_REG_ONLY;

/// A target over `dir/vol.img` keeping reservations in `dir/resv` (`ptpl`), or none.
async fn start(dir: &Path, ptpl: bool) -> Target {
    let path = dir.join("vol.img");
    let backend = if path.exists() {
        FileBackend::open(&path, BS).unwrap()
    } else {
        FileBackend::create(&path, 64 * BS as u64, BS).unwrap()
    };
    let mut cfg = TargetConfig::new(
        NQN,
        vec![NamespaceConfig {
            nsid: 1,
            backend: Arc::new(backend),
            volume_uuid: UUID,
        }],
    );
    cfg.ptpl_dir = ptpl.then(|| dir.join("resv"));
    let t = Target::bind("127.0.0.1:0", cfg).await.unwrap();
    t.spawn();
    t
}

fn block(b: u8) -> Bytes {
    Bytes::from(vec![b; BS as usize])
}

fn status_of<T: std::fmt::Debug>(r: Result<T, Error>) -> Status {
    match r {
        Err(Error::Status(s)) => s,
        other => panic!("expected an NVMe status, got {other:?}"),
    }
}

/// The MDS claims the namespace the way pnfsd does (Register with CPTPL = persist, then
/// EXCLUSIVE_ACCESS_REG_ONLY), and a client host registers as Linux does (Register, IEKEY,
/// CPTPL 11b).
async fn claim_and_register(t: &Target, client: &Initiator, cptpl: Cptpl, key: u64) {
    t.reservation_register_cptpl(1, MDS, RegisterAction::Register, true, cptpl, 0, MDS_KEY)
        .unwrap();
    t.reservation_acquire(1, MDS, AcquireAction::Acquire, T, MDS_KEY, 0)
        .unwrap();
    client
        .reservation_register_cptpl(1, RegisterAction::Register, true, cptpl, 0, key)
        .await
        .unwrap();
}

#[tokio::test]
async fn registrations_and_the_reservation_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let t = start(dir.path(), true).await;
    let a = Initiator::connect(t.local_addr(), host("a", 1))
        .await
        .unwrap();
    let info = a.identify_namespace(1).await.unwrap();
    assert_eq!(info.rescap & 1, 1, "RESCAP bit 0: PTPL supported");
    claim_and_register(&t, &a, Cptpl::Persist, 0xA).await;
    let b = Initiator::connect(t.local_addr(), host("b", 1))
        .await
        .unwrap();
    b.reservation_register_cptpl(1, RegisterAction::Register, true, Cptpl::Persist, 0, 0xB)
        .await
        .unwrap();
    a.write(1, 3, block(1), BS, false).await.unwrap();
    // The MDS fences b: that too must still hold after the restart.
    t.reservation_acquire(1, MDS, AcquireAction::PreemptAndAbort, T, MDS_KEY, 0xB)
        .unwrap();
    let before = a.reservation_report(1).await.unwrap();
    assert!(before.ptpl);
    // The target goes (a crash or a clean stop: each command was on disk before it completed).
    t.shutdown();
    drop((a, b, t));

    let t = start(dir.path(), true).await;
    // Before anyone connects the state is back: the MDS holds, a is registered, b is not.
    let (rtype, regs) = t.reservation_state(1).unwrap();
    assert_eq!(rtype, Some(T));
    let mut keys: Vec<u64> = regs.iter().map(|r| r.key).collect();
    keys.sort();
    assert_eq!(keys, vec![0xA, MDS_KEY]);
    assert!(t.reservation_ptpl(1).unwrap());
    let restored = |reconnected, awaited| RestoredHosts {
        reconnected,
        awaited,
    };
    assert_eq!(t.reservation_restored_hosts(1).unwrap(), restored(0, 2));
    let a = Initiator::connect(t.local_addr(), host("a", 1))
        .await
        .unwrap();
    // a is back (it connected an I/O queue); the MDS has not spoken yet.
    assert_eq!(t.reservation_restored_hosts(1).unwrap(), restored(1, 1));
    let b = Initiator::connect(t.local_addr(), host("b", 1))
        .await
        .unwrap();
    let c = Initiator::connect(t.local_addr(), host("c", 1))
        .await
        .unwrap();
    // The registered host's replayed write passes; the fenced one and a stranger conflict.
    a.write(1, 4, block(2), BS, false).await.unwrap();
    assert_eq!(
        status_of(b.write(1, 5, block(3), BS, false).await),
        Status::RESERVATION_CONFLICT
    );
    assert_eq!(
        status_of(c.read(1, 0, 1, BS).await),
        Status::RESERVATION_CONFLICT
    );
    let after = a.reservation_report(1).await.unwrap();
    assert_eq!(after.generation, before.generation);
    assert_eq!((after.rtype, after.ptpl), (T.0, true));
    // The MDS claims again as at every start: nothing changes, it still holds; it is no
    // host to wait for.
    claim_and_register(&t, &a, Cptpl::Persist, 0xA).await;
    assert_eq!(t.reservation_state(1).unwrap().1.len(), 2);
    assert_eq!(t.reservation_restored_hosts(1).unwrap(), restored(1, 0));
    // A host whose earlier key survived registers a new one the Linux way (Register with
    // IEKEY): its key is replaced, not refused.
    a.reservation_register_cptpl(1, RegisterAction::Register, true, Cptpl::Persist, 0, 0xA2)
        .await
        .unwrap();
    let keys: Vec<u64> = a
        .reservation_report(1)
        .await
        .unwrap()
        .registrants
        .iter()
        .map(|r| r.key)
        .collect();
    assert!(keys.contains(&0xA2) && !keys.contains(&0xA), "{keys:?}");
    // Without IEKEY a different key still conflicts (NVMe Base 2.0).
    assert_eq!(
        status_of(
            a.reservation_register(1, RegisterAction::Register, false, 0, 0xA3)
                .await
        ),
        Status::RESERVATION_CONFLICT
    );
    t.shutdown();
}

#[tokio::test]
async fn ptpl_off_is_not_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let t = start(dir.path(), true).await;
    let a = Initiator::connect(t.local_addr(), host("a", 1))
        .await
        .unwrap();
    // CPTPL 10b: the state is lost at a restart.
    claim_and_register(&t, &a, Cptpl::Off, 0xA).await;
    assert!(!a.reservation_report(1).await.unwrap().ptpl);
    t.shutdown();
    drop((a, t));
    let t = start(dir.path(), true).await;
    assert_eq!(t.reservation_state(1).unwrap(), (None, vec![]));
    t.shutdown();
    drop(t);

    // PTPL on, then off again (Set Features Reservation Persistence, FID 83h): nothing is
    // restored either.
    let t = start(dir.path(), true).await;
    let a = Initiator::connect(t.local_addr(), host("a", 1))
        .await
        .unwrap();
    claim_and_register(&t, &a, Cptpl::Persist, 0xA).await;
    assert_eq!(get_ptpl(&a).await, 1);
    set_ptpl(&a, false).await.unwrap();
    assert_eq!(get_ptpl(&a).await, 0);
    t.shutdown();
    drop((a, t));
    let t = start(dir.path(), true).await;
    assert_eq!(t.reservation_state(1).unwrap(), (None, vec![]));
    t.shutdown();
    drop(t);

    // A target without a reservation directory cannot persist: RESCAP bit 0 clear, CPTPL
    // ignored, PTPL not changeable.
    let t = start(dir.path(), false).await;
    let a = Initiator::connect(t.local_addr(), host("a", 1))
        .await
        .unwrap();
    assert_eq!(a.identify_namespace(1).await.unwrap().rescap & 1, 0);
    claim_and_register(&t, &a, Cptpl::Persist, 0xA).await;
    assert!(!a.reservation_report(1).await.unwrap().ptpl);
    assert_eq!(
        status_of(set_ptpl(&a, true).await),
        Status::FEATURE_NOT_CHANGEABLE
    );
    t.shutdown();
}

/// A corrupt state file: the target starts with no reservation (logged), never a panic.
#[tokio::test]
async fn a_corrupt_state_file_gives_an_empty_state() {
    let dir = tempfile::tempdir().unwrap();
    let t = start(dir.path(), true).await;
    let a = Initiator::connect(t.local_addr(), host("a", 1))
        .await
        .unwrap();
    claim_and_register(&t, &a, Cptpl::Persist, 0xA).await;
    t.shutdown();
    drop((a, t));
    let file = dir.path().join("resv/nvme-ns1.reservations");
    let mut b = std::fs::read(&file).unwrap();
    b[20] ^= 0xFF;
    std::fs::write(&file, &b).unwrap();
    let t = start(dir.path(), true).await;
    assert_eq!(t.reservation_state(1).unwrap(), (None, vec![]));
    // And it works from there: a new claim is stored again.
    let a = Initiator::connect(t.local_addr(), host("a", 1))
        .await
        .unwrap();
    claim_and_register(&t, &a, Cptpl::Persist, 0xA).await;
    t.shutdown();
    drop((a, t));
    let t = start(dir.path(), true).await;
    assert_eq!(t.reservation_state(1).unwrap().1.len(), 2);
    t.shutdown();
}

async fn get_ptpl(ini: &Initiator) -> u32 {
    let mut s = Sqe::new(AdminOpc::GET_FEATURES.0);
    s.set_nsid(1);
    s.set_cdw(10, 0x83);
    ini.admin_cmd(s, None, 0).await.unwrap().cqe.dw0
}

async fn set_ptpl(ini: &Initiator, on: bool) -> Result<(), Error> {
    let mut s = Sqe::new(AdminOpc::SET_FEATURES.0);
    s.set_nsid(1);
    s.set_cdw(10, 0x83);
    s.set_cdw(11, on as u32);
    ini.admin_cmd(s, None, 0).await.map(|_| ())
}
