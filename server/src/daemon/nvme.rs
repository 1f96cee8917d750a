//! The embedded NVMe/TCP target and an external namespace wired to the server: the target's
//! configuration from `Config`, the layouts service as its `HostPolicy`, and the SCSI
//! layout's `PrFencer` over either the target's in-process reservations or the external
//! namespace's (nvme/mod.rs, nvme/volume/ do the NVMe side and know nothing of the server).
//!
//! Fences of block-layout clients are enforced at the target too: the layouts service is the
//! target's `HostPolicy` (`gate_hosts`), refusing a fenced client's hosts at Connect, and
//! disconnects them when it fences (`install_fencing`; docs/pnfs.md "Fencing").

use std::sync::Arc;

use metalog::BlockDev;
use nvme_tcp::{AcquireAction, NamespaceConfig, RType, Target, TargetConfig};

use crate::config::Config;
use crate::nfs4::layouts::scsi::{PrFencer, PreemptError};
use crate::nvme::volume::NvmeDev;
use crate::nvme::{VolumeBackend, FENCE_FILE, LBA_SIZE, MDS_HOSTID, NSID};
use crate::server::Server;

use super::DaemonError;

/// The target configuration for `cfg`: the volume as namespace 1, identifiers from its UUID.
pub fn target_config(cfg: &Config, dev: Arc<dyn BlockDev>, volume_uuid: [u8; 16]) -> TargetConfig {
    let ns = NamespaceConfig {
        nsid: NSID,
        backend: Arc::new(VolumeBackend::new(dev)),
        volume_uuid,
    };
    let mut t = TargetConfig::new(cfg.nvme_nqn.clone(), vec![ns]);
    t.allowed_hosts = cfg.nvme_allowed_hosts.clone();
    t.advertise = cfg.nvme_advertise;
    // With the volume's other state (the volume file itself, by default): the file names
    // the volume's UUID, so a re-formatted volume never gets an old state.
    t.ptpl_dir = Some(cfg.data_dir.clone());
    // Controllers, connections, KATO (docs/nvme-tcp.md "Limits").
    t.limits = cfg.nvme_limits();
    t
}

/// The layouts service decides which hosts connect (fenced clients' hosts do not) and, with
/// `nvme_enforce_layouts`, which blocks each command of theirs may touch: its host map
/// (`[nvme_hosts]`, `nvme_admin_hosts`) is the target's `HostPolicy`
/// (nfs4/layouts/hosts.rs, enforce.rs).
pub fn gate_hosts(tc: &mut TargetConfig, srv: &Server, cfg: &Config) {
    use crate::nfs4::layouts::hosts::HostOwner;
    let m = cfg
        .nvme_hosts
        .iter()
        .map(|(nqn, who)| (nqn.clone(), HostOwner::parse(who)))
        .collect();
    srv.layouts.hosts.set_overrides(m);
    let sb = srv.store.superblock();
    // Namespace 1 is the device clients write: a split volume's data member.
    let (off, sig) = sb.data_signature();
    let lbas = sb.geometry.data_member_len() * u64::from(layout::BLOCK_SIZE) / u64::from(LBA_SIZE);
    srv.layouts
        .hosts
        .enforce(crate::nfs4::layouts::hosts::Enforce {
            on: cfg.nvme_enforce_layouts,
            admin_hosts: cfg.nvme_admin_hosts.clone(),
            signature: (off, off + sig.len() as u64),
            lbas,
            reclaim: srv.state.layouts_reclaimable(),
        });
    tc.host_policy = Some(srv.layouts.hosts.clone());
}

/// The bound target is the volume's: fencing a block-layout client disconnects its hosts,
/// and the fences persist in `<data_dir>/nvme-fences`, next to the reservations.
pub fn install_fencing(srv: &Server, target: &Target, cfg: &Config) {
    srv.layouts
        .hosts
        .install(target.clone(), cfg.data_dir.join(FENCE_FILE));
}

/// Fencing through the embedded target's reservations (`nfs4::layouts::scsi::PrFencer`).
pub struct TargetFencer(pub Target);

impl PrFencer for TargetFencer {
    fn preempt_and_abort(&self, key: u64) -> Result<(), PreemptError> {
        self.0
            .reservation_acquire(
                NSID,
                MDS_HOSTID,
                AcquireAction::PreemptAndAbort,
                RType::EXCLUSIVE_ACCESS_REG_ONLY,
                layout::scsi::MDS_PR_KEY,
                key,
            )
            .map(|gone| tracing::info!(hosts = gone.len(), key, "preempted"))
            .map_err(crate::nfs4::layouts::scsi::preempt_status)
    }

    fn registered_keys(&self) -> Result<Vec<u64>, PreemptError> {
        let (_, regs) = self
            .0
            .reservation_state(NSID)
            .map_err(|s| PreemptError::Failed(format!("{s:?}")))?;
        Ok(regs.iter().map(|r| r.key).collect())
    }

