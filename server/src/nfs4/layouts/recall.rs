//! Layout recalls (RFC 8881 §12.5.5, §20.3) and what happens when they are not answered.
//!
//! A recall is decided by `break_for` (truncate, last unlink) or by a conflicting LAYOUTGET
//! (`get.rs`), which answer DELAY / RECALLCONFLICT at once: `recall_file` only records the
//! recall with its deadline and queues a CB_LAYOUTRECALL (`callback::CbQueue`), which the
//! sender delivers over the holder's backchannel, retrying while it is down or busy. The
//! recall stays pending until the client's grants of the file are gone (LAYOUTRETURN,
//! return-on-close, NOMATCHING_LAYOUT). At the deadline — two lease periods — `tick` fences
//! the client and revokes its layout stateid (`revoke`). Layouts the state layer dropped
//! without a return (lease expiry, courtesy purge, DESTROY_CLIENTID, a replaced client
//! record) go through `expire`, which fences first too; a failed fence keeps the blocks of
//! those files (docs/pnfs.md "Fencing").

use std::time::{Duration, Instant};

use layout::block::LayoutType;

use super::fence::fence_client;
use super::{add, Env, Layouts};
use crate::nfs4::callback::{Callback, CbKind};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Fh;
use crate::store::Ino;

/// How long a recalled client has to return its layout before it is fenced: two leases.
pub fn recall_deadline(srv: &Env, now: Instant) -> Instant {
    now + 2 * Duration::from_secs(u64::from(srv.state.lease_seconds()))
}

/// The recall bookkeeping of the ledger.
impl Layouts {
    /// Marks a recall of `ino` from `clientid` as pending until `deadline`; false if one
    /// already is.
    fn start_recall(&self, clientid: u64, ino: Ino, deadline: Instant) -> bool {
        let mut r = self.recalls.lock().unwrap_or_else(|e| e.into_inner());
        match r.entry((clientid, ino)) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(deadline);
                true
            }
        }
    }

    /// Ends the recalls `done` selects: their layouts came back.
    pub(super) fn end_recalls(&self, done: impl Fn(&(u64, Ino)) -> bool) {
        let mut r = self.recalls.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|k, _| !done(k));
    }

    /// Whether a recall of `ino` from `clientid` is pending.
    pub fn recall_pending(&self, clientid: u64, ino: Ino) -> bool {
        let r = self.recalls.lock().unwrap_or_else(|e| e.into_inner());
        r.contains_key(&(clientid, ino))
    }

    /// Ends recalls whose layouts came back, and takes those still held at `now` past their
    /// deadline.
    fn overdue_recalls(&self, now: Instant) -> Vec<(u64, Ino)> {
        let g = self.lock();
        let mut r = self.recalls.lock().unwrap_or_else(|e| e.into_inner());
        r.retain(|k, _| g.contains_key(k));
        let late: Vec<(u64, Ino)> = r
            .iter()
            .filter(|(_, d)| now >= **d)
            .map(|(k, _)| *k)
            .collect();
        for k in &late {
            r.remove(k);
        }
        late
    }
}

/// Recalls the layouts `clients` hold of `fh` (those not already being recalled): records
/// each recall with its deadline and queues its CB_LAYOUTRECALL, with the type the client
/// holds. Never waits for the backchannel.
pub fn recall_file(srv: &Env, fh: Fh, clients: &[u64]) {
    let now = Instant::now();
    let deadline = recall_deadline(srv, now);
    for &c in clients {
        if !srv.layouts.start_recall(c, fh.ino, deadline) {
            continue;
        }
        let sid = srv
            .state
            .layouts_of_file(fh.ino)
            .into_iter()
            .find(|(cl, _)| *cl == c)
            .map(|(_, s)| s);
        let Some(stateid) = sid else {
            // No layout stateid left (the state dropped it, the tick has not seen it yet):
            // only grants, which go as dropped ones do — after a fence.
            expire(srv, &[(c, fh.ino)], now);
            continue;
        };
        let ltype = srv
            .layouts
            .type_of(c, fh.ino)
            .unwrap_or(LayoutType::BLOCK_VOLUME);
        srv.callbacks.push(Callback {
            client: c,
            kind: CbKind::LayoutRecall { fh, ltype, stateid },
            deadline,
        });
    }
}

/// A CB_LAYOUTRECALL goes only while its recall is pending: a layout returned before the
/// send needs none, and a NOMATCHING_LAYOUT answer must not drop a layout granted after.
pub fn wanted(srv: &Env, cb: &Callback) -> bool {
    let CbKind::LayoutRecall { fh, .. } = &cb.kind else {
        return false;
    };
    let pending = srv.layouts.recall_pending(cb.client, fh.ino);
    if pending {
        log_recall(srv, cb.client, fh.ino, "sent", None);
    }
    pending
}

