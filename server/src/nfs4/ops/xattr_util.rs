//! What the four xattr operations of RFC 8276 share: the name rules and the permission check.
//!
//! The store keeps names as given (pynfs and the Linux client send the "user." prefix
//! themselves); a name follows the `component4` rules of the other names.

use super::access::{require, ACCESS4_MODIFY, ACCESS4_READ};
use super::ns_util::{cur_attr, decode_component};
use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::store::{Attr, FileType, XATTR_NAME_MAX};
use crate::xdr::XdrReader;

/// An `xattrkey4`: empty → INVAL, too long → NAMETOOLONG, not UTF-8 → INVAL.
pub fn decode_key(r: &mut XdrReader<'_>) -> Result<Vec<u8>, NfsStat> {
    let name = decode_component(r)?;
    if name.is_empty() || name.contains(&0) || std::str::from_utf8(&name).is_err() {
        return Err(NfsStat::INVAL);
    }
    if name.len() > XATTR_NAME_MAX {
        return Err(NfsStat::NAMETOOLONG);
    }
    Ok(name)
}

/// The current object, if `ctx.cred` may read (`write == false`) or change its xattrs (RFC
/// 8276 §5: the file's own read / write permission decide, ACCESS4_XAREAD / XAWRITE).
pub fn xattr_target(ctx: &Ctx<'_>, write: bool) -> Result<Attr, NfsStat> {
    let a = cur_attr(ctx)?;
    // Only regular files and directories carry user xattrs (as on Linux).
    if !matches!(a.ftype, FileType::Regular | FileType::Directory) {
        return Err(NfsStat::WRONG_TYPE);
    }
    require(
        &ctx.cred,
        &a,
        if write { ACCESS4_MODIFY } else { ACCESS4_READ },
    )?;
    Ok(a)
}
