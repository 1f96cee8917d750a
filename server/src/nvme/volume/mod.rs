//! The data volume on an external NVMe/TCP namespace (docs/design.md §2):
//! [`NvmeDev`] implements `metalog::BlockDev` over the `nvme_tcp::Initiator`, so the store,
//! its log and the daemon use a remote namespace exactly as they use a file.
//!
//! Why here: the adapter is the one place that knows both crates, as `crate::nvme`'s
//! `VolumeBackend` is for the opposite direction (a `BlockDev` exported as a namespace).
//! metalog keeps knowing nothing of NVMe, and nvme-tcp nothing of metalog.
//!
//! Sync over async: `BlockDev` is synchronous (metalog's callers run on blocking threads),
//! the initiator is async. `NvmeDev` owns a small dedicated tokio runtime that runs the
//! initiator (its queue readers, writers and keep-alive); a call spawns the command on it and
//! waits on a std channel. It never `block_on`s, so it may be called from any thread — even
//! an async worker of another runtime would only be stalled, never deadlocked or panicked.
//!
//! Durability (docs/design.md §3–4): `write_at` is an NVMe Write that completes into the target's
//! volatile write cache; `write_fua` sets FUA (the log's commit record, the superblock);
//! `flush` is an NVMe Flush of the namespace — the data-volume flush of LAYOUTCOMMIT and of
//! the log force, and what makes the clients' own writes through the same target durable.
//!
//! Errors: every failure is an `std::io::Error` (`to_io`), so metalog shuts the log down and
//! the NFS layer answers NFS4ERR_IO. A dead connection fails every later call at once
//! (the initiator fails its queues when the socket closes); a target that stops answering
//! fails each command after `timeout`. There is no reconnect: the daemon must be restarted
//! once the volume's connection is lost (recovery then runs over the new connection).
//!
//! Fencing (docs/ha.md): a command the target refuses with Reservation Conflict means another
//! MDS took the volume over. The device is then fenced (`is_fenced`): it sends nothing more,
//! and the daemon stops serving and exits without writing the volume again.

mod fence;
mod spec;

pub use fence::{
    claim_metadata, preempt_and_abort, refuse_held, registered_keys, still_holder, ClaimError,
    Claimed,
};
pub use spec::{is_nvme_url, NvmeVolumeSpec, DEFAULT_HOSTNQN, DEFAULT_PORT, SCHEME};

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use metalog::BlockDev;
use nvme_tcp::{Initiator, InitiatorConfig, NamespaceInfo};

/// Largest transfer per command when the controller reports no MDTS: bounds the memory one
/// command pins (our target's MDTS is 512 KiB; Linux hosts default to similar sizes).
const MAX_XFER_DEFAULT: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum NvmeVolumeError {
    #[error("{0}")]
    Spec(String),
    #[error("NVMe/TCP volume runtime: {0}")]
    Runtime(io::Error),
    #[error("NVMe/TCP volume {url}: {err}")]
    Connect { url: String, err: io::Error },
    #[error("NVMe/TCP volume {url}: namespace {nsid}: {why}")]
    Namespace { url: String, nsid: u32, why: String },
}

/// `metalog::BlockDev` over one namespace of an external NVMe/TCP subsystem.
pub struct NvmeDev {
    spec: NvmeVolumeSpec,
    /// The dedicated runtime (module comment).
    _rt: RuntimeGuard,
    handle: tokio::runtime::Handle,
    /// `None` once `disconnect` ran: later calls fail with NotConnected.
    ini: RwLock<Option<Arc<Initiator>>>,
    /// Set by the first connection-level failure (`is_lost`): the device then fails every
    /// call, whichever queue it would have used (no reconnect, module comment).
    lost: AtomicBool,
    /// Set by the first Reservation Conflict (`is_fenced`); implies `lost`.
    fenced: AtomicBool,
    /// The Host Identifier the reservations know this MDS by (from the host NQN).
    hostid: [u8; 16],
    info: NamespaceInfo,
    lba: u64,
    size: u64,
    max_xfer: usize,
    /// Serialises read-modify-writes of partial blocks (as `FileDev`, callers that write the
    /// same block concurrently must order themselves; this only keeps two RMWs apart).
    rmw: Mutex<()>,
}

impl std::fmt::Debug for NvmeDev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NvmeDev({} size {})", self.spec, self.size)
    }
}

