//! `NvmeDev` against the crate's own target over loopback, on a runtime of the test's own.

use std::sync::Arc;
use std::time::Duration;

use metalog::BlockDev;
use nvme_tcp::{FileBackend, NamespaceConfig, NamespaceIds, Target, TargetConfig};

use super::*;
use crate::store::{
    Attr, DirChange, NewNode, SetAttrs, Stable, Store, StoreError, StoreOptions, ROOT_INO,
};

const NQN: &str = "nqn.2026-11.org.pnfsd:test-ext";
const UUID: [u8; 16] = [0x42; 16];

/// A target exporting `path` (a file of `size` bytes) as namespace 1, on its own runtime.
struct TestTarget {
    rt: tokio::runtime::Runtime,
    target: Target,
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl TestTarget {
    fn start(size: u64) -> TestTarget {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ext.img");
        std::fs::File::create(&path).unwrap().set_len(size).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let backend = Arc::new(FileBackend::open(&path, 4096).unwrap());
        let ns = NamespaceConfig {
            nsid: 1,
            backend,
            volume_uuid: UUID,
        };
        let target =
            Target::start_on(&rt, "127.0.0.1:0", TargetConfig::new(NQN, vec![ns])).unwrap();
        TestTarget {
            rt,
            target,
            path,
            _dir: dir,
        }
    }

    fn spec(&self) -> NvmeVolumeSpec {
        let mut s = NvmeVolumeSpec::parse(&format!(
            "nvme-tcp://{}/{NQN}?timeout=5",
            self.target.local_addr()
        ))
        .unwrap();
        s.io_queues = 2;
        s
    }
}

impl Drop for TestTarget {
    fn drop(&mut self) {
        self.target.shutdown();
        let _g = self.rt.enter();
    }
}

#[test]
fn reads_writes_fua_flush_and_identity() {
    let t = TestTarget::start(8 << 20);
    let d = NvmeDev::connect(&t.spec()).unwrap();
    assert_eq!(d.size(), 8 << 20);
    assert_eq!(d.namespace_info().block_size, 4096);
    // The embedded-target convention: NGUID = the volume UUID, EUI-64 derived from it.
    let ids = NamespaceIds::from_volume_uuid(UUID);
    assert_eq!(d.namespace_info().nguid, UUID);
    assert_eq!(d.namespace_info().eui64, ids.eui64);
    assert_eq!(d.designator(), Some(UUID.to_vec()));
    // Larger than the target's MDTS (512 KiB): split into several commands.
    let big: Vec<u8> = (0..(2 << 20) + 4096).map(|i| (i * 7 % 251) as u8).collect();
    d.write_at(&big, 1 << 20).unwrap();
    let mut back = vec![0u8; big.len()];
    d.read_at(&mut back, 1 << 20).unwrap();
    assert!(back == big, "big read differs");
    // Unaligned: read-modify-write keeps the neighbours.
    d.write_fua(b"hello, volume", (1 << 20) + 4090).unwrap();
    let mut b = vec![0u8; 20];
    d.read_at(&mut b, (1 << 20) + 4087).unwrap();
    assert_eq!(&b[..3], &big[4087..4090]);
    assert_eq!(&b[3..16], b"hello, volume");
    assert_eq!(&b[16..], &big[4103..4107]);
    d.flush().unwrap();
    // What the target's file holds after the Flush.
    let file = std::fs::read(&t.path).unwrap();
    assert_eq!(&file[(1 << 20) + 4090..(1 << 20) + 4103], b"hello, volume");
    assert_eq!(file[(3 << 20) + 4095], big[big.len() - 1]);
    // Out of range is refused before anything is sent.
    assert!(d.write_at(&[0; 4096], 8 << 20).is_err());
    assert!(d.read_at(&mut [0; 1], 8 << 20).is_err());
    d.disconnect().unwrap();
    let e = d.read_at(&mut [0; 4096], 0).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotConnected);
}

