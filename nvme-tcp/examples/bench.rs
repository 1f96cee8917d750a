//! Random read and write IOPS and CPU per I/O at queue depth 1, 32 and 128, 4 KiB and 128
//! KiB: through the NVMe/TCP target and initiator on loopback, against pread/pwrite on the
//! same file (page cache, and O_DIRECT), and against the loopback echo floor (`echo.rs`:
//! the same PDU sizes and nothing else), in one interleaved run.
//!
//! `cargo run --release -p nvme-tcp --example bench [-- <seconds per case> [rounds] [file]]`
//! `BENCH_ONLY=O_DIRECT/read/4K/32` (a substring of the cell names; a trailing `$` anchors it
//! at the end) narrows it down;
//! `BENCH_TCP_ONLY=1` skips the baselines and `BENCH_NO_WARMUP=1` the warm-up (for `perf`);
//! `BENCH_INI_THREADS=n` and `BENCH_IO_QUEUES=n` set the initiator's workers (default 1) and
//! I/O queues (default 2).
//!
//! Fairness: both sides do the same thing to the same file. QD n is n threads each issuing
//! one pread/pwrite at a time (the baseline) against n tasks each with one command in flight
//! (nvme-tcp); both open the file the same way (page cache, or O_DIRECT on both sides); both
//! draw uniformly random size-aligned offsets over the whole file. Each round runs every
//! cell once, the three sides back to back, rotating which goes first, so a change in
//! machine load hits them alike; the table shows per-cell medians over the rounds (the
//! ratio columns are medians of the per-round ratios) and the load average.

#[path = "echo.rs"]
mod echo;
#[path = "uring.rs"]
mod uring;

use bytes::Bytes;
use nvme_tcp::{FileBackend, Initiator, InitiatorConfig, NamespaceConfig, Target, TargetConfig};
use rand::{Rng, SeedableRng};
use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// LBA size of the namespace.
const BS: u64 = 4096;
const SIZE: u64 = 256 << 20;
const SIZES: [u64; 2] = [4096, 128 * 1024];
const QDS: [usize; 3] = [1, 32, 128];

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Read,
    Write,
}

