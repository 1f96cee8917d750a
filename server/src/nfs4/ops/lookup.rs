//! LOOKUP (RFC 8881 §18.15): the named entry of the current directory becomes current.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::{cur_attr, fh_of, require_lookup_dir};
use crate::nfs4::helpers::name::{check_name, decode_component, is_dot};
use crate::nfs4::helpers::perm::{require, ACCESS4_LOOKUP};
use crate::nfs4::status::NfsStat;

use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let name = decode_component(r)?;
    let dir = cur_attr(ctx)?;
    require_lookup_dir(&dir)?;
    check_name(&name)?;
    // "." and ".." are not entries of an NFSv4 directory (LOOKUPP goes up).
    if is_dot(&name) {
        return Err(NfsStat::NOENT);
    }
    require(&ctx.cred, &dir, ACCESS4_LOOKUP)?;
    let a = ctx.srv.store.lookup(dir.ino, &name)?;
    ctx.current_fh = Some(fh_of(&a));
    Ok(())
}
