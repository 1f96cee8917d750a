//! LAYOUTCOMMIT's decisions (RFC 8881 §18.42.3; block RFC 5663 §2.3.2, SCSI RFC 8154 §2.5;
//! docs/pnfs.md): the stateid and grants (`commit_grants`, a reclaim after a restart), the
//! type's update body, the blocks the file really has, and the store's `commit_blocks`
//! (durability: docs/design.md §4).

use super::{add, commit_grants, Env};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::{Ino, Timespec, WrittenExtent, MAX_FILE_SIZE};
use layout::block::{BlockExtent, LayoutType};
use layout::extent_map::Segment;
use layout::policy::{self, CommitExtent, Grants};
use layout::scsi_policy;

/// A LAYOUTCOMMIT as the op file decoded it, for the current file `ino`.
#[derive(Debug, Clone)]
pub struct CommitReq {
    pub clientid: u64,
    pub ino: Ino,
    pub offset: u64,
    pub length: u64,
    pub reclaim: bool,
    /// The stateid presented (the current one resolved unless a reclaim).
    pub stateid: Stateid,
    pub last_byte: Option<u64>,
    pub mtime: Option<Timespec>,
    pub ltype: LayoutType,
    /// The type's `layoutupdate4` body.
    pub body: Vec<u8>,
    /// The device id block-layout extents must name.
    pub device: [u8; 16],
}

/// LAYOUTCOMMIT: the file's new size when it grew.
pub fn commit(srv: &Env, q: &CommitReq) -> Result<Option<u64>, NfsStat> {
    let (cid, ino) = (q.clientid, q.ino);
    if !q.reclaim && q.stateid.is_anonymous_or_bypass() {
        return Err(NfsStat::BADLAYOUT);
    }
    let range = (q.offset, q.offset.saturating_add(q.length));
    let grants = commit_grants(srv, cid, ino, q.reclaim, &q.stateid, range)?;
    let b = u64::from(srv.store.block_size());
    let checked = if q.ltype == LayoutType::SCSI {
        scsi_extents(b, q, grants.as_ref())?
    } else {
        let ext = BlockExtent::decode_list(&q.body).map_err(|_| NfsStat::BADLAYOUT)?;
        policy::check_commit(
            &ext,
            q.device,
            b,
            q.offset,
            q.length,
            q.last_byte,
            grants.as_ref(),
        )?
    };
    // A range without blocks: nothing of the file is there to commit into.
    let first = q.offset / b;
    let end = q
        .offset
        .saturating_add(q.length)
        .min(MAX_FILE_SIZE)
        .div_ceil(b);
    let segs = srv.store.extents(ino, first, end.saturating_sub(first))?;
    if !segs.iter().any(|s| matches!(s, Segment::Mapped { .. })) {
        return Err(NfsStat::BADLAYOUT);
    }
    let geo = srv.store.superblock().geometry;
    let written = checked
        .iter()
        .map(|c| written(&geo, b, c))
        .collect::<Result<Vec<WrittenExtent>, NfsStat>>()?;
    let done = srv.store.commit_blocks(
        ino,
        &written,
        q.last_byte,
        q.mtime,
        srv.opts.layoutcommit_sync,
    )?;
    tracing::debug!(
        ino = ?ino,
        range = ?range,
        last_byte = ?q.last_byte,
        reclaim = q.reclaim,
        extents = ?written.iter().map(|w| (w.file_block, w.len_blocks, w.phys_block)).collect::<Vec<_>>(),
        converted = done.converted_blocks,
        new_size = ?done.new_size,
        "LAYOUTCOMMIT done"
    );
    let m = &srv.layouts.metrics;
    add(&m.commit_log_writes, u64::from(done.log_written));
    add(&m.commit_data_flushes, u64::from(done.data_flushes_issued));
    add(
        &m.commit_data_flushes_joined,
        u64::from(done.data_flushes_joined),
    );
    add(&m.commit_converted_blocks, done.converted_blocks);
    Ok(done.new_size)
}

/// The store extent for one committed extent. The Linux client sends storage offset 0 in
/// every `pnfs_block_extent4` of its layoutupdate (it only tracks file ranges), and block 0 of
/// the volume is the superblock, never a file's block: offset 0 therefore means "the file's own
/// unwritten blocks of this range" (`None`), which the grants check already limited to what
/// LAYOUTGET gave this client RW. Any other offset must match where the file owns the block
/// (the store checks it under its lock). The offset is on the data member: back to the
/// volume's block by `Geometry::block_at_storage` (a split volume's label blocks are no
/// file's: BADLAYOUT).
fn written(geo: &layout::Geometry, b: u64, c: &CommitExtent) -> Result<WrittenExtent, NfsStat> {
    let phys_block = match c.phys_block {
        0 => None,
        p => Some(geo.block_at_storage(p * b).ok_or(NfsStat::BADLAYOUT)?),
    };
    Ok(WrittenExtent {
        file_block: c.file_block,
        len_blocks: c.len_blocks,
        phys_block,
    })
}

/// The SCSI body (RFC 8154 §2.5): byte ranges only; the volume blocks are the file's own.
/// Malformed bodies are BADLAYOUT.
fn scsi_extents(
    b: u64,
    q: &CommitReq,
    grants: Option<&Grants>,
) -> Result<Vec<CommitExtent>, NfsStat> {
    let ranges = layout::scsi::decode_update(&q.body).map_err(|_| NfsStat::BADLAYOUT)?;
    let blocks = scsi_policy::check_commit(&ranges, b, q.offset, q.length, q.last_byte, grants)?;
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
