//! The embedded NVMe/TCP target (issue 5, crate `nvme-tcp`): exports the data volume as
//! namespace 1 so that one daemon is a complete pNFS system (design.md §1, §6).
//!
//! The namespace is the very `BlockDev` the store mounted (`VolumeBackend` wraps the same
//! `Arc`, hence the same open file descriptor): a client's NVMe Write lands in the file the
//! store reads, and an NVMe Flush is `BlockDev::flush` — the `fdatasync` of that descriptor
//! the store's log force and COMMIT use — so either flush covers both parties' completed
//! writes (design.md §6 "honest volatile write cache").
//!
//! Never does: protect the superblock, log or metadata area from a host that writes there —
//! the block layout trusts its clients, and the SCSI layout fences them with reservations.

use std::net::SocketAddr;
use std::sync::Arc;

use metalog::BlockDev;
use nvme_tcp::{
    AcquireAction, Backend, NamespaceConfig, RType, RegisterAction, Target, TargetConfig,
};

use crate::nfs4::scsi::{PrFencer, PreemptError};

use crate::config::Config;

/// The namespace's LBA size: the store's block size (layout::BLOCK_SIZE), so every NVMe I/O
/// is whole, aligned store blocks (the O_DIRECT `FileDev` then never read-modify-writes).
pub const LBA_SIZE: u32 = 4096;
/// The namespace that carries the volume.
pub const NSID: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum NvmeError {
    #[error(
        "NVMe/TCP target: {addr} is already in use; choose another address with \
         --nvme-listen ADDR:PORT (config nvme_listen), or disable the target with --no-nvme \
         (nvme_listen = \"off\")"
    )]
    AddrInUse { addr: SocketAddr },
    #[error("NVMe/TCP target on {addr}: {err}")]
    Target {
        addr: SocketAddr,
        err: nvme_tcp::Error,
    },
}

/// `nvme_tcp::Backend` over the store's device.
pub struct VolumeBackend {
    dev: Arc<dyn BlockDev>,
    num_blocks: u64,
}

impl VolumeBackend {
    pub fn new(dev: Arc<dyn BlockDev>) -> Self {
        let num_blocks = dev.size() / LBA_SIZE as u64;
        VolumeBackend { dev, num_blocks }
    }
}

impl Backend for VolumeBackend {
    fn block_size(&self) -> u32 {
        LBA_SIZE
    }
    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.dev.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.dev.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        // The same fdatasync the store's flushes issue (module comment).
        self.dev.flush()
    }
    fn io_file(&self) -> Option<nvme_tcp::IoFile> {
        // The target's io_uring reads and writes the same descriptor (docs/nvme-tcp.md).
        self.dev
            .raw_file()
            .map(|(fd, direct)| nvme_tcp::IoFile { fd, direct })
    }
}

/// The target configuration for `cfg`: the volume as namespace 1, identifiers from its UUID.
pub fn target_config(cfg: &Config, dev: Arc<dyn BlockDev>, volume_uuid: [u8; 16]) -> TargetConfig {
    let ns = NamespaceConfig {
        nsid: NSID,
        backend: Arc::new(VolumeBackend::new(dev)),
        volume_uuid,
    };
    let mut t = TargetConfig::new(cfg.nvme_nqn.clone(), vec![ns]);
    t.allowed_hosts = cfg.nvme_allowed_hosts.clone();
    t.advertise = cfg.nvme_advertise;
    t
}

/// Binds the target on `addr` (nothing is served until `Target::spawn`).
pub async fn bind(addr: SocketAddr, tc: TargetConfig) -> Result<Target, NvmeError> {
    Target::bind(addr, tc).await.map_err(|err| match err {
        nvme_tcp::Error::Io(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            NvmeError::AddrInUse { addr }
        }
        err => NvmeError::Target { addr, err },
    })
}

/// The Host Identifier under which the MDS holds its registration (it never connects: the
/// in-process reservation API plays its commands, `Target` docs).
pub const MDS_HOSTID: [u8; 16] = *b"pnfsd-mds-hostid";

/// SCSI layout (RFC 8154 §2.4.2 over NVMe): the MDS registers its key and holds
/// EXCLUSIVE_ACCESS_REG_ONLY on the volume, so only hosts that registered the key
/// GETDEVICEINFO gave them may do I/O, and a preempted one may not.
pub fn claim_for_scsi(target: &Target) -> Result<(), nvme_tcp::Status> {
    let key = layout::scsi::MDS_PR_KEY;
    // IEKEY: whatever key this host id held before (a previous registration) is replaced.
    target.reservation_register(NSID, MDS_HOSTID, RegisterAction::Register, true, 0, key)?;
    target.reservation_acquire(
        NSID,
        MDS_HOSTID,
        AcquireAction::Acquire,
        RType::EXCLUSIVE_ACCESS_REG_ONLY,
        key,
        0,
    )?;
    Ok(())
}

/// Fencing through the embedded target's reservations (`nfs4::scsi::PrFencer`).
pub struct TargetFencer(pub Target);

