//! NVM I/O commands: Read, Write (FUA), Flush, Write Zeroes, Dataset Management, and the four
//! reservation commands. A plain Read or Write that passes every check without blocking
//! (`plain`, which includes the per-command `access` check) goes to the queue's io_uring
//! (`prepare_rw`, when the backend offers its file) or is served inline by `try_inline` (a
//! page-cache hit); everything else, and any of those that fails, goes through `handle`, which
//! blocks on the backend and reports the failing check or I/O error.

use super::{Cmd, Controller, Reply, MAX_TRANSFER};
use crate::namespace::{lock, Namespace};
use crate::pdu::IoOpc;
use crate::reservation::{Access, Requester};
use crate::status::{read_error, write_error, Status};
use bytes::Bytes;
use std::sync::Arc;

pub(crate) fn handle(c: &Arc<Controller>, cmd: Cmd) -> Reply {
    run(c, cmd).into()
}

/// A plain Read or Write that passed every check, for a path that does the transfer itself.
struct Plain {
    ns: Arc<Namespace>,
    write: bool,
    offset: u64,
    len: usize,
}

/// The checks of a Read or Write that can run without blocking (opcode, namespace, LBA range,
/// transfer length, data length, a write that needs no flush, and `access`); `None` sends the
/// command to `handle`, which makes the same checks and reports the failing one.
fn plain(c: &Controller, cmd: &Cmd) -> Option<Plain> {
    let s = &cmd.sqe;
    let opc = IoOpc(s.opcode());
    if opc != IoOpc::READ && opc != IoOpc::WRITE {
        return None;
    }
    let ns = c.subsys.namespaces.get(&s.nsid())?;
    let bs = ns.backend.block_size() as u64;
    let slba = s.cdw(10) as u64 | (s.cdw(11) as u64) << 32;
    let nlb = (s.cdw(12) & 0xFFFF) as u64 + 1;
    let fua = s.cdw(12) & (1 << 30) != 0;
    let len = nlb * bs;
    let in_range = slba
        .checked_add(nlb)
        .is_some_and(|end| end <= ns.backend.num_blocks());
    if !in_range || len > MAX_TRANSFER as u64 {
        return None;
    }
    let write = opc == IoOpc::WRITE;
    if write {
        // A write-through write (FUA, or WCE off) needs fdatasync: blocking path.
        if (cmd.data.len() as u64) < len || fua || !lock(&c.state).wce {
            return None;
        }
        checked(c, ns, Access::Write, slba, nlb, false).ok()?;
    } else {
        if (cmd.xfer_len as u64) < len {
            return None;
        }
        checked(c, ns, Access::Read, slba, nlb, false).ok()?;
    }
    Some(Plain {
        ns: ns.clone(),
        write,
        offset: slba * bs,
        len: len as usize,
    })
}

/// Runs a Read or Write here, on the connection task, if the backend can do it without
/// blocking (`Backend::try_read_at`/`try_write_at`: a page-cache hit); otherwise, or for any
/// other command or any check that fails, gives the command back for `handle` on a thread
/// that may block (which then also reports the errors: one path for them).
pub(crate) fn try_inline(c: &Arc<Controller>, cmd: Cmd) -> Result<Reply, Cmd> {
    let Some(p) = plain(c, &cmd) else {
        return Err(cmd);
    };
    if p.write {
        match p.ns.backend.try_write_at(&cmd.data[..p.len], p.offset) {
            Some(Ok(())) => Ok(Reply::ok()),
            _ => Err(cmd),
        }
    } else {
        let mut v = vec![0u8; p.len];
        match p.ns.backend.try_read_at(&mut v, p.offset) {
            Some(Ok(())) => Ok(Reply::data(v)),
            _ => Err(cmd),
        }
    }
}

/// A checked Read or Write for the io_uring engine (`tgt/ring/`): the file, the byte
/// range and, for a write, the data. Holds the namespace, so the descriptor stays open.
pub(crate) struct Rw {
    pub cmd: Cmd,
    _ns: Arc<Namespace>,
    pub fd: std::os::fd::RawFd,
    pub direct: bool,
    pub offset: u64,
    pub len: usize,
    pub write: Option<Bytes>,
}

/// The command as an `Rw` if its backend offers its file (`Backend::io_file`) and it passes
/// every check (`plain`); else it goes back to the other paths.
pub(crate) fn prepare_rw(c: &Controller, cmd: Cmd) -> Result<Rw, Cmd> {
    let Some(p) = plain(c, &cmd) else {
        return Err(cmd);
    };
    let Some(f) = p.ns.backend.io_file() else {
        return Err(cmd);
    };
    // Page-cache writes stay on the batch path (`batchable`): ext4 refuses non-blocking
    // buffered writes, so io_uring would punt each one to a kernel worker thread, which
    // measured 1.5x the CPU per write of one blocking thread running the batch in a row.
    if p.write && !f.direct {
        return Err(cmd);
    }
    let write = p.write.then(|| cmd.data.slice(..p.len));
    Ok(Rw {
        cmd,
        _ns: p.ns,
        fd: f.fd,
        direct: f.direct,
        offset: p.offset,
        len: p.len,
        write,
    })
}

