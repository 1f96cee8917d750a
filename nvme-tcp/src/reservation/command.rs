//! The reservation commands of a namespace (NVMe Base 2.0 §7.5–7.8: Reservation Register,
//! Acquire, Release, Report) and the Reservation Persistence feature (FID 83h): decoded from
//! the SQE for the I/O queues (`controller/io.rs`) and called directly by the in-process API
//! (`Target::reservation_*`), so both go through one path. Every change of the state goes
//! through `update`: when the namespace persists (PTPL), the new state is on disk before the
//! command completes (`persist`).

use super::persist::{self, RestoredHosts};
use super::{AcquireAction, Cptpl, RType, RegisterAction, ReleaseAction, Requester};
use crate::namespace::{lock, Namespace};
use crate::pdu::IoOpc;
use crate::status::Status;

/// Applies `f` to the namespace's reservation state: in place without a PTPL file, else in
/// `persist::update`'s order (saved before installed).
fn update<T>(
    ns: &Namespace,
    f: impl FnOnce(&mut super::Reservations) -> Result<T, Status>,
) -> Result<T, Status> {
    match &ns.ptpl {
        Some(file) => persist::update(file, &ns.resv, f),
        None => f(&mut lock(&ns.resv)),
    }
}

/// Reservation Register. CPTPL is applied after the action succeeded; without PTPL support
/// (RESCAP bit 0 clear) it is ignored — the Linux host always asks for 11b and would fail to
/// register otherwise, and Linux nvmet ignores it the same way.
#[allow(clippy::too_many_arguments)]
pub(crate) fn register(
    ns: &Namespace,
    who: &Requester,
    action: RegisterAction,
    iekey: bool,
    cptpl: Cptpl,
    crkey: u64,
    nrkey: u64,
) -> Result<(), Status> {
    let persists = ns.ptpl.is_some();
    update(ns, |r| {
        r.register(who, action, iekey, crkey, nrkey)?;
        match cptpl {
            Cptpl::Persist if persists => r.set_ptpl(true),
            Cptpl::Off => r.set_ptpl(false),
            _ => {}
        }
        Ok(())
    })
}

/// Reservation Acquire; returns the hosts whose registrations a preempt removed.
pub(crate) fn acquire(
    ns: &Namespace,
    who: &Requester,
    action: AcquireAction,
    iekey: bool,
    rtype: RType,
    crkey: u64,
    prkey: u64,
) -> Result<Vec<[u8; 16]>, Status> {
    update(ns, |r| r.acquire(who, action, iekey, rtype, crkey, prkey))
}

/// Reservation Release.
pub(crate) fn release(
    ns: &Namespace,
    who: &Requester,
    action: ReleaseAction,
    iekey: bool,
    rtype: RType,
    crkey: u64,
) -> Result<(), Status> {
    update(ns, |r| r.release(who, action, iekey, rtype, crkey))
}

/// Set Features Reservation Persistence (FID 83h) for one namespace: PTPL on needs PTPL
/// support (else Feature Not Changeable); off is always allowed.
pub(crate) fn set_ptpl(ns: &Namespace, on: bool) -> Result<(), Status> {
    if on && ns.ptpl.is_none() {
        return Err(Status::FEATURE_NOT_CHANGEABLE);
    }
    update(ns, |r| {
        r.set_ptpl(on);
        Ok(())
    })
}

/// Get Features Reservation Persistence: the namespace's PTPL state (dword 0 bit 0).
pub(crate) fn ptpl(ns: &Namespace) -> bool {
    lock(&ns.resv).ptpl()
}

/// A host connected an I/O queue of the subsystem (`controller::connect`).
pub(crate) fn host_connected(ns: &Namespace, hostid: &[u8; 16]) {
    if let Some(f) = &ns.ptpl {
        f.host_connected(hostid);
    }
}

/// The embedder issues commands as `hostid` (`Target::reservation_*`).
pub(crate) fn host_in_process(ns: &Namespace, hostid: &[u8; 16]) {
    if let Some(f) = &ns.ptpl {
        f.host_in_process(hostid);
    }
}

