//! Sockets and digests (docs/design.md, house rule 9): reading whole PDUs off a TCP stream
//! with the header checked before the body is read, and the sending side of a connection
//! (`OutTx`): senders write directly when the socket takes it, a writer task drains the
//! rest in order; or, once the writer task is detached (a connection served by a thread of
//! its own), every sender writes with blocking writes, vectored: the data of a C2HData
//! leaves from where it lies.

mod sys;

use crate::namespace::lock;
use crate::pdu::{
    validate_common, CommonHeader, DecodeError, Digests, Fatal, Pdu, PduType, Rules, TermReq,
    COMMON_LEN, TERM_MAX_DATA,
};
use bytes::{Bytes, BytesMut};
use std::io::{self, IoSlice, Write};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::TcpStream;
use tokio::sync::Notify;

/// Why reading a PDU stopped.
#[derive(Debug)]
pub(crate) enum RecvError {
    /// Clean end of stream between PDUs.
    Closed,
    Io(io::Error),
    /// Protocol violation: send a TermReq with `header` as its data, then close.
    Fatal {
        fatal: Fatal,
        header: Vec<u8>,
    },
    /// Bad data digest of one command's data.
    DataDigest {
        pdu_type: PduType,
        cccid: u16,
        ttag: u16,
        datal: u32,
    },
}

/// The receive buffer of a connection and the PDU parser over it: one receive takes whatever
/// has arrived (often many PDUs at queue depth > 1), and the PDUs are then parsed out of the
/// buffer without further syscalls. Data of a PDU (in-capsule, H2C/C2HData) is a slice of
/// the buffer, not a copy.
pub(crate) struct PduBuf {
    pub rules: Rules,
    buf: BytesMut,
}

/// Free space asked of each receive (and the buffer's initial size).
pub(crate) const RECV_CHUNK: usize = 256 * 1024;

impl PduBuf {
    pub fn new(rules: Rules) -> Self {
        PduBuf {
            rules,
            buf: BytesMut::with_capacity(RECV_CHUNK),
        }
    }

    /// Makes room for a receive (at least a quarter of RECV_CHUNK free).
    fn reserve(&mut self) {
        if self.buf.capacity() - self.buf.len() < RECV_CHUNK / 4 {
            self.buf.reserve(RECV_CHUNK);
        }
    }

    /// The buffer itself, for a receive that writes into its spare capacity directly
    /// (`tgt/ring/`), after `reserve`.
    pub fn raw(&mut self) -> &mut BytesMut {
        self.reserve();
        &mut self.buf
    }

    /// The buffer as it is (a receive into it has completed: nothing may move it first).
    pub fn raw_as_is(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Whether the next PDU is already buffered whole (reading it will not wait on the peer).
    pub fn has_buffered_pdu(&self) -> bool {
        let b = &self.buf[..];
        CommonHeader::parse(b).is_ok_and(|h| h.plen as usize <= b.len())
    }

    /// The next PDU if the buffer holds it whole (`None`: receive more).
    pub fn parse(&mut self) -> Option<Result<Pdu, RecvError>> {
        if self.buf.len() < COMMON_LEN {
            return None;
        }
        // PLEN is trusted only after the common header passed (it bounds the buffer).
        let h = match validate_common(&self.buf[..COMMON_LEN], &self.rules) {
            Ok(h) => h,
            Err(fatal) => {
                return Some(Err(RecvError::Fatal {
                    fatal,
                    header: self.buf[..COMMON_LEN].to_vec(),
                }))
            }
        };
        let plen = h.plen as usize;
        if self.buf.len() < plen {
            self.buf.reserve(plen - self.buf.len());
            return None;
        }
        let pdu = self.buf.split_to(plen).freeze();
        Some(Pdu::decode_shared(&pdu, &self.rules).map_err(|e| match e {
            DecodeError::Fatal(fatal) => {
                let n = (h.hlen as usize).min(TERM_MAX_DATA).min(pdu.len());
                RecvError::Fatal {
                    fatal,
                    header: pdu[..n].to_vec(),
                }
            }
            DecodeError::DataDigest {
                pdu_type,
                cccid,
                ttag,
                datal,
            } => RecvError::DataDigest {
                pdu_type,
                cccid,
                ttag,
                datal,
            },
        }))
    }
}

/// A `PduBuf` filled from an async stream. `read` is cancel-safe (all state is in the
/// buffer), so a connection can wait for a PDU and for I/O completions in one `select!`.
pub(crate) struct PduReader<R> {
    r: R,
    pub b: PduBuf,
}

impl<R: AsyncRead + Unpin> PduReader<R> {
    pub fn new(r: R, rules: Rules) -> Self {
        PduReader {
            r,
            b: PduBuf::new(rules),
        }
    }

