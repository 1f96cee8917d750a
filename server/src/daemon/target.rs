//! `pnfsd target`: the standalone NVMe/TCP target a storage node runs, so that a volume
//! outlives either MDS (docs/admin-guide.md "pnfsd target"). It serves the `[target]`
//! section's volume files or block devices (config/target.rs) as namespaces of one NVM
//! subsystem with the embedded target's code (crate `nvme-tcp`, the `VolumeBackend` of
//! nvme/mod.rs), and never mounts them: it reads a namespace's superblock only to guard its
//! metadata region.
//!
//! - Each volume is locked as `pnfsd serve` locks its own (`VolumeLock`): a second target,
//!   a `pnfsd serve` or a `pnfsd mkfs` of the same file is refused while this one runs.
//! - Reservations persist through power loss in `state_dir` (`nvme-ns<nsid>.reservations`,
//!   keyed by the namespace's UUID): the superblock's for a pnfsd volume (the identifiers
//!   the embedded target reports for it), else one kept in `nvme-ns<nsid>.uuid`.
//! - `TargetPolicy` is the target's `HostPolicy`: a namespace with `hosts` refuses every
//!   other host's reads and writes, and on a pnfsd volume the region before `data_start`
//!   (superblock, log, checkpoint slots) is written only by `mds_hosts` (Access Denied for
//!   the rest; the MDS writes it through this target). Both refusals are counted.
//!   Reservations are checked first (nvme-tcp `controller/io.rs`): a fenced MDS gets
//!   Reservation Conflict, counted per namespace (`Target::namespace_stats`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nvme_tcp::policy::Access;
use nvme_tcp::{HostPolicy, HostRef, NamespaceConfig, Target, TargetConfig};

use crate::config::target::{NamespaceSpec, TargetSection};
use crate::config::{Config, Overrides};
use crate::nvme::{VolumeBackend, LBA_SIZE};
use crate::volume::{Volume, VolumeSource};

use super::logging::Logging;
use super::signals::{notify, Signals};
use super::{config_err, io_err, DaemonError};

/// `pnfsd target`'s flags.
#[derive(Debug, clap::Args, Default)]
pub struct TargetArgs {
    /// TOML configuration with a [target] section (deploy/pnfsd-target.toml shows every
    /// key; packaged as /etc/pnfsd/pnfsd-target.toml); its relative paths are relative to
    /// its own directory.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Listen address, default 127.0.0.1:4420 ([target] listen); off the loopback it needs
    /// allowed_hosts or allow_any_host = true.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error(
        "namespace {nsid}: {} does not exist (pnfsd target never creates or formats a volume: \
         create the file or name the device, then start the target again)",
        path.display()
    )]
    Missing { nsid: u32, path: PathBuf },
    #[error("namespace {nsid}: {err}")]
    Volume {
        nsid: u32,
        err: crate::volume::VolumeError,
    },
    #[error("namespace {nsid}: {} is smaller than one {LBA_SIZE}-byte block", path.display())]
    Empty { nsid: u32, path: PathBuf },
    #[error(
        "namespace {nsid}: {} holds a pnfsd superblock that cannot be used ({err}): its \
         metadata region cannot be guarded; repair or reformat the volume",
        path.display()
    )]
    BadSuperblock {
        nsid: u32,
        path: PathBuf,
        err: layout::SuperblockError,
    },
    #[error(
        "{addr} is already in use; choose another address with --listen ADDR:PORT ([target] \
         listen)"
    )]
    AddrInUse { addr: SocketAddr },
    #[error("NVMe/TCP target on {addr}: {err}")]
    Bind {
        addr: SocketAddr,
        err: nvme_tcp::Error,
    },
}

/// A namespace opened for the target.
pub struct Opened {
    pub nsid: u32,
    pub path: PathBuf,
    /// Holds the lock for as long as the target runs.
    pub volume: Volume,
    pub uuid: [u8; 16],
    /// LBAs before the data area of a pnfsd volume; `None`: no pnfsd superblock.
    pub mds_lbas: Option<u64>,
    pub hosts: Option<Vec<String>>,
}

