//! Delegations through the handlers: recalls go through the callback queue, the
//! conflicting caller gets DELAY at once, and a recall reaches the holder on its new session.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::fixture::{call, conn, ctx, seq_args, session_args, Fx};
use crate::nfs4::callback::{self, RETRY_EVERY};
use crate::nfs4::ctx::Ctx;
use crate::nfs4::ops::{
    backchannel_ctl, bind_conn_to_session, create_session, delegreturn, destroy_session,
    exchange_id, link, open, reclaim_complete, remove, rename, sequence, setattr,
};
use crate::nfs4::state::ClientLimits;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, Fh, Stateid};
use crate::rpc::{Backchannel, ConnInfo};
use crate::server::{NfsOptions, Server};
use crate::store::ROOT_INO;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

mod getattr_rate;
mod layouts;
mod write;

const OP_CB_RECALL: u32 = 4;
const WANT_READ_DELEG: u32 = 0x100;

/// A backchannel that records every CB_COMPOUND and answers NFS4_OK, or fails the call
/// (as a dead connection does) while `down` is set.
#[derive(Debug, Default)]
pub(super) struct Bc {
    pub calls: Mutex<Vec<Vec<u8>>>,
    /// (program, procedure) of every call answered, CB_NULLs included.
    pub procs: Mutex<Vec<(u32, u32)>>,
    pub down: AtomicBool,
    /// The (change, size) a CB_GETATTR is answered with; unset, CB_GETATTR gets
    /// NFS4ERR_BADHANDLE (the holder knows no such file).
    pub getattr: Mutex<Option<(u64, u64)>>,
}

impl Backchannel for Bc {
    fn call(&self, program: u32, procedure: u32, args: XdrWriter) -> std::io::Result<Vec<u8>> {
        if self.down.load(Ordering::SeqCst) {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.procs.lock().unwrap().push((program, procedure));
        if procedure == callback::CB_NULL {
            return Ok(Vec::new());
        }
        let args = args.into_inner();
        let op = op_after_sequence(&args);
        self.calls.lock().unwrap().push(args);
        if op == OP_CB_GETATTR {
            return Ok(cb_getattr_reply(*self.getattr.lock().unwrap()));
        }
        Ok(vec![0; 12])
    }
}

const OP_CB_GETATTR: u32 = 3;

/// The sessionid and the operation after CB_SEQUENCE of a CB_COMPOUND4args.
fn cb_args(b: &[u8]) -> ([u8; 16], u32) {
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
}

fn op_after_sequence(b: &[u8]) -> u32 {
    cb_args(b).1
}

/// CB_COMPOUND4res { CB_SEQUENCE OK, CB_GETATTR } with `attrs` (change, size), or
/// CB_GETATTR BADHANDLE.
fn cb_getattr_reply(attrs: Option<(u64, u64)>) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.u32(if attrs.is_some() { 0 } else { 10001 });
    w.opaque(b"");
    w.u32(2);
    w.u32(11);
    w.u32(0);
    w.opaque_fixed(&[0; 16]);
    for _ in 0..4 {
        w.u32(0);
    }
    w.u32(OP_CB_GETATTR);
    match attrs {
        Some((change, size)) => {
            w.u32(0);
            let mut b = Bitmap::default();
            b.set(3);
            b.set(4);
            b.encode(&mut w);
            w.u32(16);
            w.u64(change);
            w.u64(size);
        }
        None => w.u32(10001),
    }
    w.into_inner()
}

impl Bc {
    /// The (sessionid, operation after CB_SEQUENCE) of each call so far.
    fn seen(&self) -> Vec<([u8; 16], u32)> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|b| cb_args(b.as_slice()))
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

/// The server these suites test: read delegations for OPENs that ask for none
/// (`read_delegations`), whatever the default.
pub(super) fn read_delegations() -> NfsOptions {
    let mut o = NfsOptions::default();
    o.client_limits.read_delegations = true;
    o
}