    pub async fn read(&mut self) -> Result<Pdu, RecvError> {
        loop {
            if let Some(r) = self.b.parse() {
                return r;
            }
            self.b.reserve();
            match self.r.read_buf(&mut self.b.buf).await {
                Ok(0) if self.b.buf.is_empty() => return Err(RecvError::Closed),
                Ok(0) => return Err(RecvError::Io(io::ErrorKind::UnexpectedEof.into())),
                Ok(_) => {}
                Err(e) => return Err(RecvError::Io(e)),
            }
        }
    }

    pub fn has_buffered_pdu(&self) -> bool {
        self.b.has_buffered_pdu()
    }

    /// The stream and the buffer (a connection that moves to its own thread takes both).
    pub fn into_parts(self) -> (R, PduBuf) {
        (self.r, self.b)
    }
}

/// What the writer is asked to do.
pub(crate) enum Out {
    Frame(Vec<u8>),
    /// Write everything queued so far, then shut the socket down.
    Close,
}

/// The connection is closed (or closing): nothing more is sent.
#[derive(Debug)]
pub(crate) struct SendClosed;

/// The sending side of a connection. Frames are appended to one buffer under a mutex and
/// written by whoever sends while no write is pending: the caller itself, with one
/// non-blocking write(2) on the socket (a duplicate of its descriptor), so a completion
/// reaches the wire from the thread that produced it without waking another task. Only
/// what the socket does not take at once (its send buffer is full) is left to the writer
/// task, which waits for the socket to drain; while it has data pending, later frames queue
/// behind it in the same buffer, so the bytes keep their order and coalesce into one write.
/// Once the writer task is detached, a data PDU's data is not copied into the buffer: it is
/// kept where it lies (a Read's buffer, as `Bytes`) and the buffer and the data leave
/// together in one `sendmsg` (`WState::write_blocking`).
pub(crate) struct OutTx {
    sh: Arc<Shared>,
}

struct Shared {
    st: Mutex<WState>,
    /// The same socket as the writer task's half (dup(2)); non-blocking like it, until the
    /// writer task is detached (`detach_writer`), blocking after.
    direct: std::net::TcpStream,
    wake: Notify,
    /// The writer task finished a write (or the connection died): `wait_below` checks again.
    drained: Notify,
    /// The writer task, until it is detached.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

struct WState {
    buf: Vec<u8>,
    /// Blocking mode: the data of the PDUs in `buf`, not copied into it (`encode_vectored`):
    /// each goes into the stream where `buf` had the length given, in order.
    segs: Vec<(usize, Bytes)>,
    /// The bytes of `segs`.
    seg_bytes: usize,
    /// Bytes the writer task took out of `buf` and is writing.
    writing: usize,
    /// Blocking mode: `hold_pdus` writes once `buf` and the data segments it points at
    /// (`seg_bytes`) hold this much (`set_hold_limit`).
    hold_limit: usize,
    /// The writer task owns the socket until `buf` is empty again.
    active: bool,
    close: bool,
    /// A write failed: the connection is gone.
    dead: bool,
    senders: usize,
    /// The writer task is asked to end, leaving the socket to the senders.
    detach: bool,
    /// No writer task: every sender writes whatever is queued with blocking writes.
    blocking: bool,
}

impl Clone for OutTx {
    fn clone(&self) -> Self {
        lock(&self.sh.st).senders += 1;
        OutTx {
            sh: self.sh.clone(),
        }
    }
}

impl Drop for OutTx {
    fn drop(&mut self) {
        let mut st = lock(&self.sh.st);
        st.senders -= 1;
        if st.senders == 0 && st.blocking {
            self.close_blocking(&mut st);
            return;
        }
        // The last sender gone: the writer flushes what is queued and shuts the socket.
        if st.senders == 0 && !st.active {
            st.active = true;
            drop(st);
            self.sh.wake.notify_one();
        }
    }
}

impl OutTx {
    pub fn send(&self, out: Out) -> Result<(), SendClosed> {
        match out {
            Out::Frame(f) => self.with_buf(true, |st| st.buf.extend_from_slice(&f)),
            Out::Close => {
                let mut st = lock(&self.sh.st);
                if st.dead || st.close {
                    return Err(SendClosed);
                }
                if st.blocking {
                    self.close_blocking(&mut st);
                    return Ok(());
                }
                st.close = true;
                if !st.active {
                    st.active = true;
                    drop(st);
                    self.sh.wake.notify_one();
                }
                Ok(())
            }
        }
    }

