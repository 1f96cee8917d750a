//! LOCKU (RFC 8881 §18.12): releases a range of the lock-owner's locks (splitting them).

use super::lock::lock_is_write;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::state::range_of;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let locktype = r.u32()?;
    let _seqid = r.u32()?;
    let sid: Stateid = r.read()?;
    let offset = r.u64()?;
    let length = r.u64()?;
    lock_is_write(locktype)?;
    let (start, end) = range_of(offset, length)?;
    let cid = clientid(ctx)?;
    let ino = require_regular(&cur_attr(ctx)?, NotRegular::LOCK)?;
    let sid = resolve_stateid(ctx, sid)?;
    let new = ctx.srv.state.locku(cid, &sid, ino, start, end)?;
    ctx.current_stateid = Some(new);
    new.encode(w);
    Ok(())
}
