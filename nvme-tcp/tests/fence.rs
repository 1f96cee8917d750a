//! The target's two fences: `Target::disconnect_host` (pnfsd's `HostGate::fence`, block
//! layout) and an in-process Reservation Acquire, Preempt and Abort (pnfsd's SCSI layout).
//! Once either returns, no command of the fenced host reaches the backend any more: what it
//! already had at the media is waited for; what it sent after is refused, even if it was
//! already read off the socket. Other hosts are untouched.

mod common;
use bytes::Bytes;
use common::{host, BS, NQN, UUID};
use nvme_tcp::{
    AcquireAction, Backend, FileBackend, Initiator, Limits, MemBackend, NamespaceConfig, RType,
    RegisterAction, Status, Target, TargetConfig,
};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A memory backend whose writes wait while `held` is set, and which counts the writes
/// that began or ended once `fenced` was set.
#[derive(Default)]
struct Held {
    inner: Option<MemBackend>,
    held: Mutex<bool>,
    release: Condvar,
    waiting: AtomicUsize,
    fenced: AtomicBool,
    after_fence: AtomicUsize,
}

impl Held {
    fn mem(&self) -> &MemBackend {
        self.inner.as_ref().unwrap()
    }

    fn set_held(&self, on: bool) {
        *self.held.lock().unwrap() = on;
        self.release.notify_all();
    }
}