/// The `[target]` section of `path` (defaults without one) with `--listen` over it, checked:
/// the section, its namespaces, and the file's `log_level` (the logging applies it).
pub fn load(a: &TargetArgs) -> Result<(Config, TargetSection, Vec<NamespaceSpec>), DaemonError> {
    let path = a.config.as_deref();
    let cfg = Config::load(path, &Overrides::default()).map_err(|e| config_err(path, e))?;
    let mut t = cfg.target.clone();
    if let Some(p) = path {
        let abs = std::path::absolute(p).map_err(io_err(format!("{}", p.display())))?;
        t.resolve_paths(abs.parent().unwrap_or(Path::new("/")));
    }
    if let Some(l) = a.listen {
        t.listen = l;
    }
    let specs = t.check().map_err(|e| config_err(path, e))?;
    Ok((cfg, t, specs))
}

/// Locks and opens one namespace's volume and reads what it holds (module comment).
pub fn open(spec: &NamespaceSpec, state_dir: &Path) -> Result<Opened, DaemonError> {
    let (nsid, path) = (spec.nsid, spec.path.clone());
    match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TargetError::Missing { nsid, path }.into())
        }
        _ => {}
    }
    let volume = Volume::open(&VolumeSource::File(path.clone()))
        .map_err(|err| TargetError::Volume { nsid, err })?;
    if volume.dev.size() < u64::from(LBA_SIZE) {
        return Err(TargetError::Empty { nsid, path }.into());
    }
    let mut b0 = vec![0u8; layout::BLOCK_SIZE as usize];
    volume
        .dev
        .read_at(&mut b0, 0)
        .map_err(io_err(format!("namespace {nsid}: read {}", path.display())))?;
    let (uuid, mds_lbas) = match layout::Superblock::decode(&b0) {
        Ok(sb) => {
            let lbas = sb.geometry.data_start * u64::from(layout::BLOCK_SIZE) / u64::from(LBA_SIZE);
            (sb.uuid, Some(lbas))
        }
        Err(layout::SuperblockError::BadMagic | layout::SuperblockError::Short) => {
            (kept_uuid(state_dir, nsid, &path)?, None)
        }
        Err(err) => return Err(TargetError::BadSuperblock { nsid, path, err }.into()),
    };
    Ok(Opened {
        nsid,
        path,
        volume,
        uuid,
        mds_lbas,
        hosts: spec.hosts.clone(),
    })
}

/// The UUID a namespace without a pnfsd superblock reports (its NGUID and EUI-64) and keys
/// its reservations with: kept in `<state_dir>/nvme-ns<nsid>.uuid` beside the volume's path,
/// a new random one when the file is missing or names another path (so another volume under
/// this NSID never gets the old one's reservations, nor looks like it to a host).
fn kept_uuid(state_dir: &Path, nsid: u32, path: &Path) -> Result<[u8; 16], DaemonError> {
    let file = state_dir.join(format!("nvme-ns{nsid}.uuid"));
    let want = path.display().to_string();
    if let Ok(text) = std::fs::read_to_string(&file) {
        let mut lines = text.lines();
        if let (Some(u), Some(p)) = (lines.next(), lines.next()) {
            if let (Ok(u), true) = (uuid::Uuid::parse_str(u.trim()), p == want) {
                if !u.is_nil() {
                    return Ok(*u.as_bytes());
                }
            }
        }
    }
    let u = uuid::Uuid::new_v4();
    let tmp = file.with_extension("uuid.tmp");
    let what = format!("write {}", file.display());
    std::fs::write(&tmp, format!("{}\n{want}\n", u.hyphenated())).map_err(io_err(&what))?;
    std::fs::rename(&tmp, &file).map_err(io_err(&what))?;
    Ok(*u.as_bytes())
}

/// One namespace's rules in `TargetPolicy`, with its refusal counters.
struct NsRule {
    nsid: u32,
    hosts: Option<Vec<String>>,
    /// Writes below this LBA only from `mds_hosts` (0: no pnfsd superblock).
    mds_lbas: u64,
    refused_host: AtomicU64,
    refused_metadata: AtomicU64,
}

