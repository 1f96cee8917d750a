//! CLOSE (RFC 8881 §18.2): ends an open; answers the special invalid stateid (§18.2.4).
//! When the last open of an unlinked file goes, the store frees it.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::cur_fh;
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let _seqid = r.u32()?;
    let sid: Stateid = r.read()?;
    let cid = clientid(ctx)?;
    let sid = resolve_stateid(ctx, sid)?;
    let fh = cur_fh(ctx)?;
    let last = ctx.srv.state.close(cid, &sid, fh.ino)?;
    // Return-on-close: the client's layouts of the file go with its last CLOSE of it, unless
    // its delegation of the file keeps them.
    crate::nfs4::layouts::on_close(&ctx.srv.layouts_env(), cid, fh.ino);
    if last {
        // An unlinked file stays while open (REMOVE asked `file_is_open`); free it now.
        if let Ok(a) = ctx.srv.store.getattr(fh.ino) {
            if a.nlink == 0 && ctx.srv.layouts.kept(fh.ino) {
                // A client that could not be fenced held a layout of it and may still write
                // its blocks: the orphan stays (freed by the next mount's orphan sweep).
                tracing::error!(ino = fh.ino.0, "unlinked file kept: a holder is not fenced");
            } else if a.nlink == 0 {
                ctx.srv.store.release(fh.ino).map_err(NfsStat::from)?;
            }
        }
    }
    ctx.current_stateid = Some(Stateid::INVALID);
    Stateid::INVALID.encode(w);
    Ok(())
}
