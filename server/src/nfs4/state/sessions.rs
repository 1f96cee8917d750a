//! The session operations on the state: SEQUENCE (RFC 8881 §18.46), DESTROY_SESSION
//! (§18.37), BIND_CONN_TO_SESSION (§18.34), BACKCHANNEL_CTL (§18.33), and connection loss.

use std::sync::Arc;

use super::client::{seq4, BindDir, SequenceOutcome, SequenceReq};
use super::session::SlotUse;
use super::session::{CbPath, Session};
use super::{Inner, SessionSlotRef};
use crate::nfs4::status::NfsStat;
use crate::rpc::Backchannel;

impl Inner {
    /// RFC 8881 §18.46.3: the slot rules (session.rs), lease renewal and status flags.
    pub fn sequence(&mut self, req: &SequenceReq, now: u64) -> Result<SequenceOutcome, NfsStat> {
        let s = self
            .sessions
            .get_mut(&req.sessionid)
            .ok_or(NfsStat::BADSESSION)?;
        if req.slot >= s.slots.len() {
            return Err(NfsStat::BADSLOT);
        }
        let cache = req.cachethis || req.solo;
        match s.slots.begin(req.slot, req.sequenceid, req.hash, cache)? {
            SlotUse::Replay(bytes) => return Ok(SequenceOutcome::Replay(bytes)),
            SlotUse::New => {}
        }
        // SP4_NONE: any connection a request arrives on is bound to the session (§2.10.3.1).
        s.conns.insert(req.conn);
        let nslots = s.slots.len();
        let slot = SessionSlotRef {
            sessionid: s.id,
            clientid: s.client,
            slot: req.slot,
            seqid: req.sequenceid,
            cachethis: req.cachethis,
            max_ops: s.fore.maxoperations,
            max_request_size: s.fore.maxrequestsize,
            max_response_size: s.fore.maxresponsesize,
            max_response_size_cached: s.fore.maxresponsesize_cached,
        };
        let mut flags = 0;
        if s.wants_back && !s.back_works() {
            flags |= seq4::CB_PATH_DOWN_SESSION;
        }
        let clientid = s.client;
        let sessions = self.clients.get(&clientid).map(|c| &c.sessions);
        let sessions = || {
            sessions
                .into_iter()
                .flatten()
                .filter_map(|id| self.sessions.get(id))
        };
        let has_back = sessions().any(Session::back_works);
        let probe_failed = sessions().any(|s| s.back_conn.is_some() && s.cb_path == CbPath::Down);
        let mut admin = false;
        let mut expired = false;
        let mut recallable = false;
        if let Some(c) = self.clients.get(&clientid) {
            for id in &c.revoked {
                match self.states.get(id).and_then(|s| s.revoked) {
                    Some(NfsStat::EXPIRED) => expired = true,
                    Some(NfsStat::DELEG_REVOKED) => recallable = true,
                    Some(_) => admin = true,
                    None => {}
                }
            }
            if admin {
                flags |= seq4::ADMIN_STATE_REVOKED;
            }
            if recallable {
                flags |= seq4::RECALLABLE_STATE_REVOKED;
            }
            if expired {
                flags |= if c.revoked.len() == c.states.len() {
                    seq4::EXPIRED_ALL_STATE_REVOKED
                } else {
                    seq4::EXPIRED_SOME_STATE_REVOKED
                };
            }
        }
        if let Some(c) = self.clients.get_mut(&clientid) {
            c.last_renew = now;
            c.courtesy = false;
            // §18.46.3: no session of the client has a backchannel the server can use, and
            // the client needs one (it holds state that callbacks recall) or its probe failed.
            if !has_back
                && (!c.states.is_empty() || probe_failed)
                && flags & seq4::CB_PATH_DOWN_SESSION != 0
            {
                flags |= seq4::CB_PATH_DOWN;
            }
        }
        Ok(SequenceOutcome::New {
            slot,
            highest_slot: nslots - 1,
            target_highest_slot: nslots - 1,
            status_flags: flags,
        })
    }

