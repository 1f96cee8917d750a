//! The counters other modules keep (layouts, the target's host gate, the log, the store's
//! data flushes, delegations), read once per scrape into a [`Snapshot`] and written through
//! one table, [`COUNTERS`]. The layout operation series (`pnfsd_layoutgets_total`,
//! `…_seconds_total`, `…_errors_total`, LAYOUTCOMMIT's, `pnfsd_layoutreturns_total`) keep
//! their names but are read from the operation ledger (metrics::ops), which counts each
//! result once. Wiring a new snapshot field is one line there: name, help, how
//! to read it.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;

use metalog::LogCounters;

use super::ops::LayoutOps;
use crate::nfs4::layouts::PnfsCounters;
use crate::server::Server;

/// Every counter the endpoint shows, read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// LAYOUTGET, LAYOUTCOMMIT and LAYOUTRETURN as the operation ledger has them
    /// (`Server::ops`: every result the dispatcher wrote, refused ones included).
    pub layout_ops: LayoutOps,
    pub pnfs: PnfsCounters,
    /// The embedded target's fences and host admission (nfs4/layouts/hosts.rs).
    pub hosts: crate::nfs4::layouts::hosts::HostCounters,
    pub log: LogCounters,
    /// Data-volume flushes of every store caller: (issued, joined another caller's).
    pub data_flushes: (u64, u64),
    /// Delegations granted, recalled and revoked.
    pub delegs: crate::nfs4::state::DelegCounters,
    /// The store's metadata cache: (hits, misses) of tree-node lookups.
    pub metadata_cache: (u64, u64),
    /// The store's directory filters: (lookups answered absent, not answered, built,
    /// evicted).
    pub dir_filter: (u64, u64, u64, u64),
}

impl Snapshot {
    pub fn of(srv: &Server) -> Snapshot {
        Snapshot {
            layout_ops: srv.ops.layout_ops(),
            pnfs: srv.layouts.metrics.snapshot(),
            hosts: srv.layouts.hosts.metrics.snapshot(),
            log: srv.store.log().counters(),
            data_flushes: srv.store.data_flush_counts(),
            delegs: srv.state.deleg_counters(),
            metadata_cache: srv.store.metadata_cache_counts(),
            dir_filter: srv.store.dir_filter_counts(),
        }
    }
}

/// A counter's value: a count, or nanoseconds shown as seconds (Prometheus base units).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Count(u64),
    Nanos(u64),
}

/// One counter: its sample name as scraped (ending in `_total`), its help, its value.
pub struct Counter {
    pub name: &'static str,
    pub help: &'static str,
    pub read: fn(&Snapshot) -> Value,
}

use Value::{Count, Nanos};

macro_rules! counters {
    ($($name:literal, $help:literal, |$s:ident| $v:expr;)*) => {
        /// Every service counter, under the names pnfs-bench and the guest
        /// scenarios scrape (client-tests/src/bench/counters.rs, tests/admin.rs).
        pub const COUNTERS: &[Counter] = &[$(Counter {
            name: $name,
            help: $help,
            read: |$s: &Snapshot| $v,
        },)*];
    };
}

