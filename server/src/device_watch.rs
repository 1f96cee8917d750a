//! [`WatchedDev`]: the volume as the store and the NVMe/TCP target use it, saying once, at
//! the moment it happens, that the device failed. Before, a device failing
//! mid-run gave clients NFS4ERR_IO and left the log silent until SIGTERM.
//!
//! The first failed read, write or flush logs one ERROR line naming the device, the
//! operation and the error, and what follows from it; later failures are counted and
//! summed up at most once a minute, so a client retrying cannot flood the log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metalog::BlockDev;

use crate::rpc::limits::RateLimit;

/// How often a device that keeps failing is mentioned again.
const REPEAT_INTERVAL: Duration = Duration::from_secs(60);

/// A `BlockDev` that reports its first failure (see the module doc).
pub struct WatchedDev {
    inner: Arc<dyn BlockDev>,
    name: String,
    failed: AtomicBool,
    first: Mutex<Option<String>>,
    repeat: RateLimit,
}

impl WatchedDev {
    pub fn new(inner: Arc<dyn BlockDev>, name: impl Into<String>) -> WatchedDev {
        WatchedDev {
            inner,
            name: name.into(),
            failed: AtomicBool::new(false),
            first: Mutex::new(None),
            repeat: RateLimit::new(REPEAT_INTERVAL),
        }
    }

    /// The first failure, as logged; `None` while the device never failed.
    pub fn failure(&self) -> Option<String> {
        self.first.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn note<T>(&self, op: &str, offset: u64, r: std::io::Result<T>) -> std::io::Result<T> {
        let Err(e) = &r else {
            return r;
        };
        let enospc = e.raw_os_error() == Some(libc::ENOSPC);
        let what = if enospc {
            "the filesystem or device under the volume is full"
        } else {
            "the device failed"
        };
        if !self.failed.swap(true, Ordering::SeqCst) {
            let line = format!("{op} at byte {offset} of {}: {e}", self.name);
            tracing::error!(
                device = %self.name,
                op,
                offset,
                "storage failure: {line}: {what}; what needs the device fails with NFS4ERR_{} \
                 and a failed log write or flush shuts the metadata log down, refusing every \
                 change (pnfsd_log_shut_down) until the device is healed and pnfsd restarted; \
                 everything acknowledged before is on the device",
                if enospc { "NOSPC" } else { "IO" }
            );
            *self.first.lock().unwrap_or_else(|e| e.into_inner()) = Some(line);
            // The next mention comes an interval after this one.
            let _ = self.repeat.allow();
        } else if let Some(n) = self.repeat.allow() {
            tracing::warn!(
                device = %self.name,
                op,
                similar_not_logged = n,
                "storage still failing: {e}"
            );
        }
        r
    }
}

impl BlockDev for WatchedDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        let r = self.inner.read_at(buf, offset);
        self.note("read", offset, r)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let r = self.inner.write_at(buf, offset);
        self.note("write", offset, r)
    }

    fn write_fua(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        let r = self.inner.write_fua(buf, offset);
        self.note("FUA write", offset, r)
    }

    fn flush(&self) -> std::io::Result<()> {
        let r = self.inner.flush();
        self.note("flush", 0, r)
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metalog::{CrashDev, Fault, FaultDev};

    #[test]
    fn the_first_failure_is_logged_once_and_kept() {
        let (log, _g) = crate::log_capture::capture();
        let fault = Arc::new(FaultDev::new(Arc::new(CrashDev::new(1 << 16, 1))));
        let d = WatchedDev::new(fault.clone(), "/srv/pnfs/volume.img");
        d.write_at(&[1; 512], 0).unwrap();
        assert_eq!(d.failure(), None);
        fault.fail_writes_after(0, Fault::NoSpace);
        for i in 0..100 {
            assert!(d.write_at(&[1; 512], 512 * i).is_err());
        }
        assert!(d.flush().is_ok());
        let text = log.text();
        assert_eq!(text.matches("storage failure").count(), 1, "{text}");
        assert_eq!(text.matches("storage still failing").count(), 0, "{text}");
        assert!(text.contains("/srv/pnfs/volume.img") && text.contains("NFS4ERR_NOSPC"));
        assert!(d.failure().unwrap().contains("write at byte 0"));
    }
}
