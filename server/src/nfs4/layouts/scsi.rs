//! The server side of the SCSI layout (RFC 8154 over NVMe per RFC 9561):
//! which volume a client is told to open, the reservation key it is told to register, and
//! the hook through which fencing preempts a client's registration on the volume.
//!
//! The wire bodies are `layout::scsi`; the reservations live in the embedded NVMe/TCP target
//! (`crate::nvme` installs a [`PrFencer`] over it at start, when "scsi" is offered). The MDS
//! itself never does I/O through NVMe: its own key and EXCLUSIVE_ACCESS_REG_ONLY reservation
//! only make "registered" the condition for any other host's access (RFC 8154 §2.4.2).

use std::sync::{Arc, OnceLock};

use crate::store::Store;

/// Why a preempt did not remove a registration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreemptError {
    /// No host is registered with the key (Reservation Conflict on the preempt): under the
    /// MDS's EXCLUSIVE_ACCESS_REG_ONLY reservation such a host can do no I/O, so it is
    /// fenced already.
    #[error("no registration with the key")]
    NotRegistered,
    /// The preempt could not be done (transport, other NVMe status): the client may still
    /// have access.
    #[error("preempt failed: {0}")]
    Failed(String),
}

/// What fencing needs of the volume's reservations (implemented over `nvme_tcp::Target`).
pub trait PrFencer: Send + Sync {
    /// PREEMPT AND ABORT the registrations with `key` (the MDS holds the reservation). The
    /// preempted host's next command is refused with Reservation Conflict.
    fn preempt_and_abort(&self, key: u64) -> Result<(), PreemptError>;

    /// The keys registered on the volume now, the MDS's included (for the sweep after a
    /// restart, `nfs4::layouts::scsi_restart`).
    fn registered_keys(&self) -> Result<Vec<u64>, PreemptError>;

    /// Of the hosts whose registrations the volume kept through our restart, how many have
    /// reconnected and how many are still awaited (`nfs4::layouts::scsi_restart::check_layoutget`).
    /// A target that did not restart with us kept its connections: nothing to wait for.
    fn restored_hosts(&self) -> nvme_tcp::RestoredHosts {
        nvme_tcp::RestoredHosts::default()
    }
}

/// Maps a preempt's NVMe status: Reservation Conflict means no such registrant.
pub fn preempt_status(s: nvme_tcp::Status) -> PreemptError {
    if s.same_code(nvme_tcp::Status::RESERVATION_CONFLICT) {
        PreemptError::NotRegistered
    } else {
        PreemptError::Failed(format!("{s:?}"))
    }
}

/// Set once at start when the SCSI layout is served over the embedded target.
#[derive(Default)]
pub struct ScsiHook(OnceLock<Arc<dyn PrFencer>>);

impl std::fmt::Debug for ScsiHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "ScsiHook(installed)"
        } else {
            "ScsiHook(none)"
        })
    }
}

impl ScsiHook {
    /// Installs the fencer; false if one already was.
    pub fn install(&self, f: Arc<dyn PrFencer>) -> bool {
        self.0.set(f).is_ok()
    }

    pub fn get(&self) -> Option<&Arc<dyn PrFencer>> {
        self.0.get()
    }
}

/// The designator of the volume: the NGUID the embedded target reports for its namespace
/// (Identify Namespace bytes 104..120 and descriptor type 2), as a 16-byte EUI-64-type
/// designator (RFC 9561 §2). A Linux host names that namespace `wwid` = `eui.<NGUID hex>`
/// (the target reports no UUID), udev links `/dev/disk/by-id/nvme-eui.<NGUID hex>`, and the
/// SCSI-layout client opens `nvme-eui.<designator hex>`: the same name. Linux knfsd makes
/// the same choice (NGUID when nonzero, else the EUI-64). docs/pnfs.md "the designator".
pub fn volume_designator(store: &Store) -> layout::scsi::Eui64Designator {
    let ids = nvme_tcp::NamespaceIds::from_volume_uuid(store.volume_uuid());
    layout::scsi::Eui64Designator::Nguid(ids.nguid)
}

/// The reservation key of `clientid` (unique per client, never the MDS's).
pub fn client_key(clientid: u64) -> u64 {
    layout::scsi::client_pr_key(clientid)
}

/// Fencing of a SCSI-layout client: preempt-and-abort its key, when a fencer is installed.
/// Ok when the client has no access to the volume afterwards (preempted, never registered,
/// or no fencer installed in `hook`); Err when the preempt failed and it may still write.
pub fn fence(hook: &ScsiHook, clientid: u64) -> Result<(), PreemptError> {
    let Some(f) = hook.get() else {
        return Ok(());
    };
    match f.preempt_and_abort(client_key(clientid)) {
        Ok(()) => {
            tracing::warn!(clientid, "SCSI layout client preempted and aborted");
            Ok(())
        }
        Err(PreemptError::NotRegistered) => {
            // Not registered (it never did I/O, or already unregistered): nothing to fence.
            tracing::info!(clientid, "SCSI preempt of client found nothing");
            Ok(())
        }
        Err(e) => Err(e),
    }
}
