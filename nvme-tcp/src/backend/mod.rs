//! Namespace storage (docs/design.md, house rule 9): a `Backend` trait with a
//! file/block-device and a memory implementation. Calls are blocking; the target runs them
//! on tokio's blocking pool, except `try_read_at`/`try_write_at`, which must not block
//! (`sys.rs`: RWF_NOWAIT).
//!
//! Write cache model (docs/design.md §6): `write_at` may leave data in a volatile cache
//! (the page cache for a file); `flush` makes every completed write durable, whichever
//! controller issued it, because all controllers share one backend and `fdatasync` covers
//! the whole file.

mod file;
mod mem;
mod sys;

pub use file::FileBackend;
pub use mem::{HeldMem, MemBackend};

use std::io;
use std::os::fd::RawFd;

/// The open file behind a namespace, for the target's io_uring engine (`tgt/ring/`),
/// which then reads and writes it itself instead of calling `read_at`/`write_at`.
#[derive(Clone, Copy, Debug)]
pub struct IoFile {
    /// Open for as long as the backend lives (the engine holds the backend meanwhile).
    pub fd: RawFd,
    /// Opened with O_DIRECT: buffers and offsets must be aligned to 4096.
    pub direct: bool,
}

/// Storage behind one namespace. Offsets and lengths are in bytes and always multiples of
/// `block_size()` within `num_blocks()` (the controller checks LBA ranges first).
pub trait Backend: Send + Sync + 'static {
    /// LBA data size in bytes (512 or 4096).
    fn block_size(&self) -> u32;
    fn num_blocks(&self) -> u64;
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every completed write durable (the volatile write cache is flushed).
    fn flush(&self) -> io::Result<()>;
    /// Writes zeroes over a range (Write Zeroes).
    fn write_zeroes(&self, mut offset: u64, mut len: u64) -> io::Result<()> {
        let zeros = vec![0u8; 1 << 20];
        while len > 0 {
            let n = len.min(zeros.len() as u64) as usize;
            self.write_at(&zeros[..n], offset)?;
            offset += n as u64;
            len -= n as u64;
        }
        Ok(())
    }
    /// Reads only if that cannot block (e.g. the data is in the page cache): `None` means
    /// "would block, call `read_at` from a thread that may". The target tries this on the
    /// connection task first, saving a hand-off to a blocking thread per command.
    fn try_read_at(&self, _buf: &mut [u8], _offset: u64) -> Option<io::Result<()>> {
        None
    }
    /// Writes only if that cannot block (into cached pages, no flush): `None` means "use
    /// `write_at`"; a partial write is fine to repeat in full.
    fn try_write_at(&self, _buf: &[u8], _offset: u64) -> Option<io::Result<()>> {
        None
    }
    /// Writes land in a cache without waiting for a device (page cache, memory): the target
    /// then runs the writes that arrive in one batch one after another on one thread (one
    /// hand-off and one response write for the batch) instead of one thread each. False for
    /// O_DIRECT, where each write waits for the device and they must overlap.
    fn fast_writes(&self) -> bool {
        false
    }
    /// The file to read and write through io_uring (`IoFile`); `None` (the default): every
    /// I/O goes through the methods above.
    fn io_file(&self) -> Option<IoFile> {
        None
    }
    /// Dataset Management "deallocate" hint. The default keeps the data: Identify Namespace
    /// reports DLFEAT = 0, so hosts assume nothing about deallocated blocks.
    fn deallocate(&self, _offset: u64, _len: u64) -> io::Result<()> {
        Ok(())
    }
}
