//! LOOKUP (RFC 8881 §18.15): the named entry of the current directory becomes current.

use super::access::{require, ACCESS4_LOOKUP};
use super::ns_util::{check_name, cur_attr, decode_component, fh_of, is_dot};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::store::FileType;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let name = decode_component(r)?;
    let dir = cur_attr(ctx)?;
    match dir.ftype {
        FileType::Directory => {}
        // RFC 8881 §18.15.3: LOOKUP through a symbolic link is the client's job.
        FileType::Symlink => return Err(NfsStat::SYMLINK),
        _ => return Err(NfsStat::NOTDIR),
    }
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
