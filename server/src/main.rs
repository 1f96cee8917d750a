//! The `pnfsd` binary: `mkfs` formats a volume, `serve` (the default) runs the metadata
//! server until SIGTERM/SIGINT, then unmounts the store cleanly; SIGHUP reloads what can
//! change without a restart. `man` and `completions` print what clap generates from the
//! definitions below (issue 12: one source for `--help`, the man pages and completions).
//!
//! Fatal errors go to stderr as `pnfsd: error: …` whatever `RUST_LOG` says; a start that
//! fails removes the volume file (and the directories) it created.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use pnfsd::config::{parse_size, reload_plan, Config, Overrides};
use pnfsd::preflight::{self, PreflightError};
use pnfsd::server::Server;
use pnfsd::store::{Store, StoreError};
use pnfsd::volume::{Volume, VolumeLock, VolumeSource};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer as _;
use tracing_subscriber::{reload, EnvFilter, Registry};

mod progress;

#[derive(Debug, Parser)]
#[command(
    name = "pnfsd",
    version,
    about = "pNFS metadata server for NFSv4.1/4.2 (block and SCSI layouts) with an embedded \
             NVMe/TCP target",
    long_about = "pnfsd is a pNFS metadata server for NFSv4.1/4.2. It keeps all metadata of \
        one data volume (a file, a block device or an external NVMe/TCP namespace) in an \
        XFS-like log and hands Linux clients block layouts (RFC 5663) or SCSI layouts over \
        NVMe (RFC 8154, RFC 9561), so they read and write file data directly on the volume, \
        which its embedded NVMe/TCP target exports.\n\n\
        With no command, `pnfsd` is `pnfsd serve`: it formats ./pnfsd-data/volume.img if \
        missing and serves NFS on 127.0.0.1:2049 and NVMe/TCP on 127.0.0.1:4420. The packaged \
        configuration is /etc/pnfsd/pnfsd.toml (`pnfsd serve --config /etc/pnfsd/pnfsd.toml`, \
        as the systemd unit runs it); docs/admin-guide.md takes a Linux client from \
        `nvme connect` to a pNFS mount."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Format a volume: a file (created sparse if missing), a block device, or an external
    /// NVMe/TCP namespace.
    #[command(
        long_about = "Format a volume for pnfsd: a file (created sparse if missing), a \
        block device, or an external NVMe/TCP namespace (nvme-tcp://HOST[:PORT]/NQN[?nsid=N]).\n\n\
        mkfs refuses a volume that a running pnfsd (or another mkfs) holds, even with \
        --force; and, without --force, one that holds a pnfsd volume or anything blkid -p \
        recognises (a file system, a partition table, RAID or LVM metadata, swap). A path \
        under /dev must be an existing block device."
    )]
    Mkfs(MkfsArgs),
    /// Serve NFS and the NVMe/TCP target (the default when no command is given).
    #[command(
        long_about = "Serve NFSv4.1/4.2 and the embedded NVMe/TCP target until \
        SIGTERM or SIGINT, then unmount the volume cleanly. A missing volume file is created \
        and formatted (never under /dev); an existing one must already be formatted.\n\n\
        SIGHUP re-reads the configuration file: log_level applies at once, every other \
        changed key is logged as needing a restart. Under systemd (Type=notify) the daemon \
        reports READY=1 once it serves, with the ready line as STATUS, and STOPPING=1."
    )]
    Serve(ServeArgs),
    /// Show a running pnfsd: version, uptime, volume, free space, grace, log, metadata cache
    /// (GET /status on its admin endpoint; `admin = true` in its configuration).
    Status(pnfsd::admin::cli::AdminArgs),
    /// List a running pnfsd's clients: lease, sessions, open/lock/delegation/layout counts,
    /// reclaim, address (GET /clients on its admin endpoint); `states ID` lists what one
    /// client holds, `evict ID` expires it now with its layouts fenced.
    Clients(ClientsArgs),
    /// List a running pnfsd's outstanding layouts: file, holder, type, ranges, recalls in
    /// flight, fenced (GET /layouts on its admin endpoint).
    Layouts(pnfsd::admin::cli::AdminArgs),
    /// Print the man pages (roff), or write pnfsd.1, pnfsd-serve.1, ... into a directory.
    Man {
        /// Directory to write one page per command into; stdout (pnfsd.1 only) if absent.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
struct ClientsArgs {
    #[command(flatten)]
    admin: pnfsd::admin::cli::AdminArgs,
    #[command(subcommand)]
    action: Option<ClientsAction>,
}

#[derive(Debug, Subcommand)]
enum ClientsAction {
    /// The states one client holds: opens, locks, delegations, layouts, by file
    /// (GET /clients/ID/states).
    States {
        /// The client id as `pnfsd clients` prints it.
        id: String,
    },
    /// Expire a client now, as if its lease had run out: its sessions and state go and its
    /// layouts are fenced (POST /clients/ID/evict; knfsd's `echo expire > .../ctl`).
    Evict {
        /// The client id as `pnfsd clients` prints it.
        id: String,
    },
}

#[derive(Debug, Args)]
struct MkfsArgs {
    /// The volume: a file, a block device, or nvme-tcp://HOST[:PORT]/NQN[?nsid=N].
    #[arg(value_name = "VOLUME")]
    path: PathBuf,
    /// Size of a volume file to create or grow, e.g. 8G (a block device or namespace keeps
    /// its own size).
    #[arg(long, default_value = "8G", value_parser = size_arg)]
    size: u64,
    /// Format even if the volume holds a file system, a partition table or a pnfsd volume
    /// (destroys it). A volume that a running pnfsd holds is refused all the same.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args, Default)]
struct ServeArgs {
    /// TOML configuration (deploy/pnfsd.toml shows every key; packaged as
    /// /etc/pnfsd/pnfsd.toml); its relative paths are relative to its own directory. Flags
    /// override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Directory of the embedded default volume (`<DIR>/volume.img`).
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// NFS address, default 127.0.0.1:2049.
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Embedded NVMe/TCP target address, default 127.0.0.1:4420 (off the loopback it needs
    /// nvme_allowed_hosts or nvme_allow_any_host in the configuration).
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "no_nvme")]
    nvme_listen: Option<SocketAddr>,
    /// Do not start the embedded NVMe/TCP target.
    #[arg(long)]
    no_nvme: bool,
    /// NFSv4 lease time in seconds (RFC 8881 §8.3), default 90.
    #[arg(long, value_name = "SECONDS")]
    lease_seconds: Option<u32>,
    /// Serve Prometheus metrics (`GET /metrics`) on this address; off by default.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics_listen: Option<SocketAddr>,
}

impl ServeArgs {
    fn overrides(&self) -> Overrides {
        Overrides {
            data_dir: self.data_dir.clone(),
            listen: self.listen,
            nvme_listen: self.nvme_listen,
            no_nvme: self.no_nvme,
            lease_seconds: self.lease_seconds,
            metrics_listen: self.metrics_listen,
        }
    }
}

fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map(|s| s.0).map_err(|e| e.to_string())
}

