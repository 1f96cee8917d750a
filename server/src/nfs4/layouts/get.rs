//! LAYOUTGET's decisions (RFC 8881 §18.43.3; block RFC 5663 §2.3, SCSI RFC 8154 §2.4;
//! docs/pnfs.md): the stateid, conflicts (recalled asynchronously: RECALLCONFLICT at once),
//! how far the layout reaches, the allocation through the store, the extents, the grant.

use super::{add, check_get_stateid, hosts, recall, Env};
use crate::nfs4::delegs::{break_conflicts, Breaker};
use crate::nfs4::state::IoAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Fh, Stateid};
use crate::store::{Ino, Reach};
use layout::block::{BlockExtent, ExtentState, IoMode, LayoutType};
use layout::policy;

/// A LAYOUTGET as the op file decoded it, for the current file `fh`.
#[derive(Debug, Clone)]
pub struct GetReq {
    pub clientid: u64,
    pub fh: Fh,
    pub ltype: LayoutType,
    pub mode: IoMode,
    pub offset: u64,
    pub length: u64,
    pub minlength: u64,
    /// The stateid presented, the current one resolved.
    pub stateid: Stateid,
    /// Bytes the extent list may take (`maxcount` less the fixed reply).
    pub room: usize,
    /// The device id the extents name (per type: layouts::check::device_id_for).
    pub device: [u8; 16],
    /// Where the client's COMPOUND came from (what fencing names).
    pub peer: std::net::SocketAddr,
}

/// What LAYOUTGET hands out: one layout of `[start, end)`.
#[derive(Debug, Clone)]
pub struct Granted {
    pub stateid: Stateid,
    pub start: u64,
    pub end: u64,
    pub extents: Vec<BlockExtent>,
}

/// LAYOUTGET. A refusal after an RW allocation (TOOSMALL, a stateid race) left blocks past
/// EOF that no grant names: they are trimmed unless a layout holds them.
pub fn get(srv: &Env, q: &GetReq) -> Result<Granted, NfsStat> {
    let res = get_inner(srv, q);
    if res.is_err() && q.mode == IoMode::RW {
        srv.layouts.queue_trim([q.fh.ino]);
        super::trim_released(srv);
    }
    res
}

