//! LOCK (RFC 8881 §18.10): byte-range locks through a new lock-owner (with its open
//! stateid) or an existing one (its lock stateid). Conflicts answer DENIED with the holder.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::{clientid, decode_owner};
use crate::nfs4::helpers::fh::{cur_attr, require_regular, NotRegular};
use crate::nfs4::helpers::stateid::resolve_stateid;
use crate::nfs4::state::{range_of, Denied, LockError, LockReq, Locker};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// `nfs_lock_type4`: READ_LT 1, WRITE_LT 2, READW_LT 3, WRITEW_LT 4 → is it a write lock.
/// We never block, so the W forms are the same as the others (the client polls).
pub fn lock_is_write(locktype: u32) -> Result<bool, NfsStat> {
    match locktype {
        1 | 3 => Ok(false),
        2 | 4 => Ok(true),
        _ => Err(NfsStat::INVAL),
    }
}

/// `LOCK4denied`, shared with LOCKT.
pub fn encode_denied(d: &Denied, w: &mut XdrWriter) {
    w.u64(d.offset);
    w.u64(d.length);
    w.u32(if d.write { 2 } else { 1 });
    w.u64(d.clientid);
    w.opaque(&d.owner);
}

/// A lock error as a status, writing the DENIED body when there is one.
pub fn lock_error(e: LockError, w: &mut XdrWriter) -> NfsStat {
    match e {
        LockError::Status(s) => s,
        LockError::Denied(d) => {
            encode_denied(&d, w);
            NfsStat::DENIED
        }
    }
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let locktype = r.u32()?;
    let reclaim = r.bool()?;
    let offset = r.u64()?;
    let length = r.u64()?;
    let new_owner = r.bool()?;
    let (sid, owner) = if new_owner {
        let _open_seqid = r.u32()?;
        let open: Stateid = r.read()?;
        let _lock_seqid = r.u32()?;
        let (_clientid, owner) = decode_owner(r)?;
        (open, Some(owner))
    } else {
        let lock: Stateid = r.read()?;
        let _lock_seqid = r.u32()?;
        (lock, None)
    };
    let write = lock_is_write(locktype)?;
    let (start, end) = range_of(offset, length)?;
    let cid = clientid(ctx)?;
    let ino = require_regular(&cur_attr(ctx)?, NotRegular::LOCK)?;
    let sid = resolve_stateid(ctx, sid)?;
    let locker = match &owner {
        Some(owner) => Locker::New { open: sid, owner },
        None => Locker::Existing { lock: sid },
    };
    let req = LockReq {
        clientid: cid,
        ino,
        write,
        reclaim,
        start,
        end,
        locker,
    };
    match ctx.srv.state.lock_range(&req) {
        Ok(new) => {
            ctx.current_stateid = Some(new);
            new.encode(w);
            Ok(())
        }
        Err(e) => Err(lock_error(e, w)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_types() {
        assert_eq!(lock_is_write(1), Ok(false));
        assert_eq!(lock_is_write(4), Ok(true));
        assert_eq!(lock_is_write(0), Err(NfsStat::INVAL));
        assert_eq!(lock_is_write(5), Err(NfsStat::INVAL));
    }

    #[test]
    fn denied_body() {
        let mut w = XdrWriter::new();
        let s = lock_error(
            LockError::Denied(Denied {
                offset: 1,
                length: u64::MAX,
                write: true,
                clientid: 9,
                owner: b"ab".to_vec(),
            }),
            &mut w,
        );
        assert_eq!(s, NfsStat::DENIED);
        assert_eq!(w.len(), 8 + 8 + 4 + 8 + 8);
        let mut r = XdrReader::new(&w.buf);
        assert_eq!(r.u64().unwrap(), 1);
        assert_eq!(r.u64().unwrap(), u64::MAX);
        assert_eq!(r.u32().unwrap(), 2);
        let mut w = XdrWriter::new();
        assert_eq!(
            lock_error(LockError::Status(NfsStat::GRACE), &mut w),
            NfsStat::GRACE
        );
        assert!(w.is_empty());
    }
}
