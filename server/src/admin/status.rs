//! `GET /status`: the daemon, its volume, the grace period, the metadata log and the metadata
//! cache, read through the store's and the log's public getters (a read lock and a few
//! atomics; nothing is written), and the embedded NVMe/TCP target's controllers.

use serde::Serialize;

use crate::nfs4::state::{ClientStateUsage, GraceInfo};
use crate::server::Server;

use super::AdminInfo;

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub version: &'static str,
    pub uptime_seconds: u64,
    pub volume: VolumeStatus,
    pub grace: GraceInfo,
    pub log: LogStatus,
    pub metadata_cache: CacheStatus,
    pub clients: usize,
    /// Sessions, reply-cache bytes and the `max_client_memory` budget.
    pub client_state: ClientStateUsage,
    /// The embedded NVMe/TCP target; null when the daemon runs none (external volume).
    pub nvme: Option<NvmeStatus>,
}

/// The embedded NVMe/TCP target: where it listens and who is connected.
#[derive(Debug, Clone, Serialize)]
pub struct NvmeStatus {
    pub listen: String,
    pub subsystem_nqn: String,
    /// NVM-subsystem and discovery controllers together (`controllers` lists each).
    pub controllers_connected: usize,
    /// Open TCP connections (one per queue, and those not yet connected).
    pub connections: usize,
    pub controllers: Vec<NvmeController>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NvmeController {
    pub cntlid: u16,
    pub discovery: bool,
    pub host_nqn: String,
    pub host_addr: String,
    /// I/O queues connected.
    pub io_queues: usize,
    pub kato_ms: u32,
}

fn nvme_status(t: &nvme_tcp::Target) -> NvmeStatus {
    let controllers: Vec<_> = t
        .controllers()
        .into_iter()
        .map(|c| NvmeController {
            cntlid: c.cntlid,
            discovery: c.discovery,
            host_nqn: c.host_nqn,
            host_addr: c.host_addr.to_string(),
            io_queues: c.io_queues,
            kato_ms: c.kato_ms,
        })
        .collect();
    NvmeStatus {
        listen: t.local_addr().to_string(),
        subsystem_nqn: t.subsystem_nqn().to_string(),
        controllers_connected: controllers.len(),
        connections: t.stats().connections,
        controllers,
    }
}

/// The volume and its geometry (layout::Geometry, in blocks of `block_size` bytes).
#[derive(Debug, Clone, Serialize)]
pub struct VolumeStatus {
    pub path: String,
    pub uuid: String,
    pub block_size: u32,
    pub total_blocks: u64,
    pub log_start: u64,
    pub log_blocks: u64,
    pub data_start: u64,
    pub data_blocks: u64,
    /// What FSSTAT / statfs report (space_total, space_free).
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub files: u64,
    pub free_files: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LogStatus {
    pub size_bytes: u64,
    /// Bytes between the tail and the head: written but not yet released by write-back.
    pub used_bytes: u64,
    pub tail_lsn: u64,
    pub head_lsn: u64,
    /// Why the log shut down (changes are refused until a restart), or null.
    pub shut_down: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CacheStatus {
    /// The configured `metadata_cache` (docs/store.md "Memory").
    pub budget_bytes: u64,
    /// Tree nodes held in the page cache, and the bytes they take.
    pub pages: usize,
    pub page_bytes: u64,
    /// Changes not yet written back to the tree.
    pub dirty_bytes: u64,
    /// Tree nodes on disk.
    pub tree_nodes: u64,
}

pub fn status(srv: &Server, info: &AdminInfo) -> Status {
    let store = &srv.store;
    let sb = store.superblock();
    let geo = sb.geometry;
    let bs = store.block_size();
    let fs = store.fsstat();
    let log = store.log();
    let (tail, head) = log.tail_head();
    let (nodes, dirty, pages) = store.metadata_usage();
    Status {
        version: env!("CARGO_PKG_VERSION"),
        uptime_seconds: info.started.elapsed().as_secs(),
        volume: VolumeStatus {
            path: info.volume.clone(),
            uuid: uuid::Uuid::from_bytes(store.volume_uuid()).to_string(),
            block_size: bs,
            total_blocks: geo.total_blocks,
            log_start: geo.log_start,
            log_blocks: geo.log_blocks,
            data_start: geo.data_start,
            data_blocks: geo.data_blocks,
            total_bytes: fs.total_bytes,
            free_bytes: fs.free_bytes,
            files: fs.total_files.saturating_sub(fs.free_files),
            free_files: fs.free_files,
        },
        grace: srv.state.grace_snapshot(),
        log: LogStatus {
            size_bytes: geo.log_blocks.saturating_mul(bs as u64),
            used_bytes: head.0.saturating_sub(tail.0),
            tail_lsn: tail.0,
            head_lsn: head.0,
            shut_down: log.shutdown_error().map(|e| e.to_string()),
        },
        metadata_cache: CacheStatus {
            budget_bytes: info.metadata_cache,
            pages,
            page_bytes: (pages as u64).saturating_mul(bs as u64),
            dirty_bytes: dirty,
            tree_nodes: nodes,
        },
        clients: srv.state.clients_snapshot().len(),
        client_state: srv.state.client_state_usage(),
        nvme: crate::nvme::embedded().map(|t| nvme_status(&t)),
    }
}