counters! {
    "pnfsd_metadata_cache_hits_total",
        "B+tree nodes the store found in its metadata cache (metadata_cache).",
        |s| Count(s.metadata_cache.0);
    "pnfsd_metadata_cache_misses_total",
        "B+tree nodes the store read from the volume one at a time because its metadata cache did not hold them (read-ahead not counted).",
        |s| Count(s.metadata_cache.1);
    "pnfsd_dir_filter_hits_total",
        "Directory-entry lookups a large directory's negative-name filter answered \"absent\" without reading the tree.",
        |s| Count(s.dir_filter.0);
    "pnfsd_dir_filter_misses_total",
        "Directory-entry lookups a large directory's filter could not answer (the name's hash is there, or a false positive).",
        |s| Count(s.dir_filter.1);
    "pnfsd_dir_filter_builds_total", "Negative-name filters built by a directory scan.",
        |s| Count(s.dir_filter.2);
    "pnfsd_dir_filter_evictions_total",
        "Negative-name filters dropped to stay within their share of metadata_cache.",
        |s| Count(s.dir_filter.3);
    "pnfsd_layoutgets_total",
        "LAYOUTGET operations (the operation ledger's LAYOUTGET results, as pnfsd_nfs_ops_total).",
        |s| Count(s.layout_ops.get.results);
    "pnfsd_layoutget_seconds_total",
        "Time spent in LAYOUTGET handlers (pnfsd_nfs_op_seconds_sum of LAYOUTGET).",
        |s| Nanos(s.layout_ops.get.ns);
    "pnfsd_layoutget_errors_total", "LAYOUTGETs answered with an error (results other than OK).",
        |s| Count(s.layout_ops.get.errors);
    "pnfsd_layoutcommits_total", "LAYOUTCOMMIT operations (the operation ledger's results).",
        |s| Count(s.layout_ops.commit.results);
    "pnfsd_layoutcommit_seconds_total",
        "Time spent in LAYOUTCOMMIT handlers (server time per commit = this / layoutcommits).",
        |s| Nanos(s.layout_ops.commit.ns);
    "pnfsd_layoutcommit_errors_total",
        "LAYOUTCOMMITs answered with an error (results other than OK).",
        |s| Count(s.layout_ops.commit.errors);
    "pnfsd_layoutcommit_log_forces_wrote_total",
        "LAYOUTCOMMITs whose log force waited for a log write (several can share one write).",
        |s| Count(s.pnfs.commit_log_writes);
    "pnfsd_layoutcommit_data_flushes_issued_total",
        "Data-volume flushes LAYOUTCOMMITs issued themselves.",
        |s| Count(s.pnfs.commit_data_flushes);
    "pnfsd_layoutcommit_data_flushes_joined_total",
        "LAYOUTCOMMITs served by a data-volume flush another caller issued (flush sharing).",
        |s| Count(s.pnfs.commit_data_flushes_joined);
    "pnfsd_layoutcommit_converted_blocks_total",
        "Unwritten blocks LAYOUTCOMMIT converted to written.",
        |s| Count(s.pnfs.commit_converted_blocks);
    "pnfsd_layoutreturns_total", "LAYOUTRETURN operations (the operation ledger's results).",
        |s| Count(s.layout_ops.ret.results);
    "pnfsd_layout_recalls_sent_total", "CB_LAYOUTRECALLs sent.", |s| Count(s.pnfs.recalls_sent);
    "pnfsd_layout_fences_total",
        "Clients fenced (with a mechanism or without one: see the two counters below).",
        |s| Count(s.pnfs.fences);
    "pnfsd_layout_fences_without_mechanism_total",
        "Fences with no fence command, embedded target or SCSI fencer: nothing was done.",
        |s| Count(s.pnfs.fences_without_mechanism);
    "pnfsd_layout_fences_with_mechanism_total",
        "Fences a fence command, the embedded target or the SCSI fencer carried out.",
        |s| Count(s.pnfs.fences.saturating_sub(s.pnfs.fences_without_mechanism));
    "pnfsd_layout_fences_failed_total",
        "Fences whose mechanism (fence command, embedded target, SCSI preempt) ran and failed; retried each lease (not in pnfsd_layout_fences_total).",
        |s| Count(s.pnfs.fences_failed);
    "pnfsd_nvme_fences_disconnect_total",
        "Block-layout clients fenced by disconnecting their hosts at the embedded target.",
        |s| Count(s.hosts.fences_disconnect);
    "pnfsd_nvme_fences_shared_host_total",
        "Target fences refused: other clients share the address and no [nvme_hosts] entry.",
        |s| Count(s.hosts.fences_shared_host);
    "pnfsd_nvme_hosts_disconnected_total", "Controllers the target fences disconnected.",
        |s| Count(s.hosts.hosts_disconnected);
    "pnfsd_nvme_connects_refused_total",
        "NVMe Connects refused because the host's NFS client is fenced.",
        |s| Count(s.hosts.connects_refused);
    "pnfsd_nvme_writes_refused_total",
        "Writes the embedded target refused: outside the RW layouts of the host's clients.",
        |s| Count(s.hosts.writes_refused);
    "pnfsd_nvme_reads_refused_total",
        "Reads the embedded target refused: outside the layouts of the host's clients.",
        |s| Count(s.hosts.reads_refused);
    "pnfsd_nvme_probe_reads_total",
        "Reads outside a host's layouts let through in the probe window (udev, blkid).",
        |s| Count(s.hosts.probe_reads);
    "pnfsd_layoutget_allocations_total",
        "RW LAYOUTGETs that allocated blocks (each forced the log once).",
        |s| Count(s.pnfs.layoutget_allocations);
    "pnfsd_layoutget_allocated_blocks_total",
        "Blocks LAYOUTGET allocated, speculative preallocation included.",
        |s| Count(s.pnfs.layoutget_allocated_blocks);
    "pnfsd_layout_trimmed_blocks_total",
        "Never-committed unwritten blocks past EOF freed after the last RW layout went.",
        |s| Count(s.pnfs.trimmed_blocks);
    "pnfsd_log_commits_total", "Metadata log transactions committed.", |s| Count(s.log.commits);
    "pnfsd_log_forces_total", "Metadata log forces.", |s| Count(s.log.forces);
    "pnfsd_log_forces_wrote_total",
        "Log forces whose wait included a log write that flushed the device (XFS log_flushed).",
        |s| Count(s.log.forces_that_wrote);
    "pnfsd_log_forces_joined_total",
        "Log forces that did not (already durable, or joined a write that began before them).",
        |s| Count(s.log.forces.saturating_sub(s.log.forces_that_wrote));
    "pnfsd_log_writes_total", "Log records written (checkpoints, tail and unmount records).",
        |s| Count(s.log.log_writes);
    "pnfsd_log_bytes_total", "Bytes of log records written.", |s| Count(s.log.log_bytes);
    "pnfsd_log_checkpoints_total", "Checkpoints written.", |s| Count(s.log.checkpoints);
    "pnfsd_log_flushes_issued_total", "Log-device flushes the log issued.",
        |s| Count(s.log.flushes_issued);
    "pnfsd_log_flushes_shared_total", "Log-device flush requests served by another caller's flush.",
        |s| Count(s.log.flushes_shared);
    "pnfsd_log_wait_seconds_total", "Time callers waited in log forces and for log space.",
        |s| Nanos(s.log.wait_ns);
    "pnfsd_log_writebacks_total", "Metadata write-backs that moved the log tail.",
        |s| Count(s.log.writebacks);
    "pnfsd_data_flushes_issued_total",
        "Data-volume flushes issued by the store (LAYOUTCOMMIT, COMMIT, stable WRITE).",
        |s| Count(s.data_flushes.0);
    "pnfsd_data_flushes_joined_total",
        "Store data-volume flush requests served by another caller's flush.",
        |s| Count(s.data_flushes.1);
    "pnfsd_delegations_granted_total", "Delegations granted by OPEN.", |s| Count(s.delegs.granted);
    "pnfsd_delegations_recalled_total",
        "Delegations recalled (a CB_RECALL queued for a conflicting access).",
        |s| Count(s.delegs.recalled);
    "pnfsd_delegations_revoked_total",
        "Recalled delegations revoked for not being returned within a lease.",
        |s| Count(s.delegs.revoked);
}

/// Writes every counter of `s`. The crate's encoder appends `_total` to a counter's sample
/// name (OpenMetrics), so the family is registered without it.
pub fn encode(s: &Snapshot, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
    for c in COUNTERS {
        let family = c.name.strip_suffix("_total").unwrap_or(c.name);
        let m = e.encode_descriptor(family, c.help, None, MetricType::Counter)?;
        match (c.read)(s) {
            Count(n) => ConstCounter::new(n).encode(m)?,
            Nanos(ns) => ConstCounter::new(ns as f64 / 1e9).encode(m)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_is_named_once_and_ends_in_total() {
        let mut names = std::collections::HashSet::new();
        for c in COUNTERS {
            assert!(names.insert(c.name), "{} twice", c.name);
            assert!(
                c.name.starts_with("pnfsd_") && c.name.ends_with("_total"),
                "{}",
                c.name
            );
            assert!(c.help.ends_with('.'), "{}", c.name);
        }
    }
}
