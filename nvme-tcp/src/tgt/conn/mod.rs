//! One TCP connection = one queue pair of the target: ICReq/ICResp, Connect, then commands.
//! Data from the host arrives in-capsule or after an R2T; data to the host leaves in one
//! C2HData PDU followed by the CapsuleResp, in one write. With io_uring (`tgt/ring/`) the
//! queue runs on a thread of its own (`run_thread`), which owns the socket alone (the
//! runtime lets go of it: `OutTx::detach_writer`): one `io_uring_enter` per round waits for
//! the socket receive and the file Reads/Writes alike, and the round's answers leave
//! together by `sendmsg` (one call, more when it returns short), a Read's data from the
//! buffer the ring read it into (no copy). Without it (`run`, a tokio task) page-cache hits
//! are served inline (`io::try_inline`) and the rest runs on blocking threads, which write
//! their own answers.
//! Admin and Fabrics commands run in order on the queue either way (docs/nvme-tcp.md "I/O
//! path").
//!
//! Here: the queue's state (`Queue`), the handshake up to ICResp (`serve`), and what both
//! loops share. `recv_ring.rs` is the loop on the queue's own thread, `recv_tokio.rs` the
//! one on a tokio task; both hand what they receive to `capsule.rs` (capsules, Connect,
//! H2CData), which runs commands through `exec.rs`; answers leave by `reply.rs`.

mod capsule;
mod exec;
mod recv_ring;
mod recv_tokio;
mod reply;

use super::ring::{Done, Ring};
use crate::controller::{Cmd, Controller, Subsystem, IN_CAPSULE_DATA, MAXH2CDATA, MQES};
use crate::namespace::lock;
use crate::pdu::{Digests, Fatal, Fes, IcResp, Pdu, Rules, Side, Sqe, Stage};
use crate::quiesce::{Busy, Gate};
use crate::stats::QueueStats;
use crate::transport::{frame, split, terminate, OutTx, PduReader, RecvError};
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::watch;

/// A host-to-controller transfer solicited by an R2T.
struct Transfer {
    sqe: Sqe,
    buf: Vec<u8>,
    /// The transfer came whole in one H2CData: its data, not copied into `buf`.
    whole: Option<Bytes>,
    len: usize,
    /// A data digest failed: finish the transfer, then fail the command.
    failed: bool,
}

struct Queue {
    subsys: Arc<Subsystem>,
    /// The runtime the target runs on (the blocking pool, from the queue's own thread too).
    rt: tokio::runtime::Handle,
    /// Runs on its own thread (`run_thread`): blocking there is fine.
    threaded: bool,
    tx: OutTx,
    dg: Digests,
    local: SocketAddr,
    /// The host's end of the connection (the host policy's `HostRef::ip`).
    peer: SocketAddr,
    ctrl: Option<Arc<Controller>>,
    qid: u16,
    sqsize: u16,
    sqhd: Arc<AtomicU16>,
    /// Commands received and not yet answered (bounded by the SQ size).
    inflight: Arc<AtomicUsize>,
    /// This queue's counters (`stats.rs`), summed with the others' at scrape.
    stats: Arc<QueueStats>,
    transfers: HashMap<u16, Transfer>,
    next_ttag: u16,
    /// Bytes the R2Ts of `transfers` solicited, at most `Limits::max_h2c_buffered_per_queue`
    /// (checked in `solicit`): all a host can make this queue buffer.
    h2c_solicited: usize,
    /// Commands whose R2T waits for `h2c_solicited` to fall (in arrival order), with their
    /// transfer length. Bounded by the SQ size, as every one is a command in flight.
    r2t_waiting: VecDeque<(Sqe, usize)>,
    /// The reader holds further PDUs: answers sit in the send buffer (`held`) until the
    /// commands already received are answered, then leave in one write.
    more: bool,
    held: std::cell::Cell<bool>,
    /// Cached writes received in one batch, run together once the batch ends.
    batch: Vec<Cmd>,
    /// The batch's guard on its controller's I/O gate, taken with its first command.
    batch_io: Option<Busy>,
    /// The queue's io_uring (`tgt/ring/`): made before the queue moves to its thread; on
    /// the task path (`run`) made at an I/O queue's Connect if io_uring became available;
    /// `None` where the kernel refuses it.
    ring: Option<Ring>,
    done: Vec<Done>,
    /// Closed by `Target::shutdown`: no command starts after that; each blocking call holds
    /// a guard so `shutdown_and_wait` can wait for it.
    gate: Arc<Gate>,
}