#[test]
fn a_store_on_the_namespace_survives_a_remount() {
    let t = TestTarget::start(64 << 20);
    let dev: Arc<dyn BlockDev> = Arc::new(NvmeDev::connect(&t.spec()).unwrap());
    Store::mkfs_dev(dev.clone(), false).unwrap();
    assert!(matches!(
        Store::mkfs_dev(dev.clone(), false),
        Err(StoreError::Exist)
    ));
    let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
    let (a, _) = create_file(&s, b"f").unwrap();
    let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    s.write(a.ino, 100, &data, Stable::FileSync).unwrap();
    drop(s); // no unmount: the next mount recovers the log over NVMe/TCP
    drop(dev);
    let dev: Arc<dyn BlockDev> = Arc::new(NvmeDev::connect(&t.spec()).unwrap());
    let s = Store::open_dev(dev, StoreOptions::default()).unwrap();
    let f = s.lookup(ROOT_INO, b"f").unwrap();
    assert_eq!(f.size, 10_100);
    assert_eq!(s.read(f.ino, 100, 10_000).unwrap().0, data);
    s.unmount().unwrap();
}

#[test]
fn a_lost_target_is_an_io_error_and_shuts_the_log_down() {
    let t = TestTarget::start(64 << 20);
    let dev: Arc<dyn BlockDev> = Arc::new(NvmeDev::connect(&t.spec()).unwrap());
    Store::mkfs_dev(dev.clone(), false).unwrap();
    let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
    t.target.shutdown();
    // The initiator notices the closed sockets; no call may hang or panic.
    let mut kinds = Vec::new();
    for _ in 0..50 {
        match dev.flush() {
            Err(e) => {
                kinds.push(e.kind());
                break;
            }
            Ok(()) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    assert!(!kinds.is_empty(), "flush kept succeeding after shutdown");
    // One lost queue loses the device: every later call fails, whichever queue it would use.
    for _ in 0..4 {
        let e = dev.write_fua(&[1; 4096], 4096).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotConnected, "{e}");
    }
    let r = create_file(&s, b"g");
    assert!(matches!(r, Err(StoreError::Io(_))), "{r:?}");
    // Shut down: later commits fail the same way.
    let r = create_file(&s, b"h");
    assert!(r.is_err());
}

#[test]
fn a_silent_target_times_out() {
    // Accepts TCP and never answers the ICReq.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut spec = NvmeVolumeSpec::parse(&format!(
        "nvme-tcp://{}/{NQN}?timeout=1",
        l.local_addr().unwrap()
    ))
    .unwrap();
    spec.io_queues = 1;
    let t0 = std::time::Instant::now();
    match NvmeDev::connect(&spec) {
        Err(NvmeVolumeError::Connect { err, .. }) => {
            assert_eq!(err.kind(), io::ErrorKind::TimedOut)
        }
        r => panic!("{r:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(30));
    // Nobody listening: refused at once.
    drop(l);
    assert!(NvmeDev::connect(&spec).is_err());
}

#[test]
fn usable_and_droppable_inside_another_runtime() {
    let t = TestTarget::start(8 << 20);
    let spec = t.spec();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let d = NvmeDev::connect(&spec).unwrap();
        d.write_at(&[5; 8192], 0).unwrap();
        let mut b = [0u8; 8192];
        d.read_at(&mut b, 0).unwrap();
        assert!(b.iter().all(|&x| x == 5));
        drop(d); // shutdown_background: no panic inside a runtime
                 // A failed connect (no namespace 2) drops its runtime inside this one too.
        let mut bad = spec.clone();
        bad.nsid = 2;
        assert!(NvmeDev::connect(&bad).is_err());
    });
}

#[test]
fn errors_map_to_kinds_that_say_whether_the_connection_is_gone() {
    use nvme_tcp::{Error as E, Status};
    let k = |e| to_io(e).kind();
    assert_eq!(k(E::Closed), io::ErrorKind::NotConnected);
    assert_eq!(k(E::Protocol("x".into())), io::ErrorKind::ConnectionAborted);
    // A command status leaves the connection usable: not one of the "lost" kinds.
    assert_eq!(k(E::Status(Status::LBA_OUT_OF_RANGE)), io::ErrorKind::Other);
    assert_eq!(k(E::Config("x".into())), io::ErrorKind::InvalidInput);
    let e = to_io(E::Status(Status::INVALID_FIELD)).to_string();
    assert!(e.contains("NVMe/TCP command failed"), "{e}");
    // Refused by reservation: this MDS was fenced, whether or not Do Not Retry is set.
    for s in [Status::RESERVATION_CONFLICT, Status(0x0083)] {
        let e = to_io(E::Status(s));
        assert!(
            is_fenced_error(&e) && e.to_string().contains("fenced"),
            "{e}"
        );
    }
    assert!(!is_fenced_error(&to_io(E::Status(Status::ACCESS_DENIED))));
}

