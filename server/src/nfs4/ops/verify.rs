//! VERIFY (RFC 8881 §18.31): OK if the given attribute values are those of the current
//! object, NOT_SAME otherwise. NVERIFY shares `compare`.

use super::ns_util::cur_attr;
use crate::nfs4::attr::{decode_raw, encode_values, is_supported, is_write_only, num, with_env};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

/// Whether the `fattr4` in `r` equals our encoding of the same attributes. Attributes we do
/// not support are ATTRNOTSUPP; rdattr_error and write-only ones are INVAL (§18.31.3).
pub fn compare(ctx: &Ctx<'_>, r: &mut XdrReader<'_>) -> Result<bool, NfsStat> {
    let (mask, vals) = decode_raw(r)?;
    for bit in mask.iter() {
        if !is_supported(ctx.minor, bit) {
            return Err(NfsStat::ATTRNOTSUPP);
        }
        if bit == num::RDATTR_ERROR || is_write_only(bit) {
            return Err(NfsStat::INVAL);
        }
    }
    let a = cur_attr(ctx)?;
    let mut ours = XdrWriter::new();
    with_env(ctx, |env| encode_values(env, &a, &mask, &mut ours));
    Ok(ours.buf == vals)
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> NfsStat {
    match compare(ctx, r) {
        Ok(true) => NfsStat::OK,
        Ok(false) => NfsStat::NOT_SAME,
        Err(s) => s,
    }
}