impl NsRule {
    fn admits(&self, host: &HostRef<'_>) -> bool {
        self.hosts
            .as_ref()
            .is_none_or(|h| h.iter().any(|h| h == host.nqn))
    }
}

/// Why `TargetPolicy` refuses a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The namespace's `hosts` do not name the host.
    NotHost,
    /// A write into a pnfsd volume's metadata region by a host not in `mds_hosts`.
    Metadata,
}

/// The target's `HostPolicy` (module comment). Admission is the allow-list's (`allowed_hosts`,
/// checked by the target before this is asked).
pub struct TargetPolicy {
    rules: Vec<NsRule>,
    mds_hosts: Vec<String>,
    /// Successful Write commands of each `mds_hosts` host, in its order (fed by the target's
    /// reply path, `write_counter`): which MDS writes the volume, and that a fenced one no
    /// longer does.
    mds_writes: Vec<Arc<AtomicU64>>,
}

impl TargetPolicy {
    pub fn new(t: &TargetSection, opened: &[Opened]) -> TargetPolicy {
        TargetPolicy {
            rules: opened
                .iter()
                .map(|o| NsRule {
                    nsid: o.nsid,
                    hosts: o.hosts.clone(),
                    mds_lbas: o.mds_lbas.unwrap_or(0),
                    refused_host: AtomicU64::new(0),
                    refused_metadata: AtomicU64::new(0),
                })
                .collect(),
            mds_hosts: t.mds_hosts.clone(),
            mds_writes: t.mds_hosts.iter().map(|_| Arc::default()).collect(),
        }
    }

    fn rule(&self, nsid: u32) -> Option<&NsRule> {
        self.rules.iter().find(|r| r.nsid == nsid)
    }

    fn why(
        &self,
        host: &HostRef<'_>,
        nsid: u32,
        a: Access,
        slba: u64,
        nlb: u64,
    ) -> Option<Refusal> {
        let r = self.rule(nsid)?;
        if !r.admits(host) {
            return Some(Refusal::NotHost);
        }
        // The region starts at LBA 0: a write that starts in it touches it.
        let into_meta = a == Access::Write && nlb > 0 && slba < r.mds_lbas;
        if into_meta && !self.mds_hosts.iter().any(|h| h == host.nqn) {
            return Some(Refusal::Metadata);
        }
        None
    }

    /// `(host, write commands)` of each `mds_hosts` host for `/metrics`.
    pub fn mds_writes(&self) -> Vec<(String, u64)> {
        self.mds_hosts
            .iter()
            .zip(&self.mds_writes)
            .map(|(h, n)| (h.clone(), n.load(Ordering::Relaxed)))
            .collect()
    }

    /// `(nsid, reason, refusals)` for `/metrics`: reason `host` or `metadata`.
    pub fn refusals(&self) -> Vec<(u32, &'static str, u64)> {
        self.rules
            .iter()
            .flat_map(|r| {
                [
                    (r.nsid, "host", r.refused_host.load(Ordering::Relaxed)),
                    (
                        r.nsid,
                        "metadata",
                        r.refused_metadata.load(Ordering::Relaxed),
                    ),
                ]
            })
            .collect()
    }
}

impl HostPolicy for TargetPolicy {
    fn admit(&self, _host: &HostRef<'_>) -> bool {
        true
    }

    fn access(&self, host: &HostRef<'_>, nsid: u32, a: Access, slba: u64, nlb: u64) -> bool {
        self.why(host, nsid, a, slba, nlb).is_none()
    }

    /// The MDS hosts' writes are counted (`mds_writes`), the clients' are not.
    fn write_counter(&self, host: &HostRef<'_>) -> Option<Arc<AtomicU64>> {
        let i = self.mds_hosts.iter().position(|h| h == host.nqn)?;
        Some(self.mds_writes[i].clone())
    }

