//! COMPOUND processing (RFC 8881 §16.2): the per-request context the operations share, and
//! the dispatcher that runs operations from the table in `ops/mod.rs`.
//!
//! The dispatcher checks everything the table and the session say, once (docs/design.md,
//! house rule 8): minor version, ILLEGAL opcodes, the SEQUENCE rules of RFC 8881 §2.10.6 /
//! §18.46.3, the session's operation and size limits, the current filehandle, and the
//! export's client rule (crate::exports, decided once per COMPOUND in [`Ctx::new`]). Its core,
//! [`run_compound`], is generic over [`OpEnv`] so those rules are tested with fake
//! operations; [`process`] runs it over the real table and hands SEQUENCE'd replies to the
//! reply cache.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::exports::Need;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::opcode::NfsOp;
use crate::nfs4::ops::{self, OpFlags};
use crate::nfs4::state::SessionSlotRef;
use crate::nfs4::status::NfsStat;
use crate::rpc::{ConnInfo, Cred, RpcSizes};
use crate::server::Server;
use crate::xdr::{XdrError, XdrReader, XdrWriter};

/// Minor versions served (RFC 8881 §16.2.3: others → NFS4ERR_MINOR_VERS_MISMATCH).
pub const MINOR_VERSIONS: std::ops::RangeInclusive<u32> = 1..=2;
/// Bound on the COMPOUND tag (knfsd takes 128; a longer one is GARBAGE_ARGS).
pub const MAX_TAG: usize = 1024;

/// The operations and per-COMPOUND state the dispatcher drives.
pub trait OpEnv {
    /// What the table says of `op`; `None` if it is no operation.
    fn meta(&self, op: NfsOp) -> Option<OpFlags>;
    /// Called once the header is decoded, before any operation runs.
    fn begin(&mut self, minor: u32, op_count: usize);
    /// Runs operation `index`: decodes its arguments from `r`, writes its result body.
    fn run(
        &mut self,
        op: NfsOp,
        index: usize,
        r: &mut XdrReader<'_>,
        w: &mut XdrWriter,
    ) -> Result<(), NfsStat>;
    fn has_current_fh(&self) -> bool;
    /// The export rule's refusal of an operation that needs `need`, if any. The default
    /// refuses nothing: it is for fake environments (fuzzing, dispatcher tests); [`Ctx`]
    /// answers from its [`Decision`].
    fn refuse(&self, need: Need) -> Option<NfsStat> {
        let _ = need;
        None
    }
    fn session(&self) -> Option<&SessionSlotRef>;
    fn take_cached_reply(&mut self) -> Option<Vec<u8>>;
    /// Called once for every result the reply carries, with the status the client sees and
    /// the handler's time (`None`: refused before it ran). The default records nothing (fake
    /// environments); [`Ctx`] counts into its server's ledger, `Server::ops`.
    fn record(&self, op: NfsOp, st: NfsStat, ran: Option<Duration>) {
        let _ = (op, st, ran);
    }
}

/// The result of a COMPOUND.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The encoded COMPOUND4res.
    pub reply: Vec<u8>,
    /// The slot SEQUENCE took, if any: the reply goes to its cache.
    pub slot: Option<SessionSlotRef>,
    /// The reply came from the reply cache.
    pub replayed: bool,
}

/// Writes one result without a body in place of whatever op `at` wrote.
fn put_result(w: &mut XdrWriter, at: usize, op: NfsOp, st: NfsStat) {
    w.buf.truncate(at);
    w.u32(op.0);
    w.u32(st.0);
    always_body(w, op);
}

/// SETATTR4res carries `attrsset` whatever the status (RFC 8881 §18.30.2): a SETATTR the
/// dispatcher refuses, or whose body was dropped, answers the empty bitmap.
fn always_body(w: &mut XdrWriter, op: NfsOp) {
    if op == NfsOp::SETATTR {
        w.u32(0);
    }
}

