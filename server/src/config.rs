//! The daemon's configuration: a TOML file (`deploy/pnfsd.toml` is the annotated, packaged
//! file: `/etc/pnfsd/pnfsd.toml`), then command-line flags over it. Every key has a default,
//! so no file is needed.
//!
//! Paths in a file are relative to the file's own directory, never to the daemon's current
//! directory (issue 12: `cd / && pnfsd serve --config …` must not format a fresh volume
//! elsewhere); flags are relative to the current directory, as for any command.
//! SIGHUP re-reads the file: [`reload_plan`] says which changed keys apply at once
//! ([`RELOADABLE`]) and which need a restart.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::exports::{ExportConfig, ExportTable};
use crate::rpc::RpcOptions;
use crate::server::NfsOptions;
use crate::store::StoreOptions;
use crate::volume::VolumeSource;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: {err}")]
    Parse {
        path: PathBuf,
        err: Box<toml::de::Error>,
    },
    #[error("bad size {0:?} (expected bytes or a number with K, M, G or T)")]
    Size(String),
    #[error("{0}")]
    Invalid(String),
}

/// `export_sync`: design.md §4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ExportSync {
    #[default]
    Sync,
    Async,
}

/// `layoutcommit`: design.md §4 ("sync" reproduces XFS forcing the log on every LAYOUTCOMMIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LayoutCommitMode {
    #[default]
    Datasync,
    Sync,
}

/// A layout type offered in `fs_layout_types` (design.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LayoutTypeName {
    Block,
    Scsi,
}

impl LayoutTypeName {
    /// The `layouttype4` it names.
    pub fn number(self) -> layout::block::LayoutType {
        match self {
            LayoutTypeName::Block => layout::block::LayoutType::BLOCK_VOLUME,
            LayoutTypeName::Scsi => layout::block::LayoutType::SCSI,
        }
    }
}

/// A size written as bytes (`8589934592`) or with a suffix (`"8G"`, `"512M"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) => Ok(Size(n)),
            Raw::Str(s) => parse_size(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `123`, `4K`, `512M`, `8G`, `1T` (binary multiples; a trailing `iB`/`B` is allowed).
pub fn parse_size(s: &str) -> Result<Size, ConfigError> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(ConfigError::Size(s.to_string())),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| ConfigError::Size(s.to_string()))?;
    n.checked_mul(1 << shift)
        .map(Size)
        .ok_or_else(|| ConfigError::Size(s.to_string()))
}

