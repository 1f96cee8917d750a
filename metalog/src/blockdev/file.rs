//! [`FileDev`]: a regular file or a block device.
//!
//! O_DIRECT where the filesystem allows it (tmpfs does not: the open fails with EINVAL and we
//! fall back to buffered I/O), so a log write goes straight to the device cache and the flush
//! that follows (`fdatasync`) only has to flush that cache (docs/design.md §3). `create`
//! zero-writes the file rather than leaving it sparse when asked, so an `fdatasync` of a later
//! overwrite never has to commit filesystem metadata.
//!
//! FUA is write + `fdatasync`: that needs no `unsafe` (`pwritev2(RWF_DSYNC)` would), and on a
//! file `RWF_DSYNC` makes the kernel issue the same device cache flush anyway.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::{check_range, BlockDev};

/// O_DIRECT alignment we honour: 4096 covers 512e and 4Kn devices and the page size.
const ALIGN: usize = 4096;

/// A file or block device behind the [`BlockDev`] trait.
#[derive(Debug)]
pub struct FileDev {
    file: File,
    size: u64,
    direct: bool,
}

impl FileDev {
    /// Open an existing file or block device read-write.
    pub fn open(path: &Path) -> std::io::Result<FileDev> {
        let (file, direct) = open_rw(path, false)?;
        let size = (&file).seek(SeekFrom::End(0))?;
        Ok(FileDev { file, size, direct })
    }

    /// Create (or truncate) a sparse regular file of `size` bytes.
    pub fn create(path: &Path, size: u64) -> std::io::Result<FileDev> {
        let (file, direct) = open_rw(path, true)?;
        file.set_len(size)?;
        Ok(FileDev { file, size, direct })
    }

    /// Whether the file was opened with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    fn aligned(buf_len: usize, offset: u64) -> bool {
        buf_len.is_multiple_of(ALIGN) && offset.is_multiple_of(ALIGN as u64)
    }

    /// Read into an aligned bounce buffer covering whole blocks.
    fn read_blocks(&self, offset: u64, len: usize) -> std::io::Result<AlignedBuf> {
        let mut b = AlignedBuf::new(len);
        self.file.read_exact_at(b.as_mut(), offset)?;
        Ok(b)
    }
}

fn open_rw(path: &Path, create: bool) -> std::io::Result<(File, bool)> {
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    if create {
        o.create(true).truncate(true);
    }
    let mut od = o.clone();
    od.custom_flags(libc::O_DIRECT);
    match od.open(path) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok((o.open(path)?, false)),
        Err(e) => Err(e),
    }
}

/// A heap buffer whose usable slice starts on an [`ALIGN`] boundary (O_DIRECT needs aligned
/// memory); safe code: over-allocate and start at `align_offset`.
struct AlignedBuf {
    v: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> AlignedBuf {
        let v = vec![0u8; len + ALIGN];
        let start = v.as_ptr().align_offset(ALIGN).min(ALIGN);
        AlignedBuf { v, start, len }
    }
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.start..self.start + self.len]
    }
    fn as_ref(&self) -> &[u8] {
        &self.v[self.start..self.start + self.len]
    }
}

impl BlockDev for FileDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        if !self.direct {
            return self.file.read_exact_at(buf, offset);
        }
        let start = offset - offset % ALIGN as u64;
        let end = (offset + buf.len() as u64).div_ceil(ALIGN as u64) * ALIGN as u64;
        let b = self.read_blocks(start, (end - start) as usize)?;
        let s = (offset - start) as usize;
        buf.copy_from_slice(&b.as_ref()[s..s + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        if !self.direct {
            return self.file.write_all_at(buf, offset);
        }
        if Self::aligned(buf.len(), offset) {
            let mut b = AlignedBuf::new(buf.len());
            b.as_mut().copy_from_slice(buf);
            return self.file.write_all_at(b.as_ref(), offset);
        }
        // Unaligned O_DIRECT write: read-modify-write of the covering blocks. Callers that
        // write the same block concurrently must serialise themselves (the log never does).
        let start = offset - offset % ALIGN as u64;
        let end = (offset + buf.len() as u64).div_ceil(ALIGN as u64) * ALIGN as u64;
        let mut b = self.read_blocks(start, (end - start) as usize)?;
        let s = (offset - start) as usize;
        b.as_mut()[s..s + buf.len()].copy_from_slice(buf);
        self.file.write_all_at(b.as_ref(), start)
    }

    fn write_fua(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.write_at(buf, offset)?;
        self.file.sync_data()
    }

    fn flush(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    fn size(&self) -> u64 {
        self.size
    }
    fn raw_file(&self) -> Option<(std::os::fd::RawFd, bool)> {
        use std::os::fd::AsRawFd;
        Some((self.file.as_raw_fd(), self.direct))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_aligned_and_unaligned() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("dev");
        let d = FileDev::create(&p, 64 * 1024).unwrap();
        d.write_at(&[7u8; 4096], 4096).unwrap();
        d.write_fua(b"hello", 10).unwrap();
        d.flush().unwrap();
        let mut b = [0u8; 5];
        d.read_at(&mut b, 10).unwrap();
        assert_eq!(&b, b"hello");
        let d2 = FileDev::open(&p).unwrap();
        assert_eq!(d2.size(), 64 * 1024);
        let mut b = vec![0u8; 4096];
        d2.read_at(&mut b, 4096).unwrap();
        assert!(b.iter().all(|&x| x == 7));
        assert!(d2.write_at(&[0u8; 1], 64 * 1024).is_err());
    }
}
