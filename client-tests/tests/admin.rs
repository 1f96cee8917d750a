//! The admin endpoint (issue 16): two clients open files, and `/clients`, `/status`,
//! `pnfsd clients` and `pnfsd status` show what they hold; `/metrics` still carries every
//! counter name pnfs-bench and the guest scenarios scrape.

use std::net::SocketAddr;

use client_tests::{PnfsdProcess, ServerOptions, Session, SessionOptions};
use pnfsd::admin::cli;
use serde_json::Value;

/// Every name `/metrics` served before the admin endpoint (issue 7); renaming one breaks
/// pnfs-bench or a guest scenario.
const METRIC_NAMES: [&str; 30] = [
    "pnfsd_layoutgets_total",
    "pnfsd_layoutget_seconds_total",
    "pnfsd_layoutget_errors_total",
    "pnfsd_layoutcommits_total",
    "pnfsd_layoutcommit_seconds_total",
    "pnfsd_layoutcommit_errors_total",
    "pnfsd_layoutcommit_log_forces_wrote_total",
    "pnfsd_layoutcommit_data_flushes_issued_total",
    "pnfsd_layoutcommit_data_flushes_joined_total",
    "pnfsd_layoutcommit_converted_blocks_total",
    "pnfsd_layoutreturns_total",
    "pnfsd_layout_recalls_sent_total",
    "pnfsd_layout_fences_total",
    "pnfsd_layoutget_allocations_total",
    "pnfsd_layoutget_allocated_blocks_total",
    "pnfsd_layout_trimmed_blocks_total",
    "pnfsd_log_commits_total",
    "pnfsd_log_forces_total",
    "pnfsd_log_forces_wrote_total",
    "pnfsd_log_forces_joined_total",
    "pnfsd_log_writes_total",
    "pnfsd_log_bytes_total",
    "pnfsd_log_checkpoints_total",
    "pnfsd_log_flushes_issued_total",
    "pnfsd_log_flushes_shared_total",
    "pnfsd_log_wait_seconds_total",
    "pnfsd_log_writebacks_total",
    "pnfsd_data_flushes_issued_total",
    "pnfsd_data_flushes_joined_total",
    "pnfsd_log_shut_down",
];

fn admin_addr(p: &PnfsdProcess) -> SocketAddr {
    let log = p.log_text();
    let at = log.find("metrics on http://").expect("metrics line") + "metrics on http://".len();
    log[at..].split('/').next().unwrap().parse().unwrap()
}

fn client<'a>(clients: &'a Value, s: &Session) -> &'a Value {
    let owner = String::from_utf8(s.options.owner.clone()).unwrap();
    let all = clients.as_array().expect("an array");
    let mine: Vec<&Value> = all
        .iter()
        .filter(|c| c["owner"] == owner.as_str())
        .collect();
    assert_eq!(mine.len(), 1, "{owner} in {clients:#}");
    mine[0]
}