    /// Encodes PDUs straight into the send buffer (a C2HData and its CapsuleResp go out in
    /// one write).
    pub fn send_pdus(&self, pdus: &[&Pdu], dg: Digests) -> Result<(), SendClosed> {
        self.with_buf(true, |st| st.encode(pdus, dg))
    }

    /// Like `send_pdus`, but leaves the write to the writer task, which first lets the
    /// other runnable tasks of its worker queue their PDUs (`yield_now`): commands submitted
    /// in one burst (e.g. by the tasks one received batch of completions woke) leave in one
    /// write instead of one each. For callers on a runtime worker with other commands in
    /// flight; a lone command is better sent directly.
    pub fn send_pdus_batched(&self, pdus: &[&Pdu], dg: Digests) -> Result<(), SendClosed> {
        self.with_buf(false, |st| st.encode(pdus, dg))
    }

    /// Appends PDUs without writing them yet: the caller has more PDUs to answer right away
    /// and calls `flush` after the last (or a later direct send takes them along).
    pub fn hold_pdus(&self, pdus: &[&Pdu], dg: Digests) -> Result<(), SendClosed> {
        let mut st = lock(&self.sh.st);
        if st.dead || st.close {
            return Err(SendClosed);
        }
        st.encode(pdus, dg);
        let full = st.blocking && st.buf.len() + st.seg_bytes >= st.hold_limit;
        drop(st);
        if full {
            // Held answers are bounded too: written now, with a blocking write that waits
            // for the peer to read (the queue thread stops receiving meanwhile).
            return self.flush();
        }
        Ok(())
    }

    /// Bytes accepted and not yet written to the socket (in the buffer or being written).
    pub fn queued(&self) -> usize {
        let st = lock(&self.sh.st);
        st.buf.len() + st.seg_bytes + st.writing
    }

    /// Waits until fewer than `limit` bytes are queued (or the connection is gone): the
    /// peer has read enough of its answers (`Limits::max_send_queued_per_connection`).
    pub async fn wait_below(&self, limit: usize) {
        loop {
            // Made before the check: a write that ends in between still wakes it.
            let drained = self.sh.drained.notified();
            {
                let st = lock(&self.sh.st);
                if st.dead || st.buf.len() + st.seg_bytes + st.writing < limit {
                    return;
                }
            }
            drained.await;
        }
    }

    /// Once the writer task is detached, `hold_pdus` writes as soon as this much is held.
    pub fn set_hold_limit(&self, limit: usize) {
        lock(&self.sh.st).hold_limit = limit;
    }

    /// Writes whatever `hold_pdus` left in the buffer.
    pub fn flush(&self) -> Result<(), SendClosed> {
        self.with_buf(true, |_| {})
    }

    /// Ends the writer task and leaves the socket to the senders, which from then on write
    /// with blocking writes (the socket is made blocking): for a connection served by a
    /// thread of its own (`tgt/conn/recv_ring.rs` `run_thread`), whose socket must not stay
    /// registered with the runtime's reactor: every PDU that arrives would wake a runtime
    /// worker for nothing. Only what the senders could not write before is written first.
    pub async fn detach_writer(&self) -> io::Result<()> {
        {
            let mut st = lock(&self.sh.st);
            st.detach = true;
            st.active = true;
        }
        self.sh.wake.notify_one();
        let task = lock(&self.sh.task).take();
        if let Some(t) = task {
            let _ = t.await;
        }
        let mut st = lock(&self.sh.st);
        if st.dead {
            return Err(io::ErrorKind::NotConnected.into());
        }
        self.sh.direct.set_nonblocking(false)?;
        st.blocking = true;
        st.active = false;
        drop(st);
        self.flush().map_err(|_| io::ErrorKind::NotConnected.into())
    }

