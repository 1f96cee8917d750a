//! LAYOUTGET (RFC 8881 §18.43) for the block layout (RFC 5663 §2.3, design.md §5).
//!
//! ```text
//! args: signal_layout_avail bool | layout_type u32 | iomode u32 | offset u64 | length u64
//!       | minlength u64 | stateid4 | maxcount u32
//! res OK: return_on_close bool (= true) | stateid4 | layout4 count u32 (= 1)
//!         | { offset u64 | length u64 | iomode u32 | type u32 | body opaque<> }
//!         body = pnfs_block_layout4: count u32 | pnfs_block_extent4 (44 bytes) × count
//!              (SCSI: pnfs_scsi_layout4, the same bytes, RFC 8154 §2.4)
//! res LAYOUTTRYLATER: will_signal_layout_avail bool (never sent: we answer at once)
//! ```
//! RW over a hole allocates unwritten blocks, durable before the reply (design.md §4), and
//! answers INVALID_DATA; written blocks are READ_WRITE_DATA. READ answers READ_DATA, or
//! NONE_DATA (storage offset 0) for holes, unwritten blocks and past EOF. The returned range
//! is block-aligned, starts at or before `offset`, reaches at least `offset + minlength`,
//! is covered exactly by contiguous extents, and holds as many as `maxcount` allows. It is
//! widened over the mapped blocks around the request, and an RW LAYOUTGET that allocates
//! past EOF preallocates more (layout::reach; docs/pnfs.md "Preallocation"), where no other
//! client holds a conflicting layout.
//! Stateid: the first LAYOUTGET presents an open/lock stateid and gets seqid 1; each one
//! after presents the layout stateid and gets it bumped.

use std::time::Instant;

use crate::nfs4::compound::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::helpers::layout::{block, check_type, device_id_for};
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::pnfs::{add, add_elapsed};
use crate::nfs4::state::IoAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::{Ino, Reach};
use crate::xdr::{Xdr, XdrReader, XdrWriter};
use layout::block::{BlockExtent, IoMode, LayoutType};
use layout::policy;

/// Reply bytes before the extent list: return_on_close 4, stateid 16, layout count 4,
/// offset 8, length 8, iomode 4, type 4, body length 4.
const FIXED_REPLY: usize = 52;

struct Args {
    layout_type: LayoutType,
    mode: IoMode,
    offset: u64,
    length: u64,
    minlength: u64,
    stateid: Stateid,
    maxcount: u32,
}

fn decode(r: &mut XdrReader<'_>) -> Result<Args, NfsStat> {
    let _signal = r.bool()?;
    Ok(Args {
        layout_type: LayoutType(r.u32()?),
        mode: IoMode(r.u32()?),
        offset: r.u64()?,
        length: r.u64()?,
        minlength: r.u64()?,
        stateid: r.read()?,
        maxcount: r.u32()?,
    })
}

