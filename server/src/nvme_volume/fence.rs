//! The SCSI layout's reservations on an external namespace (issue 5 item 3, RFC 8154
//! §2.4.2 over NVMe): the MDS is an ordinary remote host there, so it registers its key and
//! holds EXCLUSIVE_ACCESS_REG_ONLY through the initiator, and fences a client by
//! PREEMPT AND ABORT of the client's key — the same policy `crate::nvme` applies to the
//! embedded target through its in-process API.

use std::sync::Arc;

use nvme_tcp::{AcquireAction, RType, RegisterAction};

use super::{to_io, NvmeDev};
use crate::nfs4::layouts::scsi::{PrFencer, PreemptError};

/// Registers the MDS key (IEKEY: whatever an earlier run of this host registered is
/// replaced) and acquires EXCLUSIVE_ACCESS_REG_ONLY; the same holder acquiring the same type
/// again succeeds, so a restarted MDS claims it back.
pub fn claim_for_scsi(dev: &NvmeDev) -> std::io::Result<()> {
    let ini = dev.initiator()?;
    let nsid = dev.spec.nsid;
    let key = layout::scsi::MDS_PR_KEY;
    dev.call(async move {
        ini.reservation_register(nsid, RegisterAction::Register, true, 0, key)
            .await
            .map_err(to_io)?;
        ini.reservation_acquire(
            nsid,
            AcquireAction::Acquire,
            RType::EXCLUSIVE_ACCESS_REG_ONLY,
            key,
            0,
        )
        .await
        .map_err(to_io)
    })
}

/// `PrFencer` over the external namespace.
pub struct InitiatorFencer(pub Arc<NvmeDev>);

impl PrFencer for InitiatorFencer {
    fn preempt_and_abort(&self, key: u64) -> Result<(), PreemptError> {
        let dev = &self.0;
        let ini = dev
            .initiator()
            .map_err(|e| PreemptError::Failed(e.to_string()))?;
        let nsid = dev.spec.nsid;
        // The command's own status (Reservation Conflict: no such key) is an answer, not a
        // failure of the device: keep it apart from the transport's errors.
        let status = dev
            .call(async move {
                match ini
                    .reservation_acquire(
                        nsid,
                        AcquireAction::PreemptAndAbort,
                        RType::EXCLUSIVE_ACCESS_REG_ONLY,
                        layout::scsi::MDS_PR_KEY,
                        key,
                    )
                    .await
                {
                    Ok(()) => Ok(None),
                    Err(nvme_tcp::Error::Status(s)) => Ok(Some(s)),
                    Err(e) => Err(to_io(e)),
                }
            })
            .map_err(|e| PreemptError::Failed(e.to_string()))?;
        match status {
            None => {
                tracing::info!(key, "preempted on the external namespace");
                Ok(())
            }
            Some(s) => Err(crate::nfs4::layouts::scsi::preempt_status(s)),
        }
    }

    /// Reservation Report of the external namespace (which kept every registration across
    /// our restart whatever its PTPL state: it did not restart).
    fn registered_keys(&self) -> Result<Vec<u64>, PreemptError> {
        let dev = &self.0;
        let ini = dev
            .initiator()
            .map_err(|e| PreemptError::Failed(e.to_string()))?;
        let nsid = dev.spec.nsid;
        let report = dev
            .call(async move { ini.reservation_report(nsid).await.map_err(to_io) })
            .map_err(|e| PreemptError::Failed(e.to_string()))?;
        Ok(report.registrants.iter().map(|r| r.key).collect())
    }
}

/// At start, with an external volume served directly (no re-export): GETDEVICEINFO's SCSI
/// designator becomes the namespace's own (its Identify, not the volume UUID the embedded
/// target derives identifiers from), and when "scsi" is offered the MDS claims the
/// namespace's reservation and fences through it.
/// Blocking (commands on the namespace): call it from a blocking thread.
pub fn setup_scsi(scsi_offered: bool, srv: &crate::server::Server, ext: &Arc<NvmeDev>) {
    match ext.designator() {
        Some(d) => {
            let _ = srv.layouts.volume_designator.set(d);
        }
        None => tracing::error!(
            "the external namespace has neither an EUI-64 nor an NGUID: SCSI-layout clients \
             cannot find it"
        ),
    }
    if !scsi_offered {
        return;
    }
    match claim_for_scsi(ext) {
        Ok(()) => {
            srv.layouts
                .scsi
                .install(Arc::new(InitiatorFencer(ext.clone())));
            tracing::info!(
                "SCSI layout: MDS holds EXCLUSIVE_ACCESS_REG_ONLY on the external namespace"
            );
            // The namespace kept the previous instance's registrations (docs/pnfs.md
            // "After a restart"): swept once their layouts expire.
            crate::nfs4::layouts::scsi_restart::begin(&srv.layouts, &srv.state);
        }
        Err(e) => {
            tracing::error!("SCSI layout: reservation on the external namespace not taken: {e}")
        }
    }
}
