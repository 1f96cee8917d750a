//! One io_uring per I/O queue connection: the Reads and Writes of a received batch are
//! queued here and leave in one `io_uring_enter`; their completions are reaped in a batch
//! and answered in one send. A queue thread (`Ring::for_thread`) waits in `io_uring_enter`
//! for its socket receive and its file operations alike, and its ring is not registered
//! with the runtime's reactor (a completion would wake a worker for nothing). A queue on a
//! tokio task (`Ring::new`) waits for the ring's descriptor (readable while completions are
//! waiting) in the same `select!` as for the socket. Page-cache hits complete inside the
//! submitting call, so they are reaped at once, without waiting.
//!
//! This module (with `buf.rs`, the operations' buffers) is one of the crate's three unsafe
//! modules (with `backend/sys.rs` and `transport/sys.rs`): the kernel reads and writes an
//! operation's buffer until its completion is reaped, so every buffer lives in the
//! operation (`Op`) in `ops` until then, the file stays open through the `Namespace` it
//! holds, and a ring with operations still in flight is drained before it is dropped.
//!
//! Only plain Reads and Writes come here (`io::prepare_rw` decides, after the per-command
//! access check); any short transfer or error goes back to the blocking path, which repeats
//! the command and reports its status (one error path).
#![allow(unsafe_code)]

mod buf;

use crate::controller::io::Rw;
use crate::controller::Cmd;
use crate::quiesce::AtMedia;
use crate::transport::PduBuf;
use buf::{IoBuf, Pool, SLOT};
use bytes::Bytes;
use io_uring::{opcode, types, IoUring};
use std::io;
use std::os::fd::AsRawFd;
use tokio::io::unix::AsyncFd;

/// Submission queue entries: more than a queue's commands in flight (MQES + 1 = 128).
const ENTRIES: u32 = 256;

// Every round waits for the first completion, O_DIRECT writes included. Waiting for a third
// of the O_DIRECT writes in flight (at most 300 µs, when 6 or more were) paid only on a
// machine where each completion the dio kworker posted woke this thread, which preempted
// the kworker, one write answered per round; on a faster one the wait cost 30 % more CPU
// per write and 15–20 % fewer IOPS at QD 32 and 128, quiet or with two CPU hogs beside it
// (docs/nvme-tcp.md "I/O path", "Writes: the dio kworker").

/// An operation the kernel owns until its completion is reaped.
struct Op {
    rw: Rw,
    /// Read: where the data lands; O_DIRECT write: an aligned copy of the data (`None`: a
    /// page-cache write, straight from `rw.write`).
    buf: Option<IoBuf>,
    _busy: AtMedia,
}

/// user_data of the connection's socket receive (file operations use their slot index).
const RECV: u64 = u64::MAX;

/// What a reaped operation gave.
pub(crate) enum Done {
    /// The socket receive completed: bytes received, 0 at end of stream, or -errno.
    /// `recv_done` accounts the bytes in the buffer.
    Recv(i32),
    /// A Read's data, ready for its C2HData.
    Read(Cmd, Bytes),
    Write(Cmd),
    /// Short or failed: run the command on the blocking path (it reports the status).
    Retry(Cmd),
}

pub(crate) struct Ring {
    /// The ring's descriptor in the reactor, for a queue on a tokio task (`ready`); `None`
    /// on a queue thread. Dropped before the ring.
    poll: Option<AsyncFd<RingFd>>,
    ring: IoUring,
    /// Registered buffers (`SLOT`), from the first Read or Write on; dropped after `ring`,
    /// which unregisters them.
    pool: Option<std::sync::Arc<Pool>>,
    pool_tried: bool,
    /// Indexed by user_data.
    ops: Vec<Option<Op>>,
    free: Vec<usize>,
    /// Pushed and not yet submitted.
    queued: usize,
    inflight: usize,
    /// A receive is armed: the length of the spare space it was given.
    recv_len: Option<usize>,
    /// Reaped (user_data, result) pairs, kept to reuse the allocation.
    cqes: Vec<(u64, i32)>,
}

