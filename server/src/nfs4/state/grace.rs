//! The grace period after a restart (RFC 8881 §8.4.2–8.4.3), RECLAIM_COMPLETE (§18.51),
//! and the lease clock (§8.3): expired clients become courtesy clients, which are purged
//! after COURTESY_SECONDS or as soon as they are in someone's way.

use std::collections::HashSet;

use super::{Inner, COURTESY_SECONDS};
use crate::nfs4::status::NfsStat;

/// The grace period after a restart: the owners that held state before it may reclaim.
pub struct Grace {
    pub until: u64,
    pub previous: HashSet<Vec<u8>>,
    /// Previous owners that said RECLAIM_COMPLETE (when all have, grace ends early).
    pub completed: HashSet<Vec<u8>>,
    pub ended: bool,
}

impl Grace {
    pub fn start(previous: HashSet<Vec<u8>>, now: u64, seconds: u32) -> Grace {
        let ended = previous.is_empty();
        Grace {
            until: now + seconds as u64,
            previous,
            completed: HashSet::new(),
            ended,
        }
    }

    pub fn active(&self, now: u64) -> bool {
        !self.ended && now < self.until && self.completed.len() < self.previous.len()
    }
}

impl Inner {
    /// RFC 8881 §18.51.3: a second global RECLAIM_COMPLETE is COMPLETE_ALREADY.
    pub fn reclaim_complete(
        &mut self,
        clientid: u64,
        one_fs: bool,
        _now: u64,
    ) -> Result<(), NfsStat> {
        let c = self
            .clients
            .get_mut(&clientid)
            .ok_or(NfsStat::STALE_CLIENTID)?;
        if one_fs {
            // Per-file-system completion: we export one file system, and the global
            // RECLAIM_COMPLETE is what ends the client's grace.
            return Ok(());
        }
        if c.reclaim_complete {
            return Err(NfsStat::COMPLETE_ALREADY);
        }
        c.reclaim_complete = true;
        let owner = c.owner.clone();
        if self.grace.previous.contains(&owner) && !self.grace.ended {
            self.grace.completed.insert(owner.clone());
            // Reclaimed: its record stays valid for the next restart.
            self.pending.push((owner, Some(b"v1".to_vec())));
        }
        Ok(())
    }

    /// RFC 8881 §8.4.2 / §18.16.3 / §18.10.4: who may reclaim and who must wait for grace.
    /// `open`: an OPEN, which must also wait for the client's own RECLAIM_COMPLETE
    /// (§18.51.3; knfsd does the same, pynfs RECC3).
    pub fn check_reclaim(
        &self,
        clientid: u64,
        reclaim: bool,
        open: bool,
        now: u64,
    ) -> Result<(), NfsStat> {
        let c = self.client(clientid)?;
        let grace = self.grace.active(now);
        if reclaim {
            if !grace || c.reclaim_complete {
                return Err(NfsStat::NO_GRACE);
            }
            if !self.grace.previous.contains(&c.owner) {
                return Err(NfsStat::RECLAIM_BAD);
            }
            Ok(())
        } else if grace || (open && !c.reclaim_complete) {
            Err(NfsStat::GRACE)
        } else {
            Ok(())
        }
    }

    /// Leases (RFC 8881 §8.3): an expired client becomes a courtesy client; courtesy and
    /// unconfirmed clients are purged later; the grace period ends.
    pub fn tick(&mut self, now: u64) {
        let lease = self.cfg.lease_seconds as u64;
        let mut purge = Vec::new();
        for c in self.clients.values_mut() {
            let idle = now.saturating_sub(c.last_renew);
            if !c.confirmed {
                if idle > lease {
                    purge.push(c.id);
                }
            } else if idle > lease + COURTESY_SECONDS {
                purge.push(c.id);
            } else if idle > lease {
                c.courtesy = true;
            }
        }
        for id in purge {
            self.expire_client(id);
        }
        if !self.grace.ended && !self.grace.active(now) {
            self.grace.ended = true;
            // Owners that did not come back during grace can no longer reclaim.
            let gone: Vec<Vec<u8>> = self
                .grace
                .previous
                .iter()
                .filter(|o| match self.owners.get(*o) {
                    Some(r) => r.confirmed.is_none(),
                    None => true,
                })
                .cloned()
                .collect();
            for o in gone {
                self.pending.push((o, None));
            }
        }
    }
}
