//! The copy service: NFSv4.2 COPY within the server (RFC 7862 §4, §15.2), synchronous, or
//! asynchronous when the client asks (offload.rs).
//!
//! ```text
//! COPY (ops/copy.rs: files, stateids) ─▶ copy::copy: range ─▶ delegations and layouts of
//!      the destination recalled (DELAY while out)
//!   ├ synchronous ─▶ Store::copy (store/copy.rs) ─▶ reply with the count, FILE_SYNC4
//!   └ asynchronous, room in the caps ─▶ offload::Offloads::start ─▶ reply with the copy
//!       stateid; the workers copy, then CB_OFFLOAD (offload.rs)
//! ```
//! Policy lives here; the op file decodes, resolves the two files, checks their stateids
//! (as READ and WRITE do) and encodes:
//! - Intra-server only: a COPY naming source servers (`ca_source_server`) is NOTSUPP, and so
//!   is COPY_NOTIFY (there is no inter-server copy to notify).
//! - Synchronous unless `ca_synchronous` is false (§15.2.3 lets the server choose). A
//!   synchronous COPY moves at most `MAX_SYNC_COPY` bytes (a short copy, §15.2.3: the client
//!   asks again for the rest), so a COMPOUND holds its thread for a bounded time. An
//!   asynchronous one moves at most `offload::MAX_ASYNC_COPY`; when the client or the server
//!   has as many async copies as the caps allow, it is done synchronously instead (the
//!   reply says so: no callback stateid, `cr_synchronous`), which the client takes as a
//!   normal answer, where DELAY would have it retry the same COPY, idle.
//! - Always stable: FILE_SYNC, after the destination's data, size and extents are durable
//!   (a COMMIT of the destination), in the reply (synchronous) or in CB_OFFLOAD. One force
//!   per COPY costs little, and the client then needs no COMMIT.
//! - Before it writes, every layout of the destination is recalled, the caller's too, and the
//!   COPY is DELAY while any is out (as a truncate, layouts `break_for`): a block-layout client
//!   caches its extents' states, and one holding the range as INVALID_DATA would zero around
//!   its next partial write over the copied bytes, or read its stale zeros. Delegations of
//!   other clients that conflict — any of the destination, a write delegation of the source —
//!   are recalled the same way (RFC 8881 §10.4.4). Nothing waits: the recalls are queued. An
//!   async copy checks again before each step and ends short if one appeared.
//!
//! The functions take an [`Env`]: the layouts service's handle (the store, the state, the
//! recalls), the async copies and the write verifier; server.rs builds it
//! (`Server::copy_env`).

pub mod offload;

use crate::nfs4::delegs::{break_conflicts, Breaker};
use crate::nfs4::layouts::recall::recall_file;
use crate::nfs4::state::ShareAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{fh_of, Fh, Stateid};
use crate::store::{self, Attr, CopyMethod, Stable};

/// What the copy service works with (`Server::copy_env` builds it).
#[derive(Clone, Copy)]
pub struct Env<'a> {
    /// The layouts service's handle: the store, the state and the callback queue are its.
    pub pnfs: crate::nfs4::layouts::Env<'a>,
    /// The async copies (offload.rs).
    pub copies: &'a offload::Offloads,
    /// The write verifier of this instance (CB_OFFLOAD's `wr_writeverf`).
    pub boot_verifier: u64,
}

/// The most one synchronous COPY moves: 128 MiB, a fraction of a second at the volume's
/// sequential rate (docs/benchmarks.md), so a COMPOUND never holds a thread of the shared
/// pool for long; a longer copy is short (§15.2.3) and the client continues it.
pub const MAX_SYNC_COPY: u64 = 128 << 20;

/// What COPY asks, decoded (`COPY4args` without the source servers, which are refused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyReq {
    pub src_stateid: Stateid,
    pub dst_stateid: Stateid,
    pub src_offset: u64,
    pub dst_offset: u64,
    /// 0: to the end of the source (§15.2.3).
    pub count: u64,
}

/// What a copy did: `write_response4` without the callback stateid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyDone {
    pub count: u64,
    pub committed: Stable,
}

/// How COPY answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyReply {
    /// Copied before the reply (synchronous).
    Done(CopyDone),
    /// Started in the background under this copy stateid (asynchronous): its result comes
    /// in CB_OFFLOAD and from OFFLOAD_STATUS.
    Started(Stateid),
}