/// The one mapping of initiator errors to `io::Error` (docs/design.md, house rule 3); the kind says whether
/// the connection is gone (NotConnected / ConnectionAborted) or a command failed (Other).
pub fn to_io(e: nvme_tcp::Error) -> io::Error {
    use nvme_tcp::Error as E;
    match e {
        E::Io(e) => e,
        E::Closed => io::Error::new(
            io::ErrorKind::NotConnected,
            "NVMe/TCP volume: connection closed",
        ),
        e @ (E::Protocol(_) | E::Terminated { .. }) => {
            io::Error::new(io::ErrorKind::ConnectionAborted, format!("NVMe/TCP: {e}"))
        }
        e @ E::ConnectRefused { .. } => {
            io::Error::new(io::ErrorKind::ConnectionRefused, format!("NVMe/TCP: {e}"))
        }
        e @ E::Config(_) => io::Error::new(io::ErrorKind::InvalidInput, format!("NVMe/TCP: {e}")),
        E::Status(s) if is_conflict(s) => io::Error::new(io::ErrorKind::PermissionDenied, Fenced),
        E::Status(s) => io::Error::other(format!("NVMe/TCP command failed: {s}")),
        // The target's, never the initiator's.
        e @ E::StillInFlight { .. } => io::Error::other(format!("NVMe/TCP: {e}")),
    }
}

/// Reservation Conflict (NVMe Base 2.0 §8.19: the namespace is reserved by another host),
/// whatever the Do Not Retry bit says.
fn is_conflict(s: nvme_tcp::Status) -> bool {
    let c = nvme_tcp::Status::RESERVATION_CONFLICT;
    (s.sct(), s.sc()) == (c.sct(), c.sc())
}

/// The error of a command refused by reservation: this MDS is fenced.
#[derive(Debug)]
struct Fenced;

impl std::fmt::Display for Fenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(
            "NVMe/TCP: reservation conflict: another MDS holds the volume's reservation \
             (this MDS was fenced by a takeover)",
        )
    }
}

impl std::error::Error for Fenced {}

/// Whether `e` is a command refused by reservation (`to_io`).
pub fn is_fenced_error(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|x| x.is::<Fenced>())
}

impl NvmeDev {
    /// Connects to the namespace `spec` names (admin queue, `io_queues` I/O queues, Identify).
    /// Bounded by `spec.timeout`.
    pub fn connect(spec: &NvmeVolumeSpec) -> Result<NvmeDev, NvmeVolumeError> {
        // One worker: every queue's reader, writer and command run on it, so a completion
        // wakes its command on the same thread. Two workers handed woken commands across
        // (a futex per batch): the initiator's CPU per operation was 1.1–1.7× this in every
        // case of nvme_volume_bench, for the same throughput (docs/nvme-tcp.md "External
        // volume"). Nothing on it blocks: callers wait on their own threads (`run_on`).
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name("nvme-volume")
            .build()
            .map_err(NvmeVolumeError::Runtime)?;
        let handle = rt.handle().clone();
        // Dropped on every return below, success or error, from any context.
        let rt = RuntimeGuard(Some(rt));
        let url = spec.to_string();
        let cerr = |err: io::Error| NvmeVolumeError::Connect {
            url: url.clone(),
            err,
        };
        let s = spec.clone();
        let (ini, info, hostid) = run_on(&handle, spec.timeout, async move {
            let addr = tokio::net::lookup_host(s.authority())
                .await?
                .next()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
            let mut cfg = InitiatorConfig::new(s.subnqn.clone(), s.hostnqn.clone());
            cfg.io_queues = s.io_queues;
            let hostid = cfg.hostid;
            let ini = Initiator::connect(addr, cfg).await.map_err(to_io)?;
            let info = ini.identify_namespace(s.nsid).await.map_err(to_io)?;
            Ok((ini, info, hostid))
        })
        .map_err(cerr)?;
        let ns_err = |why: String| NvmeVolumeError::Namespace {
            url: url.clone(),
            nsid: spec.nsid,
            why,
        };
        if ini.io_queue_count() == 0 {
            return Err(ns_err("the controller granted no I/O queue".into()));
        }
        if info.blocks == 0 {
            return Err(ns_err("not an active namespace (size 0)".into()));
        }
        let lba = info.block_size as u64;
        // MDTS (Identify Controller byte 77): a power of two in units of the minimum memory
        // page size, which the initiator sets to 4 KiB (CC.MPS = 0); 0 means no limit.
        let mdts = ini.controller_data().get(77).copied().unwrap_or(0);
        let limit = match mdts {
            0 => MAX_XFER_DEFAULT,
            m => 4096usize.checked_shl(m as u32).unwrap_or(MAX_XFER_DEFAULT),
        };
        // Whole blocks, at most 65536 per command (NLB is 16 bits, 0's based).
        let max_xfer =
            (limit.min(MAX_XFER_DEFAULT) / lba as usize).clamp(1, 1 << 16) * lba as usize;
        Ok(NvmeDev {
            spec: spec.clone(),
            _rt: rt,
            handle,
            ini: RwLock::new(Some(Arc::new(ini))),
            lost: AtomicBool::new(false),
            fenced: AtomicBool::new(false),
            hostid,
            size: info.blocks.saturating_mul(lba),
            info,
            lba,
            max_xfer,
            rmw: Mutex::new(()),
        })
    }

