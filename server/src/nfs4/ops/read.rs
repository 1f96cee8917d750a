//! READ (RFC 8881 §18.22) through the server: the store reads written extents from the data
//! volume and gives zeros for holes and unwritten extents (docs/design.md §2).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::helpers::stateid::check_io_stateid;
use crate::nfs4::state::{IoAccess, MAX_IO};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// `READ4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadArgs {
    pub stateid: Stateid,
    pub offset: u64,
    pub count: u32,
}

pub fn decode(r: &mut XdrReader<'_>) -> Result<ReadArgs, NfsStat> {
    Ok(ReadArgs {
        stateid: Stateid::decode(r)?,
        offset: r.u64()?,
        count: r.u32()?,
    })
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let args = decode(r)?;
    let a = cur_attr(ctx)?;
    require_regular(&a, NotRegular::IO)?;
    check_io_stateid(ctx, args.stateid, &a, IoAccess::Read)?;
    // A count above maxread is cut to it (§18.22.3: the server may return less), and to
    // what the session's replies can carry.
    let room = u32::try_from(ctx.result_room()).unwrap_or(u32::MAX);
    let count = args.count.min(MAX_IO).min(room);
    let (data, eof) = ctx.srv.store.read(a.ino, args.offset, count)?;
    w.bool(eof);
    w.opaque(&data);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_args() {
        let mut w = XdrWriter::new();
        Stateid::BYPASS.encode(&mut w);
        w.u64(1 << 40);
        w.u32(4096);
        let a = decode(&mut XdrReader::new(&w.buf)).unwrap();
        assert_eq!(
            a,
            ReadArgs {
                stateid: Stateid::BYPASS,
                offset: 1 << 40,
                count: 4096
            }
        );
        for n in 0..w.buf.len() {
            assert_eq!(
                decode(&mut XdrReader::new(&w.buf[..n])),
                Err(NfsStat::BADXDR)
            );
        }
    }
}
