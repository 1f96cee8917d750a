//! The TOML file's schema: every key of [`Config`] with its default, and the enums its
//! values name. How a file is read and checked is load.rs; what the keys become for each
//! part of the server is options.rs.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::Size;
use crate::exports::ExportConfig;

/// `export_sync`: docs/design.md §4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ExportSync {
    #[default]
    Sync,
    Async,
}

/// `layoutcommit`: docs/design.md §4 ("sync" reproduces XFS forcing the log on every LAYOUTCOMMIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LayoutCommitMode {
    #[default]
    Datasync,
    Sync,
}

/// A layout type offered in `fs_layout_types` (docs/design.md §5).
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

/// How the daemon writes its log lines (`log_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The file's keys. Unknown keys are an error (a typo must not silently fall back).
/// `Serialize` only to compare two configurations key by key on SIGHUP ([`reload_plan`](super::reload_plan)).
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
    /// The metadata member of a split volume (same forms as `volume`; docs/store.md "Split
    /// volume"): the superblock, the log and the B+tree live here, `volume` holds only the
    /// blocks of layouts. Formatted with `pnfsd mkfs --metadata-volume`; `serve` never
    /// formats a split volume itself.
    pub metadata_volume: Option<PathBuf>,
    pub listen: SocketAddr,
    /// The embedded NVMe/TCP target (server/src/nvme/mod.rs); `"off"` disables it.
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
    /// This MDS node's reservation key on an external namespace (docs/ha.md): "pnfsdMD" and
    /// one more character, different on each MDS node of a failover pair.
    pub reservation_key: super::ReservationKey,
    pub lease_seconds: u32,
    /// Default: one lease, as knfsd does (a client reclaims within its first renewal).
    pub grace_seconds: Option<u32>,
    pub export_sync: ExportSync,
    pub layout_types: Vec<LayoutTypeName>,
    pub layoutcommit: LayoutCommitMode,
    /// Run to fence a block-layout client that does not return its layout (docs/design.md §5).
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
    /// `[target]`: `pnfsd target`'s, not serve's (config/target.rs), hence not compared on SIGHUP.
    #[serde(skip_serializing)]
    pub target: super::target::TargetSection,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./pnfsd-data"),
            volume: None,
            volume_size: Size(8 << 30),
            metadata_volume: None,
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
            reservation_key: Default::default(),
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
            target: Default::default(),
        }
    }
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
