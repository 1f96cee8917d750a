//! The transport over loopback TCP with a fake [`Program`]: concurrency per connection,
//! reply order, the backchannel, limits and shutdown. No store or NFS state is involved.

use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::rpc::msg::{self, flavor, Incoming, OpaqueAuth};
use crate::rpc::record::{frame, RecordReader};
use crate::rpc::{serve, Program, RpcOptions};
use crate::rpc::{ConnInfo, Cred, RpcSizes};
use crate::xdr::{XdrError, XdrReader, XdrWriter};

/// COMPOUND "arguments" are one command word:
/// 1 = wait (up to 20 s) for a signal, answer 1 if it came, 0 if not;
/// 2 = send the signal; 3 = make a backchannel call and answer its results;
/// 4 = panic; anything else = echo the word.
struct Fake {
    signal_tx: Mutex<std_mpsc::Sender<()>>,
    signal_rx: Mutex<std_mpsc::Receiver<()>>,
    closed: Mutex<Vec<u64>>,
}

impl Program for Fake {
    fn compound(
        &self,
        conn: &ConnInfo,
        _: Cred,
        args: &[u8],
        _: RpcSizes,
    ) -> Result<Vec<u8>, XdrError> {
        let cmd = XdrReader::new(args).u32()?;
        let word = |v: u32| Ok(v.to_be_bytes().to_vec());
        match cmd {
            1 => {
                let rx = self.signal_rx.lock().unwrap();
                word(rx.recv_timeout(Duration::from_secs(20)).is_ok() as u32)
            }
            2 => {
                self.signal_tx.lock().unwrap().send(()).unwrap();
                word(2)
            }
            3 => {
                let mut a = XdrWriter::new();
                a.u32(0xbeef);
                let bc = conn.backchannel.as_ref().unwrap();
                match bc.call(0x4000_0000, 1, a) {
                    Ok(res) => Ok(res),
                    Err(e) => word(e.kind() as u32 + 1000),
                }
            }
            4 => panic!("fake program panics"),
            5 => word(conn.id as u32),
            v => word(v),
        }
    }

    fn connection_closed(&self, conn_id: u64) {
        self.closed.lock().unwrap().push(conn_id);
    }
}

type Started = (
    std::net::SocketAddr,
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
);

async fn start(opts: RpcOptions) -> Started {
    let (addr, stop, h, _) = start_fake(opts).await;
    (addr, stop, h)
}

async fn start_fake(
    opts: RpcOptions,
) -> (
    std::net::SocketAddr,
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
    Arc<Fake>,
) {
    let (tx, rx) = std_mpsc::channel();
    let fake = Arc::new(Fake {
        signal_tx: Mutex::new(tx),
        signal_rx: Mutex::new(rx),
        closed: Mutex::new(Vec::new()),
    });
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (stop_tx, stop_rx) = watch::channel(false);
    let h = tokio::spawn(serve(
        l,
        fake.clone(),
        opts,
        stop_rx,
        Duration::from_secs(10),
    ));
    (addr, stop_tx, h, fake)
}

fn call(xid: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let mut w = XdrWriter::new();
    msg::call_header(
        &mut w,
        xid,
        100003,
        4,
        proc_,
        OpaqueAuth {
            flavor: flavor::AUTH_NONE,
            body: &[],
        },
    );
    w.buf.extend_from_slice(args);
    frame(&w.buf)
}

fn cmd(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

struct Client {
    s: TcpStream,
    r: RecordReader,
    buf: BytesMut,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr) -> Client {
        Client {
            s: TcpStream::connect(addr).await.unwrap(),
            r: RecordReader::new(1 << 20),
            buf: BytesMut::new(),
        }
    }
    async fn send(&mut self, rec: &[u8]) {
        self.s.write_all(rec).await.unwrap();
    }
    /// The next record, or `None` at end of stream.
    async fn recv(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(rec) = self.r.decode(&mut self.buf).unwrap() {
                return Some(rec.to_vec());
            }
            if self.s.read_buf(&mut self.buf).await.unwrap_or(0) == 0 {
                return None;
            }
        }
    }
    /// The next reply as (xid, results); panics unless it is an accepted SUCCESS.
    async fn reply(&mut self) -> (u32, Vec<u8>) {
        let rec = self.recv().await.expect("connection closed");
        let Ok(Incoming::Reply { xid, body }) = msg::decode(&rec) else {
            panic!("not a reply")
        };
        (xid, msg::reply_results(body).unwrap().to_vec())
    }
}

