//! One TCP connection: a reader task that reassembles records and starts the work each asks
//! for, one writer task through which every reply (in any order) and every backchannel call
//! leaves, and the connection's backchannel (RFC 8881 §2.10.3.1: callbacks travel on the fore
//! connection, and the client's replies to them arrive on it among our calls).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use crate::rpc::limits::{ReplyBudget, Shared};
use crate::rpc::msg::{self, flavor, AcceptError, OpaqueAuth};
use crate::rpc::program::{self, Action};
use crate::rpc::record::RecordReader;
use crate::rpc::{auth, Backchannel, CbCred, Program, RpcOptions};
use crate::rpc::{ConnInfo, RpcSizes};
use crate::xdr::XdrWriter;

/// NFSv4 callback program version (RFC 8881 §20, `NFS_CB` = 1); procedure 1 is CB_COMPOUND.
pub const CB_VERSION: u32 = 1;

/// Replies and callbacks queued for the writer of one connection (records; their bytes are
/// bounded by the reply budget, `RpcOptions::max_reply_queued`).
const REPLY_QUEUE: usize = 1024;

/// Requests up to this size are copied out of the read buffer (see `serve_connection`).
const SMALL_REQUEST: usize = 16 << 10;

type Waiter = std_mpsc::SyncSender<Result<Bytes, msg::ReplyError>>;

/// The backchannel of one connection.
#[derive(Debug)]
pub struct TcpBackchannel {
    /// The connection's writer; `None` once the connection is closing.
    tx: Mutex<Option<mpsc::Sender<Outgoing>>>,
    /// Calls waiting for their reply, by xid.
    pending: Mutex<HashMap<u32, Waiter>>,
    next_xid: AtomicU32,
    timeout: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding these locks leaves a map that is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl TcpBackchannel {
    pub fn new(tx: mpsc::Sender<Outgoing>, timeout: Duration) -> Self {
        TcpBackchannel {
            tx: Mutex::new(Some(tx)),
            pending: Mutex::new(HashMap::new()),
            next_xid: AtomicU32::new(rand::random()),
            timeout,
        }
    }

    /// Hands a reply that arrived on the connection to the call waiting for it. Returns false
    /// when no call waits for `xid` (a late reply after a timeout, or a forged one).
    pub fn deliver(&self, xid: u32, body: Bytes) -> bool {
        let Some(w) = lock(&self.pending).remove(&xid) else {
            return false;
        };
        let res = msg::reply_results(&body).map(|r| body.slice_ref(r));
        w.try_send(res).is_ok()
    }

    /// The connection is closing: no new calls, and waiting ones fail now.
    pub fn close(&self) {
        lock(&self.tx).take();
        lock(&self.pending).clear();
    }

    fn send_call(
        &self,
        program: u32,
        procedure: u32,
        cred: &CbCred,
        args: XdrWriter,
    ) -> io::Result<Vec<u8>> {
        let xid = self.next_xid.fetch_add(1, Ordering::Relaxed);
        let sys;
        let cred = match cred {
            CbCred::None => OpaqueAuth {
                flavor: flavor::AUTH_NONE,
                body: &[],
            },
            CbCred::Sys(c) => {
                sys = auth::encode_authsys(c, xid);
                OpaqueAuth {
                    flavor: flavor::AUTH_SYS,
                    body: &sys,
                }
            }
        };
        let rec = program::framed(|w| {
            msg::call_header(w, xid, program, CB_VERSION, procedure, cred);
            w.buf.extend_from_slice(&args.buf);
        });
        let (wtx, wrx) = std_mpsc::sync_channel(1);
        lock(&self.pending).insert(xid, wtx);
        // `try_send`: this may run on any thread (async or not); a full queue means the
        // client is not reading, and the caller retries the callback later.
        let sent = match &*lock(&self.tx) {
            Some(tx) => tx.try_send(Outgoing::uncharged(rec)).map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => io::ErrorKind::WouldBlock,
                mpsc::error::TrySendError::Closed(_) => io::ErrorKind::NotConnected,
            }),
            None => Err(io::ErrorKind::NotConnected),
        };
        if let Err(kind) = sent {
            lock(&self.pending).remove(&xid);
            return Err(io::Error::new(kind, "backchannel unavailable"));
        }
        match wrx.recv_timeout(self.timeout) {
            Ok(Ok(body)) => Ok(body.to_vec()),
            Ok(Err(e)) => Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            Err(std_mpsc::RecvTimeoutError::Timeout) => {
                lock(&self.pending).remove(&xid);
                Err(io::Error::new(io::ErrorKind::TimedOut, "no callback reply"))
            }
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection closed",
            )),
        }
    }
}

