//! DESTROY_SESSION (RFC 8881 §18.37). A COMPOUND that destroys its own session may go on
//! running; the slot's reply is then simply not cached (`slot_done` finds no session).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let sessionid: [u8; 16] = r.array()?;
    // §18.37.3: destroying the COMPOUND's own session must be its last operation.
    let own = ctx
        .session
        .as_ref()
        .is_some_and(|s| s.sessionid == sessionid);
    if own && ctx.op_index + 1 != ctx.op_count {
        return Err(NfsStat::NOT_ONLY_OP);
    }
    ctx.srv
        .state
        .destroy_session(&sessionid, own, ctx.conn.id)?;
    Ok(())
}
