//! `pnfs-bench scale`: N empty files in D directories by C sessions, plus one
//! directory of M entries, against a pnfsd on a sparse volume; every figure comes from this
//! one run (docs/benchmarks.md "Scale").
//!
//! Prints: creates/s over the first and the last `window` files, the server's peak RSS against
//! `metadata_cache`, on-disk metadata bytes per file (the volume file's allocated bytes
//! outside the log, over the files), time to ready after a SIGTERM and after a SIGKILL
//! restart (the kill lands right after a burst of creates, with the log as full as the
//! write-back lets it get), how long the big directory's filter scan took after that restart
//! (the server's log line), lookup/create/remove latency in the big directory against a
//! 100-entry one (medians of interleaved rounds) with what the server's directory filter
//! answered in them, and a full READDIR of the big directory.
//! With `--baseline BIN` it also measures C sessions creating files against that pnfsd (the
//! old main) and this one, interleaved, for the ratio.

use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client_tests::attrs::{attr, bitmap};
use client_tests::{ClientError, Compound, PnfsdProcess, Result, ServerOptions, Session};

/// Flags of `pnfs-bench scale`.
#[derive(Debug, Clone)]
pub struct ScaleArgs {
    pub files: u64,
    pub dirs: u64,
    pub sessions: usize,
    pub big: u64,
    pub volume_size: String,
    pub cache: String,
    pub window: u64,
    pub baseline: Option<std::path::PathBuf>,
    pub baseline_files: u64,
    /// Interleaved rounds of the baseline comparison (median reported).
    pub baseline_rounds: usize,
    /// Only the comparison against `baseline` (no scale run).
    pub compare_only: bool,
}

impl Default for ScaleArgs {
    fn default() -> Self {
        ScaleArgs {
            files: 100_000,
            dirs: 100,
            sessions: 16,
            big: 10_000,
            volume_size: "64G".into(),
            cache: "256M".into(),
            window: 10_000,
            baseline: None,
            baseline_files: 20_000,
            baseline_rounds: 3,
            compare_only: false,
        }
    }
}

fn harness(s: impl Into<String>) -> ClientError {
    ClientError::Harness(s.into())
}

fn config(a: &ScaleArgs) -> String {
    format!(
        "volume_size = \"{}\"\nmetadata_cache = \"{}\"\ngrace_seconds = 1\nlease_seconds = 10\n",
        a.volume_size, a.cache
    )
}

async fn session(addr: std::net::SocketAddr) -> Result<Arc<Session>> {
    let s = Session::connect(addr).await?;
    for _ in 0..200 {
        let root = s.lookup_path("").await?;
        match s.create_file(&root, ".grace-probe", 0o644).await {
            Err(ClientError::Nfs {
                status: client_tests::NfsStat::GRACE,
                ..
            }) => tokio::time::sleep(Duration::from_millis(100)).await,
            r => {
                s.close_file(&r?).await?;
                return Ok(Arc::new(s));
            }
        }
    }
    Err(harness("server stayed in grace"))
}

async fn sessions(addr: std::net::SocketAddr, n: usize) -> Result<Vec<Arc<Session>>> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(session(addr).await?);
    }
    Ok(v)
}

/// Completion times of every `STEP`-th create, for windowed rates.
const STEP: u64 = 1000;
/// How often a long phase prints where it is (stderr), so an hour-long run shows its pace.
const NOTE_EVERY: f64 = 30.0;

struct Progress {
    done: AtomicU64,
    t0: Instant,
    marks: Mutex<Vec<(u64, f64)>>,
    /// What the progress lines say: phase name, total, server pid.
    what: Option<(String, u64, u32)>,
}

