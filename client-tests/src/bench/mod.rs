//! pnfs-bench (issue 7): the seeds' workloads against pnfsd with real block-layout I/O, each
//! next to the physical limit, the bare device loop and `layoutcommit = "sync"`, all in one run
//! and interleaved by round so machine drift hits every mode alike (docs/benchmarks.md).

pub mod io;
pub mod meta;
pub mod report;

use std::sync::Arc;
use std::time::{Duration, Instant};

use client_tests::{ClientError, PnfsdProcess, Result, ServerOptions, Session};

use io::Writer;
use report::{ModeFigures, ServerCounters, WorkloadResult};

/// How a commit unit is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// pwrite, then LAYOUTCOMMIT to pnfsd (default `layoutcommit = "datasync"`).
    Pnfsd,
    /// pwrite, then LAYOUTCOMMIT to a pnfsd with `layoutcommit = "sync"` (XFS-like log force).
    Sync,
    /// pwrite + fdatasync of the volume + one SEQUENCE-only round trip: the least a protocol adds.
    Limit,
    /// pwrite + fdatasync only (for the record).
    Device,
    /// `meta` on an `export_sync = "sync"` export, and on an `"async"` one.
    ExportSync,
    ExportAsync,
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
        }
    }
}

const ORDER: [Mode; 4] = [Mode::Pnfsd, Mode::Limit, Mode::Sync, Mode::Device];

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

struct Server {
    proc: PnfsdProcess,
    vol: Arc<std::fs::File>,
}

fn start(sync: bool) -> Result<Server> {
    let mut toml = String::from("volume_size = \"2G\"\ngrace_seconds = 1\n");
    if sync {
        toml.push_str("layoutcommit = \"sync\"\n");
    }
    let proc = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(toml),
        ..Default::default()
    })?;
    let vol = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(proc.data_dir().join("volume.img"))?;
    Ok(Server {
        proc,
        vol: Arc::new(vol),
    })
}

/// The server's counters after a clean stop (its shutdown log line).
fn stop(mut s: Server) -> Result<Option<ServerCounters>> {
    s.proc.terminate()?;
    Ok(ServerCounters::parse(&s.proc.log_text()))
}

/// A fresh session after the grace period (OPEN is refused during grace, RFC 8881 §8.4.2).
async fn session(srv: &Server) -> Result<Arc<Session>> {
    let s = Session::connect(srv.proc.addr()).await?;
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

/// One round of one mode: every writer concurrently; wall time and all unit latencies.
async fn round(
    ws: &[Arc<Writer>],
    vol: &Arc<std::fs::File>,
    mode: Mode,
    spec: &Spec,
    ping: &Arc<Session>,
    seed: u64,
) -> Result<(Duration, Vec<Duration>)> {
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for (i, w) in ws.iter().enumerate() {
        let (w, vol, ping) = (w.clone(), vol.clone(), ping.clone());
        let (size, io_size) = (spec.file_size, spec.io_size);
        tasks.push(tokio::spawn(async move {
            io::run_writer(&w, vol, mode, size, io_size, &ping, seed + i as u64).await
        }));
    }
    let mut lats = Vec::new();
    for t in tasks {
        let l = t
            .await
            .map_err(|e| ClientError::Harness(format!("writer task: {e}")))??;
        lats.extend(l);
    }
    Ok((t0.elapsed(), lats))
}

/// Runs `spec` for `rounds` rounds, the four modes interleaved (rotated each round).
pub async fn run_workload(spec: &Spec, rounds: usize) -> Result<WorkloadResult> {
    if spec.meta {
        return meta::run(spec.name, spec.writers, spec.file_size as usize, rounds).await;
    }
    let (a, b) = (start(false)?, start(true)?);
    let mut sa = Vec::new();
    let mut sb = Vec::new();
    for _ in 0..spec.writers {
        sa.push(session(&a).await?);
        sb.push(session(&b).await?);
    }
    let ping = session(&a).await?;
    let fixed = if spec.new_files {
        None
    } else {
        Some((
            writers(&sa, spec, "w").await?,
            writers(&sb, spec, "w").await?,
        ))
    };
    let mut figs: Vec<(Mode, ModeFigures)> =
        ORDER.iter().map(|m| (*m, ModeFigures::default())).collect();
    for r in 0..rounds {
        for k in 0..ORDER.len() {
            let mode = ORDER[(k + r) % ORDER.len()];
            let (srv, sess) = if mode == Mode::Sync {
                (&b, &sb)
            } else {
                (&a, &sa)
            };
            let seed = (r * 8 + k) as u64;
            let (wall, lats) = match &fixed {
                Some((wa, wb)) => {
                    let ws = if mode == Mode::Sync { wb } else { wa };
                    round(ws, &srv.vol, mode, spec, &ping, seed).await?
                }
                None => {
                    // Untimed: create the files and take their layouts; remove them after.
                    let ws = writers(sess, spec, &format!("n{r}-{}-", mode.name())).await?;
                    let out = round(&ws, &srv.vol, mode, spec, &ping, seed).await?;
                    for w in ws {
                        let w = Arc::try_unwrap(w)
                            .map_err(|_| ClientError::Harness("writer still shared".into()))?;
                        w.remove().await?;
                    }
                    out
                }
            };
            if let Some((_, f)) = figs.iter_mut().find(|(m, _)| *m == mode) {
                f.record_round(wall, lats);
            }
        }
    }
    drop(fixed);
    Ok(WorkloadResult {
        name: spec.name.to_string(),
        writers: spec.writers,
        file_size: spec.file_size,
        io_size: spec.io_size,
        rounds,
        modes: figs,
        server: stop(a)?,
        server_sync: stop(b)?,
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
