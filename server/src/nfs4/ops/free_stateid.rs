//! FREE_STATEID (RFC 8881 §18.38): frees a stateid that holds nothing (LOCKS_HELD else).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let sid: Stateid = r.read()?;
    let cid = clientid(ctx)?;
    let sid = resolve_stateid(ctx, sid)?;
    ctx.srv.state.free_stateid(cid, &sid)?;
    Ok(())
}
