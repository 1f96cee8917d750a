//! The embedded NVMe/TCP target's counters on `/metrics`, read at
//! scrape from `Target::command_stats` (per-queue counters summed; nothing is counted here):
//! `pnfsd_nvme_commands_total{queue,opcode,status}`, `pnfsd_nvme_bytes_total{dir}` and
//! `pnfsd_nvme_reservation_conflicts_total{nsid}` (`Target::namespace_stats`).
//! Labels come from nvme-tcp's fixed tables, from statuses the target produced and from the
//! namespaces it was bound with, so their number is bounded. Nothing is written without a
//! target. `pnfsd target` serves the same series for its own target (`target_exposition`).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Registers the collector (metrics.rs calls this once).
pub fn register(registry: &mut Registry) {
    registry.register_collector(Box::new(NvmeCollector));
}

#[derive(Debug)]
struct NvmeCollector;

impl Collector for NvmeCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        match crate::nvme::embedded() {
            Some(t) => {
                encode(&t.command_stats(), &mut e)?;
                encode_namespaces(&t.namespace_stats(), &mut e)
            }
            None => Ok(()),
        }
    }
}

pub fn encode(s: &nvme_tcp::CommandStats, e: &mut DescriptorEncoder<'_>) -> std::fmt::Result {
    let mut m = e.encode_descriptor(
        "pnfsd_nvme_commands",
        "Commands the NVMe/TCP target answered, by queue (admin or io), opcode and status (success, or sctX_scYY: the NVMe status code type and code).",
        None,
        MetricType::Counter,
    )?;
    for c in &s.commands {
        let labels = [
            ("queue", c.queue),
            ("opcode", c.opcode),
            ("status", c.status.as_str()),
        ];
        ConstCounter::new(c.count).encode(m.encode_family(&labels)?)?;
    }
    let mut m = e.encode_descriptor(
        "pnfsd_nvme_bytes",
        "Bytes of NVMe Reads (dir=read) and Writes (dir=write) that succeeded on the embedded target.",
        None,
        MetricType::Counter,
    )?;
    for (dir, n) in [("read", s.read_bytes), ("write", s.write_bytes)] {
        ConstCounter::new(n).encode(m.encode_family(&[("dir", dir)])?)?;
    }
    Ok(())
}

pub fn encode_namespaces(
    s: &[nvme_tcp::NamespaceStats],
    e: &mut DescriptorEncoder<'_>,
) -> std::fmt::Result {
    let mut m = e.encode_descriptor(
        "pnfsd_nvme_reservation_conflicts",
        "Commands the NVMe/TCP target refused with Reservation Conflict, by namespace: I/O of a host the reservation shuts out (a fenced one) and reservation commands refused.",
        None,
        MetricType::Counter,
    )?;
    for n in s {
        let nsid = n.nsid.to_string();
        ConstCounter::new(n.reservation_conflicts)
            .encode(m.encode_family(&[("nsid", nsid.as_str())])?)?;
    }
    Ok(())
}

