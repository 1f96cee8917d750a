//! PUTROOTFH (RFC 8881 §18.21): the export's root directory becomes the current filehandle.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::fh_of;
use crate::nfs4::status::NfsStat;
use crate::store::ROOT_INO;
use crate::xdr::{XdrReader, XdrWriter};

/// Sets the current filehandle to the root; like every PUTFH-like operation it clears the
/// current stateid (RFC 8881 §16.2.3.1.2).
pub fn set_root(ctx: &mut Ctx<'_>) -> Result<(), NfsStat> {
    let a = ctx.srv.store.getattr(ROOT_INO)?;
    ctx.current_fh = Some(fh_of(&a));
    ctx.current_stateid = None;
    Ok(())
}

pub fn run(ctx: &mut Ctx<'_>, _r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    set_root(ctx)
}