/// Read and write delegations the server chooses, whatever the defaults.
pub(super) fn write_delegations() -> NfsOptions {
    let mut o = read_delegations();
    o.client_limits.write_delegations = true;
    o
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
    open_why(x, name, share_access, create).map(|(s, t, d, _)| (s, t, d))
}

/// `open_name`, with the `why_no_delegation4` of an OPEN_DELEGATE_NONE_EXT as well.
pub(super) fn open_why(
    x: &mut Ctx<'_>,
    name: &[u8],
    share_access: u32,
    create: bool,
) -> Result<(Stateid, u32, Option<Stateid>, Option<u32>), NfsStat> {
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
    let why = (dtype == 3).then(|| r.u32().unwrap());
    Ok((sid, dtype, dsid, why))
}

pub(super) fn delegreturn(x: &mut Ctx<'_>, fh: Fh, d: &Stateid) -> NfsStat {
    x.current_fh = Some(fh);
    let mut w = XdrWriter::new();
    d.encode(&mut w);
    call(x, delegreturn::run, &w.buf).0
}

/// What these suites start from: a server with the given options, client a's connection 1
/// with a recording backchannel `bc`, and client b's connection 2 without one. It derefs to
/// the `Fx` (`srv`, `dev`).
pub(super) struct Two {
    pub fx: Fx,
    pub bc: Arc<Bc>,
    pub ca: ConnInfo,
    pub cb: ConnInfo,
}

impl Two {
    pub(super) fn new(opts: NfsOptions) -> Two {
        let bc = Arc::new(Bc::default());
        Two {
            fx: Fx::new(opts),
            ca: bc_conn(1, &bc),
            bc,
            cb: conn(2, None),
        }
    }

    /// Client a mounted on connection 1: its context, clientid and session.
    pub(super) fn mount_a(&self) -> (Ctx<'_>, u64, [u8; 16]) {
        let mut a = cx(&self.srv, &self.ca);
        let (cid, sid) = mount(&mut a, b"a");
        (a, cid, sid)
    }

    /// Client b mounted on connection 2: its context, clientid and session.
    pub(super) fn mount_b(&self) -> (Ctx<'_>, u64, [u8; 16]) {
        let mut b = cx(&self.srv, &self.cb);
        let (cid, sid) = mount(&mut b, b"b");
        (b, cid, sid)
    }
}

impl Deref for Two {
    type Target = Fx;
    fn deref(&self) -> &Fx {
        &self.fx
    }
}

/// OPEN of `name` as `open_name` does, which must get a delegation of type `dtype`: the
/// open stateid, the file's handle and the delegation stateid.
pub(super) fn open_deleg(
    x: &mut Ctx<'_>,
    name: &[u8],
    share_access: u32,
    create: bool,
    dtype: u32,
) -> (Stateid, Fh, Stateid) {
    let (sid, got, d) = open_name(x, name, share_access, create).unwrap();
    assert_eq!(got, dtype, "delegation type");
    (sid, x.current_fh.unwrap(), d.unwrap())
}

