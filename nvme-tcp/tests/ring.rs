//! The io_uring I/O path (`tgt/ring/`): O_DIRECT reads and writes byte for byte at queue
//! depth, and every short or failed ring transfer repeated on the blocking path, which then
//! answers with the data or the backend's error status.

mod common;
use bytes::Bytes;
use common::*;
use nvme_tcp::{
    Backend, Error, FileBackend, Initiator, IoFile, MemBackend, NamespaceConfig, Status, Target,
    TargetConfig,
};
use rand::{Rng, SeedableRng};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

async fn serve(backend: Arc<dyn Backend>) -> Target {
    let cfg = TargetConfig::new(
        NQN,
        vec![NamespaceConfig {
            nsid: 1,
            backend,
            volume_uuid: UUID,
        }],
    );
    let target = Target::bind("127.0.0.1:0", cfg).await.unwrap();
    target.spawn();
    target
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o_direct_reads_and_writes_at_queue_depth_byte_for_byte() {
    const TASKS: usize = 32;
    const REGION: u64 = 64; // blocks each task owns
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    drop(FileBackend::create(&path, TASKS as u64 * REGION * BS as u64, BS).unwrap());
    let Ok(backend) = FileBackend::open_direct(&path, BS) else {
        eprintln!("O_DIRECT not supported here: skipped");
        return;
    };
    let target = serve(Arc::new(backend)).await;
    let mut cfg = host("direct", 2);
    cfg.queue_depth = 32;
    let ini = Arc::new(Initiator::connect(target.local_addr(), cfg).await.unwrap());
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let ini = ini.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
            let base = t as u64 * REGION;
            let mut model = vec![0u8; (REGION * BS as u64) as usize];
            for _ in 0..60 {
                // 4 KiB to 128 KiB: in-capsule writes and R2T-solicited ones.
                let n = [1u32, 1, 2, 8, 32][rng.gen_range(0..5)];
                let off = rng.gen_range(0..=REGION - n as u64);
                let range = (off * BS as u64) as usize..((off + n as u64) * BS as u64) as usize;
                if rng.gen_bool(0.5) {
                    let data: Vec<u8> = (0..range.len()).map(|_| rng.gen()).collect();
                    model[range].copy_from_slice(&data);
                    ini.write(1, base + off, Bytes::from(data), BS, false)
                        .await
                        .unwrap();
                } else {
                    let got = ini.read(1, base + off, n, BS).await.unwrap();
                    assert_eq!(got, model[range], "task {t} read mismatch");
                }
            }
            model
        }));
    }
    let mut whole = Vec::new();
    for t in tasks {
        whole.extend(t.await.unwrap());
    }
    ini.flush(1).await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), whole);
    target.shutdown();
}

/// Offers the ring an empty read-only file, so every ring read is short and every ring write
/// fails (EBADF); the data really lives in `inner`, reached only by the blocking path.
struct Decoy {
    inner: MemBackend,
    decoy: std::fs::File,
    blocking_calls: AtomicUsize,
    fail_writes: AtomicBool,
}

impl Backend for Decoy {
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.blocking_calls.fetch_add(1, Ordering::Relaxed);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.blocking_calls.fetch_add(1, Ordering::Relaxed);
        if self.fail_writes.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("the medium is gone"));
        }
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn io_file(&self) -> Option<IoFile> {
        Some(IoFile {
            fd: self.decoy.as_raw_fd(),
            // O_DIRECT-like, so plain writes are offered to the ring too (page-cache
            // writes use the batch path).
            direct: true,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_or_failed_ring_transfers_go_to_the_blocking_path() {
    let dir = tempfile::tempdir().unwrap();
    let decoy = dir.path().join("decoy");
    std::fs::write(&decoy, b"").unwrap();
    let backend = Arc::new(Decoy {
        inner: MemBackend::new(64, BS),
        decoy: std::fs::File::open(&decoy).unwrap(),
        blocking_calls: AtomicUsize::new(0),
        fail_writes: AtomicBool::new(false),
    });
    let target = serve(backend.clone()).await;
    let ini = Initiator::connect(target.local_addr(), host("decoy", 1))
        .await
        .unwrap();
    // Writes: FUA ones take the blocking path anyway; plain ones are offered to the ring,
    // fail there with EBADF and are repeated on the blocking path.
    let a: Vec<u8> = (0..2 * BS as usize).map(|i| (i % 251) as u8).collect();
    ini.write(1, 3, Bytes::from(a.clone()), BS, false)
        .await
        .unwrap();
    assert_eq!(backend.blocking_calls.load(Ordering::Relaxed), 1);
    // Reads: the ring reads 0 bytes of the empty decoy (short) → blocking read of `inner`.
    let before = backend.blocking_calls.load(Ordering::Relaxed);
    assert_eq!(ini.read(1, 3, 2, BS).await.unwrap(), a);
    assert_eq!(ini.read(1, 4, 1, BS).await.unwrap(), a[BS as usize..]);
    assert_eq!(
        backend.blocking_calls.load(Ordering::Relaxed),
        before + 2,
        "each short ring read repeated once on the blocking path"
    );
    // A write the blocking path cannot do either: the backend's error status, and the
    // connection keeps serving.
    backend.fail_writes.store(true, Ordering::Relaxed);
    match ini
        .write(1, 0, Bytes::from(vec![1u8; BS as usize]), BS, false)
        .await
    {
        Err(Error::Status(s)) => assert_eq!(s, Status::WRITE_FAULT),
        other => panic!("expected WRITE_FAULT, got {other:?}"),
    }
    assert_eq!(ini.read(1, 3, 2, BS).await.unwrap(), a);
    target.shutdown();
}

/// Context switches so far of this process's threads whose name starts with `prefix`.
fn switches(prefix: &str) -> (u64, usize) {
    let mut total = 0;
    let mut threads = 0;
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        threads += 1;
        let status = std::fs::read_to_string(e.path().join("status")).unwrap_or_default();
        for l in status.lines() {
            if l.starts_with("voluntary_ctxt_switches") || l.starts_with("nonvoluntary_ctxt") {
                total += l.rsplit(':').next().unwrap().trim().parse::<u64>().unwrap();
            }
        }
    }
    (total, threads)
}

/// A queue on its own thread leaves the runtime alone: neither a PDU that arrives on its
/// socket nor a completion on its ring wakes a runtime worker (the socket and the ring are
/// not registered with the reactor). Fails with the socket still registered: every command
/// then woke the target's worker once.
#[test]
fn queue_threads_do_not_wake_the_runtime() {
    const N: u64 = 2000;
    let tgt_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tgt-quiet")
        .enable_all()
        .build()
        .unwrap();
    let ini_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("ini-quiet")
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    let backend = Arc::new(FileBackend::create(&path, 1024 * BS as u64, BS).unwrap());
    let target = tgt_rt.block_on(serve(backend));
    let ini = ini_rt.block_on(async {
        let mut cfg = host("quiet", 1);
        cfg.kato_ms = 0; // no keep-alive timer on the target's worker either
        Initiator::connect(target.local_addr(), cfg).await.unwrap()
    });
    if switches("nvme-tcp-queue").1 == 0 {
        eprintln!("io_uring unavailable: no queue threads, skipped");
        return;
    }
    let before = switches("tgt-quiet").0;
    ini_rt.block_on(async {
        for i in 0..N {
            ini.read(1, i % 1024, 1, BS).await.unwrap();
        }
    });
    let woke = switches("tgt-quiet").0 - before;
    assert!(
        woke < N / 10,
        "the target's runtime switched {woke} times for {N} commands"
    );
    tgt_rt.block_on(async { target.shutdown() });
}
