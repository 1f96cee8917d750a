//! The server object every operation reaches through `Ctx::srv`: the store, the NFSv4 state
//! and the configuration the operations read.
//!
//! The answers to queued callbacks come back through `impl CbHooks for Server`, which
//! hands each `CbKind` to the service that queues it: the backchannel (nfs4/callback.rs)
//! knows no service.

use std::sync::Arc;

use crate::nfs4::callback::{Backchannel, Callback, CbHooks, CbKind};
use crate::nfs4::copy::offload;
use crate::nfs4::delegs;
use crate::nfs4::delegs::cb_getattr;
use crate::nfs4::layouts;
use crate::nfs4::state::StateManager;
use crate::nfs4::status::NfsStat;
use crate::store::Store;

pub use crate::nfs4::options::NfsOptions;

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
        }
    }

    /// What the callback sender uses.
    pub fn backchannel(&self) -> Backchannel<'_> {
        Backchannel {
            callbacks: &self.callbacks,
            state: &self.state,
            hooks: self,
        }
    }
}

/// Each kind of callback is queued by one service, which decides about it.
impl CbHooks for Server {
    fn wanted(&self, cb: &Callback) -> bool {
        match cb.kind {
            CbKind::LayoutRecall { .. } => layouts::recall::wanted(self, cb),
            CbKind::Recall { .. } => delegs::recall_wanted(self, cb),
            CbKind::Getattr { .. } => cb_getattr::wanted(self, cb),
            CbKind::Offload { .. } => offload::offload_wanted(self, cb),
        }
    }

    fn answered(&self, cb: &Callback, st: NfsStat, reply: &[u8]) {
        match cb.kind {
            CbKind::LayoutRecall { .. } => layouts::recall::answered(self, cb, st, reply),
            CbKind::Recall { .. } => delegs::recall_answered(self, cb, st, reply),
            CbKind::Getattr { .. } => cb_getattr::answered(self, cb, st, reply),
            CbKind::Offload { .. } => offload::offload_answered(self, cb, st, reply),
        }
    }
}
