//! Gauges read at scrape from the services' own views (the ones the admin endpoint shows):
//! no second bookkeeping, nothing counted on the NFS path. A scrape copies the client and
//! layout tables out under their locks once each (as `GET /clients` and `/layouts` do).

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::nfs4::state::LeaseState;
use crate::server::Server;

/// The embedded NVMe/TCP target's live controllers, when there is one (main.rs passes
/// `Target::controller_count`; commands and bytes: metrics/nvme.rs).
pub type ControllerCount = Arc<dyn Fn() -> usize + Send + Sync>;

/// What the gauges show, read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Gauges {
    pub clients_unconfirmed: u64,
    pub clients_active: u64,
    pub clients_courtesy: u64,
    pub sessions: u64,
    pub opens: u64,
    pub locks: u64,
    pub delegations: u64,
    pub layouts: u64,
    pub revoked: u64,
    pub layout_recalls_in_flight: u64,
    pub fenced_hosts: u64,
    pub log_size_bytes: u64,
    pub log_used_bytes: u64,
    pub log_shut_down: bool,
    pub free_blocks: u64,
    pub free_bytes: u64,
    pub grace_remaining_seconds: u64,
    pub nvme_controllers: Option<u64>,
}

impl Gauges {
    pub fn of(srv: &Server, controllers: Option<&ControllerCount>) -> Gauges {
        let mut g = Gauges::default();
        for c in srv.state.clients_snapshot() {
            *match c.lease {
                LeaseState::Unconfirmed => &mut g.clients_unconfirmed,
                LeaseState::Active => &mut g.clients_active,
                LeaseState::Courtesy => &mut g.clients_courtesy,
            } += 1;
            g.opens += c.states.opens as u64;
            g.locks += c.states.locks as u64;
            g.delegations += c.states.delegations as u64;
            g.layouts += c.states.layouts as u64;
            g.revoked += c.states.revoked as u64;
        }
        g.sessions = srv.state.client_state_usage().sessions as u64;
        g.layout_recalls_in_flight = srv
            .layouts
            .snapshot(Instant::now())
            .iter()
            .flat_map(|f| &f.holders)
            .filter(|h| h.recall.is_some())
            .count() as u64;
        g.fenced_hosts = srv.layouts.hosts.fence_count() as u64;
        let store = &srv.store;
        let bs = u64::from(store.block_size());
        let log = store.log();
        let (tail, head) = log.tail_head();
        g.log_size_bytes = store.superblock().geometry.log_blocks.saturating_mul(bs);
        g.log_used_bytes = head.0.saturating_sub(tail.0);
        g.log_shut_down = log.shutdown_error().is_some();
        let fs = store.fsstat();
        g.free_bytes = fs.free_bytes;
        g.free_blocks = fs.free_bytes / bs.max(1);
        g.grace_remaining_seconds = srv.state.grace_snapshot().remaining_seconds.unwrap_or(0);
        g.nvme_controllers = controllers.map(|f| f() as u64);
        g
    }
}

fn gauge(e: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(m)
}

pub fn encode(g: &Gauges, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
    let mut m = e.encode_descriptor(
        "pnfsd_clients",
        "NFSv4 clients by lease state (unconfirmed: no session yet; courtesy: lease ran out, state kept). pnfsd keeps no expired client, so there is no expired series.",
        None,
        MetricType::Gauge,
    )?;
    for (state, n) in [
        ("unconfirmed", g.clients_unconfirmed),
        ("active", g.clients_active),
        ("courtesy", g.clients_courtesy),
    ] {
        let labels = [("state", state)];
        let f = m.encode_family(&labels)?;
        ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX)).encode(f)?;
    }
    gauge(e, "pnfsd_sessions", "NFSv4.1 sessions.", g.sessions)?;
    gauge(e, "pnfsd_open_states", "Open stateids held.", g.opens)?;
    gauge(e, "pnfsd_lock_states", "Lock stateids held.", g.locks)?;
    gauge(e, "pnfsd_delegations", "Delegations held.", g.delegations)?;
    gauge(
        e,
        "pnfsd_layout_states",
        "Layout stateids held (one per client and file).",
        g.layouts,
    )?;
    gauge(
        e,
        "pnfsd_revoked_states",
        "Revoked states waiting for the client's FREE_STATEID.",
        g.revoked,
    )?;
    gauge(
        e,
        "pnfsd_layout_recalls_in_flight",
        "CB_LAYOUTRECALLs sent and not yet answered by a LAYOUTRETURN.",
        g.layout_recalls_in_flight,
    )?;
    gauge(
        e,
        "pnfsd_nvme_fences",
        "Fences in force at the embedded NVMe/TCP target (their hosts are refused).",
        g.fenced_hosts,
    )?;
    if let Some(n) = g.nvme_controllers {
        gauge(
            e,
            "pnfsd_nvme_controllers",
            "Live controllers of the embedded NVMe/TCP target (discovery and I/O).",
            n,
        )?;
    }
    gauge(
        e,
        "pnfsd_log_size_bytes",
        "Size of the metadata log.",
        g.log_size_bytes,
    )?;
    gauge(
        e,
        "pnfsd_log_used_bytes",
        "Metadata log bytes between tail and head: written, not yet released by write-back.",
        g.log_used_bytes,
    )?;
    gauge(
        e,
        "pnfsd_log_shut_down",
        "1 once a failed log write or flush shut the metadata log down: changes are refused until pnfsd restarts (the log names the device).",
        u64::from(g.log_shut_down),
    )?;
    gauge(
        e,
        "pnfsd_free_blocks",
        "Free blocks of the volume (data and tree nodes share them).",
        g.free_blocks,
    )?;
    gauge(
        e,
        "pnfsd_free_bytes",
        "Free bytes of the volume (what FSSTAT reports).",
        g.free_bytes,
    )?;
    gauge(
        e,
        "pnfsd_grace_remaining_seconds",
        "Seconds left in the grace period after a restart (0: over, or none).",
        g.grace_remaining_seconds,
    )
}
