//! LOOKUPP (RFC 8881 §18.16): the parent of the current directory becomes current; at the
//! root of the export there is none (NOENT).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::{cur_attr, fh_of, require_lookup_dir};
use crate::nfs4::helpers::perm::{require, ACCESS4_LOOKUP};
use crate::nfs4::status::NfsStat;
use crate::store::ROOT_INO;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, _r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let dir = cur_attr(ctx)?;
    require_lookup_dir(&dir)?;
    if dir.ino == ROOT_INO {
        return Err(NfsStat::NOENT);
    }
    require(&ctx.cred, &dir, ACCESS4_LOOKUP)?;
    let parent = ctx.srv.store.getattr(dir.parent)?;
    ctx.current_fh = Some(fh_of(&parent));
    Ok(())
}
