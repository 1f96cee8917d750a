//! A namespace on a regular file or a block device. Writes go through the page cache (the
//! volatile write cache we advertise, VWC = 1); `flush` is `fdatasync` (docs/design.md §6).

use super::sys::{pread_nowait, pwrite_nowait, NoWait};
use super::Backend;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug)]
pub struct FileBackend {
    file: File,
    block_size: u32,
    num_blocks: u64,
    /// Opened with O_DIRECT: no page cache, I/O through an aligned bounce buffer.
    direct: bool,
    /// RWF_NOWAIT reads / writes still worth trying (cleared when the file system refuses).
    nowait_read: AtomicBool,
    nowait_write: AtomicBool,
}

/// O_DIRECT wants buffers aligned to the logical block size; 4096 covers every device.
const ALIGN: usize = 4096;

/// A zeroed buffer of `len` bytes starting on an ALIGN boundary, inside an owned Vec.
fn aligned(len: usize) -> (Vec<u8>, usize) {
    let v = vec![0u8; len + ALIGN];
    let off = v.as_ptr().align_offset(ALIGN).min(ALIGN);
    (v, off)
}

/// Transfers up to this size reuse the calling thread's bounce buffer (the blocking threads
/// that run I/O live on), instead of allocating and zeroing one per command.
const BOUNCE_KEEP: usize = 128 * 1024;

thread_local! {
    static BOUNCE: std::cell::RefCell<(Vec<u8>, usize)> = const { std::cell::RefCell::new((Vec::new(), 0)) };
}

/// Runs `f` on an ALIGN-aligned buffer of `len` bytes (contents unspecified).
fn with_bounce<T>(len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    if len > BOUNCE_KEEP {
        let (mut v, o) = aligned(len);
        return f(&mut v[o..o + len]);
    }
    BOUNCE.with(|b| {
        let mut b = b.borrow_mut();
        if b.0.is_empty() {
            *b = aligned(BOUNCE_KEEP);
        }
        let o = b.1;
        f(&mut b.0[o..o + len])
    })
}

impl FileBackend {
    /// Opens an existing file or block device read-write. Its size (rounded down to whole
    /// blocks) is the namespace size.
    pub fn open(path: &Path, block_size: u32) -> io::Result<Self> {
        Self::open_with(path, block_size, false)
    }

    /// Like `open`, but with O_DIRECT: reads and writes bypass the page cache. The device's
    /// own volatile cache remains, so `flush` is still `fdatasync`.
    pub fn open_direct(path: &Path, block_size: u32) -> io::Result<Self> {
        Self::open_with(path, block_size, true)
    }

    fn open_with(path: &Path, block_size: u32, direct: bool) -> io::Result<Self> {
        if !(block_size == 512 || block_size == 4096) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "block size must be 512 or 4096",
            ));
        }
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        if direct {
            opts.custom_flags(libc::O_DIRECT);
        }
        let mut file = opts.open(path)?;
        let ft = file.metadata()?.file_type();
        if !(ft.is_file() || ft.is_block_device()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file or block device",
            ));
        }
        // A block device's metadata length is 0: its size is where SEEK_END lands.
        let size = file.seek(SeekFrom::End(0))?;
        Ok(FileBackend {
            file,
            block_size,
            num_blocks: size / block_size as u64,
            direct,
            // O_DIRECT always waits for the device: nothing to gain.
            nowait_read: AtomicBool::new(!direct),
            nowait_write: AtomicBool::new(!direct),
        })
    }

    /// Creates (or resizes) a sparse regular file of `size` bytes and opens it.
    pub fn create(path: &Path, size: u64, block_size: u32) -> io::Result<Self> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        f.set_len(size)?;
        drop(f);
        Self::open(path, block_size)
    }
}

