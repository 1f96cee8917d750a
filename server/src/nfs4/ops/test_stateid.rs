//! TEST_STATEID (RFC 8881 §18.48): the status each stateid would get, in one answer.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{XdrReader, XdrWriter};

/// Bound on stateids per call (each is 16 bytes; the request size bounds it anyway).
const MAX_STATEIDS: usize = 4096;

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let sids: Vec<Stateid> = r.vec(MAX_STATEIDS, 16)?;
    let cid = clientid(ctx)?;
    w.u32(sids.len() as u32);
    for s in &sids {
        w.u32(ctx.srv.state.test_stateid(cid, s).0);
    }
    Ok(())
}
