//! The server side of the SCSI layout (issue 5 item 3, RFC 8154 over NVMe per RFC 9561):
//! which volume a client is told to open, the reservation key it is told to register, and
//! the hook through which fencing preempts a client's registration on the volume.
//!
//! The wire bodies are `layout::scsi`; the reservations live in the embedded NVMe/TCP target
//! (`crate::nvme` installs a [`PrFencer`] over it at start, when "scsi" is offered). The MDS
//! itself never does I/O through NVMe: its own key and EXCLUSIVE_ACCESS_REG_ONLY reservation
//! only make "registered" the condition for any other host's access (RFC 8154 §2.4.2).

use std::sync::{Arc, OnceLock};

use crate::server::Server;

/// What fencing needs of the volume's reservations (implemented over `nvme_tcp::Target`).
pub trait PrFencer: Send + Sync {
    /// PREEMPT AND ABORT the registrations with `key` (the MDS holds the reservation). The
    /// preempted host's next command is refused with Reservation Conflict.
    fn preempt_and_abort(&self, key: u64) -> Result<(), String>;
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

/// The EUI-64 the embedded target reports for the volume's namespace (Identify Namespace and
/// the descriptor list): what Linux names `/dev/disk/by-id/nvme-eui.<hex>`.
pub fn volume_eui64(srv: &Server) -> [u8; 8] {
    nvme_tcp::NamespaceIds::from_volume_uuid(srv.store.volume_uuid()).eui64
}

/// The reservation key of `clientid` (unique per client, never the MDS's).
pub fn client_key(clientid: u64) -> u64 {
    layout::scsi::client_pr_key(clientid)
}

/// Fencing of a SCSI-layout client: preempt-and-abort its key, when a fencer is installed.
/// Returns whether a preempt was issued and succeeded.
pub fn fence(srv: &Server, clientid: u64) -> bool {
    let Some(f) = srv.pnfs.scsi.get() else {
        return false;
    };
    match f.preempt_and_abort(client_key(clientid)) {
        Ok(()) => {
            tracing::warn!(clientid, "SCSI layout client preempted and aborted");
            true
        }
        Err(e) => {
            // Not registered (it never did I/O, or already unregistered): nothing to fence.
            tracing::info!(clientid, %e, "SCSI preempt of client found nothing");
            false
        }
    }
}
