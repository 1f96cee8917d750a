//! The server object every operation reaches through `Ctx::srv`: the store, the NFSv4 state
//! and the configuration the operations read.
//!
//! This is the composition root: the services (nfs4/layouts, nfs4/delegs, nfs4/copy, the
//! backchannel in nfs4/callback.rs) never see `Server`. Each takes a small handle of the
//! references it uses, built here (`layouts_env`, `delegs_env`, `cb_getattr_env`,
//! `copy_env`, `backchannel`), and the answers to queued callbacks come back through
//! `impl CbHooks for Server`, which hands each `CbKind` to the service that queues it.

use std::sync::Arc;

use crate::nfs4::callback::{Backchannel, Callback, CbHooks, CbKind};
use crate::nfs4::copy;
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

    /// The layouts service's handle.
    pub fn layouts_env(&self) -> layouts::Env<'_> {
        layouts::Env {
            store: &self.store,
            state: &self.state,
            opts: &self.opts,
            layouts: &self.layouts,
            callbacks: &self.callbacks,
            hooks: self,
        }
    }

    /// The delegation recalls' handle.
    pub fn delegs_env(&self) -> delegs::Env<'_> {
        delegs::Env {
            state: &self.state,
            callbacks: &self.callbacks,
        }
    }

    /// CB_GETATTR's handle.
    pub fn cb_getattr_env(&self) -> cb_getattr::Env<'_> {
        cb_getattr::Env {
            store: &self.store,
            state: &self.state,
            callbacks: &self.callbacks,
            cb_getattrs: &self.cb_getattrs,
        }
    }

    /// The copy service's handle.
    pub fn copy_env(&self) -> copy::Env<'_> {
        copy::Env {
            pnfs: self.layouts_env(),
            copies: &self.copies,
            boot_verifier: self.boot_verifier,
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
            CbKind::LayoutRecall { .. } => layouts::recall::wanted(&self.layouts_env(), cb),
            CbKind::Recall { .. } => delegs::recall_wanted(&self.delegs_env(), cb),
            CbKind::Getattr { .. } => cb_getattr::wanted(&self.cb_getattr_env(), cb),
            CbKind::Offload { .. } => offload::offload_wanted(&self.copy_env(), cb),
        }
    }

    fn answered(&self, cb: &Callback, st: NfsStat, reply: &[u8]) {
        match cb.kind {
            CbKind::LayoutRecall { .. } => {
                layouts::recall::answered(&self.layouts_env(), cb, st, reply)
            }
            CbKind::Recall { .. } => delegs::recall_answered(&self.delegs_env(), cb, st, reply),
            CbKind::Getattr { .. } => cb_getattr::answered(&self.cb_getattr_env(), cb, st, reply),
            CbKind::Offload { .. } => offload::offload_answered(&self.copy_env(), cb, st, reply),
        }
    }
}
