//! LOCKT (RFC 8881 §18.11): tests for a conflicting lock without creating state.

use super::lock::lock_error;
use super::state_util::{
    clientid, current_attr, decode_or_badxdr, decode_owner, lock_is_write, regular, try_stat,
};
use crate::nfs4::compound::Ctx;
use crate::nfs4::state::range_of;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn lockt(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> NfsStat {
    let locktype = decode_or_badxdr!(r.u32());
    let offset = decode_or_badxdr!(r.u64());
    let length = decode_or_badxdr!(r.u64());
    let (_clientid, owner) = decode_or_badxdr!(decode_owner(r));
    let write = try_stat!(lock_is_write(locktype));
    let (start, end) = try_stat!(range_of(offset, length));
    let cid = try_stat!(clientid(ctx));
    let ino = try_stat!(current_attr(ctx).and_then(|a| regular(&a, NfsStat::INVAL)));
    // Locks of before the restart may not have been reclaimed yet (RFC 8881 §8.4.2).
    if ctx.srv.state.in_grace() {
        return NfsStat::GRACE;
    }
    match ctx.srv.state.lockt(cid, &owner, ino, write, start, end) {
        Ok(()) => NfsStat::OK,
        Err(e) => lock_error(e, w),
    }
}
