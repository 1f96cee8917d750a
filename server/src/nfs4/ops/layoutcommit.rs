//! LAYOUTCOMMIT (RFC 8881 §18.42) for the block layout (RFC 5663 §2.3.2, design.md §4–5).
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
//! Durability is the store's `commit_blocks` (design.md §4 contract; `layoutcommit =
//! "sync"` forces the log every time). Extents whose storage offset is not where the file
//! owns the block are not converted (never another file's block).

use std::time::Instant;

use crate::nfs4::compound::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::helpers::layout::{block, check_type, device_id};
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::pnfs::{add, add_elapsed, commit_grants};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::{Timespec, WrittenExtent, MAX_FILE_SIZE};
use crate::xdr::{XdrReader, XdrWriter};
use layout::block::{BlockExtent, LayoutType};
use layout::extent_map::Segment;
use layout::policy::{self, CommitExtent, Grants};
use layout::scsi_policy;

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

/// What the commit did, for the counters.
fn go(ctx: &mut Ctx<'_>, a: Args, w: &mut XdrWriter) -> Result<(), NfsStat> {
    check_type(ctx, a.layout_type)?;
    let attr = cur_attr(ctx)?;
    require_regular(&attr, NotRegular::LAYOUTCOMMIT)?;
    let cid = clientid(ctx)?;
    let ino = attr.ino;
    let sid = if a.reclaim {
        a.stateid
    } else {
        let sid = resolve_stateid(ctx, a.stateid)?;
        if sid.is_anonymous_or_bypass() {
            return Err(NfsStat::BADLAYOUT);
        }
        sid
    };
    let range = (a.offset, a.offset.saturating_add(a.length));
    let grants = commit_grants(ctx.srv, cid, ino, a.reclaim, &sid, range)?;
    let b = block(ctx);
    let checked = if a.layout_type == LayoutType::SCSI {
        scsi_extents(ctx, &a, grants.as_ref())?
    } else {
        let ext = BlockExtent::decode_list(&a.body).map_err(|_| NfsStat::BADLAYOUT)?;
        policy::check_commit(
            &ext,
            device_id(ctx),
            b,
            a.offset,
            a.length,
            a.last_byte,
            grants.as_ref(),
        )?
    };
    // A range without blocks: nothing of the file is there to commit into.
    let first = a.offset / b;
    let end = a
        .offset
        .saturating_add(a.length)
        .min(MAX_FILE_SIZE)
        .div_ceil(b);
    let segs = ctx
        .srv
        .store
        .extents(ino, first, end.saturating_sub(first))?;
    if !segs.iter().any(|s| matches!(s, Segment::Mapped { .. })) {
        return Err(NfsStat::BADLAYOUT);
    }
    let written: Vec<WrittenExtent> = checked.iter().map(written).collect();
    let done = ctx.srv.store.commit_blocks(
        ino,
        &written,
        a.last_byte,
        a.mtime,
        ctx.srv.opts.layoutcommit_sync,
    )?;
    let m = &ctx.srv.pnfs.metrics;
    add(&m.commit_log_writes, u64::from(done.log_written));
    add(&m.commit_data_flushes, u64::from(done.data_flushes_issued));
    add(
        &m.commit_data_flushes_joined,
        u64::from(done.data_flushes_joined),
    );
    add(&m.commit_converted_blocks, done.converted_blocks);
    match done.new_size {
        Some(sz) => {
            w.bool(true);
            w.u64(sz);
        }
        None => w.bool(false),
    }
    Ok(())
}

/// The store extent for one committed extent. The Linux client sends storage offset 0 in
/// every `pnfs_block_extent4` of its layoutupdate (it only tracks file ranges), and block 0 of
/// the volume is the superblock, never a file's block: offset 0 therefore means "the file's own
/// unwritten blocks of this range" (`None`), which the grants check already limited to what
/// LAYOUTGET gave this client RW. Any other offset must match where the file owns the block
/// (the store checks it under its lock).
fn written(c: &CommitExtent) -> WrittenExtent {
    WrittenExtent {
        file_block: c.file_block,
        len_blocks: c.len_blocks,
        phys_block: (c.phys_block != 0).then_some(c.phys_block),
    }
}

/// The SCSI body (RFC 8154 §2.5): byte ranges only; the volume blocks are the file's own.
/// Malformed bodies are BADLAYOUT.
fn scsi_extents(
    ctx: &Ctx<'_>,
    a: &Args,
    grants: Option<&Grants>,
) -> Result<Vec<CommitExtent>, NfsStat> {
    let b = block(ctx);
    let ranges = layout::scsi::decode_update(&a.body).map_err(|_| NfsStat::BADLAYOUT)?;
    let blocks = scsi_policy::check_commit(&ranges, b, a.offset, a.length, a.last_byte, grants)?;
    // Storage block 0 = "the file's own blocks of the range": the store maps them under its
    // lock (`written`), so a client can never name another file's blocks.
    Ok(blocks
        .into_iter()
        .map(|(first, n)| CommitExtent {
            file_block: first,
            len_blocks: n,
            phys_block: 0,
        })
        .collect())
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let a = decode(r)?;
    let t0 = Instant::now();
    let res = go(ctx, a, w);
    let m = &ctx.srv.pnfs.metrics;
    add(&m.layoutcommits, 1);
    if let Err(st) = res {
        add(&m.layoutcommit_errors, 1);
        tracing::debug!(status = st.name(), "LAYOUTCOMMIT refused");
    }
    add_elapsed(&m.layoutcommit_ns, t0);
    res
}
