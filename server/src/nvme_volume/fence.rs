//! The SCSI layout's reservations on an external namespace (issue 5 item 3, RFC 8154
//! §2.4.2 over NVMe): the MDS is an ordinary remote host there, so it registers its key and
//! holds EXCLUSIVE_ACCESS_REG_ONLY through the initiator, and fences a client by
//! PREEMPT AND ABORT of the client's key — the same policy `crate::nvme` applies to the
//! embedded target through its in-process API.

use std::sync::Arc;

use nvme_tcp::{AcquireAction, RType, RegisterAction};

use super::{to_io, NvmeDev};
use crate::nfs4::scsi::PrFencer;

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
    fn preempt_and_abort(&self, key: u64) -> Result<(), String> {
        let dev = &self.0;
        let ini = dev.initiator().map_err(|e| e.to_string())?;
        let nsid = dev.spec.nsid;
        dev.call(async move {
            ini.reservation_acquire(
                nsid,
                AcquireAction::PreemptAndAbort,
                RType::EXCLUSIVE_ACCESS_REG_ONLY,
                layout::scsi::MDS_PR_KEY,
                key,
            )
            .await
            .map_err(to_io)
        })
        .map(|()| tracing::info!(key, "preempted on the external namespace"))
        .map_err(|e| e.to_string())
    }
}