/// A conflicting OPEN answers DELAY without waiting for the holder's backchannel: the
/// CB_RECALL is queued, not sent, and goes once, however often the caller retries; after
/// DELEGRETURN the OPEN goes on.
#[test]
fn a_conflicting_open_gets_delay_and_the_recall_is_queued() {
    let fx = Two::new(read_delegations());
    let bc = &fx.bc;
    let (mut a, _, _) = fx.mount_a();
    let (_, fh, d) = open_deleg(&mut a, b"f", 1 | WANT_READ_DELEG, true, OPEN_DELEGATE_READ);
    let (mut b, _, _) = fx.mount_b();
    for _ in 0..3 {
        assert_eq!(
            open_name(&mut b, b"f", 2, false).err(),
            Some(NfsStat::DELAY)
        );
    }
    assert!(bc.seen().is_empty(), "the OPEN sent the recall itself");
    assert_eq!(fx.srv.callbacks.len(), 1);
    callback::send_due(&fx.srv.backchannel(), Instant::now());
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
    let fx = Two::new(read_delegations());
    let old_bc = &fx.bc;
    let (mut a, cid, s1) = fx.mount_a();
    open_deleg(&mut a, b"f", 1 | WANT_READ_DELEG, true, OPEN_DELEGATE_READ);
    let (mut b, _, _) = fx.mount_b();
    old_bc.down.store(true, Ordering::SeqCst);
    assert_eq!(
        open_name(&mut b, b"f", 2, false).err(),
        Some(NfsStat::DELAY)
    );
    let t0 = Instant::now();
    callback::send_due(&fx.srv.backchannel(), t0);
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
    let mut lone = ctx(&fx.srv, &fx.ca, 1);
    assert_eq!(call(&mut lone, destroy_session::run, &w.buf).0, NfsStat::OK);
    let new_bc = Arc::new(Bc::default());
    let cn = bc_conn(3, &new_bc);
    let mut a2 = cx(&fx.srv, &cn);
    let (_, seq) = exid(&mut a2, b"a");
    let s2 = session(&mut a2, cid, seq);
    callback::send_due(&fx.srv.backchannel(), t0 + RETRY_EVERY);
    assert_eq!(new_bc.seen(), vec![(s2, OP_CB_RECALL)]);
    assert!(fx.srv.callbacks.is_empty());
}

const OPEN_DELEGATE_READ: u32 = 1;
const OPEN_DELEGATE_NONE_EXT: u32 = 3;
const WND4_NOT_WANTED: u32 = 0;
const WND4_CONTENTION: u32 = 1;
const WND4_RESOURCE: u32 = 2;
const WND4_CANCELLED: u32 = 7;

/// CSESS20/21: CREATE_SESSION with a backchannel queues a CB_NULL probe, sent by the
/// sender (not the COMPOUND) with the session's callback program. Once the probe fails the
/// client gets no delegation, a plain read-only OPEN then gets OPEN_DELEGATE_NONE and one
/// that asked WND4_RESOURCE; BIND_CONN_TO_SESSION probes again, and the answer brings
/// delegations back.
#[test]
fn a_failed_probe_stops_delegations_until_a_bound_connection_answers() {
    let fx = Two::new(read_delegations());
    let bc = &fx.bc;
    let (mut a, _, sid) = fx.mount_a();
    assert!(
        bc.procs.lock().unwrap().is_empty(),
        "probed inside the COMPOUND"
    );
    assert_eq!(fx.srv.callbacks.probes_queued(), 1);
    bc.down.store(true, Ordering::SeqCst);
    callback::send_due_probes(&fx.srv.backchannel(), Instant::now());
    let (_, dtype, _) = open_name(&mut a, b"f", 1, true).unwrap();
    assert_eq!(dtype, 0, "a delegation over a dead backchannel");
    let (_, dtype, _, why) = open_why(&mut a, b"f", 1 | WANT_READ_DELEG, false).unwrap();
    assert_eq!((dtype, why), (OPEN_DELEGATE_NONE_EXT, Some(WND4_RESOURCE)));
    // The client answers CB_PATH_DOWN_SESSION with BIND_CONN_TO_SESSION.
    bc.down.store(false, Ordering::SeqCst);
    let mut w = XdrWriter::new();
    w.opaque_fixed(&sid);
    w.u32(3);
    w.bool(false);
    assert_eq!(
        call(&mut a, bind_conn_to_session::run, &w.buf).0,
        NfsStat::OK
    );
    callback::send_due_probes(&fx.srv.backchannel(), Instant::now());
    assert_eq!(
        *bc.procs.lock().unwrap(),
        vec![(0x4000_0000, callback::CB_NULL)]
    );
    let (_, dtype, _) = open_name(&mut a, b"f", 1, false).unwrap();
    assert_eq!(dtype, OPEN_DELEGATE_READ);
    // BACKCHANNEL_CTL probes the new program.
    let mut w = XdrWriter::new();
    w.u32(0x4000_0007);
    w.u32(1);
    w.u32(0);
    assert_eq!(call(&mut a, backchannel_ctl::run, &w.buf).0, NfsStat::OK);
    callback::send_due_probes(&fx.srv.backchannel(), Instant::now());
    assert_eq!(
        bc.procs.lock().unwrap().last(),
        Some(&(0x4000_0007, callback::CB_NULL))
    );
}

