//! Opens with share reservations (RFC 8881 §9.7, §18.16), byte-range locks (§9, §18.10–12),
//! layout stateids (§12.5.2), and the stateid checks every operation shares (§8.2).

use super::client::Client;
use super::lock::{self, LockRange};
use super::stateid::{check_seqid, is_special, make_other, next_seqid, parse_other};
use super::{Inner, IoAccess};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::Ino;

/// OPEN4_SHARE_ACCESS_* / OPEN4_SHARE_DENY_* bits (READ 1, WRITE 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareAccess {
    pub access: u32,
    pub deny: u32,
}

impl ShareAccess {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const BOTH: u32 = 3;

    /// RFC 8881 §18.16.3: access must be READ, WRITE or BOTH; deny NONE..BOTH.
    pub fn new(access: u32, deny: u32) -> Result<ShareAccess, NfsStat> {
        if access == 0 || access > 3 || deny > 3 {
            return Err(NfsStat::INVAL);
        }
        Ok(ShareAccess { access, deny })
    }

    fn conflicts(&self, other: &ShareAccess) -> bool {
        self.access & other.deny != 0 || self.deny & other.access != 0
    }
}

pub struct OpenState {
    pub owner: Vec<u8>,
    pub share: ShareAccess,
    /// Access and deny values ever granted (bit n = value n), for OPEN_DOWNGRADE's check
    /// that it goes back to a mode the owner actually opened with (RFC 8881 §18.18.3).
    pub access_seen: u8,
    pub deny_seen: u8,
    /// Lock stateids opened through this open.
    pub locks: Vec<u64>,
}

pub struct LockState {
    pub owner: Vec<u8>,
    pub open: u64,
}

pub enum StateKind {
    Open(OpenState),
    Lock(LockState),
    Layout,
    Deleg(crate::nfs4::delegs::book::DelegState),
}

pub struct State {
    pub client: u64,
    pub ino: Ino,
    pub seqid: u32,
    pub kind: StateKind,
    /// Taken away by the server: ADMIN_REVOKED (fenced layout) or EXPIRED (a courtesy
    /// client's state that was in someone's way). Detached from its file; kept so that the
    /// client learns why (TEST_STATEID, SEQUENCE flags) until it frees it.
    pub revoked: Option<NfsStat>,
}

#[derive(Default)]
pub struct FileState {
    pub opens: Vec<u64>,
    pub locks: Vec<LockRange>,
    pub layouts: Vec<u64>,
    pub delegs: Vec<u64>,
}

pub struct OpenReq<'a> {
    pub clientid: u64,
    pub owner: &'a [u8],
    pub ino: Ino,
    pub share: ShareAccess,
}

impl Inner {
    pub(crate) fn stateid_of(&self, id: u64) -> Stateid {
        let seqid = self.states.get(&id).map_or(0, |s| s.seqid);
        Stateid {
            seqid,
            other: make_other(self.epoch, id),
        }
    }

