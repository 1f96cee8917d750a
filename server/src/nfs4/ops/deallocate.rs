//! DEALLOCATE (RFC 7862 §15.4): punches a hole (whole blocks freed, partial blocks zeroed);
//! the size does not change.

use super::allocate::{decode_range, prepare};
use crate::nfs4::ctx::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let args = decode_range(r)?;
    let ino = prepare(ctx, &args)?;
    ctx.srv.store.deallocate(ino, args.offset, args.length)?;
    Ok(())
}