    /// `own` says the COMPOUND runs in this very session (one of its slots is ours).
    pub fn destroy_session(
        &mut self,
        sessionid: &[u8; 16],
        own: bool,
        conn: u64,
    ) -> Result<(), NfsStat> {
        let s = self.sessions.get(sessionid).ok_or(NfsStat::BADSESSION)?;
        // §18.37.3: from outside the session, only over a connection bound to it.
        if !own && !s.conns.contains(&conn) {
            return Err(NfsStat::CONN_NOT_BOUND_TO_SESSION);
        }
        let client = s.client;
        // Other requests still run on the session: let them finish first.
        if s.slots.busy_count() > usize::from(own) {
            return Err(NfsStat::DELAY);
        }
        self.sessions.remove(sessionid);
        if let Some(c) = self.clients.get_mut(&client) {
            c.sessions.remove(sessionid);
            let addr = c.addr.map_or_else(|| "-".to_string(), |a| a.to_string());
            tracing::info!(
                session = %super::client::hex16(sessionid),
                client = %format_args!("{client:016x}"),
                %addr,
                "session destroyed"
            );
        }
        Ok(())
    }

    pub fn bind_conn(
        &mut self,
        sessionid: &[u8; 16],
        dir: BindDir,
        conn: u64,
        backchannel: Option<Arc<dyn Backchannel>>,
    ) -> Result<BindDir, NfsStat> {
        let s = self
            .sessions
            .get_mut(sessionid)
            .ok_or(NfsStat::BADSESSION)?;
        let (fore, back) = match dir {
            BindDir::Fore => (true, false),
            BindDir::Back => (false, true),
            BindDir::ForeOrBoth | BindDir::BackOrBoth | BindDir::Both => (true, true),
        };
        // Without a sender for this connection it can carry no backchannel.
        let back = back && backchannel.is_some();
        if !fore && !back {
            return Err(NfsStat::INVAL);
        }
        s.conns.insert(conn);
        if let (true, Some(bc)) = (back, backchannel) {
            s.back_conn = Some((conn, bc));
            s.wants_back = true;
            // A new backchannel is probed afresh (`probe_start`, from the operation).
            s.cb_path = CbPath::Unknown;
        }
        Ok(match (fore, back) {
            (true, true) => BindDir::Both,
            (true, false) => BindDir::Fore,
            _ => BindDir::Back,
        })
    }

    /// The transport lost a connection: it no longer belongs to any session, and a session
    /// whose backchannel it carried reports CB_PATH_DOWN_SESSION until the client binds
    /// another (RFC 8881 §2.10.3.1, §18.46.3).
    pub fn conn_closed(&mut self, conn: u64) {
        for s in self.sessions.values_mut() {
            s.conns.remove(&conn);
            if s.back_conn.as_ref().is_some_and(|(c, _)| *c == conn) {
                s.back_conn = None;
            }
        }
    }

    pub fn set_cb_cred(&mut self, sessionid: &[u8; 16], cred: crate::rpc::CbCred, minor: u32) {
        if let Some(s) = self.sessions.get_mut(sessionid) {
            s.cb_cred = cred;
            s.cb_minor = minor;
        }
    }

    pub fn backchannel_ctl(
        &mut self,
        sessionid: &[u8; 16],
        cb_program: u32,
    ) -> Result<(), NfsStat> {
        let s = self
            .sessions
            .get_mut(sessionid)
            .ok_or(NfsStat::BADSESSION)?;
        s.cb_program = cb_program;
        Ok(())
    }

    /// Takes the callback slot of one of the client's sessions that has a backchannel, for
    /// a CB_COMPOUND that starts with CB_SEQUENCE (RFC 8881 §20.9). DELAY while another
    /// callback is outstanding there, CB_PATH_DOWN without any backchannel.
    pub fn cb_begin(&mut self, clientid: u64) -> Result<CbSlot, NfsStat> {
        let c = self.client(clientid)?;
        let mut busy = false;
        let mut pick: Option<[u8; 16]> = None;
        for sid in &c.sessions {
            if let Some(s) = self.sessions.get(sid) {
                if s.back_conn.is_some() {
                    if s.cb_busy {
                        busy = true;
                    } else {
                        pick = Some(*sid);
                        break;
                    }
                }
            }
        }
        let Some(sid) = pick else {
            return Err(if busy {
                NfsStat::DELAY
            } else {
                NfsStat::CB_PATH_DOWN
            });
        };
        let s: &mut Session = self.sessions.get_mut(&sid).ok_or(NfsStat::CB_PATH_DOWN)?;
        let (_, channel) = s.back_conn.clone().ok_or(NfsStat::CB_PATH_DOWN)?;
        s.cb_busy = true;
        Ok(CbSlot {
            clientid,
            sessionid: sid,
            program: s.cb_program,
            slot: 0,
            seqid: s.cb_seqid.wrapping_add(1),
            channel,
            cred: s.cb_cred.clone(),
            minor: s.cb_minor,
        })
    }