fn go(ctx: &mut Ctx<'_>, a: Args, w: &mut XdrWriter) -> Result<(), NfsStat> {
    check_type(ctx, a.layout_type)?;
    policy::check_get(a.mode, a.offset, a.length, a.minlength)?;
    let attr = cur_attr(ctx)?;
    require_regular(&attr, NotRegular::LAYOUTGET)?;
    if ctx.srv.state.in_grace() {
        return Err(NfsStat::GRACE);
    }
    if a.layout_type == LayoutType::SCSI {
        // After a restart: until the client's NVMe host is back (docs/pnfs.md).
        crate::nfs4::scsi_restart::check_layoutget(ctx.srv)?;
    }
    let cid = clientid(ctx)?;
    let ino = attr.ino;
    let given = resolve_stateid(ctx, a.stateid)?;
    if given.is_anonymous_or_bypass() {
        return Err(NfsStat::BAD_STATEID);
    }
    // Check the stateid before allocating anything; it is bumped only once all went well.
    let access = if a.mode == IoMode::RW {
        IoAccess::Write
    } else {
        IoAccess::Read
    };
    crate::nfs4::pnfs::check_get_stateid(ctx.srv, cid, ino, &given, access)?;
    let st = &ctx.srv.state;

    let b = block(ctx);
    let (first, n) = policy::get_range(a.offset, a.length, a.minlength, b);
    let room = (a.maxcount as usize).saturating_sub(FIXED_REPLY);
    if room < BlockExtent::list_size(1) {
        return Err(NfsStat::TOOSMALL);
    }
    let (start, end) = (first * b, (first + n).saturating_mul(b));
    // RFC 8881 §12.5.5.2: while its own layout of the file is being recalled, the client
    // gets no new one until it has returned the recalled one.
    if ctx.srv.pnfs.recall_pending(cid, ino) {
        return Err(NfsStat::RECALLCONFLICT);
    }
    let others = ctx.srv.pnfs.conflicting(cid, ino, start, end, a.mode);
    if !others.is_empty() {
        let fh = crate::nfs4::types::Fh {
            ino,
            generation: attr.generation,
        };
        crate::nfs4::callback::recall_file(ctx.srv, fh, &others);
        return Err(NfsStat::RECALLCONFLICT);
    }
    let reach = reach(ctx, cid, ino, a.mode, first, n);
    // An RW LAYOUTGET is in progress from before its allocation until after its grant: the
    // trim past EOF (pnfs::trim_released) never frees what it is about to hand out.
    let getting = (a.mode == IoMode::RW).then(|| ctx.srv.pnfs.begin_get(ino));
    let map = ctx
        .srv
        .store
        .map_for_layout(ino, first, n, a.mode == IoMode::RW, reach)?;
    if map.allocated > 0 {
        let m = &ctx.srv.pnfs.metrics;
        add(&m.layoutget_allocations, 1);
        add(&m.layoutget_allocated_blocks, map.allocated);
    }
    let segs = map.segs;
    let size = ctx.srv.store.getattr(ino)?.size;
    let ext = policy::extents_for(&segs, a.mode, device_id_for(ctx, a.layout_type), b, size)
        .ok_or(NfsStat::SERVERFAULT)?;
    let need_end = a.offset.saturating_add(a.minlength.max(1));
    let ext = policy::fit(ext, room, need_end)?;
    let (lo, hi) = match (ext.first(), ext.last()) {
        (Some(f), Some(l)) => (f.file_offset, l.file_offset + l.length),
        _ => return Err(NfsStat::SERVERFAULT),
    };
    let sid = st.layout_stateid(cid, ino, &given)?;
    ctx.srv.pnfs.grant(cid, ino, lo, hi, a.mode);
    drop(getting);
    ctx.srv.pnfs.set_peer(cid, ctx.conn.peer);
    ctx.current_stateid = Some(sid);

    w.bool(true);
    sid.encode(w);
    w.u32(1);
    w.u64(lo);
    w.u64(hi - lo);
    w.u32(a.mode.0);
    w.u32(a.layout_type.0);
    w.opaque(&if a.layout_type == LayoutType::SCSI {
        layout::scsi::encode_layout(&ext)
    } else {
        BlockExtent::encode_list(&ext)
    });
    Ok(())
}

/// How far past the asked blocks `[first, first + n)` this LAYOUTGET may reach (RFC 8881
/// §18.43.3 allows a larger layout; knfsd returns whole XFS extents): up to
/// `MAX_SPAN_BYTES` either way, but only where no other client holds a conflicting grant —
/// widening must never cause a recall — and `layout_prealloc_max` of speculation past EOF.
fn reach(ctx: &Ctx<'_>, cid: u64, ino: Ino, mode: IoMode, first: u64, n: u64) -> Reach {
    let b = block(ctx);
    let span = policy::MAX_SPAN_BYTES / b;
    let (lo, hi) = (
        first.saturating_sub(span),
        first.saturating_add(span).max(first.saturating_add(n)),
    );
    let free = ctx
        .srv
        .pnfs
        .conflicting(cid, ino, lo * b, hi.saturating_mul(b), mode)
        .is_empty();
    let (lo, hi) = if free {
        (lo, hi)
    } else {
        (first, first.saturating_add(n))
    };
    Reach {
        lo,
        hi,
        prealloc_max: ctx.srv.opts.layout_prealloc_max / b,
    }
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let a = decode(r)?;
    let t0 = Instant::now();
    let rw = a.mode == IoMode::RW;
    let res = go(ctx, a, w);
    if res.is_err() && rw {
        // A refusal after the allocation (TOOSMALL, a stateid race) left blocks past EOF
        // that no grant names: trim them unless a layout holds them.
        if let Some(fh) = ctx.current_fh {
            ctx.srv.pnfs.queue_trim([fh.ino]);
            crate::nfs4::pnfs::trim_released(ctx.srv);
        }
    }
    let m = &ctx.srv.pnfs.metrics;
    add(&m.layoutgets, 1);
    if let Err(st) = res {
        add(&m.layoutget_errors, 1);
        tracing::debug!(status = st.name(), "LAYOUTGET refused");
    }
    add_elapsed(&m.layoutget_ns, t0);
    res
}
