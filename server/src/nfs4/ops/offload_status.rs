//! OFFLOAD_STATUS (RFC 7862 §15.9): how far an async COPY of the caller's got, and its
//! status once it is over. The copies are nfs4/copy/offload.rs's; a stateid that names no
//! copy of this client (unknown, another client's, cancelled, freed) is BAD_STATEID.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let stateid = Stateid::decode(r)?;
    let st = ctx.srv.copies.status(clientid(ctx)?, &stateid)?;
    // OFFLOAD_STATUS4resok { osr_count, osr_complete<1> }.
    w.u64(st.count);
    match st.complete {
        Some(s) => {
            w.u32(1);
            w.u32(s.0);
        }
        None => w.u32(0),
    }
    Ok(())
}