/// Read delegations by default, and what each WANT_* flag gets (RFC 8881 §18.16.3).
#[test]
fn plain_read_opens_get_read_delegations_and_the_want_flags_are_honoured() {
    let fx = Two::new(write_delegations());
    let (mut a, _, _) = fx.mount_a();
    open_deleg(&mut a, b"r", 1, true, OPEN_DELEGATE_READ);
    // A write open by a client alone on the file gets a write delegation (CB_GETATTR
    // answers for it, tests/delegs/write.rs); WANT_NO_DELEG and WANT_CANCEL say so.
    assert_eq!(open_name(&mut a, b"w", 3, true).unwrap().1, 2);
    let why = |a: &mut Ctx<'_>, name: &[u8], access: u32| {
        let (_, t, _, why) = open_why(a, name, access, true).unwrap();
        (t, why)
    };
    let ext = |w| (OPEN_DELEGATE_NONE_EXT, Some(w));
    assert_eq!(why(&mut a, b"n", 1 | 0x400), ext(WND4_NOT_WANTED));
    assert_eq!(why(&mut a, b"n", 1 | 0x500), ext(WND4_CANCELLED));
    assert_eq!(why(&mut a, b"n", 1 | 0x500 | 0x1_0000), ext(WND4_CANCELLED));
    // Another client writing the file: contention, reported only to who asked.
    let (mut b, _, _) = fx.mount_b();
    open_name(&mut b, b"c", 2, true).unwrap();
    assert_eq!(why(&mut a, b"c", 1), (0, None));
    assert_eq!(why(&mut a, b"c", 1 | WANT_READ_DELEG), ext(WND4_CONTENTION));
    // WANT_WRITE_DELEG on a file to itself.
    assert_eq!(open_name(&mut a, b"x", 3 | 0x200, true).unwrap().1, 2);
    // `read_delegations = false`: a plain read open gets none, one that asks for a read
    // delegation still does.
    fx.srv.state.set_limits(ClientLimits {
        read_delegations: false,
        ..Default::default()
    });
    assert_eq!(why(&mut a, b"q", 1), (0, None));
    assert_eq!(why(&mut a, b"q", 1 | WANT_READ_DELEG).0, OPEN_DELEGATE_READ);
    // `write_delegations = false`: a plain write open gets none, one that asks does.
    fx.srv.state.set_limits(ClientLimits {
        write_delegations: false,
        ..Default::default()
    });
    assert_eq!(why(&mut a, b"v", 3), (0, None));
    assert_eq!(why(&mut a, b"v2", 3 | 0x200).0, 2);
    // `delegations = false`: none, and WND4_RESOURCE to who asked.
    fx.srv.state.set_limits(ClientLimits {
        delegations: false,
        ..Default::default()
    });
    assert_eq!(why(&mut a, b"y", 1), (0, None));
    assert_eq!(why(&mut a, b"y", 1 | WANT_READ_DELEG), ext(WND4_RESOURCE));
    let c = fx.srv.state.deleg_counters();
    assert_eq!(c.granted, 5);
}

