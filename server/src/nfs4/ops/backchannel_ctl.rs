//! BACKCHANNEL_CTL (RFC 8881 §18.33): a new callback program (and security parameters)
//! for the COMPOUND's session.

use super::state_util::{decode_cb_sec, decode_or_badxdr, try_stat};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn backchannel_ctl(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> NfsStat {
    let cb_program = decode_or_badxdr!(r.u32());
    let (_flavors, cred) = decode_or_badxdr!(decode_cb_sec(r));
    let Some(sessionid) = ctx.session.as_ref().map(|s| s.sessionid) else {
        return NfsStat::OP_NOT_IN_SESSION;
    };
    try_stat!(ctx.srv.state.backchannel_ctl(&sessionid, cb_program));
    ctx.srv
        .state
        .set_cb_cred(&sessionid, cred.unwrap_or_default(), ctx.minor);
    NfsStat::OK
}
