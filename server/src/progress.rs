//! mkfs progress. What mkfs spends its time on is zero-writing the log
//! (up to 256 MiB, so that a later log write never allocates file blocks, docs/design.md §3) and
//! the checkpoint slots, then one device flush. [`ProgressDev`] wraps the device mkfs writes
//! through and counts those bytes: a bar (indicatif) when stderr is a terminal, one plain
//! line before and the usual "formatted" line after otherwise. The store's mkfs is not
//! touched: the progress is seen from the device side.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use metalog::BlockDev;

/// A device that reports the bytes written through it to a progress bar.
pub struct ProgressDev {
    inner: Arc<dyn BlockDev>,
    written: AtomicU64,
    bar: Option<ProgressBar>,
}

impl ProgressDev {
    /// Wraps `inner` for formatting `what`; the bar (if stderr is a terminal) runs to the
    /// bytes mkfs zero-writes for a volume of this size.
    pub fn new(inner: Arc<dyn BlockDev>, what: &str) -> Arc<ProgressDev> {
        let expected = expected_bytes(inner.size());
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = ProgressBar::with_draw_target(Some(expected), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_message(format!("mkfs {what}: zeroing the log"));
            b
        });
        if bar.is_none() {
            tracing::info!(
                "mkfs {what}: zeroing {} MiB of log and checkpoint slots, then one flush",
                expected >> 20
            );
        }
        Arc::new(ProgressDev {
            inner,
            written: AtomicU64::new(0),
            bar,
        })
    }

    fn wrote(&self, n: usize) {
        let at = self.written.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if let Some(b) = &self.bar {
            b.set_position(at);
        }
    }

    /// Bytes written through the device so far.
    #[cfg(test)]
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Clears the bar (the caller logs the result).
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// The log and the checkpoint slots of a volume of `size` bytes: what mkfs zero-writes.
pub fn expected_bytes(size: u64) -> u64 {
    match layout::Geometry::for_volume(size) {
        Ok(g) => (g.log_blocks + g.meta_blocks).saturating_mul(layout::BLOCK_SIZE as u64),
        Err(_) => 0,
    }
}

impl BlockDev for ProgressDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)?;
        self.wrote(buf.len());
        Ok(())
    }
    fn write_fua(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_fua(buf, offset)?;
        self.wrote(buf.len());
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        if let Some(b) = &self.bar {
            b.set_message("mkfs: flushing the device");
        }
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn raw_file(&self) -> Option<(std::os::fd::RawFd, bool)> {
        self.inner.raw_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mkfs_through_the_wrapper_writes_about_what_the_bar_expects() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        let size = 64 << 20;
        let dev: Arc<dyn BlockDev> = Arc::new(metalog::FileDev::create(&p, size).unwrap());
        let w = ProgressDev::new(dev, "v.img");
        pnfsd::store::Store::mkfs_dev(w.clone(), false).unwrap();
        w.finish();
        let expected = expected_bytes(size);
        assert!(expected >= 4 << 20, "{expected}");
        // Every zeroed byte went through the wrapper, plus the superblock, the first
        // checkpoint and the root directory's records.
        assert!(w.written() >= expected, "{} < {expected}", w.written());
        assert!(w.written() < expected + (1 << 20), "{}", w.written());
        // The volume is formatted: it mounts.
        let s = pnfsd::store::Store::open(&p, Default::default()).unwrap();
        s.unmount().unwrap();
    }
}