/// One conflicting access by client b of the file `f` that client a holds a read
/// delegation of: it answers DELAY and queues one CB_RECALL (a retry queues no other),
/// and goes on once the delegation is returned. `op` runs the access with the file's and
/// the root's filehandles.
fn recall_trigger(op: fn(&mut Ctx<'_>, Fh, Fh) -> NfsStat) {
    let fx = Two::new(read_delegations());
    let (mut a, _, _) = fx.mount_a();
    let (_, fh, d) = open_deleg(&mut a, b"f", 1, true, OPEN_DELEGATE_READ);
    let (mut b, _, _) = fx.mount_b();
    open_name(&mut b, b"g", 3, true).unwrap();
    let root = root_fh(&fx.srv);
    // The holder's own access recalls nothing.
    assert_eq!(fx.srv.callbacks.len(), 0);
    for _ in 0..2 {
        assert_eq!(op(&mut b, fh, root), NfsStat::DELAY);
    }
    assert_eq!(fx.srv.callbacks.len(), 1);
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    assert_eq!(
        fx.bc.seen().iter().filter(|s| s.1 == OP_CB_RECALL).count(),
        1
    );
    assert_eq!(delegreturn(&mut a, fh, &d), NfsStat::OK);
    assert_eq!(op(&mut b, fh, root), NfsStat::OK);
    assert_eq!(fx.srv.state.deleg_counters().recalled, 1);
}

/// SETATTR of `attr` (number, its XDR value) on `fh` with the anonymous stateid.
fn setattr(x: &mut Ctx<'_>, fh: Fh, attr: u32, val: &[u8]) -> NfsStat {
    x.current_fh = Some(fh);
    let mut w = XdrWriter::new();
    Stateid {
        seqid: 0,
        other: [0; 12],
    }
    .encode(&mut w);
    let mut m = Bitmap::default();
    m.set(attr);
    m.encode(&mut w);
    w.opaque(val);
    call(x, setattr::run, &w.buf).0
}

#[test]
fn an_open_for_write_recalls() {
    recall_trigger(|b, _, _| open_name(b, b"f", 2, false).err().unwrap_or(NfsStat::OK));
}

#[test]
fn a_setattr_of_size_recalls() {
    recall_trigger(|b, fh, _| setattr(b, fh, 4, &5u64.to_be_bytes()));
}

#[test]
fn a_setattr_of_mode_recalls() {
    recall_trigger(|b, fh, _| setattr(b, fh, 33, &0o600u32.to_be_bytes()));
}

#[test]
fn a_remove_recalls() {
    recall_trigger(|b, _, root| {
        b.current_fh = Some(root);
        let mut w = XdrWriter::new();
        w.string(b"f");
        call(b, remove::run, &w.buf).0
    });
}

/// RENAME `old` to `new` in the root.
fn rename_in_root(b: &mut Ctx<'_>, root: Fh, old: &[u8], new: &[u8]) -> NfsStat {
    b.current_fh = Some(root);
    b.saved_fh = Some(root);
    let mut w = XdrWriter::new();
    w.string(old);
    w.string(new);
    call(b, rename::run, &w.buf).0
}

#[test]
fn a_rename_of_the_file_recalls() {
    recall_trigger(|b, _, root| rename_in_root(b, root, b"f", b"h"));
}

#[test]
fn a_rename_over_the_file_recalls() {
    recall_trigger(|b, _, root| rename_in_root(b, root, b"g", b"f"));
}

#[test]
fn a_link_recalls() {
    recall_trigger(|b, fh, root| {
        b.saved_fh = Some(fh);
        b.current_fh = Some(root);
        let mut w = XdrWriter::new();
        w.string(b"l");
        call(b, link::run, &w.buf).0
    });
}

/// OPEN CLAIM_PREVIOUS of the file behind the current filehandle `fh` for read, reclaiming
/// a delegation of type `deleg`: the delegation type, its stateid and its `recall` flag.
fn open_previous(
    x: &mut Ctx<'_>,
    fh: Fh,
    deleg: u32,
) -> Result<(u32, Option<Stateid>, bool), NfsStat> {
    x.current_fh = Some(fh);
    let mut w = XdrWriter::new();
    w.u32(0);
    w.u32(1);
    w.u32(0);
    w.u64(0);
    w.opaque(b"owner");
    w.u32(0);
    w.u32(1);
    w.u32(deleg);
    let (s, body) = call(x, open::run, &w.buf);
    if s != NfsStat::OK {
        return Err(s);
    }
    let mut r = XdrReader::new(&body);
    Stateid::decode(&mut r).unwrap();
    r.bool().unwrap();
    r.u64().unwrap();
    r.u64().unwrap();
    r.u32().unwrap();
    Bitmap::decode(&mut r).unwrap();
    let dtype = r.u32().unwrap();
    if dtype != 1 && dtype != 2 {
        return Ok((dtype, None, false));
    }
    let sid = Stateid::decode(&mut r).unwrap();
    Ok((dtype, Some(sid), r.bool().unwrap()))
}

/// A client that held a read delegation when the server crashed reclaims it in grace with
/// OPEN CLAIM_PREVIOUS (delegate_type READ, RFC 8881 §10.2.1): it is granted back, not
/// refused nor dropped, and it is a delegation of the new instance (DELEGRETURN takes it).
/// Once the client's grace is over (its RECLAIM_COMPLETE), no reclaim.
#[test]
fn a_read_delegation_is_reclaimed_after_a_crash() {
    let fx = Two::new(read_delegations());
    let fh = {
        let (mut a, _, _) = fx.mount_a();
        open_deleg(&mut a, b"f", 1, true, OPEN_DELEGATE_READ).1
    };
    // The crash: what the volume has durably, a new instance over it.
    let store = Arc::new(
        crate::store::Store::open_dev(
            Arc::new(fx.dev.crash()),
            crate::store::StoreOptions::default(),
        )
        .unwrap(),
    );
    let srv = super::fixture::server(store, read_delegations(), 2);
    assert!(srv.state.in_grace());
    let mut a = cx(&srv, &fx.ca);
    let (cid, seq) = exid(&mut a, b"a");
    session(&mut a, cid, seq);
    let (dtype, d, recall) = open_previous(&mut a, fh, 1).unwrap();
    assert_eq!(
        (dtype, recall),
        (1, false),
        "the read delegation given back"
    );
    let d = d.unwrap();
    assert_eq!(srv.state.deleg_counters().granted, 1);
    assert_eq!(call(&mut a, reclaim_complete::run, &[0; 4]).0, NfsStat::OK);
    assert_eq!(open_previous(&mut a, fh, 1), Err(NfsStat::NO_GRACE));
    assert_eq!(delegreturn(&mut a, fh, &d), NfsStat::OK);
}

/// LAYOUTGET and OPEN break delegations through the one `break_conflicts`, in two modes:
/// for a LAYOUTGET READ another client's read delegation is no conflict; for an RW one it
/// is recalled — LAYOUTTRYLATER, not DELAY, and one CB_RECALL however often it is asked —
/// and an OPEN for write meanwhile gets DELAY. After DELEGRETURN the RW layout may go on.
#[test]
fn a_layout_breaks_a_delegation_with_layouttrylater_an_open_with_delay() {
    use crate::nfs4::delegs::{break_conflicts, Breaker};
    let fx = Two::new(read_delegations());
    let (mut a, _, _) = fx.mount_a();
    let (_, fh, d) = open_deleg(&mut a, b"f", 1, true, OPEN_DELEGATE_READ);
    let (_, bcid, _) = fx.mount_b();
    let layout = |rw| break_conflicts(&fx.srv.delegs_env(), bcid, fh, Breaker::Layout { rw });
    assert_eq!(layout(false), Ok(()));
    assert!(fx.srv.callbacks.is_empty());
    for _ in 0..2 {
        assert_eq!(layout(true), Err(NfsStat::LAYOUTTRYLATER));
    }
    assert_eq!(
        break_conflicts(&fx.srv.delegs_env(), bcid, fh, Breaker::Access(2)),
        Err(NfsStat::DELAY)
    );
    assert_eq!(fx.srv.callbacks.len(), 1);
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    assert_eq!(
        fx.bc.seen().iter().filter(|s| s.1 == OP_CB_RECALL).count(),
        1
    );
    assert_eq!(delegreturn(&mut a, fh, &d), NfsStat::OK);
    assert_eq!(layout(true), Ok(()));
    assert_eq!(fx.srv.state.deleg_counters().recalled, 1);
}
