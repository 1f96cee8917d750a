//! pnfs-bench: the seeds' workloads against pnfsd with real block-layout I/O, each
//! next to the physical limit, the bare device loop and `layoutcommit = "sync"`, all in one run
//! and interleaved by round so machine drift hits every mode alike (docs/benchmarks.md).

pub mod counters;
pub mod data;
pub mod io;
pub mod meta;
pub mod report;
pub mod scale;
pub mod target;

use std::sync::Arc;
use std::time::{Duration, Instant};

use client_tests::{ClientError, Result, Session};

use counters::Interval;
use data::DataPath;
use io::Writer;
use report::{ModeFigures, WorkloadResult};
use target::{delta, Options, Target};

/// How a commit unit is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// write, then LAYOUTCOMMIT to pnfsd (default `layoutcommit = "datasync"`).
    Pnfsd,
    /// write, then LAYOUTCOMMIT to a pnfsd with `layoutcommit = "sync"` (XFS-like log force).
    Sync,
    /// write + flush of the volume + one SEQUENCE-only round trip: the least a protocol adds.
    Limit,
    /// write + flush only (for the record).
    Device,
    /// `meta` on an `export_sync = "sync"` export, and on an `"async"` one.
    ExportSync,
    ExportAsync,
    /// As `Pnfsd`, to a pnfsd with `nvme_enforce_layouts = false` (`--enforcement`: the
    /// target's per-command layout check off, to show enforcement costs nothing).
    Unenforced,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pnfsd => "pnfsd",
            Mode::Sync => "sync",
            Mode::Limit => "limit",
            Mode::Device => "device",
            Mode::ExportSync => "sync-export",
            Mode::ExportAsync => "async-export",
            Mode::Unenforced => "enforce-off",
        }
    }

    /// Whether the mode runs on the second server of a workload (the one started with
    /// another config).
    fn on_second(self) -> bool {
        matches!(self, Mode::Sync | Mode::Unenforced)
    }
}

const ORDER: [Mode; 4] = [Mode::Pnfsd, Mode::Limit, Mode::Sync, Mode::Device];

/// `--enforcement`: the same writes with the target's layout check on (`pnfsd`, the
/// default config) and off (`enforce-off`), nothing else, so each round is the pair.
const ENFORCEMENT_ORDER: [Mode; 2] = [Mode::Pnfsd, Mode::Unenforced];

/// A workload (for `meta`: `writers` clients, `file_size` files each): `writers` files of `file_size`, written in `io_size` units.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: &'static str,
    pub writers: usize,
    pub file_size: u64,
    pub io_size: u64,
    /// New files each round (allocating writes) rather than overwrites of prefilled files.
    pub new_files: bool,
    /// The namespace workload (meta.rs).
    pub meta: bool,
}

pub fn specs(scale: u64) -> Vec<Spec> {
    let s = |name, writers, file_size: u64, io_size: u64, new_files| {
        let file_size = (file_size / scale.max(1)).max(4096);
        Spec {
            name,
            writers,
            file_size,
            io_size: io_size.min(file_size),
            new_files,
            meta: false,
        }
    };
    let files = (64 / scale.max(1)).max(2);
    let m = |name, writers| Spec {
        name,
        writers,
        file_size: files,
        io_size: 0,
        new_files: false,
        meta: true,
    };
    vec![
        s("overwrite-1", 1, 16 << 20, 64 << 10, false),
        s("overwrite-4", 4, 16 << 20, 64 << 10, false),
        s("small", 1, 4 << 20, 4 << 10, false),
        s("newfiles", 4, 64 << 20, 4 << 20, true),
        m("meta-1", 1),
        m("meta-8", 8),
    ]
}

/// A fresh session after the grace period (OPEN is refused during grace, RFC 8881 §8.4.2).
pub async fn session(t: &Target) -> Result<Arc<Session>> {
    let s = Session::connect(t.nfs).await?;
    let root = s.lookup_path("").await?;
    for _ in 0..100 {
        match s.create_file(&root, ".grace-probe", 0o644).await {
            Err(ClientError::Nfs {
                status: client_tests::NfsStat::GRACE,
                ..
            }) => tokio::time::sleep(Duration::from_millis(100)).await,
            r => {
                let f = r?;
                s.close_file(&f).await?;
                return Ok(Arc::new(s));
            }
        }
    }
    Err(ClientError::Harness("server stayed in grace".into()))
}

/// A prefix no other run's files have (a running server may keep an earlier run's files).
pub fn run_tag() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("pb{}-{}", std::process::id(), t % 1_000_000_000)
}

async fn writers(sessions: &[Arc<Session>], spec: &Spec, prefix: &str) -> Result<Vec<Arc<Writer>>> {
    let mut out = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        let name = format!("{prefix}{i}");
        out.push(Arc::new(
            io::open_writer(s.clone(), &name, spec.file_size, !spec.new_files).await?,
        ));
    }
    Ok(out)
}

async fn remove_all(ws: Vec<Arc<Writer>>) -> Result<()> {
    for w in ws {
        let w =
            Arc::try_unwrap(w).map_err(|_| ClientError::Harness("writer still shared".into()))?;
        w.remove().await?;
    }
    Ok(())
}

/// What one round of one mode measured.
struct RoundOut {
    wall: Duration,
    lats: Vec<Duration>,
    /// Client-side [start, end] of every LAYOUTCOMMIT of the round.
    commits: Vec<Interval>,
}