/// RFC 7862 §15.2: client `cid` copies `src` (the saved filehandle's regular file) to `dst`
/// (the current one's), both stateids checked by the operation; `asynchronous`:
/// `ca_synchronous` was false.
pub fn copy(
    srv: &Env,
    cid: u64,
    src: &Attr,
    dst: &Attr,
    req: &CopyReq,
    asynchronous: bool,
) -> Result<CopyReply, NfsStat> {
    let count = range(
        src.size,
        req.src_offset,
        req.dst_offset,
        req.count,
        src.ino == dst.ino,
        if asynchronous {
            offload::MAX_ASYNC_COPY
        } else {
            MAX_SYNC_COPY
        },
    )?;
    // Delegations first: a write delegation of the source may hold bytes we would miss.
    break_conflicts(
        &srv.pnfs.delegs(),
        cid,
        fh_of(src),
        Breaker::Access(ShareAccess::READ),
    )?;
    break_conflicts(
        &srv.pnfs.delegs(),
        cid,
        fh_of(dst),
        Breaker::Access(ShareAccess::WRITE),
    )?;
    break_layouts(srv, fh_of(dst))?;
    if count == 0 {
        return Ok(CopyReply::Done(CopyDone {
            count: 0,
            committed: Stable::FileSync,
        }));
    }
    if asynchronous {
        let job = offload::Job {
            src: fh_of(src),
            src_off: req.src_offset,
            dst: fh_of(dst),
            dst_off: req.dst_offset,
            len: count,
        };
        if let Some(sid) = srv.copies.start(srv.boot_verifier, cid, job) {
            return Ok(CopyReply::Started(sid));
        }
    }
    let count = count.min(MAX_SYNC_COPY);
    let done = srv.pnfs.store.copy(
        src.ino,
        req.src_offset,
        dst.ino,
        req.dst_offset,
        count,
        true,
        CopyMethod::Auto,
    )?;
    Ok(CopyReply::Done(CopyDone {
        count: done.bytes,
        committed: done.stable,
    }))
}

/// RFC 7862 §15.2.3: the bytes to copy. A source offset, or offset plus count, past the
/// source's end is INVAL; count 0 copies to the end; overlapping ranges of one file are
/// INVAL; a destination past the largest file is FBIG. At most `max`.
pub fn range(
    src_size: u64,
    src_off: u64,
    dst_off: u64,
    count: u64,
    same_file: bool,
    max: u64,
) -> Result<u64, NfsStat> {
    if src_off > src_size {
        return Err(NfsStat::INVAL);
    }
    let count = if count == 0 {
        src_size - src_off
    } else {
        count
    };
    match src_off.checked_add(count) {
        Some(end) if end <= src_size => {}
        _ => return Err(NfsStat::INVAL),
    }
    let count = count.min(max);
    match dst_off.checked_add(count) {
        Some(end) if end <= store::MAX_FILE_SIZE => {}
        _ => return Err(NfsStat::FBIG),
    }
    if same_file && count > 0 && src_off < dst_off + count && dst_off < src_off + count {
        return Err(NfsStat::INVAL);
    }
    Ok(count)
}

/// DELAY while any client holds a layout of the destination (recalled here, once), or one
/// that could not be fenced held one (its blocks are kept, its writes may still land).
fn break_layouts(srv: &Env, dst: Fh) -> Result<(), NfsStat> {
    if srv.pnfs.layouts.kept(dst.ino) {
        return Err(NfsStat::DELAY);
    }
    let holders = srv.pnfs.layouts.holders(dst.ino);
    if holders.is_empty() {
        return Ok(());
    }
    recall_file(&srv.pnfs, dst, &holders);
    Err(NfsStat::DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sync_range(size: u64, src: u64, dst: u64, count: u64, same: bool) -> Result<u64, NfsStat> {
        range(size, src, dst, count, same, MAX_SYNC_COPY)
    }

    #[test]
    fn ranges_of_rfc7862_15_2_3() {
        // count 0 = to the end of the source.
        assert_eq!(sync_range(100, 10, 0, 0, false), Ok(90));
        assert_eq!(sync_range(100, 100, 0, 0, false), Ok(0));
        assert_eq!(sync_range(100, 0, 0, 100, false), Ok(100));
        // Past the source's end.
        assert_eq!(sync_range(100, 101, 0, 0, false), Err(NfsStat::INVAL));
        assert_eq!(sync_range(100, 50, 0, 51, false), Err(NfsStat::INVAL));
        assert_eq!(sync_range(100, 1, 0, u64::MAX, false), Err(NfsStat::INVAL));
        // Destination past the largest file.
        assert_eq!(
            sync_range(100, 0, store::MAX_FILE_SIZE, 1, false),
            Err(NfsStat::FBIG)
        );
        // One file: overlap refused, disjoint fine.
        assert_eq!(sync_range(100, 0, 50, 60, true), Err(NfsStat::INVAL));
        assert_eq!(sync_range(100, 50, 0, 50, true), Ok(50));
        assert_eq!(sync_range(100, 0, 50, 50, true), Ok(50));
        // A long copy is short.
        assert_eq!(sync_range(1 << 40, 0, 0, 0, false), Ok(MAX_SYNC_COPY));
        let max = offload::MAX_ASYNC_COPY;
        assert_eq!(range(1 << 40, 0, 0, 0, false, max), Ok(max));
    }
}
