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
use tokio::sync::{mpsc, watch, Semaphore};

use crate::rpc::msg::{self, flavor, AcceptError, OpaqueAuth};
use crate::rpc::program::{self, Action};
use crate::rpc::record::RecordReader;
use crate::rpc::{auth, Backchannel, CbCred, Program, RpcOptions};
use crate::rpc::{ConnInfo, RpcSizes};
use crate::xdr::XdrWriter;

/// NFSv4 callback program version (RFC 8881 §20, `NFS_CB` = 1); procedure 1 is CB_COMPOUND.
pub const CB_VERSION: u32 = 1;

/// Replies and callbacks queued for the writer of one connection.
const REPLY_QUEUE: usize = 1024;

type Waiter = std_mpsc::SyncSender<Result<Bytes, msg::ReplyError>>;

/// The backchannel of one connection.
#[derive(Debug)]
pub struct TcpBackchannel {
    /// The connection's writer; `None` once the connection is closing.
    tx: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
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
    pub fn new(tx: mpsc::Sender<Vec<u8>>, timeout: Duration) -> Self {
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
            Some(tx) => tx.try_send(rec).map_err(|e| match e {
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

/// Writes records as they come; flushes when nothing else is queued.
async fn write_loop(wr: tokio::net::tcp::OwnedWriteHalf, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut wr = BufWriter::with_capacity(64 << 10, wr);
    while let Some(rec) = rx.recv().await {
        if wr.write_all(&rec).await.is_err() {
            return;
        }
        while let Ok(rec) = rx.try_recv() {
            if wr.write_all(&rec).await.is_err() {
                return;
            }
        }
        if wr.flush().await.is_err() {
            return;
        }
    }
    let _ = wr.shutdown().await;
}

/// Serves one connection until the peer closes it, it breaks a rule of the transport, or
/// `shutdown` turns true. Returns after every request it started has been answered.
pub async fn serve_connection<P: Program>(
    stream: TcpStream,
    id: u64,
    peer: SocketAddr,
    prog: Arc<P>,
    opts: Arc<RpcOptions>,
    mut shutdown: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let (mut rd, wr) = stream.into_split();
    // Bounded: a peer that sends requests without reading replies stops being read once this
    // many replies wait (backpressure instead of unbounded memory).
    let (tx, rx) = mpsc::channel(REPLY_QUEUE);
    let writer = tokio::spawn(write_loop(wr, rx));
    let bc = Arc::new(TcpBackchannel::new(tx.clone(), opts.callback_timeout));
    let conn = Arc::new(ConnInfo {
        id,
        peer,
        backchannel: Some(bc.clone() as Arc<dyn Backchannel>),
    });
    let max_inflight = opts
        .max_inflight
        .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
    let inflight = Arc::new(Semaphore::new(max_inflight));
    let mut reader = RecordReader::new(opts.max_record);
    let mut buf = BytesMut::with_capacity(64 << 10);
    'conn: loop {
        loop {
            let rec = match reader.decode(&mut buf) {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(conn = id, %peer, "closing connection: {e}");
                    break 'conn;
                }
            };
            match program::classify(&rec, opts.auth) {
                Action::Reply(r) => {
                    if tx.send(r).await.is_err() {
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
                    let args = rec.slice_ref(args);
                    let sizes = RpcSizes {
                        request_len: rec.len(),
                        reply_header_len: msg::SUCCESS_HEADER_LEN,
                    };
                    let (prog, conn, tx) = (prog.clone(), conn.clone(), tx.clone());
                    tokio::spawn(async move {
                        let job = tokio::task::spawn_blocking(move || {
                            prog.compound(&conn, cred, &args, sizes)
                        });
                        let reply = match job.await {
                            Ok(Ok(res)) => program::compound_reply(xid, Ok(&res)),
                            Ok(Err(_)) => {
                                program::compound_reply(xid, Err(AcceptError::GarbageArgs))
                            }
                            // The program panicked outside the dispatcher's own guard.
                            Err(_) => program::compound_reply(xid, Err(AcceptError::SystemErr)),
                        };
                        let _ = tx.send(reply).await;
                        drop(permit);
                    });
                }
            }
        }
        // Read at least what the current fragment still needs, in chunks of 64 KiB or more.
        buf.reserve(
            reader
                .wanted(buf.len())
                .clamp(64 << 10, opts.max_record.max(64 << 10)),
        );
        tokio::select! {
            n = rd.read_buf(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = shutdown.changed() => break,
        }
    }
    // Nothing more will be read: callbacks waiting for a reply fail now rather than at their
    // timeout. Then the requests already started finish and are answered, and we close.
    bc.close();
    let _ = inflight.acquire_many(max_inflight as u32).await;
    drop(tx);
    drop(conn);
    let _ = writer.await;
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
            .try_send(vec![])
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
        let rec = rx.blocking_recv().unwrap();
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
