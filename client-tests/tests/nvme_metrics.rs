//! The embedded NVMe/TCP target on `/metrics` and `/status`: our
//! initiator connects to a running pnfsd's target, writes, reads and reads past the end,
//! and `pnfsd_nvme_commands_total`, `pnfsd_nvme_bytes_total` and the `nvme` section of
//! `/status` agree with what it did.

use bytes::Bytes;
use client_tests::{PnfsdProcess, ServerOptions};
use nvme_tcp::{Initiator, InitiatorConfig};
use pnfsd::admin::cli;

const NQN: &str = "nqn.2026-11.org.pnfsd:volume";
const HOST: &str = "nqn.2014-08.org.example:nvme-metrics";

/// The value of the sample `name` (labels as written), 0 if absent.
fn value(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

fn cmd(queue: &str, op: &str, status: &str) -> String {
    format!("pnfsd_nvme_commands_total{{queue=\"{queue}\",opcode=\"{op}\",status=\"{status}\"}}")
}

#[tokio::test]
async fn nvme_counters_and_status_follow_the_initiator() {
    let p = PnfsdProcess::start_with(ServerOptions {
        // The initiator writes blocks no layout gave it (the data area's last two).
        config_toml: Some(
            "volume_size = \"1G\"\nadmin = true\nnvme_enforce_layouts = false\n".into(),
        ),
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
    })
    .unwrap();
    let admin = p.metrics_addr().expect("the metrics line in the log");
    let before = cli::get(admin, "/metrics").await.unwrap();
    assert!(
        before.contains("# TYPE pnfsd_nvme_commands_total counter"),
        "{before}"
    );

    let mut cfg = InitiatorConfig::new(NQN, HOST);
    cfg.io_queues = 1;
    let ini = Initiator::connect(p.nvme_addr(), cfg).await.unwrap();
    let ns = ini.identify_namespace(1).await.unwrap();
    let bs = ns.block_size;
    let last = ns.blocks - 2;
    let data: Vec<u8> = (0..2 * bs as usize).map(|i| (i % 251) as u8).collect();
    ini.write(1, last, Bytes::from(data.clone()), bs, false)
        .await
        .unwrap();
    assert_eq!(ini.read(1, last, 2, bs).await.unwrap(), data);
    // Past the end: LBA Out of Range (SCT 0h, SC 80h).
    assert!(ini.read(1, ns.blocks, 1, bs).await.is_err());

    let after = cli::get(admin, "/metrics").await.unwrap();
    let delta = |name: &str| value(&after, name) - value(&before, name);
    assert_eq!(delta(&cmd("io", "write", "success")), 1, "{after}");
    assert_eq!(delta(&cmd("io", "read", "success")), 1, "{after}");
    assert_eq!(delta(&cmd("io", "read", "sct0_sc80")), 1, "{after}");
    assert_eq!(delta(&cmd("admin", "connect", "success")), 1, "{after}");
    assert_eq!(delta(&cmd("io", "connect", "success")), 1, "{after}");
    assert!(delta(&cmd("admin", "identify", "success")) >= 2, "{after}");
    assert_eq!(
        delta("pnfsd_nvme_bytes_total{dir=\"write\"}"),
        2 * bs as u64,
        "{after}"
    );
    assert_eq!(
        delta("pnfsd_nvme_bytes_total{dir=\"read\"}"),
        2 * bs as u64,
        "{after}"
    );

    let st = cli::get_json(admin, "/status").await.unwrap();
    let nvme = &st["nvme"];
    assert_eq!(nvme["listen"], p.nvme_addr().to_string().as_str(), "{st:#}");
    assert_eq!(nvme["subsystem_nqn"], NQN, "{st:#}");
    assert_eq!(nvme["controllers_connected"], 1, "{st:#}");
    let c = &nvme["controllers"][0];
    assert_eq!(c["cntlid"], ini.cntlid(), "{st:#}");
    assert_eq!(c["host_nqn"], HOST, "{st:#}");
    assert_eq!(c["host_addr"], "127.0.0.1", "{st:#}");
    assert_eq!(c["io_queues"], 1, "{st:#}");
    assert_eq!(c["discovery"], false, "{st:#}");

    // The controller goes with its initiator; its counts stay.
    ini.disconnect().await.unwrap();
    let mut gone = false;
    for _ in 0..200 {
        let st = cli::get_json(admin, "/status").await.unwrap();
        if st["nvme"]["controllers_connected"] == 0 {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(gone, "the controller left /status");
    let last_scrape = cli::get(admin, "/metrics").await.unwrap();
    assert_eq!(
        value(&last_scrape, &cmd("io", "write", "success")),
        value(&after, &cmd("io", "write", "success"))
    );
}
