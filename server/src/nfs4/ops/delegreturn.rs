//! DELEGRETURN (RFC 8881 §18.6): gives back the delegation of the current file that the
//! stateid names (delegations: state/delegs.rs).

use super::ns_util::cur_fh;
use super::state_util::{clientid, decode_or_badxdr, resolve_stateid, try_stat};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{XdrReader, XdrWriter};

pub fn delegreturn(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> NfsStat {
    let sid: Stateid = decode_or_badxdr!(r.read());
    let cid = try_stat!(clientid(ctx));
    let sid = try_stat!(resolve_stateid(ctx, sid));
    let fh = try_stat!(cur_fh(ctx));
    ctx.srv.state.delegreturn(cid, &sid, fh.ino)
}
