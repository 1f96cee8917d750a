//! GETDEVICEINFO (RFC 8881 §18.40) for the block layout: one SIMPLE volume (RFC 5663 §2.2)
//! whose signature is the volume UUID at its fixed superblock offset (32), which Linux's
//! blkmapd matches against the bytes of each block device.
//!
//! ```text
//! args: deviceid[16] | layout_type u32 | maxcount u32 | notify_types bitmap4
//! res OK: device_addr4 { layout_type u32 | body opaque<> } | notification bitmap4 (empty)
//!         body = pnfs_block_deviceaddr4 (see layout::block: 40 bytes)
//! res TOOSMALL: mincount u32 (bytes of device_addr4 needed)
//! ```
//! The device id is the volume UUID, so it is valid after a restart before any LAYOUTGET.
//! No device notifications are offered: the answered bitmap is empty. `maxcount` 0 means
//! no limit.

use super::ns_util::status;
use super::pnfs_util::{check_type, device_id};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Bitmap;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

fn go(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let devid: [u8; 16] = r.array()?;
    let ltype = r.u32()?;
    let maxcount = r.u32()?;
    let _notify = Bitmap::decode(r)?;
    check_type(ctx, ltype)?;
    if devid != device_id(ctx) {
        return Err(NfsStat::NOENT);
    }
    let (off, uuid) = ctx.srv.store.superblock().signature();
    let body = layout::block::simple_deviceaddr(off, &uuid);
    let needed = 4 + 4 + body.len().next_multiple_of(4);
    if maxcount != 0 && (maxcount as usize) < needed {
        w.u32(needed as u32);
        return Err(NfsStat::TOOSMALL);
    }
    w.u32(ltype);
    w.opaque(&body);
    Bitmap::default().encode(w);
    Ok(())
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> NfsStat {
    status(go(ctx, r, w))
}