    /// Blocking mode: writes what is queued, then shuts the sending side down.
    fn close_blocking(&self, st: &mut WState) {
        if !st.dead {
            let _ = st.write_blocking(&self.sh.direct);
            let _ = self.sh.direct.shutdown(std::net::Shutdown::Write);
        }
        st.buf.clear();
        st.segs.clear();
        st.seg_bytes = 0;
        st.close = true;
        st.dead = true;
    }

    fn with_buf(&self, direct: bool, f: impl FnOnce(&mut WState)) -> Result<(), SendClosed> {
        let mut st = lock(&self.sh.st);
        if st.dead || st.close {
            return Err(SendClosed);
        }
        f(&mut st);
        if st.blocking {
            // No writer task: the caller writes, however long the peer takes to read (the
            // socket shut down by a stop ends the wait).
            let r = st.write_blocking(&self.sh.direct);
            if r.is_err() {
                st.dead = true;
                return Err(SendClosed);
            }
            return Ok(());
        }
        if st.active {
            return Ok(()); // the writer task will write it after what it holds
        }
        if !direct {
            st.active = true;
            drop(st);
            self.sh.wake.notify_one();
            return Ok(());
        }
        let mut done = 0;
        while done < st.buf.len() {
            match (&self.sh.direct).write(&st.buf[done..]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    st.dead = true;
                    st.buf.clear();
                    return Err(SendClosed);
                }
            }
        }
        if done == st.buf.len() {
            st.buf.clear();
            return Ok(());
        }
        st.buf.drain(..done);
        st.active = true;
        drop(st);
        self.sh.wake.notify_one();
        Ok(())
    }
}

impl WState {
    /// Appends PDUs to what is queued: in blocking mode their data stays where it is
    /// (`segs`), else it is copied into `buf` (the writer task writes one buffer).
    fn encode(&mut self, pdus: &[&Pdu], dg: Digests) {
        for p in pdus {
            if !self.blocking {
                p.encode(dg, &mut self.buf);
            } else if let Some((at, data)) = p.encode_vectored(dg, &mut self.buf) {
                self.seg_bytes += data.len();
                self.segs.push((at, data));
            }
        }
    }

