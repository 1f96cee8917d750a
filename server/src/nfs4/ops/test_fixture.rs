//! What the op tests (`pnfs_tests`, `prealloc_tests`, `state_tests`, `ns_tests`) share: the
//! `Server` they run the handlers against, the call of one handler, a session's channel
//! attributes.

use std::sync::Arc;

use super::Handler;
use crate::nfs4::compound::Ctx;
use crate::nfs4::state::StateManager;
use crate::nfs4::status::NfsStat;
use crate::server::{NfsOptions, Server};
use crate::store::Store;
use crate::xdr::{XdrReader, XdrWriter};

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

/// Runs handler `h` on `args`: its status and reply body. An OK handler reads all its
/// arguments.
pub(super) fn call(ctx: &mut Ctx<'_>, h: Handler, args: &[u8]) -> (NfsStat, Vec<u8>) {
    let mut r = XdrReader::new(args);
    let mut w = XdrWriter::new();
    let st = h(ctx, &mut r, &mut w);
    if st == NfsStat::OK {
        assert_eq!(r.remaining(), 0, "arguments left unread");
    }
    (st, w.buf)
}

/// CREATE_SESSION's channel attributes (RFC 8881 §18.36): 1 MiB requests and replies,
/// 8 KiB cached, 16 operations, 8 slots, no RDMA.
pub(super) fn channel(w: &mut XdrWriter) {
    for v in [0, 1 << 20, 1 << 20, 8192, 16, 8] {
        w.u32(v);
    }
    w.u32(0);
}