/// The file's keys. Unknown keys are an error (a typo must not silently fall back).
/// `Serialize` only to compare two configurations key by key on SIGHUP ([`reload_plan`]).
/// How the daemon writes its log lines (`log_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the embedded default volume lives.
    pub data_dir: PathBuf,
    /// The data volume: a file, a block device or an external NVMe/TCP namespace
    /// (`nvme-tcp://HOST[:PORT]/NQN[?nsid=..]`, crate::nvme::volume); default
    /// `<data_dir>/volume.img`.
    pub volume: Option<PathBuf>,
    /// Size of a volume file created on first start.
    pub volume_size: Size,
    pub listen: SocketAddr,
    /// The embedded NVMe/TCP target (issue 5, server/src/nvme.rs); `"off"` disables it.
    #[serde(deserialize_with = "listen_or_off")]
    pub nvme_listen: Option<SocketAddr>,
    /// Subsystem NQN of the target.
    pub nvme_nqn: String,
    /// Host NQNs the target admits; unset admits any host, which a listener off the loopback
    /// accepts only with `nvme_allow_any_host` ([`Config::validate`]).
    pub nvme_allowed_hosts: Option<Vec<String>>,
    /// Admit any host NQN on a listener reachable beyond this machine (off: as nvmet, a
    /// reachable target admits no host that is not named).
    pub nvme_allow_any_host: bool,
    /// Address the Discovery Log advertises (behind NAT); default: the one the host reached.
    pub nvme_advertise: Option<SocketAddr>,
    /// `[nvme_hosts]`: host NQN → the NFS client its NVMe connections belong to, by address
    /// or `co_ownerid` (NAT'd clients, several clients at one address); unlisted hosts
    /// belong to the clients at their TCP peer address (nfs4/layouts/hosts.rs).
    pub nvme_hosts: std::collections::BTreeMap<String, String>,
    /// The embedded target refuses (NVMe Access Denied) a host's command outside the blocks
    /// its NFS clients' layouts name (docs/pnfs.md "The target enforces the layouts"); off:
    /// no per-command check, while admission, fences and the MDS-blocks guard stay.
    pub nvme_enforce_layouts: bool,
    /// Host NQNs of hosts that belong to no NFS client (backup, repair): they read the whole
    /// volume and write outside the MDS's blocks. Other hosts of no client only read.
    pub nvme_admin_hosts: Vec<String>,
    /// With an external NVMe/TCP volume, also export it through the embedded target (off by
    /// default: the clients connect to the external target themselves).
    pub nvme_reexport: bool,
    /// The embedded target's bounds (nvme_tcp::Limits, docs/nvme-tcp.md "Limits"):
    /// controllers in all and per host NQN (past them Connect answers Controller Busy), TCP
    /// connections (past it a new one is closed at accept), and the longest Keep Alive
    /// Timeout granted (a host asking more gets this). [`Config::nvme_limits`].
    pub nvme_max_controllers: usize,
    pub nvme_max_controllers_per_host: usize,
    pub nvme_max_connections: usize,
    pub nvme_max_kato_ms: u32,
    /// Answer bytes one connection may have queued that its host has not read; past it the
    /// queue reads no further command until the host drains it (`Limits::
    /// max_send_queued_per_connection`; at least one Read's answer, MDTS).
    pub nvme_max_send_queued: Size,
    /// From accept to a successful Connect; a connection slower than this is closed
    /// (`Limits::connect_timeout_ms`).
    pub nvme_connect_timeout_ms: u32,
    pub lease_seconds: u32,
    /// Default: one lease, as knfsd does (a client reclaims within its first renewal).
    pub grace_seconds: Option<u32>,
    pub export_sync: ExportSync,
    pub layout_types: Vec<LayoutTypeName>,
    pub layoutcommit: LayoutCommitMode,
    /// Run to fence a block-layout client that does not return its layout (design.md §5).
    pub fence_command: Option<String>,
    /// Most speculative preallocation past EOF per RW LAYOUTGET ("0" turns it off;
    /// docs/pnfs.md "Preallocation").
    pub layout_prealloc_max: Size,
    pub log_force_interval_seconds: u64,
    /// Memory for metadata: the page cache of the store's B+tree, and (an eighth of it) the
    /// changes not yet written back (docs/store.md).
    pub metadata_cache: Size,
    /// Transport limit on one RPC record (rpc/record.rs).
    pub max_record_size: Size,
    /// Open NFS connections; at the cap an idle one with no session makes room (rpc/limits.rs).
    pub max_connections: usize,
    /// A connection with no session that is idle this long is closed.
    pub idle_timeout_seconds: u64,
    /// Client state bounds (nfs4/state/client.rs, docs/robustness.md "Client state
    /// bounds"): client records (EXCHANGE_ID answers NFS4ERR_RESOURCE past it), sessions
    /// per client (CREATE_SESSION: NFS4ERR_RESOURCE), the memory all sessions' reply
    /// caches may take (CREATE_SESSION grants fewer slots or a smaller cache, then
    /// NFS4ERR_DELAY), and expired clients kept because they hold state.
    pub max_clients: usize,
    pub max_sessions_per_client: usize,
    pub max_client_memory: Size,
    pub max_courtesy_clients: usize,
    /// Delegations (docs/delegations.md): whether OPEN hands them out, and how many may be
    /// held server-wide (past it OPEN offers none; a client that asked gets WND4_RESOURCE).
    pub delegations: bool,
    /// Read delegations the server chooses for an OPEN with no WANT_* flag (the Linux
    /// client's), as knfsd gives them: on by default (docs/delegations.md).
    pub read_delegations: bool,
    /// Write delegations the server chooses for an OPEN for write with no WANT_* flag, by a
    /// client alone on the file; other clients' GETATTRs of size and change then go to the
    /// holder with CB_GETATTR (docs/delegations.md). On by default, as knfsd (6.x) gives
    /// them: the Linux guest suite (untar, restart, crash mid-write, the metadata workload)
    /// passed with them on.
    pub write_delegations: bool,
    pub max_delegations: usize,
    /// The Prometheus metrics endpoint (`GET /metrics`, server/src/metrics.rs); off when unset.
    pub metrics_listen: Option<SocketAddr>,
    /// The admin views (`/status`, `/clients`, server/src/admin/) on the metrics listener;
    /// off by default: they are unauthenticated and name the clients (docs/operations.md).
    pub admin: bool,
    /// What the daemon logs, as a `tracing` filter (`"info"`, `"debug"`,
    /// `"info,pnfsd::nfs4=debug"`); `RUST_LOG`, when set, overrides it. SIGHUP reloads it.
    pub log_level: String,
    /// `"text"` (for a person) or `"json"` (one JSON object per line, tracing-subscriber's
    /// json format, for log shippers). Read at start; a change needs a restart.
    pub log_format: LogFormat,
    /// `[[exports]]` with their `[[exports.clients]]` rules (crate::exports); without any,
    /// the namespace is exported to this machine only. SIGHUP reloads them.
    pub exports: Vec<ExportConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./pnfsd-data"),
            volume: None,
            volume_size: Size(8 << 30),
            listen: SocketAddr::from(([127, 0, 0, 1], 2049)),
            nvme_listen: Some(SocketAddr::from(([127, 0, 0, 1], 4420))),
            nvme_nqn: "nqn.2026-11.org.pnfsd:volume".to_string(),
            nvme_allowed_hosts: None,
            nvme_allow_any_host: false,
            nvme_advertise: None,
            nvme_hosts: Default::default(),
            nvme_enforce_layouts: true,
            nvme_admin_hosts: Vec::new(),
            nvme_reexport: false,
            nvme_max_controllers: nvme_tcp::Limits::default().max_controllers,
            nvme_max_controllers_per_host: nvme_tcp::Limits::default().max_controllers_per_host,
            nvme_max_connections: nvme_tcp::Limits::default().max_connections,
            nvme_max_kato_ms: nvme_tcp::Limits::default().max_kato_ms,
            nvme_max_send_queued: Size(
                nvme_tcp::Limits::default().max_send_queued_per_connection as u64,
            ),
            nvme_connect_timeout_ms: nvme_tcp::Limits::default().connect_timeout_ms,
            lease_seconds: 90,
            grace_seconds: None,
            export_sync: ExportSync::Sync,
            layout_types: vec![LayoutTypeName::Block],
            layoutcommit: LayoutCommitMode::Datasync,
            fence_command: None,
            layout_prealloc_max: Size(layout::reach::DEFAULT_PREALLOC_MAX_BYTES),
            log_force_interval_seconds: 30,
            metadata_cache: Size(crate::store::DEFAULT_METADATA_CACHE),
            max_record_size: Size(crate::rpc::record::DEFAULT_MAX_RECORD as u64),
            max_connections: crate::rpc::DEFAULT_MAX_CONNECTIONS,
            idle_timeout_seconds: crate::rpc::DEFAULT_IDLE_TIMEOUT.as_secs(),
            max_clients: crate::nfs4::state::ClientLimits::default().max_clients,
            max_sessions_per_client: crate::nfs4::state::ClientLimits::default()
                .max_sessions_per_client,
            max_client_memory: Size(crate::nfs4::state::ClientLimits::default().max_client_memory),
            max_courtesy_clients: crate::nfs4::state::ClientLimits::default().max_courtesy_clients,
            delegations: true,
            read_delegations: true,
            write_delegations: true,
            max_delegations: crate::nfs4::state::ClientLimits::default().max_delegations,
            metrics_listen: None,
            admin: false,
            log_level: "info".to_string(),
            log_format: LogFormat::Text,
            exports: crate::exports::default_exports(),
        }
    }
}