    /// A namespace's `hosts` hold its reservations alone: a client kept off the metadata
    /// member cannot preempt the MDS's reservation there.
    fn reservations(&self, host: &HostRef<'_>, nsid: u32) -> bool {
        let ok = self.rule(nsid).is_none_or(|r| r.admits(host));
        if !ok {
            tracing::warn!(host = %host.nqn, nsid, "reservation command refused (access denied): the namespace's hosts do not name it");
        }
        ok
    }

    fn refused(&self, host: &HostRef<'_>, nsid: u32, a: Access, slba: u64, nlb: u64) {
        let (Some(why), Some(r)) = (self.why(host, nsid, a, slba, nlb), self.rule(nsid)) else {
            return;
        };
        let (c, what) = match why {
            Refusal::NotHost => (&r.refused_host, "the namespace's hosts do not name it"),
            Refusal::Metadata => (
                &r.refused_metadata,
                "a write into the metadata region, and mds_hosts do not name it",
            ),
        };
        let n = c.fetch_add(1, Ordering::Relaxed) + 1;
        // As the layouts' gate thins its lines: the 16 first, then at each power of two.
        if n <= 16 || n.is_power_of_two() {
            tracing::warn!(
                host = %host.nqn,
                ip = %host.ip,
                nsid,
                slba,
                nlb,
                refusals = n,
                "command refused (access denied): {what}"
            );
        }
    }
}

/// The target's configuration for the opened namespaces.
pub fn target_config(t: &TargetSection, opened: &[Opened]) -> (TargetConfig, Arc<TargetPolicy>) {
    let namespaces = opened
        .iter()
        .map(|o| NamespaceConfig {
            nsid: o.nsid,
            backend: Arc::new(VolumeBackend::new(o.volume.dev.clone())),
            volume_uuid: o.uuid,
        })
        .collect();
    let mut tc = TargetConfig::new(t.nqn.clone(), namespaces);
    tc.allowed_hosts = t.allowed_hosts.clone();
    tc.advertise = t.advertise;
    tc.ptpl_dir = Some(t.state_dir.clone());
    tc.limits = t.limits();
    let policy = Arc::new(TargetPolicy::new(t, opened));
    tc.host_policy = Some(policy.clone());
    (tc, policy)
}

/// Binds the target on `addr` (nothing is served until `Target::spawn`).
pub async fn bind(addr: SocketAddr, tc: TargetConfig) -> Result<Target, TargetError> {
    Target::bind(addr, tc).await.map_err(|err| match err {
        nvme_tcp::Error::Io(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            TargetError::AddrInUse { addr }
        }
        err => TargetError::Bind { addr, err },
    })
}

