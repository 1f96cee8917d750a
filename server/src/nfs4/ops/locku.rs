//! LOCKU (RFC 8881 §18.12): releases a range of the lock-owner's locks (splitting them).

use super::state_util::{
    clientid, current_attr, decode_or_badxdr, lock_is_write, regular, resolve_stateid, try_stat,
};
use crate::nfs4::compound::Ctx;
use crate::nfs4::state::range_of;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

pub fn locku(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> NfsStat {
    let locktype = decode_or_badxdr!(r.u32());
    let _seqid = decode_or_badxdr!(r.u32());
    let sid: Stateid = decode_or_badxdr!(r.read());
    let offset = decode_or_badxdr!(r.u64());
    let length = decode_or_badxdr!(r.u64());
    try_stat!(lock_is_write(locktype));
    let (start, end) = try_stat!(range_of(offset, length));
    let cid = try_stat!(clientid(ctx));
    let ino = try_stat!(current_attr(ctx).and_then(|a| regular(&a, NfsStat::INVAL)));
    let sid = try_stat!(resolve_stateid(ctx, sid));
    let new = try_stat!(ctx.srv.state.locku(cid, &sid, ino, start, end));
    ctx.current_stateid = Some(new);
    new.encode(w);
    NfsStat::OK
}
