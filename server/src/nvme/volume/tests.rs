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
    let e = to_io(E::Status(Status::RESERVATION_CONFLICT)).to_string();
    assert!(e.contains("NVMe/TCP command failed"), "{e}");
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
