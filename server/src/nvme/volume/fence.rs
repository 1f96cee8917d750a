//! Reservations on the external namespace (NVMe Base 2.0 §8.19), for two purposes:
//!
//! - The MDS's own claim on the volume (docs/ha.md "Takeover"): at start, before the store
//!   reads the log, [`claim_metadata`] registers this node's key and acquires the reservation;
//!   a namespace another MDS holds is refused, or with `--takeover` preempted (Preempt and
//!   Abort: the target refuses every further command of the old holder, and waits for those
//!   it already had to reach the media or be aborted, before it answers).
//! - The SCSI layout's fences (RFC 8154 §2.4.2 over NVMe): the MDS is an ordinary remote host
//!   there, so it fences a client by Preempt and Abort of the client's key — the same policy
//!   `crate::nvme` applies to the embedded target through its in-process API. The `PrFencer`
//!   over these commands is the daemon's (daemon/nvme.rs `InitiatorFencer`).

use nvme_tcp::{AcquireAction, RType, RegisterAction, ReleaseAction, Status};

use super::{to_io, NvmeDev};

/// What [`claim_metadata`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// No host held the namespace: this node holds it now.
    Fresh,
    /// This node held it already (a restart): it holds it still, with `rtype`.
    Again,
    /// Another MDS held it, and was preempted: its commands are refused from now on.
    TookOver { hostid: [u8; 16], key: u64 },
}

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error(
        "{url} is held by another MDS (host id {hostid}, reservation key {key}): it may be \
         serving it now. Start with --takeover to fence it and take the volume over (what the \
         Pacemaker agent does), or stop it first"
    )]
    HeldByOther {
        url: String,
        hostid: String,
        key: String,
    },
    #[error(
        "{url} is held under this node's own reservation key {key} by another host (id \
         {hostid}): give each MDS node its own reservation_key"
    )]
    SameKey {
        url: String,
        hostid: String,
        key: String,
    },
    #[error("{url}: the reservation was not taken: {what} answered {status}")]
    Refused {
        url: String,
        what: &'static str,
        status: Status,
    },
    #[error("{url}: reservation: {err}")]
    Io { url: String, err: std::io::Error },
}

/// A key as the operator wrote it (ASCII) or in hex.
fn show_key(k: u64) -> String {
    let b = k.to_be_bytes();
    match std::str::from_utf8(&b) {
        Ok(s) if b.iter().all(u8::is_ascii_graphic) => format!("{s:?}"),
        _ => format!("{k:#018x}"),
    }
}

