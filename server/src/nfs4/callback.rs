//! The backchannel (RFC 8881 §20): CB_COMPOUND encoding, and the queue of callbacks that
//! services send asynchronously (`CbQueue`: layout and delegation recalls).
//!
//! ```text
//! CB_COMPOUND4args (procedure 1 of the client's callback program):
//!   tag opaque<> | minorversion u32 (the session's) | callback_ident u32 = 0 | op count u32 = 2
//!   CB_SEQUENCE (11):     sessionid[16] | sequenceid u32 | slotid u32 | highest_slotid u32
//!                         | cachethis bool | referring_call_lists count u32 = 0
//!   CB_LAYOUTRECALL (5):  layout_type u32 (the holder's) | iomode u32 (ANY) | changed bool
//!                         | recall type u32 = FILE (1) | fh opaque<> | offset u64 = 0
//!                         | length u64 = all ones | stateid4
//!   CB_RECALL (4):        stateid4 | truncate bool = false | fh opaque<>
//!   CB_GETATTR (3):       fh opaque<> | bitmap4 = { change, size }
//!   CB_OFFLOAD (15):      coa_fh opaque<> | coa_stateid stateid4 | coa_status u32, then
//!                         OK: write_response4 { wr_callback_id<1> count u32 = 0 | wr_count u64
//!                         | wr_committed u32 | wr_writeverf [8] }, else coa_bytes_copied u64
//!                         (RFC 7862 §16.1)
//! CB_COMPOUND4res: status u32 | tag opaque<> | results …  (the status is read; for a
//!   CB_GETATTR also its fattr4: `decode_getattr`)
//! ```
//! Both recalls go through `CbQueue`: the COMPOUND that causes one answers at once (DELAY)
//! and the sender does the round trip. What a recall means and when it has gone unanswered
//! too long belongs to its service: delegations in nfs4/delegs/state.rs and
//! nfs4/delegs/mod.rs, layouts in nfs4/layouts/recall.rs, async copies in
//! nfs4/copy/offload.rs.
//!
//! This module knows no service: a queued [`Callback`] carries only its `CbKind`, and the
//! owner of the queue (server.rs, the composition root) implements [`CbHooks`] by handing
//! each kind to the service that queued it. The senders take a [`Backchannel`]: the queue,
//! the state (the sessions' callback slots) and those hooks.

use std::time::{Duration, Instant};

use layout::block::{IoMode, LayoutType};

use crate::nfs4::attr;
use crate::nfs4::state::{CbSlot, StateManager};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::stable_to_wire;
use crate::nfs4::types::{Bitmap, Fh, Stateid};
use crate::store::Stable;
use crate::xdr::{Xdr, XdrError, XdrReader, XdrWriter};

/// `CB_COMPOUND` is procedure 1 of the callback program (RFC 8881 §20.1).
pub const CB_COMPOUND: u32 = 1;
/// `CB_NULL`, procedure 0: the probe of a backchannel (RFC 8881 §18.36.3).
pub const CB_NULL: u32 = 0;
const OP_CB_GETATTR: u32 = 3;
const OP_CB_RECALL: u32 = 4;
const OP_CB_LAYOUTRECALL: u32 = 5;
const OP_CB_SEQUENCE: u32 = 11;
const OP_CB_OFFLOAD: u32 = 15;
const LAYOUTRECALL4_FILE: u32 = 1;

/// CB_COMPOUND4args of one operation after its CB_SEQUENCE, as every callback we send is
/// (the layout above): the header, CB_SEQUENCE on `slot`, then opcode `op` and the
/// arguments `args` writes.
fn single_op(slot: &CbSlot, op: u32, args: impl FnOnce(&mut XdrWriter)) -> XdrWriter {
    let mut w = XdrWriter::with_capacity(160);
    w.opaque(b"");
    w.u32(slot.minor);
    w.u32(0);
    w.u32(2);
    w.u32(OP_CB_SEQUENCE);
    w.opaque_fixed(&slot.sessionid);
    w.u32(slot.seqid);
    w.u32(slot.slot);
    w.u32(slot.slot);
    w.bool(false);
    w.u32(0);
    w.u32(op);
    args(&mut w);
    w
}

/// Encodes CB_COMPOUND { CB_SEQUENCE, CB_RECALL(stateid, no truncate, fh) }.
pub fn encode_recall(slot: &CbSlot, fh: &Fh, stateid: &Stateid) -> XdrWriter {
    single_op(slot, OP_CB_RECALL, |w| {
        stateid.encode(w);
        w.bool(false);
        w.opaque(&fh.to_bytes());
    })
}