    /// Blocking mode: writes everything queued, `buf` with the data of `segs` spliced in
    /// (one `sendmsg` of them all, as long as the socket takes it whole), and empties both.
    fn write_blocking(&mut self, sock: &std::net::TcpStream) -> io::Result<()> {
        let r = if self.segs.is_empty() {
            let mut s = sock;
            s.write_all(&self.buf)
        } else {
            let mut iov = Vec::with_capacity(2 * self.segs.len() + 1);
            let mut at = 0;
            for (o, d) in &self.segs {
                iov.push(IoSlice::new(&self.buf[at..*o]));
                iov.push(IoSlice::new(d));
                at = *o;
            }
            iov.push(IoSlice::new(&self.buf[at..]));
            sys::send_all_vectored(sock, &mut iov)
        };
        self.buf.clear();
        self.segs.clear();
        self.seg_bytes = 0;
        r
    }
}

/// Encodes a PDU into a frame for the writer.
pub(crate) fn frame(p: &Pdu, dg: Digests) -> Out {
    let mut v = Vec::with_capacity(64);
    p.encode(dg, &mut v);
    Out::Frame(v)
}

/// A TermReq for `fatal` (sent by the receiver of the bad PDU), then close.
pub(crate) fn terminate(tx: &OutTx, to_host: bool, fatal: Fatal, header: Vec<u8>) {
    let t = TermReq {
        fes: fatal.fes,
        fei: fatal.fei,
        data: header,
    };
    let p = if to_host {
        Pdu::C2hTermReq(t)
    } else {
        Pdu::H2cTermReq(t)
    };
    let _ = tx.send(frame(&p, Digests::default()));
    let _ = tx.send(Out::Close);
}

/// Splits a connected stream into its read half and the sender of its write half, and
/// starts the writer task. The task writes what senders could not write directly, and on
/// `Close`, on a write error, or when all senders are gone, shuts the socket down and exits.
pub(crate) fn split(stream: TcpStream) -> io::Result<(OwnedReadHalf, OutTx)> {
    let std = stream.into_std()?;
    let direct = std.try_clone()?;
    let (rd, mut wr) = TcpStream::from_std(std)?.into_split();
    let sh = Arc::new(Shared {
        st: Mutex::new(WState {
            buf: Vec::with_capacity(64 * 1024),
            segs: Vec::new(),
            seg_bytes: 0,
            writing: 0,
            hold_limit: usize::MAX,
            active: false,
            close: false,
            dead: false,
            senders: 1,
            detach: false,
            blocking: false,
        }),
        direct,
        wake: Notify::new(),
        drained: Notify::new(),
        task: Mutex::new(None),
    });
    let task = sh.clone();
    let handle = tokio::spawn(async move {
        let mut spare: Vec<u8> = Vec::with_capacity(64 * 1024);
        loop {
            task.wake.notified().await;
            // Let the worker's other runnable tasks add to the buffer first (batching).
            tokio::task::yield_now().await;
            loop {
                {
                    let mut st = lock(&task.st);
                    if st.buf.is_empty() && st.detach && !st.close && !st.dead {
                        // Detached: the socket stays open for the senders (`detach_writer`);
                        // a dropped write half would shut its sending side down.
                        drop(st);
                        wr.forget();
                        return;
                    }
                    if st.buf.is_empty() {
                        if st.close || st.dead || st.senders == 0 {
                            st.dead = true;
                            break;
                        }
                        st.active = false;
                        break;
                    }
                    std::mem::swap(&mut st.buf, &mut spare);
                    st.writing = spare.len();
                }
                let ok = wr.write_all(&spare).await.is_ok();
                {
                    let mut st = lock(&task.st);
                    st.writing = 0;
                    if !ok {
                        st.dead = true;
                        st.buf.clear();
                    }
                }
                task.drained.notify_waiters();
                spare.clear();
            }
            if lock(&task.st).dead {
                break;
            }
        }
        task.drained.notify_waiters();
        let _ = wr.shutdown().await;
    });
    *lock(&sh.task) = Some(handle);
    Ok((rd, OutTx { sh }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdu::{Cqe, DataPdu};
    use crate::status::Status;
    use std::io::Read;

    /// A listener whose one connection is read on a thread of its own, 4 KiB every 50 µs
    /// (so sends fill the socket buffers and return short), until the end of the stream:
    /// the thread returns all it read.
    fn slow_reader() -> (std::net::SocketAddr, std::thread::JoinHandle<Vec<u8>>) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
                .unwrap();
            let mut got = Vec::new();
            let mut chunk = vec![0u8; 4096];
            loop {
                std::thread::sleep(std::time::Duration::from_micros(50));
                match s.read(&mut chunk) {
                    Ok(0) => return got,
                    Ok(n) => got.extend_from_slice(&chunk[..n]),
                    Err(e) => panic!("read: {e} after {} bytes", got.len()),
                }
            }
        });
        (addr, reader)
    }

    /// A connected pair: our end split as a connection does, its writer detached (blocking
    /// mode), and the peer reading everything on a thread of its own, slowly (so the sends
    /// fill the socket buffers and return short), until the end of the stream.
    async fn detached_pair() -> (OutTx, std::thread::JoinHandle<Vec<u8>>) {
        let (addr, reader) = slow_reader();
        let std = std::net::TcpStream::connect(addr).unwrap();
        std.set_nonblocking(true).unwrap();
        let (rd, tx) = split(TcpStream::from_std(std).unwrap()).unwrap();
        tx.detach_writer().await.unwrap();
        drop(rd);
        (tx, reader)
    }

    /// A read's answer as the queue thread sends it: C2HData with `data`, then CapsuleResp.
    fn answer(cid: u16, data: Bytes) -> [Pdu; 2] {
        let c2h = Pdu::C2hData(DataPdu::c2h_whole(cid, data));
        let resp = Pdu::CapsuleResp(Cqe {
            dw0: 0,
            dw1: 0,
            sqhd: cid,
            sqid: 1,
            cid,
            status: Status::SUCCESS,
        });
        [c2h, resp]
    }