impl Backchannel for TcpBackchannel {
    fn call(&self, program: u32, procedure: u32, args: XdrWriter) -> io::Result<Vec<u8>> {
        self.send_call(program, procedure, &CbCred::None, args)
    }

    fn call_as(
        &self,
        program: u32,
        procedure: u32,
        cred: &CbCred,
        args: XdrWriter,
    ) -> io::Result<Vec<u8>> {
        self.send_call(program, procedure, cred, args)
    }
}

/// One record for the writer, with the part of the reply budget it holds until written.
#[derive(Debug)]
pub struct Outgoing {
    pub rec: Vec<u8>,
    pub charge: u32,
}

impl Outgoing {
    /// A record that holds no budget (backchannel calls: few, small, bounded by the queue).
    pub fn uncharged(rec: Vec<u8>) -> Outgoing {
        Outgoing { rec, charge: 0 }
    }
}

/// Writes records as they come and gives their budget back once the socket took them;
/// flushes when nothing else is queued. When the socket fails, the budget closes so that
/// nothing waits for room that will never come.
async fn write_loop(
    wr: tokio::net::tcp::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Outgoing>,
    budget: Arc<ReplyBudget>,
) {
    let mut wr = BufWriter::with_capacity(64 << 10, wr);
    let ok = 'w: {
        while let Some(o) = rx.recv().await {
            if wr.write_all(&o.rec).await.is_err() {
                break 'w false;
            }
            budget.give_back(o.charge);
            while let Ok(o) = rx.try_recv() {
                if wr.write_all(&o.rec).await.is_err() {
                    break 'w false;
                }
                budget.give_back(o.charge);
            }
            if wr.flush().await.is_err() {
                break 'w false;
            }
        }
        true
    };
    budget.close();
    if ok {
        let _ = wr.shutdown().await;
    }
}

/// A COMPOUND read from the connection, waiting for a blocking thread.
struct Job {
    xid: u32,
    cred: crate::rpc::Cred,
    args: Bytes,
    sizes: RpcSizes,
    /// The connection's in-flight permit, held until the reply is queued.
    inflight: OwnedSemaphorePermit,
}

/// What the tasks of one connection share.
struct ConnCtx<P> {
    prog: Arc<P>,
    conn: Arc<ConnInfo>,
    tx: mpsc::Sender<Outgoing>,
    budget: Arc<ReplyBudget>,
    shared: Arc<Shared>,
}

impl<P> Clone for ConnCtx<P> {
    fn clone(&self) -> Self {
        ConnCtx {
            prog: self.prog.clone(),
            conn: self.conn.clone(),
            tx: self.tx.clone(),
            budget: self.budget.clone(),
            shared: self.shared.clone(),
        }
    }
}

/// Hands the connection's COMPOUNDs to blocking threads in arrival order. Waiting here, one
/// permit at a time, is what makes the shared pool fair: a connection is in the pool's FIFO
/// queue at most once, so when every thread is busy the connections take turns.
async fn dispatch<P: Program>(mut jobs: mpsc::UnboundedReceiver<Job>, cx: ConnCtx<P>) {
    while let Some(job) = jobs.recv().await {
        // No new reply while every byte of the budget waits for the peer: the requests
        // already read wait here as a few hundred bytes each, not as replies.
        if cx.budget.is_spent() && !cx.budget.wait_for_room().await {
            return;
        }
        let Some(thread) = cx.shared.blocking_permit().await else {
            return;
        };
        tokio::spawn(run_job(job, thread, cx.clone()));
    }
}

