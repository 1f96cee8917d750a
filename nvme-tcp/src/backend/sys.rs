//! One of the crate's three unsafe modules (with `tgt/ring/` and `transport/sys.rs`):
//! `preadv2`/`pwritev2` with `RWF_NOWAIT`, which std does not offer. They let the connection
//! task serve a page-cache hit (or a write into cached pages) inline instead of handing the
//! command to a blocking thread; anything that would wait for the disk comes back as `None`
//! and takes the blocking path.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// What a `RWF_NOWAIT` attempt gave.
pub(crate) enum NoWait {
    /// The whole buffer was transferred.
    Done,
    /// It would block, was short, or the file does not support RWF_NOWAIT: use the blocking
    /// path (which repeats the whole transfer; reads and writes at fixed offsets are
    /// idempotent).
    Retry,
    /// The file system refuses RWF_NOWAIT for this file: stop trying.
    Unsupported,
}

fn classify(r: isize, len: usize) -> NoWait {
    if r >= 0 && r as usize == len {
        return NoWait::Done;
    }
    if r < 0 {
        let e = io::Error::last_os_error().raw_os_error();
        if e == Some(libc::EOPNOTSUPP) || e == Some(libc::EINVAL) {
            return NoWait::Unsupported;
        }
    }
    NoWait::Retry
}

pub(crate) fn pread_nowait(f: &File, buf: &mut [u8], off: u64) -> NoWait {
    let Ok(off) = libc::off_t::try_from(off) else {
        return NoWait::Retry;
    };
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `iov` describes `buf`, which is valid for writes of `buf.len()` bytes and
    // exclusively borrowed for the duration of the call; the fd is open for as long as `f`.
    let r = unsafe { libc::preadv2(f.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
    classify(r, buf.len())
}

pub(crate) fn pwrite_nowait(f: &File, buf: &[u8], off: u64) -> NoWait {
    let Ok(off) = libc::off_t::try_from(off) else {
        return NoWait::Retry;
    };
    let iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: `iov` describes `buf`, valid for reads of `buf.len()` bytes during the call
    // (pwritev2 only reads through iov_base); the fd is open for as long as `f`.
    let r = unsafe { libc::pwritev2(f.as_raw_fd(), &iov, 1, off, libc::RWF_NOWAIT) };
    classify(r, buf.len())
}
