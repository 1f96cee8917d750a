//! What every handler suite (`state`, `ns`, `pnfs`) shares: one fixture — a `Server` over a
//! simulated volume (`CrashDev`, so that the pNFS suites can also crash it) — the context
//! the dispatcher would give a handler, one `call` of a handler, and the arguments of the
//! session operations.

use std::net::SocketAddr;
use std::sync::Arc;

use metalog::CrashDev;

use crate::nfs4::ctx::Ctx;
use crate::nfs4::ops::Handler;
use crate::nfs4::state::StateManager;
use crate::nfs4::status::NfsStat;
use crate::rpc::{Backchannel, ConnInfo, Cred};
use crate::server::{NfsOptions, Server};
use crate::store::{Store, StoreOptions};
use crate::xdr::{XdrReader, XdrWriter};

/// The volume of a fixture unless a test asks for another size.
pub(crate) const VOL: u64 = 16 << 20;

/// A server over a simulated volume, and connection 1 (no backchannel) to talk to it on.
pub(crate) struct Fx {
    pub dev: Arc<CrashDev>,
    pub srv: Server,
    pub conn: ConnInfo,
}

impl Fx {
    /// A 16 MiB volume, default store options, boot verifier 1.
    pub(crate) fn new(opts: NfsOptions) -> Fx {
        Fx::on(opts, VOL, 1, StoreOptions::default(), 1)
    }

    /// A volume of `size` bytes; `seed` picks which unflushed writes a simulated crash keeps.
    pub(crate) fn on(
        opts: NfsOptions,
        size: u64,
        seed: u64,
        sopts: StoreOptions,
        boot_verifier: u64,
    ) -> Fx {
        let dev = Arc::new(CrashDev::new(size, seed));
        Store::mkfs_dev(dev.clone(), false).unwrap();
        let store = Arc::new(Store::open_dev(dev.clone(), sopts).unwrap());
        Fx {
            dev,
            srv: server(store, opts, boot_verifier),
            conn: conn(1, None),
        }
    }

    /// A context on connection 1 at minor version `minor`, as root, before any session.
    pub(crate) fn ctx(&self, minor: u32) -> Ctx<'_> {
        ctx(&self.srv, &self.conn, minor)
    }
}

/// A server over `store` with a fixed `boot_verifier` (a test that restarts picks another).
/// Unlike `Server::new` it wires no open probe into the store: the op tests check the
/// handlers, not unlinked-while-open files.
pub(crate) fn server(store: Arc<Store>, opts: NfsOptions, boot_verifier: u64) -> Server {
    let state = StateManager::new(opts.state_config(store.boot_verifier()), store.clone());
    state.set_limits(opts.client_limits);
    Server {
        store,
        state,
        opts,
        boot_verifier,
        layouts: Default::default(),
        callbacks: Default::default(),
        cb_getattrs: Default::default(),
        copies: Default::default(),
        exports: Default::default(),
        ops: Default::default(),
    }
}

/// Connection `id` from 127.0.0.`id`, with a backchannel if one is given.
pub(crate) fn conn(id: u64, backchannel: Option<Arc<dyn Backchannel>>) -> ConnInfo {
    ConnInfo {
        id,
        peer: SocketAddr::from(([127, 0, 0, id as u8], 700)),
        backchannel,
    }
}

/// AUTH_SYS as `uid`:`gid`.
pub(crate) fn cred(uid: u32, gid: u32) -> Cred {
    Cred {
        flavor: 1,
        uid,
        gid,
        gids: vec![],
        machine: b"t".to_vec(),
    }
}

/// A context of a one-operation COMPOUND on `conn` at minor version `minor`, as root.
pub(crate) fn ctx<'a>(srv: &'a Server, conn: &'a ConnInfo, minor: u32) -> Ctx<'a> {
    let mut x = Ctx::new(srv, conn, cred(0, 0));
    x.minor = minor;
    x.op_count = 1;
    x
}

/// Runs handler `h` on `args` as the dispatcher does: its status and result body. An OK
/// handler reads all its arguments; a failed one writes no body, except the failures whose
/// result carries one (SETATTR's empty `attrsset`, LOCK/LOCKT's DENIED, GETDEVICEINFO's
/// TOOSMALL) and BADXDR (whose body the dispatcher drops).
pub(crate) fn call(ctx: &mut Ctx<'_>, h: Handler, args: &[u8]) -> (NfsStat, Vec<u8>) {
    let mut r = XdrReader::new(args);
    let mut w = XdrWriter::new();
    let st = match h(ctx, &mut r, &mut w) {
        Ok(()) => NfsStat::OK,
        Err(s) => s,
    };
    match st {
        NfsStat::OK => assert_eq!(r.remaining(), 0, "arguments left unread"),
        NfsStat::BADXDR | NfsStat::DENIED | NfsStat::TOOSMALL => {}
        _ => assert!(
            w.is_empty() || w.buf == [0, 0, 0, 0],
            "body on failure: {}",
            st.name()
        ),
    }
    (st, w.buf)
}

/// The status of handler `h` on `args`.
pub(crate) fn st(ctx: &mut Ctx<'_>, h: Handler, args: &[u8]) -> NfsStat {
    call(ctx, h, args).0
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
