//! The delegation part of OPEN (RFC 8881 §10.4, §18.16.3): recalling the delegations of
//! other clients an open conflicts with, and the `open_delegation4` of the reply.
//!
//! A read-only OPEN gets a read delegation unless something is in its way (`offer`); the
//! WANT_* flags of §18.16.3 ask for more, or for none.
//!
//! `cb_getattr`: the CB_GETATTR a GETATTR of another client sends a write delegation's holder
//! (RFC 8881 §10.4.3). `state`: the delegation stateids, their grant, recall, return and
//! revocation, as `impl` blocks on the state's one stateid table (`nfs4::state::Inner`, one
//! stateid space under the state lock); `book`: the bookkeeping the table holds for them.
//!
//! The functions take an [`Env`]: the state and the callback queue, all a recall needs
//! (server.rs builds it, `Server::delegs_env`; the layouts and copy services build theirs
//! from their own handles).

pub(crate) mod book;
pub mod cb_getattr;
mod state;

use std::time::{Duration, Instant};

use crate::nfs4::callback::{Callback, CbKind, CbQueue};
use crate::nfs4::state::{NoDeleg, Recall, ShareAccess, StateManager};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{fh_of, Fh, Stateid};
use crate::store::{Attr, FileType};
use crate::xdr::{Xdr, XdrWriter};

/// OPEN4_SHARE_ACCESS_WANT_* (RFC 8881 §18.16.1).
pub const WANT_MASK: u32 = 0xff00;
pub const WANT_NO_PREFERENCE: u32 = 0;
pub const WANT_READ_DELEG: u32 = 0x100;
pub const WANT_WRITE_DELEG: u32 = 0x200;
pub const WANT_ANY_DELEG: u32 = 0x300;
pub const WANT_NO_DELEG: u32 = 0x400;
pub const WANT_CANCEL: u32 = 0x500;
/// `open_delegation_type4` (NONE is also what a CLAIM_PREVIOUS of no delegation names).
pub const OPEN_DELEGATE_NONE: u32 = 0;
pub const OPEN_DELEGATE_READ: u32 = 1;
pub const OPEN_DELEGATE_WRITE: u32 = 2;
const OPEN_DELEGATE_NONE_EXT: u32 = 3;
/// `why_no_delegation4`.
const WND4_NOT_WANTED: u32 = 0;
const WND4_CONTENTION: u32 = 1;
const WND4_RESOURCE: u32 = 2;
const WND4_CANCELLED: u32 = 7;
/// `limit_by4`: a write delegation's space limit given as a file size.
const NFS_LIMIT_SIZE: u32 = 1;
/// A write delegation's `space_limit` (RFC 8881 §10.4.1): 0, as knfsd gives. pnfsd reserves no
/// space for a client's cached writes, so it promises none, and the client flushes and
/// LAYOUTCOMMITs at CLOSE. With no limit the Linux client (6.12) left that LAYOUTCOMMIT to sync
/// and umount, and umount can drop it (docs/delegations.md "Space limit").
const WRITE_DELEG_SPACE_LIMIT: u64 = 0;

/// What recalling delegations uses: the delegation stateids and the queue the CB_RECALLs go
/// out through.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    pub state: &'a StateManager,
    pub callbacks: &'a CbQueue,
}

/// What asks for the delegations of other clients to be recalled. It decides what
/// conflicts and what the asker answers while a recall is under way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breaker {
    /// An access with this share access: an OPEN, a COPY's source or destination, a change
    /// of the file (`break_for_change`), a CB_GETATTR the holder failed. Answers DELAY
    /// (§10.4.1).
    Access(u32),
    /// A LAYOUTGET (`rw`: iomode RW). A read delegation is in the way of RW, and a write
    /// delegation of READ too (the holder may have data the layout's blocks do not show
    /// yet). Answers LAYOUTTRYLATER (RFC 8881 §18.43.3: the layout is unavailable for now,
    /// not for good; RECALLCONFLICT is for a recall of the caller's own layouts,
    /// §12.5.5.2, and the caller holds nothing being recalled). The Linux client retries
    /// LAYOUTGET a while and meanwhile does its I/O through the MDS.
    Layout { rw: bool },
}