    pub(crate) fn new_state(&mut self, client: u64, ino: Ino, kind: StateKind) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        if let StateKind::Deleg(d) = &kind {
            // Counted before the state exists: the count is never below what is held.
            self.delegs.held_in(d.write);
        }
        let f = self.files.entry(ino).or_default();
        match &kind {
            StateKind::Open(_) => f.opens.push(id),
            StateKind::Layout => f.layouts.push(id),
            StateKind::Deleg(_) => f.delegs.push(id),
            StateKind::Lock(_) => {}
        }
        self.states.insert(
            id,
            State {
                client,
                ino,
                seqid: 1,
                kind,
                revoked: None,
            },
        );
        if let Some(c) = self.clients.get_mut(&client) {
            c.states.insert(id);
        }
        id
    }

    pub(crate) fn bump(&mut self, id: u64) -> Stateid {
        if let Some(s) = self.states.get_mut(&id) {
            s.seqid = next_seqid(s.seqid);
        }
        self.stateid_of(id)
    }

    /// Finds the state a client names: BAD_STATEID for special, unknown or another client's
    /// stateids, STALE_STATEID for an earlier boot's, OLD_STATEID / BAD_STATEID by seqid.
    pub(crate) fn find(&self, clientid: u64, sid: &Stateid) -> Result<u64, NfsStat> {
        if is_special(sid) {
            return Err(NfsStat::BAD_STATEID);
        }
        let id = parse_other(self.epoch, &sid.other)?;
        let st = self.states.get(&id).ok_or(NfsStat::BAD_STATEID)?;
        if st.client != clientid {
            return Err(NfsStat::BAD_STATEID);
        }
        if let Some(why) = st.revoked {
            return Err(why);
        }
        check_seqid(sid.seqid, st.seqid)?;
        Ok(id)
    }

    /// Removes a state and what hangs off it (an open's lock states, a lock state's ranges).
    pub(crate) fn drop_state(&mut self, id: u64) {
        let Some(st) = self.states.remove(&id) else {
            return;
        };
        if let (StateKind::Deleg(d), None) = (&st.kind, st.revoked) {
            // A revoked one was counted out when it was revoked.
            self.delegs.held_out(d.write);
        }
        if let Some(c) = self.clients.get_mut(&st.client) {
            c.states.remove(&id);
            c.revoked.remove(&id);
        }
        if let Some(f) = self.files.get_mut(&st.ino) {
            f.opens.retain(|x| *x != id);
            f.layouts.retain(|x| *x != id);
            f.delegs.retain(|x| *x != id);
            f.locks.retain(|r| r.owner != id);
        }
        match st.kind {
            StateKind::Open(o) => {
                for l in o.locks {
                    self.drop_state(l);
                }
            }
            StateKind::Lock(l) => {
                if let Some(StateKind::Open(o)) = self.states.get_mut(&l.open).map(|s| &mut s.kind)
                {
                    o.locks.retain(|x| *x != id);
                }
            }
            StateKind::Layout | StateKind::Deleg(_) => {}
        }
        if self.files.get(&st.ino).is_some_and(|f| {
            f.opens.is_empty() && f.locks.is_empty() && f.layouts.is_empty() && f.delegs.is_empty()
        }) {
            self.files.remove(&st.ino);
        }
    }

    /// Takes a state away (and the lock states under an open): it no longer reserves
    /// anything on its file, but stays until the client frees it.
    pub(crate) fn revoke_id(&mut self, id: u64, why: NfsStat) {
        let Some(st) = self.states.get_mut(&id) else {
            return;
        };
        if st.revoked.is_some() {
            return;
        }
        st.revoked = Some(why);
        if let StateKind::Deleg(d) = &st.kind {
            self.delegs.held_out(d.write);
        }
        let (client, ino) = (st.client, st.ino);
        let children = match &st.kind {
            StateKind::Open(o) => o.locks.clone(),
            StateKind::Layout if why == NfsStat::EXPIRED => {
                self.dropped_layouts.push((client, ino));
                Vec::new()
            }
            _ => Vec::new(),
        };
        if let Some(f) = self.files.get_mut(&ino) {
            f.opens.retain(|x| *x != id);
            f.layouts.retain(|x| *x != id);
            f.delegs.retain(|x| *x != id);
            f.locks.retain(|r| r.owner != id);
        }
        if let Some(c) = self.clients.get_mut(&client) {
            c.revoked.insert(id);
        }
        for l in children {
            self.revoke_id(l, why);
        }
    }

    /// A courtesy client is in someone's way (RFC 8881 §8.3, courteous server): all its
    /// state is revoked as EXPIRED; the client keeps its sessions and is told by SEQUENCE.
    pub(crate) fn expire_state(&mut self, client: u64) {
        self.log_client_end(
            client,
            super::client::ClientEnd::Evicted("courtesy client in another's way: state revoked"),
        );
        let ids: Vec<u64> = self
            .clients
            .get(&client)
            .map(|c| c.states.iter().copied().collect())
            .unwrap_or_default();
        for id in ids {
            self.revoke_id(id, NfsStat::EXPIRED);
        }
    }

    pub(crate) fn is_courtesy(&self, client: u64) -> bool {
        self.clients
            .get(&client)
            .is_some_and(|c: &Client| c.courtesy)
    }

    /// RFC 8881 §8.2, §9.1.2: the stateid of a READ/WRITE/SETATTR must name an open (or a
    /// lock or layout state under one) of this client for this file, with the access asked.
    pub fn check_io(
        &self,
        clientid: Option<u64>,
        sid: &Stateid,
        ino: Ino,
        access: IoAccess,
    ) -> Result<(), NfsStat> {
        if *sid == Stateid::ANONYMOUS || *sid == Stateid::BYPASS {
            // Without an open: only the deny reservations of others can refuse (§9.1.2).
            let bypass = *sid == Stateid::BYPASS && access == IoAccess::Read;
            let want = match access {
                IoAccess::Read => ShareAccess::READ,
                IoAccess::Write => ShareAccess::WRITE,
            };
            let denied = self.files.get(&ino).is_some_and(|f| {
                f.opens
                    .iter()
                    .any(|o| match self.states.get(o).map(|s| &s.kind) {
                        Some(StateKind::Open(o)) => o.share.deny & want != 0,
                        _ => false,
                    })
            });
            return if denied && !bypass {
                Err(NfsStat::LOCKED)
            } else {
                Ok(())
            };
        }
        let client = match clientid {
            Some(c) => c,
            None => return Err(NfsStat::BAD_STATEID),
        };
        let id = self.find(client, sid)?;
        let st = self.states.get(&id).ok_or(NfsStat::BAD_STATEID)?;
        if st.ino != ino {
            return Err(NfsStat::BAD_STATEID);
        }
        let open_id = match &st.kind {
            StateKind::Open(_) => id,
            StateKind::Lock(l) => l.open,
            // A layout stateid grants no I/O through the server.
            StateKind::Layout => return Err(NfsStat::BAD_STATEID),
            // A delegation stateid stands for the opens it covers (RFC 8881 §10.2).
            StateKind::Deleg(d) => {
                return match access {
                    IoAccess::Write if !d.write => Err(NfsStat::OPENMODE),
                    _ => Ok(()),
                }
            }
        };
        let Some(StateKind::Open(o)) = self.states.get(&open_id).map(|s| &s.kind) else {
            return Err(NfsStat::BAD_STATEID);
        };
        // Reads are allowed through a write-only open (RFC 8881 §9.1.2 leaves it to the
        // server; clients read around partial-page writes).
        match access {
            IoAccess::Write if o.share.access & ShareAccess::WRITE == 0 => Err(NfsStat::OPENMODE),
            _ => Ok(()),
        }
    }

    /// OPEN (RFC 8881 §18.16.3): a new open state for the owner and file, or an upgrade of
    /// the owner's one, unless another owner's share reservation conflicts.
    pub fn open(&mut self, req: &OpenReq<'_>, _now: u64) -> Result<Stateid, NfsStat> {
        self.client(req.clientid)?;
        self.record_state_taken(req.clientid);
        loop {
            let conflict = self.files.get(&req.ino).and_then(|f| {
                f.opens.iter().find_map(|id| {
                    let st = self.states.get(id)?;
                    let StateKind::Open(o) = &st.kind else {
                        return None;
                    };
                    let same = st.client == req.clientid && o.owner == req.owner;
                    (!same && o.share.conflicts(&req.share)).then_some(st.client)
                })
            });
            match conflict {
                // A courtesy client loses its state when it is in the way (RFC 8881 §8.3).
                Some(c) if self.is_courtesy(c) => self.expire_state(c),
                Some(_) => return Err(NfsStat::SHARE_DENIED),
                None => break,
            }
        }
        let existing = self.files.get(&req.ino).and_then(|f| {
            f.opens.iter().copied().find(|id| {
                self.states.get(id).is_some_and(|st| {
                    st.client == req.clientid
                        && matches!(&st.kind, StateKind::Open(o) if o.owner == req.owner)
                })
            })
        });
        if let Some(id) = existing {
            if let Some(StateKind::Open(o)) = self.states.get_mut(&id).map(|s| &mut s.kind) {
                o.share.access |= req.share.access;
                o.share.deny |= req.share.deny;
                o.access_seen |= 1 << o.share.access;
                o.deny_seen |= 1 << o.share.deny;
            }
            return Ok(self.bump(id));
        }
        let id = self.new_state(
            req.clientid,
            req.ino,
            StateKind::Open(OpenState {
                owner: req.owner.to_vec(),
                share: req.share,
                access_seen: 1 << req.share.access,
                deny_seen: 1 << req.share.deny,
                locks: Vec::new(),
            }),
        );
        Ok(self.stateid_of(id))
    }

    /// The first OPEN of a client rewrites its record to say it holds state, so that the
    /// grace period after a restart waits for it (grace.rs); one record write per client.
    fn record_state_taken(&mut self, clientid: u64) {
        if let Some(c) = self.clients.get_mut(&clientid) {
            if !c.state_recorded {
                c.state_recorded = true;
                let rec = super::grace::RECORD_HELD_STATE.to_vec();
                self.pending.push((c.owner.clone(), Some(rec)));
            }
        }
    }

    pub(super) fn open_of(&self, clientid: u64, sid: &Stateid, ino: Ino) -> Result<u64, NfsStat> {
        let id = self.find(clientid, sid)?;
        match self.states.get(&id) {
            Some(st) if st.ino != ino => Err(NfsStat::BAD_STATEID),
            Some(State {
                kind: StateKind::Open(_),
                ..
            }) => Ok(id),
            _ => Err(NfsStat::BAD_STATEID),
        }
    }

    /// OPEN_DOWNGRADE (RFC 8881 §18.18.3): only to a subset the owner opened with.
    pub fn open_downgrade(
        &mut self,
        clientid: u64,
        sid: &Stateid,
        ino: Ino,
        share: ShareAccess,
    ) -> Result<Stateid, NfsStat> {
        let id = self.open_of(clientid, sid, ino)?;
        if let Some(StateKind::Open(o)) = self.states.get_mut(&id).map(|s| &mut s.kind) {
            let subset = share.access & !o.share.access == 0 && share.deny & !o.share.deny == 0;
            let seen =
                o.access_seen & (1 << share.access) != 0 && o.deny_seen & (1 << share.deny) != 0;
            if !subset || !seen {
                return Err(NfsStat::INVAL);
            }
            o.share = share;
            // Forget the modes that are no longer a subset of what the open now has.
            for v in 0..4u32 {
                if v & !share.access != 0 {
                    o.access_seen &= !(1u8 << v);
                }
                if v & !share.deny != 0 {
                    o.deny_seen &= !(1u8 << v);
                }
            }
        }
        Ok(self.bump(id))
    }

    /// CLOSE (RFC 8881 §18.2.3): refused while the open's lock-owners hold locks.
    pub fn close(&mut self, clientid: u64, sid: &Stateid, ino: Ino) -> Result<bool, NfsStat> {
        let id = self.open_of(clientid, sid, ino)?;
        if let Some(StateKind::Open(o)) = self.states.get(&id).map(|s| &s.kind) {
            let ranges = self
                .files
                .get(&ino)
                .map(|f| f.locks.as_slice())
                .unwrap_or(&[]);
            if o.locks.iter().any(|l| lock::holds_any(ranges, *l)) {
                return Err(NfsStat::LOCKS_HELD);
            }
        }
        self.drop_state(id);
        Ok(self.files.get(&ino).is_none_or(|f| f.opens.is_empty()))
    }

    /// TEST_STATEID (RFC 8881 §18.48.3): the status each stateid would get.
    pub fn test_stateid(&self, clientid: u64, sid: &Stateid) -> NfsStat {
        match self.find(clientid, sid) {
            Ok(_) => NfsStat::OK,
            Err(e) => e,
        }
    }

    /// FREE_STATEID (RFC 8881 §18.38.3): only a stateid that no longer holds anything.
    pub fn free_stateid(&mut self, clientid: u64, sid: &Stateid) -> Result<(), NfsStat> {
        if is_special(sid) {
            return Err(NfsStat::BAD_STATEID);
        }
        let id = parse_other(self.epoch, &sid.other)?;
        let st = self.states.get(&id).ok_or(NfsStat::BAD_STATEID)?;
        if st.client != clientid {
            return Err(NfsStat::BAD_STATEID);
        }
        if st.revoked.is_none() {
            match &st.kind {
                StateKind::Open(_) | StateKind::Layout | StateKind::Deleg(_) => {
                    return Err(NfsStat::LOCKS_HELD)
                }
                StateKind::Lock(_) => {
                    let held = self
                        .files
                        .get(&st.ino)
                        .is_some_and(|f| lock::holds_any(&f.locks, id));
                    if held {
                        return Err(NfsStat::LOCKS_HELD);
                    }
                }
            }
        }
        self.drop_state(id);
        Ok(())
    }
}