/// Encodes CB_COMPOUND { CB_SEQUENCE, CB_LAYOUTRECALL(FILE, whole file) }.
pub fn encode_layoutrecall(
    slot: &CbSlot,
    fh: &Fh,
    stateid: &Stateid,
    ltype: LayoutType,
) -> XdrWriter {
    single_op(slot, OP_CB_LAYOUTRECALL, |w| {
        w.u32(ltype.0);
        w.u32(IoMode::ANY.0);
        w.bool(true);
        w.u32(LAYOUTRECALL4_FILE);
        w.opaque(&fh.to_bytes());
        w.u64(0);
        w.u64(u64::MAX);
        stateid.encode(w);
    })
}

/// Encodes CB_COMPOUND { CB_SEQUENCE, CB_GETATTR(fh, {change, size}) } (RFC 8881 §20.1).
pub fn encode_getattr(slot: &CbSlot, fh: &Fh) -> XdrWriter {
    single_op(slot, OP_CB_GETATTR, |w| {
        w.opaque(&fh.to_bytes());
        let mut b = Bitmap::default();
        b.set(attr::num::CHANGE);
        b.set(attr::num::SIZE);
        b.encode(w);
    })
}

/// How an async copy ended, as CB_OFFLOAD tells it (`offload_info4`, RFC 7862 §16.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffloadOutcome {
    /// NFS4_OK: `coa_resok4` (a `write_response4` without callback id).
    Done {
        count: u64,
        committed: Stable,
        verifier: [u8; 8],
    },
    /// The error that stopped it, and `coa_bytes_copied`.
    Failed { status: NfsStat, copied: u64 },
}

/// Encodes CB_COMPOUND { CB_SEQUENCE, CB_OFFLOAD(fh, copy stateid, outcome) }.
pub fn encode_offload(
    slot: &CbSlot,
    fh: &Fh,
    stateid: &Stateid,
    outcome: &OffloadOutcome,
) -> XdrWriter {
    single_op(slot, OP_CB_OFFLOAD, |w| {
        w.opaque(&fh.to_bytes());
        stateid.encode(w);
        match outcome {
            OffloadOutcome::Done {
                count,
                committed,
                verifier,
            } => {
                w.u32(NfsStat::OK.0);
                w.u32(0);
                w.u64(*count);
                w.u32(stable_to_wire(*committed));
                w.opaque_fixed(verifier);
            }
            OffloadOutcome::Failed { status, copied } => {
                w.u32(status.0);
                w.u64(*copied);
            }
        }
    })
}

/// The holder's view of a file it writes under a delegation: CB_GETATTR's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CbAttrs {
    pub change: u64,
    pub size: u64,
}

/// The change and size of a CB_COMPOUND4res { CB_SEQUENCE, CB_GETATTR }. Anything else —
/// an error status, another operation, a fattr4 without both values or with an attribute
/// before them that was not asked for — is an error: the caller recalls the delegation.
/// Attributes after size (the delegated timestamps of RFC 9754, which pynfs sends back
/// whatever was asked) are ignored.
pub fn decode_getattr(reply: &[u8]) -> Result<CbAttrs, XdrError> {
    let mut r = XdrReader::new(reply);
    let bad = || XdrError::BadValue;
    if NfsStat(r.u32()?) != NfsStat::OK {
        return Err(bad());
    }
    r.opaque(1024)?;
    if r.u32()? != 2 {
        return Err(bad());
    }
    // CB_SEQUENCE4resok: sessionid, then sequence, slot, highest and target slot.
    if r.u32()? != OP_CB_SEQUENCE || NfsStat(r.u32()?) != NfsStat::OK {
        return Err(bad());
    }
    let _: [u8; 16] = r.array()?;
    for _ in 0..4 {
        r.u32()?;
    }
    if r.u32()? != OP_CB_GETATTR || NfsStat(r.u32()?) != NfsStat::OK {
        return Err(bad());
    }
    let mask = Bitmap::decode(&mut r)?;
    let vals = r.opaque(r.remaining())?;
    let mut v = XdrReader::new(vals);
    let (mut change, mut size) = (None, None);
    for bit in mask.iter() {
        match bit {
            attr::num::CHANGE => change = Some(v.u64()?),
            attr::num::SIZE => size = Some(v.u64()?),
            b if b < attr::num::CHANGE => return Err(bad()),
            _ => break,
        }
    }
    match (change, size) {
        (Some(change), Some(size)) => Ok(CbAttrs { change, size }),
        _ => Err(bad()),
    }
}

