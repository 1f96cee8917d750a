//! The `pnfsd` binary: `mkfs` formats a volume, `serve` (the default) runs the metadata
//! server until SIGTERM/SIGINT, then unmounts the store cleanly.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use pnfsd::config::{parse_size, Config, Overrides};
use pnfsd::server::Server;
use pnfsd::store::{Store, StoreError};
use pnfsd::volume::{Volume, VolumeLock, VolumeSource};

#[derive(Debug, Parser)]
#[command(
    name = "pnfsd",
    version,
    about = "pNFS block-layout metadata server (NFSv4.1/4.2)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Format a volume file (created sparse if missing), block device, or external NVMe/TCP
    /// namespace (`nvme-tcp://HOST[:PORT]/NQN[?nsid=N]`).
    Mkfs(MkfsArgs),
    /// Serve NFS (the default when no command is given).
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
struct MkfsArgs {
    path: PathBuf,
    /// Size of a volume file to create, e.g. 8G (ignored for an existing block device).
    #[arg(long, default_value = "8G", value_parser = size_arg)]
    size: u64,
    /// Overwrite a formatted volume.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args, Default)]
struct ServeArgs {
    /// TOML configuration (deploy/pnfsd.toml shows every key); flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Directory of the embedded default volume (`<DIR>/volume.img`).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// NFS address, default 127.0.0.1:2049.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Embedded NVMe/TCP target address, default 127.0.0.1:4420.
    #[arg(long, conflicts_with = "no_nvme")]
    nvme_listen: Option<SocketAddr>,
    /// Do not start the embedded NVMe/TCP target.
    #[arg(long)]
    no_nvme: bool,
    #[arg(long)]
    lease_seconds: Option<u32>,
    /// Serve Prometheus metrics (`GET /metrics`) on this address; off by default.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
}

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map(|s| s.0).map_err(|e| e.to_string())
}