impl Config {
    /// The embedded target's `TargetConfig::limits` from the `nvme_max_*` keys and
    /// `nvme_connect_timeout_ms` (the rest keep nvme_tcp's defaults); `Target::bind`
    /// refuses values it cannot use.
    pub fn nvme_limits(&self) -> nvme_tcp::Limits {
        nvme_tcp::Limits {
            max_controllers: self.nvme_max_controllers,
            max_controllers_per_host: self.nvme_max_controllers_per_host,
            max_connections: self.nvme_max_connections,
            max_kato_ms: self.nvme_max_kato_ms,
            // Past usize (a 32-bit host): no bound any host could reach.
            max_send_queued_per_connection: usize::try_from(self.nvme_max_send_queued.0)
                .unwrap_or(usize::MAX),
            connect_timeout_ms: self.nvme_connect_timeout_ms,
            ..nvme_tcp::Limits::default()
        }
    }
}

/// The keys SIGHUP applies to the running daemon (issue 12 Deliver 2). Every other changed
/// key is named as needing a restart. Whatever is listed here, [`Config::apply_reloadable`]
/// must copy.
pub const RELOADABLE: &[&str] = &["log_level", "exports"];

/// What a SIGHUP's new configuration changes, key by key (TOML names).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ReloadPlan {
    /// Reloadable keys that changed: `(key, old value, new value)`.
    pub apply: Vec<(String, String, String)>,
    /// Changed keys that take effect only after a restart.
    pub restart: Vec<String>,
}

/// Compares the running configuration with a newly loaded one. Keys are enumerated through
/// `Serialize`, so a key added to [`Config`] is never silently ignored by a reload.
pub fn reload_plan(running: &Config, new: &Config) -> Result<ReloadPlan, ConfigError> {
    let table = |c: &Config| match toml::Value::try_from(c) {
        Ok(toml::Value::Table(t)) => Ok(t),
        Ok(_) => Err(ConfigError::Invalid("configuration is not a table".into())),
        Err(e) => Err(ConfigError::Invalid(format!(
            "cannot compare configurations: {e}"
        ))),
    };
    let (a, b) = (table(running)?, table(new)?);
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let show = |v: Option<&toml::Value>| v.map_or("unset".to_string(), |v| v.to_string());
    let mut plan = ReloadPlan::default();
    for k in keys {
        let (old, new) = (a.get(k), b.get(k));
        if old == new {
            continue;
        }
        if RELOADABLE.contains(&k.as_str()) {
            plan.apply.push((k.clone(), show(old), show(new)));
        } else {
            plan.restart.push(k.clone());
        }
    }
    Ok(plan)
}

/// The `serve` flags that override the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub data_dir: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub nvme_listen: Option<SocketAddr>,
    /// `--no-nvme`: no embedded target, whatever the file says.
    pub no_nvme: bool,
    pub lease_seconds: Option<u32>,
    /// `--metrics-listen`: turns the metrics endpoint on (or moves it).
    pub metrics_listen: Option<SocketAddr>,
}

/// `nvme_listen`: an address, or `"off"`.
fn listen_or_off<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    s.trim()
        .parse()
        .map(Some)
        .map_err(|_| serde::de::Error::custom(format!("bad address {s:?} (ADDR:PORT or \"off\")")))
}

