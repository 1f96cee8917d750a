//! [`CrashDev`]: an in-memory device with a volatile write cache, for crash tests (docs/design.md
//! §7).
//!
//! A completed write sits in the cache until a `flush` (or was written FUA). At a crash a random
//! subset of the cached writes survives: each survives or not independently of the others (so a
//! later write can survive an earlier one: reordering), and a surviving multi-sector write can
//! be torn at 512-byte boundaries. Survivors land in issue order, so of two surviving writes to
//! one sector the newer wins, as in a real cache. Errors can be injected on write and flush, and
//! the device can take crash snapshots at random I/O points while a workload runs.

use std::sync::Mutex;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{check_range, BlockDev};

const SECTOR: usize = 512;

struct Pending {
    off: usize,
    data: Vec<u8>,
    fua: bool,
}

struct State {
    current: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Pending>,
    rng: StdRng,
    fail_writes_in: Option<u64>,
    fail_flushes_in: Option<u64>,
    frozen: bool,
    ops: u64,
    reads: u64,
    writes: u64,
    flushes: u64,
    snapshot_prob: f64,
    snapshots: Vec<(u64, Vec<u8>)>,
}

/// A simulated disk with a volatile write cache (see the module doc).
pub struct CrashDev {
    size: u64,
    st: Mutex<State>,
    /// Microseconds each flush sleeps (outside the lock) to model device latency.
    flush_delay_us: std::sync::atomic::AtomicU64,
}

fn injected(what: &str) -> std::io::Error {
    std::io::Error::other(format!("injected {what} error"))
}

impl State {
    fn survivor(&mut self) -> Vec<u8> {
        let mut img = self.durable.clone();
        for p in &self.pending {
            let end = p.off + p.data.len();
            if p.fua {
                img[p.off..end].copy_from_slice(&p.data);
                continue;
            }
            if !self.rng.gen_bool(0.5) {
                continue;
            }
            if p.data.len() > SECTOR && self.rng.gen_bool(0.3) {
                // Torn: each 512-byte sector survives on its own.
                for (i, chunk) in p.data.chunks(SECTOR).enumerate() {
                    if self.rng.gen_bool(0.5) {
                        let o = p.off + i * SECTOR;
                        img[o..o + chunk.len()].copy_from_slice(chunk);
                    }
                }
            } else {
                img[p.off..end].copy_from_slice(&p.data);
            }
        }
        img
    }

    /// Called at the start of every write or flush: count it, maybe snapshot, fail if frozen.
    fn op(&mut self) -> std::io::Result<()> {
        if self.frozen {
            return Err(injected("power-loss"));
        }
        if self.snapshot_prob > 0.0 && self.rng.gen_bool(self.snapshot_prob) {
            let img = self.survivor();
            self.snapshots.push((self.ops, img));
        }
        self.ops += 1;
        Ok(())
    }
}

impl CrashDev {
    /// A zero-filled device of `size` bytes whose crash choices come from `seed`.
    pub fn new(size: u64, seed: u64) -> CrashDev {
        CrashDev::from_image(vec![0u8; size as usize], seed)
    }