#[derive(Debug, thiserror::Error)]
enum DaemonError {
    #[error(transparent)]
    Config(#[from] pnfsd::config::ConfigError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error(transparent)]
    Nvme(#[from] pnfsd::nvme::NvmeError),
    #[error(transparent)]
    Volume(#[from] pnfsd::volume::VolumeError),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |err| DaemonError::Io { what, err }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Plain text when the log goes to a file or a pipe (test harnesses grep it).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let res = match cli.cmd {
        Some(Cmd::Mkfs(a)) => mkfs(&a),
        Some(Cmd::Serve(a)) => serve(&a),
        None => serve(&ServeArgs::default()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn mkfs(a: &MkfsArgs) -> Result<(), DaemonError> {
    let src = VolumeSource::parse(&a.path).map_err(pnfsd::config::ConfigError::Invalid)?;
    match &src {
        VolumeSource::File(path) => {
            // Never under a running daemon (volume.rs); a missing file has no holder.
            let _lock = path
                .exists()
                .then(|| VolumeLock::acquire(path))
                .transpose()?;
            Store::mkfs(path, a.size, a.force)?;
        }
        // The namespace's size is the volume's; `--size` does not apply.
        VolumeSource::Nvme(_) => {
            let vol = Volume::open(&src)?;
            let r = Store::mkfs_dev(vol.dev.clone(), a.force);
            vol.close();
            r?;
        }
    }
    tracing::info!("formatted {src}");
    Ok(())
}

/// Formats the volume file on first start (the embedded default of issue 3).
fn ensure_volume(cfg: &Config, volume: &Path) -> Result<(), DaemonError> {
    if volume.exists() {
        return Ok(());
    }
    if let Some(dir) = volume.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err(format!("create {}", dir.display())))?;
    }
    Store::mkfs(volume, cfg.volume_size.0, false)?;
    tracing::info!(
        "formatted {} ({} bytes)",
        volume.display(),
        cfg.volume_size.0
    );
    Ok(())
}

fn serve(a: &ServeArgs) -> Result<(), DaemonError> {
    let overrides = Overrides {
        data_dir: a.data_dir.clone(),
        listen: a.listen,
        nvme_listen: a.nvme_listen,
        no_nvme: a.no_nvme,
        lease_seconds: a.lease_seconds,
        metrics_listen: a.metrics_listen,
    };
    let cfg = Config::load(a.config.as_deref(), &overrides)?;
    let volume = cfg.volume_source()?;
    if a.nvme_listen.is_some() && cfg.embedded_target().is_none() && !a.no_nvme {
        tracing::warn!(
            "--nvme-listen ignored: the volume is an external NVMe/TCP namespace \
             (nvme_reexport = true exports it through the embedded target too)"
        );
    }
    if let VolumeSource::File(path) = &volume {
        ensure_volume(&cfg, path)?;
    }
    // Locked against a second daemon, or connected to the external namespace (volume.rs).
    let vol = Volume::open(&volume)?;
    vol.check_formatted(&volume)?;
    // One device for the store and the NVMe namespace: one descriptor, one fdatasync (nvme.rs).
    let dev = vol.dev.clone();
    let store = Arc::new(Store::open_dev(dev.clone(), cfg.store_options())?);
    let opts = cfg.nfs_options();
    let srv = Arc::new(Server::new(store.clone(), opts));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pnfsd")
        .build()
        .map_err(io_err("tokio runtime"))?;
    let served = rt.block_on(run(&cfg, &volume, srv.clone(), dev, vol.nvme.clone()));
    tracing::info!(counters = ?srv.pnfs.metrics.snapshot(), "pNFS layout counters");
    // COMPOUNDs still running on blocking threads get a moment to finish before the unmount.
    rt.shutdown_timeout(Duration::from_secs(5));
    // Whatever stopped the server, leave a clean log behind (design.md §3: next mount O(1)).
    let unmounted = store.unmount();
    vol.close();
    served?;
    unmounted?;
    tracing::info!("pnfsd stopped; {volume} unmounted cleanly");
    Ok(())
}

async fn run(
    cfg: &Config,
    volume: &VolumeSource,
    srv: Arc<Server>,
    dev: Arc<dyn metalog::BlockDev>,
    external: Option<Arc<pnfsd::nvme_volume::NvmeDev>>,
) -> Result<(), DaemonError> {
    use tokio::signal::unix::{signal, SignalKind};
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(io_err(format!("listen on {}", cfg.listen)))?;
    let mut term = signal(SignalKind::terminate()).map_err(io_err("SIGTERM handler"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(io_err("SIGINT handler"))?;

    // The embedded NVMe/TCP target (issue 5): bound before "ready", stopped after NFS.
    let uuid_bytes = srv.store.volume_uuid();
    let nvme = match cfg.embedded_target() {
        Some(addr) => {
            let tc = pnfsd::nvme::target_config(cfg, dev, uuid_bytes);
            let target = pnfsd::nvme::bind(addr, tc).await?;
            tracing::info!(
                "nvme-tcp target on {} subsystem {} namespace {} = {}",
                target.local_addr(),
                cfg.nvme_nqn,
                pnfsd::nvme::NSID,
                volume
            );
            // SCSI layout offered: the MDS holds the volume's reservation (issue 5 item 3).
            if cfg
                .layout_types
                .contains(&pnfsd::config::LayoutTypeName::Scsi)
            {
                match pnfsd::nvme::claim_for_scsi(&target) {
                    Ok(()) => {
                        srv.pnfs
                            .scsi
                            .install(Arc::new(pnfsd::nvme::TargetFencer(target.clone())));
                        // The name a udev'd Linux client opens (docs/pnfs.md "the designator").
                        let d = pnfsd::nfs4::scsi::volume_designator(&srv);
                        let hex: String = d.bytes().iter().map(|b| format!("{b:02x}")).collect();
                        tracing::info!(
                            client_device = %format!("/dev/disk/by-id/nvme-eui.{hex}"),
                            "SCSI layout: MDS holds EXCLUSIVE_ACCESS_REG_ONLY"
                        );
                    }
                    Err(s) => tracing::error!(?s, "SCSI layout: reservation not taken"),
                }
            }
            let task = target.spawn();
            Some((target, task))
        }
        None => {
            match &external {
                Some(ext) => {
                    tracing::info!(
                        "nvme-tcp target off: the volume is the external namespace {}",
                        ext.spec()
                    );
                    let scsi = cfg
                        .layout_types
                        .contains(&pnfsd::config::LayoutTypeName::Scsi);
                    let (srv, ext) = (srv.clone(), ext.clone());
                    // Reservation commands block: not on a runtime worker.
                    let setup = move || pnfsd::nvme_volume::setup_scsi(scsi, &srv, &ext);
                    if tokio::task::spawn_blocking(setup).await.is_err() {
                        tracing::error!("SCSI layout setup on the external namespace failed");
                    }
                }
                None => tracing::info!("nvme-tcp target disabled"),
            }
            None
        }
    };

    // Leases, grace period and recall timeouts advance once a second (RFC 8881 §8.3).
    let ticker = {
        let srv = srv.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let srv = srv.clone();
                let tick = move || {
                    srv.state.tick();
                    pnfsd::nfs4::callback::tick_at(&srv, std::time::Instant::now());
                };
                if tokio::task::spawn_blocking(tick).await.is_err() {
                    tracing::error!("state tick panicked");
                }
            }
        })
    };

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The operator's counters (issue 7), bound before "ready" so a bad address fails the start.
    let metrics = match cfg.metrics_listen {
        Some(addr) => {
            let l = pnfsd::metrics::bind(addr)
                .await
                .map_err(io_err(format!("metrics listen on {addr}")))?;
            let local = l.local_addr().map_err(io_err("metrics address"))?;
            tracing::info!("metrics on http://{local}/metrics");
            Some(tokio::spawn(pnfsd::metrics::serve(
                l,
                srv.clone(),
                stop_rx.clone(),
            )))
        }
        None => None,
    };
    let uuid = uuid::Uuid::from_bytes(uuid_bytes);
    let nfs = tokio::spawn(pnfsd::rpc::serve(
        listener,
        srv,
        cfg.rpc_options(),
        stop_rx,
        Duration::from_secs(10),
    ));
    let nvme_desc = match (&nvme, &external) {
        (Some((t, _)), _) => format!("nvme {} nqn {}", t.local_addr(), cfg.nvme_nqn),
        (None, Some(_)) => "nvme off (external volume)".to_string(),
        (None, None) => "nvme off".to_string(),
    };
    tracing::info!(
        "pnfsd ready: nfs {} {} volume {} uuid {}",
        cfg.listen,
        nvme_desc,
        volume,
        uuid
    );
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping"),
        _ = int.recv() => tracing::info!("SIGINT: stopping"),
    }
    let _ = stop_tx.send(true);
    if nfs.await.is_err() {
        tracing::error!("NFS listener task failed");
    }
    ticker.abort();
    if let Some(m) = metrics {
        let _ = m.await;
    }
    // Before the store unmounts (serve): no NVMe I/O may reach the volume after that, so
    // wait for every connection and every backend call in flight (bounded: a backend call
    // stuck in the kernel must not keep the daemon from stopping; logged if so).
    if let Some((target, task)) = nvme {
        if target.shutdown_and_wait(Duration::from_secs(10)).await {
            tracing::info!("nvme-tcp target quiet: no connection or I/O left");
        }
        match task.await {
            Ok(Ok(())) => tracing::info!("nvme-tcp target stopped"),
            Ok(Err(e)) => tracing::error!("nvme-tcp target: {e}"),
            Err(_) => tracing::error!("nvme-tcp target task failed"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("pnfsd").chain(args.iter().copied()))
    }

    #[test]
    fn no_arguments_means_serve_with_defaults() {
        assert!(parse(&[]).unwrap().cmd.is_none());
    }

    #[test]
    fn mkfs_arguments() {
        let Some(Cmd::Mkfs(m)) = parse(&["mkfs", "/tmp/v.img", "--size", "1G", "--force"])
            .unwrap()
            .cmd
        else {
            panic!()
        };
        assert_eq!(
            (m.path, m.size, m.force),
            (PathBuf::from("/tmp/v.img"), 1 << 30, true)
        );
        let Some(Cmd::Mkfs(m)) = parse(&["mkfs", "v"]).unwrap().cmd else {
            panic!()
        };
        assert_eq!((m.size, m.force), (8 << 30, false));
        assert!(parse(&["mkfs", "v", "--size", "lots"]).is_err());
        assert!(parse(&["mkfs"]).is_err());
    }

    #[test]
    fn serve_flags() {
        let Some(Cmd::Serve(s)) = parse(&[
            "serve",
            "--config",
            "c.toml",
            "--data-dir",
            "/d",
            "--listen",
            "0.0.0.0:2050",
            "--nvme-listen",
            "0.0.0.0:4420",
            "--lease-seconds",
            "15",
        ])
        .unwrap()
        .cmd
        else {
            panic!()
        };
        assert_eq!(s.config, Some(PathBuf::from("c.toml")));
        assert_eq!(s.data_dir, Some(PathBuf::from("/d")));
        assert_eq!(s.listen.map(|a| a.port()), Some(2050));
        assert_eq!(s.nvme_listen.map(|a| a.port()), Some(4420));
        assert_eq!(s.lease_seconds, Some(15));
        assert!(!s.no_nvme);
        assert!(parse(&["serve", "--listen", "nowhere"]).is_err());
        let Some(Cmd::Serve(s)) = parse(&["serve", "--no-nvme"]).unwrap().cmd else {
            panic!()
        };
        assert!(s.no_nvme && s.nvme_listen.is_none() && s.metrics_listen.is_none());
        let Some(Cmd::Serve(s)) = parse(&["serve", "--metrics-listen", "127.0.0.1:9400"])
            .unwrap()
            .cmd
        else {
            panic!()
        };
        assert_eq!(s.metrics_listen.map(|a| a.port()), Some(9400));
        assert!(parse(&["serve", "--no-nvme", "--nvme-listen", "127.0.0.1:1"]).is_err());
    }
}
