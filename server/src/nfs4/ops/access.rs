//! ACCESS (RFC 8881 §18.1): which of the asked ACCESS4 bits the caller has on the current
//! object (the rules are in helpers/perm.rs).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::cur_attr;
use crate::nfs4::helpers::perm::{
    allowed, with_xattr_bits, ACCESS4_DELETE, ACCESS4_EXECUTE, ACCESS4_EXTEND, ACCESS4_LOOKUP,
    ACCESS4_MODIFY, ACCESS4_READ, ACCESS4_XALIST, ACCESS4_XAREAD, ACCESS4_XAWRITE,
};
use crate::nfs4::status::NfsStat;
use crate::store::FileType;
use crate::xdr::{XdrReader, XdrWriter};

/// The xattr bits (RFC 8276 §8.3), meaningful in NFSv4.2 only.
const XA_BITS: u32 = ACCESS4_XAREAD | ACCESS4_XAWRITE | ACCESS4_XALIST;

/// The bits that mean something for a directory, and for anything else.
const DIR_BITS: u32 =
    ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_MODIFY | ACCESS4_EXTEND | ACCESS4_DELETE;
const FILE_BITS: u32 = ACCESS4_READ | ACCESS4_MODIFY | ACCESS4_EXTEND | ACCESS4_EXECUTE;

/// ACCESS4res: `supported` are the asked bits we can judge for this type of object,
/// `access` those of them that are granted.
pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let asked = r.u32()?;
    let a = cur_attr(ctx)?;
    let meaningful = if a.ftype == FileType::Directory {
        DIR_BITS
    } else {
        FILE_BITS
    };
    let xa = if ctx.minor >= 2 { XA_BITS } else { 0 };
    let supported = asked & (meaningful | xa);
    w.u32(supported);
    w.u32(with_xattr_bits(allowed(&ctx.cred, &a)) & supported);
    Ok(())
}