    /// Held answers leave with their data written from where it lies: the peer reads
    /// exactly what `encode` makes of them, in order, with digests, also when one flush
    /// needs more buffers than one sendmsg takes (3 000 data PDUs against IOV_MAX 1 024)
    /// and more bytes than the socket buffers hold (short sends that continue).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_answers_leave_vectored_and_whole() {
        const N: usize = 3000;
        let dg = Digests {
            header: true,
            data: true,
        };
        let (tx, reader) = detached_pair().await;
        let want = tokio::task::spawn_blocking(move || {
            let mut want = Vec::new();
            for i in 0..N {
                let data: Vec<u8> = (0..i % 700 + 1).map(|j| (i * 7 + j) as u8).collect();
                let [c2h, resp] = answer(i as u16, Bytes::from(data));
                c2h.encode(dg, &mut want);
                resp.encode(dg, &mut want);
                tx.hold_pdus(&[&c2h, &resp], dg).unwrap();
                if i % 1000 == 999 {
                    // An unheld answer takes what is held along, in order.
                    let [c2h, resp] = answer(1, Bytes::from_static(b"direct"));
                    c2h.encode(dg, &mut want);
                    resp.encode(dg, &mut want);
                    tx.send_pdus(&[&c2h, &resp], dg).unwrap();
                }
            }
            tx.flush().unwrap();
            want
        })
        .await
        .unwrap();
        let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the stream differs from the PDUs' encoding");
    }

    /// In blocking mode a held answer's data is not copied: the send queue keeps the very
    /// bytes the read produced until they are written; `queued` counts them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_data_is_not_copied() {
        let (tx, reader) = detached_pair().await;
        let data = Bytes::from(vec![9u8; 4096]);
        let [c2h, resp] = answer(3, data.clone());
        tx.hold_pdus(&[&c2h, &resp], Digests::default()).unwrap();
        {
            let st = lock(&tx.sh.st);
            assert_eq!(st.segs.len(), 1);
            assert_eq!(st.segs[0].1.as_ptr(), data.as_ptr(), "the data was copied");
            assert_eq!(st.seg_bytes, 4096);
        }
        assert_eq!(tx.queued(), 24 + 4096 + 24);
        tx.flush().unwrap();
        assert_eq!(tx.queued(), 0);
        drop(tx);
        let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        assert_eq!(got.len(), 24 + 4096 + 24);
    }

    /// After `detach_writer`, senders on several threads write whole frames with blocking
    /// writes, however slowly the peer reads (far more than the socket buffers hold), in
    /// order per sender and never interleaved inside a frame; when the last sender is gone
    /// the peer sees the end of the stream.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn detached_senders_block_and_keep_frames_whole() {
        const FRAMES: usize = 400;
        const LEN: usize = 16 * 1024;
        // A slow reader: the senders must wait for it.
        let (addr, reader) = slow_reader();
        let std = std::net::TcpStream::connect(addr).unwrap();
        std.set_nonblocking(true).unwrap();
        // Another descriptor of the socket stays open (as the queue's watcher does): the end
        // of the stream must come from the senders' shutdown, not from the last close.
        let keep = std.try_clone().unwrap();
        let (rd, tx) = split(TcpStream::from_std(std).unwrap()).unwrap();
        tx.detach_writer().await.unwrap();
        drop(rd);
        let senders: Vec<_> = (0..2u8)
            .map(|t| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    for i in 0..FRAMES {
                        let mut f = vec![t; LEN];
                        f[..4].copy_from_slice(&(i as u32).to_le_bytes());
                        tx.send(Out::Frame(f)).unwrap();
                    }
                })
            })
            .collect();
        for s in senders {
            s.join().unwrap();
        }
        drop(tx);
        let got = tokio::task::spawn_blocking(move || reader.join().unwrap())
            .await
            .unwrap();
        drop(keep);
        assert_eq!(got.len(), 2 * FRAMES * LEN);
        let mut next = [0u32; 2];
        for f in got.chunks(LEN) {
            let t = f[4] as usize;
            assert!(t < 2 && f[4..].iter().all(|&b| b == f[4]), "frame mixed");
            assert_eq!(u32::from_le_bytes([f[0], f[1], f[2], f[3]]), next[t]);
            next[t] += 1;
        }
    }
}
