//! REMOVEXATTR (RFC 8276 §8.4.4): remove one extended attribute, NOXATTR if unset.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::name::decode_xattr_key;
use crate::nfs4::helpers::perm::xattr_target;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::encode_change_info;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let name = decode_xattr_key(r)?;
    let a = xattr_target(ctx, true)?;
    let change = ctx.srv.store.removexattr(a.ino, &name)?;
    encode_change_info(w, &change);
    Ok(())
}
