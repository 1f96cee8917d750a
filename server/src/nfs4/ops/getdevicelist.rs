//! GETDEVICELIST (RFC 8881 §18.41): the one block device of the file system.
//!
//! ```text
//! args: layout_type u32 | maxdevices u32 | cookie u64 | cookieverf[8]
//! res OK: cookie u64 | cookieverf[8] | deviceid[16] list | eof bool
//! ```
//! Cookie 0 lists the device (next cookie 1, eof); cookie 1 lists nothing more; any other
//! cookie is BAD_COOKIE. The verifier is all zeros (the list never changes).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::layouts::check::{check_type, device_id_for};
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};
use layout::block::LayoutType;

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let ltype = LayoutType(r.u32()?);
    let maxdevices = r.u32()?;
    let cookie = r.u64()?;
    let _verf: [u8; 8] = r.array()?;
    check_type(&ctx.srv.opts.layout_types, ltype)?;
    if maxdevices == 0 {
        return Err(NfsStat::TOOSMALL);
    }
    let list: &[[u8; 16]] = match cookie {
        0 => &[device_id_for(&ctx.srv.store, ctx.srv.boot_verifier, ltype)],
        1 => &[],
        _ => return Err(NfsStat::BAD_COOKIE),
    };
    w.u64(1);
    w.opaque_fixed(&[0; 8]);
    w.u32(list.len() as u32);
    for d in list {
        w.opaque_fixed(d);
    }
    w.bool(true);
    Ok(())
}
