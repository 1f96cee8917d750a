//! LINK (RFC 8881 §18.9): a new name `newname` in the current directory for the file of
//! the saved filehandle. Directories cannot be linked (ISDIR).

use super::access::require_dir_write;
use super::ns_util::{
    check_new_name, cur_attr, decode_component, encode_change_info, require_dir, saved_attr,
};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::store::FileType;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let name = decode_component(r)?;
    let file = saved_attr(ctx)?;
    let dir = cur_attr(ctx)?;
    require_dir(&dir)?;
    if file.ftype == FileType::Directory {
        return Err(NfsStat::ISDIR);
    }
    check_new_name(&name)?;
    require_dir_write(&ctx.cred, &dir)?;
    let change = ctx.srv.store.link(file.ino, dir.ino, &name)?;
    encode_change_info(w, &change);
    Ok(())
}
