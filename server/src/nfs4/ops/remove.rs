//! REMOVE (RFC 8881 §18.25): removes a name from the current directory (a file's link or an
//! empty directory).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::delegs;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::{cur_attr, fh_of, require_dir};
use crate::nfs4::helpers::name::{check_new_name, decode_component};
use crate::nfs4::helpers::perm::{check_sticky, require_dir_write};
use crate::nfs4::layouts::{self, Break};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::encode_change_info;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let name = decode_component(r)?;
    let dir = cur_attr(ctx)?;
    require_dir(&dir)?;
    check_new_name(&name)?;
    require_dir_write(&ctx.cred, &dir)?;
    // RFC 8881 §8.4.2: during grace a removal could destroy a file whose open is being
    // reclaimed.
    if ctx.srv.state.in_grace() {
        return Err(NfsStat::GRACE);
    }
    let victim = ctx.srv.store.lookup(dir.ino, &name)?;
    check_sticky(&ctx.cred, &dir, &victim)?;
    // Removing a delegated file's name recalls the delegation first (RFC 8881 §10.4.4).
    delegs::break_for_change(&ctx.srv.delegs_env(), clientid(ctx).ok(), &victim)?;
    // The store keeps an unlinked file that is still open until its last CLOSE
    // (`Store::release`); dropping its last link recalls its layouts first.
    if victim.nlink <= 1 {
        layouts::break_for(&ctx.srv.layouts_env(), fh_of(&victim), Break::Unlink)?;
    }
    let (change, _unlinked) = ctx.srv.store.remove(dir.ino, &name)?;
    encode_change_info(w, &change);
    Ok(())
}
