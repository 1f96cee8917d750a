//! The server object every operation reaches through `Ctx::srv`: the store, the NFSv4 state
//! and the configuration the operations read.

use std::sync::Arc;

use layout::block::LayoutType;

use crate::nfs4::state::{StateConfig, StateManager};
use crate::store::Store;

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
    pub client_limits: crate::nfs4::state::ClientLimits,
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

pub struct Server {
    pub store: Arc<Store>,
    pub state: StateManager,
    pub opts: NfsOptions,
    /// Changes at every start: write verifier, server owner/scope instance.
    pub boot_verifier: u64,
    /// The pNFS layouts service: grants, recalls, fencing, counters (nfs4/layouts).
    pub layouts: crate::nfs4::layouts::Layouts,
    /// Callbacks waiting for the backchannel (layout recalls; `callback::run_sender`).
    pub callbacks: crate::nfs4::callback::CbQueue,
    /// The CB_GETATTRs of write delegations under way (nfs4/delegs/cb_getattr.rs).
    pub cb_getattrs: crate::nfs4::delegs::cb_getattr::CbGetattrs,
    /// The async COPYs, by copy stateid (nfs4/copy/offload.rs; `offload::run_workers`).
    pub copies: crate::nfs4::copy::offload::Offloads,
    /// The exports and client rules in force (crate::exports; SIGHUP replaces them).
    pub exports: crate::exports::Exports,
    /// The operation ledger: the dispatcher counts and times every result here, once
    /// (metrics::ops).
    pub ops: crate::metrics::ops::OpMetrics,
}

impl Server {
    /// Builds the server over a mounted store and wires the state into it: the store asks the
    /// state whether a file is open before it frees an unlinked file (RFC 8881 §9.1.4.3 … the
    /// file lives on until its last CLOSE).
    pub fn new(store: Arc<Store>, opts: NfsOptions) -> Server {
        let state = StateManager::new(opts.state_config(store.boot_verifier()), store.clone());
        store.set_open_probe(Box::new(state.open_probe()));
        state.set_limits(opts.client_limits);
        Server {
            boot_verifier: store.boot_verifier(),
            store,
            state,
            opts,
            layouts: Default::default(),
            callbacks: Default::default(),
            cb_getattrs: Default::default(),
            copies: Default::default(),
            exports: Default::default(),
            ops: Default::default(),
        }
    }
}
