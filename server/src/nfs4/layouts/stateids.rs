//! Layout stateids (RFC 8881 §12.5.2–12.5.3): one per client and file, hanging off both
//! like opens and locks, so lease expiry and recalls find them from either side. They are
//! entries of the state's one stateid table (`impl` blocks on `nfs4::state::Inner`, under
//! its lock); the rest of this service keeps the grants and extents, this keeps who holds
//! what.

use crate::nfs4::state::files::StateKind;
use crate::nfs4::state::stateid::parse_other;
use crate::nfs4::state::{Inner, StateManager};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::Ino;

impl Inner {
    fn layout_of(&self, clientid: u64, ino: Ino) -> Option<u64> {
        self.files
            .get(&ino)?
            .layouts
            .iter()
            .copied()
            .find(|id| self.states.get(id).is_some_and(|s| s.client == clientid))
    }

    /// Like `find`, but a layout stateid older than the server's is still its layout (knfsd
    /// and RFC 8881 §12.5.3: only a seqid newer than the server's is BAD_STATEID; LAYOUTGETs
    /// in flight make a client's LAYOUTCOMMIT/RETURN lag behind).
    fn find_layout(&self, clientid: u64, given: &Stateid) -> Result<u64, NfsStat> {
        match self.find(clientid, given) {
            Err(NfsStat::OLD_STATEID) => {
                let id = parse_other(self.epoch, &given.other)?;
                match self.states.get(&id) {
                    Some(st) if matches!(st.kind, StateKind::Layout) => Ok(id),
                    _ => Err(NfsStat::OLD_STATEID),
                }
            }
            r => r,
        }
    }

    pub fn layout_stateid(
        &mut self,
        clientid: u64,
        ino: Ino,
        given: &Stateid,
    ) -> Result<Stateid, NfsStat> {
        let id = self.find_layout(clientid, given)?;
        let st = self.states.get(&id).ok_or(NfsStat::BAD_STATEID)?;
        if st.ino != ino {
            return Err(NfsStat::BAD_STATEID);
        }
        match st.kind {
            StateKind::Layout => Ok(self.bump(id)),
            _ => match self.layout_of(clientid, ino) {
                // An open stateid while a layout stateid exists: continue the layout one.
                Some(l) => Ok(self.bump(l)),
                None => {
                    let l = self.new_state(clientid, ino, StateKind::Layout);
                    Ok(self.stateid_of(l))
                }
            },
        }
    }

    pub fn layout_return(
        &mut self,
        clientid: u64,
        ino: Ino,
        given: &Stateid,
        all_returned: bool,
    ) -> Result<Stateid, NfsStat> {
        self.check_layout(clientid, ino, given)?;
        let id = parse_other(self.epoch, &given.other)?;
        let sid = self.bump(id);
        if all_returned {
            self.drop_state(id);
        }
        Ok(sid)
    }

    pub fn check_layout(&self, clientid: u64, ino: Ino, given: &Stateid) -> Result<(), NfsStat> {
        let id = self.find_layout(clientid, given)?;
        match self.states.get(&id) {
            Some(st) if st.ino == ino && matches!(st.kind, StateKind::Layout) => Ok(()),
            _ => Err(NfsStat::BAD_STATEID),
        }
    }

    pub fn layout_return_all(&mut self, clientid: u64) -> Vec<Ino> {
        let ids: Vec<(u64, Ino)> = self
            .states
            .iter()
            .filter(|(_, s)| s.client == clientid && matches!(s.kind, StateKind::Layout))
            .map(|(id, s)| (*id, s.ino))
            .collect();
        for (id, _) in &ids {
            self.drop_state(*id);
        }
        ids.into_iter().map(|(_, ino)| ino).collect()
    }

    /// Whether the client still has the file open (return-on-close waits for its last CLOSE).
    pub fn client_has_open(&self, clientid: u64, ino: Ino) -> bool {
        self.files.get(&ino).is_some_and(|f| {
            f.opens
                .iter()
                .any(|id| self.states.get(id).is_some_and(|s| s.client == clientid))
        })
    }

    pub fn layouts_of_file(&self, ino: Ino) -> Vec<(u64, Stateid)> {
        self.files.get(&ino).map_or_else(Vec::new, |f| {
            f.layouts
                .iter()
                .filter_map(|id| Some((self.states.get(id)?.client, self.stateid_of(*id))))
                .collect()
        })
    }

    pub fn revoke(&mut self, sid: &Stateid) {
        if let Ok(id) = parse_other(self.epoch, &sid.other) {
            self.revoke_id(id, NfsStat::ADMIN_REVOKED);
        }
    }
}

