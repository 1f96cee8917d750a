//! The target's two fences: `Target::disconnect_host` (pnfsd's `HostGate::fence`, block
//! layout) and an in-process Reservation Acquire, Preempt and Abort (pnfsd's SCSI layout).
//! Once either returns, no command of the fenced host reaches the backend any more: what it
//! already had at the media is waited for; what it sent after is refused, even if it was
//! already read off the socket. Other hosts are untouched.

mod common;
use bytes::Bytes;
use common::{connect_pdu, eventually, host, raw, read_pdu, BS, NQN, UUID};
use nvme_tcp::pdu::{sgl_id, Pdu, Sgl, Sqe};
use nvme_tcp::{
    AcquireAction, Backend, FileBackend, HeldMem, Initiator, Limits, NamespaceConfig, RType,
    RegisterAction, Status, Target, TargetConfig,
};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

type Write = tokio::task::JoinHandle<Result<(), nvme_tcp::Error>>;

fn block(b: u8) -> Bytes {
    Bytes::from(vec![b; BS as usize])
}

/// A target over a `HeldMem` of 64 blocks, with `limits`.
async fn held_target(limits: Limits) -> (Target, Arc<HeldMem>) {
    let b = Arc::new(HeldMem::new(64, BS));
    let mut cfg = TargetConfig::new(
        NQN,
        vec![NamespaceConfig {
            nsid: 1,
            backend: b.clone(),
            volume_uuid: UUID,
        }],
    );
    cfg.limits = limits;
    let target = Target::bind("127.0.0.1:0", cfg).await.unwrap();
    target.spawn();
    (target, b)
}

async fn connect(target: &Target, name: &str) -> Arc<Initiator> {
    Arc::new(
        Initiator::connect(target.local_addr(), host(name, 1))
            .await
            .unwrap(),
    )
}

const MDS: [u8; 16] = [0xAD; 16];
const EXCL_REG: RType = RType::EXCLUSIVE_ACCESS_REG_ONLY;

/// As pnfsd's SCSI layout: the MDS (in process, key 0xA) holds Exclusive Access Registrants
/// Only, and host `a` (connected here) registers key 0xC.
async fn registered_a(target: &Target) -> Arc<Initiator> {
    target
        .reservation_register(1, MDS, RegisterAction::Register, false, 0, 0xA)
        .unwrap();
    target
        .reservation_acquire(1, MDS, AcquireAction::Acquire, EXCL_REG, 0xA, 0)
        .unwrap();
    let a = connect(target, "a").await;
    a.reservation_register(1, RegisterAction::Register, false, 0, 0xC)
        .await
        .unwrap();
    a
}

/// `a` writes block `lba`, which the backend holds at the media; returns once it is there.
async fn write_held_at_the_media(b: &Arc<HeldMem>, a: &Arc<Initiator>, lba: u64) -> Write {
    b.hold(true);
    let begun = b.writes_begun();
    let a = a.clone();
    let w = tokio::spawn(async move { a.write(1, lba, block(lba as u8), BS, false).await });
    eventually("the write at the backend", || b.writes_begun() == begun + 1).await;
    w
}

fn landed(b: &HeldMem, lba: u64) -> bool {
    let mut got = vec![0u8; BS as usize];
    b.mem().read_at(&mut got, lba * u64::from(BS)).unwrap();
    got == vec![lba as u8; BS as usize]
}

