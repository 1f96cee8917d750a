//! Fencing (docs/design.md §5; RFC 8881 §12.5.5, RFC 5663 §2.3.6, RFC 8154 §2.4.5): cutting a
//! client whose layouts go without a return off the volume before the blocks they named
//! are trimmed, truncated or freed. Mechanisms: `fence_command <client IP> <device id hex>`
//! (external targets) and PREEMPT AND ABORT of the client's SCSI key (`nfs4::layouts::scsi`). Who
//! was fenced is remembered until the client's next grant; a failed fence keeps the blocks of the
//! files the client held and is retried once a lease (recall.rs `tick`).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use super::{add, Env, Layouts};
use crate::store::Ino;

/// Who was fenced, and the files a failed fence keeps (callback.rs `fence_client`).
impl Layouts {
    /// Whether `client` was fenced since its last grant.
    pub fn is_fenced(&self, client: u64) -> bool {
        let f = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        f.contains(&client)
    }

    /// Records that `client` no longer has access to the volume; its kept files are freed
    /// for trimming.
    pub fn mark_fenced(&self, client: u64) {
        self.fenced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(client);
        let kept = self
            .unfenced
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&client);
        if let Some((_, inos)) = kept {
            self.queue_trim(inos);
        }
    }

    /// Fencing `client` failed at `now`: keeps the blocks of `inos` until it succeeds.
    pub fn keep_unfenced(&self, client: u64, inos: impl IntoIterator<Item = Ino>, now: Instant) {
        let mut u = self.unfenced.lock().unwrap_or_else(|e| e.into_inner());
        let e = u.entry(client).or_insert_with(|| (now, HashSet::new()));
        e.0 = now;
        e.1.extend(inos);
    }

    /// Whether a client that could not be fenced held a layout of `ino`: its blocks stay.
    pub fn kept(&self, ino: Ino) -> bool {
        let u = self.unfenced.lock().unwrap_or_else(|e| e.into_inner());
        u.values().any(|(_, inos)| inos.contains(&ino))
    }

    /// The clients whose failed fence was last tried `every` or longer before `now`.
    pub fn fences_to_retry(&self, now: Instant, every: Duration) -> Vec<u64> {
        let u = self.unfenced.lock().unwrap_or_else(|e| e.into_inner());
        u.iter()
            .filter(|(_, (t, _))| now.saturating_duration_since(*t) >= every)
            .map(|(c, _)| *c)
            .collect()
    }

    /// Of `dropped`, the clients holding grants (what they held: READ layouts too, since
    /// their blocks may be freed and reused) that were not fenced since, with their files.
    pub fn to_fence(&self, dropped: &[(u64, Ino)]) -> Vec<(u64, Vec<Ino>)> {
        let g = self.lock();
        let mut out: Vec<(u64, Vec<Ino>)> = Vec::new();
        for k in dropped {
            if !g.contains_key(k) || self.is_fenced(k.0) {
                continue;
            }
            match out.iter_mut().find(|(c, _)| *c == k.0) {
                Some((_, inos)) => inos.push(k.1),
                None => out.push((k.0, vec![k.1])),
            }
        }
        out
    }
}

