//! The embedded NVMe/TCP target's counters on `/metrics`, read at
//! scrape from `Target::command_stats` (per-queue counters summed; nothing is counted here):
//! `pnfsd_nvme_commands_total{queue,opcode,status}` and `pnfsd_nvme_bytes_total{dir}`.
//! Labels come from nvme-tcp's fixed tables and from statuses the target produced, so their
//! number is bounded. Nothing is written without a target.

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
            Some(t) => encode(&t.command_stats(), &mut e),
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
}