fn direct(path: &Path, odirect: bool, op: Op, len: u64, qd: usize, secs: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let files: Vec<_> = (0..qd)
        .map(|_| {
            let mut opts = OpenOptions::new();
            opts.read(true).write(true);
            if odirect {
                opts.custom_flags(libc::O_DIRECT);
            }
            opts.open(path).expect("open")
        })
        .collect();
    let start = Instant::now();
    let threads: Vec<_> = files
        .into_iter()
        .enumerate()
        .map(|(t, f)| {
            let (stop, count) = (stop.clone(), count.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
                // O_DIRECT needs an aligned buffer: carve one out of a larger Vec.
                let mut backing = vec![0u8; (len + BS) as usize];
                let o = backing.as_ptr().align_offset(BS as usize);
                let buf = &mut backing[o..o + len as usize];
                rng.fill(&mut buf[..]);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let off = rng.gen_range(0..SIZE / len) * len;
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

async fn over_tcp(ini: Arc<Initiator>, op: Op, len: u64, qd: usize, secs: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let nlb = (len / BS) as u32;
    let tasks: Vec<_> = (0..qd)
        .map(|t| {
            let (ini, stop) = (ini.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(1000 + t as u64);
                let data = Bytes::from((0..len).map(|_| rng.gen()).collect::<Vec<u8>>());
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let lba = rng.gen_range(0..SIZE / len) * nlb as u64;
                    match op {
                        Op::Read => drop(ini.read(1, lba, nlb, BS as u32).await.expect("read")),
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

/// Drops the file's pages from the page cache (written back first), so the O_DIRECT cells
/// start alike on both sides: an O_DIRECT write over a cached page must invalidate it, which
/// io_uring cannot do without blocking (it hands the write to a kernel worker thread) and
/// pwrite does inline. The buffered cells, run before in each round, fill the cache.
fn drop_cache(path: &Path) {
    if let Ok(f) = std::fs::File::open(path) {
        use std::os::fd::AsRawFd;
        let _ = f.sync_data();
        // SAFETY: posix_fadvise on a descriptor we hold open; it touches no memory of ours.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// Reads the whole file once, so the buffered cells find every page cached (the O_DIRECT
/// cells of the previous round dropped them: without this, buffered reads were disk reads
/// with read-ahead).
fn warm_cache(path: &Path) {
    if let Ok(f) = std::fs::File::open(path) {
        let mut buf = vec![0u8; 1 << 20];
        let mut off = 0;
        while let Ok(n) = f.read_at(&mut buf, off) {
            if n == 0 {
                break;
            }
            off += n as u64;
        }
    }
}

/// CPU time of this process (user + system, all threads) in seconds.
fn cpu_secs() -> f64 {
    bench_cpu::process().map_or(f64::NAN, bench_cpu::CpuTime::total)
}

/// Runs one side; returns (IOPS, CPU µs per I/O of the whole process).
fn measured(f: impl FnOnce() -> f64, secs: f64) -> (f64, f64) {
    let c0 = cpu_secs();
    let iops = f();
    let cpu = cpu_secs() - c0;
    (iops, cpu * 1e6 / (iops * secs))
}

/// Which part of the process a thread belongs to, by its name: the target's queue threads
/// and runtime (`TGT_RT`), the initiator's runtime (`INI_RT`), anything else.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Target,
    Initiator,
    Other,
}

const TGT_RT: &str = "nvmet-rt";
const INI_RT: &str = "nvmei-rt";

fn part_of(comm: &str) -> Part {
    if comm.starts_with("nvme-tcp-queue") || comm.starts_with(TGT_RT) {
        Part::Target
    } else if comm.starts_with(INI_RT) {
        Part::Initiator
    } else {
        Part::Other
    }
}

/// CPU seconds (user, system) so far of the target's and the initiator's threads (threads
/// that ended are missing: the runtimes' threads live for the whole run, and a queue thread
/// lives as long as its connection).
fn part_secs() -> [(f64, f64); 2] {
    let Some(threads) = bench_cpu::threads() else {
        return [(f64::NAN, f64::NAN); 2];
    };
    let mut out = [(0.0, 0.0); 2];
    for (comm, t) in threads {
        let i = match part_of(&comm) {
            Part::Target => 0,
            Part::Initiator => 1,
            Part::Other => continue,
        };
        out[i].0 += t.user;
        out[i].1 += t.system;
    }
    out
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One side's per-round (IOPS, CPU µs per I/O).
#[derive(Default)]
struct Side {
    iops: Vec<f64>,
    cpu: Vec<f64>,
}

impl Side {
    fn push(&mut self, m: (f64, f64)) {
        self.iops.push(m.0);
        self.cpu.push(m.1);
    }
}

/// The nvme-tcp side's CPU µs per I/O by part, per round: target and initiator, each
/// (user + system, system alone).
#[derive(Default)]
struct Split {
    tgt: Vec<f64>,
    tgt_sys: Vec<f64>,
    ini: Vec<f64>,
    ini_sys: Vec<f64>,
}

/// One cell of the table: its per-round measurements.
struct Cell {
    odirect: bool,
    op: Op,
    len: u64,
    qd: usize,
    direct: Side,
    tcp: Side,
    split: Split,
    echo: Side,
    uring: Side,
    /// nvme-tcp IOPS / pread-pwrite IOPS, and / echo IOPS, per round.
    ratio: Vec<f64>,
    ratio_echo: Vec<f64>,
    ratio_uring: Vec<f64>,
    ratio_floor: Vec<f64>,
}

fn cell_name(odirect: bool, op: Op, len: u64, qd: usize) -> String {
    let cache = if odirect { "O_DIRECT" } else { "buffered" };
    let name = if op == Op::Read { "read" } else { "write" };
    format!("{cache}/{name}/{}K/{qd}", len / 1024)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The target's and the initiator's warnings (a keep-alive timeout, a transport error)
    // say why a connection closed under the bench; RUST_LOG overrides.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(1.0);
    let rounds: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(3);
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
    // The target and the initiator on runtimes of their own (as in pnfsd and a remote
    // host), so the CPU of each is told apart by thread name. BENCH_INI_THREADS: the
    // initiator's worker threads, default 1, as pnfsd runs its own initiator (`NvmeDev`,
    // the external volume): a second worker takes over commands a batch of completions woke
    // (a futex each time), which cost 1.1-1.7x the initiator's CPU for the same IOPS
    // (docs/nvme-tcp.md "Benchmark").
    let tgt_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(TGT_RT)
        .enable_all()
        .build()?;
    let ini_threads: usize = std::env::var("BENCH_INI_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(ini_threads.max(1))
        .thread_name(INI_RT)
        .enable_all()
        .build()?;
    // BENCH_IO_QUEUES: the initiator's I/O queues (default 2, as the Linux host on 2 CPUs);
    // their depths share 128.
    let io_queues: u16 = std::env::var("BENCH_IO_QUEUES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
        .clamp(1, 128);
    let la0 = loadavg();
    println!(
        "random I/O, {secs} s per case, {rounds} rounds, file {} ({} MiB), load average {la0}",
        path.display(),
        SIZE >> 20
    );
    // One target + initiator per cache mode, both alive for the whole run.
    let mut setups = Vec::new();
    for odirect in [false, true] {
        let target = tgt_rt.block_on(async {
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
            Ok::<_, nvme_tcp::Error>(target)
        });
        let target_ini = target.and_then(|target| {
            rt.block_on(async {
                let nqn = "nqn.2026-11.org.pnfsd:bench";
                let mut icfg = InitiatorConfig::new(nqn, "nqn.2014-08.org.nvmexpress:uuid:bench");
                // QD 128 fits: 2 queues of 64 (commands go round robin).
                icfg.io_queues = io_queues;
                icfg.queue_depth = (128 / io_queues).max(1) as u16;
                // No keep-alive: at load 20–35 (other engineers' guests and builds) both
                // bench controllers were torn down at once after 7.5 s without one (the
                // whole process stalled); the bench measures the I/O path, not KATO.
                icfg.kato_ms = 0;
                let ini = Arc::new(Initiator::connect(target.local_addr(), icfg).await?);
                Ok::<_, nvme_tcp::Error>((target, ini))
            })
        });
        match target_ini {
            Ok((target, ini)) => setups.push((odirect, target, ini)),
            Err(e) if odirect => println!("O_DIRECT not available here ({e}); skipped"),
            Err(e) => return Err(e.into()),
        }
    }
    let mut cells = Vec::new();
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let tcp_only = std::env::var("BENCH_TCP_ONLY").is_ok_and(|v| v == "1");
    for (odirect, _, _) in &setups {
        for op in [Op::Read, Op::Write] {
            for len in SIZES {
                for qd in QDS {
                    // A trailing '$' asks for the whole name (`.../4K/1$` is not QD 128).
                    let name = cell_name(*odirect, op, len, qd);
                    let hit = match only.strip_suffix('$') {
                        Some(exact) => name.ends_with(exact),
                        None => name.contains(&only),
                    };
                    if !hit {
                        continue;
                    }
                    cells.push(Cell {
                        odirect: *odirect,
                        op,
                        len,
                        qd,
                        direct: Side::default(),
                        tcp: Side::default(),
                        split: Split::default(),
                        echo: Side::default(),
                        uring: Side::default(),
                        ratio: Vec::new(),
                        ratio_echo: Vec::new(),
                        ratio_uring: Vec::new(),
                        ratio_floor: Vec::new(),
                    });
                }
            }
        }
    }
    // Warm-up (page cache, thread pools, TCP windows); not counted. BENCH_NO_WARMUP=1 skips
    // it (for counting syscalls per I/O with `perf stat`).
    if std::env::var("BENCH_NO_WARMUP").map_or(true, |v| v != "1") {
        for (_, _, ini) in &setups {
            rt.block_on(over_tcp(ini.clone(), Op::Read, 4096, 32, secs / 4.0));
        }
    }
    for round in 0..rounds {
        for c in cells.iter_mut() {
            let ini = setups
                .iter()
                .find(|s| s.0 == c.odirect)
                .map(|s| s.2.clone())
                .ok_or("setup")?;
            let (odirect, op, len, qd) = (c.odirect, c.op, c.len, c.qd);
            let mut sides: [(u8, (f64, f64)); 4] = [(0, (f64::NAN, f64::NAN)); 4];
            for (i, side) in sides.iter_mut().enumerate() {
                // Rotate which side goes first from round to round.
                let which = ((i + round) % 4) as u8;
                side.0 = which;
                if tcp_only && which != 1 {
                    continue;
                }
                if odirect {
                    drop_cache(&path);
                } else {
                    warm_cache(&path);
                }
                side.1 = match which {
                    0 => measured(|| direct(&path, odirect, op, len, qd, secs), secs),
                    1 => {
                        let p0 = part_secs();
                        let m = measured(
                            || rt.block_on(over_tcp(ini.clone(), op, len, qd, secs)),
                            secs,
                        );
                        let p1 = part_secs();
                        let per = |a: f64, b: f64| (b - a) * 1e6 / (m.0 * secs);
                        c.split.tgt.push(per(p0[0].0 + p0[0].1, p1[0].0 + p1[0].1));
                        c.split.tgt_sys.push(per(p0[0].1, p1[0].1));
                        c.split.ini.push(per(p0[1].0 + p0[1].1, p1[1].0 + p1[1].1));
                        c.split.ini_sys.push(per(p0[1].1, p1[1].1));
                        m
                    }
                    2 => {
                        let (req, resp) = echo::sizes(op == Op::Write, len as usize);
                        measured(|| echo::run(qd, req, resp, secs), secs)
                    }
                    _ => {
                        let w = op == Op::Write;
                        measured(
                            || uring::run(&path, odirect, w, len as usize, qd, secs),
                            secs,
                        )
                    }
                };
            }
            sides.sort_by_key(|s| s.0);
            c.direct.push(sides[0].1);
            c.tcp.push(sides[1].1);
            c.echo.push(sides[2].1);
            c.uring.push(sides[3].1);
            let (p, n, e, u) = (sides[0].1 .0, sides[1].1 .0, sides[2].1 .0, sides[3].1 .0);
            c.ratio.push(n / p);
            c.ratio_echo.push(n / e);
            c.ratio_uring.push(n / u);
            // QD 1: the floor is one echo exchange and one pread after the other.
            c.ratio_floor.push(n * (1.0 / e + 1.0 / p));
        }
        eprintln!(
            "round {} of {rounds} done, load average {}",
            round + 1,
            loadavg()
        );
    }
    println!(
        "{:<8} {:<5} {:>4} {:>3} {:>8} {:>8} {:>8} {:>8}  {:>5} {:>9} {:>5} {:>5} {:>5}  {:>23}  {:>21}",
        "cache",
        "op",
        "size",
        "qd",
        "pread/wr",
        "uring",
        "echo",
        "nvme-tcp",
        "/pread",
        "min-max",
        "/urng",
        "/echo",
        "/flr",
        "cpu µs/IO p/u/e/n",
        "nvme: tgt(sys)/ini(sys)"
    );
    for c in cells.iter_mut() {
        let cache = if c.odirect { "O_DIRECT" } else { "buffered" };
        let name = if c.op == Op::Read { "read" } else { "write" };
        let lo = c.ratio.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = c.ratio.iter().copied().fold(0.0, f64::max);
        let floor = if c.qd == 1 {
            format!("{:>5.2}", median(&mut c.ratio_floor))
        } else {
            format!("{:>5}", "-")
        };
        println!(
            "{cache:<8} {name:<5} {:>3}K {:>3} {:>8.0} {:>8.0} {:>8.0} {:>8.0}  {:>5.2} {lo:>4.2}-{hi:<4.2} {:>5.2} {:>5.3} {floor}  {:>5.1}/{:>5.1}/{:>5.1}/{:>5.1}  {:>5.1}({:>4.1})/{:>5.1}({:>4.1})",
            c.len / 1024,
            c.qd,
            median(&mut c.direct.iops),
            median(&mut c.uring.iops),
            median(&mut c.echo.iops),
            median(&mut c.tcp.iops),
            median(&mut c.ratio),
            median(&mut c.ratio_uring),
            median(&mut c.ratio_echo),
            median(&mut c.direct.cpu),
            median(&mut c.uring.cpu),
            median(&mut c.echo.cpu),
            median(&mut c.tcp.cpu),
            median(&mut c.split.tgt),
            median(&mut c.split.tgt_sys),
            median(&mut c.split.ini),
            median(&mut c.split.ini_sys),
        );
    }
    println!(
        "medians over {rounds} rounds of per-round ratios; QD 1 latency against the echo = \
         1 / the /echo column, against echo + pread one after the other = 1 / the /flr column; \
         load average at start {la0}, at end {}",
        loadavg()
    );
    for (_, target, _) in setups {
        target.shutdown();
    }
    Ok(())
}
