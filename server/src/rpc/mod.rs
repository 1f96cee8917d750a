//! ONC RPC v2 (RFC 5531) over TCP with record marking: the transport of pnfsd.
//!
//! ```text
//! socket ─▶ record::RecordReader ─▶ program::classify ─┬─ NULL / errors ──────────────▶ writer task
//!   (one reader task per connection)                   ├─ COMPOUND ─▶ dispatch ─▶ spawn_blocking ─▶ writer task
//!                                                      └─ REPLY (msg_type 1) ─▶ conn::TcpBackchannel waiter
//! ```
//! `record`, `msg`, `auth` and `program` are pure codecs and decisions (docs/design.md, house
//! rule 1); `conn` and `tcp` own the sockets; `limits` what connections may use (in-flight
//! requests, queued reply bytes, blocking threads shared in turns, the connection cap, idle
//! timeout); `trim` gives the allocator's free pages back after a burst. The COMPOUND itself
//! is run by a [`Program`] (the NFS server in production, fakes in tests), so the transport
//! is testable without a store.

pub mod auth;
pub mod conn;
pub mod limits;
pub mod msg;
pub mod program;
pub mod record;
pub mod tcp;
pub mod trim;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::xdr::{XdrError, XdrWriter};

pub use auth::Cred;
pub use conn::TcpBackchannel;
pub use tcp::serve;

/// The connection a request came on: its peer and its id, so that CREATE_SESSION and
/// BIND_CONN_TO_SESSION can bind it (and use it for the backchannel).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub id: u64,
    pub peer: SocketAddr,
    /// Sends a CB_COMPOUND on this connection's backchannel (set by the transport).
    pub backchannel: Option<Arc<dyn Backchannel>>,
}

/// Sizes the transport knows: session limits count the RPC headers (RFC 8881 §18.36.3,
/// `ca_maxrequestsize` / `ca_maxresponsesize` "including the RPC headers").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcSizes {
    /// The whole RPC call (the record without its marks).
    pub request_len: usize,
    /// What the RPC reply header adds in front of the COMPOUND4res.
    pub reply_header_len: usize,
}

/// Sends a callback (program given by CREATE_SESSION's `csa_cb_program`) over a connection's
/// backchannel and waits for the reply body (RFC 8881 §2.10.3.1). Implemented by the transport.
///
/// Blocking: call it from a COMPOUND (which runs on a blocking thread) or another non-async
/// thread, never from an async task.
pub trait Backchannel: Send + Sync + std::fmt::Debug {
    /// `args` is the encoded CB_COMPOUND4args; returns the encoded CB_COMPOUND4res.
    fn call(&self, program: u32, procedure: u32, args: XdrWriter) -> std::io::Result<Vec<u8>>;

    /// Like [`Backchannel::call`] with the credential CREATE_SESSION / BACKCHANNEL_CTL gave
    /// in `csa_sec_parms` (RFC 8881 §18.36). The default ignores it and calls with AUTH_NONE.
    fn call_as(
        &self,
        program: u32,
        procedure: u32,
        cred: &CbCred,
        args: XdrWriter,
    ) -> std::io::Result<Vec<u8>> {
        let _ = cred;
        self.call(program, procedure, args)
    }
}

/// The credential of a backchannel call (`callback_sec_parms4` without RPCSEC_GSS).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CbCred {
    #[default]
    None,
    /// AUTH_SYS with these ids and machine name (`Cred::flavor` is ignored).
    Sys(Cred),
}

/// Runs the procedures of program 100003 version 4 that need the NFS layer.
pub trait Program: Send + Sync + 'static {
    /// Runs one COMPOUND on a blocking thread; returns the encoded COMPOUND4res, or an error
    /// when the arguments cannot be decoded at all (→ GARBAGE_ARGS).
    fn compound(
        &self,
        conn: &ConnInfo,
        cred: Cred,
        args: &[u8],
        sizes: RpcSizes,
    ) -> Result<Vec<u8>, XdrError>;

    /// The connection `conn_id` closed after answering everything it started: the state layer
    /// can unbind it from its sessions (RFC 8881 §2.10.3.1; a session whose backchannel was
    /// on it reports SEQ4_STATUS_CB_PATH_DOWN). The default does nothing.
    fn connection_closed(&self, conn_id: u64) {
        let _ = conn_id;
    }

    /// Whether a session has connection `conn_id` bound: such a connection is never closed
    /// for being idle or to make room for another (limits.rs). The default says no.
    fn connection_in_session(&self, conn_id: u64) -> bool {
        let _ = conn_id;
        false
    }
}

/// Transport settings (the `[rpc]` part of the configuration). What each bound protects
/// against, and the figures behind the defaults: docs/robustness.md.
#[derive(Debug, Clone)]
pub struct RpcOptions {
    /// Largest record accepted (record.rs explains the limit and why the connection closes).
    pub max_record: usize,
    pub auth: auth::AuthPolicy,
    /// How long a backchannel call waits for the client's reply.
    pub callback_timeout: Duration,
    /// Requests of one connection being processed at once; the connection stops reading when
    /// it is reached. The default is a session's slot count (a client never has more in
    /// flight on its fore channel).
    pub max_inflight: usize,
    /// Reply bytes one connection may have waiting for its socket: past this it stops
    /// reading until the peer drains its replies (limits.rs `ReplyBudget`).
    pub max_reply_queued: usize,
    /// COMPOUNDs running at once on blocking threads, all connections together, taken in
    /// turns when they are all busy (limits.rs `Shared::blocking`).
    pub max_blocking: usize,
    /// Open connections; at the cap an idle one with no session is closed to make room.
    pub max_connections: usize,
    /// A connection with no session and nothing in flight that receives nothing for this
    /// long is closed.
    pub idle_timeout: Duration,
}

/// 1 MiB: the socket's own buffer (several MiB on loopback and LANs) does the real
/// buffering; this only holds what piles up once the kernel's is full, and a larger reply
/// (a 1 MiB READ) still goes out alone.
pub const DEFAULT_MAX_REPLY_QUEUED: usize = 1 << 20;
/// A Linux client opens one connection per mount (up to 16 with `nconnect`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// A client connects, then creates its session within a few round trips; an idle
/// connection with no session is a client that left or never came.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

impl RpcOptions {
    /// The defaults for a server whose sessions have `session_slots` slots (the NFS layer
    /// says how many): that many requests of one connection may be in flight, and that many
    /// may run at once, each a thread blocked on the log or the volume; beyond that,
    /// connections take turns (on 2 cores more do not add throughput, docs/robustness.md).
    pub fn for_session_slots(session_slots: usize) -> Self {
        RpcOptions {
            max_record: record::DEFAULT_MAX_RECORD,
            auth: auth::AuthPolicy::default(),
            // Well under a lease (90 s): a recall that gets no answer is retried by the state
            // layer in time.
            callback_timeout: Duration::from_secs(15),
            max_inflight: session_slots,
            max_reply_queued: DEFAULT_MAX_REPLY_QUEUED,
            max_blocking: session_slots,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}
