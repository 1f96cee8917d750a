//! [`FaultDev`]: a device that fails on purpose (storage faults must fail safe).
//! It wraps another [`BlockDev`] and, once armed, fails writes, flushes or reads from a chosen
//! point on — with EIO, or with ENOSPC as a full filesystem under a sparse volume file gives —
//! until it is healed. Every failure is counted, so a test can tell what was refused.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::BlockDev;

/// Which error an armed operation returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// EIO: the device failed.
    Io,
    /// ENOSPC: the filesystem under a volume file is full.
    NoSpace,
}

impl Fault {
    fn error(self) -> std::io::Error {
        std::io::Error::from_raw_os_error(match self {
            Fault::Io => libc::EIO,
            Fault::NoSpace => libc::ENOSPC,
        })
    }
}

/// When one kind of operation starts failing: after `ok` more successful ones, and only
/// for I/O that touches `[start, end)` (the whole device by default).
#[derive(Debug, Clone, Copy)]
struct Arm {
    ok: u64,
    fault: Fault,
    start: u64,
    end: u64,
}

#[derive(Debug, Default)]
struct Plan {
    writes: Option<Arm>,
    flushes: Option<Arm>,
    reads: Option<Arm>,
}

/// A device that fails where it is told to (see the module doc).
pub struct FaultDev {
    inner: Arc<dyn BlockDev>,
    plan: Mutex<Plan>,
    /// Operations refused so far: reads, writes (FUA included), flushes.
    failed: [AtomicU64; 3],
}

impl FaultDev {
    pub fn new(inner: Arc<dyn BlockDev>) -> FaultDev {
        FaultDev {
            inner,
            plan: Mutex::new(Plan::default()),
            failed: Default::default(),
        }
    }

    fn plan(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After `ok` more successful writes, every write fails with `fault`.
    pub fn fail_writes_after(&self, ok: u64, fault: Fault) {
        self.fail_writes_in(ok, fault, 0, u64::MAX);
    }

    /// Like `fail_writes_after`, for writes that touch `[start, end)` only (the log region,
    /// or the data area).
    pub fn fail_writes_in(&self, ok: u64, fault: Fault, start: u64, end: u64) {
        self.plan().writes = Some(Arm {
            ok,
            fault,
            start,
            end,
        });
    }

    /// After `ok` more successful flushes (FUA writes count as flushes too), every flush
    /// fails with `fault`.
    pub fn fail_flushes_after(&self, ok: u64, fault: Fault) {
        self.plan().flushes = Some(Arm {
            ok,
            fault,
            start: 0,
            end: u64::MAX,
        });
    }

    /// After `ok` more successful reads of `[start, end)`, every such read fails.
    pub fn fail_reads_in(&self, ok: u64, fault: Fault, start: u64, end: u64) {
        self.plan().reads = Some(Arm {
            ok,
            fault,
            start,
            end,
        });
    }

    /// The device works again.
    pub fn heal(&self) {
        *self.plan() = Plan::default();
    }

    /// Operations refused so far: (reads, writes, flushes).
    pub fn failed(&self) -> (u64, u64, u64) {
        let f = |i: usize| self.failed[i].load(Ordering::Relaxed);
        (f(0), f(1), f(2))
    }

    /// Whether the armed `pick` refuses I/O at `[off, +len)`; counts the successes.
    fn check(
        &self,
        pick: impl Fn(&mut Plan) -> &mut Option<Arm>,
        off: u64,
        len: usize,
        counter: usize,
    ) -> std::io::Result<()> {
        let mut plan = self.plan();
        let Some(arm) = pick(&mut plan).as_mut() else {
            return Ok(());
        };
        // A flush (len 0) concerns the whole device.
        let end = off.saturating_add(len as u64);
        if len > 0 && (end <= arm.start || off >= arm.end) {
            return Ok(());
        }
        if arm.ok > 0 {
            arm.ok -= 1;
            return Ok(());
        }
        self.failed[counter].fetch_add(1, Ordering::Relaxed);
        Err(arm.fault.error())
    }
}

impl BlockDev for FaultDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.check(|p| &mut p.reads, offset, buf.len(), 0)?;
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.check(|p| &mut p.writes, offset, buf.len(), 1)?;
        self.inner.write_at(buf, offset)
    }

    fn write_fua(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.check(|p| &mut p.writes, offset, buf.len(), 1)?;
        self.check(|p| &mut p.flushes, 0, 0, 2)?;
        self.inner.write_fua(buf, offset)
    }

    fn flush(&self) -> std::io::Result<()> {
        self.check(|p| &mut p.flushes, 0, 0, 2)?;
        self.inner.flush()
    }

    fn size(&self) -> u64 {
        self.inner.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CrashDev;

    #[test]
    fn fails_from_the_chosen_point_until_healed() {
        let d = FaultDev::new(Arc::new(CrashDev::new(1 << 16, 1)));
        d.fail_writes_after(2, Fault::NoSpace);
        assert!(d.write_at(&[1; 512], 0).is_ok());
        assert!(d.write_at(&[1; 512], 512).is_ok());
        let e = d.write_at(&[1; 512], 1024).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert!(matches!(
            crate::LogError::from(e),
            crate::LogError::NoDeviceSpace(_)
        ));
        assert!(d.flush().is_ok());
        d.fail_flushes_after(0, Fault::Io);
        assert_eq!(d.flush().unwrap_err().raw_os_error(), Some(libc::EIO));
        assert!(d.write_fua(&[1; 512], 0).is_err());
        // Reads of another range still work.
        d.fail_reads_in(0, Fault::Io, 4096, 8192);
        let mut b = [0u8; 512];
        assert!(d.read_at(&mut b, 0).is_ok());
        assert!(d.read_at(&mut b, 4096 - 256).is_err());
        // The FUA write was refused as a write (writes are still armed).
        assert_eq!(d.failed(), (1, 2, 1));
        d.heal();
        assert!(d.write_at(&[1; 512], 1024).is_ok() && d.flush().is_ok());
        assert!(d.read_at(&mut b, 4096).is_ok());
    }
}
