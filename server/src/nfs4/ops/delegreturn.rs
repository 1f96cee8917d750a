//! DELEGRETURN (RFC 8881 §18.6): gives back the delegation of the current file that the
//! stateid names (delegations: delegs/state.rs), and the layouts it kept past the last CLOSE
//! (layouts `on_close`).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::cur_fh;
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let sid: Stateid = r.read()?;
    let cid = clientid(ctx)?;
    let sid = resolve_stateid(ctx, sid)?;
    let fh = cur_fh(ctx)?;
    ctx.srv.state.delegreturn(cid, &sid, fh.ino)?;
    // The return-on-close layouts the delegation kept past the client's last CLOSE go with
    // it (what the client's COMPOUND did not return already).
    crate::nfs4::layouts::on_close(&ctx.srv.layouts_env(), cid, fh.ino);
    Ok(())
}