impl Backend for Held {
    fn block_size(&self) -> u32 {
        self.mem().block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.mem().num_blocks()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.mem().read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.fenced.load(SeqCst) {
            self.after_fence.fetch_add(1, SeqCst);
        }
        self.waiting.fetch_add(1, SeqCst);
        let mut h = self.held.lock().unwrap();
        while *h {
            h = self.release.wait(h).unwrap();
        }
        drop(h);
        self.waiting.fetch_sub(1, SeqCst);
        let r = self.mem().write_at(buf, offset);
        if self.fenced.load(SeqCst) {
            self.after_fence.fetch_add(1, SeqCst);
        }
        r
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}

fn block(b: u8) -> Bytes {
    Bytes::from(vec![b; BS as usize])
}

async fn until(what: &str, f: impl Fn() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A target over a `Held` backend of 64 blocks.
async fn held_target() -> (Target, Arc<Held>) {
    held_target_with(Limits::default()).await
}

async fn held_target_with(limits: Limits) -> (Target, Arc<Held>) {
    let b = Arc::new(Held {
        inner: Some(MemBackend::new(64, BS)),
        ..Held::default()
    });
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

/// Host `a`'s first write is held at the backend and its second sent behind it; then
/// `fence` runs on a blocking thread. It must not return before the first write is
/// released, the second must never run, and nothing of `a`'s may land after it returned.
/// Returns the second write's result.
async fn fence_with_a_write_at_the_media<T: Send + 'static>(
    b: &Arc<Held>,
    a: &Arc<Initiator>,
    fence: impl FnOnce() -> T + Send + 'static,
) -> (T, Result<(), nvme_tcp::Error>) {
    b.set_held(true);
    let w1 = {
        let a = a.clone();
        tokio::spawn(async move { a.write(1, 1, block(1), BS, false).await })
    };
    until("the first write at the backend", || {
        b.waiting.load(SeqCst) == 1
    })
    .await;
    let w2 = {
        let a = a.clone();
        tokio::spawn(async move { a.write(1, 2, block(2), BS, false).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let fence = {
        let b = b.clone();
        tokio::task::spawn_blocking(move || {
            let r = fence();
            b.fenced.store(true, SeqCst);
            r
        })
    };
    // The fence waits for the write at the media.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !fence.is_finished(),
        "the fence returned with a write at the media"
    );
    b.set_held(false);
    let r = fence.await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        b.after_fence.load(SeqCst),
        0,
        "a write of a landed after the fence"
    );
    let mut got = vec![0u8; BS as usize];
    b.mem().read_at(&mut got, u64::from(BS)).unwrap();
    assert_eq!(
        got,
        vec![1u8; BS as usize],
        "the write at the media completed"
    );
    b.mem().read_at(&mut got, 2 * u64::from(BS)).unwrap();
    assert_eq!(got, vec![0u8; BS as usize], "the write sent behind it ran");
    let _ = w1.await.unwrap();
    (r, w2.await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_at_the_media_is_waited_for_and_one_sent_after_is_refused() {
    let (target, b) = held_target().await;
    let a = Arc::new(
        Initiator::connect(target.local_addr(), host("a", 1))
            .await
            .unwrap(),
    );
    let other = Initiator::connect(target.local_addr(), host("b", 1))
        .await
        .unwrap();
    let t = target.clone();
    let (n, w2) = fence_with_a_write_at_the_media(&b, &a, move || {
        t.disconnect_host(&|h| h.nqn.ends_with(":a"))
    })
    .await;
    assert_eq!(n.unwrap(), 1);
    assert!(w2.is_err());
    assert!(a.write(1, 3, block(3), BS, false).await.is_err());
    // The other host is untouched, and nothing of a's ran since.
    b.fenced.store(false, SeqCst);
    other.write(1, 4, block(4), BS, false).await.unwrap();
    assert_eq!(b.after_fence.load(SeqCst), 0);
    assert_eq!(target.controller_count(), 1);
    target.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preempt_and_abort_waits_for_the_write_at_the_media_and_refuses_the_next() {
    let (target, b) = held_target().await;
    let (mds, t) = ([0xAD; 16], RType::EXCLUSIVE_ACCESS_REG_ONLY);
    target
        .reservation_register(1, mds, RegisterAction::Register, false, 0, 0xA)
        .unwrap();
    target
        .reservation_acquire(1, mds, AcquireAction::Acquire, t, 0xA, 0)
        .unwrap();
    let a = Arc::new(
        Initiator::connect(target.local_addr(), host("a", 1))
            .await
            .unwrap(),
    );
    a.reservation_register(1, RegisterAction::Register, false, 0, 0xC)
        .await
        .unwrap();
    let tg = target.clone();
    let (gone, w2) = fence_with_a_write_at_the_media(&b, &a, move || {
        tg.reservation_acquire(1, mds, AcquireAction::PreemptAndAbort, t, 0xA, 0xC)
    })
    .await;
    assert_eq!(gone.unwrap().len(), 1);
    assert!(
        matches!(w2, Err(nvme_tcp::Error::Status(s)) if s == Status::RESERVATION_CONFLICT),
        "{w2:?}"
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
    until("writes flowing", || sent.load(SeqCst) > 500).await;
    let t = target.clone();
    let n = tokio::task::spawn_blocking(move || t.disconnect_host(&|h| h.nqn.ends_with(":a")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(n, 1);
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

/// The same Preempt and Abort sent by another host (the command completes once `a`'s write
/// is off the media).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_preempt_and_abort_completes_after_the_write_at_the_media() {
    let (target, b) = held_target().await;
    let t = RType::EXCLUSIVE_ACCESS_REG_ONLY;
    let m = Arc::new(
        Initiator::connect(target.local_addr(), host("m", 1))
            .await
            .unwrap(),
    );
    m.reservation_register(1, RegisterAction::Register, false, 0, 0xA)
        .await
        .unwrap();
    m.reservation_acquire(1, AcquireAction::Acquire, t, 0xA, 0)
        .await
        .unwrap();
    let a = Arc::new(
        Initiator::connect(target.local_addr(), host("a", 1))
            .await
            .unwrap(),
    );
    a.reservation_register(1, RegisterAction::Register, false, 0, 0xC)
        .await
        .unwrap();
    let rt = tokio::runtime::Handle::current();
    let (r, w2) = fence_with_a_write_at_the_media(&b, &a, move || {
        rt.block_on(m.reservation_acquire(1, AcquireAction::PreemptAndAbort, t, 0xA, 0xC))
    })
    .await;
    r.unwrap();
    assert!(
        matches!(w2, Err(nvme_tcp::Error::Status(s)) if s == Status::RESERVATION_CONFLICT),
        "{w2:?}"
    );
    target.shutdown();
}

/// A write that stays at the media past `fence_drain_ms`: the fence fails rather than return
/// while it may still land, and fails again, without the controller (already ended), until
/// the write is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_whose_wait_runs_out_fails_until_the_write_is_done() {
    let (target, b) = held_target_with(Limits {
        fence_drain_ms: 100,
        ..Limits::default()
    })
    .await;
    let (mds, t) = ([0xAD; 16], RType::EXCLUSIVE_ACCESS_REG_ONLY);
    target
        .reservation_register(1, mds, RegisterAction::Register, false, 0, 0xA)
        .unwrap();
    target
        .reservation_acquire(1, mds, AcquireAction::Acquire, t, 0xA, 0)
        .unwrap();
    let a = Arc::new(
        Initiator::connect(target.local_addr(), host("a", 1))
            .await
            .unwrap(),
    );
    a.reservation_register(1, RegisterAction::Register, false, 0, 0xC)
        .await
        .unwrap();
    b.set_held(true);
    let w1 = {
        let a = a.clone();
        tokio::spawn(async move { a.write(1, 1, block(1), BS, false).await })
    };
    until("the write at the backend", || b.waiting.load(SeqCst) == 1).await;
    let tg = target.clone();
    let preempt = tokio::task::spawn_blocking(move || {
        tg.reservation_acquire(1, mds, AcquireAction::PreemptAndAbort, t, 0xA, 0xC)
    });
    assert_eq!(preempt.await.unwrap(), Err(Status::INTERNAL));
    let of_a = |h: &nvme_tcp::HostRef<'_>| h.nqn.ends_with(":a");
    let tg = target.clone();
    let r = tokio::task::spawn_blocking(move || tg.disconnect_host(&of_a));
    assert!(matches!(
        r.await.unwrap(),
        Err(nvme_tcp::Error::StillInFlight { controllers: 1 })
    ));
    // Ended and gone from the target, but its write is still at the media.
    assert_eq!(target.controller_count(), 0);
    let tg = target.clone();
    let r = tokio::task::spawn_blocking(move || tg.disconnect_host(&of_a));
    assert!(matches!(
        r.await.unwrap(),
        Err(nvme_tcp::Error::StillInFlight { controllers: 1 })
    ));
    b.set_held(false);
    let _ = w1.await.unwrap();
    let tg = target.clone();
    let r = tokio::task::spawn_blocking(move || tg.disconnect_host(&of_a));
    assert_eq!(r.await.unwrap().unwrap(), 0);
    target.shutdown();
}
