//! What the pNFS operations share: the offered-type check, the device id, the block size.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::status::NfsStat;
use layout::block::LayoutType;

/// The layout types this server implements bodies for (block: RFC 5663; SCSI: RFC 8154).
const IMPLEMENTED: [LayoutType; 2] = [LayoutType::BLOCK_VOLUME, LayoutType::SCSI];

/// NFS4ERR_UNKNOWN_LAYOUTTYPE unless `t` is offered (`layout_types` config) and implemented.
pub fn check_type(ctx: &Ctx<'_>, t: LayoutType) -> Result<(), NfsStat> {
    if ctx.srv.opts.layout_types.contains(&t) && IMPLEMENTED.contains(&t) {
        Ok(())
    } else {
        Err(NfsStat::UNKNOWN_LAYOUTTYPE)
    }
}

/// The device id of the volume (derived from its UUID: stable across restarts).
pub fn device_id(ctx: &Ctx<'_>) -> [u8; 16] {
    crate::nfs4::layouts::device_id(&ctx.srv.store)
}

/// The device id layouts of type `t` name. Block: `device_id`. SCSI: that id with this
/// instance's boot verifier folded into its last 8 bytes, new at every start: the clients'
/// reservation registrations live in the target and die with it (they are not persisted),
/// and a Linux client registers its key only when it sets a device up — on GETDEVICEINFO of
/// an id it does not know. A new id after a restart makes it register again instead of
/// falling back to the MDS (docs/pnfs.md "After a restart").
pub fn device_id_for(ctx: &Ctx<'_>, t: LayoutType) -> [u8; 16] {
    let mut id = device_id(ctx);
    if t == LayoutType::SCSI {
        for (b, v) in id[8..].iter_mut().zip(ctx.srv.boot_verifier.to_be_bytes()) {
            *b ^= v;
        }
    }
    id
}

/// The layout block size in bytes (`layout_blksize`).
pub fn block(ctx: &Ctx<'_>) -> u64 {
    u64::from(ctx.srv.store.block_size())
}
