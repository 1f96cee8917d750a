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

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::cur_attr;
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::layouts::check::check_type;
use crate::nfs4::layouts::{self, ReturnWhat};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};
use layout::block::{IoMode, LayoutType};

const RETURN_FILE: u32 = 1;
const RETURN_FSID: u32 = 2;
const RETURN_ALL: u32 = 3;

/// Bound on a FILE return's `lrf_body`. The block layout's body is empty (RFC 5663 §2.6), as
/// the SCSI layout's; a body is skipped, never kept, so this only refuses (BADXDR) a length
/// no client of these layouts sends, before the record's own bound would.
const MAX_BODY: usize = 1 << 20;

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
            // Empty for the block layout; skip what comes.
            let _body = r.opaque(MAX_BODY)?;
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
    check_type(&ctx.srv.opts.layout_types, ltype)?;
    if !(IoMode::READ.0..=IoMode::ANY.0).contains(&mode.0) {
        return Err(NfsStat::INVAL);
    }
    let cid = clientid(ctx)?;
    let what = match what {
        What::File {
            offset,
            length,
            stateid,
        } => {
            let ino = cur_attr(ctx)?.ino;
            if length == 0 {
                return Err(NfsStat::INVAL);
            }
            let sid = resolve_stateid(ctx, stateid)?;
            if sid.is_anonymous_or_bypass() {
                return Err(NfsStat::BAD_STATEID);
            }
            ReturnWhat::File {
                ino,
                range: (offset, offset.saturating_add(length)),
                mode,
                stateid: sid,
            }
        }
        What::Fsid => {
            cur_attr(ctx)?;
            ReturnWhat::All
        }
        What::All => ReturnWhat::All,
    };
    match layouts::return_layouts(&ctx.srv.layouts_env(), cid, what)? {
        Some(new) => {
            ctx.current_stateid = Some(new);
            w.bool(true);
            new.encode(w);
        }
        None => w.bool(false),
    }
    Ok(())
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    go(ctx, r, w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_return(body_len: u32) -> Vec<u8> {
        let mut w = XdrWriter::new();
        w.bool(false);
        w.u32(LayoutType::BLOCK_VOLUME.0);
        w.u32(IoMode::RW.0);
        w.u32(RETURN_FILE);
        w.u64(0);
        w.u64(u64::MAX);
        Stateid::default().encode(&mut w);
        w.opaque(&vec![0; body_len as usize]);
        w.into_inner()
    }

    #[test]
    fn a_file_return_body_up_to_the_bound_is_skipped_and_past_it_refused() {
        for (len, ok) in [
            (0, true),
            (MAX_BODY as u32, true),
            (MAX_BODY as u32 + 4, false),
        ] {
            let b = file_return(len);
            let mut r = XdrReader::new(&b);
            let got = decode(&mut r);
            assert_eq!(got.is_ok(), ok, "body of {len} bytes");
            if ok {
                assert_eq!(r.remaining(), 0);
            }
        }
    }
}