    fn restored_hosts(&self) -> nvme_tcp::RestoredHosts {
        self.0.reservation_restored_hosts(NSID).unwrap_or_default()
    }
}

/// `PrFencer` over the external namespace (the commands: nvme/volume/fence.rs), preempting
/// under this MDS node's key (`reservation_key`).
pub struct InitiatorFencer {
    pub dev: Arc<NvmeDev>,
    pub mds_key: u64,
}

impl PrFencer for InitiatorFencer {
    fn preempt_and_abort(&self, key: u64) -> Result<(), PreemptError> {
        match crate::nvme::volume::preempt_and_abort(&self.dev, self.mds_key, key)
            .map_err(|e| PreemptError::Failed(e.to_string()))?
        {
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
        crate::nvme::volume::registered_keys(&self.dev)
            .map_err(|e| PreemptError::Failed(e.to_string()))
    }
}

/// The reservation this MDS takes on an external volume before the store reads it
/// (docs/ha.md "Which reservation"): with the SCSI layout offered, EXCLUSIVE_ACCESS_REG_ONLY
/// (RFC 8154 §2.4.2: only hosts that registered the keys GETDEVICEINFO gave them do I/O,
/// which also shuts out a preempted MDS); with the block layout alone none can be taken on
/// the namespace the clients write, since they register no key.
/// On the metadata member of a split volume (`metadata_volume`), which no client writes:
/// WRITE_EXCLUSIVE, whatever the layout types.
pub fn claim_type(cfg: &Config, split: bool) -> Option<nvme_tcp::RType> {
    if split {
        return Some(nvme_tcp::RType::WRITE_EXCLUSIVE);
    }
    let scsi = cfg
        .layout_types
        .contains(&crate::config::LayoutTypeName::Scsi);
    scsi.then_some(nvme_tcp::RType::EXCLUSIVE_ACCESS_REG_ONLY)
}

/// The MDS's claim on the external volume, before the store reads anything of it
/// (docs/ha.md "Takeover"). Without a reservation type that can fence (the block layout on
/// one namespace), a namespace another host holds is refused all the same, and a takeover is
/// refused: it could not keep the old MDS from writing.
/// Blocking (commands on the namespace): call it from a blocking thread.
/// True when it took the volume over from another MDS.
pub fn claim_volume(
    cfg: &Config,
    takeover: bool,
    split: bool,
    ext: &NvmeDev,
) -> Result<bool, DaemonError> {
    use crate::nvme::volume::{claim_metadata, Claimed};
    let key = cfg.reservation_key.0;
    let Some(rtype) = claim_type(cfg, split) else {
        if takeover {
            return Err(DaemonError::Takeover(format!(
                "--takeover on {}: with the block layout alone no reservation on the volume can \
                 fence the old MDS without shutting out the clients (they register no key); \
                 offer the SCSI layout (layout_types), or put the metadata on a namespace of \
                 its own (metadata_volume)",
                ext.spec()
            )));
        }
        crate::nvme::volume::refuse_held(ext).map_err(DaemonError::Claim)?;
        return Ok(false);
    };
    let claimed = claim_metadata(ext, key, rtype, takeover).map_err(DaemonError::Claim)?;
    match &claimed {
        Claimed::Fresh => tracing::info!(
            key = %cfg.reservation_key,
            "the MDS holds the reservation of {} (it was free)",
            ext.spec()
        ),
        Claimed::Again => tracing::info!(
            key = %cfg.reservation_key,
            "the MDS holds the reservation of {} (held since an earlier start)",
            ext.spec()
        ),
        Claimed::TookOver { hostid, key: old } => tracing::warn!(
            key = %cfg.reservation_key,
            old_host = %hostid.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            old_key = %crate::config::ReservationKey(*old),
            "takeover: the previous MDS was preempted on {}; the target refuses its commands \
             from now on",
            ext.spec()
        ),
    }
    Ok(matches!(claimed, Claimed::TookOver { .. }))
}

/// At start, with an external volume served directly (no re-export), after
/// [`claim_volume`]: GETDEVICEINFO's SCSI designator becomes the namespace's own (its
/// Identify, not the volume UUID the embedded target derives identifiers from), and when
/// "scsi" is offered the MDS fences through the reservation it holds.
/// Blocking (commands on the namespace): call it from a blocking thread.
pub fn setup_scsi(scsi_offered: bool, mds_key: u64, srv: &Server, ext: &Arc<NvmeDev>) {
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
    srv.layouts.scsi.install(Arc::new(InitiatorFencer {
        dev: ext.clone(),
        mds_key,
    }));
    tracing::info!("SCSI layout: MDS holds EXCLUSIVE_ACCESS_REG_ONLY on the external namespace");
    // The namespace kept the previous instance's registrations (docs/pnfs.md "After a
    // restart"): swept once their layouts expire.
    crate::nfs4::layouts::scsi_restart::begin(&srv.layouts, &srv.state);
}