    /// A device whose durable content is `image` (the survivor of an earlier crash).
    pub fn from_image(image: Vec<u8>, seed: u64) -> CrashDev {
        CrashDev {
            flush_delay_us: std::sync::atomic::AtomicU64::new(0),
            size: image.len() as u64,
            st: Mutex::new(State {
                current: image.clone(),
                durable: image,
                pending: Vec::new(),
                rng: StdRng::seed_from_u64(seed),
                fail_writes_in: None,
                fail_flushes_in: None,
                frozen: false,
                ops: 0,
                reads: 0,
                writes: 0,
                flushes: 0,
                snapshot_prob: 0.0,
                snapshots: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock is a test bug; keep going with the data.
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Power loss now: the returned device holds what survived (see the module doc).
    pub fn crash(&self) -> CrashDev {
        let mut st = self.lock();
        let img = st.survivor();
        let seed = st.rng.gen();
        CrashDev::from_image(img, seed)
    }

    /// The survivor image of a crash now, without disturbing this device.
    pub fn crash_image(&self) -> Vec<u8> {
        self.lock().survivor()
    }

    /// What reads see now (durable or not).
    pub fn image(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    /// What survives any crash now: flushed writes plus FUA writes.
    pub fn durable_image(&self) -> Vec<u8> {
        let st = self.lock();
        let mut img = st.durable.clone();
        for p in st.pending.iter().filter(|p| p.fua) {
            img[p.off..p.off + p.data.len()].copy_from_slice(&p.data);
        }
        img
    }

    /// The next write (or write_fua) fails with an I/O error and changes nothing.
    pub fn fail_next_write(&self) {
        self.fail_write_after(0);
    }

    /// The write after `n` more successful writes fails.
    pub fn fail_write_after(&self, n: u64) {
        self.lock().fail_writes_in = Some(n);
    }

    /// The next flush fails with an I/O error and makes nothing durable.
    pub fn fail_next_flush(&self) {
        self.fail_flush_after(0);
    }

    /// The flush after `n` more successful flushes fails.
    pub fn fail_flush_after(&self, n: u64) {
        self.lock().fail_flushes_in = Some(n);
    }

    /// Make every flush take `d` (slept before the flush takes effect, no lock held), so
    /// that tests see concurrency a real device's latency creates.
    pub fn set_flush_delay(&self, d: std::time::Duration) {
        self.flush_delay_us
            .store(d.as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Power is gone: every later write and flush fails (reads still work).
    pub fn freeze(&self) {
        self.lock().frozen = true;
    }

    /// Before each write or flush, with probability `p`, record a crash snapshot
    /// `(ops done so far, survivor image)`; collect them with [`CrashDev::take_snapshots`].
    pub fn set_snapshot_prob(&self, p: f64) {
        self.lock().snapshot_prob = p.clamp(0.0, 1.0);
    }

    /// The crash snapshots recorded so far.
    pub fn take_snapshots(&self) -> Vec<(u64, Vec<u8>)> {
        std::mem::take(&mut self.lock().snapshots)
    }

    /// Writes and flushes started so far (the clock of the snapshots).
    pub fn op_count(&self) -> u64 {
        self.lock().ops
    }

    /// (reads, writes, flushes) done so far.
    pub fn io_counts(&self) -> (u64, u64, u64) {
        let st = self.lock();
        (st.reads, st.writes, st.flushes)
    }

    fn write(&self, buf: &[u8], offset: u64, fua: bool) -> std::io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        let mut st = self.lock();
        st.op()?;
        if let Some(n) = st.fail_writes_in {
            if n == 0 {
                st.fail_writes_in = None;
                return Err(injected("write"));
            }
            st.fail_writes_in = Some(n - 1);
        }
        st.writes += 1;
        let off = offset as usize;
        st.current[off..off + buf.len()].copy_from_slice(buf);
        st.pending.push(Pending {
            off,
            data: buf.to_vec(),
            fua,
        });
        Ok(())
    }
}

impl BlockDev for CrashDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        let mut st = self.lock();
        st.reads += 1;
        let off = offset as usize;
        buf.copy_from_slice(&st.current[off..off + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.write(buf, offset, false)
    }

    fn write_fua(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.write(buf, offset, true)
    }

    fn flush(&self) -> std::io::Result<()> {
        let d = self
            .flush_delay_us
            .load(std::sync::atomic::Ordering::Relaxed);
        if d > 0 {
            std::thread::sleep(std::time::Duration::from_micros(d));
        }
        let mut st = self.lock();
        st.op()?;
        if let Some(n) = st.fail_flushes_in {
            if n == 0 {
                st.fail_flushes_in = None;
                return Err(injected("flush"));
            }
            st.fail_flushes_in = Some(n - 1);
        }
        st.flushes += 1;
        let pending = std::mem::take(&mut st.pending);
        for p in pending {
            st.durable[p.off..p.off + p.data.len()].copy_from_slice(&p.data);
        }
        Ok(())
    }

    fn size(&self) -> u64 {
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushed_and_fua_writes_survive_every_crash() {
        for seed in 0..50 {
            let d = CrashDev::new(8192, seed);
            d.write_at(&[1u8; 4096], 0).unwrap();
            d.flush().unwrap();
            d.write_fua(&[2u8; 512], 4096).unwrap();
            d.write_at(&[3u8; 4096], 0).unwrap();
            let img = d.crash().image();
            assert!(img[4096..4608].iter().all(|&b| b == 2));
            // Sector by sector, block 0 holds the old or the new data, never anything else.
            for s in img[..4096].chunks(512) {
                assert!(s.iter().all(|&b| b == s[0]) && (s[0] == 1 || s[0] == 3));
            }
        }
    }

    #[test]
    fn unflushed_writes_can_be_lost_or_torn() {
        let (mut lost, mut torn, mut kept) = (0, 0, 0);
        for seed in 0..200 {
            let d = CrashDev::new(4096, seed);
            d.write_at(&[9u8; 4096], 0).unwrap();
            let img = d.crash().image();
            let n = img.iter().filter(|&&b| b == 9).count();
            match n {
                0 => lost += 1,
                4096 => kept += 1,
                _ => torn += 1,
            }
        }
        assert!(lost > 0 && torn > 0 && kept > 0, "{lost} {torn} {kept}");
    }

    #[test]
    fn injected_errors_fail_once() {
        let d = CrashDev::new(4096, 1);
        d.fail_next_write();
        assert!(d.write_at(&[1], 0).is_err());
        d.write_at(&[1], 0).unwrap();
        d.fail_next_flush();
        assert!(d.flush().is_err());
        d.flush().unwrap();
        d.freeze();
        assert!(d.write_at(&[1], 0).is_err());
        assert!(d.flush().is_err());
    }
}