impl Backend for FileBackend {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if !self.direct {
            return self.file.read_exact_at(buf, offset);
        }
        with_bounce(buf.len(), |b| {
            self.file.read_exact_at(b, offset)?;
            buf.copy_from_slice(b);
            Ok(())
        })
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !self.direct {
            return self.file.write_all_at(buf, offset);
        }
        with_bounce(buf.len(), |b| {
            b.copy_from_slice(buf);
            self.file.write_all_at(b, offset)
        })
    }
    fn try_read_at(&self, buf: &mut [u8], offset: u64) -> Option<io::Result<()>> {
        try_nowait(&self.nowait_read, || pread_nowait(&self.file, buf, offset))
    }
    fn try_write_at(&self, buf: &[u8], offset: u64) -> Option<io::Result<()>> {
        try_nowait(&self.nowait_write, || {
            pwrite_nowait(&self.file, buf, offset)
        })
    }
    fn fast_writes(&self) -> bool {
        !self.direct
    }
    fn io_file(&self) -> Option<super::IoFile> {
        Some(super::IoFile {
            fd: self.file.as_raw_fd(),
            direct: self.direct,
        })
    }
    fn flush(&self) -> io::Result<()> {
        // fdatasync: one call covers every controller's completed writes to this file.
        self.file.sync_data()
    }
}

/// One RWF_NOWAIT attempt while `supported` holds (`None`: do it the blocking way); the first
/// `Unsupported` answer clears `supported` for good.
fn try_nowait(supported: &AtomicBool, op: impl FnOnce() -> NoWait) -> Option<io::Result<()>> {
    if !supported.load(Ordering::Relaxed) {
        return None;
    }
    match op() {
        NoWait::Done => Some(Ok(())),
        NoWait::Retry => None,
        NoWait::Unsupported => {
            supported.store(false, Ordering::Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_round_trip_and_zeroes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("vol");
        let b = FileBackend::create(&p, 1 << 20, 4096).unwrap();
        assert_eq!(b.num_blocks(), 256);
        b.write_at(&[7u8; 8192], 4096).unwrap();
        b.flush().unwrap();
        let mut r = vec![0u8; 8192];
        b.read_at(&mut r, 4096).unwrap();
        assert!(r.iter().all(|&x| x == 7));
        b.write_zeroes(4096, 4096).unwrap();
        b.read_at(&mut r, 4096).unwrap();
        assert!(r[..4096].iter().all(|&x| x == 0) && r[4096..].iter().all(|&x| x == 7));
        // The bytes are in the file itself.
        let raw = std::fs::read(&p).unwrap();
        assert_eq!(raw[8192], 7);
        assert!(FileBackend::open(&p, 1000).is_err());
        // O_DIRECT sees the same bytes (where the filesystem supports it).
        if let Ok(d) = FileBackend::open_direct(&p, 4096) {
            let mut r = vec![0u8; 4096];
            d.read_at(&mut r, 8192).unwrap();
            assert!(r.iter().all(|&x| x == 7));
            d.write_at(&[9u8; 4096], 0).unwrap();
            assert_eq!(std::fs::read(&p).unwrap()[0], 9);
            // Above and below the reused bounce buffer's size, back to back.
            let big: Vec<u8> = (0..256 * 1024).map(|i| (i % 251) as u8).collect();
            d.write_at(&big, 4096).unwrap();
            d.write_at(&[3u8; 4096], 4096).unwrap();
            let mut r = vec![0u8; big.len()];
            d.read_at(&mut r, 4096).unwrap();
            assert!(r[..4096].iter().all(|&x| x == 3));
            assert_eq!(r[4096..], big[4096..]);
        }
    }

    #[test]
    fn nowait_paths_agree_with_the_blocking_ones() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("vol");
        let b = FileBackend::create(&p, 1 << 20, 4096).unwrap();
        b.write_at(&[5u8; 4096], 8192).unwrap();
        // Just written, so cached: a page-cache read must not need a thread.
        let mut r = vec![0u8; 4096];
        match b.try_read_at(&mut r, 8192) {
            Some(res) => {
                res.unwrap();
                assert!(r.iter().all(|&x| x == 5));
            }
            None => assert!(
                !b.nowait_read.load(Ordering::Relaxed),
                "cached read refused"
            ),
        }
        // A write either lands in full or is left to write_at (ext4 refuses RWF_NOWAIT
        // buffered writes, and the backend then stops asking).
        if let Some(res) = b.try_write_at(&[6u8; 4096], 8192) {
            res.unwrap();
            b.read_at(&mut r, 8192).unwrap();
            assert!(r.iter().all(|&x| x == 6));
        }
        // O_DIRECT never takes the inline path (it always waits for the device).
        if let Ok(d) = FileBackend::open_direct(&p, 4096) {
            assert!(d.try_read_at(&mut r, 0).is_none());
            assert!(d.try_write_at(&r, 0).is_none());
        }
    }
}