/// `pnfsd target`: opens and locks the namespaces, serves them until SIGTERM or SIGINT,
/// then stops once no I/O is left at the volumes.
pub fn run(a: &TargetArgs, log: &Logging) -> Result<(), DaemonError> {
    let (cfg, t, specs) = load(a)?;
    log.apply(&cfg)?;
    std::fs::create_dir_all(&t.state_dir).map_err(io_err(format!(
        "create state_dir {}",
        t.state_dir.display()
    )))?;
    let opened = specs
        .iter()
        .map(|s| open(s, &t.state_dir))
        .collect::<Result<Vec<_>, _>>()?;
    for o in &opened {
        match o.mds_lbas {
            Some(lbas) => tracing::info!(
                nsid = o.nsid,
                volume = %o.path.display(),
                uuid = %uuid::Uuid::from_bytes(o.uuid),
                metadata_lbas = lbas,
                mds_hosts = ?t.mds_hosts,
                "pnfsd volume: its metadata region is written only by mds_hosts"
            ),
            None => tracing::info!(
                nsid = o.nsid,
                volume = %o.path.display(),
                "no pnfsd superblock: no metadata region guarded"
            ),
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pnfsd-target")
        .build()
        .map_err(io_err("tokio runtime"))?;
    let signals = Signals::register(&rt)?;
    rt.block_on(serve(&t, &opened, signals))
}

async fn serve(
    t: &TargetSection,
    opened: &[Opened],
    mut signals: Signals,
) -> Result<(), DaemonError> {
    let (tc, policy) = target_config(t, opened);
    let target = bind(t.listen, tc).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let metrics = match t.metrics_listen {
        Some(addr) => {
            let l = crate::metrics::bind(addr)
                .await
                .map_err(io_err(format!("metrics listen on {addr}")))?;
            let local = l.local_addr().map_err(io_err("metrics address"))?;
            tracing::info!("metrics on http://{local}/metrics");
            let (t2, p2) = (target.clone(), policy.clone());
            Some(tokio::spawn(serve_metrics(l, t2, p2, stop_rx)))
        }
        None => None,
    };
    let task = target.spawn();
    let names: Vec<String> = opened
        .iter()
        .map(|o| format!("{} = {}", o.nsid, o.path.display()))
        .collect();
    let ready = format!(
        "pnfsd target ready: nvme {} nqn {} namespaces {}",
        target.local_addr(),
        t.nqn,
        names.join(", ")
    );
    tracing::info!("{ready}");
    notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&ready),
    ]);
    loop {
        tokio::select! {
            _ = signals.term.recv() => {
                tracing::info!("SIGTERM: stopping");
                break;
            }
            _ = signals.int.recv() => {
                tracing::info!("SIGINT: stopping");
                break;
            }
            _ = signals.hup.recv() => {
                tracing::info!("SIGHUP: pnfsd target reloads nothing; restart it to apply a change");
            }
        }
    }
    notify(&[
        sd_notify::NotifyState::Stopping,
        sd_notify::NotifyState::Status("stopping: waiting for the I/O in flight"),
    ]);
    let _ = stop_tx.send(true);
    if let Some(m) = metrics {
        let _ = m.await;
    }
    // Bounded: a backend call stuck in the kernel must not keep the target from stopping.
    if target.shutdown_and_wait(Duration::from_secs(10)).await {
        tracing::info!("nvme-tcp target quiet: no connection or I/O left");
    }
    match task.await {
        Ok(Ok(())) => tracing::info!("pnfsd target stopped"),
        Ok(Err(e)) => tracing::error!("nvme-tcp target: {e}"),
        Err(_) => tracing::error!("nvme-tcp target task failed"),
    }
    // Every write the hosts completed reaches the media before the locks go.
    for o in opened {
        if let Err(e) = o.volume.dev.flush() {
            tracing::error!(nsid = o.nsid, "flush of {}: {e}", o.path.display());
        }
    }
    Ok(())
}

