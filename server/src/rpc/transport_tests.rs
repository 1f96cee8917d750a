//! The transport over loopback TCP with a fake [`Program`]: concurrency per connection,
//! reply order, the backchannel, limits and shutdown. No store or NFS state is involved.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

use crate::rpc::msg::{self, flavor, Incoming, OpaqueAuth};
use crate::rpc::record::{frame, RecordReader};
use crate::rpc::{serve, Program, RpcOptions};
use crate::rpc::{ConnInfo, Cred, RpcSizes};
use crate::xdr::{XdrError, XdrReader, XdrWriter};

/// COMPOUND "arguments" are one command word:
/// 1 = wait (up to 20 s) for a signal, answer 1 if it came, 0 if not;
/// 2 = send the signal; 3 = make a backchannel call and answer its results;
/// 4 = panic; 5 = answer the connection id; 6 = answer [`BIG_REPLY`] bytes; 7 = run for
/// [`SLOW`] as one of the abusers; 8 = run for [`SLOW`] as the well-behaved client, noting
/// how many abusers had started before it; 9 = bind the connection to a "session";
/// anything else = echo the word.
#[derive(Default)]
struct Fake {
    signal_tx: Mutex<Option<std_mpsc::Sender<()>>>,
    signal_rx: Mutex<Option<std_mpsc::Receiver<()>>>,
    closed: Mutex<Vec<u64>>,
    /// Replies of [`BIG_REPLY`] bytes produced.
    big_replies: AtomicUsize,
    /// COMPOUNDs running now, and the most ever at once.
    running: AtomicUsize,
    max_running: AtomicUsize,
    /// Abusers' COMPOUNDs started so far, and that count when the well-behaved one started.
    abuser_starts: AtomicUsize,
    good_started_after: Mutex<Option<usize>>,
    in_session: Mutex<HashSet<u64>>,
}

const BIG_REPLY: usize = 30 << 10;
const SLOW: Duration = Duration::from_millis(20);

impl Fake {
    fn slow(&self) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(SLOW);
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
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
                let rx = rx.as_ref().unwrap();
                word(rx.recv_timeout(Duration::from_secs(20)).is_ok() as u32)
            }
            2 => {
                let tx = self.signal_tx.lock().unwrap();
                tx.as_ref().unwrap().send(()).unwrap();
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
            6 => {
                self.big_replies.fetch_add(1, Ordering::SeqCst);
                Ok(vec![6; BIG_REPLY])
            }
            7 => {
                self.abuser_starts.fetch_add(1, Ordering::SeqCst);
                self.slow();
                word(7)
            }
            8 => {
                let n = self.abuser_starts.load(Ordering::SeqCst);
                *self.good_started_after.lock().unwrap() = Some(n);
                self.slow();
                word(8)
            }
            9 => {
                self.in_session.lock().unwrap().insert(conn.id);
                word(9)
            }
            v => word(v),
        }
    }

    fn connection_closed(&self, conn_id: u64) {
        self.closed.lock().unwrap().push(conn_id);
    }

    fn connection_in_session(&self, conn_id: u64) -> bool {
        self.in_session.lock().unwrap().contains(&conn_id)
    }
}

type Started = (
    std::net::SocketAddr,
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
);

/// The transport's defaults for sessions of 64 slots (the NFS layer's count).
fn test_options() -> RpcOptions {
    RpcOptions::for_session_slots(64)
}

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
        signal_tx: Mutex::new(Some(tx)),
        signal_rx: Mutex::new(Some(rx)),
        ..Fake::default()
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
        let (addr, _stop, _) = start(test_options()).await;
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
        let (addr, _stop, _) = start(test_options()).await;
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
        let (addr, _stop, _) = start(test_options()).await;
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
            ..test_options()
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
            ..test_options()
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
        let (addr, _stop, _) = start(test_options()).await;
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
            ..test_options()
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
        let (addr, stop, handle, fake) = start_fake(test_options()).await;
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