impl Config {
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|err| {
            if err.message().contains("`allow_auth_none`") {
                return ConfigError::Invalid(format!(
                    "{}: allow_auth_none is gone: AUTH_NONE is off by default, and an \
                     [[exports.clients]] rule with sec = [\"sys\", \"none\"] accepts it",
                    path.display()
                ));
            }
            ConfigError::Parse {
                path: path.to_path_buf(),
                err: Box::new(err),
            }
        })?;
        c.validate()?;
        Ok(c)
    }

    /// The file (or the defaults when `path` is `None`) with the flags applied; the file's
    /// relative paths are resolved against its directory (module comment).
    pub fn load(path: Option<&Path>, o: &Overrides) -> Result<Config, ConfigError> {
        let mut c = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|err| ConfigError::Read {
                    path: p.to_path_buf(),
                    err,
                })?;
                let mut c = Config::parse(&text, p)?;
                let abs = std::path::absolute(p).map_err(|err| ConfigError::Read {
                    path: p.to_path_buf(),
                    err,
                })?;
                c.resolve_paths(abs.parent().unwrap_or(Path::new("/")));
                c
            }
            None => Config::default(),
        };
        c.apply(o);
        c.validate()?;
        Ok(c)
    }

    /// `data_dir` and a `volume` path that are relative become relative to `dir` (the config
    /// file's directory); so does the default `./pnfsd-data` of a file that sets no data_dir.
    /// An NVMe/TCP URL is not a path.
    fn resolve_paths(&mut self, dir: &Path) {
        let under = |p: &Path| -> PathBuf {
            let rel = p
                .components()
                .filter(|c| *c != std::path::Component::CurDir);
            dir.join(rel.collect::<PathBuf>())
        };
        if self.data_dir.is_relative() {
            self.data_dir = under(&self.data_dir);
        }
        if let Some(v) = &self.volume {
            if v.is_relative() && !v.to_str().is_some_and(crate::nvme::volume::is_nvme_url) {
                self.volume = Some(under(v));
            }
        }
    }

    /// Takes the [`RELOADABLE`] keys of `new` (a SIGHUP); everything else stays as started.
    pub fn apply_reloadable(&mut self, new: &Config) {
        self.log_level = new.log_level.clone();
        self.exports = new.exports.clone();
    }

    /// The exports compiled (host names resolved): checked at load, so a bad rule fails the
    /// start or the reload.
    pub fn export_table(&self) -> Result<ExportTable, ConfigError> {
        ExportTable::compile(&self.exports).map_err(|e| ConfigError::Invalid(e.to_string()))
    }

    pub fn apply(&mut self, o: &Overrides) {
        if let Some(d) = &o.data_dir {
            self.data_dir = d.clone();
        }
        if let Some(l) = o.listen {
            self.listen = l;
        }
        if let Some(n) = o.nvme_listen {
            self.nvme_listen = Some(n);
        }
        if o.no_nvme {
            self.nvme_listen = None;
        }
        if let Some(s) = o.lease_seconds {
            self.lease_seconds = s;
        }
        if let Some(m) = o.metrics_listen {
            self.metrics_listen = Some(m);
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_seconds == 0 {
            return Err(ConfigError::Invalid("lease_seconds must be > 0".into()));
        }
        if self.layout_types.is_empty() {
            return Err(ConfigError::Invalid(
                "layout_types must name at least one type".into(),
            ));
        }
        // NVMe Base 2.0 §4.5: an NQN is "nqn." plus at most 223 bytes in all.
        let nqn = &self.nvme_nqn;
        if !nqn.starts_with("nqn.") || nqn.len() > 223 || nqn.contains(char::is_whitespace) {
            return Err(ConfigError::Invalid(format!(
                "nvme_nqn {nqn:?} must start with \"nqn.\" and have at most 223 bytes"
            )));
        }
        self.volume_source()?;
        // Below this not even a CREATE_SESSION with its channel attributes fits.
        if self.max_record_size.0 < 4096 || self.max_record_size.0 > (1 << 30) {
            return Err(ConfigError::Invalid(
                "max_record_size must be between 4K and 1G".into(),
            ));
        }
        if self.max_connections == 0 || self.idle_timeout_seconds == 0 {
            return Err(ConfigError::Invalid(
                "max_connections and idle_timeout_seconds must be > 0".into(),
            ));
        }
        if self.max_clients == 0 || self.max_sessions_per_client == 0 {
            return Err(ConfigError::Invalid(
                "max_clients and max_sessions_per_client must be > 0".into(),
            ));
        }
        // One session of one slot with the smallest cache must fit.
        if self.max_client_memory.0 < 64 << 10 {
            return Err(ConfigError::Invalid(
                "max_client_memory must be at least 64K".into(),
            ));
        }
        self.log_filter()?;
        self.export_table()?;
        self.check_nvme_access()
    }

    /// Issue 12: any host that reaches the target can read and write the whole volume, so a
    /// listener beyond the loopback must say whom it admits (nvmet, likewise, admits no host
    /// that is not named unless `attr_allow_any_host` is set).
    fn check_nvme_access(&self) -> Result<(), ConfigError> {
        let Some(addr) = self.embedded_target() else {
            return Ok(());
        };
        match (&self.nvme_allowed_hosts, self.nvme_allow_any_host) {
            (Some(_), true) => Err(ConfigError::Invalid(
                "nvme_allowed_hosts and nvme_allow_any_host = true contradict each other: \
                 keep one"
                    .into(),
            )),
            (None, false) if !addr.ip().is_loopback() => Err(ConfigError::Invalid(format!(
                "nvme_listen {addr} is reachable from other hosts, and every host that \
                 connects could read and overwrite the whole volume: list the hosts' NQNs \
                 (their /etc/nvme/hostnqn) in nvme_allowed_hosts = [\"nqn...\"], or set \
                 nvme_allow_any_host = true on a trusted network"
            ))),
            _ => Ok(()),
        }
    }

    /// `log_level` as a filter (checked at load, so a typo fails the start or the reload).
    pub fn log_filter(&self) -> Result<tracing_subscriber::EnvFilter, ConfigError> {
        tracing_subscriber::EnvFilter::builder()
            .parse(&self.log_level)
            .map_err(|e| ConfigError::Invalid(format!("log_level {:?}: {e}", self.log_level)))
    }

    /// Issue 12: NFS reachable from other hosts while the data path is not (or the other way
    /// round) is legal, but remote clients then silently do all their I/O through the MDS
    /// (or reach a target they cannot use): worth a warning at start.
    pub fn reachability_warnings(&self) -> Vec<String> {
        let nfs_remote = !self.listen.ip().is_loopback();
        let data = match self.volume_source() {
            Ok(VolumeSource::Nvme(_)) if self.embedded_target().is_none() => None,
            _ => Some(self.nvme_listen),
        };
        let mut w = Vec::new();
        if nfs_remote && self.export_table().is_ok_and(|t| !t.admits_remote()) {
            w.push(format!(
                "NFS listens on {} but the exports admit only this machine: other hosts get \
                 NFS4ERR_ACCESS (add [[exports]] client rules, docs/admin-guide.md \"Exports\")",
                self.listen
            ));
        }
        match data {
            Some(None) if nfs_remote => w.push(format!(
                "NFS listens on {} but the NVMe/TCP target is off: remote clients get no \
                 layout device and do all their I/O through the MDS",
                self.listen
            )),
            Some(Some(n)) if nfs_remote && n.ip().is_loopback() => w.push(format!(
                "NFS listens on {} but the NVMe/TCP target only on {n}: remote clients \
                 cannot reach the volume and silently fall back to NFS READ/WRITE through \
                 the MDS (set nvme_listen to an address they reach, docs/admin-guide.md)",
                self.listen
            )),
            Some(Some(n)) if !nfs_remote && !n.ip().is_loopback() => w.push(format!(
                "the NVMe/TCP target listens on {n} but NFS only on {}: remote hosts can \
                 reach the volume but cannot mount it",
                self.listen
            )),
            _ => {}
        }
        match (self.admin, self.metrics_listen) {
            (true, None) => w.push(
                "admin = true but metrics_listen is unset: the admin views are not served".into(),
            ),
            (true, Some(m)) if !m.ip().is_loopback() => w.push(format!(
                "the admin views (/status, /clients) are served on {m} without \
                 authentication: anyone who reaches it sees every client"
            )),
            _ => {}
        }
        w
    }

    /// The volume path: `volume`, or `<data_dir>/volume.img`.
    pub fn volume_path(&self) -> PathBuf {
        self.volume
            .clone()
            .unwrap_or_else(|| self.data_dir.join("volume.img"))
    }

    /// What `volume` names: a file or block device, or an external NVMe/TCP namespace.
    pub fn volume_source(&self) -> Result<VolumeSource, ConfigError> {
        VolumeSource::parse(&self.volume_path()).map_err(ConfigError::Invalid)
    }

    /// Where the embedded NVMe/TCP target listens, if it runs: `nvme_listen`, except that an
    /// external volume is only re-exported when `nvme_reexport` asks for it.
    pub fn embedded_target(&self) -> Option<SocketAddr> {
        match self.volume_source() {
            Ok(VolumeSource::Nvme(_)) if !self.nvme_reexport => None,
            _ => self.nvme_listen,
        }
    }

    pub fn nfs_options(&self) -> NfsOptions {
        let mut types: Vec<_> = self.layout_types.iter().map(|t| t.number()).collect();
        types.dedup();
        NfsOptions {
            lease_seconds: self.lease_seconds,
            grace_seconds: self.grace_seconds.unwrap_or(self.lease_seconds),
            layout_types: types,
            sync: self.export_sync == ExportSync::Sync,
            layoutcommit_sync: self.layoutcommit == LayoutCommitMode::Sync,
            fence_command: self.fence_command.clone(),
            layout_prealloc_max: self.layout_prealloc_max.0,
            client_limits: crate::nfs4::state::ClientLimits {
                max_clients: self.max_clients,
                max_sessions_per_client: self.max_sessions_per_client,
                max_client_memory: self.max_client_memory.0,
                max_courtesy_clients: self.max_courtesy_clients,
                delegations: self.delegations,
                read_delegations: self.read_delegations,
                write_delegations: self.write_delegations,
                max_delegations: self.max_delegations,
                ..Default::default()
            },
        }
    }

    pub fn store_options(&self) -> StoreOptions {
        StoreOptions {
            sync: self.export_sync == ExportSync::Sync,
            log_force_interval: Duration::from_secs(self.log_force_interval_seconds.max(1)),
            metadata_cache: self.metadata_cache.0,
        }
    }

    pub fn rpc_options(&self) -> RpcOptions {
        RpcOptions {
            max_record: self.max_record_size.0 as usize,
            // AUTH_NONE passes the transport, as in knfsd; the export's rule decides whether it
            // may touch the namespace (WRONGSEC unless its `sec` lists "none").
            auth: crate::rpc::auth::AuthPolicy { allow_none: true },
            max_connections: self.max_connections,
            idle_timeout: Duration::from_secs(self.idle_timeout_seconds),
            ..RpcOptions::for_session_slots(crate::nfs4::state::MAX_SLOTS as usize)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use layout::block::LayoutType;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8G").unwrap(), Size(8 << 30));
        assert_eq!(parse_size("512m").unwrap(), Size(512 << 20));
        assert_eq!(parse_size("4KiB").unwrap(), Size(4096));
        assert_eq!(parse_size("1T").unwrap(), Size(1 << 40));
        assert_eq!(parse_size("12345").unwrap(), Size(12345));
        for bad in ["", "G", "8X", "-1G", "99999999999T", "1.5G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    /// Issue 17: the NVMe/TCP send bound and Connect timeout are keys, with nvme_tcp's
    /// defaults, and reach the target's `Limits`.
    #[test]
    fn nvme_send_bound_and_connect_timeout_parse_into_the_limits() {
        let c = Config::parse(
            "nvme_max_send_queued = \"8M\"\nnvme_connect_timeout_ms = 2500\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let l = c.nvme_limits();
        assert_eq!(
            (l.max_send_queued_per_connection, l.connect_timeout_ms),
            (8 << 20, 2500)
        );
        let c = Config::parse("nvme_max_send_queued = 1048576", Path::new("t.toml")).unwrap();
        assert_eq!(c.nvme_limits().max_send_queued_per_connection, 1 << 20);
        let d = nvme_tcp::Limits::default();
        assert_eq!(Config::default().nvme_limits(), d);
        for bad in [
            "nvme_max_send_queued = \"4X\"",
            "nvme_connect_timeout_ms = -1",
        ] {
            assert!(Config::parse(bad, Path::new("t.toml")).is_err(), "{bad}");
        }
    }

    #[test]
    fn client_state_limits_parse_and_are_checked() {
        let c = Config::parse(
            "max_clients = 10\nmax_sessions_per_client = 2\nmax_client_memory = \"8M\"\n\
             max_courtesy_clients = 3\nwrite_delegations = false\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let l = c.nfs_options().client_limits;
        assert!(!l.write_delegations && l.read_delegations);
        assert!(
            Config::default()
                .nfs_options()
                .client_limits
                .write_delegations
        );
        assert_eq!(
            (
                l.max_clients,
                l.max_sessions_per_client,
                l.max_client_memory
            ),
            (10, 2, 8 << 20)
        );
        assert_eq!(l.max_courtesy_clients, 3);
        let d = Config::default().nfs_options().client_limits;
        assert_eq!(d, crate::nfs4::state::ClientLimits::default());
        assert_eq!(d.max_client_memory, 256 << 20);
        for bad in [
            "max_clients = 0",
            "max_sessions_per_client = 0",
            "max_client_memory = \"4K\"",
        ] {
            assert!(Config::parse(bad, Path::new("t.toml")).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_full_file_parses() {
        let text = r#"
            data_dir = "/srv/pnfs"
            volume = "/dev/nvme0n1"
            volume_size = "16G"
            listen = "0.0.0.0:2049"
            nvme_listen = "0.0.0.0:4420"
            nvme_allow_any_host = true
            nvme_nqn = "nqn.test:vol"
            lease_seconds = 30
            grace_seconds = 45
            export_sync = "async"
            layout_types = ["block", "scsi"]
            layoutcommit = "sync"
            fence_command = "/usr/local/bin/fence %c"
            log_force_interval_seconds = 5
            metadata_cache = "64M"
            max_record_size = 2097152
            max_connections = 50
            idle_timeout_seconds = 7
            [[exports]]
            path = "/"
            [[exports.clients]]
            hosts = ["10.0.0.0/24"]
            access = "ro"
        "#;
        let c = Config::parse(text, Path::new("t.toml")).unwrap();
        assert_eq!(c.volume_path(), PathBuf::from("/dev/nvme0n1"));
        assert_eq!(c.volume_size, Size(16 << 30));
        assert_eq!(c.nvme_listen, Some("0.0.0.0:4420".parse().unwrap()));
        assert_eq!(c.nvme_nqn, "nqn.test:vol");
        let n = c.nfs_options();
        assert_eq!((n.lease_seconds, n.grace_seconds, n.sync), (30, 45, false));
        assert_eq!(
            n.layout_types,
            vec![LayoutType::BLOCK_VOLUME, LayoutType::SCSI]
        );
        assert!(n.layoutcommit_sync);
        assert_eq!(n.fence_command.as_deref(), Some("/usr/local/bin/fence %c"));
        assert_eq!(c.store_options().log_force_interval, Duration::from_secs(5));
        assert_eq!(c.store_options().metadata_cache, 64 << 20);
        assert_eq!(
            Config::default().store_options().metadata_cache,
            256 << 20,
            "metadata_cache defaults to 256M"
        );
        let r = c.rpc_options();
        // AUTH_NONE passes the transport; the export rules refuse it (crate::exports).
        assert_eq!((r.max_record, r.auth.allow_none), (2 << 20, true));
        assert_eq!(c.exports.len(), 1);
        assert_eq!(
            c.exports[0].clients[0].access,
            crate::exports::AccessMode::Ro
        );
        assert_eq!(
            (r.max_connections, r.idle_timeout),
            (50, Duration::from_secs(7))
        );
    }

    /// Issue 12 Deliver 3: the exports section parses with knfsd's defaults, a bad rule
    /// fails the load, and the old AUTH_NONE switch says what replaced it.
    #[test]
    fn exports_parse_with_knfsd_defaults_and_bad_rules_fail() {
        use crate::exports::{AccessMode, SecFlavor};
        use crate::rpc::auth::Squash;
        let c = Config::parse(
            "[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\n",
            Path::new("x"),
        )
        .unwrap();
        let r = &c.exports[0].clients[0];
        assert_eq!(c.exports[0].path, "/");
        assert_eq!(
            (
                r.access,
                r.squash,
                r.anon_uid,
                r.anon_gid,
                &r.sec[..],
                r.pnfs
            ),
            (
                AccessMode::Rw,
                Squash::Root,
                65534,
                65534,
                &[SecFlavor::Sys][..],
                true
            )
        );
        for bad in [
            "[[exports]]\npath = \"/srv\"\n[[exports.clients]]\nhosts = [\"*\"]",
            "[[exports]]\nclients = []",
            "[[exports]]\n[[exports.clients]]\nhosts = [\"10.0.0.0/40\"]",
            "[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\nsquash = \"root\"",
            "[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\nsec = [\"krb5\"]",
            "[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\nsec = []",
            "[[exports]]\n[[exports.clients]]\nhost = [\"*\"]",
        ] {
            assert!(Config::parse(bad, Path::new("x")).is_err(), "{bad}");
        }
        let e = Config::parse("allow_auth_none = true", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("sec = [\"sys\", \"none\"]"), "{e}");
    }

    #[test]
    fn defaults_and_errors() {
        let c = Config::parse("", Path::new("empty.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.volume_path(), PathBuf::from("./pnfsd-data/volume.img"));
        assert_eq!(c.nfs_options().layout_types, vec![LayoutType::BLOCK_VOLUME]);
        assert!(c.nfs_options().sync && !c.nfs_options().layoutcommit_sync);
        for bad in [
            "lisen = \"1.2.3.4:5\"",
            "export_sync = \"maybe\"",
            "layout_types = [\"files\"]",
            "layout_types = []",
            "lease_seconds = 0",
            "volume_size = \"big\"",
            "listen = \"nohost\"",
            "nvme_listen = \"of\"",
            "nvme_nqn = \"volume\"",
            "max_connections = 0",
            "idle_timeout_seconds = 0",
        ] {
            assert!(Config::parse(bad, Path::new("x")).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_nvme_target_is_on_by_default_and_off_by_name() {
        let c = Config::default();
        assert_eq!(c.nvme_listen, Some("127.0.0.1:4420".parse().unwrap()));
        assert_eq!(c.nvme_allowed_hosts, None);
        for off in ["nvme_listen = \"off\"", "nvme_listen = \"OFF\""] {
            assert_eq!(
                Config::parse(off, Path::new("x")).unwrap().nvme_listen,
                None
            );
        }
        let c = Config::parse(
            "nvme_allowed_hosts = [\"nqn.2014-08.org.nvmexpress:uuid:1\"]\n\
             nvme_advertise = \"10.0.2.2:4420\"",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(c.nvme_allowed_hosts.unwrap().len(), 1);
        assert_eq!(c.nvme_advertise.map(|a| a.port()), Some(4420));
    }

    #[test]
    fn metrics_endpoint_is_off_by_default_and_set_by_key_or_flag() {
        assert_eq!(Config::default().metrics_listen, None);
        let c = Config::parse("metrics_listen = \"127.0.0.1:9400\"", Path::new("x")).unwrap();
        assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9400));
        assert!(Config::parse("metrics_listen = \"nowhere\"", Path::new("x")).is_err());
        let o = Overrides {
            metrics_listen: Some("127.0.0.1:9401".parse().unwrap()),
            ..Overrides::default()
        };
        let c = Config::load(None, &o).unwrap();
        assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9401));
    }

    /// The admin views are off unless asked for, and warned about off the loopback.
    #[test]
    fn admin_is_off_by_default_and_warned_about_off_the_loopback() {
        assert!(!Config::default().admin);
        let warn = |toml: &str| {
            Config::parse(toml, Path::new("x"))
                .unwrap()
                .reachability_warnings()
                .into_iter()
                .filter(|w| w.contains("admin"))
                .count()
        };
        assert_eq!(warn("admin = true\nmetrics_listen = \"127.0.0.1:9400\""), 0);
        assert_eq!(warn("admin = true\nmetrics_listen = \"0.0.0.0:9400\""), 1);
        assert_eq!(warn("admin = true"), 1);
        assert_eq!(warn("metrics_listen = \"0.0.0.0:9400\""), 0);
    }

    /// The packaged file (/etc/pnfsd/pnfsd.toml) is the built-in defaults but for where the
    /// data lives.
    #[test]
    fn the_packaged_file_is_the_defaults_with_data_under_var_lib() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/pnfsd.toml");
        let c = Config::load(Some(&p), &Overrides::default()).unwrap();
        assert_eq!(c.volume_path(), PathBuf::from("/var/lib/pnfsd/volume.img"));
        let d = Config {
            data_dir: "/var/lib/pnfsd".into(),
            ..Config::default()
        };
        assert_eq!(c, d);
    }

    /// Issue 12: `cd / && pnfsd serve --config DIR/c.toml` with `data_dir = "data"` used
    /// /data; the file's directory is meant. Flags stay relative to the current directory.
    #[test]
    fn relative_paths_in_a_file_are_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(&p, "data_dir = \"data\"\n").unwrap();
        let c = Config::load(Some(&p), &Overrides::default()).unwrap();
        assert_eq!(c.volume_path(), dir.path().join("data/volume.img"));
        std::fs::write(&p, "lease_seconds = 30\n").unwrap();
        let c = Config::load(Some(&p), &Overrides::default()).unwrap();
        assert_eq!(c.volume_path(), dir.path().join("pnfsd-data/volume.img"));
        std::fs::write(&p, "volume = \"../v.img\"\n").unwrap();
        let c = Config::load(Some(&p), &Overrides::default()).unwrap();
        assert_eq!(c.volume_path(), dir.path().join("../v.img"));
        std::fs::write(&p, "volume = \"nvme-tcp://h/nqn.a\"\ndata_dir = \"/abs\"\n").unwrap();
        let c = Config::load(Some(&p), &Overrides::default()).unwrap();
        assert_eq!(c.volume_path(), PathBuf::from("nvme-tcp://h/nqn.a"));
        assert_eq!(c.data_dir, PathBuf::from("/abs"));
        let o = Overrides {
            data_dir: Some("rel".into()),
            ..Overrides::default()
        };
        assert_eq!(
            Config::load(Some(&p), &o).unwrap().data_dir,
            PathBuf::from("rel")
        );
        // A relative path to the file itself works from the current directory.
        let cwd = std::env::current_dir().unwrap();
        let rel = pathdiff(&p, &cwd);
        std::fs::write(&p, "data_dir = \"data\"\n").unwrap();
        let c = Config::load(Some(&rel), &Overrides::default()).unwrap();
        assert_eq!(c.data_dir, cwd.join(rel.parent().unwrap()).join("data"));
    }

    /// `target` relative to `base` through `..` components (both absolute).
    fn pathdiff(target: &Path, base: &Path) -> PathBuf {
        let mut up = PathBuf::new();
        for _ in base.components().skip(1) {
            up.push("..");
        }
        up.join(target.strip_prefix("/").unwrap())
    }

    /// Issue 12 Deliver 4: a target reachable from other hosts must say whom it admits.
    #[test]
    fn an_nvme_listener_off_the_loopback_needs_allowed_hosts() {
        let e = Config::parse("nvme_listen = \"0.0.0.0:4420\"", Path::new("x")).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("0.0.0.0:4420")
                && m.contains("nvme_allowed_hosts")
                && m.contains("nvme_allow_any_host"),
            "{m}"
        );
        assert!(Config::parse("nvme_listen = \"[::]:4420\"", Path::new("x")).is_err());
        for ok in [
            "nvme_listen = \"0.0.0.0:4420\"\nnvme_allowed_hosts = [\"nqn.2014-08.org.nvmexpress:uuid:1\"]",
            "nvme_listen = \"0.0.0.0:4420\"\nnvme_allow_any_host = true",
            "nvme_listen = \"0.0.0.0:4420\"\nnvme_allowed_hosts = []",
            "nvme_listen = \"127.0.0.1:4420\"",
            "nvme_listen = \"[::1]:4420\"",
            "nvme_listen = \"off\"",
            // An external volume without re-export: the target does not run.
            "nvme_listen = \"0.0.0.0:4420\"\nvolume = \"nvme-tcp://h/nqn.a\"",
        ] {
            Config::parse(ok, Path::new("x")).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert!(Config::parse(
            "nvme_allowed_hosts = [\"nqn.a\"]\nnvme_allow_any_host = true",
            Path::new("x")
        )
        .is_err());
        // A flag moves the listener: checked after the flags too.
        let o = Overrides {
            nvme_listen: Some("0.0.0.0:4420".parse().unwrap()),
            ..Overrides::default()
        };
        assert!(Config::load(None, &o).is_err());
    }

    #[test]
    fn nfs_and_nvme_reachability_that_differ_are_warned_about() {
        let warn = |t: &str| {
            Config::parse(t, Path::new("x"))
                .unwrap()
                .reachability_warnings()
        };
        assert!(warn("").is_empty());
        let any = "\n[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\n";
        let w = warn(&format!("listen = \"0.0.0.0:2049\"{any}"));
        assert!(w.len() == 1 && w[0].contains("fall back"), "{w:?}");
        let w = warn(&format!(
            "listen = \"0.0.0.0:2049\"\nnvme_listen = \"off\"{any}"
        ));
        assert!(w.len() == 1 && w[0].contains("off"), "{w:?}");
        // The built-in exports admit this machine only: a remote listener is told so.
        let w = warn("listen = \"0.0.0.0:2049\"\nnvme_listen = \"off\"");
        assert!(
            w.len() == 2 && w[0].contains("admit only this machine"),
            "{w:?}"
        );
        let w = warn("nvme_listen = \"0.0.0.0:4420\"\nnvme_allow_any_host = true");
        assert!(w.len() == 1 && w[0].contains("cannot mount"), "{w:?}");
        assert!(warn(&format!(
            "listen = \"0.0.0.0:2049\"\nnvme_listen = \"0.0.0.0:4420\"\nnvme_allow_any_host = true{any}"
        ))
        .is_empty());
        // An external volume: its target is not ours to judge.
        assert!(warn(&format!(
            "listen = \"0.0.0.0:2049\"\nvolume = \"nvme-tcp://h/nqn.a\"{any}"
        ))
        .is_empty());
    }

    /// Issue 12 Deliver 2: SIGHUP applies log_level and names every other changed key.
    #[test]
    fn a_reload_applies_log_level_and_names_the_rest() {
        let old = Config::default();
        let new = Config::parse(
            "log_level = \"debug\"\nlisten = \"127.0.0.1:3049\"\nnvme_listen = \"off\"\n\
             metrics_listen = \"127.0.0.1:9400\"\nlayout_types = [\"block\", \"scsi\"]\n\
             [[exports]]\n[[exports.clients]]\nhosts = [\"10.0.0.0/8\"]\naccess = \"ro\"",
            Path::new("x"),
        )
        .unwrap();
        let plan = reload_plan(&old, &new).unwrap();
        assert_eq!(
            plan.apply.iter().map(|a| &a.0[..]).collect::<Vec<_>>(),
            ["exports", "log_level"]
        );
        assert_eq!(
            plan.apply[1],
            (
                "log_level".to_string(),
                "\"info\"".to_string(),
                "\"debug\"".to_string()
            )
        );
        assert!(
            plan.apply[0].2.contains("10.0.0.0/8"),
            "{:?}",
            plan.apply[0]
        );
        assert_eq!(
            plan.restart,
            vec!["layout_types", "listen", "metrics_listen", "nvme_listen"]
        );
        assert_eq!(reload_plan(&old, &old).unwrap(), ReloadPlan::default());
        // Once applied, the reloadable keys no longer differ; the others still do.
        let mut running = old.clone();
        running.apply_reloadable(&new);
        let again = reload_plan(&running, &new).unwrap();
        assert!(again.apply.is_empty(), "{again:?}");
        assert_eq!(again.restart, plan.restart);
        // Every key of the file takes part (a new key cannot be silently ignored).
        let keys = match toml::Value::try_from(Config {
            volume: Some("/v".into()),
            grace_seconds: Some(1),
            nvme_allowed_hosts: Some(vec![]),
            nvme_advertise: Some("127.0.0.1:1".parse().unwrap()),
            fence_command: Some("f".into()),
            metrics_listen: Some("127.0.0.1:1".parse().unwrap()),
            ..Config::default()
        })
        .unwrap()
        {
            toml::Value::Table(t) => t.len(),
            v => panic!("{v:?}"),
        };
        let example = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/pnfsd.toml"),
        )
        .unwrap();
        // The plain keys come before the first table (`[[exports]]`), which documents itself.
        let plain = example
            .lines()
            .take_while(|l| !l.trim_start_matches("# ").starts_with("[["))
            .filter_map(|l| l.trim_start_matches("# ").split_once(" = "))
            .filter(|(k, _)| !k.contains(' ') && !k.is_empty())
            .map(|(k, _)| k)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let tables = usize::from(example.lines().any(|l| l == "[[exports]]"));
        assert_eq!(
            keys,
            plain + tables,
            "deploy/pnfsd.toml documents every key"
        );
        assert!(Config::parse("log_level = \"info,[\"", Path::new("x")).is_err());
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(
            &p,
            "listen = \"127.0.0.1:3049\"\nlease_seconds = 20\ndata_dir = \"/a\"\n",
        )
        .unwrap();
        let c = Config::load(Some(&p), &Overrides::default()).unwrap();
        assert_eq!((c.listen.port(), c.lease_seconds), (3049, 20));
        let o = Overrides {
            data_dir: Some("/b".into()),
            listen: Some("127.0.0.1:4049".parse().unwrap()),
            nvme_listen: Some("127.0.0.1:4421".parse().unwrap()),
            no_nvme: false,
            lease_seconds: Some(60),
            metrics_listen: None,
        };
        let c = Config::load(Some(&p), &o).unwrap();
        assert_eq!((c.listen.port(), c.lease_seconds), (4049, 60));
        // The grace period follows the lease unless the file sets it.
        assert_eq!(c.nfs_options().grace_seconds, 60);
        assert_eq!(c.volume_path(), PathBuf::from("/b/volume.img"));
        assert_eq!(c.nvme_listen.map(|a| a.port()), Some(4421));
        let off = Overrides {
            no_nvme: true,
            ..o.clone()
        };
        assert_eq!(Config::load(Some(&p), &off).unwrap().nvme_listen, None);
        assert!(Config::load(Some(&dir.path().join("missing.toml")), &o).is_err());
        assert!(Config::load(
            None,
            &Overrides {
                lease_seconds: Some(0),
                ..o
            }
        )
        .is_err());
    }

    #[test]
    fn an_external_volume_turns_the_embedded_target_off() {
        let c = Config::default();
        assert!(matches!(c.volume_source().unwrap(), VolumeSource::File(_)));
        assert_eq!(c.embedded_target(), c.nvme_listen);
        let text = "volume = \"nvme-tcp://10.1.2.3/nqn.2014-08.org.example:vol?nsid=2\"\n";
        let c = Config::parse(text, Path::new("x")).unwrap();
        match c.volume_source().unwrap() {
            VolumeSource::Nvme(s) => assert_eq!((s.port, s.nsid), (4420, 2)),
            v => panic!("{v:?}"),
        }
        assert_eq!(c.embedded_target(), None);
        let c = Config::parse(&format!("{text}nvme_reexport = true\n"), Path::new("x")).unwrap();
        assert_eq!(c.embedded_target(), c.nvme_listen);
        assert!(c.embedded_target().is_some());
        for bad in [
            "volume = \"nvme-tcp://10.1.2.3/vol\"",
            "volume = \"nvme-tcp://10.1.2.3/nqn.a?nsid=0\"",
        ] {
            assert!(Config::parse(bad, Path::new("x")).is_err(), "{bad}");
        }
    }
}