#[derive(Debug, thiserror::Error)]
enum DaemonError {
    #[error(transparent)]
    Config(#[from] pnfsd::config::ConfigError),
    #[error("configuration {path}: {err}")]
    ConfigFile {
        path: PathBuf,
        err: pnfsd::config::ConfigError,
    },
    #[error("cannot format {target}: {err}")]
    Mkfs { target: String, err: StoreError },
    #[error("cannot mount {volume}: {err}")]
    Mount { volume: String, err: StoreError },
    #[error("unmount of {volume}: {err}")]
    Unmount { volume: String, err: StoreError },
    #[error(transparent)]
    Nvme(#[from] pnfsd::nvme::NvmeError),
    #[error(transparent)]
    Volume(#[from] pnfsd::volume::VolumeError),
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error(transparent)]
    Admin(#[from] pnfsd::admin::cli::CommandError),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
}

/// A configuration error, naming the file when the message does not already.
fn config_err(path: Option<&Path>, err: pnfsd::config::ConfigError) -> DaemonError {
    match path {
        Some(path) if matches!(err, pnfsd::config::ConfigError::Invalid(_)) => {
            DaemonError::ConfigFile {
                path: path.to_path_buf(),
                err,
            }
        }
        _ => err.into(),
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |err| DaemonError::Io { what, err }
}

/// The log filter, reloadable on SIGHUP; `RUST_LOG`, when set, overrides `log_level`.
struct Logging {
    handle: reload::Handle<EnvFilter, Registry>,
    env: Option<String>,
}

impl Logging {
    fn init(format: pnfsd::config::LogFormat) -> Logging {
        let env = std::env::var("RUST_LOG")
            .ok()
            .filter(|s| !s.trim().is_empty());
        let filter = env
            .as_deref()
            .and_then(|s| EnvFilter::try_new(s).ok())
            .unwrap_or_else(|| EnvFilter::new("info"));
        let (filter, handle) = reload::Layer::new(filter);
        let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let lines = match format {
            // Plain text when the log goes to a file or a pipe (test harnesses grep it).
            pnfsd::config::LogFormat::Text => stderr
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .boxed(),
            pnfsd::config::LogFormat::Json => stderr.json().boxed(),
        };
        tracing_subscriber::registry()
            .with(filter)
            .with(lines)
            .init();
        Logging { handle, env }
    }

    /// Applies the configuration's `log_level`, unless `RUST_LOG` overrides it.
    fn apply(&self, cfg: &Config) -> Result<(), pnfsd::config::ConfigError> {
        if self.env.is_none() {
            let f = cfg.log_filter()?;
            if let Err(e) = self.handle.reload(f) {
                tracing::error!("log_level {:?} not applied: {e}", cfg.log_level);
            }
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The format is fixed when logging starts: the daemon's configuration names it (read
    // again, with errors reported, by `serve`).
    let format = match &cli.cmd {
        Some(Cmd::Serve(a)) => Config::load(a.config.as_deref(), &a.overrides())
            .map(|c| c.log_format)
            .unwrap_or_default(),
        None => Config::load(None, &Default::default())
            .map(|c| c.log_format)
            .unwrap_or_default(),
        _ => Default::default(),
    };
    let log = Logging::init(format);
    let res = match cli.cmd {
        Some(Cmd::Mkfs(a)) => mkfs(&a),
        Some(Cmd::Serve(a)) => serve(&a, &log),
        Some(Cmd::Status(a)) => admin(pnfsd::admin::cli::View::Status, &a),
        Some(Cmd::Clients(a)) => {
            use pnfsd::admin::cli::View;
            let view = match a.action {
                None => View::Clients,
                Some(ClientsAction::States { id }) => View::ClientStates(id),
                Some(ClientsAction::Evict { id }) => View::Evict(id),
            };
            admin(view, &a.admin)
        }
        Some(Cmd::Layouts(a)) => admin(pnfsd::admin::cli::View::Layouts, &a),
        Some(Cmd::Man { dir }) => man(dir.as_deref()),
        Some(Cmd::Completions { shell }) => {
            clap_complete::generate(shell, &mut Cli::command(), "pnfsd", &mut std::io::stdout());
            Ok(())
        }
        None => serve(&ServeArgs::default(), &log),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not through tracing: RUST_LOG=off must not hide why the command failed.
            eprintln!("pnfsd: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn admin(
    view: pnfsd::admin::cli::View,
    a: &pnfsd::admin::cli::AdminArgs,
) -> Result<(), DaemonError> {
    let out = pnfsd::admin::cli::run(view, a)?;
    print!("{out}");
    Ok(())
}

fn man(dir: Option<&Path>) -> Result<(), DaemonError> {
    match dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(io_err(format!("create {}", d.display())))?;
            clap_mangen::generate_to(Cli::command(), d)
                .map_err(io_err(format!("write man pages into {}", d.display())))
        }
        None => clap_mangen::Man::new(Cli::command())
            .render(&mut std::io::stdout())
            .map_err(io_err("stdout")),
    }
}

fn mkfs(a: &MkfsArgs) -> Result<(), DaemonError> {
    let src = VolumeSource::parse(&a.path).map_err(pnfsd::config::ConfigError::Invalid)?;
    let mkfs_err = |err| DaemonError::Mkfs {
        target: src.to_string(),
        err,
    };
    match &src {
        VolumeSource::File(path) => {
            preflight::check_volume_path(path)?;
            if path.exists() {
                // Never under a running daemon (volume.rs), --force or not.
                let _lock = VolumeLock::acquire(path)?;
                if !a.force {
                    preflight::check_unused_path(path)?;
                }
                mkfs_file(path, a.size, a.force).map_err(mkfs_err)?;
            } else {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    if !dir.is_dir() {
                        return Err(DaemonError::Io {
                            what: format!("create {}", path.display()),
                            err: std::io::Error::new(
                                std::io::ErrorKind::NotFound,
                                format!("no directory {}", dir.display()),
                            ),
                        });
                    }
                }
                // A file made here and not formatted is removed again (no half-made volume).
                let fresh = FreshVolume {
                    file: path.clone(),
                    dirs: Vec::new(),
                };
                if let Err(e) = mkfs_file(path, a.size, false) {
                    fresh.remove();
                    return Err(mkfs_err(e));
                }
            }
        }
        // The namespace's size is the volume's; `--size` does not apply.
        VolumeSource::Nvme(_) => {
            let vol = Volume::open(&src)?;
            let r = match a.force {
                true => Ok(()),
                false => preflight::check_unused_dev(&*vol.dev, &src.to_string()),
            }
            .map_err(DaemonError::from)
            .and_then(|()| mkfs_dev(vol.dev.clone(), &src.to_string(), a.force).map_err(mkfs_err));
            vol.close();
            r?;
        }
    }
    tracing::info!("formatted {src}");
    Ok(())
}

/// `Store::mkfs` of a file with progress (progress.rs): the file made or grown (sparse) as
/// the store's `mkfs_path` does, then formatted through the progress device.
fn mkfs_file(path: &Path, size: u64, force: bool) -> Result<(), StoreError> {
    let dev: Arc<dyn metalog::BlockDev> = if path.exists() {
        // A regular file smaller than asked grows (sparse); a block device keeps its size.
        let md = std::fs::metadata(path)?;
        if md.is_file() && md.len() < size {
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)?
                .set_len(size)?;
        }
        Arc::new(metalog::FileDev::open(path)?)
    } else {
        Arc::new(metalog::FileDev::create(path, size)?)
    };
    mkfs_dev(dev, &path.display().to_string(), force)
}

fn mkfs_dev(dev: Arc<dyn metalog::BlockDev>, what: &str, force: bool) -> Result<(), StoreError> {
    let shown = progress::ProgressDev::new(dev, what);
    let r = Store::mkfs_dev(shown.clone(), force);
    shown.finish();
    r
}

/// What `serve` created on this start: removed again if the start fails (issue 12).
#[derive(Debug)]
struct FreshVolume {
    file: PathBuf,
    /// Directories made for it, deepest first.
    dirs: Vec<PathBuf>,
}

impl FreshVolume {
    fn remove(self) {
        match std::fs::remove_file(&self.file) {
            Ok(()) => tracing::info!(
                "removed {} (made by this failed start)",
                self.file.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot remove {}: {e}", self.file.display()),
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Formats the volume file on first start (the embedded default of issue 3); `Some` if it
/// was made now.
fn ensure_volume(cfg: &Config, volume: &Path) -> Result<Option<FreshVolume>, DaemonError> {
    preflight::check_volume_path(volume)?;
    if volume.exists() {
        return Ok(None);
    }
    let mut fresh = FreshVolume {
        file: volume.to_path_buf(),
        dirs: Vec::new(),
    };
    if let Some(dir) = volume.parent().filter(|d| !d.as_os_str().is_empty()) {
        fresh.dirs = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(dir).map_err(io_err(format!("create {}", dir.display())))?;
    }
    if let Err(err) = Store::mkfs(volume, cfg.volume_size.0, false) {
        fresh.remove();
        return Err(DaemonError::Mkfs {
            target: volume.display().to_string(),
            err,
        });
    }
    tracing::info!(
        "formatted {} ({} bytes)",
        volume.display(),
        cfg.volume_size.0
    );
    Ok(Some(fresh))
}

/// systemd readiness (Type=notify, deploy/pnfsd.service); a no-op without NOTIFY_SOCKET.
fn notify(states: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("sd_notify: {e}");
    }
}

/// The signals `serve` handles, registered before anything else so that none of them kills
/// the daemon mid-start (a SIGTERM during the mount stops it cleanly once it is up).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn register(rt: &tokio::runtime::Runtime) -> Result<Signals, DaemonError> {
        use tokio::signal::unix::{signal, SignalKind};
        let _rt = rt.enter();
        Ok(Signals {
            term: signal(SignalKind::terminate()).map_err(io_err("SIGTERM handler"))?,
            int: signal(SignalKind::interrupt()).map_err(io_err("SIGINT handler"))?,
            hup: signal(SignalKind::hangup()).map_err(io_err("SIGHUP handler"))?,
        })
    }
}

/// What a SIGHUP reloads: the file `serve` started from, with the same flags over it.
struct Reloader<'a> {
    path: Option<&'a Path>,
    overrides: Overrides,
    log: &'a Logging,
    running: Config,
    /// The server whose exports a reload replaces (set once it exists).
    srv: Option<Arc<Server>>,
}

impl Reloader<'_> {
    fn reload(&mut self) {
        let Some(path) = self.path else {
            tracing::info!("SIGHUP: no configuration file (--config): nothing to reload");
            return;
        };
        let new = match Config::load(Some(path), &self.overrides) {
            Ok(c) => c,
            Err(e) => {
                let e = config_err(Some(path), e);
                tracing::error!("SIGHUP: {e}; the running configuration stays");
                return;
            }
        };
        let plan = match reload_plan(&self.running, &new) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("SIGHUP: {e}; the running configuration stays");
                return;
            }
        };
        let mut new = new;
        for (key, old, new_v) in &plan.apply {
            if key == "exports" {
                if !self.reload_exports(&new) {
                    // Not applied: the running rules stay, and stay the running config.
                    new.exports = self.running.exports.clone();
                }
                continue;
            }
            if key == "log_level" && self.log.env.is_some() {
                tracing::warn!("SIGHUP: {key} {old} -> {new_v} not applied: RUST_LOG overrides it");
                continue;
            }
            tracing::info!("SIGHUP: {key} {old} -> {new_v}");
        }
        if let Err(e) = self.log.apply(&new) {
            tracing::error!("SIGHUP: {e}");
        }
        if !plan.restart.is_empty() {
            tracing::warn!(
                "SIGHUP: changed in {} but applied only after a restart: {}",
                path.display(),
                plan.restart.join(", ")
            );
        }
        if plan.apply.is_empty() && plan.restart.is_empty() {
            tracing::info!("SIGHUP: {} reloaded, nothing changed", path.display());
        }
        self.running.apply_reloadable(&new);
    }

    /// Puts `new`'s exports in force; `false` (logged) if they do not compile.
    fn reload_exports(&self, new: &Config) -> bool {
        let table = match new.export_table() {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("SIGHUP: {e}; the running exports stay");
                return false;
            }
        };
        if let Some(srv) = &self.srv {
            srv.exports.replace(table);
        }
        let old = pnfsd::exports::describe(&self.running.exports);
        let now = pnfsd::exports::describe(&new.exports);
        let mut told = false;
        for r in old.iter().filter(|r| !now.contains(r)) {
            tracing::info!("SIGHUP: exports: rule removed: {r}");
            told = true;
        }
        for r in now.iter().filter(|r| !old.contains(r)) {
            tracing::info!("SIGHUP: exports: rule added: {r}");
            told = true;
        }
        if !told {
            // Same rules in another order (the first match decides) or spelled otherwise.
            tracing::info!("SIGHUP: exports: rules now: {}", now.join("; "));
        }
        true
    }
}