/// Decodes COMPOUND4args from `args` and runs the operations. `Err` when the header itself
/// cannot be decoded (the transport answers GARBAGE_ARGS).
pub fn run_compound<E: OpEnv>(
    env: &mut E,
    args: &[u8],
    sizes: RpcSizes,
) -> Result<Outcome, XdrError> {
    let mut r = XdrReader::new(args);
    let tag = r.opaque(MAX_TAG)?;
    let minor = r.u32()?;
    // Each operation takes at least its 4-byte opcode: a forged count cannot make us loop.
    let count = r.array_len(usize::MAX, 4)?;

    let mut w = XdrWriter::with_capacity(512);
    let status_at = w.reserve_u32();
    w.opaque(tag);
    let count_at = w.reserve_u32();
    let finish = |mut w: XdrWriter,
                  st: NfsStat,
                  n: usize,
                  slot: Option<SessionSlotRef>|
     -> Result<Outcome, XdrError> {
        w.patch_u32(status_at, st.0);
        w.patch_u32(count_at, n as u32);
        Ok(Outcome {
            reply: w.into_inner(),
            slot,
            replayed: false,
        })
    };
    if !MINOR_VERSIONS.contains(&minor) {
        return finish(w, NfsStat::MINOR_VERS_MISMATCH, 0, None);
    }
    // RFC 8881 §16.2.3: the tag is a utf8str_cs (noncharacters refused too: COMP3).
    if !crate::nfs4::helpers::name::is_utf8str(tag) {
        return finish(w, NfsStat::INVAL, 0, None);
    }
    env.begin(minor, count);

    let mut status = NfsStat::OK;
    let mut done = 0;
    for i in 0..count {
        let at = w.len();
        done = i + 1;
        let Ok(op) = r.u32().map(NfsOp) else {
            put_result(&mut w, at, NfsOp::ILLEGAL, NfsStat::BADXDR);
            env.record(NfsOp::ILLEGAL, NfsStat::BADXDR, None);
            status = NfsStat::BADXDR;
            break;
        };
        if let Some(st) = precheck(env, minor, count, i, op, &sizes) {
            tracing::debug!(
                index = i,
                op = op.0,
                status = st.name(),
                "op refused by the dispatcher"
            );
            let shown = if st == NfsStat::OP_ILLEGAL {
                NfsOp::ILLEGAL
            } else {
                op
            };
            put_result(&mut w, at, shown, st);
            env.record(shown, st, None);
            status = st;
            break;
        }
        w.u32(op.0);
        let st_at = w.reserve_u32();
        let body_at = w.len();
        let started = Instant::now();
        let run = catch_unwind(AssertUnwindSafe(|| env.run(op, i, &mut r, &mut w)));
        let ran = started.elapsed();
        // The one place where a handler's result becomes the op's status.
        let st = match run {
            Ok(Ok(())) => NfsStat::OK,
            // An operation whose arguments do not decode has no result body.
            Ok(Err(NfsStat::BADXDR)) => {
                w.buf.truncate(body_at);
                NfsStat::BADXDR
            }
            Ok(Err(st)) => st,
            Err(_) => {
                tracing::error!(
                    op = op.name(),
                    "operation panicked; answering NFS4ERR_SERVERFAULT"
                );
                w.buf.truncate(body_at);
                NfsStat::SERVERFAULT
            }
        };
        if w.len() == body_at {
            always_body(&mut w, op);
        }
        w.patch_u32(st_at, st.0);
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(index = i, op = op.name(), status = st.name(), "op done");
        }
        status = st;
        if i == 0 && op == NfsOp::SEQUENCE && st == NfsStat::OK {
            if let Some(cached) = env.take_cached_reply() {
                env.record(op, st, Some(ran));
                return Ok(Outcome {
                    reply: cached,
                    slot: env.session().cloned(),
                    replayed: true,
                });
            }
        }
        if let Some(too_big) = reply_over_limit(env.session(), sizes.reply_header_len + w.len()) {
            put_result(&mut w, at, op, too_big);
            env.record(op, too_big, Some(ran));
            status = too_big;
            break;
        }
        env.record(op, st, Some(ran));
        if st != NfsStat::OK {
            break;
        }
    }
    let slot = env.session().cloned();
    finish(w, status, done, slot)
}

/// The checks made before operation `i` runs, in this order; `Some(status)` stops the
/// COMPOUND there.
fn precheck<E: OpEnv>(
    env: &E,
    minor: u32,
    count: usize,
    i: usize,
    op: NfsOp,
    sizes: &RpcSizes,
) -> Option<NfsStat> {
    // An opcode that is no operation of this minor version is OP_ILLEGAL before anything
    // else is checked about it (RFC 8881 §15.1.3.4, §16.2.3), the session's limits included.
    let legal = NfsOp::last_of_minor(minor).is_some_and(|last| op <= last);
    let Some(f) = env.meta(op).filter(|f| legal && f.min_minor <= minor) else {
        return Some(NfsStat::OP_ILLEGAL);
    };
    // Session limits, enforced on the operation after SEQUENCE so that SEQUENCE's own result
    // (and the slot it took) stand and the retry of this request gets the same answer.
    if i == 1 {
        if let Some(s) = env.session() {
            if count > s.max_ops as usize {
                return Some(NfsStat::TOO_MANY_OPS);
            }
            if sizes.request_len > s.max_request_size as usize {
                return Some(NfsStat::REQ_TOO_BIG);
            }
        }
    }
    if i == 0 {
        if op != NfsOp::SEQUENCE {
            if !f.sessionless {
                return Some(NfsStat::OP_NOT_IN_SESSION);
            }
            if count != 1 {
                return Some(NfsStat::NOT_ONLY_OP);
            }
        }
    } else if op == NfsOp::SEQUENCE {
        return Some(NfsStat::SEQUENCE_POS);
    } else if f.solo {
        return Some(NfsStat::NOT_ONLY_OP);
    }
    if f.v40_only {
        return Some(NfsStat::NOTSUPP);
    }
    if f.needs_fh && !env.has_current_fh() {
        return Some(NfsStat::NOFILEHANDLE);
    }
    // The export's client rule (ACCESS, WRONGSEC, ROFS, LAYOUTUNAVAILABLE; crate::exports).
    env.refuse(f.access)
}

