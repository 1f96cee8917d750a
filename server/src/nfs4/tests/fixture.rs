//! What the op tests (`pnfs_tests`, `prealloc_tests`, `state_tests`, `ns_tests`) share: the
//! `Server` they run the handlers against, the call of one handler, a session's channel
//! attributes.

use std::sync::Arc;

use crate::nfs4::compound::Ctx;
use crate::nfs4::ops::Handler;
use crate::nfs4::state::StateManager;
use crate::nfs4::status::NfsStat;
use crate::server::{NfsOptions, Server};
use crate::store::Store;
use crate::xdr::{XdrReader, XdrWriter};

/// A server over `store` with a fixed `boot_verifier` (a test that restarts picks another).
/// Unlike `Server::new` it wires no open probe into the store: the op tests check the
/// handlers, not unlinked-while-open files.
pub(crate) fn server(store: Arc<Store>, opts: NfsOptions, boot_verifier: u64) -> Server {
    let state = StateManager::new(opts.state_config(store.boot_verifier()), store.clone());
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
pub(crate) fn call(ctx: &mut Ctx<'_>, h: Handler, args: &[u8]) -> (NfsStat, Vec<u8>) {
    let mut r = XdrReader::new(args);
    let mut w = XdrWriter::new();
    let st = match h(ctx, &mut r, &mut w) {
        Ok(()) => NfsStat::OK,
        Err(s) => s,
    };
    if st == NfsStat::OK {
        assert_eq!(r.remaining(), 0, "arguments left unread");
    }
    (st, w.buf)
}

/// CREATE_SESSION's channel attributes (RFC 8881 §18.36): 1 MiB requests and replies,
/// 8 KiB cached, 16 operations, 8 slots, no RDMA.
fn channel(w: &mut XdrWriter) {
    for v in [0, 1 << 20, 1 << 20, 8192, 16, 8] {
        w.u32(v);
    }
    w.u32(0);
}

/// CREATE_SESSION arguments for `clientid` at sequence `seq`: the backchannel asked
/// (CONN_BACK_CHAN), both channels as `channel`, callback program 0x4000_0000, AUTH_NONE.
pub(crate) fn session_args(clientid: u64, seq: u32) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.u64(clientid);
    w.u32(seq);
    w.u32(0x2);
    channel(&mut w);
    channel(&mut w);
    w.u32(0x4000_0000);
    w.u32(1);
    w.u32(0); // AUTH_NONE
    w.buf
}

/// SEQUENCE arguments: session `sid`, `seqid` on `slot`, highest slot 7, `cache` this reply.
pub(crate) fn seq_args(sid: [u8; 16], seqid: u32, slot: u32, cache: bool) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.opaque_fixed(&sid);
    w.u32(seqid);
    w.u32(slot);
    w.u32(7);
    w.bool(cache);
    w.buf
}
