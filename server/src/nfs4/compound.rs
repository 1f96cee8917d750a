//! COMPOUND processing (RFC 8881 §16.2): the per-request context the operations share, and
//! the dispatcher that runs operations from the table in `ops/mod.rs`.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::nfs4::state::SessionSlotRef;
use crate::nfs4::types::{Fh, Stateid};
use crate::server::Server;

/// AUTH_SYS credentials of the request (AUTH_NONE maps to nobody).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cred {
    pub flavor: u32,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
    pub machine: Vec<u8>,
}

impl Cred {
    pub const NOBODY: u32 = 65534;
}

/// The connection a request came on: its peer and its id, so that CREATE_SESSION and
/// BIND_CONN_TO_SESSION can bind it (and use it for the backchannel).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub id: u64,
    pub peer: SocketAddr,
    /// Sends a CB_COMPOUND on this connection's backchannel (set by the transport).
    pub backchannel: Option<Arc<dyn crate::rpc::Backchannel>>,
}

/// State that lives for one COMPOUND (RFC 8881 §16.2.3).
pub struct Ctx<'a> {
    pub srv: &'a Server,
    pub conn: &'a ConnInfo,
    pub minor: u32,
    pub cred: Cred,
    pub current_fh: Option<Fh>,
    pub saved_fh: Option<Fh>,
    /// RFC 8881 §16.2.3.1.2: the current stateid, set by ops that return a stateid.
    pub current_stateid: Option<Stateid>,
    pub saved_stateid: Option<Stateid>,
    /// Set by SEQUENCE: the session and slot this COMPOUND runs in.
    pub session: Option<SessionSlotRef>,
    /// Index of the operation being run and how many the COMPOUND has.
    pub op_index: usize,
    pub op_count: usize,
    /// Set by SEQUENCE when the request is a retry answered from the reply cache: the
    /// dispatcher sends these bytes (a whole encoded COMPOUND4res) and runs nothing else.
    pub cached_reply: Option<Vec<u8>>,
}
