//! The gate's answers to the embedded target (`nvme_tcp::HostPolicy`): the per-command
//! check of Read- and Write-class commands against the host's clients' layouts, the
//! admission of connects while fences are in force, and the host NQNs seen per address.

use std::sync::atomic::Ordering;

use nvme_tcp::policy::Access;
use nvme_tcp::{HostPolicy, HostRef};

use super::super::enforce::{BlockSets, Want};
use super::{HostGate, HostOwner, PROBE_LBAS};

/// What the per-command check decided, and why (the refusal's log line says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allow,
    /// Allowed outside the host's layouts only by the probe window.
    Probe,
    /// Refused: the host's clients' layouts do not cover the blocks.
    NotInLayouts,
    /// Refused: a host of no NFS client, not in `nvme_admin_hosts`, writes.
    Unattached,
}

impl HostGate {
    /// The clients the host belongs to (the module comment's rule), as the sets know them.
    fn clients_of<'a>(&self, sets: &'a BlockSets, h: &HostRef<'_>) -> &'a [u64] {
        if !self.any_override.load(Ordering::Relaxed) {
            return sets.by_ip.get(&h.ip).map_or(&[][..], Vec::as_slice);
        }
        let o = self.overrides.read().unwrap_or_else(|e| e.into_inner());
        let c = match o.get(h.nqn) {
            Some(HostOwner::Owner(x)) => sets.by_owner.get(x.as_slice()),
            Some(HostOwner::Addr(ip)) => sets.by_ip.get(ip),
            None => sets.by_ip.get(&h.ip),
        };
        c.map_or(&[][..], Vec::as_slice)
    }

    fn verdict(&self, h: &HostRef<'_>, a: Access, slba: u64, nlb: u64) -> Verdict {
        let r = &self.rules;
        if !r.on.load(Ordering::Relaxed) {
            return Verdict::Allow;
        }
        let want = match a {
            Access::Read => Want::Read,
            Access::Write => Want::Write,
        };
        // Admin hosts read all and write outside the MDS blocks (the target's guard).
        if r.any_admin.load(Ordering::Relaxed)
            && r.admins
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .contains(h.nqn)
        {
            return Verdict::Allow;
        }
        let sets = self.blocks.read().unwrap_or_else(|e| e.into_inner());
        let clients = self.clients_of(&sets, h);
        if sets.covers(clients, want, slba, nlb) {
            return Verdict::Allow;
        }
        // Restart: the previous instance's layouts (docs/pnfs.md "After a restart").
        if r.reclaim.load(Ordering::Relaxed) {
            return Verdict::Allow;
        }
        if clients.is_empty() {
            return match want {
                Want::Read => Verdict::Allow,
                Want::Write => Verdict::Unattached,
            };
        }
        if want == Want::Read {
            let end = slba.saturating_add(nlb);
            if end <= r.signature_end.load(Ordering::Relaxed) {
                return Verdict::Allow;
            }
            let lbas = r.lbas.load(Ordering::Relaxed);
            if end <= PROBE_LBAS || slba >= lbas.saturating_sub(PROBE_LBAS) {
                return Verdict::Probe;
            }
        }
        Verdict::NotInLayouts
    }
}

impl HostGate {
    /// Remembers that `h` connected (at most [`SEEN_PER_ADDR`] NQNs per address).
    fn saw(&self, h: &HostRef<'_>) {
        let mut s = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let v = s.entry(h.ip).or_default();
        if !v.iter().any(|n| n == h.nqn) {
            if v.len() >= SEEN_PER_ADDR {
                v.remove(0);
            }
            v.push(h.nqn.to_string());
        }
    }

    /// The NQNs of the hosts seen that belong to `clientid` (for log lines).
    pub fn host_nqns(&self, clientid: u64) -> Vec<String> {
        let Some(c) = self.client(clientid) else {
            return Vec::new();
        };
        let o = self.overrides.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<String> = o
            .iter()
            .filter(|(_, w)| match w {
                HostOwner::Owner(x) => *x == c.owner,
                HostOwner::Addr(a) => *a == c.ip,
            })
            .map(|(n, _)| n.clone())
            .collect();
        let s = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = s.get(&c.ip) {
            out.extend(v.iter().filter(|n| !o.contains_key(*n)).cloned());
        }
        out
    }
}

/// How many host NQNs `HostGate` remembers per address.
const SEEN_PER_ADDR: usize = 8;

impl HostPolicy for HostGate {
    fn access(&self, h: &HostRef<'_>, _nsid: u32, a: Access, slba: u64, nlb: u64) -> bool {
        match self.verdict(h, a, slba, nlb) {
            Verdict::Allow => true,
            Verdict::Probe => {
                self.metrics.probe_reads.fetch_add(1, Ordering::Relaxed);
                true
            }
            Verdict::NotInLayouts | Verdict::Unattached => false,
        }
    }

    fn refused(&self, h: &HostRef<'_>, _nsid: u32, a: Access, slba: u64, nlb: u64) {
        let c = match a {
            Access::Read => &self.metrics.reads_refused,
            Access::Write => &self.metrics.writes_refused,
        };
        let n = c.fetch_add(1, Ordering::Relaxed) + 1;
        // One line per refusal, thinned once a host keeps at it: the 16 first of each kind,
        // then at each power of two (the counters have them all).
        if n <= 16 || n.is_power_of_two() {
            let why = self.verdict(h, a, slba, nlb);
            let clients = {
                let sets = self.blocks.read().unwrap_or_else(|e| e.into_inner());
                self.clients_of(&sets, h).to_vec()
            };
            tracing::info!(
                host = %h.nqn,
                ip = %h.ip,
                ?clients,
                access = ?a,
                slba,
                nlb,
                ?why,
                refusals = n,
                "target host refused by the gate"
            );
        }
    }

    fn admit(&self, h: &HostRef<'_>) -> bool {
        self.saw(h);
        if !self.any_fence.load(Ordering::Relaxed) {
            return true;
        }
        let f = self.fences.read().unwrap_or_else(|e| e.into_inner());
        let fenced = f.iter().any(|x| self.host_is(h, x.ip, &x.owner));
        if fenced {
            self.metrics
                .connects_refused
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(host = %h.nqn, ip = %h.ip, "connect refused: the host's NFS client is fenced");
        }
        !fenced
    }
}
