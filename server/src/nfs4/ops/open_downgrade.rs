//! OPEN_DOWNGRADE (RFC 8881 §18.18): narrows an open's access/deny to a mode it had.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::cur_fh;
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::state::ShareAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let sid: Stateid = r.read()?;
    let _seqid = r.u32()?;
    let access = r.u32()?;
    let deny = r.u32()?;
    let cid = clientid(ctx)?;
    let sid = resolve_stateid(ctx, sid)?;
    let fh = cur_fh(ctx)?;
    // Want flags mean nothing here (§18.18.3): only the access and deny bits.
    let share = ShareAccess::new(access, deny)?;
    let new = ctx.srv.state.open_downgrade(cid, &sid, fh.ino, share)?;
    ctx.current_stateid = Some(new);
    new.encode(w);
    Ok(())
}
