//! Arguments of OPEN and LOCK (RFC 8881 §18.16, §18.10): create modes, claims, share bits,
//! lockers. Re-exported by `ops`.

use pnfsd::nfs4::types::Stateid;
use pnfsd::xdr::XdrWriter;

use crate::attrs::SetAttrs;

/// `createhow4` of OPEN4_CREATE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow {
    Unchecked(SetAttrs),
    Guarded(SetAttrs),
    Exclusive41 { verf: [u8; 8], attrs: SetAttrs },
}

/// `open_claim4` (the two claims the tests use, plus CLAIM_PREVIOUS for reclaim).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenClaim {
    Null(Vec<u8>),
    Fh,
    Previous(u32),
}

/// OPEN4_SHARE_ACCESS_* / DENY_* (RFC 8881 §18.16.3).
pub mod share {
    pub const ACCESS_READ: u32 = 1;
    pub const ACCESS_WRITE: u32 = 2;
    pub const ACCESS_BOTH: u32 = 3;
    pub const WANT_NO_DELEG: u32 = 0x0400;
    pub const DENY_NONE: u32 = 0;
}

/// `OPEN4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenArgs {
    pub seqid: u32,
    pub share_access: u32,
    pub share_deny: u32,
    pub clientid: u64,
    pub owner: Vec<u8>,
    /// `None`: OPEN4_NOCREATE.
    pub create: Option<CreateHow>,
    pub claim: OpenClaim,
}

/// `locker4` of LOCK: a new lock owner (from an open) or an existing lock stateid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locker {
    New {
        open_seqid: u32,
        open_stateid: Stateid,
        lock_seqid: u32,
        clientid: u64,
        owner: Vec<u8>,
    },
    Existing {
        lock_stateid: Stateid,
        lock_seqid: u32,
    },
}

/// `nfs_lock_type4`.
pub mod lock_type {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const READW: u32 = 3;
    pub const WRITEW: u32 = 4;
}

/// Encodes `OPEN4args`.
pub fn encode_open(o: &OpenArgs, w: &mut XdrWriter) {
    w.u32(o.seqid);
    w.u32(o.share_access);
    w.u32(o.share_deny);
    w.u64(o.clientid);
    w.opaque(&o.owner);
    match &o.create {
        None => w.u32(0), // OPEN4_NOCREATE
        Some(how) => {
            w.u32(1); // OPEN4_CREATE
            match how {
                CreateHow::Unchecked(a) => {
                    w.u32(0);
                    a.encode(w);
                }
                CreateHow::Guarded(a) => {
                    w.u32(1);
                    a.encode(w);
                }
                CreateHow::Exclusive41 { verf, attrs } => {
                    w.u32(3);
                    w.opaque_fixed(verf);
                    attrs.encode(w);
                }
            }
        }
    }
    match &o.claim {
        OpenClaim::Null(name) => {
            w.u32(0);
            w.string(name);
        }
        OpenClaim::Previous(deleg) => {
            w.u32(1);
            w.u32(*deleg);
        }
        OpenClaim::Fh => w.u32(4),
    }
}