    /// Identify Namespace of the volume: its NGUID and EUI-64 name it for the SCSI layout.
    pub fn namespace_info(&self) -> &NamespaceInfo {
        &self.info
    }

    pub fn spec(&self) -> &NvmeVolumeSpec {
        &self.spec
    }

    /// The designator a SCSI-layout client opens the namespace by (RFC 9561 §2, designator
    /// type EUI-64): the NGUID when the namespace has one, else its EUI-64 — the order in
    /// which a Linux host builds the namespace's `eui.` wwid (and knfsd's choice); `None` if
    /// it has neither. docs/pnfs.md discusses which by-id name the client then opens.
    pub fn designator(&self) -> Option<Vec<u8>> {
        if self.info.nguid != [0; 16] {
            Some(self.info.nguid.to_vec())
        } else if self.info.eui64 != [0; 8] {
            Some(self.info.eui64.to_vec())
        } else {
            None
        }
    }

    /// Orderly shutdown (CC.SHN, queue Disconnects) after the store unmounted; later calls
    /// fail with NotConnected.
    pub fn disconnect(&self) -> io::Result<()> {
        let taken = self.ini.write().unwrap_or_else(|e| e.into_inner()).take();
        let Some(ini) = taken else { return Ok(()) };
        match Arc::try_unwrap(ini) {
            Ok(ini) => run_on(&self.handle, self.spec.timeout, async move {
                ini.disconnect().await.map_err(to_io)
            }),
            // A command is still in flight somewhere: dropping closes the queues.
            Err(_) => Ok(()),
        }
    }

