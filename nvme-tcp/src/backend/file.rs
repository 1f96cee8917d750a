//! A namespace on a regular file or a block device. Writes go through the page cache (the
//! volatile write cache we advertise, VWC = 1); `flush` is `fdatasync` (design.md §6).

use super::Backend;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;

#[derive(Debug)]
pub struct FileBackend {
    file: File,
    block_size: u32,
    num_blocks: u64,
}

impl FileBackend {
    /// Opens an existing file or block device read-write. Its size (rounded down to whole
    /// blocks) is the namespace size.
    pub fn open(path: &Path, block_size: u32) -> io::Result<Self> {
        if !(block_size == 512 || block_size == 4096) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "block size must be 512 or 4096",
            ));
        }
        let mut file = OpenOptions::new().read(true).write(true).open(path)?;
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
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        // fdatasync: one call covers every controller's completed writes to this file.
        self.file.sync_data()
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
    }
}
