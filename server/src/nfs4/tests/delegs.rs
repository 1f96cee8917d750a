//! Delegations through the handlers (issue 15): recalls go through the callback queue, the
//! conflicting caller gets DELAY at once, and a recall reaches the holder on its new session.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::fixture::{call, conn, ctx, seq_args, session_args, Fx};
use crate::nfs4::callback::{self, RETRY_EVERY};
use crate::nfs4::compound::Ctx;
use crate::nfs4::ops::{
    create_session, delegreturn, destroy_session, exchange_id, open, reclaim_complete, sequence,
};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, Fh, Stateid};
use crate::rpc::{Backchannel, ConnInfo};
use crate::server::{NfsOptions, Server};
use crate::store::ROOT_INO;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

const OP_CB_RECALL: u32 = 4;
const WANT_READ_DELEG: u32 = 0x100;

/// A backchannel that records every CB_COMPOUND and answers NFS4_OK, or fails the call
/// (as a dead connection does) while `down` is set.
#[derive(Debug, Default)]
pub(super) struct Bc {
    pub calls: Mutex<Vec<Vec<u8>>>,
    pub down: AtomicBool,
}

impl Backchannel for Bc {
    fn call(&self, _: u32, _: u32, args: XdrWriter) -> std::io::Result<Vec<u8>> {
        if self.down.load(Ordering::SeqCst) {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.calls.lock().unwrap().push(args.into_inner());
        Ok(vec![0; 12])
    }
}

impl Bc {
    /// The (sessionid, operation after CB_SEQUENCE) of each call so far.
    fn seen(&self) -> Vec<([u8; 16], u32)> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|b| {
                let mut r = XdrReader::new(b);
                r.opaque(64).unwrap();
                r.u32().unwrap();
                r.u32().unwrap();
                r.u32().unwrap();
                assert_eq!(r.u32().unwrap(), 11, "CB_SEQUENCE first");
                let sid: [u8; 16] = r.array().unwrap();
                for _ in 0..4 {
                    r.u32().unwrap();
                }
                r.u32().unwrap();
                (sid, r.u32().unwrap())
            })
            .collect()
    }
}

pub(super) fn bc_conn(id: u64, bc: &Arc<Bc>) -> ConnInfo {
    conn(id, Some(bc.clone() as Arc<dyn Backchannel>))
}

/// A context for the operations after SEQUENCE.
pub(super) fn cx<'a>(srv: &'a Server, c: &'a ConnInfo) -> Ctx<'a> {
    let mut x = ctx(srv, c, 1);
    x.op_count = 2;
    x
}