/// Every test is bounded so that a broken transport fails instead of hanging.
async fn bounded<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .expect("test hung")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn null_on_many_connections() {
    bounded(async {
        let (addr, _stop, _) = start(RpcOptions::default()).await;
        let mut tasks = Vec::new();
        for i in 0..16u32 {
            tasks.push(tokio::spawn(async move {
                let mut c = Client::connect(addr).await;
                c.send(&call(i, 0, &[])).await;
                c.send(&call(i + 100, 1, &cmd(7))).await;
                assert_eq!(c.reply().await, (i, vec![]));
                assert_eq!(c.reply().await, (i + 100, cmd(7).to_vec()));
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_run_concurrently_and_reply_out_of_order() {
    bounded(async {
        let (addr, _stop, _) = start(RpcOptions::default()).await;
        let mut c = Client::connect(addr).await;
        // Request 1 blocks until request 3 signals it; request 3 is sent only after request
        // 2's reply arrived. Serial processing would answer request 1 first (after its 20 s
        // wait, with 0) and never get there.
        let mut both = call(1, 1, &cmd(1));
        both.extend(call(2, 1, &cmd(7)));
        c.send(&both).await;
        assert_eq!(c.reply().await, (2, cmd(7).to_vec()));
        c.send(&call(3, 1, &cmd(2))).await;
        let mut rest = vec![c.reply().await, c.reply().await];
        rest.sort();
        assert_eq!(rest, vec![(1, cmd(1).to_vec()), (3, cmd(2).to_vec())]);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backchannel_call_goes_out_and_its_reply_comes_back() {
    bounded(async {
        let (addr, _stop, _) = start(RpcOptions::default()).await;
        let mut c = Client::connect(addr).await;
        c.send(&call(10, 1, &cmd(3))).await;
        let rec = c.recv().await.unwrap();
        let Ok(Incoming::Call(cb)) = msg::decode(&rec) else {
            panic!("expected a callback")
        };
        assert_eq!(
            (cb.prog, cb.vers, cb.proc_, cb.args),
            (0x4000_0000, 1, 1, &cmd(0xbeef)[..])
        );
        // A reply for some other xid is ignored; then the real one.
        let mut w = XdrWriter::new();
        msg::success_header(&mut w, cb.xid.wrapping_add(1));
        c.send(&frame(&w.buf)).await;
        let mut w = XdrWriter::new();
        msg::success_header(&mut w, cb.xid);
        w.u32(0xcafe);
        c.send(&frame(&w.buf)).await;
        assert_eq!(c.reply().await, (10, cmd(0xcafe).to_vec()));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callback_replies_get_through_when_every_permit_is_taken() {
    bounded(async {
        let opts = RpcOptions {
            max_inflight: 1,
            ..RpcOptions::default()
        };
        let (addr, _stop, _) = start(opts).await;
        let mut c = Client::connect(addr).await;
        // The COMPOUND holds the only permit while it waits for our callback reply.
        c.send(&call(12, 1, &cmd(3))).await;
        let rec = c.recv().await.unwrap();
        let Ok(Incoming::Call(cb)) = msg::decode(&rec) else {
            panic!("expected a callback")
        };
        let mut w = XdrWriter::new();
        msg::success_header(&mut w, cb.xid);
        w.u32(0xcafe);
        c.send(&frame(&w.buf)).await;
        assert_eq!(c.reply().await, (12, cmd(0xcafe).to_vec()));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backchannel_call_times_out() {
    bounded(async {
        let opts = RpcOptions {
            callback_timeout: Duration::from_millis(50),
            ..RpcOptions::default()
        };
        let (addr, _stop, _) = start(opts).await;
        let mut c = Client::connect(addr).await;
        c.send(&call(11, 1, &cmd(3))).await;
        let _callback = c.recv().await.unwrap();
        let (xid, res) = c.reply().await;
        assert_eq!(
            (xid, res),
            (11, cmd(std::io::ErrorKind::TimedOut as u32 + 1000).to_vec())
        );
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_panics_get_answers_and_the_connection_lives_on() {
    bounded(async {
        let (addr, _stop, _) = start(RpcOptions::default()).await;
        let mut c = Client::connect(addr).await;
        // COMPOUND arguments the program cannot decode → GARBAGE_ARGS.
        c.send(&call(20, 1, &[])).await;
        let rec = c.recv().await.unwrap();
        let Ok(Incoming::Reply { xid: 20, body }) = msg::decode(&rec) else {
            panic!()
        };
        assert_eq!(msg::reply_results(body), Err(msg::ReplyError::Accepted(4)));
        // A panic in the program → SYSTEM_ERR.
        c.send(&call(21, 1, &cmd(4))).await;
        let rec = c.recv().await.unwrap();
        let Ok(Incoming::Reply { xid: 21, body }) = msg::decode(&rec) else {
            panic!()
        };
        assert_eq!(msg::reply_results(body), Err(msg::ReplyError::Accepted(5)));
        // An unreadable record is dropped silently.
        c.send(&frame(&[1, 2, 3])).await;
        c.send(&call(22, 0, &[])).await;
        assert_eq!(c.reply().await, (22, vec![]));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_record_closes_the_connection() {
    bounded(async {
        let opts = RpcOptions {
            max_record: 4096,
            ..RpcOptions::default()
        };
        let (addr, _stop, _) = start(opts).await;
        let mut c = Client::connect(addr).await;
        c.send(&call(30, 1, &[0; 4096])).await;
        assert_eq!(c.recv().await, None);
        // The server still serves others.
        let mut c = Client::connect(addr).await;
        c.send(&call(31, 0, &[])).await;
        assert_eq!(c.reply().await, (31, vec![]));
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_started_work_then_stops() {
    bounded(async {
        let (addr, stop, handle, fake) = start_fake(RpcOptions::default()).await;
        let mut c = Client::connect(addr).await;
        c.send(&call(40, 1, &cmd(5))).await;
        let (xid, id) = c.reply().await;
        assert_eq!(xid, 40);
        stop.send(true).unwrap();
        handle.await.unwrap();
        assert_eq!(c.recv().await, None);
        assert!(TcpStream::connect(addr).await.is_err());
        let id = u32::from_be_bytes([id[0], id[1], id[2], id[3]]) as u64;
        assert_eq!(*fake.closed.lock().unwrap(), vec![id]);
    })
    .await
}
