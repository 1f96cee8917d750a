//! The SCSI layout's reservations on an external namespace (RFC 8154 §2.4.2 over NVMe):
//! the MDS is an ordinary remote host there, so it registers its key and holds
//! EXCLUSIVE_ACCESS_REG_ONLY through the initiator, and fences a client by PREEMPT AND ABORT
//! of the client's key — the same policy `crate::nvme` applies to the embedded target
//! through its in-process API. The `PrFencer` over these commands is the daemon's
//! (daemon/nvme.rs `InitiatorFencer`).

use nvme_tcp::{AcquireAction, RType, RegisterAction};

use super::{to_io, NvmeDev};

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

/// PREEMPT AND ABORT of `key` by the MDS's key. The command's own status (Reservation
/// Conflict: no such key) is an answer, not a failure of the device: it comes back as
/// `Ok(Some(status))`, apart from the transport's errors.
pub fn preempt_and_abort(dev: &NvmeDev, key: u64) -> std::io::Result<Option<nvme_tcp::Status>> {
    let ini = dev.initiator()?;
    let nsid = dev.spec.nsid;
    dev.call(async move {
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
}

/// The keys registered on the namespace (Reservation Report).
pub fn registered_keys(dev: &NvmeDev) -> std::io::Result<Vec<u64>> {
    let ini = dev.initiator()?;
    let nsid = dev.spec.nsid;
    let report = dev.call(async move { ini.reservation_report(nsid).await.map_err(to_io) })?;
    Ok(report.registrants.iter().map(|r| r.key).collect())
}
