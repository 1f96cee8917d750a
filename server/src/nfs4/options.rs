//! The part of the configuration the NFS layer reads. It sits below the services so that
//! they may take it without the server; server.rs re-exports it.

use layout::block::LayoutType;

use crate::nfs4::state::{ClientLimits, StateConfig};

/// The part of the configuration the NFS layer uses (the rest is in `config.rs`).
#[derive(Debug, Clone)]
pub struct NfsOptions {
    pub lease_seconds: u32,
    pub grace_seconds: u32,
    /// pNFS layout types offered in `fs_layout_types` (BLOCK_VOLUME, SCSI).
    pub layout_types: Vec<LayoutType>,
    /// `sync` export (docs/design.md §4).
    pub sync: bool,
    /// `layoutcommit = "sync"`: every LAYOUTCOMMIT forces the log, as XFS does
    /// (docs/design.md §4).
    pub layoutcommit_sync: bool,
    /// Command that fences a block-layout client (docs/design.md §5); `None`: no fencing.
    pub fence_command: Option<String>,
    /// Most bytes of speculative preallocation past EOF one RW LAYOUTGET adds (config
    /// `layout_prealloc_max`; 0 turns it off; layout::reach, docs/pnfs.md).
    pub layout_prealloc_max: u64,
    /// Bounds on client state (config `max_clients`, `max_client_memory`, …).
    pub client_limits: ClientLimits,
}

impl NfsOptions {
    /// What the state layer needs of the options (it knows nothing of the rest).
    pub fn state_config(&self, boot_verifier: u64) -> StateConfig {
        StateConfig {
            lease_seconds: self.lease_seconds,
            grace_seconds: self.grace_seconds,
            boot_verifier,
        }
    }
}

impl Default for NfsOptions {
    fn default() -> Self {
        NfsOptions {
            lease_seconds: 90,
            grace_seconds: 90,
            layout_types: vec![LayoutType::BLOCK_VOLUME],
            sync: true,
            layoutcommit_sync: false,
            fence_command: None,
            layout_prealloc_max: layout::reach::DEFAULT_PREALLOC_MAX_BYTES,
            client_limits: Default::default(),
        }
    }
}