/// Where a client comes from and its NVMe hosts, for the log lines.
pub(super) fn who(srv: &Env, client: u64) -> (Option<std::net::SocketAddr>, Vec<String>) {
    (
        srv.layouts.peer_of(client),
        srv.layouts.hosts.host_nqns(client),
    )
}

/// The log line of a recall's step (`sent`, `answered` with the holder's status, `timed
/// out`): one field set, so that the lines of one recall can be followed by client and file.
fn log_recall(srv: &Env, client: u64, ino: Ino, step: &str, status: Option<NfsStat>) {
    let (addr, hosts) = who(srv, client);
    tracing::info!(
        client,
        ?addr,
        ?hosts,
        ino = ino.0,
        status = status.map(NfsStat::name),
        "layout recall {step}"
    );
}

/// The holder answered a CB_LAYOUTRECALL.
pub fn answered(srv: &Env, cb: &Callback, st: NfsStat, _reply: &[u8]) {
    add(&srv.layouts.metrics.recalls_sent, 1);
    let CbKind::LayoutRecall { fh, stateid, .. } = &cb.kind else {
        return;
    };
    log_recall(srv, cb.client, fh.ino, "answered", Some(st));
    if st == NfsStat::NOMATCHING_LAYOUT {
        // RFC 8881 §20.3.3: the client has nothing; its layouts are gone.
        let _ = srv.state.layout_return(cb.client, fh.ino, stateid, true);
        srv.layouts.release_file(cb.client, fh.ino);
    }
}

/// The periodic part (once a second): fences the clients whose layouts the state dropped
/// and forgets those layouts, fences and revokes recalled layouts past their deadline,
/// retries failed fences, sends the callbacks due, and trims what no layout holds past EOF
/// any more.
pub fn tick(srv: &Env, now: Instant) {
    let lease = Duration::from_secs(u64::from(srv.state.lease_seconds()));
    expire(srv, &srv.state.take_dropped_layouts(), now);
    for (client, ino) in srv.layouts.overdue_recalls(now) {
        revoke(srv, client, ino, now);
    }
    for client in srv.layouts.fences_to_retry(now, lease) {
        if fence_client(srv, client, "retry of a failed fence").is_err() {
            srv.layouts.keep_unfenced(client, [], now);
        }
    }
    super::fence::lift_fences(srv, now);
    // The target's per-command check: flat copies of the runs that changed (hosts.rs).
    srv.layouts.hosts.refresh_lookups();
    crate::nfs4::callback::send_due(&srv.backchannel(), now);
    // The previous instance's SCSI clients are cut off before anything they held is freed.
    crate::nfs4::layouts::scsi_restart::run_if_due(srv.layouts, srv.state);
    // Layouts dropped above (expiry, fencing) and the after-grace sweep of a restart.
    super::trim_released(srv);
}

/// Layouts that went without a LAYOUTRETURN (`Circumstance::Forgotten`: lease expiry,
/// courtesy purge, DESTROY_CLIENTID, a replaced client record, a recall that found no
/// layout stateid): the client may be partitioned, not dead, and still write through them,
/// so it is fenced — once — before its grants go and the blocks they named can be trimmed
/// or truncated away (RFC 8881 §12.5.5, §12.7.3; RFC 5663 §2.3.6; RFC 8154 §2.4.5). If the
/// fence fails, those files keep their blocks (`Layouts::kept`) until a retry succeeds.
pub fn expire(srv: &Env, dropped: &[(u64, Ino)], now: Instant) {
    for (client, inos) in srv.layouts.to_fence(dropped) {
        if fence_client(srv, client, "layouts dropped without a return").is_err() {
            srv.layouts.keep_unfenced(client, inos, now);
        }
    }
    srv.layouts.forget(dropped);
}

/// `Circumstance::Revoke`: a recall of `ino` not answered by its deadline. Fences `client`
/// from the volume and revokes its layouts of the file (ADMIN_REVOKED; docs/design.md §5).
pub fn revoke(srv: &Env, client: u64, ino: Ino, now: Instant) {
    log_recall(srv, client, ino, "timed out", None);
    let ok = srv.layouts.is_fenced(client)
        || fence_client(srv, client, "layout not returned after two leases").is_ok();
    if !ok {
        srv.layouts.keep_unfenced(client, [ino], now);
    }
    for (c, sid) in srv.state.layouts_of_file(ino) {
        if c == client {
            srv.state.revoke(&sid);
        }
    }
    srv.layouts.release_file(client, ino);
}
