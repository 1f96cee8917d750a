//! `serve`: the volume mounted, the listeners bound, the services run until a signal stops
//! them, the store unmounted.

use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::server::Server;
use crate::store::Store;
use crate::volume::{Volume, VolumeSource};

use super::args::ServeArgs;
use super::logging::Logging;
use super::mkfs::{ensure_volume, FreshVolume};
use super::signals::{notify, Reloader, Signals};
use super::{config_err, io_err, DaemonError};

/// The sockets, bound before the volume is formatted or mounted: a busy or bad address
/// fails the start before it changes anything on disk.
pub struct Listeners {
    pub nfs: tokio::net::TcpListener,
    pub metrics: Option<tokio::net::TcpListener>,
}

pub async fn bind_listeners(cfg: &Config) -> Result<Listeners, DaemonError> {
    let nfs = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(io_err(format!("listen on {}", cfg.listen)))?;
    // The target binds once the volume is open (it needs the device); a trial bind now
    // reports a taken port before a fresh volume is formatted.
    if let Some(addr) = cfg.embedded_target() {
        match std::net::TcpListener::bind(addr) {
            Ok(l) => drop(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(crate::nvme::NvmeError::AddrInUse { addr }.into())
            }
            Err(e) => return Err(io_err(format!("NVMe/TCP target on {addr}"))(e)),
        }
    }
    let metrics = match cfg.metrics_listen {
        Some(addr) => Some(
            crate::metrics::bind(addr)
                .await
                .map_err(io_err(format!("metrics listen on {addr}")))?,
        ),
        None => None,
    };
    Ok(Listeners { nfs, metrics })
}