async fn run_job<P: Program>(job: Job, thread: OwnedSemaphorePermit, cx: ConnCtx<P>) {
    let Job {
        xid,
        cred,
        args,
        sizes,
        inflight,
    } = job;
    let (prog, conn) = (cx.prog.clone(), cx.conn.clone());
    let res = cx
        .shared
        .pool
        .run(move || prog.compound(&conn, cred, &args, sizes))
        .await;
    // The turn is over before this reply waits for room.
    drop(thread);
    let reply = match res {
        Ok(Ok(res)) => program::compound_reply(xid, Ok(&res)),
        Ok(Err(_)) => program::compound_reply(xid, Err(AcceptError::GarbageArgs)),
        // The program panicked outside the dispatcher's own guard.
        Err(()) => program::compound_reply(xid, Err(AcceptError::SystemErr)),
    };
    if let Some(charge) = cx.budget.take(reply.len()).await {
        let _ = cx.tx.send(Outgoing { rec: reply, charge }).await;
    }
    drop(inflight);
}

/// Why the reader stopped waiting.
enum Wake {
    Go,
    Stop,
}

/// Serves one connection until the peer closes it, it breaks a rule of the transport, it is
/// idle too long without a session (or closed to make room for another), or `shutdown`
/// turns true. Returns after every request it started has been answered.
pub async fn serve_connection<P: Program>(
    stream: TcpStream,
    id: u64,
    peer: SocketAddr,
    prog: Arc<P>,
    opts: Arc<RpcOptions>,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let (mut rd, wr) = stream.into_split();
    let budget = Arc::new(ReplyBudget::new(opts.max_reply_queued));
    let (tx, rx) = mpsc::channel(REPLY_QUEUE);
    let writer = tokio::spawn(write_loop(wr, rx, budget.clone()));
    let bc = Arc::new(TcpBackchannel::new(tx.clone(), opts.callback_timeout));
    let conn = Arc::new(ConnInfo {
        id,
        peer,
        backchannel: Some(bc.clone() as Arc<dyn Backchannel>),
    });
    let cx = ConnCtx {
        prog: prog.clone(),
        conn,
        tx,
        budget: budget.clone(),
        shared: shared.clone(),
    };
    let (jobs, jobs_rx) = mpsc::unbounded_channel();
    let dispatcher = tokio::spawn(dispatch(jobs_rx, cx.clone()));
    let max_inflight = opts
        .max_inflight
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let inflight = Arc::new(Semaphore::new(max_inflight));
    let track = shared.register(id, inflight.clone(), max_inflight, budget.clone());
    let idle = opts.idle_timeout.max(Duration::from_millis(10));
    let mut reader = RecordReader::new(opts.max_record);
    let mut buf = BytesMut::with_capacity(64 << 10);
    'conn: loop {
        loop {
            // Start nothing new while every reply byte is spent: the peer is not reading
            // (the socket is not read either, so its requests wait in the kernel).
            if budget.is_spent() {
                let wake = tokio::select! {
                    ok = budget.wait_for_room() => if ok { Wake::Go } else { Wake::Stop },
                    _ = shutdown.changed() => Wake::Stop,
                };
                if let Wake::Stop = wake {
                    break 'conn;
                }
            }
            let rec = match reader.decode(&mut buf) {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                Err(e) => {
                    if let Some(n) = shared.log_oversize.allow() {
                        tracing::warn!(
                            conn = id,
                            %peer,
                            similar_not_logged = n,
                            "closing connection: {e}"
                        );
                    }
                    break 'conn;
                }
            };
            match program::classify(&rec, opts.auth) {
                Action::Reply(r) => {
                    let Some(charge) = budget.take(r.len()).await else {
                        break 'conn;
                    };
                    if cx.tx.send(Outgoing { rec: r, charge }).await.is_err() {
                        break 'conn;
                    }
                }
                Action::Drop => tracing::debug!(conn = id, "dropped an unreadable record"),
                Action::CallbackReply { xid, body } => {
                    if !bc.deliver(xid, rec.slice_ref(body)) {
                        tracing::debug!(conn = id, xid, "reply to no pending callback");
                    }
                }
                Action::Compound { xid, cred, args } => {
                    // Only COMPOUNDs take a permit: a callback reply must always get through,
                    // or COMPOUNDs waiting for it could hold every permit.
                    let Ok(permit) = inflight.clone().acquire_owned().await else {
                        break 'conn;
                    };
                    // A small request is copied: a slice would pin the whole read buffer it
                    // came in (64 KiB or more) while it waits for a thread or for room.
                    let args = if rec.len() <= SMALL_REQUEST {
                        Bytes::copy_from_slice(args)
                    } else {
                        rec.slice_ref(args)
                    };
                    let job = Job {
                        xid,
                        cred,
                        args,
                        sizes: RpcSizes {
                            request_len: rec.len(),
                            reply_header_len: msg::SUCCESS_HEADER_LEN,
                        },
                        inflight: permit,
                    };
                    if jobs.send(job).is_err() {
                        break 'conn;
                    }
                }
            }
        }
        // Read at least what the current fragment still needs, in chunks of 64 KiB or more.
        buf.reserve(
            reader
                .wanted(buf.len())
                .clamp(64 << 10, opts.max_record.max(64 << 10)),
        );
        let idle_at = shared.instant_of(track.last_rx_ms()) + idle;
        tokio::select! {
            n = rd.read_buf(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(_) => track.touch(shared.now_ms()),
            },
            _ = tokio::time::sleep_until(idle_at.into()) => {
                if track.quiet() && !prog.connection_in_session(id) {
                    tracing::debug!(conn = id, %peer, "closing a connection idle {idle:?} with no session");
                    break;
                }
                track.touch(shared.now_ms());
            }
            _ = track.evict.notified() => {
                // Checked again: it may have received a request since it was chosen.
                if track.quiet() && !prog.connection_in_session(id) {
                    tracing::debug!(conn = id, %peer, "closing an idle connection with no session to make room");
                    break;
                }
                track.spared();
            }
            _ = shutdown.changed() => break,
        }
    }
    // Nothing more will be read: callbacks waiting for a reply fail now rather than at their
    // timeout. Then the requests already started finish and are answered, and we close.
    bc.close();
    drop(jobs);
    let _ = inflight.acquire_many(max_inflight as u32).await;
    let _ = dispatcher.await;
    drop(cx);
    let _ = writer.await;
    shared.unregister(id);
    prog.connection_closed(id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backchannel_fails_fast_when_closed_or_full() {
        let (tx, mut rx) = mpsc::channel(1);
        let bc = TcpBackchannel::new(tx, Duration::from_secs(30));
        // Fill the queue: the next call cannot be queued and says so at once.
        bc.tx
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .try_send(Outgoing::uncharged(vec![]))
            .unwrap();
        let e = bc.call(1, 1, XdrWriter::new()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(bc.pending.lock().unwrap().is_empty());
        rx.try_recv().unwrap();
        bc.close();
        let e = bc.call(1, 1, XdrWriter::new()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotConnected);
        assert!(!bc.deliver(12345, Bytes::new()));
    }

    #[test]
    fn a_waiting_call_fails_when_the_connection_closes() {
        let (tx, mut rx) = mpsc::channel(4);
        let bc = Arc::new(TcpBackchannel::new(tx, Duration::from_secs(30)));
        let caller = {
            let bc = bc.clone();
            std::thread::spawn(move || bc.call_as(7, 1, &CbCred::Sys(sys_cred()), XdrWriter::new()))
        };
        // The call is on the wire (AUTH_SYS as asked); then the connection goes away.
        let rec = rx.blocking_recv().unwrap().rec;
        let Ok(msg::Incoming::Call(c)) = msg::decode(&rec[4..]) else {
            panic!("not a call")
        };
        assert_eq!(
            (c.prog, c.vers, c.cred.flavor),
            (7, CB_VERSION, flavor::AUTH_SYS)
        );
        assert_eq!(auth::decode_authsys(c.cred.body), Some(sys_cred()));
        bc.close();
        let e = caller.join().unwrap().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionAborted);
    }

    fn sys_cred() -> crate::rpc::Cred {
        crate::rpc::Cred {
            flavor: flavor::AUTH_SYS,
            uid: 0,
            gid: 0,
            gids: vec![],
            machine: b"pnfsd".to_vec(),
        }
    }
}
