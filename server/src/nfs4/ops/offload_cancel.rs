//! OFFLOAD_CANCEL (RFC 7862 §15.8): stops an async COPY of the caller's; what it copied
//! stays, and no CB_OFFLOAD follows. The copies are nfs4/copy/offload.rs's; a stateid that
//! names no copy of this client is BAD_STATEID.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _: &mut XdrWriter) -> Result<(), NfsStat> {
    let stateid = Stateid::decode(r)?;
    ctx.srv.copies.cancel(clientid(ctx)?, &stateid)
}
