//! What the op tests (`pnfs_tests`, `prealloc_tests`, `state_tests`, `ns_tests`) share: the
//! `Server` they run the handlers against.

use std::sync::Arc;

use crate::nfs4::state::StateManager;
use crate::server::{NfsOptions, Server};
use crate::store::Store;

/// A server over `store` with a fixed `boot_verifier` (a test that restarts picks another).
/// Unlike `Server::new` it wires no open probe into the store: the op tests check the
/// handlers, not unlinked-while-open files.
pub(super) fn server(store: Arc<Store>, opts: NfsOptions, boot_verifier: u64) -> Server {
    let state = StateManager::new(&opts, store.clone());
    Server {
        store,
        state,
        opts,
        boot_verifier,
        pnfs: Default::default(),
    }
}
