//! 4 KiB random read and write IOPS at queue depth 1 and 32: through the NVMe/TCP target and
//! initiator on loopback, and with direct pread/pwrite on the same file, in one run; prints
//! the ratios (issue 5 asks for ≥ 0.8 at QD32).
//!
//! `cargo run --release -p nvme-tcp --example bench [-- <seconds per case> [file]]`

use bytes::Bytes;
use nvme_tcp::{FileBackend, Initiator, InitiatorConfig, NamespaceConfig, Target, TargetConfig};
use rand::{Rng, SeedableRng};
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BS: u64 = 4096;
const SIZE: u64 = 256 << 20;
const BLOCKS: u64 = SIZE / BS;

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Read,
    Write,
}

fn direct(path: &Path, odirect: bool, op: Op, qd: usize, secs: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let threads: Vec<_> = (0..qd)
        .map(|t| {
            let (stop, count) = (stop.clone(), count.clone());
            let mut opts = OpenOptions::new();
            opts.read(true).write(true);
            if odirect {
                opts.custom_flags(libc::O_DIRECT);
            }
            let f = opts.open(path).expect("open");
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
                // O_DIRECT needs an aligned buffer: carve one out of a larger Vec.
                let mut backing = vec![0u8; 2 * BS as usize];
                let o = backing.as_ptr().align_offset(BS as usize);
                let buf = &mut backing[o..o + BS as usize];
                rng.fill(&mut buf[..]);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let off = rng.gen_range(0..BLOCKS) * BS;
                    match op {
                        Op::Read => f.read_exact_at(buf, off).expect("pread"),
                        Op::Write => f.write_all_at(buf, off).expect("pwrite"),
                    }
                    n += 1;
                }
                count.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

async fn over_tcp(ini: Arc<Initiator>, op: Op, qd: usize, secs: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let tasks: Vec<_> = (0..qd)
        .map(|t| {
            let (ini, stop) = (ini.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(1000 + t as u64);
                let data = Bytes::from((0..BS).map(|_| rng.gen()).collect::<Vec<u8>>());
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let lba = rng.gen_range(0..BLOCKS);
                    match op {
                        Op::Read => drop(ini.read(1, lba, 1, BS as u32).await.expect("read")),
                        Op::Write => ini
                            .write(1, lba, data.clone(), BS as u32, false)
                            .await
                            .expect("write"),
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("task");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3.0);
    let dir = tempfile::tempdir()?;
    let path: PathBuf = args
        .next()
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.path().join("bench.img"));
    // Fill the file so reads hit data, not holes.
    {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        let chunk: Vec<u8> = (0..(1 << 20)).map(|i| (i * 7) as u8).collect();
        for i in 0..SIZE / (1 << 20) {
            f.write_all_at(&chunk, i << 20)?;
        }
        f.sync_data()?;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "4 KiB random I/O, {secs} s per case, file {} ({} MiB)",
        path.display(),
        SIZE >> 20
    );
    println!(
        "{:<9} {:<6} {:>3} {:>14} {:>14} {:>7}",
        "cache", "op", "qd", "pread/pwrite", "nvme-tcp", "ratio"
    );
    for odirect in [false, true] {
        let target_ini = rt.block_on(async {
            let backend = if odirect {
                FileBackend::open_direct(&path, BS as u32)
            } else {
                FileBackend::open(&path, BS as u32)
            };
            let backend = Arc::new(backend?);
            let nqn = "nqn.2026-11.org.pnfsd:bench";
            let cfg = TargetConfig::new(
                nqn,
                vec![NamespaceConfig {
                    nsid: 1,
                    backend,
                    volume_uuid: [7; 16],
                }],
            );
            let target = Target::bind("127.0.0.1:0", cfg).await?;
            target.spawn();
            let mut icfg = InitiatorConfig::new(nqn, "nqn.2014-08.org.nvmexpress:uuid:bench");
            icfg.io_queues = 2;
            icfg.queue_depth = 32;
            let ini = Arc::new(Initiator::connect(target.local_addr(), icfg).await?);
            Ok::<_, nvme_tcp::Error>((target, ini))
        });
        let (target, ini) = match target_ini {
            Ok(x) => x,
            Err(e) if odirect => {
                println!("O_DIRECT not available here ({e}); skipped");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let cache = if odirect { "O_DIRECT" } else { "buffered" };
        for op in [Op::Read, Op::Write] {
            for qd in [1usize, 32] {
                let d = direct(&path, odirect, op, qd, secs);
                let t = rt.block_on(over_tcp(ini.clone(), op, qd, secs));
                let name = if op == Op::Read { "read" } else { "write" };
                println!(
                    "{cache:<9} {name:<6} {qd:>3} {d:>14.0} {t:>14.0} {:>7.3}",
                    t / d
                );
            }
        }
        target.shutdown();
    }
    Ok(())
}
