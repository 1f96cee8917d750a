//! SAVEFH (RFC 8881 §18.28): the saved filehandle (and stateid, §16.2.3.1.2) become copies
//! of the current ones.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::cur_fh;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, _r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    ctx.saved_fh = Some(cur_fh(ctx)?);
    ctx.saved_stateid = ctx.current_stateid;
    Ok(())
}
