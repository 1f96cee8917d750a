//! SEQUENCE (RFC 8881 §18.46): finds the session and slot, renews the lease, and either lets
//! the COMPOUND run or answers a retry from the slot's reply cache (`ctx.cached_reply`).

use std::hash::{Hash, Hasher};

use crate::nfs4::ctx::Ctx;
use crate::nfs4::state::{SequenceOutcome, SequenceReq};
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

/// How much of a long request the hash covers at each end (see `request_hash`).
const HASH_EDGE: usize = 4096;

/// A hash of the request from SEQUENCE's arguments to the end of the COMPOUND: a retry
/// must be the same request (false retries are SEQ_FALSE_RETRY, §2.10.6.1.3.1; detecting
/// them is a MAY). A long request (a WRITE of up to 1 MiB) is hashed by its length and its
/// first and last 4 KiB, which hold every operation header and the ends of the data:
/// hashing the whole megabyte would cost about a millisecond per WRITE.
/// `DefaultHasher::new()` uses fixed keys: the same bytes hash the same within a process.
pub fn request_hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if bytes.len() <= 2 * HASH_EDGE {
        bytes.hash(&mut h);
    } else {
        bytes.len().hash(&mut h);
        bytes[..HASH_EDGE].hash(&mut h);
        bytes[bytes.len() - HASH_EDGE..].hash(&mut h);
    }
    h.finish()
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let hash = request_hash(r.rest());
    let sessionid: [u8; 16] = r.array()?;
    let sequenceid = r.u32()?;
    let slot = r.u32()?;
    let highest_slot = r.u32()?;
    let cachethis = r.bool()?;
    let out = ctx.srv.state.sequence(&SequenceReq {
        sessionid,
        sequenceid,
        slot,
        highest_slot,
        cachethis,
        hash,
        solo: ctx.op_count == 1,
        conn: ctx.conn.id,
    })?;
    match out {
        SequenceOutcome::Replay(bytes) => {
            ctx.cached_reply = Some(bytes);
            Ok(())
        }
        SequenceOutcome::New {
            slot: s,
            highest_slot,
            target_highest_slot,
            status_flags,
        } => {
            w.opaque_fixed(&s.sessionid);
            w.u32(s.seqid);
            w.u32(s.slot);
            w.u32(highest_slot);
            w.u32(target_highest_slot);
            w.u32(status_flags);
            ctx.session = Some(s);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tells_requests_apart() {
        assert_eq!(request_hash(b"abc"), request_hash(b"abc"));
        assert_ne!(request_hash(b"abc"), request_hash(b"abd"));
        // Long requests: a different header, tail or length is seen.
        let long = vec![7u8; 1 << 20];
        let mut head = long.clone();
        head[10] = 8;
        let mut tail = long.clone();
        tail[(1 << 20) - 1] = 8;
        let h = request_hash(&long);
        assert_eq!(h, request_hash(&long.clone()));
        assert_ne!(h, request_hash(&head));
        assert_ne!(h, request_hash(&tail));
        assert_ne!(h, request_hash(&long[1..]));
    }
}