/// See `persist::RestoredHosts`; nothing without PTPL support.
pub(crate) fn restored_hosts(ns: &Namespace) -> RestoredHosts {
    match &ns.ptpl {
        Some(f) => f.restored_hosts(&lock(&ns.resv)),
        None => RestoredHosts::default(),
    }
}

/// Whether the namespace can persist its reservations (Identify Namespace RESCAP bit 0).
pub(crate) fn ptpl_supported(ns: &Namespace) -> bool {
    ns.ptpl.is_some()
}

fn le64(b: &[u8], o: usize) -> Result<u64, Status> {
    bytecodec::get_u64_le(b, o).map_err(|_| Status::SGL_DATA_LEN_INVALID)
}

fn data_of(data: &[u8], n: usize) -> Result<&[u8], Status> {
    data.get(..n).ok_or(Status::SGL_DATA_LEN_INVALID)
}

/// One of the four reservation I/O commands from the wire: `cdw10`/`cdw11` and the host's
/// data; `max_len` bounds a report. `Ok(Some(data))` for a report, `Ok(None)` otherwise.
/// `aborted`: told the hosts a Preempt and Abort removed, before the command completes (the
/// target waits there for their I/O; false: the wait ran out, and the command fails with
/// Internal Error though the preempt stands).
pub(crate) fn execute(
    ns: &Namespace,
    who: &Requester,
    opc: IoOpc,
    (cdw10, cdw11): (u32, u32),
    data: &[u8],
    max_len: u64,
    aborted: &dyn Fn(&[[u8; 16]]) -> bool,
) -> Result<Option<Vec<u8>>, Status> {
    let iekey = cdw10 & 8 != 0;
    let rtype = RType((cdw10 >> 8) as u8);
    match opc {
        IoOpc::RESV_REGISTER => {
            let d = data_of(data, 16)?;
            let action = match cdw10 & 7 {
                0 => RegisterAction::Register,
                1 => RegisterAction::Unregister,
                2 => RegisterAction::Replace,
                _ => return Err(Status::INVALID_FIELD),
            };
            let cptpl = Cptpl::from_bits(cdw10 >> 30)?;
            register(ns, who, action, iekey, cptpl, le64(d, 0)?, le64(d, 8)?)?;
            Ok(None)
        }
        IoOpc::RESV_ACQUIRE => {
            let d = data_of(data, 16)?;
            let action = match cdw10 & 7 {
                0 => AcquireAction::Acquire,
                1 => AcquireAction::Preempt,
                2 => AcquireAction::PreemptAndAbort,
                _ => return Err(Status::INVALID_FIELD),
            };
            let gone = acquire(ns, who, action, iekey, rtype, le64(d, 0)?, le64(d, 8)?)?;
            if !gone.is_empty() {
                tracing::info!(preempted = gone.len(), "reservation preempted registrants");
            }
            if action == AcquireAction::PreemptAndAbort && !aborted(&gone) {
                return Err(Status::INTERNAL);
            }
            Ok(None)
        }
        IoOpc::RESV_RELEASE => {
            let d = data_of(data, 8)?;
            let action = match cdw10 & 7 {
                0 => ReleaseAction::Release,
                1 => ReleaseAction::Clear,
                _ => return Err(Status::INVALID_FIELD),
            };
            release(ns, who, action, iekey, rtype, le64(d, 0)?)?;
            Ok(None)
        }
        IoOpc::RESV_REPORT => {
            let len = (cdw10 as u64 + 1) * 4;
            // Our host identifiers are 128-bit (CTRATT bit 0): the host must ask for the
            // extended structure, else Host Identifier Inconsistent Format.
            if cdw11 & 1 == 0 {
                return Err(Status::new(0, 0x18));
            }
            if len > max_len {
                return Err(Status::INVALID_FIELD);
            }
            let mut v = lock(&ns.resv).report(true);
            v.resize(len as usize, 0);
            Ok(Some(v))
        }
        _ => Err(Status::INVALID_OPCODE),
    }
}
