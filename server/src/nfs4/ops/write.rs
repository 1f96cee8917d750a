//! WRITE (RFC 8881 §18.32) through the server. `committed` says how stable the data is
//! when we answer; `writeverf` is the boot verifier, so a client that wrote UNSTABLE data
//! before a restart sees a new verifier at COMMIT and writes again (§18.32.3, docs/design.md §4).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::helpers::stateid::check_io_stateid;
use crate::nfs4::state::IoAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{stable_from_wire, stable_to_wire, Stateid};
use crate::store::{self, Stable};
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// `WRITE4args`; the data borrows the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteArgs<'a> {
    pub stateid: Stateid,
    pub offset: u64,
    pub stable: Stable,
    pub data: &'a [u8],
}

pub fn decode<'a>(r: &mut XdrReader<'a>) -> Result<WriteArgs<'a>, NfsStat> {
    let stateid = Stateid::decode(r)?;
    let offset = r.u64()?;
    let stable = stable_from_wire(r.u32()?)?;
    let n = r.remaining();
    let data = r.opaque(n)?;
    Ok(WriteArgs {
        stateid,
        offset,
        stable,
        data,
    })
}

/// The write verifier of this server instance (changes at every start).
pub fn write_verifier(ctx: &Ctx<'_>) -> [u8; 8] {
    ctx.srv.boot_verifier.to_be_bytes()
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let args = decode(r)?;
    let a = cur_attr(ctx)?;
    require_regular(&a, NotRegular::IO)?;
    check_io_stateid(ctx, args.stateid, &a, IoAccess::Write)?;
    let end = args.offset.checked_add(args.data.len() as u64);
    if !matches!(end, Some(e) if e <= store::MAX_FILE_SIZE) {
        return Err(NfsStat::FBIG);
    }
    let (count, committed) = if args.data.is_empty() {
        // Nothing to write: nothing to make stable either (§18.32.3 allows count 0).
        (0, args.stable)
    } else {
        ctx.srv
            .store
            .write(a.ino, args.offset, args.data, args.stable)?
    };
    w.u32(count);
    w.u32(stable_to_wire(committed));
    w.opaque_fixed(&write_verifier(ctx));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::types::DATA_SYNC4;

    #[test]
    fn decode_args_and_stability() {
        let mut w = XdrWriter::new();
        Stateid::ANONYMOUS.encode(&mut w);
        w.u64(10);
        w.u32(DATA_SYNC4);
        w.opaque(b"hello");
        let a = decode(&mut XdrReader::new(&w.buf)).unwrap();
        assert_eq!(
            (a.offset, a.stable, a.data),
            (10, Stable::DataSync, &b"hello"[..])
        );
        for n in 0..w.buf.len() {
            assert_eq!(
                decode(&mut XdrReader::new(&w.buf[..n])).err(),
                Some(NfsStat::BADXDR)
            );
        }
        assert_eq!(stable_from_wire(3), Err(NfsStat::BADXDR));
        for s in [Stable::Unstable, Stable::DataSync, Stable::FileSync] {
            assert_eq!(stable_from_wire(stable_to_wire(s)), Ok(s));
        }
    }
}
