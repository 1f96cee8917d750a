//! SECINFO_NO_NAME (RFC 8881 §18.45): the flavors for the current filehandle or its parent.
//! Like SECINFO it consumes the current filehandle.

use super::secinfo::encode_flavors;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::cur_attr;
use crate::nfs4::status::NfsStat;
use crate::store::{FileType, ROOT_INO};
use crate::xdr::{XdrError, XdrReader, XdrWriter};

/// `secinfo_style4`.
const SECINFO_STYLE4_CURRENT_FH: u32 = 0;
const SECINFO_STYLE4_PARENT: u32 = 1;

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let style = r.u32()?;
    let a = cur_attr(ctx)?;
    match style {
        SECINFO_STYLE4_CURRENT_FH => {}
        SECINFO_STYLE4_PARENT => {
            if a.ftype != FileType::Directory {
                return Err(NfsStat::NOTDIR);
            }
            if a.ino == ROOT_INO {
                return Err(NfsStat::NOENT);
            }
        }
        _ => return Err(XdrError::BadValue.into()),
    }
    encode_flavors(w, &ctx.access.flavors);
    ctx.current_fh = None;
    Ok(())
}
