//! Layout stateids (RFC 8881 §12.5.2–12.5.3): one per client and file, hanging off both
//! like opens and locks, so lease expiry and recalls find them from either side. The
//! layout engine (`nfs4::layouts`) keeps the extents; this keeps who holds what.

use super::files::StateKind;
use super::stateid::parse_other;
use super::Inner;
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
