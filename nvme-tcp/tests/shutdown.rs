//! `Target::shutdown_and_wait`: once it returns, no command of the target touches the backend
//! any more (pnfsd unmounts its store right after it).

mod common;
use bytes::Bytes;
use common::{host, BS, NQN, UUID};
use nvme_tcp::{Backend, Initiator, MemBackend, NamespaceConfig, Target, TargetConfig};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

/// A slow backend that counts calls running, and calls that began or ended after `closed`.
struct Watched {
    inner: MemBackend,
    running: AtomicUsize,
    started: AtomicUsize,
    closed: AtomicBool,
    after_close: AtomicUsize,
}

impl Watched {
    fn call<T>(&self, f: impl FnOnce() -> T) -> T {
        if self.closed.load(SeqCst) {
            self.after_close.fetch_add(1, SeqCst);
        }
        self.running.fetch_add(1, SeqCst);
        self.started.fetch_add(1, SeqCst);
        // Slow enough that commands are always in flight when the target stops.
        std::thread::sleep(Duration::from_millis(30));
        let r = f();
        self.running.fetch_sub(1, SeqCst);
        if self.closed.load(SeqCst) {
            self.after_close.fetch_add(1, SeqCst);
        }
        r
    }
}

impl Backend for Watched {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.call(|| self.inner.read_at(buf, offset))
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.call(|| self.inner.write_at(buf, offset))
    }
    fn flush(&self) -> io::Result<()> {
        self.call(|| self.inner.flush())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_shutdown_and_wait_no_command_reaches_the_backend() {
    let b = Arc::new(Watched {
        inner: MemBackend::new(256, BS),
        running: AtomicUsize::new(0),
        started: AtomicUsize::new(0),
        closed: AtomicBool::new(false),
        after_close: AtomicUsize::new(0),
    });
    let cfg = TargetConfig::new(
        NQN,
        vec![NamespaceConfig {
            nsid: 1,
            backend: b.clone(),
            volume_uuid: UUID,
        }],
    );
    let target = Target::bind("127.0.0.1:0", cfg).await.unwrap();
    target.spawn();
    // Two hosts, several queues each, every queue kept busy with writes and flushes.
    let mut writers = Vec::new();
    for h in ["a", "b"] {
        let ini = Arc::new(
            Initiator::connect(target.local_addr(), host(h, 3))
                .await
                .unwrap(),
        );
        for w in 0..8u64 {
            let ini = ini.clone();
            writers.push(tokio::spawn(async move {
                let mut i = 0u64;
                loop {
                    let r = if i % 5 == 4 {
                        ini.flush(1).await
                    } else {
                        let data = Bytes::from(vec![w as u8; BS as usize]);
                        ini.write(1, (w * 16 + i) % 256, data, BS, false).await
                    };
                    if r.is_err() {
                        return;
                    }
                    i += 1;
                }
            }));
        }
    }
    while b.started.load(SeqCst) < 20 || b.running.load(SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(target.shutdown_and_wait(Duration::from_secs(10)).await);
    b.closed.store(true, SeqCst);
    assert_eq!(b.running.load(SeqCst), 0, "backend calls still running");
    // Whatever the hosts still had queued or in flight must not start now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        b.after_close.load(SeqCst),
        0,
        "backend touched after the wait"
    );
    for w in writers {
        let ended = tokio::time::timeout(Duration::from_secs(10), w).await;
        assert!(ended.is_ok(), "a writer did not see its queue end");
    }
    assert_eq!(target.controller_count(), 0);
}