/// `a`'s write of block 1 is held at the backend and its write of block 2 sent behind it;
/// then `fence` runs on a blocking thread. It must not return before the first write is
/// released, the second must never run, and nothing of `a`'s may begin or end after it
/// returned. Returns the fence's result and the second write's.
async fn fence_with_a_write_at_the_media<T: Send + 'static>(
    b: &Arc<HeldMem>,
    a: &Arc<Initiator>,
    fence: impl FnOnce() -> T + Send + 'static,
) -> (T, Result<(), nvme_tcp::Error>) {
    let w1 = write_held_at_the_media(b, a, 1).await;
    let w2 = {
        let a = a.clone();
        tokio::spawn(async move { a.write(1, 2, block(2), BS, false).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let fence = {
        let b = b.clone();
        tokio::task::spawn_blocking(move || {
            let r = fence();
            (r, b.writes_begun(), b.writes_done())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !fence.is_finished(),
        "the fence returned with a write at the media"
    );
    b.hold(false);
    let (r, begun, done) = fence.await.unwrap();
    assert_eq!(
        begun, done,
        "a write was still at the media when the fence returned"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        (b.writes_begun(), b.writes_done()),
        (begun, done),
        "a write landed after the fence"
    );
    assert!(landed(b, 1), "the write at the media did not complete");
    assert!(!landed(b, 2), "the write sent behind it ran");
    let _ = w1.await.unwrap();
    (r, w2.await.unwrap())
}

fn conflict(r: &Result<(), nvme_tcp::Error>) -> bool {
    matches!(r, Err(nvme_tcp::Error::Status(s)) if *s == Status::RESERVATION_CONFLICT)
}

fn of_a(h: &nvme_tcp::HostRef<'_>) -> bool {
    h.nqn.ends_with(":a")
}

/// `disconnect_host` on a blocking thread, as pnfsd's tick calls it.
async fn disconnect_a(target: &Target) -> Result<usize, nvme_tcp::Error> {
    let t = target.clone();
    tokio::task::spawn_blocking(move || t.disconnect_host(&of_a))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_at_the_media_is_waited_for_and_one_sent_after_is_refused() {
    let (target, b) = held_target(Limits::default()).await;
    let a = connect(&target, "a").await;
    let other = connect(&target, "b").await;
    let t = target.clone();
    let (n, w2) = fence_with_a_write_at_the_media(&b, &a, move || t.disconnect_host(&of_a)).await;
    assert_eq!(n.unwrap(), 1);
    assert!(w2.is_err());
    assert!(a.write(1, 3, block(3), BS, false).await.is_err());
    // The other host is untouched, and nothing of a's ran since.
    other.write(1, 4, block(4), BS, false).await.unwrap();
    assert!(landed(&b, 4) && !landed(&b, 3));
    assert_eq!(target.controller_count(), 1);
    target.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempt_and_abort_waits_for_the_write_at_the_media_and_refuses_the_next() {
    let (target, b) = held_target(Limits::default()).await;
    let a = registered_a(&target).await;
    let tg = target.clone();
    let (gone, w2) = fence_with_a_write_at_the_media(&b, &a, move || {
        tg.reservation_acquire(1, MDS, AcquireAction::PreemptAndAbort, EXCL_REG, 0xA, 0xC)
    })
    .await;
    assert_eq!(gone.unwrap().len(), 1);
    assert!(conflict(&w2), "{w2:?}");
    target.shutdown();
}

/// The same Preempt and Abort sent by another host (the command completes once `a`'s write
/// is off the media).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_preempt_and_abort_completes_after_the_write_at_the_media() {
    let (target, b) = held_target(Limits::default()).await;
    let m = connect(&target, "m").await;
    m.reservation_register(1, RegisterAction::Register, false, 0, 0xA)
        .await
        .unwrap();
    m.reservation_acquire(1, AcquireAction::Acquire, EXCL_REG, 0xA, 0)
        .await
        .unwrap();
    let a = connect(&target, "a").await;
    a.reservation_register(1, RegisterAction::Register, false, 0, 0xC)
        .await
        .unwrap();
    let rt = tokio::runtime::Handle::current();
    let (r, w2) = fence_with_a_write_at_the_media(&b, &a, move || {
        rt.block_on(m.reservation_acquire(1, AcquireAction::PreemptAndAbort, EXCL_REG, 0xA, 0xC))
    })
    .await;
    r.unwrap();
    assert!(conflict(&w2), "{w2:?}");
    target.shutdown();
}

/// A write that stays at the media past `fence_drain_ms`: the fence fails rather than return
/// while it may still land, and fails again until the write is done: `disconnect_host`
/// without the controller (already ended), and the preempt's retry (pnfsd's, a lease later),
/// which finds the key gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_whose_wait_runs_out_fails_until_the_write_is_done() {
    let (target, b) = held_target(Limits {
        fence_drain_ms: 100,
        ..Limits::default()
    })
    .await;
    let a = registered_a(&target).await;
    let w1 = write_held_at_the_media(&b, &a, 1).await;
    let preempt = || {
        let tg = target.clone();
        tokio::task::spawn_blocking(move || {
            tg.reservation_acquire(1, MDS, AcquireAction::PreemptAndAbort, EXCL_REG, 0xA, 0xC)
        })
    };
    assert_eq!(preempt().await.unwrap(), Err(Status::INTERNAL));
    assert_eq!(preempt().await.unwrap(), Err(Status::INTERNAL));
    let still = |r: Result<usize, nvme_tcp::Error>| {
        matches!(r, Err(nvme_tcp::Error::StillInFlight { controllers: 1 }))
    };
    assert!(still(disconnect_a(&target).await));
    // Ended and gone from the target, but its write is still at the media.
    assert_eq!(target.controller_count(), 0);
    assert!(still(disconnect_a(&target).await));
    b.hold(false);
    let _ = w1.await.unwrap();
    assert_eq!(disconnect_a(&target).await.unwrap(), 0);
    // The retry now finds what pnfsd takes for "nothing left to fence".
    let r = preempt().await.unwrap();
    assert!(
        matches!(r, Err(s) if s.same_code(Status::RESERVATION_CONFLICT)),
        "{r:?}"
    );
    target.shutdown();
}

/// Through the io_uring engine (O_DIRECT writes on a file, several queues at depth, writes
/// always in the kernel): once `disconnect_host` returns, the file no longer changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_disconnect_host_a_busy_hosts_direct_writes_no_longer_land() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    drop(FileBackend::create(&path, 256 * u64::from(BS), BS).unwrap());
    let Ok(backend) = FileBackend::open_direct(&path, BS) else {
        eprintln!("O_DIRECT not supported here: skipped");
        return;
    };
    let cfg = TargetConfig::new(
        NQN,
        vec![NamespaceConfig {
            nsid: 1,
            backend: Arc::new(backend),
            volume_uuid: UUID,
        }],
    );
    let target = Target::bind("127.0.0.1:0", cfg).await.unwrap();
    target.spawn();
    let mut cfg = host("a", 3);
    cfg.queue_depth = 32;
    let a = Arc::new(Initiator::connect(target.local_addr(), cfg).await.unwrap());
    let sent = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..24u64 {
        let (a, sent) = (a.clone(), sent.clone());
        writers.push(tokio::spawn(async move {
            for i in 1u64.. {
                let data = Bytes::from(vec![(w + i) as u8; BS as usize]);
                if a.write(1, (w * 8 + i) % 192, data, BS, false)
                    .await
                    .is_err()
                {
                    return;
                }
                sent.fetch_add(1, SeqCst);
            }
        }));
    }
    eventually("writes flowing", || sent.load(SeqCst) > 500).await;
    assert_eq!(disconnect_a(&target).await.unwrap(), 1);
    let before = std::fs::read(&path).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        std::fs::read(&path).unwrap() == before,
        "the volume changed after disconnect_host returned"
    );
    for w in writers {
        let ended = tokio::time::timeout(Duration::from_secs(10), w).await;
        assert!(ended.is_ok(), "a writer did not see its queue end");
    }
    target.shutdown();
}

/// A controller its host ended (the admin queue gone) while a write of its was at the media:
/// a fence afterwards still waits for that write, though the controller is no longer listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_waits_for_the_write_of_a_controller_already_ended() {
    let (target, b) = held_target(Limits::default()).await;
    let addr = target.local_addr();
    let cfg = host("a", 0);
    let admin = Initiator::connect(addr, cfg.clone()).await.unwrap();
    // Its I/O queue by hand, so that the admin queue can go while the write waits.
    let mut q = raw(addr).await;
    q.write_all(&connect_pdu(1, admin.cntlid(), 0, &cfg.hostnqn, cfg.hostid))
        .await
        .unwrap();
    assert!(matches!(read_pdu(&mut q).await, Pdu::CapsuleResp(c) if c.status.is_success()));
    b.hold(true);
    let mut w = Sqe::new(0x01);
    w.set_cid(7);
    w.set_nsid(1);
    w.set_cdw(10, 1);
    w.set_sgl(Sgl {
        addr: 0,
        len: BS,
        id: sgl_id::DATA_OFFSET,
    });
    let mut pdu = Vec::new();
    Pdu::CapsuleCmd(w, block(1)).encode(Default::default(), &mut pdu);
    q.write_all(&pdu).await.unwrap();
    eventually("the write at the backend", || b.writes_begun() == 1).await;
    drop(admin);
    eventually("the controller ended", || target.controller_count() == 0).await;
    let fence = {
        let t = target.clone();
        tokio::task::spawn_blocking(move || t.disconnect_host(&of_a))
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !fence.is_finished(),
        "the fence returned with a write at the media"
    );
    b.hold(false);
    assert_eq!(fence.await.unwrap().unwrap(), 0);
    assert_eq!(b.writes_begun(), b.writes_done());
    assert!(landed(&b, 1));
    target.shutdown();
}
