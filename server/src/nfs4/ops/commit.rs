//! COMMIT (RFC 8881 §18.3): makes the file's data and metadata durable (a full fsync of the
//! file, docs/design.md §4) and returns the write verifier.

use super::write::write_verifier;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

/// `COMMIT4args`: offset and count (0 = to the end of the file).
pub fn decode(r: &mut XdrReader<'_>) -> Result<(u64, u32), NfsStat> {
    Ok((r.u64()?, r.u32()?))
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let (offset, count) = decode(r)?;
    let a = cur_attr(ctx)?;
    require_regular(&a, NotRegular::IO)?;
    // §18.3.3: a range past the largest offset is INVAL.
    if offset.checked_add(u64::from(count)).is_none() {
        return Err(NfsStat::INVAL);
    }
    // The range is only a hint: the store flushes the whole file.
    ctx.srv.store.commit(a.ino)?;
    w.opaque_fixed(&write_verifier(ctx));
    Ok(())
}
