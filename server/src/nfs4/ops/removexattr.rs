//! REMOVEXATTR (RFC 8276 §8.4.4): remove one extended attribute, NOXATTR if unset.

use super::ns_util::encode_change_info;
use super::xattr_util::{decode_key, xattr_target};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let name = decode_key(r)?;
    let a = xattr_target(ctx, true)?;
    let change = ctx.srv.store.removexattr(a.ino, &name)?;
    encode_change_info(w, &change);
    Ok(())
}
