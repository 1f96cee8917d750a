//! SETXATTR (RFC 8276 §8.4.2): create or replace one extended attribute; the reply carries
//! the file's change attribute before and after.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::name::decode_xattr_key;
use crate::nfs4::helpers::perm::xattr_target;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::encode_change_info;
use crate::store::{XattrSet, XATTR_SIZE_MAX};
use crate::xdr::{XdrError, XdrReader, XdrWriter};

/// `setxattr_option4`.
const SETXATTR4_EITHER: u32 = 0;
const SETXATTR4_CREATE: u32 = 1;
const SETXATTR4_REPLACE: u32 = 2;

pub fn decode_option(v: u32) -> Result<XattrSet, NfsStat> {
    Ok(match v {
        SETXATTR4_EITHER => XattrSet::Either,
        SETXATTR4_CREATE => XattrSet::Create,
        SETXATTR4_REPLACE => XattrSet::Replace,
        _ => return Err(XdrError::BadValue.into()),
    })
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let how = decode_option(r.u32()?)?;
    let name = decode_xattr_key(r)?;
    let n = r.remaining();
    let value = r.opaque(n)?;
    if value.len() > XATTR_SIZE_MAX {
        return Err(NfsStat::XATTR2BIG);
    }
    let a = xattr_target(ctx, true)?;
    let change = ctx.srv.store.setxattr(a.ino, &name, value, how)?;
    encode_change_info(w, &change);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options() {
        assert_eq!(decode_option(0), Ok(XattrSet::Either));
        assert_eq!(decode_option(1), Ok(XattrSet::Create));
        assert_eq!(decode_option(2), Ok(XattrSet::Replace));
        assert_eq!(decode_option(3), Err(NfsStat::BADXDR));
    }
}
