//! What the pNFS operations share: the offered-type check and the device id of a type.

use crate::nfs4::status::NfsStat;
use crate::store::Store;
use layout::block::LayoutType;

/// The layout types this server implements bodies for (block: RFC 5663; SCSI: RFC 8154).
const IMPLEMENTED: [LayoutType; 2] = [LayoutType::BLOCK_VOLUME, LayoutType::SCSI];

/// NFS4ERR_UNKNOWN_LAYOUTTYPE unless `t` is `offered` (`layout_types` config) and implemented.
pub fn check_type(offered: &[LayoutType], t: LayoutType) -> Result<(), NfsStat> {
    if offered.contains(&t) && IMPLEMENTED.contains(&t) {
        Ok(())
    } else {
        Err(NfsStat::UNKNOWN_LAYOUTTYPE)
    }
}

/// The device id layouts of type `t` name. Block: the volume's (`layouts::device_id`). SCSI:
/// that id with this instance's boot verifier folded into its last 8 bytes, new at every
/// start: the clients' reservation registrations live in the target and die with it (they
/// are not persisted), and a Linux client registers its key only when it sets a device up —
/// on GETDEVICEINFO of an id it does not know. A new id after a restart makes it register
/// again instead of falling back to the MDS (docs/pnfs.md "After a restart").
pub fn device_id_for(store: &Store, boot_verifier: u64, t: LayoutType) -> [u8; 16] {
    let mut id = super::device_id(store);
    if t == LayoutType::SCSI {
        for (b, v) in id[8..].iter_mut().zip(boot_verifier.to_be_bytes()) {
            *b ^= v;
        }
    }
    id
}