fn get_inner(srv: &Env, q: &GetReq) -> Result<Granted, NfsStat> {
    policy::check_get(q.mode, q.offset, q.length, q.minlength)?;
    if srv.state.in_grace() {
        return Err(NfsStat::GRACE);
    }
    if q.ltype == LayoutType::SCSI {
        // After a restart: until the client's NVMe host is back (docs/pnfs.md).
        crate::nfs4::layouts::scsi_restart::check_layoutget(srv.layouts, srv.state)?;
    }
    let (cid, ino) = (q.clientid, q.fh.ino);
    if q.stateid.is_anonymous_or_bypass() {
        return Err(NfsStat::BAD_STATEID);
    }
    // Check the stateid before allocating anything; it is bumped only once all went well.
    let access = if q.mode == IoMode::RW {
        IoAccess::Write
    } else {
        IoAccess::Read
    };
    check_get_stateid(srv, cid, ino, &q.stateid, access)?;
    // Another client's delegation in the way is recalled first (LAYOUTTRYLATER meanwhile).
    let by = Breaker::Layout {
        rw: q.mode == IoMode::RW,
    };
    break_conflicts(&srv.delegs(), cid, q.fh, by)?;
    let b = u64::from(srv.store.block_size());
    // The one conversion of the asked bytes (policy::GetRange): blocks for the store,
    // block-aligned bytes for the grants.
    let r = policy::get_range(q.offset, q.length, q.minlength, b);
    if q.room < BlockExtent::list_size(1) {
        return Err(NfsStat::TOOSMALL);
    }
    // RFC 8881 §12.5.5.2: while its own layout of the file is being recalled, the client
    // gets no new one until it has returned the recalled one.
    if srv.layouts.recall_pending(cid, ino) {
        return Err(NfsStat::RECALLCONFLICT);
    }
    let others = srv.layouts.conflicting(cid, ino, r.start, r.end, q.mode);
    if !others.is_empty() {
        recall::recall_file(srv, q.fh, &others);
        return Err(NfsStat::RECALLCONFLICT);
    }
    let reach = reach(srv, cid, ino, q.mode, &r);
    // An RW LAYOUTGET is in progress from before its allocation until after its grant: the
    // trim past EOF (`trim_released`) never frees what it is about to hand out.
    let getting = (q.mode == IoMode::RW).then(|| srv.layouts.begin_get(ino));
    let mut map = srv
        .store
        .map_for_layout(ino, r.first, r.n, q.mode == IoMode::RW, reach)?;
    if map.allocated > 0 {
        let m = &srv.layouts.metrics;
        add(&m.layoutget_allocations, 1);
        add(&m.layoutget_allocated_blocks, map.allocated);
    }
    let size = srv.store.getattr(ino)?.size;
    if q.mode == IoMode::READ {
        // Unwritten blocks may hold a client's uncommitted writes: not described as NONE_DATA
        // past what the client must be given (policy::cut_read_at_unwritten).
        policy::cut_read_at_unwritten(&mut map.segs, r.first, r.need_end_block);
    }
    let mut ext =
        policy::extents_for(&map.segs, q.mode, q.device, b, size).ok_or(NfsStat::SERVERFAULT)?;
    to_storage_offsets(srv, &mut ext)?;
    let ext = policy::fit(ext, q.room, r.need_end)?;
    let (lo, hi) = match (ext.first(), ext.last()) {
        (Some(f), Some(l)) => (f.file_offset, l.file_offset + l.length),
        _ => return Err(NfsStat::SERVERFAULT),
    };
    let sid = srv.state.layout_stateid(cid, ino, &q.stateid)?;
    srv.layouts
        .grant_blocks(cid, ino, q.ltype, (lo, hi), q.mode, &ext);
    drop(getting);
    srv.layouts.set_peer(cid, q.peer);
    tracing::debug!(
        ino = ?ino,
        mode = ?q.mode,
        asked = ?(q.offset, q.length, q.minlength),
        granted = ?(lo, hi),
        allocated = map.allocated,
        extents = ?ext.iter().map(|e| (e.file_offset, e.length, e.storage_offset, e.state)).collect::<Vec<_>>(),
        "LAYOUTGET granted"
    );
    if let Some((owner, verifier)) = srv.state.client_identity(cid) {
        srv.layouts.hosts.note_client(
            cid,
            hosts::ClientHost {
                ip: q.peer.ip(),
                owner,
                verifier,
                block: q.ltype == LayoutType::BLOCK_VOLUME,
            },
        );
    }
    Ok(Granted {
        stateid: sid,
        start: lo,
        end: hi,
        extents: ext,
    })
}

/// How far past the asked range this LAYOUTGET may reach (RFC 8881 §18.43.3 allows a larger
/// layout; knfsd returns whole XFS extents): the window of `MAX_SPAN_BYTES` either way, but
/// only where no other client holds a conflicting grant — widening must never cause a
/// recall — and `layout_prealloc_max` of speculation past EOF.
fn reach(srv: &Env, cid: u64, ino: Ino, mode: IoMode, r: &policy::GetRange) -> Reach {
    let w = r.window();
    let free = srv
        .layouts
        .conflicting(cid, ino, w.start, w.end, mode)
        .is_empty();
    let (lo, hi) = if free {
        (w.lo, w.hi)
    } else {
        (r.first, r.first.saturating_add(r.n))
    };
    Reach {
        lo,
        hi,
        prealloc_max: srv.opts.layout_prealloc_max / r.block,
    }
}

/// The extents' storage offsets are on the data member (`Geometry::storage_offset`): a split
/// volume's data member starts behind its label, a single volume's offsets stay the block
/// numbers. NONE_DATA has no storage (offset 0).
fn to_storage_offsets(srv: &Env, ext: &mut [BlockExtent]) -> Result<(), NfsStat> {
    let geo = srv.store.superblock().geometry;
    let b = u64::from(srv.store.block_size());
    for e in ext.iter_mut().filter(|e| e.state != ExtentState::NONE_DATA) {
        e.storage_offset = geo
            .storage_offset(e.storage_offset / b)
            .ok_or(NfsStat::SERVERFAULT)?;
    }
    Ok(())
}