impl PrFencer for TargetFencer {
    fn preempt_and_abort(&self, key: u64) -> Result<(), PreemptError> {
        self.0
            .reservation_acquire(
                NSID,
                MDS_HOSTID,
                AcquireAction::PreemptAndAbort,
                RType::EXCLUSIVE_ACCESS_REG_ONLY,
                layout::scsi::MDS_PR_KEY,
                key,
            )
            .map(|gone| tracing::info!(hosts = gone.len(), key, "preempted"))
            .map_err(crate::nfs4::scsi::preempt_status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metalog::FileDev;

    #[test]
    fn backend_is_the_device() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        let dev: Arc<dyn BlockDev> = Arc::new(FileDev::create(&p, 1 << 20).unwrap());
        let b = VolumeBackend::new(dev.clone());
        assert_eq!((b.block_size(), b.num_blocks()), (4096, 256));
        b.write_at(&[7u8; 4096], 8192).unwrap();
        b.flush().unwrap();
        let mut got = vec![0u8; 4096];
        dev.read_at(&mut got, 8192).unwrap();
        assert!(got.iter().all(|&x| x == 7));
        dev.write_at(&[9u8; 4096], 0).unwrap();
        b.read_at(&mut got, 0).unwrap();
        assert!(got.iter().all(|&x| x == 9));
        assert_eq!(std::fs::read(&p).unwrap()[8192], 7);
    }

    #[tokio::test]
    async fn a_taken_port_names_the_port_and_the_flag() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let dev: Arc<dyn BlockDev> =
            Arc::new(FileDev::create(&dir.path().join("v"), 1 << 20).unwrap());
        let tc = target_config(&Config::default(), dev, [1; 16]);
        let e = bind(addr, tc).await.err().unwrap().to_string();
        assert!(
            e.contains(&addr.to_string()) && e.contains("--nvme-listen"),
            "{e}"
        );
    }

    /// Issue 5 item 3 over real NVMe/TCP: the MDS holds EXCLUSIVE_ACCESS_REG_ONLY, a client
    /// that registered the key GETDEVICEINFO gives it writes; once fencing preempts that key
    /// its next write gets Reservation Conflict.
    #[tokio::test]
    async fn fenced_scsi_client_gets_reservation_conflict() {
        use bytes::Bytes;
        use nvme_tcp::{Initiator, InitiatorConfig, Status};
        let dir = tempfile::tempdir().unwrap();
        let dev: Arc<dyn BlockDev> =
            Arc::new(FileDev::create(&dir.path().join("v"), 1 << 20).unwrap());
        let uuid = [0x5a; 16];
        let cfg = Config::default();
        let tc = target_config(&cfg, dev, uuid);
        let target = bind("127.0.0.1:0".parse().unwrap(), tc).await.unwrap();
        claim_for_scsi(&target).unwrap();
        let (rtype, regs) = target.reservation_state(NSID).unwrap();
        assert_eq!(rtype, Some(RType::EXCLUSIVE_ACCESS_REG_ONLY));
        assert_eq!(regs.len(), 1);
        assert_eq!(regs[0].key, layout::scsi::MDS_PR_KEY);
        let _task = target.spawn();

        let ini = Initiator::connect(
            target.local_addr(),
            InitiatorConfig::new(cfg.nvme_nqn.clone(), "nqn.2014-08.org.example:client"),
        )
        .await
        .unwrap();
        // The designator GETDEVICEINFO sends is the NGUID the namespace reports, and no UUID
        // descriptor makes a Linux host's wwid something else (nfs4::scsi::volume_designator).
        let info = ini.identify_namespace(NSID).await.unwrap();
        assert_eq!(
            info.nguid,
            nvme_tcp::NamespaceIds::from_volume_uuid(uuid).nguid
        );
        let descs = ini.ns_descriptors(NSID).await.unwrap();
        assert!(descs.iter().all(|(t, _)| *t != 3), "{descs:?}");
        let conflict = |r: Result<(), nvme_tcp::Error>| match r {
            Err(nvme_tcp::Error::Status(s)) => s == Status::RESERVATION_CONFLICT,
            _ => false,
        };
        let block = || Bytes::from(vec![0xabu8; LBA_SIZE as usize]);
        // Unregistered: refused.
        assert!(conflict(
            ini.write(NSID, 10, block(), LBA_SIZE, false).await
        ));
        let key = layout::scsi::client_pr_key(42);
        ini.reservation_register(NSID, RegisterAction::Register, false, 0, key)
            .await
            .unwrap();
        ini.write(NSID, 10, block(), LBA_SIZE, false).await.unwrap();
        // Fencing: preempt-and-abort the client's key.
        let fencer = TargetFencer(target.clone());
        fencer.preempt_and_abort(key).unwrap();
        assert!(conflict(
            ini.write(NSID, 11, block(), LBA_SIZE, false).await
        ));
        // Nothing left to preempt; the MDS still holds the reservation alone.
        assert_eq!(
            fencer.preempt_and_abort(key),
            Err(PreemptError::NotRegistered)
        );
        let (rtype, regs) = target.reservation_state(NSID).unwrap();
        assert_eq!(rtype, Some(RType::EXCLUSIVE_ACCESS_REG_ONLY));
        assert_eq!(regs.len(), 1);
        target.shutdown();
    }
}
