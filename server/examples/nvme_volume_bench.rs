//! What an external NVMe/TCP volume costs the store, as ratios to a local `FileDev` in the
//! same run: `cargo run --release -p pnfsd --example nvme_volume_bench [-- SECONDS [DIR]]`.
//!
//! Two files in DIR (default: the system temp dir): one opened as `FileDev` (O_DIRECT where the
//! file system allows it), the other exported by the crate's target over loopback the way
//! `pnfsd serve` exports its volume (`VolumeBackend` over a `FileDev`) and opened through
//! `NvmeDev`. Cases, 4 KiB each: random reads at QD 1; `write_fua` at QD 1 (a log commit
//! record, docs/design.md §3); `write_at` + `flush` from 4 threads (concurrent LAYOUTCOMMITs'
//! data flushes); random writes from 4 threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metalog::{BlockDev, FileDev};
use nvme_tcp::{NamespaceConfig, Target, TargetConfig};
use pnfsd::nvme::volume::{NvmeDev, NvmeVolumeSpec};
use pnfsd::nvme::VolumeBackend;

const SIZE: u64 = 256 << 20;
const BS: usize = 4096;

type Case = fn(&dyn BlockDev, &mut u64);

fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn rand_off(x: &mut u64) -> u64 {
    next(x) % (SIZE / BS as u64) * BS as u64
}

fn read(d: &dyn BlockDev, x: &mut u64) {
    let mut b = [0u8; BS];
    d.read_at(&mut b, rand_off(x)).unwrap();
}

fn fua(d: &dyn BlockDev, x: &mut u64) {
    d.write_fua(&[7u8; BS], rand_off(x)).unwrap();
}

fn write_flush(d: &dyn BlockDev, x: &mut u64) {
    d.write_at(&[8u8; BS], rand_off(x)).unwrap();
    d.flush().unwrap();
}

fn write(d: &dyn BlockDev, x: &mut u64) {
    d.write_at(&[9u8; BS], rand_off(x)).unwrap();
}

/// CPU seconds (user + system) so far of this process ("": every thread, also those that
/// ended), or of its live threads whose name starts with `prefix`.
fn cpu_secs(prefix: &str) -> f64 {
    if prefix.is_empty() {
        return bench_cpu::process().map_or(f64::NAN, bench_cpu::CpuTime::total);
    }
    bench_cpu::threads().map_or(f64::NAN, |threads| {
        threads
            .iter()
            .filter(|(comm, _)| comm.starts_with(prefix))
            .map(|(_, t)| t.total())
            .sum()
    })
}

/// Operations per second of `op` from `threads` threads over `secs`, and the CPU µs per
/// operation of the whole process and of the `NvmeDev` runtime's threads (the initiator).
fn measured(dev: Arc<dyn BlockDev>, threads: usize, secs: f64, op: Case) -> (f64, f64, f64) {
    let (c0, i0) = (cpu_secs(""), cpu_secs("nvme-volume"));
    let t0 = Instant::now();
    let rate = run(dev, threads, secs, op);
    let n = rate * t0.elapsed().as_secs_f64();
    let (c1, i1) = (cpu_secs(""), cpu_secs("nvme-volume"));
    ((rate), (c1 - c0) * 1e6 / n, (i1 - i0) * 1e6 / n)
}

/// Operations per second of `op` from `threads` threads over `secs`.
fn run(dev: Arc<dyn BlockDev>, threads: usize, secs: f64, op: Case) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let hs: Vec<_> = (0..threads)
        .map(|i| {
            let (dev, stop, ops) = (dev.clone(), stop.clone(), ops.clone());
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (i as u64 + 1);
                while !stop.load(Ordering::Relaxed) {
                    op(&*dev, &mut x);
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    ops.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let dir = match args.next() {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let local: Arc<dyn BlockDev> =
        Arc::new(FileDev::create(&dir.path().join("local.img"), SIZE).unwrap());
    let exported = Arc::new(FileDev::create(&dir.path().join("exported.img"), SIZE).unwrap());
    // Write every block once so reads and overwrites never hit sparse holes on either side.
    for d in [&local, &(exported.clone() as Arc<dyn BlockDev>)] {
        let chunk = vec![1u8; 1 << 20];
        for off in (0..SIZE).step_by(chunk.len()) {
            d.write_at(&chunk, off).unwrap();
        }
        d.flush().unwrap();
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    let nqn = "nqn.2026-11.org.pnfsd:bench";
    let ns = NamespaceConfig {
        nsid: 1,
        backend: Arc::new(VolumeBackend::new(exported)),
        volume_uuid: [3; 16],
    };
    let target = Target::start_on(&rt, "127.0.0.1:0", TargetConfig::new(nqn, vec![ns])).unwrap();
    let url = format!("nvme-tcp://{}/{nqn}?io_queues=2", target.local_addr());
    let nvme: Arc<dyn BlockDev> =
        Arc::new(NvmeDev::connect(&NvmeVolumeSpec::parse(&url).unwrap()).unwrap());

    let cases: [(&str, usize, Case); 5] = [
        ("4K random read, QD1", 1, read),
        ("4K random read, 32 threads", 32, read),
        ("4K write_fua, QD1", 1, fua),
        ("4K write + flush, 4 threads", 4, write_flush),
        ("4K random write, 4 threads", 4, write),
    ];
    println!("{secs} s per case; FileDev vs NvmeDev over loopback (same machine, same run)");
    println!(
        "{:<30} {:>10} {:>10} {:>6}  {:>8} {:>8} {:>8}",
        "case", "FileDev/s", "NvmeDev/s", "ratio", "cpu µs F", "N", "N: ini"
    );
    for (name, threads, op) in cases {
        let (f, fc, _) = measured(local.clone(), threads, secs, op);
        let (n, nc, ni) = measured(nvme.clone(), threads, secs, op);
        println!(
            "{name:<30} {f:>10.0} {n:>10.0} {:>6.2}  {fc:>8.1} {nc:>8.1} {ni:>8.1}",
            n / f
        );
    }
    target.shutdown();
    rt.shutdown_background();
}