/// A regular file `name` in the root, owned by root.
fn create_file(s: &Store, name: &[u8]) -> Result<(Attr, DirChange), StoreError> {
    s.create(
        ROOT_INO,
        name,
        NewNode::Regular,
        &SetAttrs::default(),
        (0, 0),
    )
}

// ---- the MDS's claim and fencing (fence.rs, docs/ha.md) ----------------------------------

const KEY_A: u64 = u64::from_be_bytes(*b"pnfsdMDA");
const KEY_B: u64 = u64::from_be_bytes(*b"pnfsdMDB");
const EA_RO: nvme_tcp::RType = nvme_tcp::RType::EXCLUSIVE_ACCESS_REG_ONLY;

impl TestTarget {
    /// The namespace as MDS node `node` reaches it (its own host NQN, hence Host ID).
    fn node(&self, node: &str) -> NvmeDev {
        let mut s = self.spec();
        s.hostnqn = format!("nqn.2026-11.org.pnfsd:mds-{node}");
        NvmeDev::connect(&s).unwrap()
    }

    fn bytes_at(&self, off: u64, len: usize) -> Vec<u8> {
        let f = std::fs::read(&self.path).unwrap();
        f[off as usize..off as usize + len].to_vec()
    }
}

#[test]
fn a_held_volume_is_refused_and_taken_over_only_when_told() {
    let t = TestTarget::start(8 << 20);
    let a = t.node("a");
    assert_eq!(
        claim_metadata(&a, KEY_A, EA_RO, false).unwrap(),
        Claimed::Fresh
    );
    a.write_at(&[1; 4096], 4096).unwrap();

    let b = t.node("b");
    let e = claim_metadata(&b, KEY_B, EA_RO, false).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, ClaimError::HeldByOther { .. }), "{msg}");
    assert!(
        msg.contains("--takeover") && msg.contains("pnfsdMDA"),
        "{msg}"
    );
    // Refused: B changed nothing, A still writes.
    a.write_at(&[2; 4096], 4096).unwrap();
    assert!(!a.is_fenced());

    let took = claim_metadata(&b, KEY_B, EA_RO, true).unwrap();
    assert_eq!(
        took,
        Claimed::TookOver {
            hostid: a.hostid(),
            key: KEY_A
        }
    );
    // The old holder's next command is refused by reservation: fenced, and it lands nowhere.
    let e = a.write_at(&[3; 4096], 8192).unwrap_err();
    assert!(is_fenced_error(&e), "{e}");
    assert!(a.is_fenced() && a.is_lost());
    assert_eq!(t.bytes_at(8192, 4096), vec![0; 4096]);
    // Nothing more is even sent.
    let e = a.flush().unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotConnected, "{e}");
    b.write_at(&[4; 4096], 8192).unwrap();
    assert!(still_holder(&b).unwrap());
    assert_eq!(t.bytes_at(4096, 1), [2]);
}

#[test]
fn a_paused_holder_learns_from_the_probe_that_it_was_fenced() {
    let t = TestTarget::start(8 << 20);
    let a = t.node("a");
    claim_metadata(&a, KEY_A, EA_RO, false).unwrap();
    assert!(still_holder(&a).unwrap() && !a.is_fenced());
    let b = t.node("b");
    claim_metadata(&b, KEY_B, EA_RO, true).unwrap();
    assert!(!still_holder(&a).unwrap());
    assert!(a.is_fenced());
    // A restarted A finds B holding the volume, and is refused without --takeover.
    drop(a);
    let a = t.node("a");
    let msg = claim_metadata(&a, KEY_A, EA_RO, false)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("pnfsdMDB"), "{msg}");
}

