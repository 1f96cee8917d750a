//! LAYOUTGET (RFC 8881 §18.43) for the block layout (RFC 5663 §2.3, docs/design.md §5).
//!
//! ```text
//! args: signal_layout_avail bool | layout_type u32 | iomode u32 | offset u64 | length u64
//!       | minlength u64 | stateid4 | maxcount u32
//! res OK: return_on_close bool (= true) | stateid4 | layout4 count u32 (= 1)
//!         | { offset u64 | length u64 | iomode u32 | type u32 | body opaque<> }
//!         body = pnfs_block_layout4: count u32 | pnfs_block_extent4 (44 bytes) × count
//!              (SCSI: pnfs_scsi_layout4, the same bytes, RFC 8154 §2.4)
//! res LAYOUTTRYLATER: will_signal_layout_avail bool = false (another client's delegation
//!       is being recalled; we never signal, RFC 8881 §18.43.3)
//! ```
//! RW over a hole allocates unwritten blocks, durable before the reply (docs/design.md §4), and
//! answers INVALID_DATA; written blocks are READ_WRITE_DATA. READ answers READ_DATA, or
//! NONE_DATA (storage offset 0) for holes, unwritten blocks and past EOF. The returned range
//! is block-aligned, starts at or before `offset`, reaches at least `offset + minlength`,
//! is covered exactly by contiguous extents, and holds as many as `maxcount` allows. It is
//! widened over the mapped blocks around the request, and an RW LAYOUTGET that allocates
//! past EOF preallocates more (layout::reach; docs/pnfs.md "Preallocation"), where no other
//! client holds a conflicting layout.
//! Stateid: the first LAYOUTGET presents an open/lock stateid and gets seqid 1; each one
//! after presents the layout stateid and gets it bumped.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::{cur_attr, fh_of, require_regular, NotRegular};
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::layouts::check::{check_type, device_id_for};
use crate::nfs4::layouts::{self, get::GetReq};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};
use layout::block::{BlockExtent, IoMode, LayoutType};

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
    check_type(&ctx.srv.opts.layout_types, a.layout_type)?;
    let attr = cur_attr(ctx)?;
    require_regular(&attr, NotRegular::LAYOUTGET)?;
    let q = GetReq {
        clientid: clientid(ctx)?,
        fh: fh_of(&attr),
        ltype: a.layout_type,
        mode: a.mode,
        offset: a.offset,
        length: a.length,
        minlength: a.minlength,
        stateid: resolve_stateid(ctx, a.stateid)?,
        room: (a.maxcount as usize).saturating_sub(FIXED_REPLY),
        device: device_id_for(&ctx.srv.store, ctx.srv.boot_verifier, a.layout_type),
        peer: ctx.conn.peer,
    };
    let g = match layouts::get::get(&ctx.srv.layouts_env(), &q) {
        Err(NfsStat::LAYOUTTRYLATER) => {
            w.bool(false);
            return Err(NfsStat::LAYOUTTRYLATER);
        }
        r => r?,
    };
    ctx.current_stateid = Some(g.stateid);

    w.bool(true);
    g.stateid.encode(w);
    w.u32(1);
    w.u64(g.start);
    w.u64(g.end - g.start);
    w.u32(a.mode.0);
    w.u32(a.layout_type.0);
    w.opaque(&if a.layout_type == LayoutType::SCSI {
        layout::scsi::encode_layout(&g.extents)
    } else {
        BlockExtent::encode_list(&g.extents)
    });
    Ok(())
}

/// The dispatcher counts, times and logs the result (`Server::ops`, metrics::ops).
pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let a = decode(r)?;
    go(ctx, a, w)
}
