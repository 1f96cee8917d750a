//! The sending side's one system call that std does not offer: `sendmsg(2)` of several
//! buffers with `MSG_NOSIGNAL` (std's `write_vectored` on a socket is `writev`, which
//! raises SIGPIPE when the peer is gone; std's own `write` on a socket passes
//! `MSG_NOSIGNAL`, and so does this). A queue thread's answers leave by it: the data of
//! each C2HData is written from the buffer the read filled, not copied into the send buffer
//! first.
#![allow(unsafe_code)]

use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// At most this many buffers per call (Linux's UIO_MAXIOV; more is EINVAL).
const MAX_IOV: usize = 1024;

/// One `sendmsg` of (at most `MAX_IOV` of) `bufs`; the bytes sent, which may be fewer than
/// all of them.
pub(crate) fn send_vectored(sock: &TcpStream, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no name, no control data, no buffers).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is ABI-compatible with iovec on Unix (std's documented guarantee); sendmsg
    // only reads through msg_iov and the buffers it points at.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len().min(MAX_IOV) as _;
    // SAFETY: `msg` points at `bufs`, which live and stay borrowed for the whole call, each
    // slice valid for reads of its length; the descriptor is open for as long as `sock`.
    let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize)
}

/// `send_vectored` until everything is written (a blocking socket may still return short,
/// e.g. when a signal interrupts it).
pub(crate) fn send_all_vectored(sock: &TcpStream, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match send_vectored(sock, bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