fn show_hostid(h: &[u8; 16]) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// Registers `key` (IEKEY: whatever this host registered before is replaced) and acquires
/// `rtype`, Persist Through Power Loss set so that a target restart keeps the claim. A
/// namespace held by another host is refused unless `takeover`, and then preempted with
/// abort. Blocking: call it from a blocking thread, before the store mounts.
pub fn claim_metadata(
    dev: &NvmeDev,
    key: u64,
    rtype: RType,
    takeover: bool,
) -> Result<Claimed, ClaimError> {
    let url = dev.spec.to_string();
    let io = |err| ClaimError::Io {
        url: url.clone(),
        err,
    };
    let refused = |what, status| ClaimError::Refused {
        url: url.clone(),
        what,
        status,
    };
    let ini = dev.initiator().map_err(io)?;
    let nsid = dev.spec.nsid;
    let me = dev.hostid();
    let report = {
        let ini = ini.clone();
        dev.call(async move { ini.reservation_report(nsid).await.map_err(to_io) })
            .map_err(io)?
    };
    let holder = report.registrants.iter().find(|r| r.holds).cloned();
    let other = holder.clone().filter(|h| h.hostid != me);
    if let Some(h) = &other {
        if h.key == key {
            return Err(ClaimError::SameKey {
                url,
                hostid: show_hostid(&h.hostid),
                key: show_key(key),
            });
        }
        if !takeover {
            return Err(ClaimError::HeldByOther {
                url,
                hostid: show_hostid(&h.hostid),
                key: show_key(h.key),
            });
        }
    }
    // Our own reservation of another type (the layout types changed): released first, as
    // an Acquire of a different type by the holder is a conflict.
    let ours_other_type = holder.is_some() && other.is_none() && report.rtype != rtype.0;
    let (prkey, held_type) = (other.as_ref().map(|h| h.key), RType(report.rtype));
    let answer = {
        let ini = ini.clone();
        dev.call(async move {
            let st = |r: Result<(), nvme_tcp::Error>| match r {
                Ok(()) => Ok(None),
                Err(nvme_tcp::Error::Status(s)) => Ok(Some(s)),
                Err(e) => Err(to_io(e)),
            };
            let reg = ini
                .reservation_register_cptpl(
                    nsid,
                    RegisterAction::Register,
                    true,
                    nvme_tcp::Cptpl::Persist,
                    0,
                    key,
                )
                .await;
            // A target without Persist Through Power Loss answers Invalid Field: register
            // all the same (the claim then lasts until the target restarts).
            let reg = match st(reg)? {
                Some(s) if s.sct() == 0 && s.sc() == Status::INVALID_FIELD.sc() => {
                    tracing::warn!(
                        nsid,
                        "the volume's target does not persist reservations (no PTPL): \
                         the claim lasts until the target restarts"
                    );
                    ini.reservation_register(nsid, RegisterAction::Register, true, 0, key)
                        .await
                }
                Some(s) => return Ok(Some(("Reservation Register", s))),
                None => Ok(()),
            };
            if let Some(s) = st(reg)? {
                return Ok(Some(("Reservation Register", s)));
            }
            if ours_other_type {
                let rel = ini
                    .reservation_release(nsid, ReleaseAction::Release, held_type, key)
                    .await;
                if let Some(s) = st(rel)? {
                    return Ok(Some(("Reservation Release", s)));
                }
            }
            let acq = match prkey {
                Some(old) => {
                    ini.reservation_acquire(nsid, AcquireAction::PreemptAndAbort, rtype, key, old)
                        .await
                }
                None => {
                    ini.reservation_acquire(nsid, AcquireAction::Acquire, rtype, key, 0)
                        .await
                }
            };
            Ok(st(acq)?.map(|s| ("Reservation Acquire", s)))
        })
        .map_err(io)?
    };
    match (answer, other) {
        (None, Some(h)) => Ok(Claimed::TookOver {
            hostid: h.hostid,
            key: h.key,
        }),
        (None, None) if holder.is_some() => Ok(Claimed::Again),
        (None, None) => Ok(Claimed::Fresh),
        // Lost a race: another MDS acquired between our report and our acquire.
        (Some((_, s)), None) if super::is_conflict(s) && !takeover => {
            let report = dev
                .call(async move { ini.reservation_report(nsid).await.map_err(to_io) })
                .map_err(io)?;
            let h = report.registrants.iter().find(|r| r.holds);
            Err(ClaimError::HeldByOther {
                url,
                hostid: h.map_or("?".into(), |h| show_hostid(&h.hostid)),
                key: h.map_or("?".into(), |h| show_key(h.key)),
            })
        }
        (Some((what, s)), _) => Err(refused(what, s)),
    }
}

/// Without a reservation of its own (the block layout on one namespace, where none can be
/// taken): refuses a namespace another host holds, as [`claim_metadata`] does.
pub fn refuse_held(dev: &NvmeDev) -> Result<(), ClaimError> {
    let url = dev.spec.to_string();
    let ini = dev.initiator().map_err(|err| ClaimError::Io {
        url: url.clone(),
        err,
    })?;
    let nsid = dev.spec.nsid;
    let report = dev
        .call(async move { ini.reservation_report(nsid).await.map_err(to_io) })
        .map_err(|err| ClaimError::Io {
            url: url.clone(),
            err,
        })?;
    match report.registrants.iter().find(|r| r.holds) {
        Some(h) if h.hostid != dev.hostid() => Err(ClaimError::HeldByOther {
            url,
            hostid: show_hostid(&h.hostid),
            key: show_key(h.key),
        }),
        _ => Ok(()),
    }
}

/// Whether this host still holds the namespace's reservation (a Reservation Report): a
/// paused MDS learns here, before it writes anything, that a standby took over.
/// `Ok(false)` marks the device fenced.
pub fn still_holder(dev: &NvmeDev) -> std::io::Result<bool> {
    let ini = dev.initiator()?;
    let nsid = dev.spec.nsid;
    let me = dev.hostid();
    let report = dev.call(async move { ini.reservation_report(nsid).await.map_err(to_io) })?;
    let holds = report.registrants.iter().any(|r| r.holds && r.hostid == me);
    if !holds {
        dev.set_fenced();
    }
    Ok(holds)
}

/// PREEMPT AND ABORT of a client's `key` by the MDS's `mds_key`. The command's own status
/// (Reservation Conflict: no such key) is an answer, not a failure of the device: it comes
/// back as `Ok(Some(status))`, apart from the transport's errors.
pub fn preempt_and_abort(
    dev: &NvmeDev,
    mds_key: u64,
    key: u64,
) -> std::io::Result<Option<nvme_tcp::Status>> {
    let ini = dev.initiator()?;
    let nsid = dev.spec.nsid;
    dev.call(async move {
        match ini
            .reservation_acquire(
                nsid,
                AcquireAction::PreemptAndAbort,
                RType::EXCLUSIVE_ACCESS_REG_ONLY,
                mds_key,
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
