//! RECLAIM_COMPLETE (RFC 8881 §18.51): the client has reclaimed what it had; it ends the
//! client's part of the grace period. A second global one is COMPLETE_ALREADY.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let one_fs = r.bool()?;
    if one_fs && ctx.current_fh.is_none() {
        return Err(NfsStat::NOFILEHANDLE);
    }
    let cid = clientid(ctx)?;
    ctx.srv.state.reclaim_complete(cid, one_fs)?;
    Ok(())
}