    fn initiator(&self) -> io::Result<Arc<Initiator>> {
        let ini = self
            .ini
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "NVMe/TCP volume closed"))?;
        if ini.is_closed() {
            self.lost.store(true, Ordering::Release);
        }
        if self.lost.load(Ordering::Acquire) {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                format!(
                    "NVMe/TCP volume {}: connection lost (no reconnect: restart pnfsd)",
                    self.spec
                ),
            ));
        }
        Ok(ini)
    }

    /// True once a connection-level failure was seen.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// True once the target refused a command by reservation: another MDS took over.
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Acquire)
    }

    /// Marks the device fenced (a command refused by reservation, or the reservation found
    /// gone, `fence::still_holder`): nothing more is sent.
    pub fn set_fenced(&self) {
        self.lost.store(true, Ordering::Release);
        if !self.fenced.swap(true, Ordering::AcqRel) {
            tracing::error!(
                "NVMe/TCP volume {}: fenced: another MDS holds the reservation now; nothing \
                 more is sent to the volume",
                self.spec
            );
        }
    }

    /// This host's Host Identifier, as the reservations know it.
    pub fn hostid(&self) -> [u8; 16] {
        self.hostid
    }

    fn call<T: Send + 'static>(
        &self,
        f: impl Future<Output = io::Result<T>> + Send + 'static,
    ) -> io::Result<T> {
        let r = run_on(&self.handle, self.spec.timeout, f);
        if let Err(e) = &r {
            if is_fenced_error(e) {
                self.set_fenced();
                return r;
            }
            // A lost queue or a command that never answered (it may still land later):
            // the device is no longer trustworthy, so every later call fails too. A command
            // status (e.g. LBA out of range) leaves the connection usable.
            if matches!(
                e.kind(),
                io::ErrorKind::NotConnected
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::TimedOut
                    | io::ErrorKind::UnexpectedEof
            ) && !self.lost.swap(true, Ordering::AcqRel)
            {
                tracing::error!("NVMe/TCP volume {}: {e}; the volume is lost", self.spec);
            }
        }
        r
    }

    /// Whole-block read of `len` bytes at block-aligned `offset`, split at `max_xfer`.
    fn read_blocks(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let ini = self.initiator()?;
        let (nsid, lba, max) = (self.spec.nsid, self.lba, self.max_xfer);
        self.call(async move {
            let mut out = Vec::with_capacity(len);
            while out.len() < len {
                let n = max.min(len - out.len());
                let slba = (offset + out.len() as u64) / lba;
                let d = ini
                    .read(nsid, slba, (n as u64 / lba) as u32, lba as u32)
                    .await
                    .map_err(to_io)?;
                if d.len() != n {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("NVMe/TCP read returned {} of {n} bytes", d.len()),
                    ));
                }
                out.extend_from_slice(&d);
            }
            Ok(out)
        })
    }

    /// Whole-block write at block-aligned `offset`, each command with `fua`.
    fn write_blocks(&self, data: Bytes, offset: u64, fua: bool) -> io::Result<()> {
        let ini = self.initiator()?;
        let (nsid, lba, max) = (self.spec.nsid, self.lba, self.max_xfer);
        self.call(async move {
            let mut done = 0;
            while done < data.len() {
                let n = max.min(data.len() - done);
                let slba = (offset + done as u64) / lba;
                ini.write(nsid, slba, data.slice(done..done + n), lba as u32, fua)
                    .await
                    .map_err(to_io)?;
                done += n;
            }
            Ok(())
        })
    }

    fn aligned(&self, offset: u64, len: usize) -> bool {
        offset.is_multiple_of(self.lba) && (len as u64).is_multiple_of(self.lba)
    }

    /// The block-aligned range covering `[offset, offset + len)`.
    fn cover(&self, offset: u64, len: usize) -> (u64, usize) {
        let start = offset - offset % self.lba;
        let end = (offset + len as u64).div_ceil(self.lba) * self.lba;
        (start, (end - start) as usize)
    }

    fn write(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        if buf.is_empty() {
            return Ok(());
        }
        if self.aligned(offset, buf.len()) {
            return self.write_blocks(Bytes::copy_from_slice(buf), offset, fua);
        }
        let _g = self.rmw.lock().unwrap_or_else(|e| e.into_inner());
        let (start, len) = self.cover(offset, buf.len());
        let mut b = self.read_blocks(start, len)?;
        let s = (offset - start) as usize;
        b[s..s + buf.len()].copy_from_slice(buf);
        self.write_blocks(Bytes::from(b), start, fua)
    }
}

fn check_range(off: u64, len: usize, size: u64) -> io::Result<()> {
    match off.checked_add(len as u64) {
        Some(end) if end <= size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("I/O [{off}, +{len}) beyond the namespace's {size} bytes"),
        )),
    }
}

/// Runs `f` on `handle`'s runtime and waits for it on this thread, failing with TimedOut
/// after `timeout` (the command is abandoned; the initiator recycles its CID when, if ever,
/// the answer comes).
fn run_on<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    timeout: std::time::Duration,
    f: impl Future<Output = io::Result<T>> + Send + 'static,
) -> io::Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let r = match tokio::time::timeout(timeout, f).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("NVMe/TCP volume: no answer within {timeout:?}"),
            )),
        };
        let _ = tx.send(r);
    });
    rx.recv()
        .map_err(|_| io::Error::other("NVMe/TCP volume runtime stopped"))?
}

impl BlockDev for NvmeDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(offset, buf.len(), self.size)?;
        if buf.is_empty() {
            return Ok(());
        }
        let (start, len) = self.cover(offset, buf.len());
        let b = self.read_blocks(start, len)?;
        let s = (offset - start) as usize;
        buf.copy_from_slice(&b[s..s + buf.len()]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write(buf, offset, false)
    }

    /// FUA on every command (docs/design.md §3: the commit record is written durably).
    fn write_fua(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.write(buf, offset, true)
    }

    /// NVMe Flush: every write the target completed, from us or from a client, is durable.
    fn flush(&self) -> io::Result<()> {
        let ini = self.initiator()?;
        let nsid = self.spec.nsid;
        self.call(async move { ini.flush(nsid).await.map_err(to_io) })
    }

    fn size(&self) -> u64 {
        self.size
    }
}

/// Owns the dedicated runtime and shuts it down with `shutdown_background`, which (unlike
/// dropping a `Runtime`) is allowed inside another runtime (tokio docs).
struct RuntimeGuard(Option<tokio::runtime::Runtime>);

impl Drop for RuntimeGuard {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests;