/// A standalone target's exposition (`pnfsd target`'s `metrics_listen`): the series above,
/// `pnfsd_nvme_controllers` as the MDS's gauges name it, and
/// `pnfsd_target_access_denied_total{nsid,reason}` from `refused` (`(nsid, reason, count)`,
/// `daemon::target::TargetPolicy::refusals`) and `pnfsd_target_mds_writes_total{host}` from
/// `mds_writes` (`(host NQN, count)`, `TargetPolicy::mds_writes`).
pub fn target_exposition(
    t: &nvme_tcp::Target,
    refused: &[(u32, &'static str, u64)],
    mds_writes: &[(String, u64)],
) -> String {
    struct One(
        nvme_tcp::Target,
        Vec<(u32, &'static str, u64)>,
        Vec<(String, u64)>,
    );
    impl std::fmt::Debug for One {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("TargetCollector")
        }
    }
    impl Collector for One {
        fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
            encode(&self.0.command_stats(), &mut e)?;
            encode_namespaces(&self.0.namespace_stats(), &mut e)?;
            let m = e.encode_descriptor(
                "pnfsd_nvme_controllers",
                "Live controllers of the NVMe/TCP target (discovery and I/O).",
                None,
                MetricType::Gauge,
            )?;
            prometheus_client::metrics::gauge::ConstGauge::new(self.0.controller_count() as i64)
                .encode(m)?;
            let mut m = e.encode_descriptor(
                "pnfsd_target_access_denied",
                "Commands pnfsd target refused with Access Denied, by namespace and reason: host (the namespace's hosts do not name it) or metadata (a write into a pnfsd volume's metadata region by a host not in mds_hosts).",
                None,
                MetricType::Counter,
            )?;
            for &(nsid, reason, n) in &self.1 {
                let nsid = nsid.to_string();
                ConstCounter::new(n)
                    .encode(m.encode_family(&[("nsid", nsid.as_str()), ("reason", reason)])?)?;
            }
            let mut m = e.encode_descriptor(
                "pnfsd_target_mds_writes",
                "Write commands of each mds_hosts host answered with success: which MDS writes the volumes (a fenced one no longer does).",
                None,
                MetricType::Counter,
            )?;
            for (host, n) in &self.2 {
                ConstCounter::new(*n).encode(m.encode_family(&[("host", host.as_str())])?)?;
            }
            Ok(())
        }
    }
    let mut reg = Registry::default();
    reg.register_collector(Box::new(One(
        t.clone(),
        refused.to_vec(),
        mds_writes.to_vec(),
    )));
    let mut out = String::new();
    // Writing to a String fails only if a collector does, and this one does not.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &reg) {
        tracing::warn!("metrics encoding: {e}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Fixed(nvme_tcp::CommandStats);
    impl Collector for Fixed {
        fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
            encode(&self.0, &mut e)
        }
    }

    #[test]
    fn commands_and_bytes_encode_with_their_labels() {
        let s = nvme_tcp::CommandStats {
            commands: vec![nvme_tcp::CommandCount {
                queue: "io",
                opcode: "read",
                status: "sct0_sc80".into(),
                count: 3,
            }],
            read_bytes: 4096,
            write_bytes: 0,
        };
        let mut reg = Registry::default();
        reg.register_collector(Box::new(Fixed(s)));
        let mut t = String::new();
        prometheus_client::encoding::text::encode(&mut t, &reg).unwrap();
        assert!(t.contains("# TYPE pnfsd_nvme_commands counter\n"), "{t}");
        assert!(
            t.contains(
                "pnfsd_nvme_commands_total{queue=\"io\",opcode=\"read\",status=\"sct0_sc80\"} 3\n"
            ),
            "{t}"
        );
        assert!(
            t.contains("pnfsd_nvme_bytes_total{dir=\"read\"} 4096\n"),
            "{t}"
        );
        assert!(
            t.contains("pnfsd_nvme_bytes_total{dir=\"write\"} 0\n"),
            "{t}"
        );
    }

    #[test]
    fn reservation_conflicts_encode_by_namespace() {
        #[derive(Debug)]
        struct Ns(Vec<nvme_tcp::NamespaceStats>);
        impl Collector for Ns {
            fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
                encode_namespaces(&self.0, &mut e)
            }
        }
        let s = vec![
            nvme_tcp::NamespaceStats {
                nsid: 1,
                reservation_conflicts: 0,
            },
            nvme_tcp::NamespaceStats {
                nsid: 2,
                reservation_conflicts: 5,
            },
        ];
        let mut reg = Registry::default();
        reg.register_collector(Box::new(Ns(s)));
        let mut t = String::new();
        prometheus_client::encoding::text::encode(&mut t, &reg).unwrap();
        assert!(
            t.contains("# TYPE pnfsd_nvme_reservation_conflicts counter\n"),
            "{t}"
        );
        assert!(
            t.contains("pnfsd_nvme_reservation_conflicts_total{nsid=\"1\"} 0\n"),
            "{t}"
        );
        assert!(
            t.contains("pnfsd_nvme_reservation_conflicts_total{nsid=\"2\"} 5\n"),
            "{t}"
        );
    }
}