#[test]
fn a_restart_of_the_holder_claims_again_and_the_same_key_elsewhere_is_refused() {
    let t = TestTarget::start(8 << 20);
    let a = t.node("a");
    claim_metadata(&a, KEY_A, EA_RO, false).unwrap();
    drop(a);
    let a = t.node("a");
    assert_eq!(
        claim_metadata(&a, KEY_A, EA_RO, false).unwrap(),
        Claimed::Again
    );
    // Another node configured with A's key: refused even with --takeover.
    let c = t.node("c");
    let e = claim_metadata(&c, KEY_A, EA_RO, true).unwrap_err();
    assert!(matches!(e, ClaimError::SameKey { .. }), "{e}");
    assert!(still_holder(&a).unwrap());
    // The holder changing type (the layout types changed) keeps the claim.
    let we = nvme_tcp::RType::WRITE_EXCLUSIVE;
    assert_eq!(
        claim_metadata(&a, KEY_A, we, false).unwrap(),
        Claimed::Again
    );
    let b = t.node("b");
    b.read_at(&mut [0; 4096], 0).unwrap();
    let e = b.write_at(&[1; 4096], 0).unwrap_err();
    assert!(is_fenced_error(&e), "{e}");
}

#[test]
fn two_nodes_claiming_at_once_one_wins() {
    let t = TestTarget::start(8 << 20);
    for round in 0..5 {
        let (a, b) = (t.node(&format!("a{round}")), t.node(&format!("b{round}")));
        let (ra, rb) = std::thread::scope(|s| {
            let ja = s.spawn(|| claim_metadata(&a, KEY_A, EA_RO, false));
            let jb = s.spawn(|| claim_metadata(&b, KEY_B, EA_RO, false));
            (ja.join().unwrap(), jb.join().unwrap())
        });
        assert!(ra.is_ok() != rb.is_ok(), "round {round}: {ra:?} {rb:?}");
        let loser = if ra.is_ok() { rb } else { ra };
        assert!(
            matches!(loser, Err(ClaimError::HeldByOther { .. })),
            "{loser:?}"
        );
        // Released for the next round: the winner clears the reservation.
        let (w, k) = if still_holder(&a).unwrap_or(false) {
            (&a, KEY_A)
        } else {
            (&b, KEY_B)
        };
        let ini = w.initiator().unwrap();
        w.call(async move {
            ini.reservation_release(1, nvme_tcp::ReleaseAction::Clear, nvme_tcp::RType(0), k)
                .await
                .map_err(to_io)
        })
        .unwrap();
    }
}

#[test]
fn a_store_whose_mds_was_fenced_acknowledges_nothing_more() {
    let t = TestTarget::start(64 << 20);
    let a = Arc::new(t.node("a"));
    claim_metadata(&a, KEY_A, EA_RO, false).unwrap();
    let dev: Arc<dyn BlockDev> = a.clone();
    Store::mkfs_dev(dev.clone(), false).unwrap();
    let s = Store::open_dev(dev, StoreOptions::default()).unwrap();
    let (f, _) = create_file(&s, b"before").unwrap();
    s.write(f.ino, 0, b"acknowledged", Stable::FileSync)
        .unwrap();

    let b = Arc::new(t.node("b"));
    claim_metadata(&b, KEY_B, EA_RO, true).unwrap();
    let image = std::fs::read(&t.path).unwrap();
    // A keeps going as if nothing happened: every commit fails, none is acknowledged.
    assert!(create_file(&s, b"after").is_err());
    assert!(s.write(f.ino, 0, b"late", Stable::FileSync).is_err());
    assert!(a.is_fenced());
    drop(s);
    assert!(
        std::fs::read(&t.path).unwrap() == image,
        "the fenced MDS wrote the volume"
    );
    // B recovers A's log and finds every acknowledged change, and nothing else.
    let s = Store::open_dev(b, StoreOptions::default()).unwrap();
    let f = s.lookup(ROOT_INO, b"before").unwrap();
    assert_eq!(s.read(f.ino, 0, 12).unwrap().0, b"acknowledged");
    assert!(s.lookup(ROOT_INO, b"after").is_err());
    s.unmount().unwrap();
}