/// The status of a CB_COMPOUND4res.
pub fn decode_status(reply: &[u8]) -> Result<NfsStat, XdrError> {
    Ok(NfsStat(XdrReader::new(reply).u32()?))
}

/// What a queued callback asks of its client. Each kind is encoded here; what its answer
/// means belongs to the service that queued it (`CbHooks`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbKind {
    /// CB_LAYOUTRECALL(FILE, whole file, iomode ANY) of the client's layouts of `fh`, of the
    /// type the client holds (RFC 8881 §20.3: `clora_type` is the holder's layout type).
    LayoutRecall {
        fh: Fh,
        ltype: LayoutType,
        stateid: Stateid,
    },
    /// CB_RECALL of the client's delegation `stateid` of `fh` (RFC 8881 §20.2).
    Recall { fh: Fh, stateid: Stateid },
    /// CB_GETATTR of the change and size of `fh`, of which the client holds the write
    /// delegation `stateid` (RFC 8881 §10.4.3, §20.1; nfs4/delegs/cb_getattr.rs).
    Getattr { fh: Fh, stateid: Stateid },
    /// CB_OFFLOAD of the async copy `stateid` to `fh`, which is over (RFC 7862 §16.1;
    /// nfs4/copy/offload.rs).
    Offload {
        fh: Fh,
        stateid: Stateid,
        outcome: OffloadOutcome,
    },
}

impl CbKind {
    fn encode(&self, slot: &CbSlot) -> XdrWriter {
        match self {
            CbKind::LayoutRecall { fh, ltype, stateid } => {
                encode_layoutrecall(slot, fh, stateid, *ltype)
            }
            CbKind::Recall { fh, stateid } => encode_recall(slot, fh, stateid),
            CbKind::Getattr { fh, .. } => encode_getattr(slot, fh),
            CbKind::Offload {
                fh,
                stateid,
                outcome,
            } => encode_offload(slot, fh, stateid, outcome),
        }
    }
}

/// One callback waiting to go over a client's backchannel.
#[derive(Debug, Clone)]
pub struct Callback {
    pub client: u64,
    pub kind: CbKind,
    /// When the client must have done what it is asked. The queue gives up sending after it;
    /// acting on it (fencing, revoking) is the queuing service's, from its own tick.
    pub deadline: Instant,
}

/// What the services decide about their callbacks, by `CbKind` (server.rs dispatches each
/// kind to the service that queues it).
pub trait CbHooks: Sync {
    /// Asked before each send: false drops the callback unsent (what it asks was done
    /// meanwhile, e.g. the layout came back before its recall went out).
    fn wanted(&self, cb: &Callback) -> bool;
    /// Called with the CB_COMPOUND status and the whole CB_COMPOUND4res once the client
    /// answered.
    fn answered(&self, cb: &Callback, st: NfsStat, reply: &[u8]);
}

/// What the senders use: the queue, the state that holds each session's callback slots and
/// backchannel, and the services' hooks.
#[derive(Clone, Copy)]
pub struct Backchannel<'a> {
    pub callbacks: &'a CbQueue,
    pub state: &'a StateManager,
    pub hooks: &'a dyn CbHooks,
}

/// Most callbacks in flight at once: each holds a thread for up to `callback_timeout`.
const MAX_IN_FLIGHT: usize = 16;

/// How long a callback that could not be sent (backchannel down or busy, no answer) waits
/// before the next try.
pub const RETRY_EVERY: Duration = Duration::from_secs(1);

/// The callbacks waiting to be sent (RFC 8881 §12.5.5.2: the server recalls asynchronously,
/// and the operation that caused the recall answers DELAY or RECALLCONFLICT at once). A
/// COMPOUND only queues; the sender (`run_sender`, or `send_due` from the tick) does the
/// backchannel round trips, so no client's slow or dead backchannel ever holds another
/// client's COMPOUND.
///
/// Reuse: a service adds a `CbKind` variant with its encoding and queues a [`Callback`]
/// with its deadline; server.rs hands that kind to the service's `wanted` and `answered`.
/// The service keeps its own "recall pending" record and acts on the deadline itself
/// (layouts: `layouts::recall`).
#[derive(Debug, Default)]
pub struct CbQueue {
    /// (not before, callback), in no particular order (a handful at a time).
    q: std::sync::Mutex<Vec<(Instant, Callback)>>,
    /// (not before, probe): CB_NULLs, apart from the callbacks because they need no
    /// callback slot and no service answers them (`send_due` leaves them to the sender).
    probes: std::sync::Mutex<Vec<(Instant, Probe)>>,
    wake: std::sync::Condvar,
    in_flight: std::sync::atomic::AtomicUsize,
    stop: std::sync::atomic::AtomicBool,
}

