//! LOCKT (RFC 8881 §18.11): tests for a conflicting lock without creating state.

use super::lock::lock_error;
use super::lock::lock_is_write;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::{clientid, decode_owner};
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::state::range_of;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let locktype = r.u32()?;
    let offset = r.u64()?;
    let length = r.u64()?;
    let (_clientid, owner) = decode_owner(r)?;
    let write = lock_is_write(locktype)?;
    let (start, end) = range_of(offset, length)?;
    let cid = clientid(ctx)?;
    let ino = require_regular(&cur_attr(ctx)?, NotRegular::LOCK)?;
    // Locks of before the restart may not have been reclaimed yet (RFC 8881 §8.4.2).
    if ctx.srv.state.in_grace() {
        return Err(NfsStat::GRACE);
    }
    match ctx.srv.state.lockt(cid, &owner, ino, write, start, end) {
        Ok(()) => Ok(()),
        Err(e) => Err(lock_error(e, w)),
    }
}
