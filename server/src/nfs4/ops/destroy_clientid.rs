//! DESTROY_CLIENTID (RFC 8881 §18.50): CLIENTID_BUSY while the client has sessions.

use super::state_util::{decode_or_badxdr, try_stat};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn destroy_clientid(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> NfsStat {
    let clientid = decode_or_badxdr!(r.u64());
    try_stat!(ctx.srv.state.destroy_clientid(clientid));
    NfsStat::OK
}