impl CbQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Instant, Callback)>> {
        self.q.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `cb` to be sent as soon as possible.
    pub fn push(&self, cb: Callback) {
        self.lock().push((Instant::now(), cb));
        self.wake.notify_one();
    }

    /// Queues `cb` again for `at`, unless its deadline is past by then.
    fn retry(&self, cb: Callback, at: Instant) {
        if at < cb.deadline {
            self.lock().push((at, cb));
        } else {
            tracing::info!(client = cb.client, kind = ?cb.kind, "callback not sent before its deadline");
        }
    }

    /// Takes the callbacks due at `now`, at most `max`.
    fn take_due(&self, now: Instant, max: usize) -> Vec<Callback> {
        take_due(&mut self.lock(), now, max)
    }

    /// Callbacks still queued (sent or not yet).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn probes(&self) -> std::sync::MutexGuard<'_, Vec<(Instant, Probe)>> {
        self.probes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Probes waiting or being retried.
    pub fn probes_queued(&self) -> usize {
        self.probes().len()
    }

    fn take_due_probes(&self, now: Instant, max: usize) -> Vec<Probe> {
        take_due(&mut self.probes(), now, max)
    }

    /// Ends `run_sender`.
    pub fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.wake.notify_all();
    }
}

/// Sends every callback due at `now`, one after the other, on the calling thread (the
/// periodic tick calls it; tests drive it directly).
pub fn send_due(bc: &Backchannel, now: Instant) {
    for cb in bc.callbacks.take_due(now, usize::MAX) {
        send(bc, cb, now);
    }
}

/// The sender: waits for queued callbacks and sends each on a thread of its own (at most
/// `MAX_IN_FLIGHT` at once), so that one client's dead backchannel (a round trip may take
/// `callback_timeout`) delays no other client's recall. Runs until `CbQueue::stop`. The
/// threads share `owner`, from which `bc` takes the backchannel.
pub fn run_sender<H: Send + Sync + 'static>(
    owner: std::sync::Arc<H>,
    bc: fn(&H) -> Backchannel<'_>,
) {
    use std::sync::atomic::Ordering;
    let q = bc(&owner).callbacks;
    while !q.stop.load(Ordering::Relaxed) {
        let room = MAX_IN_FLIGHT.saturating_sub(q.in_flight.load(Ordering::Relaxed));
        let now = Instant::now();
        let due = q.take_due(now, room);
        let probes = q.take_due_probes(now, room.saturating_sub(due.len()));
        if due.is_empty() && probes.is_empty() {
            let g = q.lock();
            let _ = q.wake.wait_timeout(g, Duration::from_millis(250));
            continue;
        }
        for cb in due {
            spawn_send(&owner, bc, move |b| send(b, cb, Instant::now()));
        }
        for p in probes {
            spawn_send(&owner, bc, move |b| probe(b, p, Instant::now()));
        }
    }
}

/// Runs one backchannel round trip on a thread of its own, counted in `in_flight`.
fn spawn_send<H: Send + Sync + 'static>(
    owner: &std::sync::Arc<H>,
    bc: fn(&H) -> Backchannel<'_>,
    f: impl FnOnce(&Backchannel) + Send + 'static,
) {
    use std::sync::atomic::Ordering;
    let q = bc(owner).callbacks;
    q.in_flight.fetch_add(1, Ordering::Relaxed);
    let s = owner.clone();
    let spawned = std::thread::Builder::new()
        .name("pnfsd-callback".into())
        .spawn(move || {
            let b = bc(&s);
            f(&b);
            b.callbacks.in_flight.fetch_sub(1, Ordering::Relaxed);
        });
    if let Err(e) = spawned {
        q.in_flight.fetch_sub(1, Ordering::Relaxed);
        tracing::error!(%e, "no thread for a callback");
    }
}

/// A CB_NULL probe of one session's backchannel (`queue_probe`).
#[derive(Debug, Clone)]
pub struct Probe {
    pub client: u64,
    pub sessionid: [u8; 16],
    /// The session's probe generation (`StateManager::probe_start`).
    pub generation: u64,
    /// Failed probes are retried until then (one lease): the client may have been slow to
    /// listen; after it the path stays down until the client binds a connection again.
    pub deadline: Instant,
}