/// Why a fence failed (logged; the client may still reach the volume).
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("fence command: {0}")]
    Command(String),
    #[error("SCSI preempt: {0}")]
    Scsi(#[from] crate::nfs4::layouts::scsi::PreemptError),
    #[error("embedded target: {0}")]
    Target(#[from] super::hosts::HostFenceError),
}

/// Cuts `client` off the volume (RFC 8154 §2.4.2 for SCSI; docs/pnfs.md "Fencing"):
/// - `fence_command <client address> <device id hex>` when one is configured (external
///   targets);
/// - else, for a block-layout client while the embedded target serves the volume, its
///   hosts are disconnected and refused until the fence is lifted (hosts.rs);
/// - and its SCSI reservation key is preempted when the SCSI hook is installed.
///
/// Counted in `fences` and remembered (`Layouts::is_fenced`) when it succeeded; a fence
/// for which none of these exists is counted in `fences_without_mechanism` too: the server
/// then trusts its clients. One whose mechanism failed is counted in `fences_failed`.
pub fn fence_client(srv: &Env, client: u64, why: &str) -> Result<(), FenceError> {
    let addr = srv.layouts.peer_of(client);
    tracing::warn!(client, ?addr, why, "fencing");
    let hosts = &srv.layouts.hosts;
    let by_target = srv.opts.fence_command.is_none()
        && hosts.can_disconnect()
        && hosts.client(client).is_some_and(|c| c.block);
    let mechanism =
        srv.opts.fence_command.is_some() || by_target || srv.layouts.scsi.get().is_some();
    let r = run_fence_command(srv, client)
        .and_then(|()| {
            if by_target {
                let live = |id| srv.state.client_identity(id).is_some();
                let n = hosts.fence(client, &live, Instant::now())?;
                tracing::warn!(client, controllers = n, "fenced at the embedded target");
            }
            Ok(())
        })
        .and_then(|()| {
            crate::nfs4::layouts::scsi::fence(&srv.layouts.scsi, client)?;
            Ok(())
        });
    let hosts_nqn = hosts.host_nqns(client);
    match &r {
        Ok(()) => {
            tracing::info!(client, ?addr, hosts = ?hosts_nqn, mechanism, "fence done");
            srv.layouts.mark_fenced(client);
            add(&srv.layouts.metrics.fences, 1);
            if !mechanism {
                add(&srv.layouts.metrics.fences_without_mechanism, 1);
            }
        }
        Err(e) => {
            add(&srv.layouts.metrics.fences_failed, 1);
            tracing::error!(
                client,
                ?addr,
                hosts = ?hosts_nqn,
                %e,
                "fencing failed: the blocks of its layouts are kept, not trimmed nor freed"
            )
        }
    }
    r
}

/// Lifts the target's fences whose client is gone (recall.rs `tick`; hosts.rs `lift`).
pub fn lift_fences(srv: &Env, now: Instant) {
    let live = |id| srv.state.client_identity(id).is_some();
    let lease = Duration::from_secs(u64::from(srv.state.lease_seconds()));
    let instances = srv.state.client_identities();
    let previous_gone = !srv.state.layouts_reclaimable();
    // Once the previous instance's layouts are gone, so is the leeway their hosts had.
    srv.layouts.hosts.set_reclaim(!previous_gone);
    srv.layouts
        .hosts
        .lift(&live, &instances, previous_gone, lease, now);
    srv.layouts.forget_gone_clients(&live);
}

impl Layouts {
    /// Forgets the clients the state layer no longer knows (`live` false: expired and
    /// purged, DESTROY_CLIENTID, replaced by a new instance) once their fence window is
    /// over: no grant of theirs is left (their dropped layouts went through `expire`, which
    /// fences first) and no failed fence of theirs waits for a retry (which needs their
    /// address). Their hosts then belong to no client of theirs, and the maps stay as big
    /// as the live clients.
    pub fn forget_gone_clients(&self, live: &dyn Fn(u64) -> bool) {
        let gone: Vec<u64> = self
            .hosts
            .client_ids()
            .into_iter()
            .filter(|id| !live(*id))
            .collect();
        if gone.is_empty() {
            return;
        }
        let waiting: HashSet<u64> = {
            let u = self.unfenced.lock().unwrap_or_else(|e| e.into_inner());
            gone.iter()
                .copied()
                .filter(|id| u.contains_key(id))
                .collect()
        };
        let holding: HashSet<u64> = {
            let g = self.lock();
            g.keys()
                .map(|k| k.0)
                .filter(|id| gone.contains(id))
                .collect()
        };
        let done: HashSet<u64> = gone
            .into_iter()
            .filter(|id| !waiting.contains(id) && !holding.contains(id))
            .collect();
        if done.is_empty() {
            return;
        }
        self.hosts.forget_clients(&|id| done.contains(&id));
        let mut p = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        p.retain(|id, _| !done.contains(id));
        drop(p);
        let mut f = self.fenced.lock().unwrap_or_else(|e| e.into_inner());
        f.retain(|id| !done.contains(id));
    }
}

fn run_fence_command(srv: &Env, client: u64) -> Result<(), FenceError> {
    let Some(cmd) = &srv.opts.fence_command else {
        return Ok(());
    };
    let Some(prog) = cmd.split_whitespace().next() else {
        return Ok(());
    };
    let addr = srv
        .layouts
        .peer_of(client)
        .ok_or_else(|| FenceError::Command("the client's address is unknown".into()))?;
    let dev: String = super::device_id(srv.store)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let out = std::process::Command::new(prog)
        .args(cmd.split_whitespace().skip(1))
        .arg(addr.ip().to_string())
        .arg(&dev)
        .status();
    match out {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(FenceError::Command(s.to_string())),
        Err(e) => Err(FenceError::Command(e.to_string())),
    }
}