/// The ring's descriptor, for the reactor.
struct RingFd(std::os::fd::RawFd);

impl AsRawFd for RingFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0
    }
}

/// Refused by the environment: the connection then uses the RWF_NOWAIT / blocking-pool paths.
fn refused(e: &io::Error) {
    tracing::debug!(error = %e, "io_uring unavailable: blocking I/O path");
}

impl Ring {
    /// A ring for a queue on a tokio task, which waits for completions in the reactor
    /// (`ready`); `None` when the kernel (or a seccomp filter) refuses io_uring.
    pub fn new() -> Option<Ring> {
        if std::env::var_os("NVME_TCP_NO_URING").is_some() {
            return None;
        }
        let ring = IoUring::new(ENTRIES).map_err(|e| refused(&e)).ok()?;
        // SAFETY: the descriptor is the ring's, which the Ring owns and drops after `poll`
        // (field order), so it stays open and the same while it is registered.
        let poll = unsafe {
            AsyncFd::register_with_interest(RingFd(ring.as_raw_fd()), tokio::io::Interest::READABLE)
        }
        .ok()?;
        Some(Ring::with(Some(poll), ring))
    }

    /// A ring for a queue thread, which waits for completions in `io_uring_enter` itself.
    /// (IORING_SETUP_DEFER_TASKRUN, and waiting for several read completions at once,
    /// measured no better: docs/nvme-tcp.md "Tried and dropped"; for writes, the note after
    /// `ENTRIES`.)
    pub fn for_thread() -> Option<Ring> {
        if std::env::var_os("NVME_TCP_NO_URING").is_some() {
            return None;
        }
        let ring = IoUring::new(ENTRIES).map_err(|e| refused(&e)).ok()?;
        Some(Ring::with(None, ring))
    }

    fn with(poll: Option<AsyncFd<RingFd>>, ring: IoUring) -> Ring {
        Ring {
            poll,
            ring,
            pool: None,
            pool_tried: false,
            ops: Vec::new(),
            free: Vec::new(),
            queued: 0,
            inflight: 0,
            recv_len: None,
            cqes: Vec::new(),
        }
    }

    pub fn inflight(&self) -> usize {
        self.inflight
    }

