//! What the keys become for each part of the server: the store's, the RPC transport's, the
//! NFS service's and the embedded NVMe/TCP target's options, and where the volume is.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{Config, ConfigError, ExportSync, LayoutCommitMode};
use crate::rpc::RpcOptions;
use crate::server::NfsOptions;
use crate::store::StoreOptions;
use crate::volume::VolumeSource;

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

impl Config {
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

    /// What `metadata_volume` names, if set (a split volume).
    pub fn metadata_volume_source(&self) -> Result<Option<VolumeSource>, ConfigError> {
        self.metadata_volume
            .as_deref()
            .map(|p| VolumeSource::parse(p).map_err(ConfigError::Invalid))
            .transpose()
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
            taken_over: false,
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