/// One round of one mode: every writer concurrently.
async fn round(
    ws: &[Arc<Writer>],
    data: &DataPath,
    mode: Mode,
    spec: &Spec,
    ping: &Arc<Session>,
    seed: u64,
) -> Result<RoundOut> {
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for (i, w) in ws.iter().enumerate() {
        let (w, data, ping) = (w.clone(), data.clone(), ping.clone());
        let (size, io_size) = (spec.file_size, spec.io_size);
        tasks.push(tokio::spawn(async move {
            io::run_writer(&w, &data, mode, size, io_size, &ping, seed + i as u64).await
        }));
    }
    let mut out = RoundOut {
        wall: Duration::ZERO,
        lats: Vec::new(),
        commits: Vec::new(),
    };
    for t in tasks {
        let (l, c) = t
            .await
            .map_err(|e| ClientError::Harness(format!("writer task: {e}")))??;
        out.lats.extend(l);
        out.commits.extend(c);
    }
    out.wall = t0.elapsed();
    Ok(out)
}

/// Runs `spec` for `rounds` rounds, the modes interleaved (rotated each round). With
/// `--server` only the running server is measured: `sync` needs a second one and is skipped.
/// With `--enforcement` the second server is one with `nvme_enforce_layouts = false` and
/// only `pnfsd` and `enforce-off` run.
pub async fn run_workload(spec: &Spec, rounds: usize, o: &Options) -> Result<WorkloadResult> {
    if spec.meta {
        return meta::run(spec, rounds, o).await;
    }
    let mut notes = Vec::new();
    let (a, b) = if o.enforcement {
        let a = Target::start("", o, true, spec.writers).await?;
        let b = Target::start("nvme_enforce_layouts = false\n", o, true, spec.writers).await?;
        (a, Some(b))
    } else if o.server.is_some() {
        notes.push(
            "sync skipped: --server measures one running pnfsd; the sync mode needs a second \
             one with layoutcommit = \"sync\""
                .to_string(),
        );
        (Target::external(o, true, spec.writers).await?, None)
    } else {
        let a = Target::start("", o, true, spec.writers).await?;
        let b = Target::start("layoutcommit = \"sync\"\n", o, true, spec.writers).await?;
        (a, Some(b))
    };
    if a.metrics.is_none() {
        notes.push("no server counters: --server without --metrics".to_string());
    }
    let modes: &[Mode] = if o.enforcement {
        &ENFORCEMENT_ORDER
    } else {
        &ORDER
    };
    let order: Vec<Mode> = modes
        .iter()
        .copied()
        .filter(|m| !m.on_second() || b.is_some())
        .collect();
    let tag = run_tag();
    let mut sa = Vec::new();
    let mut sb = Vec::new();
    for _ in 0..spec.writers {
        sa.push(session(&a).await?);
        if let Some(b) = &b {
            sb.push(session(b).await?);
        }
    }
    let ping = session(&a).await?;
    let fixed = if spec.new_files {
        None
    } else {
        let wb = match &b {
            Some(_) => writers(&sb, spec, &format!("{tag}-w")).await?,
            None => Vec::new(),
        };
        Some((writers(&sa, spec, &format!("{tag}-w")).await?, wb))
    };
    let mut figs: Vec<(Mode, ModeFigures)> =
        order.iter().map(|m| (*m, ModeFigures::default())).collect();
    for r in 0..rounds {
        for k in 0..order.len() {
            let mode = order[(k + r) % order.len()];
            let (srv, sess) = match &b {
                Some(b) if mode.on_second() => (b, &sb),
                _ => (&a, &sa),
            };
            let seed = (r * 8 + k) as u64;
            // Untimed for `newfiles`: create the files and take their layouts, remove after.
            let fresh = match &fixed {
                Some(_) => None,
                None => Some(writers(sess, spec, &format!("{tag}-n{r}-{}-", mode.name())).await?),
            };
            let ws = match (&fixed, &fresh) {
                (_, Some(ws)) => ws,
                (Some((wa, wb)), None) => {
                    if mode.on_second() {
                        wb
                    } else {
                        wa
                    }
                }
                (None, None) => return Err(ClientError::Harness("no writers".into())),
            };
            let before = srv.counters().await?;
            let out = round(ws, srv.data()?, mode, spec, &ping, seed).await?;
            let after = srv.counters().await?;
            if let Some(ws) = fresh {
                remove_all(ws).await?;
            }
            if let Some((_, f)) = figs.iter_mut().find(|(m, _)| *m == mode) {
                f.record_round(out.wall, out.lats);
                f.record_server(delta(before, after));
                if spec.new_files && matches!(mode, Mode::Pnfsd | Mode::Sync | Mode::Unenforced) {
                    let chains = counters::groups(out.commits.clone());
                    f.record_groups(chains, counters::concurrent_sets(out.commits));
                }
            }
        }
    }
    if let Some((wa, wb)) = fixed {
        remove_all(wa).await?;
        remove_all(wb).await?;
    }
    let data_name = a.data()?.name();
    notes.push(format!("data path: {data_name}"));
    a.stop()?;
    if let Some(b) = b {
        b.stop()?;
    }
    Ok(WorkloadResult {
        name: spec.name.to_string(),
        writers: spec.writers,
        file_size: spec.file_size,
        io_size: spec.io_size,
        rounds,
        modes: figs,
        notes,
    })
}

/// The machine the figures come from, for the report.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpus} cpus, Linux {}", kernel.trim())
}

/// The 1, 5 and 15 minute load averages (other work on the machine skews every figure).
pub fn loadavg() -> String {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}
