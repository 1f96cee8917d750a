//! `meta`: creates, renames and removes by 1 and 8 clients (one session each) on a sync export,
//! against the same on an `export_sync = "async"` export, interleaved by round. A unit is one
//! namespace operation: create (OPEN create + CLOSE), RENAME, or REMOVE.

use std::sync::Arc;
use std::time::{Duration, Instant};

use client_tests::{ClientError, Compound, PnfsdProcess, Result, ServerOptions, Session};

use super::report::{ModeFigures, WorkloadResult};
use super::Mode;

fn start(export: &str) -> Result<PnfsdProcess> {
    PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(format!(
            "volume_size = \"1G\"\ngrace_seconds = 1\nexport_sync = \"{export}\"\n"
        )),
        ..Default::default()
    })
}

/// One client's loop: `files` × (create, rename, remove) in the root; each op's latency.
async fn client(s: Arc<Session>, tag: String, files: usize) -> Result<Vec<Duration>> {
    let root = s.lookup_path("").await?;
    let mut lats = Vec::with_capacity(files * 3);
    for k in 0..files {
        let (a, b) = (format!("{tag}-{k}"), format!("{tag}-{k}.r"));
        let t0 = Instant::now();
        let f = s.create_file(&root, &a, 0o644).await?;
        s.close_file(&f).await?;
        lats.push(t0.elapsed());
        let t0 = Instant::now();
        s.run_ok(
            Compound::new()
                .putfh(&root)
                .savefh()
                .putfh(&root)
                .rename(&a, &b),
        )
        .await?;
        lats.push(t0.elapsed());
        let t0 = Instant::now();
        s.run_ok(Compound::new().putfh(&root).remove(&b)).await?;
        lats.push(t0.elapsed());
    }
    Ok(lats)
}

async fn sessions(p: &PnfsdProcess, n: usize) -> Result<Vec<Arc<Session>>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let s = Session::connect(p.addr()).await?;
        // OPEN is refused during grace (RFC 8881 §8.4.2): wait it out once per server.
        let root = s.lookup_path("").await?;
        let mut ok = false;
        for _ in 0..100 {
            match s.create_file(&root, ".grace-probe", 0o644).await {
                Err(ClientError::Nfs {
                    status: client_tests::NfsStat::GRACE,
                    ..
                }) => tokio::time::sleep(Duration::from_millis(100)).await,
                r => {
                    s.close_file(&r?).await?;
                    ok = true;
                    break;
                }
            }
        }
        if !ok {
            return Err(ClientError::Harness("server stayed in grace".into()));
        }
        out.push(Arc::new(s));
    }
    Ok(out)
}

/// `clients` concurrent clients, `files` files each, `rounds` interleaved rounds.
pub async fn run(
    name: &str,
    clients: usize,
    files: usize,
    rounds: usize,
) -> Result<WorkloadResult> {
    let (mut ps, mut pa) = (start("sync")?, start("async")?);
    let (ss, sa) = (sessions(&ps, clients).await?, sessions(&pa, clients).await?);
    let order = [Mode::ExportSync, Mode::ExportAsync];
    let mut figs: Vec<(Mode, ModeFigures)> =
        order.iter().map(|m| (*m, ModeFigures::default())).collect();
    for r in 0..rounds {
        for k in 0..order.len() {
            let mode = order[(k + r) % order.len()];
            let sess = if mode == Mode::ExportSync { &ss } else { &sa };
            let t0 = Instant::now();
            let tasks: Vec<_> = sess
                .iter()
                .enumerate()
                .map(|(i, s)| tokio::spawn(client(s.clone(), format!("m{r}-{i}"), files)))
                .collect();
            let mut lats = Vec::new();
            for t in tasks {
                lats.extend(
                    t.await
                        .map_err(|e| ClientError::Harness(format!("client task: {e}")))??,
                );
            }
            let wall = t0.elapsed();
            if let Some((_, f)) = figs.iter_mut().find(|(m, _)| *m == mode) {
                f.record_round(wall, lats);
            }
        }
    }
    ps.terminate()?;
    pa.terminate()?;
    Ok(WorkloadResult {
        name: name.to_string(),
        writers: clients,
        file_size: files as u64,
        io_size: 0,
        rounds,
        modes: figs,
        server: None,
        server_sync: None,
    })
}
