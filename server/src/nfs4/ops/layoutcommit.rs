//! LAYOUTCOMMIT (RFC 8881 §18.42) for the block layout (RFC 5663 §2.3.2, docs/design.md §4–5).
//!
//! ```text
//! args: offset u64 | length u64 | reclaim bool | stateid4
//!       | newoffset4 { present bool | last_write_offset u64 }
//!       | newtime4 { present bool | nfstime4 (seconds i64, nseconds u32) }
//!       | layoutupdate4 { type u32 | body opaque<> }
//!       body = pnfs_scsi_layoutupdate4 (SCSI): count u32 | { offset u64 | length u64 } × count
//!       body = pnfs_block_layoutupdate4 (block): count u32 | pnfs_block_extent4 (44 bytes) × count
//!              (each READ_WRITE_DATA, block-aligned, inside what LAYOUTGET gave RW)
//! res OK: newsize4 { changed bool | size u64 }
//! ```
//! Checks: a bad layout stateid is BADLAYOUT (RFC 8881 §18.42.4, as knfsd); the last byte
//! written must lie in `[offset, offset + length)` (INVAL); extents outside the client's
//! RW grants, misaligned, of another device or not READ_WRITE_DATA are BADLAYOUT; a
//! committed range where the file has no block at all is refused (BADLAYOUT: the layout
//! is stale, e.g. after a truncate). After a restart (`pnfs::commit_grants`, docs/pnfs.md
//! "After a restart"): a reclaim, or a layout stateid of the previous instance while its
//! layouts may still commit, converts the file's own unwritten blocks of the range; other
//! commits wait for the grace period (GRACE); a dead layout is BADLAYOUT.
//! Durability is the store's `commit_blocks` (docs/design.md §4 contract; `layoutcommit =
//! "sync"` forces the log every time). Extents whose storage offset is not where the file
//! owns the block are not converted (never another file's block).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::layouts::check::check_type;
use crate::nfs4::layouts::{self, commit::CommitReq};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::Timespec;
use crate::xdr::{XdrReader, XdrWriter};
use layout::block::LayoutType;

/// Bound on the update body: 64 Ki extents (the Linux client sends at most a page's worth).
const MAX_BODY: usize = 4 + 65536 * layout::block::EXTENT_WIRE_SIZE;

struct Args {
    offset: u64,
    length: u64,
    reclaim: bool,
    stateid: Stateid,
    last_byte: Option<u64>,
    mtime: Option<Timespec>,
    layout_type: LayoutType,
    body: Vec<u8>,
}

fn decode(r: &mut XdrReader<'_>) -> Result<Args, NfsStat> {
    let offset = r.u64()?;
    let length = r.u64()?;
    let reclaim = r.bool()?;
    let stateid = r.read()?;
    let last_byte = if r.bool()? { Some(r.u64()?) } else { None };
    let mtime = if r.bool()? {
        let sec = r.i64()?;
        let nsec = r.u32()?;
        if nsec >= 1_000_000_000 {
            return Err(NfsStat::INVAL);
        }
        Some(Timespec { sec, nsec })
    } else {
        None
    };
    Ok(Args {
        offset,
        length,
        reclaim,
        stateid,
        last_byte,
        mtime,
        layout_type: LayoutType(r.u32()?),
        body: r.opaque_vec(MAX_BODY)?,
    })
}

fn go(ctx: &mut Ctx<'_>, a: Args, w: &mut XdrWriter) -> Result<(), NfsStat> {
    check_type(&ctx.srv.opts.layout_types, a.layout_type)?;
    let attr = cur_attr(ctx)?;
    require_regular(&attr, NotRegular::LAYOUTCOMMIT)?;
    let q = CommitReq {
        clientid: clientid(ctx)?,
        ino: attr.ino,
        offset: a.offset,
        length: a.length,
        reclaim: a.reclaim,
        // A reclaim names a stateid of the previous instance: not the current one.
        stateid: if a.reclaim {
            a.stateid
        } else {
            resolve_stateid(ctx, a.stateid)?
        },
        last_byte: a.last_byte,
        mtime: a.mtime,
        ltype: a.layout_type,
        body: a.body,
        device: crate::nfs4::layouts::device_id(&ctx.srv.store),
    };
    match layouts::commit::commit(&ctx.srv.layouts_env(), &q)? {
        Some(sz) => {
            w.bool(true);
            w.u64(sz);
        }
        None => w.bool(false),
    }
    Ok(())
}

/// The dispatcher counts, times and logs the result (`Server::ops`, metrics::ops).
pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let a = decode(r)?;
    go(ctx, a, w)
}