pub fn serve(a: &ServeArgs, log: &Logging) -> Result<(), DaemonError> {
    let overrides = a.overrides();
    let cfg = Config::load(a.config.as_deref(), &overrides)
        .map_err(|err| config_err(a.config.as_deref(), err))?;
    log.apply(&cfg)?;
    let volume = cfg.volume_source()?;
    if a.nvme_listen.is_some() && cfg.embedded_target().is_none() && !a.no_nvme {
        tracing::warn!(
            "--nvme-listen ignored: the volume is an external NVMe/TCP namespace \
             (nvme_reexport = true exports it through the embedded target too)"
        );
    }
    for w in cfg.reachability_warnings() {
        tracing::warn!("{w}");
    }
    // Before the runtime's threads: glibc's arenas stay few (alloc.rs).
    if let Some(n) = crate::alloc::limit_arenas() {
        tracing::debug!(arenas = n, "malloc arenas limited");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pnfsd")
        .build()
        .map_err(io_err("tokio runtime"))?;
    let signals = Signals::register(&rt)?;
    let listeners = rt.block_on(bind_listeners(&cfg))?;
    let mut fresh = match &volume {
        VolumeSource::File(path) => ensure_volume(&cfg, path)?,
        VolumeSource::Nvme(_) => None,
    };
    let reloader = Reloader {
        path: a.config.as_deref(),
        overrides,
        log,
        running: cfg.clone(),
        srv: None,
    };
    let res = serve_volume(
        &cfg, &volume, a.takeover, rt, listeners, signals, reloader, &mut fresh,
    );
    // Failed before it served: what this start created goes.
    if let (Err(_), Some(f)) = (&res, fresh.take()) {
        f.remove();
    }
    res
}

/// Opens and mounts the volume, serves until a stop signal, unmounts. `fresh` is taken (the
/// volume is kept) once the daemon is ready. An external volume is claimed (its NVMe
/// reservation, taken over from another MDS with `takeover`) before anything of it is read;
/// if that reservation is lost while serving, the daemon stops without writing the volume
/// again (docs/ha.md).
#[allow(clippy::too_many_arguments)]
pub fn serve_volume(
    cfg: &Config,
    volume: &VolumeSource,
    takeover: bool,
    rt: tokio::runtime::Runtime,
    listeners: Listeners,
    signals: Signals,
    mut reloader: Reloader<'_>,
    fresh: &mut Option<FreshVolume>,
) -> Result<(), DaemonError> {
    notify(&[sd_notify::NotifyState::Status(&format!(
        "mounting {volume}"
    ))]);
    // Locked against a second daemon, or connected to the external namespace (volume.rs).
    let vol = Volume::open_with(volume, cfg.metadata_volume_source()?.as_ref())?;
    let mut store_options = cfg.store_options();
    // The namespace that holds the log: the metadata member of a split volume.
    let split = vol.meta_nvme.is_some();
    let claimed = vol.meta_nvme.clone().or(vol.nvme.clone());
    if let Some(ext) = &claimed {
        store_options.taken_over = crate::daemon::nvme::claim_volume(cfg, takeover, split, ext)?;
    } else if takeover {
        tracing::warn!("--takeover ignored: {volume} is not an external NVMe/TCP namespace");
    }
    vol.check_formatted(volume)?;
    // One device for the store and the NVMe namespace: one descriptor, one fdatasync (nvme/mod.rs).
    let dev = vol.dev.clone();
    let store = Arc::new(Store::open_dev(dev.clone(), store_options).map_err(|err| {
        DaemonError::Mount {
            volume: volume.to_string(),
            err,
        }
    })?);
    // The shutdown line names the volume as the operator does (metalog knows no names).
    store.log().set_device_name(volume.to_string());
    start_event(volume, &store.mount_stats());
    let opts = cfg.nfs_options();
    let srv = Arc::new(Server::new(store.clone(), opts));
    srv.exports.replace(cfg.export_table()?);
    for r in crate::exports::describe(&cfg.exports) {
        tracing::info!("export: {r}");
    }
    reloader.srv = Some(srv.clone());
    let served = rt.block_on(run(
        cfg,
        volume,
        srv.clone(),
        vol.data_dev.clone(),
        vol.nvme.clone(),
        claimed.map(|d| (d, split)),
        listeners,
        signals,
        reloader,
        fresh,
    ));
    srv.callbacks.stop();
    // Async copies stop after their step; a restart forgets them (docs/copy.md).
    srv.copies.stop();
    tracing::info!(
        counters = ?srv.layouts.metrics.snapshot(),
        ops = ?srv.ops.layout_ops(),
        "pNFS layout counters"
    );
    // COMPOUNDs still running on blocking threads get a moment to finish before the unmount.
    rt.shutdown_timeout(Duration::from_secs(5));
    if let Err(e @ DaemonError::Fenced { .. }) = served {
        // Another MDS owns the volume now: no unmount, no clean mark, nothing written.
        return Err(e);
    }
    // Whatever stopped the server, leave a clean log behind (docs/design.md §3: next mount O(1)).
    let unmounted = store.unmount();
    vol.close();
    served?;
    unmounted.map_err(|err| DaemonError::Unmount {
        volume: volume.to_string(),
        err,
    })?;
    tracing::info!("pnfsd stopped; {volume} unmounted cleanly");
    Ok(())
}

/// The start line: a clean start, or a recovery after a crash with
/// what it replayed (metalog's own "log recovery:" lines give the records and KiB).
pub fn start_event(volume: &VolumeSource, m: &crate::store::MountStats) {
    match &m.stale_mark {
        None if m.items_replayed == 0 => tracing::info!(
            volume = %volume,
            mount_ms = m.load_ms + m.log_mount_ms,
            "start: clean (the last unmount was clean, nothing replayed)"
        ),
        mark => tracing::info!(
            volume = %volume,
            last_mounted_by = %mark.as_ref().map_or("-".into(), crate::store::describe_mark),
            items_replayed = m.items_replayed,
            recovery_ms = m.log_mount_ms,
            blocks_read = m.blocks_read,
            "start: recovery after a crash (the volume was not unmounted cleanly; its log was replayed)"
        ),
    }
}

#[allow(clippy::too_many_arguments)]
pub async fn run(
    cfg: &Config,
    volume: &VolumeSource,
    srv: Arc<Server>,
    dev: Arc<dyn metalog::BlockDev>,
    external: Option<Arc<crate::nvme::volume::NvmeDev>>,
    claimed: Option<(Arc<crate::nvme::volume::NvmeDev>, bool)>,
    listeners: Listeners,
    mut signals: Signals,
    mut reloader: Reloader<'_>,
    fresh: &mut Option<FreshVolume>,
) -> Result<(), DaemonError> {
    let Listeners {
        nfs: listener,
        metrics: metrics_listener,
    } = listeners;

    // The embedded NVMe/TCP target: bound before "ready", stopped after NFS.
    let uuid_bytes = srv.store.volume_uuid();
    let nvme = match cfg.embedded_target() {
        Some(addr) => {
            let mut tc = crate::daemon::nvme::target_config(cfg, dev, uuid_bytes);
            crate::nvme::guard_mds_blocks(&mut tc, &srv.store.superblock().geometry);
            crate::daemon::nvme::gate_hosts(&mut tc, &srv, cfg);
            // A split volume's metadata is on a member the target does not export.
            if !srv.store.superblock().geometry.is_split() {
                crate::nvme::meta_guard::guard_metadata(&mut tc, srv.store.meta_blocks());
            }
            let target = crate::nvme::bind(addr, tc).await?;
            crate::daemon::nvme::install_fencing(&srv, &target, cfg);
            tracing::info!(
                "nvme-tcp target on {} subsystem {} namespace {} = {}",
                target.local_addr(),
                cfg.nvme_nqn,
                crate::nvme::NSID,
                volume
            );
            // SCSI layout offered: the MDS holds the volume's reservation.
            if cfg
                .layout_types
                .contains(&crate::config::LayoutTypeName::Scsi)
            {
                match crate::nvme::claim_for_scsi(&target) {
                    Ok(()) => {
                        srv.layouts
                            .scsi
                            .install(Arc::new(crate::daemon::nvme::TargetFencer(target.clone())));
                        // The name a udev'd Linux client opens (docs/pnfs.md "the designator").
                        let d = crate::nfs4::layouts::scsi::volume_designator(&srv.store);
                        let hex: String = d.bytes().iter().map(|b| format!("{b:02x}")).collect();
                        tracing::info!(
                            client_device = %format!("/dev/disk/by-id/nvme-eui.{hex}"),
                            "SCSI layout: MDS holds EXCLUSIVE_ACCESS_REG_ONLY"
                        );
                        // Registrations kept from the previous instance (PTPL) are swept
                        // once its layouts expire (docs/pnfs.md "After a restart").
                        crate::nfs4::layouts::scsi_restart::begin(&srv.layouts, &srv.state);
                    }
                    Err(s) => tracing::error!(?s, "SCSI layout: reservation not taken"),
                }
            } else if let Err(s) = crate::nvme::release_scsi_claim(&target) {
                tracing::error!(?s, "the reservation of an earlier SCSI-layout start stays");
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
                        .contains(&crate::config::LayoutTypeName::Scsi);
                    let (srv, ext) = (srv.clone(), ext.clone());
                    let key = cfg.reservation_key.0;
                    // Reservation commands block: not on a runtime worker.
                    let setup = move || crate::daemon::nvme::setup_scsi(scsi, key, &srv, &ext);
                    if tokio::task::spawn_blocking(setup).await.is_err() {
                        tracing::error!("SCSI layout setup on the external namespace failed");
                    }
                }
                None => tracing::info!("nvme-tcp target disabled"),
            }
            None
        }
    };

    // Callbacks (layout recalls) go from a thread of their own, so that no COMPOUND waits
    // for another client's backchannel (nfs4::callback::CbQueue).
    {
        let srv = srv.clone();
        let spawned = std::thread::Builder::new()
            .name("pnfsd-cb-sender".into())
            .spawn(move || crate::nfs4::callback::run_sender(srv, Server::backchannel));
        if let Err(e) = spawned {
            return Err(io_err("callback sender thread")(e));
        }
    }
    // The async COPYs' workers (nfs4/copy/offload.rs).
    if let Err(e) = crate::nfs4::copy::offload::run_workers(&srv, Server::copy_env) {
        return Err(io_err("copy worker thread")(e));
    }
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
                    crate::nfs4::layouts::recall::tick(
                        &srv.layouts_env(),
                        std::time::Instant::now(),
                    );
                    crate::nfs4::copy::offload::tick(&srv.copy_env(), std::time::Instant::now());
                };
                if tokio::task::spawn_blocking(tick).await.is_err() {
                    tracing::error!("state tick panicked");
                }
            }
        })
    };

    // Fencing (docs/ha.md "A fenced MDS"): a command the target refused by reservation, or a
    // report that another host holds the volume now, stops the daemon.
    // A watch, not a oneshot: with no external volume the sender is gone at once, and a
    // watch may be polled again after that (each later select finds it closed).
    let (fenced_tx, mut fenced_rx) = tokio::sync::watch::channel(false);
    let fence_watch = claimed.map(|(ext, split)| {
        let probe = crate::daemon::nvme::claim_type(cfg, split).is_some();
        tokio::spawn(watch_fencing(ext, probe, fenced_tx))
    });

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The operator's counters, bound before "ready" so a bad address fails the start.
    let metrics = match metrics_listener {
        Some(l) => {
            let local = l.local_addr().map_err(io_err("metrics address"))?;
            tracing::info!("metrics on http://{local}/metrics");
            let admin = cfg.admin.then(|| crate::admin::AdminInfo {
                started: std::time::Instant::now(),
                volume: volume.to_string(),
                metadata_cache: cfg.metadata_cache.0,
            });
            if admin.is_some() {
                tracing::info!("admin views on http://{local}/status and /clients");
            }
            // The controller gauge; the command and byte counters read the bound target (metrics/nvme.rs).
            let controllers = nvme.as_ref().map(|(t, _)| {
                let t = t.clone();
                Arc::new(move || t.controller_count()) as crate::metrics::ControllerCount
            });
            let ep = crate::metrics::Endpoint::new(srv.clone(), controllers, admin);
            Some(tokio::spawn(crate::metrics::serve(l, ep, stop_rx.clone())))
        }
        None => None,
    };
    let uuid = uuid::Uuid::from_bytes(uuid_bytes);
    let nfs = tokio::spawn(crate::rpc::serve(
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
    let ready = format!(
        "pnfsd ready: nfs {} {} volume {} uuid {}",
        cfg.listen, nvme_desc, volume, uuid
    );
    tracing::info!("{ready}");
    // Served: the volume is the daemon's now, whatever happens next.
    fresh.take();
    notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&ready),
    ]);
    let mut fenced = false;
    loop {
        tokio::select! {
            Ok(()) = fenced_rx.changed() => {
                tracing::error!(
                    "fenced: another MDS took {volume} over; stopping now, writing nothing more"
                );
                fenced = true;
                break;
            }
            _ = signals.term.recv() => {
                tracing::info!("SIGTERM: stopping");
                break;
            }
            _ = signals.int.recv() => {
                tracing::info!("SIGINT: stopping");
                break;
            }
            _ = signals.hup.recv() => {
                notify(&[sd_notify::NotifyState::Reloading]);
                // A small file read and a comparison: short enough for this worker.
                reloader.reload();
                notify(&[
                    sd_notify::NotifyState::Ready,
                    sd_notify::NotifyState::Status(&ready),
                ]);
            }
        }
    }
    notify(&[
        sd_notify::NotifyState::Stopping,
        sd_notify::NotifyState::Status("stopping: unmounting the volume"),
    ]);
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
    if let Some(w) = fence_watch {
        w.abort();
    }
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
    if fenced {
        return Err(DaemonError::Fenced {
            volume: volume.to_string(),
        });
    }
    Ok(())
}

