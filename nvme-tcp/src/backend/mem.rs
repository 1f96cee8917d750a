//! An in-memory namespace for tests and benchmarks. Nothing here is durable: `flush` is a
//! no-op because there is no stable medium behind it.

use super::Backend;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, RwLock};

#[derive(Debug)]
pub struct MemBackend {
    data: RwLock<Vec<u8>>,
    block_size: u32,
}

impl MemBackend {
    pub fn new(num_blocks: u64, block_size: u32) -> Self {
        MemBackend {
            data: RwLock::new(vec![0u8; (num_blocks * block_size as u64) as usize]),
            block_size,
        }
    }
}

fn range(len: usize, off: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
    let s = usize::try_from(off).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    match s.checked_add(n) {
        Some(e) if e <= len => Ok(s..e),
        _ => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
    }
}

impl Backend for MemBackend {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn num_blocks(&self) -> u64 {
        let d = self.data.read().unwrap_or_else(|p| p.into_inner());
        d.len() as u64 / self.block_size as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let d = self.data.read().unwrap_or_else(|p| p.into_inner());
        let r = range(d.len(), offset, buf.len())?;
        buf.copy_from_slice(&d[r]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut d = self.data.write().unwrap_or_else(|p| p.into_inner());
        let r = range(d.len(), offset, buf.len())?;
        d[r].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn fast_writes(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_bounds() {
        let m = MemBackend::new(4, 512);
        m.write_at(&[1; 512], 1536).unwrap();
        assert!(m.write_at(&[1; 512], 2048).is_err());
        let mut b = [0u8; 512];
        m.read_at(&mut b, 1536).unwrap();
        assert_eq!(b, [1; 512]);
    }
}

/// A memory namespace whose writes can be held at the media: while `hold(true)` stands,
/// every write waits inside `write_at`. For tests of I/O caught in flight (a fence, a
/// shutdown), here and in embedders; it counts the writes begun and done.
#[derive(Debug)]
pub struct HeldMem {
    mem: MemBackend,
    held: Mutex<bool>,
    release: Condvar,
    begun: AtomicUsize,
    done: AtomicUsize,
}

impl HeldMem {
    pub fn new(num_blocks: u64, block_size: u32) -> Self {
        HeldMem {
            mem: MemBackend::new(num_blocks, block_size),
            held: Mutex::new(false),
            release: Condvar::new(),
            begun: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        }
    }

    /// Holds (true) or releases (false) the writes.
    pub fn hold(&self, on: bool) {
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = on;
        self.release.notify_all();
    }

    /// Writes that reached `write_at`.
    pub fn writes_begun(&self) -> usize {
        self.begun.load(Ordering::SeqCst)
    }

    /// Writes that left it.
    pub fn writes_done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }

    /// The memory behind it, to read what landed.
    pub fn mem(&self) -> &MemBackend {
        &self.mem
    }
}

impl Backend for HeldMem {
    fn block_size(&self) -> u32 {
        self.mem.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.mem.num_blocks()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.mem.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.begun.fetch_add(1, Ordering::SeqCst);
        let mut h = self.held.lock().unwrap_or_else(|p| p.into_inner());
        while *h {
            h = self.release.wait(h).unwrap_or_else(|p| p.into_inner());
        }
        drop(h);
        let r = self.mem.write_at(buf, offset);
        self.done.fetch_add(1, Ordering::SeqCst);
        r
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
}
