//! One TCP connection to the server: RPC calls matched to replies by xid (many may be in
//! flight), and a reader task that also answers the calls the server makes on this connection
//! (the backchannel of a session created with CONN_BACK_CHAN, RFC 8881 §2.10.3.1).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::callback::{self, CbEvent, CbQueue};
use crate::compound::{Compound, Reply};
use crate::error::{ClientError, Result, RpcError};
use crate::rpc::{self, Cred, Message};

type Pending = Arc<Mutex<HashMap<u32, oneshot::Sender<Result<Vec<u8>, RpcError>>>>>;

/// How long a call waits for its reply before the test fails instead of hanging.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Connection {
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    pending: Pending,
    closed: Arc<AtomicBool>,
    next_xid: AtomicU32,
    pub cred: Cred,
    /// Callbacks the server sent on this connection.
    pub callbacks: CbQueue,
    reader: JoinHandle<()>,
    pub peer: SocketAddr,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Connection {
    /// Connects with AUTH_SYS root credentials.
    pub async fn connect(addr: SocketAddr) -> Result<Connection> {
        Connection::connect_with(addr, Cred::Sys(rpc::AuthSys::root())).await
    }

    pub async fn connect_with(addr: SocketAddr, cred: Cred) -> Result<Connection> {
        let stream = TcpStream::connect(addr).await?;
        Connection::over(stream, cred).await
    }

    /// Connects from the local address `from` (any 127.x.y.z works on Linux: the whole
    /// 127/8 is local), so that the server sees another client host (export rules).
    pub async fn connect_from(
        from: std::net::IpAddr,
        addr: SocketAddr,
        cred: Cred,
    ) -> Result<Connection> {
        let sock = if from.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        sock.bind(SocketAddr::new(from, 0))?;
        let stream = sock.connect(addr).await?;
        Connection::over(stream, cred).await
    }

    async fn over(stream: TcpStream, cred: Cred) -> Result<Connection> {
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?;
        let (rd, wr) = stream.into_split();
        let writer = Arc::new(tokio::sync::Mutex::new(wr));
        let pending: Pending = Arc::default();
        let closed = Arc::new(AtomicBool::new(false));
        let callbacks = CbQueue::default();
        let reader = tokio::spawn(read_loop(
            rd,
            writer.clone(),
            pending.clone(),
            closed.clone(),
            callbacks.clone(),
        ));
        // Distinct xids across connections make captures easier to read.
        let seed = std::process::id().wrapping_mul(0x9e37_79b9) ^ peer.port() as u32;
        Ok(Connection {
            writer,
            pending,
            closed,
            next_xid: AtomicU32::new(seed),
            cred,
            callbacks,
            reader,
            peer,
        })
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub fn next_xid(&self) -> u32 {
        self.next_xid.fetch_add(1, Ordering::Relaxed)
    }

    /// Closes our sending side (TCP FIN): the server sees the connection end, as when a client
    /// loses it. Calls in flight fail once the server closes its side.
    pub async fn close(&self) -> Result<()> {
        let mut w = self.writer.lock().await;
        w.shutdown().await?;
        Ok(())
    }

    /// Writes bytes as they are (already framed, or deliberately not).
    pub async fn send_bytes(&self, bytes: &[u8]) -> Result<()> {
        let mut w = self.writer.lock().await;
        w.write_all(bytes).await?;
        w.flush().await?;
        Ok(())
    }

    /// Sends a whole CALL record (header included) framed into fragments of `frag` bytes and
    /// waits for the reply to `xid`.
    pub async fn call_record(&self, xid: u32, record: &[u8], frag: usize) -> Result<Vec<u8>> {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(xid, tx);
        if self.is_closed() {
            lock(&self.pending).remove(&xid);
            return Err(ClientError::Closed);
        }
        if let Err(e) = self.send_bytes(&rpc::frame_fragments(record, frag)).await {
            lock(&self.pending).remove(&xid);
            return Err(e);
        }
        match tokio::time::timeout(CALL_TIMEOUT, rx).await {
            Err(_) => {
                lock(&self.pending).remove(&xid);
                Err(ClientError::Timeout("RPC reply"))
            }
            Ok(Err(_)) => Err(ClientError::Closed),
            Ok(Ok(Err(e))) => Err(ClientError::Rpc(e)),
            Ok(Ok(Ok(body))) => Ok(body),
        }
    }

    /// One RPC call; returns the result body of an accepted, successful reply.
    pub async fn call(&self, prog: u32, vers: u32, proc_: u32, args: &[u8]) -> Result<Vec<u8>> {
        let xid = self.next_xid();
        let rec = rpc::encode_call(xid, prog, vers, proc_, &self.cred, args);
        self.call_record(xid, &rec, usize::MAX).await
    }

    /// NFS NULL procedure.
    pub async fn null(&self) -> Result<()> {
        let body = self
            .call(rpc::NFS_PROGRAM, rpc::NFS_V4, rpc::PROC_NULL, &[])
            .await?;
        if !body.is_empty() {
            return Err(ClientError::Protocol(format!(
                "NULL reply has {} bytes",
                body.len()
            )));
        }
        Ok(())
    }

    /// COMPOUND with pre-encoded COMPOUND4args; returns the raw COMPOUND4res.
    pub async fn compound_bytes(&self, args: &[u8]) -> Result<Vec<u8>> {
        self.call(rpc::NFS_PROGRAM, rpc::NFS_V4, rpc::PROC_COMPOUND, args)
            .await
    }

    /// COMPOUND outside any session (EXCHANGE_ID, CREATE_SESSION, or tests of errors).
    pub async fn compound(&self, minor: u32, c: &Compound) -> Result<Reply> {
        Reply::decode(self.compound_bytes(&c.encode(minor)).await?)
    }

    /// The status of a v4.1 `compound` outside any session: for tests that expect an error.
    pub async fn status(&self, c: &Compound) -> Result<crate::NfsStat> {
        Ok(self.compound(1, c).await?.status)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this lock leaves a consistent map: keep going.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reads one record (all its fragments).
async fn read_record(rd: &mut OwnedReadHalf) -> Result<Vec<u8>> {
    let mut rec = Vec::new();
    loop {
        let mut h = [0u8; 4];
        rd.read_exact(&mut h).await?;
        let (last, len) = rpc::parse_fragment_header(h);
        if rec.len() + len > rpc::MAX_RECORD {
            return Err(ClientError::RecordTooBig(rec.len() + len));
        }
        let at = rec.len();
        rec.resize(at + len, 0);
        rd.read_exact(&mut rec[at..]).await?;
        if last {
            return Ok(rec);
        }
    }
}

async fn read_loop(
    mut rd: OwnedReadHalf,
    writer: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    pending: Pending,
    closed: Arc<AtomicBool>,
    callbacks: CbQueue,
) {
    while let Ok(rec) = read_record(&mut rd).await {
        match rpc::decode_message(&rec) {
            Ok(Message::Reply { xid, result }) => {
                if let Some(tx) = lock(&pending).remove(&xid) {
                    let _ = tx.send(result);
                }
            }
            Ok(Message::Call(call)) => {
                let reply = match call.proc_ {
                    rpc::CB_PROC_NULL => {
                        callbacks.push(CbEvent::Null);
                        rpc::encode_success_reply(call.xid, &[])
                    }
                    rpc::CB_PROC_COMPOUND => match callback::answer(&call.args, &callbacks) {
                        Some(body) => rpc::encode_success_reply(call.xid, &body),
                        None => rpc::encode_error_reply(call.xid, 4),
                    },
                    _ => rpc::encode_error_reply(call.xid, 3),
                };
                let mut w = writer.lock().await;
                if w.write_all(&rpc::frame(&reply)).await.is_err() {
                    break;
                }
            }
            // Not an RPC message: the stream cannot be trusted any more.
            Err(_) => break,
        }
    }
    closed.store(true, Ordering::SeqCst);
    lock(&pending).clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callback::RecallWhat;
    use pnfsd::xdr::{XdrReader, XdrWriter};
    use tokio::net::TcpListener;

    async fn read_rec(s: &mut TcpStream) -> Vec<u8> {
        let mut rec = Vec::new();
        loop {
            let mut h = [0u8; 4];
            s.read_exact(&mut h).await.unwrap();
            let (last, len) = rpc::parse_fragment_header(h);
            let at = rec.len();
            rec.resize(at + len, 0);
            s.read_exact(&mut rec[at..]).await.unwrap();
            if last {
                return rec;
            }
        }
    }

    /// A fake server: answers our calls out of order, and makes a CB_COMPOUND call of its own
    /// on the same connection, which the reader task must answer.
    #[tokio::test]
    async fn replies_match_by_xid_and_callbacks_are_answered() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let peer = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let a = read_rec(&mut s).await;
            let b = read_rec(&mut s).await;
            let xa = u32::from_be_bytes([a[0], a[1], a[2], a[3]]);
            let xb = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
            // A callback first: CB_SEQUENCE + CB_LAYOUTRECALL(ALL), in two fragments.
            let mut w = XdrWriter::new();
            w.string(b"");
            w.u32(1);
            w.u32(0);
            w.u32(2);
            w.u32(crate::callback::cbop::CB_SEQUENCE);
            w.opaque_fixed(&[3; 16]);
            w.u32(1);
            w.u32(0);
            w.u32(0);
            w.bool(false);
            w.u32(0);
            w.u32(crate::callback::cbop::CB_LAYOUTRECALL);
            w.u32(3);
            w.u32(3);
            w.bool(false);
            w.u32(3);
            let call = rpc::encode_call(777, 0x4000_0000, 1, 1, &rpc::Cred::None, &w.buf);
            s.write_all(&rpc::frame_fragments(&call, 10)).await.unwrap();
            let reply = read_rec(&mut s).await;
            // Then the replies, the second call's first.
            s.write_all(&rpc::frame(&rpc::encode_success_reply(xb, b"bbbb")))
                .await
                .unwrap();
            s.write_all(&rpc::frame(&rpc::encode_error_reply(xa, 4)))
                .await
                .unwrap();
            reply
        });
        let c = Arc::new(Connection::connect(addr).await.unwrap());
        let (c1, c2) = (c.clone(), c.clone());
        let t1 = tokio::spawn(async move { c1.call(1, 1, 1, b"aaaa").await });
        // Make the order of the two calls on the wire deterministic.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t2 = tokio::spawn(async move { c2.call(1, 1, 1, b"bbbb").await });
        assert!(matches!(
            t1.await.unwrap(),
            Err(ClientError::Rpc(RpcError::GarbageArgs))
        ));
        assert_eq!(t2.await.unwrap().unwrap(), b"bbbb");

        let reply = peer.await.unwrap();
        match rpc::decode_message(&reply).unwrap() {
            Message::Reply {
                xid: 777,
                result: Ok(body),
            } => {
                let mut r = XdrReader::new(&body);
                assert_eq!(r.u32().unwrap(), 0, "CB_COMPOUND status");
                r.string(16).unwrap();
                assert_eq!(r.u32().unwrap(), 2, "two results");
            }
            m => panic!("{m:?}"),
        }
        let ev = c
            .callbacks
            .wait_for(Duration::from_secs(5), |e| {
                matches!(e, CbEvent::LayoutRecall { .. })
            })
            .await
            .unwrap();
        assert!(matches!(
            ev,
            CbEvent::LayoutRecall {
                layout_type: 3,
                what: RecallWhat::All,
                ..
            }
        ));
        // The server went away: calls fail instead of hanging.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(matches!(
            c.call(1, 1, 1, b"").await,
            Err(ClientError::Closed) | Err(ClientError::Io(_))
        ));
    }
}