/// A Write to a backend whose writes do not wait for a device (`Backend::fast_writes`): the
/// connection may run several such commands in a row on one blocking thread.
pub(crate) fn batchable(c: &Controller, cmd: &Cmd) -> bool {
    IoOpc(cmd.sqe.opcode()) == IoOpc::WRITE
        && c.subsys
            .namespaces
            .get(&cmd.sqe.nsid())
            .is_some_and(|ns| ns.backend.fast_writes())
}

/// Marks the blocking backend call of each arm (the caller already runs us where blocking is
/// allowed).
fn blocking<T>(f: impl FnOnce() -> T) -> Result<T, Status> {
    Ok(f())
}

fn run(c: &Arc<Controller>, cmd: Cmd) -> Result<Reply, Status> {
    let s = cmd.sqe;
    let opc = IoOpc(s.opcode());
    let nsid = s.nsid();
    if opc == IoOpc::FLUSH && nsid == 0xFFFF_FFFF {
        // Broadcast flush (VWC bits 2:1 = 11b): every namespace's cache.
        for ns in c.subsys.namespaces.values() {
            check(c, ns, Access::Write)?;
        }
        let all: Vec<_> = c.subsys.namespaces.values().cloned().collect();
        return blocking(move || all.iter().try_for_each(|ns| ns.backend.flush()))?
            .map(|_| Reply::ok())
            .map_err(|e| write_error(&e));
    }
    let ns = c
        .subsys
        .namespaces
        .get(&nsid)
        .cloned()
        .ok_or(Status::INVALID_NS)?;
    let bs = ns.backend.block_size() as u64;
    match opc {
        IoOpc::READ | IoOpc::WRITE | IoOpc::WRITE_ZEROES => {
            let slba = s.cdw(10) as u64 | (s.cdw(11) as u64) << 32;
            let nlb = (s.cdw(12) & 0xFFFF) as u64 + 1;
            let fua = s.cdw(12) & (1 << 30) != 0;
            match slba.checked_add(nlb) {
                Some(end) if end <= ns.backend.num_blocks() => {}
                _ => return Err(Status::LBA_OUT_OF_RANGE),
            }
            let off = slba * bs;
            let len = nlb * bs;
            if opc == IoOpc::WRITE_ZEROES {
                access(c, &ns, Access::Write, slba, nlb)?;
                let wt = fua || !lock(&c.state).wce;
                let b = ns.backend.clone();
                return blocking(move || {
                    b.write_zeroes(off, len)?;
                    if wt {
                        b.flush()?;
                    }
                    Ok::<_, std::io::Error>(())
                })?
                .map(|_| Reply::ok())
                .map_err(|e| write_error(&e));
            }
            if len > MAX_TRANSFER as u64 {
                return Err(Status::INVALID_FIELD);
            }
            if opc == IoOpc::READ {
                if (cmd.xfer_len as u64) < len {
                    return Err(Status::SGL_DATA_LEN_INVALID);
                }
                access(c, &ns, Access::Read, slba, nlb)?;
                let b = ns.backend.clone();
                let data = blocking(move || {
                    let mut v = vec![0u8; len as usize];
                    b.read_at(&mut v, off).map(|_| v)
                })?
                .map_err(|e| read_error(&e))?;
                Ok(Reply::data(data))
            } else {
                if (cmd.data.len() as u64) < len {
                    return Err(Status::SGL_DATA_LEN_INVALID);
                }
                access(c, &ns, Access::Write, slba, nlb)?;
                // FUA, or a host that turned the write cache off: durable before completion.
                let wt = fua || !lock(&c.state).wce;
                let b = ns.backend.clone();
                let data = cmd.data.slice(..len as usize);
                blocking(move || {
                    b.write_at(&data, off)?;
                    if wt {
                        b.flush()?;
                    }
                    Ok::<_, std::io::Error>(())
                })?
                .map_err(|e| write_error(&e))?;
                Ok(Reply::ok())
            }
        }
        IoOpc::FLUSH => {
            check(c, &ns, Access::Write)?;
            let b = ns.backend.clone();
            blocking(move || b.flush())?.map_err(|e| write_error(&e))?;
            Ok(Reply::ok())
        }
        IoOpc::DSM => {
            let nr = (s.cdw(10) & 0xFF) as usize + 1;
            let deallocate = s.cdw(11) & (1 << 2) != 0;
            if cmd.data.len() < nr * 16 {
                return Err(Status::SGL_DATA_LEN_INVALID);
            }
            let mut ranges = Vec::with_capacity(nr);
            for i in 0..nr {
                // A DSM range (NVMe Base 2.0 §5.27.1.5): attributes 4 bytes, NLB 4, SLBA 8;
                // the length check above covers all `nr` of them.
                let at = i * 16;
                let field =
                    |r: Result<u64, bytecodec::Error>| r.map_err(|_| Status::SGL_DATA_LEN_INVALID);
                let nlb = field(bytecodec::get_u32_le(&cmd.data, at + 4).map(u64::from))?;
                let slba = field(bytecodec::get_u64_le(&cmd.data, at + 8))?;
                match slba.checked_add(nlb) {
                    Some(end) if end <= ns.backend.num_blocks() => {
                        if deallocate {
                            access(c, &ns, Access::Write, slba, nlb)?;
                        }
                        ranges.push((slba * bs, nlb * bs))
                    }
                    _ => return Err(Status::LBA_OUT_OF_RANGE),
                }
            }
            check(c, &ns, Access::Write)?;
            if deallocate {
                let b = ns.backend.clone();
                blocking(move || ranges.iter().try_for_each(|&(o, l)| b.deallocate(o, l)))?
                    .map_err(|e| write_error(&e))?;
            }
            Ok(Reply::ok())
        }
        IoOpc::RESV_REGISTER | IoOpc::RESV_ACQUIRE | IoOpc::RESV_RELEASE | IoOpc::RESV_REPORT => {
            if let Some(p) = &c.subsys.policy {
                if !p.reservations(&c.host(), ns.nsid) {
                    return Err(Status::ACCESS_DENIED);
                }
            }
            let cdws = (s.cdw(10), s.cdw(11));
            let (who, max) = (requester(c), MAX_TRANSFER as u64);
            // Preempt and Abort completes once the preempted hosts' I/O is off the media.
            let aborted = |gone: &[[u8; 16]]| c.subsys.drain_hosts_io(gone);
            let r = crate::reservation::command::execute(
                &ns, &who, opc, cdws, &cmd.data, max, &aborted,
            );
            conflicted(c, &ns, r).map(|d| d.map_or_else(Reply::ok, Reply::data))
        }
        _ => Err(Status::INVALID_OPCODE),
    }
}