/// EXCHANGE_ID as `owner`: clientid and sequence.
pub(super) fn exid(x: &mut Ctx<'_>, owner: &[u8]) -> (u64, u32) {
    let mut w = XdrWriter::new();
    w.opaque_fixed(&[7; 8]);
    w.opaque(owner);
    for _ in 0..3 {
        w.u32(0);
    }
    let (s, body) = call(x, exchange_id::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    (r.u64().unwrap(), r.u32().unwrap())
}

/// CREATE_SESSION (the backchannel on `x`'s connection, if it has one) and a SEQUENCE in
/// it: the sessionid.
pub(super) fn session(x: &mut Ctx<'_>, clientid: u64, seq: u32) -> [u8; 16] {
    let (s, body) = call(x, create_session::run, &session_args(clientid, seq));
    assert_eq!(s, NfsStat::OK);
    let sid: [u8; 16] = XdrReader::new(&body).array().unwrap();
    assert_eq!(
        call(x, sequence::run, &seq_args(sid, 1, 0, false)).0,
        NfsStat::OK
    );
    sid
}

/// A client mounted on `x`'s connection, RECLAIM_COMPLETE done: clientid and session.
pub(super) fn mount(x: &mut Ctx<'_>, owner: &[u8]) -> (u64, [u8; 16]) {
    let (cid, seq) = exid(x, owner);
    let sid = session(x, cid, seq);
    assert_eq!(call(x, reclaim_complete::run, &[0; 4]).0, NfsStat::OK);
    (cid, sid)
}

pub(super) fn root_fh(srv: &Server) -> Fh {
    let a = srv.store.getattr(ROOT_INO).unwrap();
    Fh {
        ino: a.ino,
        generation: a.generation,
    }
}

/// OPEN of `name` in the root (created if `create`) with `share_access` (WANT_* bits
/// included): the status, and on success the open stateid and the delegation type and
/// stateid of the reply.
pub(super) fn open_name(
    x: &mut Ctx<'_>,
    name: &[u8],
    share_access: u32,
    create: bool,
) -> Result<(Stateid, u32, Option<Stateid>), NfsStat> {
    x.current_fh = Some(root_fh(x.srv));
    let mut w = XdrWriter::new();
    w.u32(0);
    w.u32(share_access);
    w.u32(0);
    w.u64(0);
    w.opaque(b"owner");
    if create {
        w.u32(1);
        w.u32(0);
        Bitmap::default().encode(&mut w);
        w.opaque(b"");
    } else {
        w.u32(0);
    }
    w.u32(0);
    w.string(name);
    let (s, body) = call(x, open::run, &w.buf);
    if s != NfsStat::OK {
        return Err(s);
    }
    let mut r = XdrReader::new(&body);
    let sid = Stateid::decode(&mut r).unwrap();
    r.bool().unwrap();
    r.u64().unwrap();
    r.u64().unwrap();
    r.u32().unwrap();
    Bitmap::decode(&mut r).unwrap();
    let dtype = r.u32().unwrap();
    let dsid = (dtype == 1 || dtype == 2).then(|| Stateid::decode(&mut r).unwrap());
    Ok((sid, dtype, dsid))
}

pub(super) fn delegreturn(x: &mut Ctx<'_>, fh: Fh, d: &Stateid) -> NfsStat {
    x.current_fh = Some(fh);
    let mut w = XdrWriter::new();
    d.encode(&mut w);
    call(x, delegreturn::run, &w.buf).0
}

/// A conflicting OPEN answers DELAY without waiting for the holder's backchannel: the
/// CB_RECALL is queued, not sent, and goes once, however often the caller retries; after
/// DELEGRETURN the OPEN goes on.
#[test]
fn a_conflicting_open_gets_delay_and_the_recall_is_queued() {
    let fx = Fx::new(NfsOptions::default());
    let bc = Arc::new(Bc::default());
    let ca = bc_conn(1, &bc);
    let mut a = cx(&fx.srv, &ca);
    mount(&mut a, b"a");
    let (_, dtype, d) = open_name(&mut a, b"f", 1 | WANT_READ_DELEG, true).unwrap();
    assert_eq!(dtype, 1, "read delegation");
    let d = d.unwrap();
    let fh = a.current_fh.unwrap();
    let cb = conn(2, None);
    let mut b = cx(&fx.srv, &cb);
    mount(&mut b, b"b");
    for _ in 0..3 {
        assert_eq!(
            open_name(&mut b, b"f", 2, false).err(),
            Some(NfsStat::DELAY)
        );
    }
    assert!(bc.seen().is_empty(), "the OPEN sent the recall itself");
    assert_eq!(fx.srv.callbacks.len(), 1);
    callback::send_due(&fx.srv, Instant::now());
    assert_eq!(bc.seen().len(), 1);
    assert_eq!(bc.seen()[0].1, OP_CB_RECALL);
    assert!(fx.srv.callbacks.is_empty());
    assert_eq!(delegreturn(&mut a, fh, &d), NfsStat::OK);
    assert!(open_name(&mut b, b"f", 2, false).is_ok());
    let c = fx.srv.state.deleg_counters();
    assert_eq!((c.granted, c.recalled, c.revoked), (1, 1, 0));
}

/// DSESS9003: a CB_RECALL that got no answer on the holder's session is sent again on the
/// session the holder creates after destroying that one.
#[test]
fn an_unanswered_recall_is_sent_again_on_the_new_session() {
    let fx = Fx::new(NfsOptions::default());
    let old_bc = Arc::new(Bc::default());
    let ca = bc_conn(1, &old_bc);
    let mut a = cx(&fx.srv, &ca);
    let (cid, s1) = mount(&mut a, b"a");
    let (_, _, d) = open_name(&mut a, b"f", 1 | WANT_READ_DELEG, true).unwrap();
    assert!(d.is_some());
    let cb = conn(2, None);
    let mut b = cx(&fx.srv, &cb);
    mount(&mut b, b"b");
    old_bc.down.store(true, Ordering::SeqCst);
    assert_eq!(
        open_name(&mut b, b"f", 2, false).err(),
        Some(NfsStat::DELAY)
    );
    let t0 = Instant::now();
    callback::send_due(&fx.srv, t0);
    assert!(old_bc.seen().is_empty());
    assert_eq!(
        fx.srv.callbacks.len(),
        1,
        "queued again after the failed call"
    );
    // The holder replaces its session, with its backchannel on a new connection (its
    // COMPOUNDs there are done: the dispatcher would have freed the slot).
    fx.srv.state.slot_done(a.session.as_ref().unwrap(), &[]);
    let mut w = XdrWriter::new();
    w.opaque_fixed(&s1);
    let mut lone = ctx(&fx.srv, &ca, 1);
    assert_eq!(call(&mut lone, destroy_session::run, &w.buf).0, NfsStat::OK);
    let new_bc = Arc::new(Bc::default());
    let cn = bc_conn(3, &new_bc);
    let mut a2 = cx(&fx.srv, &cn);
    let (_, seq) = exid(&mut a2, b"a");
    let s2 = session(&mut a2, cid, seq);
    callback::send_due(&fx.srv, t0 + RETRY_EVERY);
    assert_eq!(new_bc.seen(), vec![(s2, OP_CB_RECALL)]);
    assert!(fx.srv.callbacks.is_empty());
}