/// RFC 8881 §2.10.6.4 / §18.46.3: a reply that outgrows the session's limits.
fn reply_over_limit(s: Option<&SessionSlotRef>, len: usize) -> Option<NfsStat> {
    let s = s?;
    if len > s.max_response_size as usize {
        Some(NfsStat::REP_TOO_BIG)
    } else if s.cachethis && len > s.max_response_size_cached as usize {
        Some(NfsStat::REP_TOO_BIG_TO_CACHE)
    } else {
        None
    }
}

impl OpEnv for Ctx<'_> {
    fn meta(&self, op: NfsOp) -> Option<OpFlags> {
        ops::lookup(op).map(|d| d.flags)
    }

    fn begin(&mut self, minor: u32, op_count: usize) {
        self.minor = minor;
        self.op_count = op_count;
    }

    fn run(
        &mut self,
        op: NfsOp,
        index: usize,
        r: &mut XdrReader<'_>,
        w: &mut XdrWriter,
    ) -> Result<(), NfsStat> {
        self.op_index = index;
        match ops::lookup(op) {
            Some(d) => (d.handler)(self, r, w),
            None => Err(NfsStat::OP_ILLEGAL),
        }
    }

    fn has_current_fh(&self) -> bool {
        self.current_fh.is_some()
    }

    fn refuse(&self, need: Need) -> Option<NfsStat> {
        self.access.check(need)
    }

    fn session(&self) -> Option<&SessionSlotRef> {
        self.session.as_ref()
    }

    fn take_cached_reply(&mut self) -> Option<Vec<u8>> {
        self.cached_reply.take()
    }

    fn record(&self, op: NfsOp, st: NfsStat, ran: Option<Duration>) {
        self.srv.ops.record(op, st, ran);
    }
}

/// Runs one COMPOUND against the server. A SEQUENCE'd reply — a replayed one too, which
/// stores the same bytes again and frees the slot whichever way SEQUENCE left it — goes to
/// `slot_done`. A panic anywhere answers NFS4ERR_SERVERFAULT instead of dropping the
/// connection.
pub fn process(
    srv: &Server,
    conn: &ConnInfo,
    cred: Cred,
    args: &[u8],
    sizes: RpcSizes,
) -> Result<Vec<u8>, XdrError> {
    let run = AssertUnwindSafe(|| {
        let mut ctx = Ctx::new(srv, conn, cred);
        let out = run_compound(&mut ctx, args, sizes)?;
        if let Some(slot) = &out.slot {
            srv.state.slot_done(slot, &out.reply);
        }
        Ok(out.reply)
    });
    match catch_unwind(run) {
        Ok(r) => r,
        Err(_) => {
            tracing::error!(
                conn = conn.id,
                "COMPOUND panicked; answering NFS4ERR_SERVERFAULT"
            );
            serverfault_reply(args)
        }
    }
}

/// COMPOUND4res { NFS4ERR_SERVERFAULT, the request's tag, no results }.
pub fn serverfault_reply(args: &[u8]) -> Result<Vec<u8>, XdrError> {
    let tag = XdrReader::new(args).opaque(MAX_TAG)?;
    let mut w = XdrWriter::new();
    w.u32(NfsStat::SERVERFAULT.0);
    w.opaque(tag);
    w.u32(0);
    Ok(w.into_inner())
}

impl crate::rpc::Program for Server {
    fn compound(
        &self,
        conn: &ConnInfo,
        cred: Cred,
        args: &[u8],
        sizes: RpcSizes,
    ) -> Result<Vec<u8>, XdrError> {
        process(self, conn, cred, args, sizes)
    }

    fn connection_closed(&self, id: u64) {
        self.state.conn_closed(id)
    }

    fn connection_in_session(&self, id: u64) -> bool {
        self.state.conn_in_session(id)
    }
}

#[cfg(test)]
#[path = "compound_tests.rs"]
mod tests;
