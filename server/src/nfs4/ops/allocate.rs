//! ALLOCATE (RFC 7862 §15.1): reserves blocks (unwritten extents) for a range of a regular
//! file; the size grows to cover it.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::helpers::stateid::check_io_stateid;
use crate::nfs4::state::IoAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// `ALLOCATE4args` and `DEALLOCATE4args`: stateid, offset, length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeArgs {
    pub stateid: Stateid,
    pub offset: u64,
    pub length: u64,
}

pub fn decode_range(r: &mut XdrReader<'_>) -> Result<RangeArgs, NfsStat> {
    Ok(RangeArgs {
        stateid: Stateid::decode(r)?,
        offset: r.u64()?,
        length: r.u64()?,
    })
}

/// The checks ALLOCATE and DEALLOCATE share; returns the inode. A range past the largest
/// file is FBIG; a zero length or a wrapping range is INVAL (RFC 7862 §15.1.3, §15.4.3).
pub fn prepare(ctx: &Ctx<'_>, args: &RangeArgs) -> Result<store::Ino, NfsStat> {
    let a = cur_attr(ctx)?;
    require_regular(&a, NotRegular::IO)?;
    check_io_stateid(ctx, args.stateid, &a, IoAccess::Write)?;
    if args.length == 0 {
        return Err(NfsStat::INVAL);
    }
    match args.offset.checked_add(args.length) {
        None => Err(NfsStat::INVAL),
        Some(end) if end > store::MAX_FILE_SIZE => Err(NfsStat::FBIG),
        Some(_) => Ok(a.ino),
    }
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let args = decode_range(r)?;
    let ino = prepare(ctx, &args)?;
    ctx.srv.store.allocate(ino, args.offset, args.length)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_args() {
        let mut w = XdrWriter::new();
        Stateid::ANONYMOUS.encode(&mut w);
        w.u64(4096);
        w.u64(8192);
        let a = decode_range(&mut XdrReader::new(&w.buf)).unwrap();
        assert_eq!((a.offset, a.length), (4096, 8192));
        for n in 0..w.buf.len() {
            assert_eq!(
                decode_range(&mut XdrReader::new(&w.buf[..n])),
                Err(NfsStat::BADXDR)
            );
        }
    }
}
