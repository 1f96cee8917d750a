//! LAYOUTRETURN (RFC 8881 §18.44) of the block layout.
//!
//! ```text
//! args: reclaim bool | layout_type u32 | iomode u32 (READ 1, RW 2, ANY 3)
//!       | return type u32: FILE (1) { offset u64 | length u64 | stateid4 | body opaque<> }
//!                        | FSID (2) | ALL (3)
//! res OK: layoutreturn_stateid { present bool | stateid4 }
//! ```
//! FILE returns a range of the current file: the layout stateid's seqid goes up by one and
//! comes back while the client still holds some of the file; once nothing is left the
//! stateid is freed and none comes back. FSID and ALL return everything the client holds
//! (we export one file system); ALL needs no current filehandle, FSID does.
//! Once no RW layout of a file is left, its unwritten blocks past EOF are freed
//! (`pnfs::trim_released`, docs/pnfs.md "Preallocation").

use crate::nfs4::compound::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::cur_attr;
use crate::nfs4::helpers::layout::check_type;
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::pnfs::add;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};
use layout::block::{IoMode, LayoutType};

const RETURN_FILE: u32 = 1;
const RETURN_FSID: u32 = 2;
const RETURN_ALL: u32 = 3;

enum What {
    File {
        offset: u64,
        length: u64,
        stateid: Stateid,
    },
    Fsid,
    All,
}

fn decode(r: &mut XdrReader<'_>) -> Result<(LayoutType, IoMode, What), NfsStat> {
    let _reclaim = r.bool()?;
    let ltype = LayoutType(r.u32()?);
    let mode = IoMode(r.u32()?);
    let what = match r.u32()? {
        RETURN_FILE => {
            let offset = r.u64()?;
            let length = r.u64()?;
            let stateid = r.read()?;
            // The block layout's return body is empty (RFC 5663 §2.6); skip what comes.
            let _body = r.opaque(1 << 20)?;
            What::File {
                offset,
                length,
                stateid,
            }
        }
        RETURN_FSID => What::Fsid,
        RETURN_ALL => What::All,
        _ => return Err(NfsStat::BADXDR),
    };
    Ok((ltype, mode, what))
}

fn go(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let (ltype, mode, what) = decode(r)?;
    check_type(ctx, ltype)?;
    if !(IoMode::READ.0..=IoMode::ANY.0).contains(&mode.0) {
        return Err(NfsStat::INVAL);
    }
    let cid = clientid(ctx)?;
    match what {
        What::File {
            offset,
            length,
            stateid,
        } => {
            let ino = cur_attr(ctx)?.ino;
            let end = offset.saturating_add(length);
            if length == 0 {
                return Err(NfsStat::INVAL);
            }
            let sid = resolve_stateid(ctx, stateid)?;
            if sid.is_anonymous_or_bypass() {
                return Err(NfsStat::BAD_STATEID);
            }
            let empty = ctx.srv.pnfs.would_empty(cid, ino, offset, end, mode);
            let new = ctx.srv.state.layout_return(cid, ino, &sid, empty)?;
            ctx.srv.pnfs.release(cid, ino, offset, end, mode);
            if empty {
                w.bool(false);
            } else {
                ctx.current_stateid = Some(new);
                w.bool(true);
                new.encode(w);
            }
        }
        What::Fsid => {
            cur_attr(ctx)?;
            ctx.srv.state.layout_return_all(cid);
            ctx.srv.pnfs.release_client(cid);
            w.bool(false);
        }
        What::All => {
            ctx.srv.state.layout_return_all(cid);
            ctx.srv.pnfs.release_client(cid);
            w.bool(false);
        }
    }
    Ok(())
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    add(&ctx.srv.pnfs.metrics.layoutreturns, 1);
    let res = go(ctx, r, w);
    // The last RW layout of a file gone: its never-committed blocks past EOF are freed.
    crate::nfs4::pnfs::trim_released(ctx.srv);
    res
}