/// How often a serving MDS asks the external namespace whether it still holds the
/// reservation: a paused MDS that resumes learns within this that it was fenced, even if it
/// has nothing to write.
const FENCE_PROBE_INTERVAL: Duration = Duration::from_secs(2);

/// Sends on `fenced` once the device is fenced: a refused command marks it at once (checked
/// every 200 ms), and with `probe` a Reservation Report every [`FENCE_PROBE_INTERVAL`].
async fn watch_fencing(
    ext: Arc<crate::nvme::volume::NvmeDev>,
    probe: bool,
    fenced: tokio::sync::watch::Sender<bool>,
) {
    let mut every = tokio::time::interval(Duration::from_millis(200));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_probe = std::time::Instant::now();
    loop {
        every.tick().await;
        if probe && last_probe.elapsed() >= FENCE_PROBE_INTERVAL && !ext.is_fenced() {
            last_probe = std::time::Instant::now();
            let e = ext.clone();
            match tokio::task::spawn_blocking(move || crate::nvme::volume::still_holder(&e)).await {
                Ok(Ok(_)) => {}
                // A lost connection is the device watch's to report; the probe stays quiet.
                Ok(Err(e)) => tracing::debug!("reservation probe: {e}"),
                Err(_) => tracing::error!("reservation probe panicked"),
            }
        }
        if ext.is_fenced() {
            let _ = fenced.send(true);
            return;
        }
    }
}