/// Polls `f` until it stops changing (two equal readings `every` apart) and returns it.
async fn settled(every: Duration, f: impl Fn() -> usize) -> usize {
    let mut last = f();
    loop {
        tokio::time::sleep(every).await;
        let now = f();
        if now == last {
            return now;
        }
        last = now;
    }
}

/// A peer that sends requests and never reads the replies stops being read once its reply
/// budget and its in-flight requests are spent, instead of having every reply queued
/// (unbounded, 1,024 queued replies + 256 in flight per connection would be ~38 MB of 30 KiB
/// replies). Reading again resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_that_never_reads_stops_being_read() {
    bounded(async {
        let opts = RpcOptions {
            max_reply_queued: 256 << 10,
            max_inflight: 8,
            ..test_options()
        };
        let (addr, _stop, _, fake) = start_fake(opts).await;
        // A small receive buffer, so that the kernel holds little of what the server sends.
        let sock = TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(64 << 10).unwrap();
        let (mut rd, mut wr) = sock.connect(addr).await.unwrap().into_split();
        const N: usize = 3000;
        let sender = tokio::spawn(async move {
            for i in 0..N as u32 {
                wr.write_all(&call(i, 1, &cmd(6))).await.unwrap();
            }
            wr
        });
        let made = settled(Duration::from_millis(400), || {
            fake.big_replies.load(Ordering::SeqCst)
        })
        .await;
        // The kernel's share (the server's send buffer: at most net.ipv4.tcp_wmem's maximum,
        // 4 MiB by default; our small receive buffer; the writer's 64 KiB) plus the budget and
        // the replies of the requests in flight.
        let bound = (4 << 20) + (1 << 20) + (256 << 10) + 8 * BIG_REPLY;
        assert!(
            made * BIG_REPLY <= bound,
            "{made} replies of {BIG_REPLY} bytes made for a peer that reads nothing"
        );
        assert!(made < N);
        // The peer reads: the connection resumes and every request is answered.
        let mut r = RecordReader::new(1 << 20);
        let mut buf = BytesMut::new();
        let mut got = 0;
        while got < N {
            while let Some(rec) = r.decode(&mut buf).unwrap() {
                assert_eq!(rec.len(), msg::SUCCESS_HEADER_LEN + BIG_REPLY);
                got += 1;
            }
            if got < N {
                assert!(
                    rd.read_buf(&mut buf).await.unwrap() > 0,
                    "closed after {got}"
                );
            }
        }
        sender.await.unwrap();
        assert_eq!(fake.big_replies.load(Ordering::SeqCst), N);
    })
    .await
}

/// Eight connections keep 64 slow COMPOUNDs each in flight. The blocking threads they get
/// together stay within `max_blocking` (not tokio's default of 512), and a ninth
/// connection's one request waits for one turn of each, not behind all of their requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_threads_are_bounded_and_taken_in_turns() {
    bounded(async {
        const ABUSERS: usize = 8;
        const EACH: u32 = 64;
        let opts = RpcOptions {
            max_blocking: 4,
            ..test_options()
        };
        let (addr, _stop, _, fake) = start_fake(opts).await;
        let mut abusers = Vec::new();
        for a in 0..ABUSERS as u32 {
            abusers.push(tokio::spawn(async move {
                let mut c = Client::connect(addr).await;
                let mut all = Vec::new();
                for i in 0..EACH {
                    all.extend(call(a * 1000 + i, 1, &cmd(7)));
                }
                c.send(&all).await;
                for _ in 0..EACH {
                    assert_eq!(c.reply().await.1, cmd(7).to_vec());
                }
            }));
        }
        // Every abuser has requests waiting for a thread.
        while fake.abuser_starts.load(Ordering::SeqCst) < 2 * ABUSERS {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut good = Client::connect(addr).await;
        let before = fake.abuser_starts.load(Ordering::SeqCst);
        good.send(&call(1, 1, &cmd(8))).await;
        assert_eq!(good.reply().await.1, cmd(8).to_vec());
        let after = fake.good_started_after.lock().unwrap().unwrap();
        for a in abusers {
            a.await.unwrap();
        }
        let max = fake.max_running.load(Ordering::SeqCst);
        assert!(max <= 4, "{max} COMPOUNDs ran at once");
        // One turn per abusive connection, and those already handed a thread.
        assert!(
            after - before <= ABUSERS + 4,
            "{} abusive COMPOUNDs started while the well-behaved one waited",
            after - before
        );
    })
    .await
}

