//! All storage I/O of the log goes through [`BlockDev`] (docs/design.md, house rule 10): a file or
//! block device in production ([`FileDev`]), a volatile-write-cache simulator in tests
//! ([`CrashDev`]), and a device that fails on purpose ([`FaultDev`]).

mod crash;
mod fault;
mod file;

pub use crash::CrashDev;
pub use fault::{Fault, FaultDev};
pub use file::FileDev;

/// A byte-addressed device with a volatile write cache, as NVMe and SATA disks have.
///
/// A completed `write_at` may still sit in the cache: it is durable only after a later `flush`
/// (or if it was written with `write_fua`). Callers keep offsets and lengths 512-byte aligned
/// where they can; [`FileDev`] handles unaligned I/O by read-modify-write.
pub trait BlockDev: Send + Sync + 'static {
    /// Read `buf.len()` bytes at `offset` (sees every completed write, durable or not).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    /// Write `buf` at `offset`; completes into the volatile cache.
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;
    /// Durable on return (FUA): RWF_DSYNC pwritev2, or write + fdatasync.
    fn write_fua(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;
    /// Make every completed write durable (fdatasync / cache flush).
    fn flush(&self) -> std::io::Result<()>;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// The open file behind the device and whether it is O_DIRECT, for a caller that does its
    /// own asynchronous I/O on it (the embedded NVMe/TCP target's io_uring, server/src/nvme.rs);
    /// valid while the device lives. `None` (the default): only the methods above.
    fn raw_file(&self) -> Option<(std::os::fd::RawFd, bool)> {
        None
    }
}

pub(crate) fn check_range(off: u64, len: usize, size: u64) -> std::io::Result<()> {
    match off.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("I/O [{off}, +{len}) beyond device size {size}"),
        )),
    }
}
