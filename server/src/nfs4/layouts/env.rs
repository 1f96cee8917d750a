//! The layouts service's handle: the store, the state, the `Layouts`, the options and the
//! callback queue, with the hooks that send what is due from `recall::tick`. The composition
//! root (server.rs) builds it; the copy service holds one to recall layouts.

use super::Layouts;
use crate::nfs4::callback::{Backchannel, CbHooks, CbQueue};
use crate::nfs4::options::NfsOptions;
use crate::nfs4::state::StateManager;
use crate::store::Store;

/// What the layouts service works with (`Server::layouts_env` builds it).
#[derive(Clone, Copy)]
pub struct Env<'a> {
    pub store: &'a Store,
    pub state: &'a StateManager,
    pub opts: &'a NfsOptions,
    pub layouts: &'a Layouts,
    /// Where recalls are queued.
    pub callbacks: &'a CbQueue,
    /// The services' callback hooks, for the callbacks `recall::tick` sends.
    pub hooks: &'a dyn CbHooks,
}

impl<'a> Env<'a> {
    /// What recalling the delegations in a LAYOUTGET's way uses.
    pub fn delegs(&self) -> crate::nfs4::delegs::Env<'a> {
        crate::nfs4::delegs::Env {
            state: self.state,
            callbacks: self.callbacks,
        }
    }

    /// The sender's view, for the callbacks due at a tick.
    pub fn backchannel(&self) -> Backchannel<'a> {
        Backchannel {
            callbacks: self.callbacks,
            state: self.state,
            hooks: self.hooks,
        }
    }
}
