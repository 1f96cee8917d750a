//! Byte-range locks on the state (RFC 8881 §9, §18.10–18.12): lock-owners get one lock
//! stateid per file, opened through an open stateid; the range arithmetic is in `lock.rs`.

use super::files::{LockState, ShareAccess, StateKind};
use super::lock::{self, LockRange};
use super::Inner;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::Ino;

/// `locker4`: a new lock-owner comes in through an open stateid, an existing one by its
/// lock stateid.
pub enum Locker<'a> {
    New { open: Stateid, owner: &'a [u8] },
    Existing { lock: Stateid },
}

pub struct LockReq<'a> {
    pub clientid: u64,
    pub ino: Ino,
    pub write: bool,
    pub reclaim: bool,
    pub start: u64,
    pub end: u64,
    pub locker: Locker<'a>,
}

/// `LOCK4denied`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub offset: u64,
    pub length: u64,
    pub write: bool,
    pub clientid: u64,
    pub owner: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockError {
    Status(NfsStat),
    Denied(Denied),
}

impl From<NfsStat> for LockError {
    fn from(s: NfsStat) -> LockError {
        LockError::Status(s)
    }
}

impl Inner {
    fn denied(&self, r: &LockRange) -> Denied {
        let (offset, length) = r.offset_length();
        let (clientid, owner) = match self.states.get(&r.owner) {
            Some(st) => match &st.kind {
                StateKind::Lock(l) => (st.client, l.owner.clone()),
                _ => (st.client, Vec::new()),
            },
            None => (0, Vec::new()),
        };
        Denied {
            offset,
            length,
            write: r.write,
            clientid,
            owner,
        }
    }

    /// The first conflicting lock, after dropping courtesy clients that are in the way.
    fn lock_conflict(
        &mut self,
        ino: Ino,
        me: Option<u64>,
        start: u64,
        end: u64,
        write: bool,
    ) -> Option<Denied> {
        loop {
            let ranges = self
                .files
                .get(&ino)
                .map(|f| f.locks.as_slice())
                .unwrap_or(&[]);
            let r = lock::conflict(ranges, me, start, end, write)?;
            let holder = self.states.get(&r.owner).map(|s| s.client);
            match holder {
                Some(c) if self.is_courtesy(c) => self.expire_state(c),
                _ => return Some(self.denied(&r)),
            }
        }
    }

    /// LOCK (RFC 8881 §18.10.3).
    pub fn lock(&mut self, req: &LockReq<'_>, now: u64) -> Result<Stateid, LockError> {
        self.check_reclaim(req.clientid, req.reclaim, false, now)?;
        if req.reclaim {
            self.grace.note_reclaim(now);
        }
        let lock_id = match &req.locker {
            Locker::Existing { lock } => {
                let id = self.find(req.clientid, lock)?;
                match self.states.get(&id) {
                    Some(st) if st.ino == req.ino && matches!(st.kind, StateKind::Lock(_)) => id,
                    _ => return Err(NfsStat::BAD_STATEID.into()),
                }
            }
            Locker::New { open, owner } => {
                let open_id = self.open_of(req.clientid, open, req.ino)?;
                let found = self.states.iter().find_map(|(id, st)| match &st.kind {
                    StateKind::Lock(l)
                        if st.client == req.clientid
                            && st.ino == req.ino
                            && l.owner == *owner
                            && st.revoked.is_none() =>
                    {
                        Some(*id)
                    }
                    _ => None,
                });
                match found {
                    Some(id) => id,
                    None => {
                        // The lock state exists only once the lock is granted (below).
                        if let Some(d) =
                            self.lock_conflict(req.ino, None, req.start, req.end, req.write)
                        {
                            return Err(LockError::Denied(d));
                        }
                        self.check_lock_mode(open_id, req.write)?;
                        let id = self.new_state(
                            req.clientid,
                            req.ino,
                            StateKind::Lock(LockState {
                                owner: owner.to_vec(),
                                open: open_id,
                            }),
                        );
                        if let Some(StateKind::Open(o)) =
                            self.states.get_mut(&open_id).map(|s| &mut s.kind)
                        {
                            o.locks.push(id);
                        }
                        self.set_range(req.ino, id, req.start, req.end, req.write);
                        return Ok(self.stateid_of(id));
                    }
                }
            }
        };
        let open_id = match self.states.get(&lock_id).map(|s| &s.kind) {
            Some(StateKind::Lock(l)) => l.open,
            _ => return Err(NfsStat::BAD_STATEID.into()),
        };
        self.check_lock_mode(open_id, req.write)?;
        if let Some(d) = self.lock_conflict(req.ino, Some(lock_id), req.start, req.end, req.write) {
            return Err(LockError::Denied(d));
        }
        self.set_range(req.ino, lock_id, req.start, req.end, req.write);
        Ok(self.bump(lock_id))
    }

    /// A write lock needs an open for writing (RFC 8881 §18.10.4: OPENMODE).
    fn check_lock_mode(&self, open_id: u64, write: bool) -> Result<(), NfsStat> {
        match self.states.get(&open_id).map(|s| &s.kind) {
            Some(StateKind::Open(o)) if write && o.share.access & ShareAccess::WRITE == 0 => {
                Err(NfsStat::OPENMODE)
            }
            Some(StateKind::Open(_)) => Ok(()),
            _ => Err(NfsStat::BAD_STATEID),
        }
    }

    fn set_range(&mut self, ino: Ino, owner: u64, start: u64, end: u64, write: bool) {
        let f = self.files.entry(ino).or_default();
        lock::set(&mut f.locks, owner, start, end, write);
    }

    /// LOCKT (RFC 8881 §18.11.3): a test that creates no state.
    pub fn lockt(
        &mut self,
        clientid: u64,
        owner: &[u8],
        ino: Ino,
        write: bool,
        start: u64,
        end: u64,
    ) -> Result<(), LockError> {
        self.client(clientid)?;
        let me = self.states.iter().find_map(|(id, st)| match &st.kind {
            StateKind::Lock(l)
                if st.client == clientid
                    && st.ino == ino
                    && l.owner == owner
                    && st.revoked.is_none() =>
            {
                Some(*id)
            }
            _ => None,
        });
        match self.lock_conflict(ino, me, start, end, write) {
            Some(d) => Err(LockError::Denied(d)),
            None => Ok(()),
        }
    }

    /// LOCKU (RFC 8881 §18.12.3): unlocking what is not locked is fine.
    pub fn locku(
        &mut self,
        clientid: u64,
        sid: &Stateid,
        ino: Ino,
        start: u64,
        end: u64,
    ) -> Result<Stateid, NfsStat> {
        let id = self.find(clientid, sid)?;
        match self.states.get(&id) {
            Some(st) if st.ino == ino && matches!(st.kind, StateKind::Lock(_)) => {}
            _ => return Err(NfsStat::BAD_STATEID),
        }
        if let Some(f) = self.files.get_mut(&ino) {
            lock::unset(&mut f.locks, id, start, end);
        }
        Ok(self.bump(id))
    }
}
