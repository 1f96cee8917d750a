//! BACKCHANNEL_CTL (RFC 8881 §18.33): a new callback program (and security parameters)
//! for the COMPOUND's session.

use crate::nfs4::callback;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::decode_cb_sec;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let cb_program = r.u32()?;
    let (_flavors, cred) = decode_cb_sec(r)?;
    let Some(sessionid) = ctx.session.as_ref().map(|s| s.sessionid) else {
        return Err(NfsStat::OP_NOT_IN_SESSION);
    };
    ctx.srv.state.backchannel_ctl(&sessionid, cb_program)?;
    ctx.srv
        .state
        .set_cb_cred(&sessionid, cred.unwrap_or_default(), ctx.minor);
    // The new program and credentials are probed with CB_NULL, asynchronously (§18.33.3).
    callback::queue_probe(&ctx.srv.backchannel(), &sessionid);
    Ok(())
}