    /// The callback on `slot` got its reply (`answered`), or none: then the seqid is not
    /// used up and the next callback retries it.
    pub fn cb_done(&mut self, slot: &CbSlot, answered: bool) {
        if let Some(s) = self.sessions.get_mut(&slot.sessionid) {
            s.cb_busy = false;
            if answered {
                s.cb_seqid = slot.seqid;
                s.cb_path = CbPath::Up;
            } else {
                // No answer: the path is down until the client binds a connection again,
                // which is what CB_PATH_DOWN_SESSION asks it to do (§18.46.3).
                s.cb_path = CbPath::Down;
            }
        }
    }

    /// Starts a CB_NULL probe of the session's backchannel (after CREATE_SESSION,
    /// BACKCHANNEL_CTL and BIND_CONN_TO_SESSION, RFC 8881 §18.36.3, §18.33.3): the client and
    /// the probe's generation, or `None` without a backchannel to probe.
    pub fn probe_start(&mut self, sessionid: &[u8; 16]) -> Option<(u64, u64)> {
        let s = self.sessions.get_mut(sessionid)?;
        s.back_conn.as_ref()?;
        s.cb_probe_gen += 1;
        s.cb_path = CbPath::Unknown;
        Some((s.client, s.cb_probe_gen))
    }

    /// What probe `generation` calls: the backchannel, the callback program and the
    /// credential, while that probe is the session's latest and the backchannel is bound.
    pub fn probe_target(&self, sessionid: &[u8; 16], generation: u64) -> Option<ProbeTarget> {
        let s = self.sessions.get(sessionid)?;
        let (_, channel) = s.back_conn.as_ref()?;
        (s.cb_probe_gen == generation).then(|| ProbeTarget {
            channel: channel.clone(),
            program: s.cb_program,
            cred: s.cb_cred.clone(),
        })
    }

    /// The CB_NULL of probe `generation` was answered (`ok`) or not.
    pub fn probe_done(&mut self, sessionid: &[u8; 16], generation: u64, ok: bool) {
        if let Some(s) = self.sessions.get_mut(sessionid) {
            if s.cb_probe_gen == generation {
                s.cb_path = if ok { CbPath::Up } else { CbPath::Down };
            }
        }
    }

    /// Whether one of the client's sessions has a backchannel that is not known to fail:
    /// what a delegation needs (it must be recallable, RFC 8881 §10.4).
    pub fn backchannel_works(&self, clientid: u64) -> bool {
        self.clients.get(&clientid).is_some_and(|c| {
            c.sessions
                .iter()
                .any(|id| self.sessions.get(id).is_some_and(Session::back_works))
        })
    }
}

impl Session {
    /// A backchannel is bound and its last probe or callback did not fail.
    fn back_works(&self) -> bool {
        self.back_conn.is_some() && self.cb_path != CbPath::Down
    }
}

/// Where a CB_NULL probe goes (`Inner::probe_target`).
pub struct ProbeTarget {
    pub channel: Arc<dyn Backchannel>,
    pub program: u32,
    pub cred: crate::rpc::CbCred,
}

/// A callback slot taken by `cb_begin`: what CB_SEQUENCE carries and where to send it.
#[derive(Clone)]
pub struct CbSlot {
    pub clientid: u64,
    pub sessionid: [u8; 16],
    pub program: u32,
    pub slot: u32,
    pub seqid: u32,
    pub channel: Arc<dyn Backchannel>,
    /// The credential to call with (`Backchannel::call_as`).
    pub cred: crate::rpc::CbCred,
    /// CB_COMPOUND's minorversion.
    pub minor: u32,
}

impl std::fmt::Debug for CbSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CbSlot")
            .field("clientid", &self.clientid)
            .field("program", &self.program)
            .field("seqid", &self.seqid)
            .finish()
    }
}
