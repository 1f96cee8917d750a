//! LINK (RFC 8881 §18.9): a new name `newname` in the current directory for the file of
//! the saved filehandle. Directories cannot be linked (ISDIR).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::delegs;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::{cur_attr, require_dir, saved_attr};
use crate::nfs4::helpers::name::{check_new_name, decode_component};
use crate::nfs4::helpers::perm::require_dir_write;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::encode_change_info;
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
    // A new name changes the file's attributes (numlinks, change): delegations of other
    // clients are recalled first (RFC 8881 §10.4.4; Linux's vfs_link breaks them too).
    delegs::break_for_change(&ctx.srv.delegs_env(), clientid(ctx).ok(), &file)?;
    let change = ctx.srv.store.link(file.ino, dir.ino, &name)?;
    encode_change_info(w, &change);
    Ok(())
}
