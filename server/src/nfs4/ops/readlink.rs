//! READLINK (RFC 8881 §18.24): the target of the current symbolic link (INVAL for any
//! other type).

use super::ns_util::{cur_attr, status};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::store::FileType;
use crate::xdr::{XdrReader, XdrWriter};

fn go(ctx: &mut Ctx<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let a = cur_attr(ctx)?;
    if a.ftype != FileType::Symlink {
        return Err(NfsStat::INVAL);
    }
    let target = ctx.srv.store.readlink(a.ino)?;
    w.opaque(&target);
    Ok(())
}

pub fn run(ctx: &mut Ctx<'_>, _r: &mut XdrReader<'_>, w: &mut XdrWriter) -> NfsStat {
    status(go(ctx, w))
}
