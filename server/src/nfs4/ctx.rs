//! The per-COMPOUND context the operations share (RFC 8881 §16.2.3): who asks, over which
//! connection, what the export allows, the current and saved filehandles and stateids, and the
//! session slot SEQUENCE took. The dispatcher (`compound.rs`) builds one per request.

use crate::exports::Decision;
use crate::nfs4::state::SessionSlotRef;
use crate::nfs4::types::{Fh, Stateid};
use crate::rpc::{ConnInfo, Cred};
use crate::server::Server;

/// State that lives for one COMPOUND (RFC 8881 §16.2.3).
pub struct Ctx<'a> {
    pub srv: &'a Server,
    pub conn: &'a ConnInfo,
    pub minor: u32,
    /// The credential the operations act with: the request's, squashed by the export rule.
    pub cred: Cred,
    /// The request's credential as sent (the principal of client records, RFC 8881 §2.4).
    pub rpc_cred: Cred,
    /// What the export's client rule allows this request (the dispatcher enforces it).
    pub access: Decision,
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

impl<'a> Ctx<'a> {
    /// The context of a request from `conn` with `cred`: the exports in force decide, once,
    /// what it may do and as whom.
    pub fn new(srv: &'a Server, conn: &'a ConnInfo, cred: Cred) -> Self {
        let access = srv.exports.current().decide(conn.peer.ip(), &cred);
        Ctx {
            srv,
            conn,
            minor: 0,
            cred: access.cred.clone(),
            rpc_cred: cred,
            access,
            current_fh: None,
            saved_fh: None,
            current_stateid: None,
            saved_stateid: None,
            session: None,
            op_index: 0,
            op_count: 0,
            cached_reply: None,
        }
    }
}

/// Room the rest of a COMPOUND reply takes besides one large result (RPC and COMPOUND
/// headers, SEQUENCE, PUTFH): READ and READDIR fit their result in the session's
/// `ca_maxresponsesize` less this.
pub const REPLY_HEADROOM: usize = 512;

impl Ctx<'_> {
    /// The most bytes one result may take in this COMPOUND's reply (no bound outside a
    /// session).
    pub fn result_room(&self) -> usize {
        self.session.as_ref().map_or(usize::MAX, |s| {
            (s.max_response_size as usize).saturating_sub(REPLY_HEADROOM)
        })
    }
}
