//! PUTPUBFH (RFC 8881 §18.20): pnfsd has one export, so the public filehandle is the root.

use super::putrootfh::set_root;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, _r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    set_root(ctx)
}