impl Progress {
    fn new() -> Arc<Progress> {
        Self::noted(None)
    }
    /// A progress that prints a line every `NOTE_EVERY` seconds: done of `total`, the rate
    /// of the last interval, the server's RSS and peak.
    fn noted(what: Option<(&str, u64, u32)>) -> Arc<Progress> {
        Arc::new(Progress {
            done: AtomicU64::new(0),
            t0: Instant::now(),
            marks: Mutex::new(vec![(0, 0.0)]),
            what: what.map(|(n, t, p)| (n.to_string(), t, p)),
        })
    }
    fn tick(&self) {
        let n = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(STEP) {
            let t = self.t0.elapsed().as_secs_f64();
            if let Ok(mut m) = self.marks.lock() {
                let last = m.last().copied().unwrap_or((0, 0.0));
                if let Some((name, total, pid)) = &self.what {
                    let noted = m.iter().rev().find(|x| x.1 <= t - NOTE_EVERY);
                    if (t / NOTE_EVERY).floor() > (last.1 / NOTE_EVERY).floor() {
                        let (n0, t0) = noted.copied().unwrap_or((0, 0.0));
                        eprintln!(
                            "pnfs-bench scale: {name} {n} of {total} in {t:.0} s ({:.0}/s lately), server RSS {:.0} MiB (peak {:.0}), load {}",
                            (n - n0) as f64 / (t - t0).max(1e-9),
                            rss_kib(*pid, "VmRSS:") as f64 / 1024.0,
                            rss_kib(*pid, "VmHWM:") as f64 / 1024.0,
                            super::loadavg()
                        );
                    }
                }
                m.push((n, t));
            }
        }
    }
    /// Creates/s over the first and the last `w` files.
    fn rates(&self, w: u64) -> (f64, f64) {
        let m = self.marks.lock().map(|m| m.clone()).unwrap_or_default();
        let at = |n: u64| -> f64 {
            m.iter()
                .find(|(k, _)| *k >= n)
                .or(m.last())
                .map_or(0.0, |x| x.1)
        };
        let total = m.last().map_or(0, |x| x.0);
        let w = w.min(total).max(1);
        let first = w as f64 / (at(w) - at(0)).max(1e-9);
        let last = w as f64 / (at(total) - at(total - w)).max(1e-9);
        (first, last)
    }
}

/// `count` files named `{prefix}{k}` in `dirs` by all `sess`, in parallel, as an untar
/// would: the files of one directory are made one after the other, each session filling
/// its own directories (session i takes directories i, i + C, ...).
async fn create_files(
    sess: &[Arc<Session>],
    dirs: Arc<Vec<Vec<u8>>>,
    prefix: &str,
    count: u64,
    progress: Arc<Progress>,
) -> Result<()> {
    let c = sess.len() as u64;
    let nd = dirs.len() as u64;
    let mut tasks = Vec::new();
    for (i, s) in sess.iter().enumerate() {
        let (s, dirs, progress, prefix) = (
            s.clone(),
            dirs.clone(),
            progress.clone(),
            prefix.to_string(),
        );
        tasks.push(tokio::spawn(async move {
            // One directory: every session in it (files k ≡ i mod C); several: each
            // session its own directories, filled one by one (file k in directory k / per).
            let per = count.div_ceil(nd);
            let mine: Box<dyn Iterator<Item = u64> + Send> = if nd == 1 {
                Box::new((i as u64..count).step_by(c as usize))
            } else {
                Box::new(
                    (i as u64..nd)
                        .step_by(c as usize)
                        .flat_map(move |d| d * per..((d + 1) * per).min(count)),
                )
            };
            for k in mine {
                let d = &dirs[(k / per).min(nd - 1) as usize];
                let f = s.create_file(d, &format!("{prefix}{k}"), 0o644).await?;
                s.close_file(&f).await?;
                progress.tick();
            }
            Ok::<(), ClientError>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| harness(format!("task: {e}")))??;
    }
    Ok(())
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Samples the server's RSS every 200 ms until stopped; returns the peak (KiB).
fn rss_sampler(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::Relaxed) {
            peak = peak.max(rss_kib(pid, "VmRSS:"));
            std::thread::sleep(Duration::from_millis(200));
        }
        peak.max(rss_kib(pid, "VmHWM:"))
    })
}

/// The server's metadata-cache misses so far (NaN without its metrics endpoint).
async fn cache_misses(addr: Option<std::net::SocketAddr>) -> f64 {
    let Some(addr) = addr else { return f64::NAN };
    super::counters::scrape_text(addr)
        .await
        .ok()
        .and_then(|t| super::counters::sample(&t, "pnfsd_metadata_cache_misses_total"))
        .unwrap_or(f64::NAN)
}