    /// Queued since the last submit.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Queues `rw` (submitted by the next `submit`). Gives its command back when the ring
    /// is full.
    pub fn push(&mut self, rw: Rw, busy: AtMedia) -> Result<(), Cmd> {
        if self.ring.submission().is_full()
            && (self.submit().is_err() || self.ring.submission().is_full())
        {
            return Err(rw.cmd);
        }
        let len = rw.len;
        if !self.pool_tried && len <= SLOT && self.inflight == 0 {
            self.pool_tried = true;
            self.pool = Pool::register(&self.ring);
        }
        // A page-cache write goes straight from the capsule's bytes (any alignment will do);
        // reads land in a buffer of their own, O_DIRECT writes go from an aligned copy.
        let buf = match (&rw.write, rw.direct) {
            (Some(_), false) => None,
            (None, _) => IoBuf::uninit(len, self.pool.as_ref()),
            // Without its aligned copy an O_DIRECT write goes to the blocking path: the
            // capsule's bytes are released below, so the kernel must never write from them.
            (Some(d), true) => match d
                .get(..len)
                .and_then(|d| IoBuf::copy_of(d, self.pool.as_ref()))
            {
                Some(b) => Some(b),
                None => return Err(rw.cmd),
            },
        };
        // No buffer (out of memory): the blocking path runs it.
        let Some(entry) = rw_entry(
            types::Fd(rw.fd),
            rw.write.as_ref(),
            buf.as_ref(),
            len,
            rw.offset,
        ) else {
            return Err(rw.cmd);
        };
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.ops.push(None);
                self.ops.len() - 1
            }
        };
        let entry = entry.user_data(idx as u64);
        let mut rw = rw;
        let direct_write = rw.direct && rw.write.is_some();
        if direct_write {
            // Copied: release the capsule's bytes now, so the receive buffer they are a
            // slice of can be reused instead of reallocated while the write is in flight.
            rw.write = Some(Bytes::new());
            rw.cmd.data = Bytes::new();
        }
        self.ops[idx] = Some(Op {
            rw,
            buf,
            _busy: busy,
        });
        // SAFETY: the entry points into `buf` or `rw.write` of the Op just stored in
        // `self.ops[idx]`, which is only taken out when this entry's completion is reaped
        // (`reap`) and never before the ring is drained (`Drop`); moving the Op (or the Vec
        // of Ops) does not move the heap buffers. The descriptor stays open: the Op holds the
        // namespace (and its backend) through `rw`.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            let op = self.ops[idx].take();
            self.free.push(idx);
            return match op {
                Some(op) => Err(op.rw.cmd),
                None => Ok(()),
            };
        }
        self.queued += 1;
        self.inflight += 1;
        Ok(())
    }

    /// Arms a receive on socket `fd` into the spare capacity of `buf` (one at a time).
    pub fn push_recv(&mut self, fd: std::os::fd::RawFd, buf: &mut PduBuf) -> io::Result<()> {
        if self.recv_len.is_some() {
            return Ok(());
        }
        let b = buf.raw();
        let spare = b.spare_capacity_mut();
        let (ptr, len) = (spare.as_mut_ptr().cast::<u8>(), spare.len());
        let entry = opcode::Recv::new(types::Fd(fd), ptr, len as u32)
            .build()
            .user_data(RECV);
        if self.ring.submission().is_full() {
            self.submit()?;
        }
        // SAFETY: the kernel writes into the spare capacity of `buf` until this receive's
        // completion is reaped; the connection does not touch `buf` before that
        // (`recv_done`), and shuts the socket down and drains the ring before it drops
        // `buf` (`drain`, the connection thread's exit).
        unsafe { self.ring.submission().push(&entry) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        self.recv_len = Some(len);
        self.queued += 1;
        self.inflight += 1;
        Ok(())
    }

    /// Accounts the `n` bytes a completed receive (`Done::Recv(n)`, n > 0) put into `buf`.
    pub fn recv_done(&mut self, buf: &mut PduBuf, n: usize) {
        let Some(len) = self.recv_len.take() else {
            return;
        };
        let b = buf.raw_as_is();
        // SAFETY: the kernel initialized the first `n` bytes of the spare capacity it was
        // given (its length was `len`, so min(n, len) is within it), and nothing moved or
        // touched `buf` since the receive was armed.
        unsafe { b.set_len(b.len() + n.min(len)) }
    }

    /// Submits what is queued and waits for at least one completion (the connection
    /// thread's only blocking call).
    pub fn wait(&mut self) -> io::Result<()> {
        match self.ring.submit_and_wait(1) {
            Ok(_) => {
                self.queued = 0;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Submits everything queued, without waiting.
    pub fn submit(&mut self) -> io::Result<()> {
        if self.queued == 0 {
            return Ok(());
        }
        self.ring.submit()?;
        self.queued = 0;
        Ok(())
    }

    /// Submits and waits, at most `limit`, for one completion: for a command alone on its
    /// queue (a host at QD 1), whose answer nothing else can share, going back to the
    /// reactor first would add its wake-up to the latency. The bound keeps a slow device
    /// from holding the worker thread.
    pub fn submit_and_wait_one(&mut self, limit: std::time::Duration) -> io::Result<()> {
        let ts = types::Timespec::from(limit);
        let args = types::SubmitArgs::new().timespec(&ts);
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        self.queued = 0;
        Ok(())
    }

    /// Hands every completion waiting to `f`.
    pub fn reap(&mut self, mut f: impl FnMut(Done)) {
        let mut done = std::mem::take(&mut self.cqes);
        done.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for (ud, res) in done.drain(..) {
            if ud == RECV {
                self.inflight -= 1;
                if res <= 0 {
                    self.recv_len = None;
                }
                f(Done::Recv(res));
                continue;
            }
            let idx = ud as usize;
            let Some(op) = self.ops.get_mut(idx).and_then(Option::take) else {
                continue;
            };
            self.free.push(idx);
            self.inflight -= 1;
            let Op { rw, buf, .. } = op;
            let ok = res >= 0 && res as usize == rw.len;
            let len = rw.len;
            let mut cmd = rw.cmd;
            let write = rw.write.is_some();
            f(match (ok, write, buf) {
                (false, true, Some(b)) => {
                    // The capsule's bytes were released at `push`: the aligned copy holds them.
                    // SAFETY: `copy_of` wrote every byte of it.
                    cmd.data = unsafe { b.into_bytes() };
                    Done::Retry(cmd)
                }
                (false, ..) => Done::Retry(cmd),
                (true, true, _) => Done::Write(cmd),
                // SAFETY: the read completed whole (res == len): the kernel wrote every one
                // of the buffer's `len` bytes.
                (true, false, Some(b)) if b.len == len => {
                    Done::Read(cmd, unsafe { b.into_bytes() })
                }
                (true, false, _) => Done::Retry(cmd),
            });
        }
        self.cqes = done;
    }

    /// Waits until completions are waiting (cancel-safe).
    pub async fn ready(&mut self) {
        if self.inflight == 0 {
            return std::future::pending().await;
        }
        let Some(poll) = self.poll.as_ref() else {
            return std::future::pending().await;
        };
        loop {
            let Ok(mut g) = poll.readable().await else {
                return std::future::pending().await;
            };
            if !self.ring.completion().is_empty() {
                return;
            }
            g.clear_ready();
        }
    }

    /// Blocks until nothing is in flight (the connection is ending: the kernel must be done
    /// with every buffer before they are freed). An armed receive must be ended first (the
    /// socket shut down).
    pub fn drain(&mut self) {
        let _ = self.submit();
        while self.inflight > 0 {
            if let Err(e) = self.ring.submit_and_wait(1) {
                if e.kind() != io::ErrorKind::Interrupted {
                    // Nothing sane is left: leak the buffers rather than free them under
                    // the kernel. Their guards go with them: the controller's gate stays
                    // busy, so a fence of its host fails from now on (the safe side).
                    tracing::error!(
                        error = %e,
                        in_flight = self.inflight,
                        "io_uring drain failed: operations leaked; fences of this host will fail"
                    );
                    std::mem::forget(std::mem::take(&mut self.ops));
                    return;
                }
            }
            self.reap(|_| {});
        }
    }
}

impl Ring {
    /// Ends the connection's armed receive (shuts the socket's reading side down, so it
    /// completes) and waits for everything in flight.
    pub fn end_recv(&mut self, fd: std::os::fd::RawFd) {
        if self.recv_len.is_some() {
            // SAFETY: shutdown(2) on a descriptor the caller holds open; no memory involved.
            unsafe { libc::shutdown(fd, libc::SHUT_RD) };
        }
        self.drain();
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        self.drain();
    }
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }
}

/// The operation for a Read (into `buf`) or a Write (of `write`, or of its aligned copy in
/// `buf`): the FIXED opcodes when the buffer is a pool slot (`None`: a Read with no buffer).
fn rw_entry(
    fd: types::Fd,
    write: Option<&Bytes>,
    buf: Option<&IoBuf>,
    len: usize,
    offset: u64,
) -> Option<io_uring::squeue::Entry> {
    let n = len as u32;
    Some(match (write, buf) {
        (None, Some(b)) => match b.fixed() {
            Some(i) => opcode::ReadFixed::new(fd, b.ptr.as_ptr(), n, i)
                .offset(offset)
                .build(),
            None => opcode::Read::new(fd, b.ptr.as_ptr(), n)
                .offset(offset)
                .build(),
        },
        (Some(d), None) => opcode::Write::new(fd, d.as_ptr(), n).offset(offset).build(),
        (Some(_), Some(b)) => match b.fixed() {
            Some(i) => opcode::WriteFixed::new(fd, b.ptr.as_ptr(), n, i)
                .offset(offset)
                .build(),
            None => opcode::Write::new(fd, b.ptr.as_ptr(), n)
                .offset(offset)
                .build(),
        },
        (None, None) => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use buf::pooled_ring;

    /// Pool slots go by the FIXED opcodes, heap buffers and page-cache writes (from the
    /// capsule's bytes) by the plain ones; a Read without a buffer has no operation.
    #[test]
    fn slots_take_the_fixed_opcodes() {
        let Some((pool, _ring)) = pooled_ring() else {
            return;
        };
        let fd = types::Fd(0);
        let slot = IoBuf::uninit(SLOT, Some(&pool)).unwrap();
        let heap = IoBuf::uninit(SLOT, None).unwrap();
        let data = Bytes::from(vec![1u8; SLOT]);
        let op = |w, b| rw_entry(fd, w, b, SLOT, 0).map(|e| e.get_opcode() as u8);
        assert_eq!(op(None, Some(&slot)), Some(opcode::ReadFixed::CODE));
        assert_eq!(op(Some(&data), Some(&slot)), Some(opcode::WriteFixed::CODE));
        assert_eq!(op(None, Some(&heap)), Some(opcode::Read::CODE));
        assert_eq!(op(Some(&data), Some(&heap)), Some(opcode::Write::CODE));
        assert_eq!(op(Some(&data), None), Some(opcode::Write::CODE));
        assert_eq!(op(None, None), None);
    }

    /// What `rw_entry` builds for slots the kernel accepts: a 512-byte WRITE_FIXED from one
    /// slot and a READ_FIXED into another (not the first) read the file's bytes back.
    #[test]
    fn fixed_writes_and_reads_reach_the_file() {
        use std::os::unix::fs::FileExt;
        let Some((pool, ring)) = pooled_ring() else {
            return;
        };
        let mut ring = ring;
        let dir = tempfile::tempdir().unwrap();
        let f = std::fs::File::create_new(dir.path().join("f")).unwrap();
        let data: Vec<u8> = (0..3 * SLOT).map(|i| (i * 13 / 7) as u8).collect();
        f.write_all_at(&data, 0).unwrap();
        let fd = types::Fd(f.as_raw_fd());
        let mut run = |e: io_uring::squeue::Entry| {
            // SAFETY: the caller's buffers live until the completion is reaped here.
            unsafe { ring.submission().push(&e) }.unwrap();
            ring.submit_and_wait(1).unwrap();
            ring.completion().next().unwrap().result()
        };
        let _first = pool.take().unwrap();
        let small: Vec<u8> = (0..512).map(|i| (i % 251) as u8).collect();
        let w = IoBuf::copy_of(&small, Some(&pool)).unwrap();
        let cap = Bytes::from(small.clone());
        let e = rw_entry(fd, Some(&cap), Some(&w), 512, SLOT as u64 + 512).unwrap();
        assert_eq!(run(e), 512);
        let r = IoBuf::uninit(SLOT, Some(&pool)).unwrap();
        assert!(r.fixed().is_some() && w.fixed().is_some());
        let e = rw_entry(fd, None, Some(&r), SLOT, SLOT as u64).unwrap();
        assert_eq!(run(e), SLOT as i32);
        // SAFETY: the read completed whole.
        let got = unsafe { r.into_bytes() };
        let mut want = data[SLOT..2 * SLOT].to_vec();
        want[512..1024].copy_from_slice(&small);
        assert_eq!(&got[..], &want[..]);
    }
}
