//! FREE_STATEID (RFC 8881 §18.38): frees a stateid that holds nothing (LOCKS_HELD else).

use super::state_util::{clientid, decode_or_badxdr, resolve_stateid, try_stat};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{XdrReader, XdrWriter};

pub fn free_stateid(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> NfsStat {
    let sid: Stateid = decode_or_badxdr!(r.read());
    let cid = try_stat!(clientid(ctx));
    let sid = try_stat!(resolve_stateid(ctx, sid));
    try_stat!(ctx.srv.state.free_stateid(cid, &sid));
    NfsStat::OK
}
