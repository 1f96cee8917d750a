//! COPY (RFC 7862 §15.2): from the saved filehandle's file to the current one's, done by the
//! server on the volume. The copy service (`nfs4::copy`) decides; this file decodes and
//! encodes. Synchronous: no callback stateid, `cr_synchronous` true; asynchronous (the
//! client asked, and the caps had room): the copy stateid, `wr_count` 0, UNSTABLE4 (nothing
//! of the copy is durable yet; CB_OFFLOAD tells what is), `cr_synchronous` false.

use super::write::write_verifier;
use crate::nfs4::copy::{self, CopyReply, CopyReq};
use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::{cur_attr, require_regular, saved_attr, NotRegular};
use crate::nfs4::helpers::stateid::check_io_stateid;
use crate::nfs4::state::IoAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::stable_to_wire;
use crate::nfs4::types::Stateid;
use crate::store::Stable;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// The most `ca_source_server` entries decoded; any entry at all makes the COPY
/// inter-server, which is NOTSUPP.
const MAX_SOURCE_SERVERS: usize = 16;
/// The longest name, URL or universal address of a `netloc4` we read past.
const MAX_NETLOC: usize = 1024;

/// `netloc_type4` (RFC 7862 §3.3).
const NL4_NAME: u32 = 1;
const NL4_URL: u32 = 2;
const NL4_NETADDR: u32 = 3;

/// `COPY4args`; `inter_server`: `ca_source_server` named a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyArgs {
    pub req: CopyReq,
    pub consecutive: bool,
    pub synchronous: bool,
    pub inter_server: bool,
}

pub fn decode(r: &mut XdrReader<'_>) -> Result<CopyArgs, NfsStat> {
    let src_stateid = Stateid::decode(r)?;
    let dst_stateid = Stateid::decode(r)?;
    let src_offset = r.u64()?;
    let dst_offset = r.u64()?;
    let count = r.u64()?;
    let consecutive = r.bool()?;
    let synchronous = r.bool()?;
    let n = r.array_len(MAX_SOURCE_SERVERS, 8)?;
    for _ in 0..n {
        skip_netloc(r)?;
    }
    Ok(CopyArgs {
        req: CopyReq {
            src_stateid,
            dst_stateid,
            src_offset,
            dst_offset,
            count,
        },
        consecutive,
        synchronous,
        inter_server: n > 0,
    })
}

/// Reads past one `netloc4`.
fn skip_netloc(r: &mut XdrReader<'_>) -> Result<(), NfsStat> {
    match r.u32()? {
        NL4_NAME | NL4_URL => {
            r.opaque(MAX_NETLOC)?;
        }
        NL4_NETADDR => {
            r.opaque(MAX_NETLOC)?; // na_r_netid
            r.opaque(MAX_NETLOC)?; // na_r_addr
        }
        _ => return Err(NfsStat::BADXDR),
    }
    Ok(())
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let args = decode(r)?;
    if args.inter_server {
        return Err(NfsStat::NOTSUPP);
    }
    // COPY4resok: write_response4 { wr_callback_id<1>, wr_count, wr_committed,
    // wr_writeverf }, copy_requirements4 { cr_consecutive, cr_synchronous }.
    // RFC 7862 §15.2: the saved filehandle is the source, the current one the destination.
    let src = saved_attr(ctx)?;
    let dst = cur_attr(ctx)?;
    require_regular(&src, NotRegular::IO)?;
    require_regular(&dst, NotRegular::IO)?;
    check_io_stateid(ctx, args.req.src_stateid, &src, IoAccess::Read)?;
    check_io_stateid(ctx, args.req.dst_stateid, &dst, IoAccess::Write)?;
    let cid = clientid(ctx)?;
    match copy::copy(
        &ctx.srv.copy_env(),
        cid,
        &src,
        &dst,
        &args.req,
        !args.synchronous,
    )? {
        CopyReply::Done(done) => {
            w.u32(0);
            w.u64(done.count);
            w.u32(stable_to_wire(done.committed));
            w.opaque_fixed(&write_verifier(ctx));
            w.bool(true);
            w.bool(true);
        }
        CopyReply::Started(stateid) => {
            w.u32(1);
            stateid.encode(w);
            w.u64(0);
            w.u32(stable_to_wire(Stable::Unstable));
            w.opaque_fixed(&write_verifier(ctx));
            w.bool(true);
            w.bool(false);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(sources: &[(u32, &[&[u8]])]) -> Vec<u8> {
        let mut w = XdrWriter::new();
        Stateid::ANONYMOUS.encode(&mut w);
        Stateid::BYPASS.encode(&mut w);
        w.u64(1);
        w.u64(2);
        w.u64(3);
        w.bool(false);
        w.bool(true);
        w.u32(sources.len() as u32);
        for (t, parts) in sources {
            w.u32(*t);
            for p in *parts {
                w.opaque(p);
            }
        }
        w.buf
    }

    #[test]
    fn decode_args_and_source_servers() {
        let buf = args(&[]);
        let a = decode(&mut XdrReader::new(&buf)).unwrap();
        assert_eq!((a.req.src_offset, a.req.dst_offset, a.req.count), (1, 2, 3));
        assert_eq!(a.req.dst_stateid, Stateid::BYPASS);
        assert!(a.synchronous && !a.consecutive && !a.inter_server);
        for n in 0..buf.len() {
            assert_eq!(decode(&mut XdrReader::new(&buf[..n])), Err(NfsStat::BADXDR));
        }
        let buf = args(&[
            (NL4_NAME, &[b"srv"]),
            (NL4_NETADDR, &[b"tcp", b"1.2.3.4.8.1"]),
        ]);
        let mut r = XdrReader::new(&buf);
        assert!(decode(&mut r).unwrap().inter_server);
        assert_eq!(r.remaining(), 0);
        let buf = args(&[(9, &[])]);
        assert_eq!(decode(&mut XdrReader::new(&buf)), Err(NfsStat::BADXDR));
    }
}