fn requester(c: &Controller) -> Requester {
    Requester {
        hostid: c.hostid,
        cntlid: c.cntlid,
    }
}

/// The per-command access check: every Read- or Write-class command passes here before
/// its first byte moves, on every path (inline, io_uring, blocking), with the LBA range it
/// touches (`slba`, `nlb`; each range for DSM): the reservation state, the MDS's own blocks,
/// then the embedder's `HostPolicy::access` (pnfsd: the host's writes inside its layouts),
/// which must stay cheap: it runs once per I/O.
fn access(c: &Controller, ns: &Namespace, a: Access, slba: u64, nlb: u64) -> Result<(), Status> {
    checked(c, ns, a, slba, nlb, true)
}

/// `access`; `report`: a refusal is final and the policy is told (`HostPolicy::refused`,
/// its counter), which the fast paths' pre-check (`plain`) does not do, since a refused
/// command goes on to `handle`, which checks it again.
fn checked(
    c: &Controller,
    ns: &Namespace,
    a: Access,
    slba: u64,
    nlb: u64,
    report: bool,
) -> Result<(), Status> {
    let r = lock(&ns.resv).check(&c.hostid, a);
    if report {
        conflicted(c, ns, r)?;
    } else {
        r?;
    }
    if a == Access::Write {
        mds_blocks_untouched(ns, slba, nlb)?;
    }
    if let Some(p) = &c.subsys.policy {
        let h = c.host();
        if !p.access(&h, ns.nsid, a, slba, nlb) {
            if report {
                p.refused(&h, ns.nsid, a, slba, nlb);
            }
            return Err(Status::ACCESS_DENIED);
        }
    }
    Ok(())
}

/// The reservation check for a command that names no blocks (Flush) or checks its ranges
/// itself (DSM).
fn check(c: &Controller, ns: &Namespace, a: Access) -> Result<(), Status> {
    let r = lock(&ns.resv).check(&c.hostid, a);
    conflicted(c, ns, r)
}

/// `r`, after counting it (and logging its host, `stats::Conflicts`) if it is a
/// Reservation Conflict: the one place every refused I/O and reservation command passes.
fn conflicted<T>(c: &Controller, ns: &Namespace, r: Result<T, Status>) -> Result<T, Status> {
    if r.as_ref()
        .is_err_and(|s| s.same_code(Status::RESERVATION_CONFLICT))
    {
        ns.conflicts.note(ns.nsid, &c.host());
    }
    r
}

/// No host writes (or deallocates) the MDS's own blocks: the superblock, the log and the
/// checkpoints (`TargetConfig::mds_blocks`). Reads stay allowed: the block layout client reads
/// the signature there (RFC 5663 §2.2.1).
fn mds_blocks_untouched(ns: &Namespace, slba: u64, nlb: u64) -> Result<(), Status> {
    if nlb > 0 && slba < ns.mds_blocks {
        tracing::debug!(
            slba,
            nlb,
            mds_blocks = ns.mds_blocks,
            "write to the MDS's blocks refused"
        );
        return Err(Status::ACCESS_DENIED);
    }
    Ok(())
}
