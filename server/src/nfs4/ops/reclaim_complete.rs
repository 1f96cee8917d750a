//! RECLAIM_COMPLETE (RFC 8881 §18.51): the client has reclaimed what it had; it ends the
//! client's part of the grace period. A second global one is COMPLETE_ALREADY.

use super::state_util::{clientid, decode_or_badxdr, try_stat};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn reclaim_complete(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> NfsStat {
    let one_fs = decode_or_badxdr!(r.bool());
    if one_fs && ctx.current_fh.is_none() {
        return NfsStat::NOFILEHANDLE;
    }
    let cid = try_stat!(clientid(ctx));
    try_stat!(ctx.srv.state.reclaim_complete(cid, one_fs));
    NfsStat::OK
}
