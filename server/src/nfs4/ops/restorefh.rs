//! RESTOREFH (RFC 8881 §18.27): the saved filehandle (and stateid) become current again;
//! RESTOREFH if nothing was saved.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, _r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    match ctx.saved_fh {
        Some(fh) => {
            ctx.current_fh = Some(fh);
            ctx.current_stateid = ctx.saved_stateid;
            Ok(())
        }
        None => Err(NfsStat::RESTOREFH),
    }
}