/// Before an access to `fh` by `clientid`: the delegations of other clients it conflicts
/// with (a write access conflicts with any, any access with a write delegation) are
/// recalled, and the asker answers `by`'s status while one is in the way (recalled now or
/// before). The first time, the CB_RECALL is queued, never sent from here: the asker's
/// COMPOUND must not wait on another client's backchannel (§10.4.1).
pub fn break_conflicts(srv: &Env, clientid: u64, fh: Fh, by: Breaker) -> Result<(), NfsStat> {
    let (write, busy) = match by {
        Breaker::Access(access) => (access & ShareAccess::WRITE != 0, NfsStat::DELAY),
        Breaker::Layout { rw } => (rw, NfsStat::LAYOUTTRYLATER),
    };
    let recalls = srv.state.deleg_conflicts(clientid, fh.ino, write);
    if recalls.is_empty() {
        return Ok(());
    }
    queue_recalls(srv, fh, &recalls);
    Err(busy)
}

/// Queues a CB_RECALL for each recall just decided. The queue gives up after a lease: by
/// then the state tick revokes the delegation (delegs/state.rs).
pub fn queue_recalls(srv: &Env, fh: Fh, recalls: &[Recall]) {
    let lease = Duration::from_secs(u64::from(srv.state.lease_seconds()));
    let deadline = Instant::now() + lease;
    for r in recalls.iter().filter(|r| r.send) {
        srv.callbacks.push(Callback {
            client: r.client,
            kind: CbKind::Recall {
                fh,
                stateid: r.stateid,
            },
            deadline,
        });
    }
}

/// A CB_RECALL goes (again) only while the delegation is held and still recalled.
pub fn recall_wanted(srv: &Env, cb: &Callback) -> bool {
    match &cb.kind {
        CbKind::Recall { stateid, .. } => srv.state.deleg_recall_pending(cb.client, stateid),
        _ => false,
    }
}

/// The holder answered its CB_RECALL; the delegation stays until it DELEGRETURNs or the
/// lease runs out (an error answer changes nothing: §10.2.1 still gives it the lease).
pub fn recall_answered(_srv: &Env, cb: &Callback, st: NfsStat, _reply: &[u8]) {
    tracing::debug!(client = cb.client, status = st.name(), "CB_RECALL answered");
}

/// Before REMOVE or SETATTR changes a regular file: DELAY while a delegation of another
/// client is being recalled (RFC 8881 §10.4.4: namespace and attribute changes conflict with
/// delegations like a write open does).
pub fn break_for_change(srv: &Env, caller: Option<u64>, a: &Attr) -> Result<(), NfsStat> {
    if a.ftype != FileType::Regular {
        return Ok(());
    }
    // No session (not possible past SEQUENCE): no client of ours is excluded.
    let cid = caller.unwrap_or(u64::MAX);
    break_conflicts(srv, cid, fh_of(a), Breaker::Access(ShareAccess::WRITE))
}

/// What the reply offers: a delegation if asked for and possible. The flag of `Read` and
/// `Write` is `recall` (§18.16.3): set only on a reclaimed delegation the server wants back.
pub enum Offer {
    None,
    NoneExt(u32),
    Read(Stateid, bool),
    Write(Stateid, bool),
}

/// The delegation an OPEN gets (RFC 8881 §10.4, §18.16.3). Without a WANT_* flag
/// (`WANT_NO_PREFERENCE`, what the Linux client sends) the server chooses, for an open by
/// name or filehandle (`default_ok`: CLAIM_NULL, CLAIM_FH): a read delegation for a
/// read-only open, a write delegation for an open for write by a client alone on the file
/// (other clients' GETATTRs of size and change then go to it with CB_GETATTR, §10.4.3:
/// nfs4/delegs/cb_getattr.rs), as knfsd gives. A WANT_* that is not granted says why
/// (OPEN_DELEGATE_NONE_EXT); a server choice that is not granted is plain OPEN_DELEGATE_NONE. No
/// delegation without a backchannel that works (the probe, `StateManager::backchannel_works`): it
/// could not be recalled.
pub fn offer(
    state: &StateManager,
    clientid: u64,
    fh: Fh,
    share_access: u32,
    default_ok: bool,
) -> Offer {
    let access = share_access & 0xff;
    let writes = access & ShareAccess::WRITE != 0;
    let want = share_access & WANT_MASK;
    let by_default = default_ok
        && if writes {
            state.write_delegations_by_default()
        } else {
            state.read_delegations_by_default()
        };
    let want_write = match want {
        WANT_NO_PREFERENCE if !by_default => return Offer::None,
        WANT_NO_PREFERENCE => writes,
        WANT_NO_DELEG => return Offer::NoneExt(WND4_NOT_WANTED),
        WANT_CANCEL => return Offer::NoneExt(WND4_CANCELLED),
        WANT_READ_DELEG if writes => return Offer::NoneExt(WND4_CONTENTION),
        WANT_READ_DELEG => false,
        WANT_WRITE_DELEG => true,
        WANT_ANY_DELEG => writes,
        _ => return Offer::NoneExt(WND4_RESOURCE),
    };
    let declined = |why: u32| {
        if want == WANT_NO_PREFERENCE {
            Offer::None
        } else {
            Offer::NoneExt(why)
        }
    };
    if !state.delegations_enabled() || !state.backchannel_works(clientid) {
        return declined(WND4_RESOURCE);
    }
    match state.grant_deleg(clientid, fh.ino, want_write) {
        Ok(sid) if want_write => Offer::Write(sid, false),
        Ok(sid) => Offer::Read(sid, false),
        Err(NoDeleg::Contention) => declined(WND4_CONTENTION),
        Err(NoDeleg::Resource) => declined(WND4_RESOURCE),
    }
}

