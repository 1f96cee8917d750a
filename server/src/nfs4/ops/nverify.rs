//! NVERIFY (RFC 8881 §18.17): OK if the given attribute values differ from the current
//! object's, SAME otherwise.

use super::verify::compare;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    match compare(ctx, r) {
        Ok(true) => Err(NfsStat::SAME),
        Ok(false) => Ok(()),
        Err(s) => Err(s),
    }
}
