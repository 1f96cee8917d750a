//! The data path of a benchmark writer: how a commit unit's bytes reach the volume and how a
//! mode that flushes by itself (`limit`, `device`) flushes it.
//!
//! - `File`: `pwrite` into the volume file at the layout's storage offsets, `fdatasync` to
//!   flush (the default; the volume file is pnfsd's own, or `--volume PATH` of a running one).
//! - `Nvme` (`--nvme`): NVMe Write commands through our initiator (crate `nvme-tcp`) to
//!   pnfsd's embedded target, NVMe Flush to flush. As the Linux block-layout client does,
//!   the writes carry no FUA and the client issues no flush before LAYOUTCOMMIT (its bios
//!   are plain REQ_OP_WRITE, fs/nfs/blocklayout): the server flushes the device inside
//!   LAYOUTCOMMIT (docs/design.md §4, seed 002). The target's Flush is an `fdatasync` of the
//!   same volume file (docs/design.md §6), so `limit` costs the same device flush.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use client_tests::layout_io::write_pieces;
use client_tests::pnfs::BlockExtent;
use client_tests::{ClientError, Result};
use nvme_tcp::{Initiator, InitiatorConfig};

/// Namespace 1: the data volume (server/src/nvme.rs `NSID`).
pub const NSID: u32 = 1;
/// Largest NVMe Write the bench sends: the target's MDTS (2^7 × 4 KiB, nvme-tcp
/// controller/mod.rs). Longer units go out as several commands at once, as a block layer
/// splits a bio at max_hw_sectors.
pub const MAX_WRITE: usize = 512 << 10;
/// The bench's host NQN.
const HOSTNQN: &str = "nqn.2026-11.org.pnfsd:pnfs-bench";

fn nvme_err(e: nvme_tcp::Error) -> ClientError {
    ClientError::Protocol(format!("nvme: {e}"))
}

/// One NVMe/TCP connection to the target's namespace 1.
pub struct NvmeVol {
    init: Initiator,
    block: u32,
}

impl NvmeVol {
    /// Connects (admin queue and `queues` I/O queues) and reads the namespace's block size.
    pub async fn connect(addr: SocketAddr, subnqn: &str, queues: u16) -> Result<NvmeVol> {
        let mut cfg = InitiatorConfig::new(subnqn, HOSTNQN);
        cfg.io_queues = queues.max(1);
        let init = Initiator::connect(addr, cfg).await.map_err(nvme_err)?;
        let ns = init.identify_namespace(NSID).await.map_err(nvme_err)?;
        if ns.block_size == 0 {
            return Err(ClientError::Protocol("nvme: namespace block size 0".into()));
        }
        Ok(NvmeVol {
            init,
            block: ns.block_size,
        })
    }
}

/// Where the bench's writers put their bytes.
#[derive(Clone)]
pub enum DataPath {
    File(Arc<std::fs::File>),
    Nvme(Arc<NvmeVol>),
}

impl DataPath {
    pub fn name(&self) -> &'static str {
        match self {
            DataPath::File(_) => "pwrite + fdatasync of the volume file",
            DataPath::Nvme(_) => "NVMe/TCP Write + Flush through the nvme-tcp initiator",
        }
    }

    /// Writes `data` at file offset `offset` through `extents` (no flush).
    pub async fn write(&self, extents: &[BlockExtent], offset: u64, data: &Bytes) -> Result<()> {
        match self {
            // Blocking syscalls on a runtime worker: the runtime has a worker per writer.
            DataPath::File(f) => tokio::task::block_in_place(|| {
                client_tests::layout_io::write_through_extents(f, extents, offset, data)
            }),
            DataPath::Nvme(v) => {
                let mut cmds = Vec::new();
                for (at, r) in write_pieces(extents, offset, data.len())? {
                    let b = u64::from(v.block);
                    if !at.is_multiple_of(b) || !(r.len() as u64).is_multiple_of(b) {
                        return Err(ClientError::Protocol(format!(
                            "nvme: write at {at} of {} bytes is not whole blocks",
                            r.len()
                        )));
                    }
                    let mut s = r.start;
                    while s < r.end {
                        let e = (s + MAX_WRITE).min(r.end);
                        let slba = (at + (s - r.start) as u64) / b;
                        cmds.push((slba, data.slice(s..e)));
                        s = e;
                    }
                }
                // All commands in flight at once; FUA off (see the module comment).
                let tasks: Vec<_> = cmds
                    .into_iter()
                    .map(|(slba, d)| {
                        let v = v.clone();
                        tokio::spawn(
                            async move { v.init.write(NSID, slba, d, v.block, false).await },
                        )
                    })
                    .collect();
                for t in tasks {
                    t.await
                        .map_err(|e| ClientError::Harness(format!("nvme write task: {e}")))?
                        .map_err(nvme_err)?;
                }
                Ok(())
            }
        }
    }

    /// Makes every completed write durable: `fdatasync`, or NVMe Flush.
    pub async fn flush(&self) -> Result<()> {
        match self {
            DataPath::File(f) => Ok(tokio::task::block_in_place(|| f.sync_data())?),
            DataPath::Nvme(v) => v.init.flush(NSID).await.map_err(nvme_err),
        }
    }
}