/// `GET /metrics` for this target (metrics/nvme.rs `target_exposition`), with the
/// endpoint's bounds (`crate::metrics`: one request per connection, the head bounded).
async fn serve_metrics(
    listener: tokio::net::TcpListener,
    target: Target,
    policy: Arc<TargetPolicy>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use hyper::{Request, Response, StatusCode};
    let slots = Arc::new(tokio::sync::Semaphore::new(crate::metrics::MAX_CONNECTIONS));
    loop {
        tokio::select! {
            a = listener.accept() => match a {
                Ok((sock, _)) => {
                    let Ok(permit) = slots.clone().try_acquire_owned() else { continue };
                    let (target, policy) = (target.clone(), policy.clone());
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                            let (target, policy) = (target.clone(), policy.clone());
                            async move {
                                let (code, ct, body) = if req.uri().path() != "/metrics" {
                                    (StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "only /metrics is served\n".to_string())
                                } else {
                                    let om = req
                                        .headers()
                                        .get(hyper::header::ACCEPT)
                                        .and_then(|v| v.to_str().ok())
                                        .is_some_and(|a| crate::metrics::text::wants_openmetrics(Some(a)));
                                    let text = crate::metrics::nvme::target_exposition(&target, &policy.refusals(), &policy.mds_writes());
                                    if om {
                                        (StatusCode::OK, crate::metrics::text::OPENMETRICS, text)
                                    } else {
                                        (StatusCode::OK, crate::metrics::text::TEXT_004, crate::metrics::text::to_text_004(&text))
                                    }
                                };
                                let mut r = Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
                                *r.status_mut() = code;
                                if let Ok(v) = hyper::header::HeaderValue::from_str(ct) {
                                    r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
                                }
                                Ok::<_, std::convert::Infallible>(r)
                            }
                        });
                        let conn = hyper::server::conn::http1::Builder::new()
                            .timer(hyper_util::rt::TokioTimer::new())
                            .header_read_timeout(crate::metrics::READ_TIMEOUT)
                            .max_buf_size(crate::metrics::MAX_HEAD)
                            .keep_alive(false)
                            .serve_connection(hyper_util::rt::TokioIo::new(sock), service);
                        if let Err(e) = conn.await {
                            tracing::debug!("metrics connection: {e}");
                        }
                        drop(permit);
                    });
                }
                Err(e) => {
                    tracing::warn!("metrics accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            r = stop.changed() => if r.is_err() || *stop.borrow() {
                return;
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(hosts: Option<Vec<&str>>, mds_lbas: u64) -> TargetPolicy {
        TargetPolicy {
            rules: vec![NsRule {
                nsid: 1,
                hosts: hosts.map(|v| v.into_iter().map(String::from).collect()),
                mds_lbas,
                refused_host: AtomicU64::new(0),
                refused_metadata: AtomicU64::new(0),
            }],
            mds_hosts: vec!["nqn.mds".into()],
            mds_writes: vec![Arc::default()],
        }
    }

    fn h(nqn: &str) -> HostRef<'_> {
        HostRef {
            nqn,
            hostid: &[0; 16],
            ip: std::net::IpAddr::from([127, 0, 0, 1]),
        }
    }

    #[test]
    fn the_metadata_region_is_written_by_mds_hosts_alone() {
        let p = policy(None, 8);
        let (mds, client) = (h("nqn.mds"), h("nqn.client"));
        assert!(p.access(&mds, 1, Access::Write, 0, 1));
        assert!(!p.access(&client, 1, Access::Write, 0, 1));
        assert!(!p.access(&client, 1, Access::Write, 7, 4));
        assert!(p.access(&client, 1, Access::Write, 8, 4));
        assert!(p.access(&client, 1, Access::Read, 0, 1));
        // Another namespace, or none guarded: no rule of ours.
        assert!(p.access(&client, 2, Access::Write, 0, 1));
        assert!(policy(None, 0).access(&client, 1, Access::Write, 0, 1));
        p.refused(&client, 1, Access::Write, 0, 1);
        assert_eq!(p.refusals(), vec![(1, "host", 0), (1, "metadata", 1)]);
        assert!(p.write_counter(&mds).is_some() && p.write_counter(&client).is_none());
    }

    #[test]
    fn a_namespace_with_hosts_refuses_the_others_everything() {
        let p = policy(Some(vec!["nqn.mds"]), 0);
        let (mds, client) = (h("nqn.mds"), h("nqn.client"));
        assert!(p.access(&mds, 1, Access::Read, 5, 1) && p.reservations(&mds, 1));
        assert!(!p.access(&client, 1, Access::Read, 5, 1));
        assert!(!p.access(&client, 1, Access::Write, 5, 1));
        assert!(!p.reservations(&client, 1));
        assert!(p.reservations(&client, 2));
        p.refused(&client, 1, Access::Read, 5, 1);
        assert_eq!(p.refusals(), vec![(1, "host", 1), (1, "metadata", 0)]);
    }

    #[test]
    fn a_kept_uuid_stays_for_its_path_and_changes_with_it() {
        let d = tempfile::tempdir().unwrap();
        let a = kept_uuid(d.path(), 1, Path::new("/srv/a")).unwrap();
        assert_ne!(a, [0; 16]);
        assert_eq!(kept_uuid(d.path(), 1, Path::new("/srv/a")).unwrap(), a);
        let b = kept_uuid(d.path(), 1, Path::new("/srv/b")).unwrap();
        assert_ne!(a, b);
        assert_ne!(kept_uuid(d.path(), 2, Path::new("/srv/b")).unwrap(), b);
    }
}
