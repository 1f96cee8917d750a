//! `meta`: creates, renames and removes by 1 and 8 clients (one session each) on a sync export,
//! against the same on an `export_sync = "async"` export, interleaved by round. A unit is one
//! namespace operation: create (OPEN create + CLOSE), RENAME, or REMOVE.

use std::sync::Arc;
use std::time::{Duration, Instant};

use client_tests::{ClientError, Compound, Result, Session};

use super::report::{ModeFigures, WorkloadResult};
use super::target::{delta, Options, Target};
use super::{Mode, Spec};

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

async fn sessions(t: &Target, n: usize) -> Result<Vec<Arc<Session>>> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(super::session(t).await?);
    }
    Ok(out)
}

/// `spec.writers` concurrent clients, `spec.file_size` files each, `rounds` interleaved
/// rounds. With `--server` only the running server's export is measured (as `sync-export`:
/// the default; the async export needs a second server and is skipped).
pub async fn run(spec: &Spec, rounds: usize, o: &Options) -> Result<WorkloadResult> {
    let (clients, files) = (spec.writers, spec.file_size as usize);
    let mut notes = Vec::new();
    let (ps, pa) = if o.server.is_some() {
        notes.push(
            "async-export skipped: --server measures one running pnfsd (reported as \
             sync-export, the default export_sync); the ratio needs a second server"
                .to_string(),
        );
        (Target::external(o, false, 0).await?, None)
    } else {
        let sync = Target::start("export_sync = \"sync\"\n", o, false, 0).await?;
        let asy = Target::start("export_sync = \"async\"\n", o, false, 0).await?;
        (sync, Some(asy))
    };
    let ss = sessions(&ps, clients).await?;
    let sa = match &pa {
        Some(p) => sessions(p, clients).await?,
        None => Vec::new(),
    };
    let order: Vec<Mode> = [Mode::ExportSync, Mode::ExportAsync]
        .into_iter()
        .filter(|m| *m == Mode::ExportSync || pa.is_some())
        .collect();
    let tag = super::run_tag();
    let mut figs: Vec<(Mode, ModeFigures)> =
        order.iter().map(|m| (*m, ModeFigures::default())).collect();
    for r in 0..rounds {
        for k in 0..order.len() {
            let mode = order[(k + r) % order.len()];
            let (srv, sess) = match (&pa, mode) {
                (Some(p), Mode::ExportAsync) => (p, &sa),
                _ => (&ps, &ss),
            };
            let before = srv.counters().await?;
            let t0 = Instant::now();
            let tasks: Vec<_> = sess
                .iter()
                .enumerate()
                .map(|(i, s)| tokio::spawn(client(s.clone(), format!("{tag}-m{r}-{i}"), files)))
                .collect();
            let mut lats = Vec::new();
            for t in tasks {
                lats.extend(
                    t.await
                        .map_err(|e| ClientError::Harness(format!("client task: {e}")))??,
                );
            }
            let wall = t0.elapsed();
            let after = srv.counters().await?;
            if let Some((_, f)) = figs.iter_mut().find(|(m, _)| *m == mode) {
                f.record_round(wall, lats);
                f.record_server(delta(before, after));
            }
        }
    }
    ps.stop()?;
    if let Some(p) = pa {
        p.stop()?;
    }
    Ok(WorkloadResult {
        name: spec.name.to_string(),
        writers: clients,
        file_size: files as u64,
        io_size: 0,
        rounds,
        modes: figs,
        notes,
    })
}
