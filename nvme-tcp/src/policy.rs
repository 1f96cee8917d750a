//! The embedder's say over hosts (docs/nvme-tcp.md "Host policy"): whether a host may
//! connect, and whether one Read- or Write-class command of it may touch its blocks. The
//! target knows hosts only by what Connect told it (host NQN, Host Identifier) and the TCP
//! peer address; what a host is to the embedder (pnfsd: the NFS clients it belongs to) is
//! the embedder's business.

use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

pub use crate::reservation::Access;

/// A host as the target knows it: borrowed from its controller, so asking costs nothing.
#[derive(Debug, Clone, Copy)]
pub struct HostRef<'a> {
    pub nqn: &'a str,
    pub hostid: &'a [u8; 16],
    /// The TCP peer address of its admin queue's connection.
    pub ip: IpAddr,
}

/// Consulted at every NVM-subsystem Connect (admin and I/O queues) and by every Read,
/// Write, Write Zeroes and Dataset Management command (`access`, after the reservation
/// check and the MDS-blocks guard). Both run on the command path: no blocking, no lock
/// held across I/O; `access` should not allocate.
pub trait HostPolicy: Send + Sync {
    /// Whether the host may connect (refused: Connect Invalid Host).
    fn admit(&self, host: &HostRef<'_>) -> bool;

    /// Whether the command may touch LBAs `[slba, slba + nlb)` of `nsid` (refused: Access
    /// Denied). Flush names no blocks and is not asked.
    fn access(&self, _host: &HostRef<'_>, _nsid: u32, _a: Access, _slba: u64, _nlb: u64) -> bool {
        true
    }

    /// `access` refused the command and the target answers it Access Denied (SCT 2h
    /// Media and Data Integrity Errors, SC 86h: `Status::ACCESS_DENIED`): told once per refused
    /// command, for the embedder's counters and log. The fast paths' pre-check does not tell.
    fn refused(&self, _host: &HostRef<'_>, _nsid: u32, _a: Access, _slba: u64, _nlb: u64) {}

    /// Whether the host may issue reservation commands (Register, Acquire, Release, Report)
    /// on `nsid` (refused: Access Denied): a host kept off a namespace must not preempt its
    /// users' reservations either. Default: every admitted host may.
    fn reservations(&self, _host: &HostRef<'_>, _nsid: u32) -> bool {
        true
    }

    /// A counter the target adds each of the host's Write commands answered with success to
    /// (asked once per I/O queue, at its Connect): the embedder's per-host write count, exact
    /// whichever path ran the command. Default: none.
    fn write_counter(&self, _host: &HostRef<'_>) -> Option<Arc<AtomicU64>> {
        None
    }
}