fn pnfsd_cli(args: &[&str]) -> String {
    let out = std::process::Command::new(client_tests::harness::pnfsd_bin().unwrap())
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn clients_and_status_show_what_two_clients_hold() {
    let p = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some("volume_size = \"1G\"\nadmin = true\ngrace_seconds = 1\n".into()),
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
    })
    .unwrap();
    let admin = admin_addr(&p);
    let a = Session::connect_with(p.addr(), SessionOptions::new("admin-a"))
        .await
        .unwrap();
    let b = Session::connect_with(p.addr(), SessionOptions::new("admin-b"))
        .await
        .unwrap();
    let root = a.lookup_path("").await.unwrap();
    let fa1 = a.create_file(&root, "a1", 0o644).await.unwrap();
    let _fa2 = a.create_file(&root, "a2", 0o644).await.unwrap();
    let _fb = b.create_file(&root, "b1", 0o644).await.unwrap();

    let clients = cli::get_json(admin, "/clients").await.unwrap();
    assert_eq!(clients.as_array().unwrap().len(), 2, "{clients:#}");
    for (s, opens) in [(&a, 2), (&b, 1)] {
        let c = client(&clients, s);
        assert_eq!(c["id"], s.clientid, "{c:#}");
        assert_eq!(c["lease"], "active", "{c:#}");
        assert_eq!(c["states"]["opens"], opens, "{c:#}");
        assert_eq!(c["states"]["locks"], 0, "{c:#}");
        assert_eq!(c["states"]["layouts"], 0, "{c:#}");
        let sessions = c["sessions"].as_array().unwrap();
        assert_eq!(sessions.len(), 1, "{c:#}");
        let hex: String = s.sessionid.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(sessions[0]["id"], hex.as_str(), "{c:#}");
        assert_eq!(sessions[0]["slots"], s.slot_count(), "{c:#}");
        assert_eq!(sessions[0]["connections"], 1, "{c:#}");
    }
    // The view follows the state: a CLOSE takes one open away.
    a.close_file(&fa1).await.unwrap();
    let clients = cli::get_json(admin, "/clients").await.unwrap();
    assert_eq!(client(&clients, &a)["states"]["opens"], 1, "{clients:#}");
    assert_eq!(client(&clients, &b)["states"]["opens"], 1, "{clients:#}");

    let st = cli::get_json(admin, "/status").await.unwrap();
    let vol = p.data_dir().join("volume.img");
    assert_eq!(
        st["volume"]["path"],
        vol.display().to_string().as_str(),
        "{st:#}"
    );
    let bs = st["volume"]["block_size"].as_u64().unwrap();
    assert_eq!(
        st["volume"]["total_blocks"].as_u64().unwrap() * bs,
        1 << 30,
        "{st:#}"
    );
    let free = st["volume"]["free_bytes"].as_u64().unwrap();
    assert!(free > 0 && free < st["volume"]["total_bytes"].as_u64().unwrap());
    assert_eq!(st["volume"]["files"], 4, "root and three files: {st:#}");
    assert_eq!(st["clients"], 2, "{st:#}");
    assert_eq!(st["log"]["shut_down"], Value::Null, "{st:#}");
    let log_size = st["log"]["size_bytes"].as_u64().unwrap();
    assert_eq!(
        log_size,
        st["volume"]["log_blocks"].as_u64().unwrap() * bs,
        "{st:#}"
    );
    assert!(
        st["log"]["used_bytes"].as_u64().unwrap() <= log_size,
        "{st:#}"
    );
    assert!(st["log"]["head_lsn"].as_u64() >= st["log"]["tail_lsn"].as_u64());
    assert_eq!(
        st["grace"]["remaining_seconds"],
        Value::Null,
        "fresh volume: {st:#}"
    );
    assert!(st["metadata_cache"]["budget_bytes"].as_u64().unwrap() > 0);
    assert_eq!(st["version"], env!("CARGO_PKG_VERSION"));

    // The CLI reads the same views.
    let addr = admin.to_string();
    let table = pnfsd_cli(&["clients", "--admin", &addr]);
    assert_eq!(table.lines().count(), 3, "{table}");
    for s in [&a, &b] {
        let owner = String::from_utf8(s.options.owner.clone()).unwrap();
        let row = table
            .lines()
            .find(|l| l.ends_with(&owner))
            .unwrap_or_else(|| panic!("{owner} in {table}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[0], format!("{:016x}", s.clientid), "{table}");
        assert_eq!((cols[1], cols[6]), ("active", "1"), "{table}");
    }
    let json = pnfsd_cli(&["clients", "--admin", &addr, "--json"]);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
    let status = pnfsd_cli(&["status", "--admin", &addr]);
    assert!(status.contains(", 2 client(s)"), "{status}");
    assert!(status.contains(&vol.display().to_string()), "{status}");
    assert!(status.contains("grace     over"), "{status}");
    assert!(status.contains(", running"), "{status}");
    println!("{status}\n{table}");

    // /metrics: every name of today, once, with its TYPE.
    let m = cli::get(admin, "/metrics").await.unwrap();
    for n in METRIC_NAMES {
        let kind = if n.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        assert_eq!(
            m.matches(&format!("# TYPE {n} {kind}\n")).count(),
            1,
            "{n}: {m}"
        );
        assert_eq!(
            m.lines().filter(|l| l.split(' ').next() == Some(n)).count(),
            1,
            "{n}: {m}"
        );
    }
    a.destroy().await.unwrap();
    b.destroy().await.unwrap();
}

/// Off by default: without `admin = true` the views are not served, `/metrics` is.
#[tokio::test]
async fn admin_views_are_off_by_default() {
    let p = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some("volume_size = \"1G\"\n".into()),
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
    })
    .unwrap();
    let admin = admin_addr(&p);
    for path in ["/status", "/clients"] {
        match cli::get(admin, path).await {
            Err(cli::CliError::Status { status, .. }) => assert_eq!(status.as_u16(), 404),
            other => panic!("{path}: {other:?}"),
        }
    }
    assert!(cli::get(admin, "/metrics")
        .await
        .unwrap()
        .contains("pnfsd_log_commits_total "));
}