/// The sockets, bound before the volume is formatted or mounted: a busy or bad address
/// fails the start before it changes anything on disk.
struct Listeners {
    nfs: tokio::net::TcpListener,
    metrics: Option<tokio::net::TcpListener>,
}

async fn bind_listeners(cfg: &Config) -> Result<Listeners, DaemonError> {
    let nfs = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .map_err(io_err(format!("listen on {}", cfg.listen)))?;
    // The target binds once the volume is open (it needs the device); a trial bind now
    // reports a taken port before a fresh volume is formatted.
    if let Some(addr) = cfg.embedded_target() {
        match std::net::TcpListener::bind(addr) {
            Ok(l) => drop(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(pnfsd::nvme::NvmeError::AddrInUse { addr }.into())
            }
            Err(e) => return Err(io_err(format!("NVMe/TCP target on {addr}"))(e)),
        }
    }
    let metrics = match cfg.metrics_listen {
        Some(addr) => Some(
            pnfsd::metrics::bind(addr)
                .await
                .map_err(io_err(format!("metrics listen on {addr}")))?,
        ),
        None => None,
    };
    Ok(Listeners { nfs, metrics })
}

fn serve(a: &ServeArgs, log: &Logging) -> Result<(), DaemonError> {
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
    if let Some(n) = pnfsd::alloc::limit_arenas() {
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
    let res = serve_volume(&cfg, &volume, rt, listeners, signals, reloader, &mut fresh);
    // Failed before it served: what this start created goes (issue 12).
    if let (Err(_), Some(f)) = (&res, fresh.take()) {
        f.remove();
    }
    res
}

/// Opens and mounts the volume, serves until a stop signal, unmounts. `fresh` is taken (the
/// volume is kept) once the daemon is ready.
fn serve_volume(
    cfg: &Config,
    volume: &VolumeSource,
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
    let vol = Volume::open(volume)?;
    vol.check_formatted(volume)?;
    // One device for the store and the NVMe namespace: one descriptor, one fdatasync (nvme.rs).
    let dev = vol.dev.clone();
    let store = Arc::new(
        Store::open_dev(dev.clone(), cfg.store_options()).map_err(|err| DaemonError::Mount {
            volume: volume.to_string(),
            err,
        })?,
    );
    // The shutdown line names the volume as the operator does (metalog knows no names).
    store.log().set_device_name(volume.to_string());
    start_event(volume, &store.mount_stats());
    let opts = cfg.nfs_options();
    let srv = Arc::new(Server::new(store.clone(), opts));
    srv.exports.replace(cfg.export_table()?);
    for r in pnfsd::exports::describe(&cfg.exports) {
        tracing::info!("export: {r}");
    }
    reloader.srv = Some(srv.clone());
    let served = rt.block_on(run(
        cfg,
        volume,
        srv.clone(),
        dev,
        vol.nvme.clone(),
        listeners,
        signals,
        reloader,
        fresh,
    ));
    srv.callbacks.stop();
    // Async copies stop after their step; a restart forgets them (docs/copy.md).
    srv.copies.stop();
    tracing::info!(counters = ?srv.layouts.metrics.snapshot(), "pNFS layout counters");
    // COMPOUNDs still running on blocking threads get a moment to finish before the unmount.
    rt.shutdown_timeout(Duration::from_secs(5));
    // Whatever stopped the server, leave a clean log behind (design.md §3: next mount O(1)).
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

/// The start line (issue 16 Deliver 4): a clean start, or a recovery after a crash with
/// what it replayed (metalog's own "log recovery:" lines give the records and KiB).
fn start_event(volume: &VolumeSource, m: &pnfsd::store::MountStats) {
    match &m.stale_mark {
        None if m.items_replayed == 0 => tracing::info!(
            volume = %volume,
            mount_ms = m.load_ms + m.log_mount_ms,
            "start: clean (the last unmount was clean, nothing replayed)"
        ),
        mark => tracing::info!(
            volume = %volume,
            last_mounted_by = %mark.as_ref().map_or("-".into(), pnfsd::store::describe_mark),
            items_replayed = m.items_replayed,
            recovery_ms = m.log_mount_ms,
            blocks_read = m.blocks_read,
            "start: recovery after a crash (the volume was not unmounted cleanly; its log was replayed)"
        ),
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    cfg: &Config,
    volume: &VolumeSource,
    srv: Arc<Server>,
    dev: Arc<dyn metalog::BlockDev>,
    external: Option<Arc<pnfsd::nvme_volume::NvmeDev>>,
    listeners: Listeners,
    mut signals: Signals,
    mut reloader: Reloader<'_>,
    fresh: &mut Option<FreshVolume>,
) -> Result<(), DaemonError> {
    let Listeners {
        nfs: listener,
        metrics: metrics_listener,
    } = listeners;

    // The embedded NVMe/TCP target (issue 5): bound before "ready", stopped after NFS.
    let uuid_bytes = srv.store.volume_uuid();
    let nvme = match cfg.embedded_target() {
        Some(addr) => {
            let mut tc = pnfsd::nvme::target_config(cfg, dev, uuid_bytes);
            pnfsd::nvme::guard_mds_blocks(&mut tc, &srv.store.superblock().geometry);
            pnfsd::nvme::gate_hosts(&mut tc, &srv, cfg);
            pnfsd::meta_guard::guard_metadata(&mut tc, srv.store.meta_blocks());
            let target = pnfsd::nvme::bind(addr, tc).await?;
            pnfsd::nvme::install_fencing(&srv, &target, cfg);
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
                        srv.layouts
                            .scsi
                            .install(Arc::new(pnfsd::nvme::TargetFencer(target.clone())));
                        // The name a udev'd Linux client opens (docs/pnfs.md "the designator").
                        let d = pnfsd::nfs4::layouts::scsi::volume_designator(&srv.store);
                        let hex: String = d.bytes().iter().map(|b| format!("{b:02x}")).collect();
                        tracing::info!(
                            client_device = %format!("/dev/disk/by-id/nvme-eui.{hex}"),
                            "SCSI layout: MDS holds EXCLUSIVE_ACCESS_REG_ONLY"
                        );
                        // Registrations kept from the previous instance (PTPL) are swept
                        // once its layouts expire (docs/pnfs.md "After a restart").
                        pnfsd::nfs4::layouts::scsi_restart::begin(&srv.layouts, &srv.state);
                    }
                    Err(s) => tracing::error!(?s, "SCSI layout: reservation not taken"),
                }
            } else if let Err(s) = pnfsd::nvme::release_scsi_claim(&target) {
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

    // Callbacks (layout recalls) go from a thread of their own, so that no COMPOUND waits
    // for another client's backchannel (nfs4::callback::CbQueue).
    {
        let srv = srv.clone();
        let spawned = std::thread::Builder::new()
            .name("pnfsd-cb-sender".into())
            .spawn(move || pnfsd::nfs4::callback::run_sender(srv));
        if let Err(e) = spawned {
            return Err(io_err("callback sender thread")(e));
        }
    }
    // The async COPYs' workers (nfs4/copy/offload.rs).
    if let Err(e) = pnfsd::nfs4::copy::offload::run_workers(&srv) {
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
                    pnfsd::nfs4::layouts::recall::tick(&srv, std::time::Instant::now());
                    pnfsd::nfs4::copy::offload::tick(&srv, std::time::Instant::now());
                };
                if tokio::task::spawn_blocking(tick).await.is_err() {
                    tracing::error!("state tick panicked");
                }
            }
        })
    };

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The operator's counters (issue 7), bound before "ready" so a bad address fails the start.
    let metrics = match metrics_listener {
        Some(l) => {
            let local = l.local_addr().map_err(io_err("metrics address"))?;
            tracing::info!("metrics on http://{local}/metrics");
            let admin = cfg.admin.then(|| pnfsd::admin::AdminInfo {
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
                Arc::new(move || t.controller_count()) as pnfsd::metrics::ControllerCount
            });
            let ep = pnfsd::metrics::Endpoint::new(srv.clone(), controllers, admin);
            Some(tokio::spawn(pnfsd::metrics::serve(l, ep, stop_rx.clone())))
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
