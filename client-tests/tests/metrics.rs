//! `/metrics` of a running pnfsd: after two clients open files, take a
//! layout and commit it, the exposition passes `promtool check metrics` (Debian's
//! prometheus package; skipped with a NOTE where it is not installed) and pnfsd's own
//! convention checks (`pnfsd::metrics::text::problems`), and its per-operation counts,
//! histograms and gauges agree with what the clients did and hold.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use client_tests::harness::{after_grace, TwoClients};
use client_tests::pnfs::iomode;
use client_tests::{PnfsdProcess, ServerOptions, Session, SessionOptions};
use pnfsd::admin::cli;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The value of the sample `name` (with its labels as written), if present.
fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// `promtool check metrics` on `text`: `None` when promtool is not installed.
fn promtool(text: &str) -> Option<(bool, String)> {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => panic!("promtool: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    Some((out.status.success(), said))
}

async fn get_openmetrics(addr: SocketAddr) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET /metrics HTTP/1.0\r\nAccept: application/openmetrics-text;version=1.0.0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test]
async fn metrics_follow_prometheus_conventions_and_what_clients_did() {
    let TwoClients {
        server: _p,
        http: addr,
        a,
        b,
    } = TwoClients::start("volume_size = \"1G\"\n", ["metrics-a", "metrics-b"])
        .await
        .unwrap();
    let root = a.lookup_path("").await.unwrap();
    let fa = a.create_file(&root, "a", 0o644).await.unwrap();
    let _fb = b.create_file(&root, "b", 0o644).await.unwrap();
    assert!(a.lookup_path("no-such-file").await.is_err());
    let l = a.layoutget(&fa, iomode::RW, 0, 1 << 20).await.unwrap();
    a.layoutcommit_all(&fa, &l, 4095).await.unwrap();

    let m = cli::get(addr, "/metrics").await.unwrap();
    let problems = pnfsd::metrics::text::problems(&m);
    assert!(problems.is_empty(), "{problems:#?}\n{m}");
    match promtool(&m) {
        Some((ok, said)) => assert!(ok, "promtool check metrics: {said}\n{m}"),
        None => println!("NOTE: promtool not installed (Debian package prometheus): skipped"),
    }

    // Per operation, counted once by the dispatcher, with the status the client got.
    let ops = |op: &str, st: &str| {
        value(
            &m,
            &format!("pnfsd_nfs_ops_total{{op=\"{op}\",status=\"{st}\"}}"),
        )
    };
    assert_eq!(ops("OPEN", "OK"), Some(2.0), "{m}");
    assert_eq!(ops("LAYOUTGET", "OK"), Some(1.0), "{m}");
    assert_eq!(ops("LAYOUTCOMMIT", "OK"), Some(1.0), "{m}");
    assert_eq!(ops("LOOKUP", "NOENT"), Some(1.0), "{m}");
    assert_eq!(ops("CREATE_SESSION", "OK"), Some(2.0), "{m}");
    assert_eq!(
        value(&m, "pnfsd_nfs_op_seconds_count{op=\"LAYOUTCOMMIT\"}"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        value(
            &m,
            "pnfsd_nfs_op_seconds_bucket{le=\"+Inf\",op=\"LAYOUTCOMMIT\"}"
        ),
        Some(1.0),
        "{m}"
    );
    // The old counter and the histogram see the same LAYOUTCOMMIT.
    assert_eq!(value(&m, "pnfsd_layoutcommits_total"), Some(1.0));
    // The allocating LAYOUTGET forced the log at least once; every force is observed.
    let forces = value(&m, "pnfsd_log_forces_total").unwrap();
    assert!(forces >= 1.0, "{m}");
    assert_eq!(
        value(&m, "pnfsd_log_force_seconds_count"),
        Some(forces),
        "{m}"
    );

    // Gauges, read at scrape, against what the two clients hold.
    assert_eq!(
        value(&m, "pnfsd_clients{state=\"active\"}"),
        Some(2.0),
        "{m}"
    );
    assert_eq!(value(&m, "pnfsd_sessions"), Some(2.0), "{m}");
    assert_eq!(value(&m, "pnfsd_open_states"), Some(2.0), "{m}");
    assert_eq!(value(&m, "pnfsd_layout_states"), Some(1.0), "{m}");
    assert_eq!(
        value(&m, "pnfsd_layout_recalls_in_flight"),
        Some(0.0),
        "{m}"
    );
    assert_eq!(value(&m, "pnfsd_nvme_controllers"), Some(0.0), "{m}");
    assert_eq!(value(&m, "pnfsd_log_shut_down"), Some(0.0), "{m}");
    assert!(
        value(&m, "pnfsd_log_used_bytes").unwrap() <= value(&m, "pnfsd_log_size_bytes").unwrap()
    );
    assert!(value(&m, "pnfsd_free_blocks").unwrap() > 0.0);
    assert_eq!(
        value(&m, "pnfsd_grace_remaining_seconds"),
        Some(0.0),
        "fresh volume: {m}"
    );

    // A Prometheus server asks for OpenMetrics and gets the crate's own encoding.
    let r = get_openmetrics(addr).await;
    let (head, body) = r.split_once("\r\n\r\n").unwrap();
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert!(body.contains("# TYPE pnfsd_nfs_ops counter\n") && body.ends_with("# EOF\n"));

    a.destroy().await.unwrap();
    b.destroy().await.unwrap();
    // After DESTROY_CLIENTID the clients are gone from the gauge.
    let m = cli::get(addr, "/metrics").await.unwrap();
    assert_eq!(
        value(&m, "pnfsd_clients{state=\"active\"}"),
        Some(0.0),
        "{m}"
    );
}

/// The start line tells a clean start from a recovery after a crash, and says what the
/// recovery replayed.
#[tokio::test]
async fn the_start_line_tells_a_clean_start_from_a_recovery() {
    let mut p = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some("grace_seconds = 2\n".into()),
        extra_args: vec![],
    })
    .unwrap();
    let s = Session::connect_with(p.addr(), SessionOptions::new("start-line"))
        .await
        .unwrap();
    let root = s.lookup_path("").await.unwrap();
    s.create_file(&root, "before-stop", 0o644).await.unwrap();
    drop(s);
    assert!(p.terminate().unwrap().success());
    p.restart().unwrap();
    let log = p.log_text();
    let starts: Vec<&str> = log.lines().filter(|l| l.contains("start: ")).collect();
    assert_eq!(starts.len(), 2, "{log}");
    assert!(
        starts.iter().all(|l| l.contains("start: clean")),
        "{starts:#?}"
    );

    let s = Session::connect_with(p.addr(), SessionOptions::new("start-line"))
        .await
        .unwrap();
    let root = s.lookup_path("").await.unwrap();
    // After the restart OPEN waits out the grace period.
    after_grace(|| s.create_file(&root, "before-crash", 0o644)).await;
    drop(s);
    p.kill().unwrap();
    p.restart().unwrap();
    let log = p.log_text();
    let last = log.lines().rfind(|l| l.contains("start: ")).unwrap();
    assert!(last.contains("start: recovery after a crash"), "{last}");
    assert!(last.contains("last_mounted_by=host "), "{last}");
    let replayed: u64 = last
        .split("items_replayed=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{last}"));
    assert!(
        replayed >= 1,
        "the create was committed before the kill: {last}"
    );
}
