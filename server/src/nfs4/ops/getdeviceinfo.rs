//! GETDEVICEINFO (RFC 8881 §18.40) for the SCSI layout (`scsi_body`) and the block layout: one
//! SIMPLE volume (RFC 5663 §2.2) whose signature is the volume UUID at its fixed superblock offset
//! (32), which Linux's blkmapd matches against the bytes of each block device.
//!
//! ```text
//! args: deviceid[16] | layout_type u32 | maxcount u32 | notify_types bitmap4
//! res OK: device_addr4 { layout_type u32 | body opaque<> } | notification bitmap4
//!         body = pnfs_block_deviceaddr4 (see layout::block: 40 bytes)
//! res TOOSMALL: mincount u32 (bytes of device_addr4 needed)
//! ```
//! The device id is the volume UUID, so it is valid after a restart before any LAYOUTGET.
//! Notifications: the answered bitmap is the requested one restricted to CHANGE and DELETE
//! (RFC 8881 §18.40.3). The volume's device never changes nor goes away while the server
//! runs, so there is never anything to send; and the Linux client marks a device "nocache"
//! (drops it with its last layout, then re-sends GETDEVICEINFO and re-runs blkmapd for the
//! next one) unless the answer equals what it asked for. `maxcount` 0 means no limit.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::layouts::check::{check_type, device_id_for};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Bitmap;
use crate::xdr::{Xdr, XdrReader, XdrWriter};
use layout::block::LayoutType;

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let devid: [u8; 16] = r.array()?;
    let ltype = LayoutType(r.u32()?);
    let maxcount = r.u32()?;
    let notify = Bitmap::decode(r)?;
    check_type(&ctx.srv.opts.layout_types, ltype)?;
    if devid != device_id_for(&ctx.srv.store, ctx.srv.boot_verifier, ltype) {
        return Err(NfsStat::NOENT);
    }
    let body = if ltype == LayoutType::SCSI {
        match external_scsi_body(ctx)? {
            Some(b) => b,
            None => scsi_body(ctx)?,
        }
    } else {
        let (off, sig) = ctx.srv.store.superblock().data_signature();
        layout::block::simple_deviceaddr(off, &sig)
    };
    let needed = 4 + 4 + body.len().next_multiple_of(4);
    if maxcount != 0 && (maxcount as usize) < needed {
        w.u32(needed as u32);
        return Err(NfsStat::TOOSMALL);
    }
    w.u32(ltype.0);
    w.opaque(&body);
    agreed_notifications(&notify).encode(w);
    Ok(())
}

/// `notify_deviceid_type4` bits this server agrees to (RFC 8881 §20.12, §18.40.3).
const NOTIFY_CHANGE: u32 = 1;
const NOTIFY_DELETE: u32 = 2;

fn agreed_notifications(asked: &Bitmap) -> Bitmap {
    let mut out = Bitmap::default();
    for bit in [NOTIFY_CHANGE, NOTIFY_DELETE] {
        if asked.is_set(bit) {
            out.set(bit);
        }
    }
    out
}

/// SCSI layout (RFC 8154 §2.3, RFC 9561 §2): one BASE volume named by the namespace's
/// NGUID (EUI-64 designator type, binary), with the key this client is to register before
/// its first I/O.
fn scsi_body(ctx: &Ctx<'_>) -> Result<Vec<u8>, NfsStat> {
    let key = crate::nfs4::layouts::scsi::client_key(clientid(ctx)?);
    let d = crate::nfs4::layouts::scsi::volume_designator(&ctx.srv.store);
    Ok(layout::scsi::eui64_deviceaddr(d, key))
}

/// SCSI body for an external NVMe/TCP volume: named by its own Identify data (NGUID, else
/// EUI-64; `crate::nvme_volume`, set at start), never by identifiers derived from the volume
/// UUID. `None` when the volume is served by the embedded target.
fn external_scsi_body(ctx: &Ctx<'_>) -> Result<Option<Vec<u8>>, NfsStat> {
    let Some(d) = ctx.srv.layouts.volume_designator.get() else {
        return Ok(None);
    };
    let key = crate::nfs4::layouts::scsi::client_key(clientid(ctx)?);
    Ok(Some(layout::scsi::eui_deviceaddr(d, key)))
}
