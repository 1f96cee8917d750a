//! READLINK (RFC 8881 §18.24): the target of the current symbolic link (INVAL for any
//! other type).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::cur_attr;
use crate::nfs4::status::NfsStat;
use crate::store::FileType;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, _r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let a = cur_attr(ctx)?;
    if a.ftype != FileType::Symlink {
        return Err(NfsStat::INVAL);
    }
    let target = ctx.srv.store.readlink(a.ino)?;
    w.opaque(&target);
    Ok(())
}