/// Queues a CB_NULL probe of the session's backchannel: after CREATE_SESSION with a
/// backchannel, BACKCHANNEL_CTL and BIND_CONN_TO_SESSION (RFC 8881 §18.36.3, §18.33.3;
/// pynfs CSESS20/21). Never sent from the COMPOUND: the client may only answer once our
/// reply reached it, and a dead backchannel must hold no server thread of a COMPOUND.
pub fn queue_probe(bc: &Backchannel, sessionid: &[u8; 16]) {
    let Some((client, generation)) = bc.state.probe_start(sessionid) else {
        return;
    };
    let lease = Duration::from_secs(u64::from(bc.state.lease_seconds()));
    let now = Instant::now();
    bc.callbacks.probes().push((
        now,
        Probe {
            client,
            sessionid: *sessionid,
            generation,
            deadline: now + lease,
        },
    ));
    bc.callbacks.wake.notify_one();
}

/// Sends every probe due at `now` on the calling thread (tests; the sender does it in
/// the server).
pub fn send_due_probes(bc: &Backchannel, now: Instant) {
    for p in bc.callbacks.take_due_probes(now, usize::MAX) {
        probe(bc, p, now);
    }
}

/// One CB_NULL round trip, unless a newer probe or the loss of the backchannel made it
/// moot. The result decides the session's `CbPath` (SEQUENCE's CB_PATH_DOWN flags, and
/// whether the client gets delegations).
pub fn probe(bc: &Backchannel, p: Probe, now: Instant) {
    let Some(t) = bc.state.probe_target(&p.sessionid, p.generation) else {
        return;
    };
    let ok = t
        .channel
        .call_as(t.program, CB_NULL, &t.cred, XdrWriter::new())
        .is_ok();
    bc.state.probe_done(&p.sessionid, p.generation, ok);
    if ok {
        tracing::info!(client = p.client, "backchannel up (CB_NULL answered)");
    } else if now + RETRY_EVERY < p.deadline {
        tracing::info!(
            client = p.client,
            "backchannel down (CB_NULL failed), probing again"
        );
        bc.callbacks.probes().push((now + RETRY_EVERY, p));
    } else {
        tracing::info!(client = p.client, "backchannel down (CB_NULL failed)");
    }
}

/// One CB_COMPOUND round trip for `cb`, unless it is no longer `wanted`. A backchannel that
/// is down or busy (CB_PATH_DOWN, DELAY from `cb_begin`), a call without an answer or a
/// client answering DELAY puts it back for `RETRY_EVERY` later, until its deadline (`now`
/// is the time the send was due at).
pub fn send(bc: &Backchannel, cb: Callback, now: Instant) {
    if !bc.hooks.wanted(&cb) {
        return;
    }
    let slot = match bc.state.cb_begin(cb.client) {
        Ok(s) => s,
        Err(e) => {
            tracing::info!(
                client = cb.client,
                status = e.name(),
                "callback not sent yet"
            );
            bc.callbacks.retry(cb, now + RETRY_EVERY);
            return;
        }
    };
    let args = cb.kind.encode(&slot);
    // With the credential the client gave for callbacks (RFC 8881 §18.36.3).
    let res = slot
        .channel
        .call_as(slot.program, CB_COMPOUND, &slot.cred, args);
    bc.state.cb_done(&slot, res.is_ok());
    let reply = res.as_deref().unwrap_or_default();
    match res.as_deref().map(decode_status) {
        // The client is busy (RFC 8881 §15.1.1.3): ask again.
        Ok(Ok(NfsStat::DELAY)) => bc.callbacks.retry(cb, now + RETRY_EVERY),
        Ok(Ok(st)) => bc.hooks.answered(&cb, st, reply),
        Ok(Err(_)) | Err(_) => {
            tracing::info!(client = cb.client, "callback failed");
            bc.callbacks.retry(cb, now + RETRY_EVERY);
        }
    }
}

/// The entries of a queue of (due time, entry) due at `now`, at most `max`, taken out.
fn take_due<T>(q: &mut Vec<(Instant, T)>, now: Instant, max: usize) -> Vec<T> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < q.len() && out.len() < max {
        if q[i].0 <= now {
            out.push(q.swap_remove(i).1);
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
#[path = "callback_tests.rs"]
mod tests;