/// The layout-stateid calls of the state manager, for the layout operations and the
/// layouts service.
impl StateManager {
    /// LAYOUTGET's stateid rules (RFC 8881 §12.5.2–3): the first LAYOUTGET presents an open,
    /// lock or delegation stateid and gets a new layout stateid with seqid 1; later ones
    /// present the layout stateid. Every call bumps the seqid.
    pub fn layout_stateid(
        &self,
        clientid: u64,
        ino: Ino,
        given: &Stateid,
    ) -> Result<Stateid, NfsStat> {
        self.with(|i, _| i.layout_stateid(clientid, ino, given))
    }

    /// LAYOUTRETURN(FILE): bumps the layout stateid; `all_returned` drops it.
    pub fn layout_return(
        &self,
        clientid: u64,
        ino: Ino,
        given: &Stateid,
        all_returned: bool,
    ) -> Result<Stateid, NfsStat> {
        self.with(|i, _| i.layout_return(clientid, ino, given, all_returned))
    }

    /// Checks a layout stateid (LAYOUTCOMMIT answers BADLAYOUT for the error).
    pub fn check_layout(&self, clientid: u64, ino: Ino, given: &Stateid) -> Result<(), NfsStat> {
        self.with(|i, _| i.check_layout(clientid, ino, given))
    }

    /// LAYOUTRETURN(FSID/ALL): drops every layout stateid of the client.
    pub fn layout_return_all(&self, clientid: u64) -> Vec<Ino> {
        self.with(|i, _| i.layout_return_all(clientid))
    }

    /// Whether the client still has an open of the file (return-on-close).
    pub fn client_has_open(&self, clientid: u64, ino: Ino) -> bool {
        self.with(|i, _| i.client_has_open(clientid, ino))
    }

    /// Clients holding layouts of a file (for CB_LAYOUTRECALL), with their layout stateids.
    pub fn layouts_of_file(&self, ino: Ino) -> Vec<(u64, Stateid)> {
        self.with(|i, _| i.layouts_of_file(ino))
    }

    /// Layouts whose client went away since the last call (lease expiry, a courtesy client
    /// in someone's way, a client replaced by its new incarnation): `(clientid, file)`.
    /// The layout engine drains this from its tick (layouts are freed at lease expiry).
    pub fn take_dropped_layouts(&self) -> Vec<(u64, Ino)> {
        std::mem::take(&mut self.lock().dropped_layouts)
    }

    /// Revokes a stateid (a fenced client's layout): reported by SEQUENCE status flags and
    /// TEST_STATEID until the client frees it.
    pub fn revoke(&self, stateid: &Stateid) {
        self.with(|i, _| i.revoke(stateid))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use crate::nfs4::state::tests::{env, mount};
    use crate::nfs4::state::tests_files::open;
    use crate::nfs4::state::COURTESY_SECONDS;
    use crate::nfs4::status::NfsStat;
    use crate::nfs4::types::Stateid;
    use crate::store::Ino;

    #[test]
    fn layout_stateids_start_at_one_and_follow_the_open() {
        let e = env();
        let (a, _) = mount(&e, b"a");
        let o = open(&e, a, b"o", 5, 3, 0).unwrap();
        let l1 = e.sm.layout_stateid(a, Ino(5), &o).unwrap();
        assert_eq!(l1.seqid, 1);
        assert_ne!(l1.other, o.other);
        let l2 = e.sm.layout_stateid(a, Ino(5), &l1).unwrap();
        assert_eq!(l2.seqid, 2);
        assert_eq!(e.sm.layouts_of_file(Ino(5)), vec![(a, l2)]);
        assert_eq!(
            e.sm.layout_stateid(a, Ino(5), &Stateid { seqid: 7, ..l2 }),
            Err(NfsStat::BAD_STATEID)
        );
        assert_eq!(e.sm.check_layout(a, Ino(5), &o), Err(NfsStat::BAD_STATEID));
        let l3 = e.sm.layout_return(a, Ino(5), &l2, true).unwrap();
        assert_eq!(l3.seqid, 3);
        assert!(e.sm.layouts_of_file(Ino(5)).is_empty());
        // Revoked state shows in SEQUENCE's flags until freed.
        let l = e.sm.layout_stateid(a, Ino(5), &o).unwrap();
        e.sm.revoke(&l);
        assert_eq!(e.sm.test_stateid(a, &l), NfsStat::ADMIN_REVOKED);
        e.sm.free_stateid(a, &l).unwrap();
        assert_eq!(e.sm.test_stateid(a, &l), NfsStat::BAD_STATEID);
        // A client that goes away leaves its layouts for the layout engine to free.
        let (b, _) = mount(&e, b"b");
        let ob = open(&e, b, b"o", 6, 3, 0).unwrap();
        e.sm.layout_stateid(b, Ino(6), &ob).unwrap();
        assert!(e.sm.take_dropped_layouts().is_empty());
        e.clock.0.store(100 + COURTESY_SECONDS, Ordering::SeqCst);
        e.sm.tick();
        assert_eq!(e.sm.take_dropped_layouts(), vec![(b, Ino(6))]);
        assert!(e.sm.take_dropped_layouts().is_empty());
    }
}
