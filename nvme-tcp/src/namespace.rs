//! Namespaces: a backend, stable identifiers derived from the embedder's volume UUID, and
//! the reservation state (docs/design.md §5: the Linux SCSI-layout client finds the device
//! through `/dev/disk/by-id/nvme-eui.<hex>`, so the identifiers must survive restarts).

use crate::backend::Backend;
use crate::reservation::persist::PtplFile;
use crate::reservation::Reservations;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// One namespace the target exports.
#[derive(Clone)]
pub struct NamespaceConfig {
    /// 1-based namespace identifier.
    pub nsid: u32,
    pub backend: Arc<dyn Backend>,
    /// The volume's 16-byte UUID; NGUID, EUI-64 and the namespace UUID derive from it.
    pub volume_uuid: [u8; 16],
}

/// The namespace identifiers reported in Identify Namespace and the descriptor list.
///
/// Deliberately no namespace UUID (descriptor type 3): a Linux host names the namespace by
/// its `wwid`, which is `uuid.<UUID>` when one is reported and `eui.<NGUID>` otherwise, and
/// udev links `/dev/disk/by-id/nvme-<wwid>`. The pNFS SCSI-layout client only ever opens
/// `nvme-eui.<designator>`, so with a UUID no udev'd host could find the volume
/// (docs/pnfs.md "SCSI layout: the designator").
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct NamespaceIds {
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
}

impl NamespaceIds {
    /// Deterministic: the same UUID always gives the same identifiers. The NGUID is the
    /// volume UUID itself (never zero: a random v4 UUID); the EUI-64 folds it through two CRC32Cs and marks the first octet
    /// "locally administered" (we own no IEEE OUI).
    pub fn from_volume_uuid(u: [u8; 16]) -> Self {
        let a = crc32c::crc32c(&u);
        let b = crc32c::crc32c_append(a, &u);
        let mut eui64 = [0u8; 8];
        eui64[..4].copy_from_slice(&a.to_be_bytes());
        eui64[4..].copy_from_slice(&b.to_be_bytes());
        eui64[0] = (eui64[0] & 0xFC) | 0x02;
        NamespaceIds { nguid: u, eui64 }
    }
}

pub(crate) struct Namespace {
    pub nsid: u32,
    pub backend: Arc<dyn Backend>,
    pub ids: NamespaceIds,
    /// What every I/O command is checked against; changed only through
    /// `reservation::command`.
    pub resv: Mutex<Reservations>,
    /// Where the reservation state persists through power loss (`TargetConfig::ptpl_dir`);
    /// `None`: PTPL not supported.
    pub ptpl: Option<PtplFile>,
    /// LBAs `[0, mds_blocks)` are the MDS's own: never written by a host
    /// (`TargetConfig::mds_blocks`).
    pub mds_blocks: u64,
    /// Commands refused with Reservation Conflict (`Target::namespace_stats`).
    pub conflicts: crate::stats::Conflicts,
}

impl Namespace {
    /// With `ptpl_dir`, the namespace supports PTPL and starts with the state stored there
    /// (empty if none, or if it cannot be read: logged). Fails only if the directory cannot
    /// be made.
    pub fn new(c: &NamespaceConfig, ptpl_dir: Option<&Path>) -> std::io::Result<Self> {
        let (ptpl, resv) = match ptpl_dir {
            Some(dir) => {
                let (f, r) = PtplFile::open(dir, c.nsid, c.volume_uuid)?;
                (Some(f), r)
            }
            None => (None, Reservations::default()),
        };
        Ok(Namespace {
            nsid: c.nsid,
            backend: c.backend.clone(),
            ids: NamespaceIds::from_volume_uuid(c.volume_uuid),
            resv: Mutex::new(resv),
            ptpl,
            mds_blocks: 0,
            conflicts: Default::default(),
        })
    }
}

/// Locks a mutex, ignoring poisoning: our critical sections leave state consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        let a = NamespaceIds::from_volume_uuid([1; 16]);
        assert_eq!(a, NamespaceIds::from_volume_uuid([1; 16]));
        let b = NamespaceIds::from_volume_uuid([2; 16]);
        assert_ne!(a.eui64, b.eui64);
        assert_eq!(a.eui64[0] & 3, 2);
        assert_eq!(a.nguid, [1; 16]);
    }
}
