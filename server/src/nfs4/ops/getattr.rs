//! GETATTR (RFC 8881 §18.7): the requested attributes we support, in a `fattr4`. The size
//! and change of a file another client writes under a delegation come from that client
//! (CB_GETATTR, nfs4/delegs/cb_getattr.rs).

use crate::nfs4::attr::is_write_only;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::delegs::cb_getattr;
use crate::nfs4::helpers::attr::encode_attrs;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::cur_attr;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Bitmap;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// A request naming a write-only attribute (time_access_set, time_modify_set) is INVAL
/// (RFC 8881 §18.7.3); unsupported ones are just left out of the answer.
pub fn check_readable(req: &Bitmap) -> Result<(), NfsStat> {
    if req.iter().any(is_write_only) {
        return Err(NfsStat::INVAL);
    }
    Ok(())
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let req = Bitmap::decode(r)?;
    check_readable(&req)?;
    let a = cb_getattr::attrs_for(
        &ctx.srv.cb_getattr_env(),
        clientid(ctx).ok(),
        cur_attr(ctx)?,
        &req,
    )?;
    encode_attrs(ctx, &a, &req, w);
    Ok(())
}