/// One of `Limits::max_connections`, held by a connection's task until it ends.
pub(crate) struct ConnSlot(Arc<Subsystem>);

impl ConnSlot {
    /// A slot, unless `max_connections` are open.
    pub(super) fn take(subsys: &Arc<Subsystem>) -> Option<ConnSlot> {
        let n = &subsys.counters.connections;
        let max = subsys.limits.max_connections;
        // Only the accept loop adds: a load then an add cannot pass the bound.
        if n.load(Ordering::Relaxed) >= max {
            return None;
        }
        n.fetch_add(1, Ordering::Relaxed);
        Some(ConnSlot(subsys.clone()))
    }
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.counters.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

enum Flow {
    Continue,
    Close,
}

pub(crate) async fn serve(
    stream: TcpStream,
    subsys: Arc<Subsystem>,
    mut stop: watch::Receiver<bool>,
    gate: Arc<Gate>,
    // Held until this connection's task ends (`Target::shutdown_and_wait`), and its slot of
    // `Limits::max_connections`.
    _held: (Busy, ConnSlot),
) {
    let _ = stream.set_nodelay(true);
    let (Ok(local), Ok(peer)) = (stream.local_addr(), stream.peer_addr()) else {
        return;
    };
    // A descriptor of our own on the socket: shutting it down ends a queue thread's receive.
    let Ok(watcher) = stream
        .into_std()
        .and_then(|s| Ok((s.try_clone()?, TcpStream::from_std(s)?)))
    else {
        return;
    };
    let (watcher, stream) = watcher;
    let Ok((rd, tx)) = split(stream) else {
        return;
    };
    let rules = Rules {
        receiver: Side::Controller,
        stage: Stage::AwaitIc,
        digests: Digests::default(),
        max_capsule_data: IN_CAPSULE_DATA,
        max_data_pdu: MAXH2CDATA,
    };
    let mut reader = PduReader::new(rd, rules);
    // ICReq and a successful Connect must come by then (`Limits::connect_timeout_ms`).
    let connect_by = tokio::time::Instant::now()
        + std::time::Duration::from_millis(subsys.limits.connect_timeout_ms as u64);
    let first = tokio::select! {
        r = reader.read() => r,
        // wait_for, not changed: a stop sent before we subscribed counts too.
        _ = stop.wait_for(|s| *s) => return,
        _ = tokio::time::sleep_until(connect_by) => {
            connect_timed_out(&subsys, peer, "ICReq");
            return;
        }
    };
    let dg = match first {
        Ok(Pdu::IcReq(req)) => {
            // HPDA ≠ 0 would need padding before C2H data; Linux always sends 0.
            if req.hpda != 0 {
                let mut h = Vec::new();
                Pdu::IcReq(req).encode(Digests::default(), &mut h);
                terminate(
                    &tx,
                    true,
                    Fatal {
                        fes: Fes::UNSUPPORTED_PARAMETER,
                        fei: 10,
                    },
                    h,
                );
                return;
            }
            req.digests
        }
        Err(RecvError::Fatal { fatal, header }) => {
            terminate(&tx, true, fatal, header);
            return;
        }
        _ => return,
    };
    // Digests are echoed: we support both, so the host gets what it asked for.
    let resp = IcResp {
        pfv: 0,
        cpda: 0,
        digests: dg,
        maxh2cdata: MAXH2CDATA,
    };
    let _ = tx.send(frame(&Pdu::IcResp(resp), dg));
    reader.b.rules.stage = Stage::Ready;
    reader.b.rules.digests = dg;
    let stats = subsys.stats.queue();
    let mut q = Queue {
        subsys,
        rt: tokio::runtime::Handle::current(),
        threaded: false,
        tx,
        dg,
        local,
        peer,
        ctrl: None,
        qid: 0,
        sqsize: MQES,
        sqhd: Arc::new(AtomicU16::new(0)),
        inflight: Arc::new(AtomicUsize::new(0)),
        stats,
        transfers: HashMap::new(),
        next_ttag: 0,
        h2c_solicited: 0,
        r2t_waiting: VecDeque::new(),
        more: false,
        held: std::cell::Cell::new(false),
        batch: Vec::new(),
        batch_io: None,
        ring: None,
        done: Vec::new(),
        gate,
    };
    // With io_uring the queue runs on a thread of its own (`run_thread`), which blocks in
    // io_uring_enter for the socket and the file alike; without, on this task (`run`).
    // The queue's end (its `Drop`, wherever that happens) releases what it held.
    match Ring::for_thread() {
        Some(ring) => {
            q.ring = Some(ring);
            drop(q.spawn_thread(reader, watcher, stop, connect_by).await);
        }
        None => q.run(&mut reader, stop, connect_by).await,
    }
}

/// A connection that did not get as far as a controller in time: counted, and logged at
/// most once per `LOG_EVERY` (any peer can open connections and stay silent).
fn connect_timed_out(subsys: &Subsystem, peer: SocketAddr, waited_for: &'static str) {
    subsys
        .counters
        .connect_timeouts
        .fetch_add(1, Ordering::Relaxed);
    if let Some(left_out) = subsys.idle_log.allow() {
        tracing::info!(
            %peer,
            waited_for,
            connect_timeout_ms = subsys.limits.connect_timeout_ms,
            closed_since_last_line = left_out,
            "nvme-tcp connection closed: no Connect in time"
        );
    }
}

impl Drop for Queue {
    /// The connection is gone. The admin queue carries the association (NVMe over Fabrics:
    /// an association ends with its admin queue; nvmet tears the controller down then too):
    /// losing it ends the controller at once — its I/O queues close and its keep-alive
    /// timer ends — rather than at KATO × 1.5. An I/O queue gives its QID back.
    fn drop(&mut self) {
        self.subsys.stats.retire(&self.stats);
        if let Some(c) = &self.ctrl {
            if self.qid == 0 {
                c.kill();
            } else {
                lock(&c.state).connected_qids.retain(|&x| x != self.qid);
            }
        }
    }
}

impl Queue {
    /// The connection is closing: cached writes collected and not run never start, and
    /// their guard goes now, not when the queue is dropped (a fence waits for it).
    fn drop_batch(&mut self) {
        self.batch.clear();
        self.batch_io = None;
    }

    /// One parsed PDU (or the receive error in its place).
    pub(super) fn on_received(&mut self, r: Result<Pdu, RecvError>) -> Flow {
        match r {
            Ok(pdu) => self.on_pdu(pdu),
            Err(RecvError::Fatal { fatal, header }) => {
                tracing::debug!(?fatal, "bad PDU from host: terminating connection");
                terminate(&self.tx, true, fatal, header);
                Flow::Close
            }
            Err(RecvError::DataDigest {
                pdu_type,
                cccid,
                ttag,
                datal,
            }) => self.on_data_digest(pdu_type, cccid, ttag, datal),
            Err(_) => Flow::Close,
        }
    }

    fn on_pdu(&mut self, pdu: Pdu) -> Flow {
        match pdu {
            Pdu::CapsuleCmd(sqe, data) => self.on_capsule(sqe, data),
            Pdu::H2cData(d) => self.on_h2c(d),
            _ => Flow::Close, // H2CTermReq: the host is done with us
        }
    }
}
