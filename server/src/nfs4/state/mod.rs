//! Client, session, open, lock and layout state (RFC 8881 §2.10, §8–9, §12): the slot tables
//! and reply cache, leases, the grace period. Knows nothing of XDR beyond the shared types.

use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::Ino;

/// The session and slot of a COMPOUND, as SEQUENCE found them.
#[derive(Debug, Clone)]
pub struct SessionSlotRef {
    pub sessionid: [u8; 16],
    pub clientid: u64,
    pub slot: u32,
    pub seqid: u32,
    /// Whether the client asked for the reply to be cached (`sa_cachethis`).
    pub cachethis: bool,
    /// Channel limits negotiated by CREATE_SESSION, enforced once by the dispatcher.
    pub max_ops: u32,
    pub max_request_size: u32,
    pub max_response_size: u32,
    pub max_response_size_cached: u32,
}

/// What an I/O stateid must permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoAccess {
    Read,
    Write,
}

/// All NFSv4 state of the server.
pub struct StateManager {
    _private: (),
}

impl StateManager {
    /// Reads the client records the store kept (for reclaim during grace) and starts the
    /// grace period if there were any.
    pub fn new(
        _opts: &crate::server::NfsOptions,
        _store: std::sync::Arc<crate::store::Store>,
    ) -> StateManager {
        todo!("state: new")
    }

    /// Called by the dispatcher when a COMPOUND that began with SEQUENCE is done: keeps the
    /// encoded reply in the slot's reply cache (RFC 8881 §2.10.6.1) and frees the slot.
    pub fn slot_done(&self, _slot: &SessionSlotRef, _reply: &[u8]) {
        todo!("state: slot_done")
    }

    /// Called about once a second by the server: expires leases (courtesy clients),
    /// ends the grace period, times out recalls.
    pub fn tick(&self) {
        todo!("state: tick")
    }

    /// RFC 8881 §8.2: check a stateid given to READ, WRITE or SETATTR(size) for `ino`.
    /// Special stateids (anonymous, bypass, current) are resolved by the caller first.
    pub fn check_io(
        &self,
        _clientid: Option<u64>,
        _stateid: &Stateid,
        _ino: Ino,
        _access: IoAccess,
    ) -> Result<(), NfsStat> {
        todo!("state: check_io")
    }

    /// In the grace period after a restart (RFC 8881 §8.4.2): non-reclaim OPENs and LOCKs,
    /// and REMOVE/RENAME/SETATTR(size) that could conflict, answer NFS4ERR_GRACE.
    pub fn in_grace(&self) -> bool {
        todo!("state: in_grace")
    }
}
