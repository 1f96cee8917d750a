//! GETXATTR (RFC 8276 §8.4.1): the value of one extended attribute, NOXATTR if unset.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::name::decode_xattr_key;
use crate::nfs4::helpers::perm::xattr_target;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let name = decode_xattr_key(r)?;
    let a = xattr_target(ctx, false)?;
    let value = ctx.srv.store.getxattr(a.ino, &name)?;
    w.opaque(&value);
    Ok(())
}