/// The delegation an OPEN CLAIM_PREVIOUS reclaims after a restart (RFC 8881 §10.2.1, §9.11):
/// the one the client held, of the type it names, given back (`Inner::reclaim_deleg`). One
/// that cannot stay — a conflicting reclaim, the cap, delegations off, a backchannel that
/// does not work (it could not be recalled later) — comes with `recall` set.
pub fn reclaim(state: &StateManager, clientid: u64, fh: Fh, write: bool) -> Offer {
    let give_back = !state.delegations_enabled() || !state.backchannel_works(clientid);
    let (sid, recall) = state.reclaim_deleg(clientid, fh.ino, write, give_back);
    if write {
        Offer::Write(sid, recall)
    } else {
        Offer::Read(sid, recall)
    }
}

/// `open_delegation4`.
pub fn encode(w: &mut XdrWriter, o: &Offer) {
    match o {
        Offer::None => w.u32(OPEN_DELEGATE_NONE),
        Offer::NoneExt(why) => {
            w.u32(OPEN_DELEGATE_NONE_EXT);
            w.u32(*why);
            // `ond_server_will_push_deleg` / `_signal_deleg_avail` follow only for
            // WND4_CONTENTION and WND4_RESOURCE.
            if *why == WND4_CONTENTION || *why == WND4_RESOURCE {
                w.bool(false);
            }
        }
        Offer::Read(sid, recall) | Offer::Write(sid, recall) => {
            let write = matches!(o, Offer::Write(..));
            w.u32(if write {
                OPEN_DELEGATE_WRITE
            } else {
                OPEN_DELEGATE_READ
            });
            sid.encode(w);
            w.bool(*recall);
            if write {
                w.u32(NFS_LIMIT_SIZE);
                w.u64(WRITE_DELEG_SPACE_LIMIT);
            }
            // `permissions` nfsace4: an empty ACCESS_ALLOWED ace; the client asks ACCESS.
            w.u32(0);
            w.u32(0);
            w.u32(0);
            w.opaque(b"");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdr::XdrReader;

    #[test]
    fn encodings() {
        let sid = Stateid {
            seqid: 1,
            other: [4; 12],
        };
        let mut w = XdrWriter::new();
        encode(&mut w, &Offer::Write(sid, false));
        let mut r = XdrReader::new(&w.buf);
        assert_eq!(r.u32().unwrap(), OPEN_DELEGATE_WRITE);
        assert_eq!(Stateid::decode(&mut r).unwrap(), sid);
        assert!(!r.bool().unwrap());
        // space_limit: NFS_LIMIT_SIZE 0, so the client flushes at CLOSE
        assert_eq!((r.u32().unwrap(), r.u64().unwrap()), (1, 0));
        assert_eq!(
            (r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()),
            (0, 0, 0)
        );
        assert_eq!(r.opaque(8).unwrap(), b"");
        assert!(r.finish().is_ok());
        let mut w = XdrWriter::new();
        encode(&mut w, &Offer::NoneExt(WND4_CONTENTION));
        assert_eq!(w.buf.len(), 12);
        let mut w = XdrWriter::new();
        encode(&mut w, &Offer::NoneExt(WND4_NOT_WANTED));
        assert_eq!(w.buf.len(), 8);
    }
}