/// A connection with no session that receives nothing is closed after the idle timeout;
/// one bound to a session, or one that keeps talking, stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_without_a_session_are_closed() {
    bounded(async {
        let opts = RpcOptions {
            idle_timeout: Duration::from_millis(300),
            ..test_options()
        };
        let (addr, _stop, _) = start(opts).await;
        let t0 = std::time::Instant::now();
        let mut silent = Client::connect(addr).await;
        let mut bound = Client::connect(addr).await;
        bound.send(&call(1, 1, &cmd(9))).await;
        assert_eq!(bound.reply().await.1, cmd(9).to_vec());
        let mut chatty = Client::connect(addr).await;
        let talk = tokio::spawn(async move {
            for i in 0..10 {
                chatty.send(&call(i, 0, &[])).await;
                assert_eq!(chatty.reply().await, (i, vec![]));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        assert_eq!(silent.recv().await, None);
        assert!(t0.elapsed() >= Duration::from_millis(250));
        talk.await.unwrap();
        // One second after its last request, the session's connection still answers.
        bound.send(&call(2, 0, &[])).await;
        assert_eq!(bound.reply().await, (2, vec![]));
    })
    .await
}

/// At the connection cap the connection idle the longest with no session makes room for
/// the new one; when every connection has a session the new one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_an_idle_connection_without_a_session_makes_room() {
    bounded(async {
        let opts = RpcOptions {
            max_connections: 3,
            ..test_options()
        };
        let (addr, _stop, _) = start(opts).await;
        async fn null(c: &mut Client, xid: u32) {
            c.send(&call(xid, 0, &[])).await;
            assert_eq!(c.reply().await, (xid, vec![]));
        }
        let mut a = Client::connect(addr).await;
        a.send(&call(1, 1, &cmd(9))).await;
        a.reply().await;
        let mut b = Client::connect(addr).await;
        null(&mut b, 2).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut c = Client::connect(addr).await;
        null(&mut c, 3).await;
        let mut d = Client::connect(addr).await;
        null(&mut d, 4).await;
        // b was idle the longest with no session.
        assert_eq!(b.recv().await, None);
        null(&mut a, 5).await;
        null(&mut c, 6).await;
        // Now every connection is in a session: a newcomer is refused.
        for (conn, xid) in [(&mut c, 7), (&mut d, 8)] {
            conn.send(&call(xid, 1, &cmd(9))).await;
            conn.reply().await;
        }
        let mut e = Client::connect(addr).await;
        assert_eq!(e.recv().await, None);
        null(&mut a, 9).await;
        null(&mut d, 10).await;
    })
    .await
}

/// Records that break the transport's size limit close their connection with one WARN line
/// per 10 s, not one each (a flood can send thousands).
#[tokio::test]
async fn refused_oversize_records_are_logged_once_per_interval() {
    // This runtime has one thread: the connections' tasks log through this subscriber.
    let (log, _g) = crate::log_capture::capture();
    bounded(async {
        let opts = RpcOptions {
            max_record: 4096,
            ..test_options()
        };
        let (addr, _stop, _) = start(opts).await;
        for i in 0..20 {
            let mut c = Client::connect(addr).await;
            c.send(&call(i, 1, &[0; 4096])).await;
            assert_eq!(c.recv().await, None);
        }
    })
    .await;
    let text = log.text();
    let lines = text.matches("closing connection").count();
    assert_eq!(lines, 1, "{text}");
}
