//! SEEK (RFC 7862 §15.11): the next data or hole at or after an offset. Past the end of
//! the file, or no data before it, is NXIO.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::helpers::stateid::check_io_stateid;
use crate::nfs4::state::IoAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::SeekWhat;
use crate::xdr::{Xdr, XdrError, XdrReader, XdrWriter};

/// `data_content4`.
const NFS4_CONTENT_DATA: u32 = 0;
const NFS4_CONTENT_HOLE: u32 = 1;

pub fn decode(r: &mut XdrReader<'_>) -> Result<(Stateid, u64, SeekWhat), NfsStat> {
    let sid = Stateid::decode(r)?;
    let offset = r.u64()?;
    let what = match r.u32()? {
        NFS4_CONTENT_DATA => SeekWhat::Data,
        NFS4_CONTENT_HOLE => SeekWhat::Hole,
        _ => return Err(XdrError::BadValue.into()),
    };
    Ok((sid, offset, what))
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let (sid, offset, what) = decode(r)?;
    let a = cur_attr(ctx)?;
    require_regular(&a, NotRegular::IO)?;
    check_io_stateid(ctx, sid, &a, IoAccess::Read)?;
    let (eof, found) = ctx.srv.store.seek(a.ino, offset, what)?;
    let at = found.ok_or(NfsStat::NXIO)?;
    w.bool(eof);
    w.u64(at);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_args() {
        let mut w = XdrWriter::new();
        Stateid::ANONYMOUS.encode(&mut w);
        w.u64(7);
        w.u32(NFS4_CONTENT_HOLE);
        assert_eq!(
            decode(&mut XdrReader::new(&w.buf)),
            Ok((Stateid::ANONYMOUS, 7, SeekWhat::Hole))
        );
        let n = w.buf.len();
        w.buf[n - 1] = 5;
        assert_eq!(decode(&mut XdrReader::new(&w.buf)), Err(NfsStat::BADXDR));
        for n in 0..w.buf.len() {
            assert_eq!(
                decode(&mut XdrReader::new(&w.buf[..n])),
                Err(NfsStat::BADXDR)
            );
        }
    }
}