/// The server's directory filter counters so far: lookups answered "absent", lookups not
/// answered, filters built (`pnfsd_dir_filter_*`, docs/store.md "Negative-name filters");
/// NaN without its metrics endpoint.
async fn filter_counts(addr: Option<std::net::SocketAddr>) -> [f64; 3] {
    let Some(addr) = addr else {
        return [f64::NAN; 3];
    };
    let text = super::counters::scrape_text(addr).await.unwrap_or_default();
    ["hits", "misses", "builds"].map(|c| {
        super::counters::sample(&text, &format!("pnfsd_dir_filter_{c}_total")).unwrap_or(f64::NAN)
    })
}

/// What the filter did over some rounds (`before`, `after`: `filter_counts`).
fn filter_line(before: [f64; 3], after: [f64; 3]) -> String {
    format!(
        "directory filter: {:.0} lookups answered absent, {:.0} not; {:.0} filters built (total {:.0})",
        after[0] - before[0],
        after[1] - before[1],
        after[2] - before[2],
        after[2]
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Median latency (µs) of lookup, create, remove in `dir` (`n` of each, names `{tag}{i}`;
/// the lookups look up existing entries `existing`).
async fn op_latency(
    s: &Session,
    dir: &[u8],
    existing: &[String],
    tag: &str,
    n: usize,
) -> Result<(f64, f64, f64)> {
    let (mut l, mut c, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let name = &existing[(i * 7919) % existing.len()];
        let t = Instant::now();
        s.run_ok(Compound::new().putfh(dir).lookup(name)).await?;
        l.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        let f = s.create_file(dir, &format!("{tag}{i}"), 0o644).await?;
        c.push(t.elapsed().as_secs_f64() * 1e6);
        s.close_file(&f).await?;
        let t = Instant::now();
        s.run_ok(Compound::new().putfh(dir).remove(&format!("{tag}{i}")))
            .await?;
        r.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok((median(l), median(c), median(r)))
}

fn meta_bytes(p: &PnfsdProcess, log_bytes: u64) -> u64 {
    let img = p.data_dir().join("volume.img");
    let alloc = std::fs::metadata(img)
        .map(|m| m.blocks() * 512)
        .unwrap_or(0);
    alloc.saturating_sub(log_bytes)
}

/// Time until `restart` returns (the server logged ready), and what its mount said.
fn timed_restart(p: &mut PnfsdProcess) -> Result<(f64, String)> {
    let before = p.log_text().lines().count();
    let t = Instant::now();
    p.restart()?;
    let secs = t.elapsed().as_secs_f64();
    let log = p.log_text();
    let mounted = log
        .lines()
        .skip(before)
        .find(|l| l.contains("store mounted"))
        .map(|l| {
            l.split("store mounted:")
                .nth(1)
                .unwrap_or(l)
                .trim()
                .to_string()
        })
        .unwrap_or_default();
    Ok((secs, mounted))
}

/// Creates/s of `a.sessions` sessions making `a.baseline_files` files in 100 directories on
/// a fresh server of `bin` (None: this pnfsd).
async fn create_rate(a: &ScaleArgs, bin: Option<&std::path::Path>) -> Result<f64> {
    let opts = ServerOptions {
        config_toml: Some("volume_size = \"8G\"\ngrace_seconds = 1\nlease_seconds = 10\n".into()),
        extra_args: Vec::new(),
    };
    let p = match bin {
        Some(b) => PnfsdProcess::start_with_bin(b.to_path_buf(), opts)?,
        None => PnfsdProcess::start_with(opts)?,
    };
    let sess = sessions(p.addr(), a.sessions).await?;
    let root = sess[0].lookup_path("").await?;
    let mut dirs = Vec::new();
    for d in 0..100 {
        dirs.push(sess[0].mkdir(&root, &format!("r{d}"), 0o755).await?);
    }
    let prog = Progress::new();
    let t = Instant::now();
    create_files(&sess, Arc::new(dirs), "c", a.baseline_files, prog).await?;
    Ok(a.baseline_files as f64 / t.elapsed().as_secs_f64())
}

/// C sessions creating files against `bin` and this pnfsd, `rounds` interleaved rounds (the
/// order alternates each round); returns every round's rates (this, baseline).
async fn compare(a: &ScaleArgs, bin: &std::path::Path) -> Result<Vec<(f64, f64)>> {
    let mut v = Vec::new();
    for r in 0..a.baseline_rounds.max(1) {
        let (new, old) = if r % 2 == 0 {
            let n = create_rate(a, None).await?;
            (n, create_rate(a, Some(bin)).await?)
        } else {
            let o = create_rate(a, Some(bin)).await?;
            (create_rate(a, None).await?, o)
        };
        v.push((new, old));
    }
    Ok(v)
}

fn compare_line(a: &ScaleArgs, v: &[(f64, f64)]) -> String {
    let new = median(v.iter().map(|x| x.0).collect());
    let old = median(v.iter().map(|x| x.1).collect());
    let ratios: Vec<String> = v.iter().map(|x| format!("{:.2}", x.0 / x.1)).collect();
    format!(
        "  {} sessions creating {} files (median of {} interleaved rounds): this pnfsd {new:.0}/s, baseline {old:.0}/s ({:.2}×; per round {})",
        a.sessions,
        a.baseline_files,
        v.len(),
        new / old.max(1e-9),
        ratios.join(" ")
    )
}

pub async fn run(a: &ScaleArgs) -> Result<String> {
    let mut out = String::new();
    let load0 = super::loadavg();
    if a.compare_only {
        let bin = a
            .baseline
            .as_ref()
            .ok_or_else(|| harness("--compare-only needs --baseline"))?;
        let v = compare(a, bin).await?;
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "pnfs-bench scale --compare-only on {}, load average {load0} before, {} after",
            super::machine(),
            super::loadavg()
        );
        let _ = writeln!(out, "{}", compare_line(a, &v));
        return Ok(out);
    }
    // The log is 1/64 of the volume, 4 MiB to 256 MiB (layout::Geometry).
    let vol_bytes = client_tests_size(&a.volume_size)?;
    let log_bytes = (vol_bytes / 64).clamp(4 << 20, 256 << 20);
    let mut p = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(config(a)),
        // Port 0: the server picks one and logs it; the latency rounds read its counters.
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
    })?;
    let pid = p.pid().ok_or_else(|| harness("no pid"))?;
    let maddr = p.metrics_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = rss_sampler(pid, stop.clone());
    let s0 = session(p.addr()).await?;
    let root = s0.lookup_path("").await?;
    let mut dirs = Vec::new();
    for d in 0..a.dirs.max(1) {
        dirs.push(s0.mkdir(&root, &format!("d{d}"), 0o755).await?);
    }
    let big = s0.mkdir(&root, "big", 0o755).await?;
    let small = s0.mkdir(&root, "small", 0o755).await?;
    // The other sessions only now: a client that holds no state and sends nothing is
    // dropped at the end of its lease, and 10,000 MKDIRs outlast a 10-s lease.
    let mut sess = vec![s0.clone()];
    sess.extend(sessions(p.addr(), a.sessions.saturating_sub(1)).await?);
    let t = Instant::now();
    create_files(
        &sess,
        Arc::new(vec![small.clone()]),
        "s",
        100,
        Progress::new(),
    )
    .await?;
    create_files(
        &sess,
        Arc::new(vec![big.clone()]),
        "b",
        a.big,
        Progress::noted(Some(("big directory", a.big, pid))),
    )
    .await?;
    let big_secs = t.elapsed().as_secs_f64();
    let prog = Progress::noted(Some(("files", a.files, pid)));
    let t = Instant::now();
    create_files(&sess, Arc::new(dirs), "f", a.files, prog.clone()).await?;
    let files_secs = t.elapsed().as_secs_f64();
    let (first, last) = prog.rates(a.window);
    let total_files = a.files + a.big + 100;
    // Latency: big vs small, interleaved rounds.
    let big_names: Vec<String> = (0..a.big.min(100_000)).map(|k| format!("b{k}")).collect();
    let small_names: Vec<String> = (0..100).map(|k| format!("s{k}")).collect();
    let mut lat_big = Vec::new();
    let mut lat_small = Vec::new();
    // Tree nodes read from the volume in the rounds of each directory (cache misses).
    let (mut miss_big, mut miss_small) = (0.0, 0.0);
    let f0 = filter_counts(maddr).await;
    for r in 0..5 {
        let m0 = cache_misses(maddr).await;
        lat_small.push(op_latency(&s0, &small, &small_names, &format!("ls{r}-"), 200).await?);
        let m1 = cache_misses(maddr).await;
        lat_big.push(op_latency(&s0, &big, &big_names, &format!("lb{r}-"), 200).await?);
        miss_small += m1 - m0;
        miss_big += cache_misses(maddr).await - m1;
    }
    let m3 = |v: &Vec<(f64, f64, f64)>| {
        (
            median(v.iter().map(|x| x.0).collect()),
            median(v.iter().map(|x| x.1).collect()),
            median(v.iter().map(|x| x.2).collect()),
        )
    };
    let f1 = filter_counts(maddr).await;
    let (lb, ls) = (m3(&lat_big), m3(&lat_small));
    let t = Instant::now();
    let ents = s0
        .readdir_all(&big, bitmap(&[attr::TYPE, attr::FILEID]))
        .await?;
    let readdir_secs = t.elapsed().as_secs_f64();
    // The same rounds again with both directories' index just read whole (READDIR of each):
    // above, a create's name hashes to a leaf of the big directory no earlier operation
    // touched, which the page cache may not hold once the whole tree outgrew it (a disk
    // read against the small directory's one cached leaf); here the tree's own cost alone.
    s0.readdir_all(&small, bitmap(&[attr::TYPE])).await?;
    let (mut warm_big, mut warm_small) = (Vec::new(), Vec::new());
    let (mut wmiss_big, mut wmiss_small) = (0.0, 0.0);
    let f2 = filter_counts(maddr).await;
    for r in 0..5 {
        let m0 = cache_misses(maddr).await;
        warm_small.push(op_latency(&s0, &small, &small_names, &format!("ws{r}-"), 200).await?);
        let m1 = cache_misses(maddr).await;
        warm_big.push(op_latency(&s0, &big, &big_names, &format!("wb{r}-"), 200).await?);
        wmiss_small += m1 - m0;
        wmiss_big += cache_misses(maddr).await - m1;
    }
    let f3 = filter_counts(maddr).await;
    let (wb, ws) = (m3(&warm_big), m3(&warm_small));
    stop.store(true, Ordering::Relaxed);
    let rss_peak = sampler.join().unwrap_or(0);
    drop(sess);
    drop(s0);
    // SIGTERM restart; the unmount wrote everything back, so the volume holds it all.
    p.terminate()?;
    let meta = meta_bytes(&p, log_bytes);
    let (term_ready, term_mount) = timed_restart(&mut p)?;
    // A restarted server's VmHWM right after ready is its mount's peak (the sampler above
    // watched the first process only); the bound holds there too.
    let term_hwm = p.pid().map_or(0, |pid| rss_kib(pid, "VmHWM:"));
    // A burst of creates, then SIGKILL: the log holds what the write-back has not taken.
    let sess = sessions(p.addr(), a.sessions).await?;
    let root = sess[0].lookup_path("").await?;
    let burst = sess[0].mkdir(&root, "burst", 0o755).await?;
    let bp = Progress::new();
    let burst_files = (a.files / 10).clamp(1000, 200_000);
    create_files(&sess, Arc::new(vec![burst]), "k", burst_files, bp).await?;
    drop(sess);
    p.kill()?;
    let (kill_ready, kill_mount) = timed_restart(&mut p)?;
    let kill_hwm = p.pid().map_or(0, |pid| rss_kib(pid, "VmHWM:"));
    let s = session(p.addr()).await?;
    let big2 = s.lookup_path("big").await?;
    s.run_ok(Compound::new().putfh(&big2).lookup("b0")).await?;
    // A cold scan over NFS: the restart left no filter and no cached leaf of the big
    // directory; its 64th create starts the scan (docs/store.md "Negative-name filters"),
    // and the server logs the scan's time when the filter answers.
    let before = p.log_text().lines().count();
    for k in 0..64 {
        let f = s.create_file(&big2, &format!("r{k}"), 0o644).await?;
        s.close_file(&f).await?;
    }
    let t = Instant::now();
    let scan = loop {
        let log = p.log_text();
        let line = log.lines().skip(before).find_map(|l| {
            let (_, rest) = l.split_once("directory filter of inode")?;
            Some(format!("inode{rest}"))
        });
        if line.is_some() || t.elapsed() > Duration::from_secs(120) {
            break line;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    drop(s);
    p.terminate()?;
    let baseline = match &a.baseline {
        Some(bin) => Some(compare(a, bin).await?),
        None => None,
    };
    use std::fmt::Write as _;
    let _ = writeln!(
        out,
        "pnfs-bench scale on {}, load average {load0} before, {} after",
        super::machine(),
        super::loadavg()
    );
    let _ = writeln!(
        out,
        "volume {} (sparse), metadata_cache {}, {} sessions; {} files in {} dirs + {} in one dir + 100",
        a.volume_size, a.cache, a.sessions, a.files, a.dirs, a.big
    );
    let _ = writeln!(
        out,
        "  big directory: {} entries in {big_secs:.1} s ({:.0}/s)",
        a.big,
        a.big as f64 / big_secs
    );
    let _ = writeln!(
        out,
        "  files: {} in {files_secs:.1} s; creates/s first {w}: {first:.0}, last {w}: {last:.0} (last/first {:.2})",
        a.files,
        last / first.max(1e-9),
        w = a.window.min(a.files)
    );
    let cache = client_tests_size(&a.cache)?;
    let _ = writeln!(
        out,
        "  server peak RSS {:.1} MiB; 1.5 × metadata_cache + 100 MiB = {:.1} MiB",
        rss_peak as f64 / 1024.0,
        (cache as f64 * 1.5) / (1 << 20) as f64 + 100.0
    );
    let _ = writeln!(
        out,
        "  peak RSS of the mounts: {:.1} MiB after SIGTERM, {:.1} MiB after SIGKILL (log replay)",
        term_hwm as f64 / 1024.0,
        kill_hwm as f64 / 1024.0
    );
    let _ = writeln!(
        out,
        "  on-disk metadata {:.1} MiB: {:.0} bytes per file",
        meta as f64 / (1 << 20) as f64,
        meta as f64 / total_files as f64
    );
    let _ = writeln!(
        out,
        "  ready after SIGTERM restart {term_ready:.2} s ({term_mount})"
    );
    let _ = writeln!(
        out,
        "  ready after SIGKILL restart {kill_ready:.2} s, after {burst_files} creates ({kill_mount})"
    );
    let _ = writeln!(
        out,
        "  the big directory's filter after the SIGKILL restart (64 creates start its scan): {}",
        scan.as_deref()
            .unwrap_or("no scan logged within 120 s (or the directory is below the threshold)")
    );
    let _ = writeln!(
        out,
        "  latency µs, as they come (median of 5 rounds × 200): lookup {:.0} vs {:.0} ({:.2}×), create {:.0} vs {:.0} ({:.2}×), remove {:.0} vs {:.0} ({:.2}×) — big vs 100-entry",
        lb.0, ls.0, lb.0 / ls.0, lb.1, ls.1, lb.1 / ls.1, lb.2, ls.2, lb.2 / ls.2
    );
    let _ = writeln!(
        out,
        "    tree nodes read from the volume per lookup+create+remove: big {:.2}, 100-entry {:.2}",
        miss_big / 1000.0,
        miss_small / 1000.0
    );
    let _ = writeln!(out, "    {}", filter_line(f0, f1));
    let _ = writeln!(
        out,
        "  READDIR of the big directory: {} entries in {readdir_secs:.2} s",
        ents.len()
    );
    let _ = writeln!(
        out,
        "  latency µs after a READDIR of each directory (median of 5 rounds × 200): lookup {:.0} vs {:.0} ({:.2}×), create {:.0} vs {:.0} ({:.2}×), remove {:.0} vs {:.0} ({:.2}×) — big vs 100-entry",
        wb.0, ws.0, wb.0 / ws.0, wb.1, ws.1, wb.1 / ws.1, wb.2, ws.2, wb.2 / ws.2
    );
    let _ = writeln!(
        out,
        "    tree nodes read from the volume per lookup+create+remove: big {:.2}, 100-entry {:.2}",
        wmiss_big / 1000.0,
        wmiss_small / 1000.0
    );
    let _ = writeln!(out, "    {}", filter_line(f2, f3));
    if let Some(v) = baseline {
        let _ = writeln!(out, "{}", compare_line(a, &v));
    }
    Ok(out)
}

/// "64G" → bytes (the same suffixes as the server's config).
fn client_tests_size(s: &str) -> Result<u64> {
    pnfsd::config::parse_size(s)
        .map(|x| x.0)
        .map_err(|e| harness(format!("size {s}: {e}")))
}
