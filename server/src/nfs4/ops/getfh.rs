//! GETFH (RFC 8881 §18.8): returns the current filehandle.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::cur_fh;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, _r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    w.opaque(&cur_fh(ctx)?.to_bytes());
    Ok(())
}
