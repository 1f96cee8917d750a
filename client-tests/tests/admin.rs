//! The admin endpoint: two clients open files, and `/clients`, `/status`,
//! `pnfsd clients` and `pnfsd status` show what they hold; `/metrics` still carries every
//! counter name pnfs-bench and the guest scenarios scrape.

use client_tests::harness::TwoClients;
use client_tests::{PnfsdProcess, ServerOptions, Session};
use pnfsd::admin::cli;
use serde_json::Value;

/// Every name `/metrics` served before the admin endpoint; renaming one breaks
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

/// A 1 GiB volume with the admin views on, and a short grace period (a fresh volume has none
/// to wait out, but the restart tests' figure keeps startup quick).
const ADMIN_TOML: &str = "volume_size = \"1G\"\nadmin = true\ngrace_seconds = 1\n";

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
    let TwoClients {
        server: p,
        http: admin,
        a,
        b,
    } = TwoClients::start(ADMIN_TOML, ["admin-a", "admin-b"])
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
    let v: Value =
        serde_json::from_str(&pnfsd_cli(&["status", "--admin", &addr, "--json"])).unwrap();
    assert_eq!(v["clients"], 2, "{v:#}");
    assert_eq!(v["volume"]["path"], vol.display().to_string().as_str());
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
    let admin = p.metrics_addr().expect("the metrics line");
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

/// `/clients/ID/states`, `/layouts` and `POST /clients/ID/evict`, and
/// the commands that read them, against what two clients hold: an open, a lock and an RW
/// layout of one, an open of the other, a recall in flight after the other's truncate, and
/// an eviction that takes the holder's state, record and layouts away.
#[tokio::test]
async fn states_layouts_and_eviction_follow_two_clients() {
    use client_tests::attrs::SetAttrs;
    use client_tests::callback::CbEvent;
    use client_tests::ops::{lock_type, Locker, Op};
    use client_tests::pnfs::iomode;
    use client_tests::{Compound, NfsStat, Stateid};
    use std::time::Duration;

    let TwoClients {
        server: _p,
        http: admin,
        a,
        b,
    } = TwoClients::start(
        &format!("{ADMIN_TOML}lease_seconds = 10\n"),
        ["states-a", "states-b"],
    )
    .await
    .unwrap();
    let addr = admin.to_string();
    let root = a.lookup_path("").await.unwrap();
    let f = a.create_file(&root, "held", 0o666).await.unwrap();
    a.run_ok(Compound::new().putfh(&f.fh).op(Op::Lock {
        locktype: lock_type::WRITE,
        reclaim: false,
        offset: 0,
        length: 100,
        locker: Locker::New {
            open_seqid: 0,
            open_stateid: f.stateid,
            lock_seqid: 0,
            clientid: a.clientid,
            owner: b"lock-owner-a".to_vec(),
        },
    }))
    .await
    .unwrap();
    let l = a.layoutget(&f, iomode::RW, 0, 1 << 20).await.unwrap();
    let _g = b.create_file(&root, "other", 0o644).await.unwrap();
    let f_id = b
        .getattr_fh(&f.fh, client_tests::attrs::basic())
        .await
        .unwrap()
        .fileid
        .expect("fileid");

    // a's states: one of each kind on its file, with the lock's range and the open's modes.
    let st = cli::get_json(admin, &format!("/clients/{:016x}/states", a.clientid))
        .await
        .unwrap();
    let kinds: Vec<&str> = st
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["layout", "lock", "open"], "{st:#}");
    for s in st.as_array().unwrap() {
        assert_eq!(s["fileid"], f_id, "{st:#}");
        assert_eq!(s["revoked"], Value::Null, "{st:#}");
    }
    let by_kind = |k: &str| {
        st.as_array()
            .unwrap()
            .iter()
            .find(|s| s["kind"] == k)
            .unwrap()
    };
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(by_kind("open")["stateid"], hex(&f.stateid.other).as_str());
    assert_eq!(by_kind("open")["deny"], "none", "{st:#}");
    assert_eq!(by_kind("layout")["stateid"], hex(&l.stateid.other).as_str());
    let lock_ranges = by_kind("lock")["ranges"].as_array().unwrap().clone();
    assert_eq!(lock_ranges.len(), 1, "{st:#}");
    assert!(lock_ranges[0].as_str().unwrap().starts_with("0-"), "{st:#}");
    assert!(
        lock_ranges[0].as_str().unwrap().ends_with(" write"),
        "{st:#}"
    );
    match cli::get(admin, "/clients/00000000deadbeef/states").await {
        Err(cli::CliError::Status { status, .. }) => assert_eq!(status.as_u16(), 404),
        other => panic!("unknown client: {other:?}"),
    }

    // /layouts: the file, its one holder, the RW range, where the holder came from.
    let lay = cli::get_json(admin, "/layouts").await.unwrap();
    assert_eq!(lay.as_array().unwrap().len(), 1, "{lay:#}");
    assert_eq!(lay[0]["fileid"], f_id, "{lay:#}");
    let h = &lay[0]["holders"][0];
    assert_eq!(h["client"], a.clientid, "{lay:#}");
    assert_eq!(h["layout_type"], "block", "{lay:#}");
    assert_eq!(h["address"], "127.0.0.1", "{lay:#}");
    assert_eq!(h["recall"], Value::Null, "{lay:#}");
    assert_eq!(h["fenced"], false, "{lay:#}");
    assert!(
        h["ranges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["iomode"] == "rw" && r["offset"] == 0),
        "{lay:#}"
    );
    let clients = cli::get_json(admin, "/clients").await.unwrap();
    assert_eq!(client(&clients, &a)["address"], "127.0.0.1", "{clients:#}");
    assert_eq!(
        client(&clients, &b)["address"],
        Value::Null,
        "no layout: {clients:#}"
    );

    // a commits 8 KiB (the blocks of a fresh sparse volume read as zeros); b truncates:
    // DELAY, and the recall shows with its deadline (two leases).
    a.layoutcommit_all(&f, &l, 8191).await.unwrap();
    let truncate = Compound::new()
        .putfh(&f.fh)
        .setattr(Stateid::ANONYMOUS, SetAttrs::size(0));
    assert_eq!(b.run(truncate).await.unwrap().status, NfsStat::DELAY);
    a.conn
        .callbacks
        .wait_for(Duration::from_secs(10), |e| {
            matches!(e, CbEvent::LayoutRecall { .. })
        })
        .await
        .expect("CB_LAYOUTRECALL");
    // The recall in flight, with its age: deadline and age add up to the recall window (two
    // leases of 10 s), and the age grows while a does not return the layout.
    let recall = |lay: &Value| {
        let r = &lay[0]["holders"][0]["recall"];
        let (age, left) = (r["age_seconds"].as_u64(), r["deadline_in_seconds"].as_u64());
        age.zip(left)
            .unwrap_or_else(|| panic!("a recall in flight: {lay:#}"))
    };
    let lay = cli::get_json(admin, "/layouts").await.unwrap();
    let (age, left) = recall(&lay);
    assert_eq!(age + left, 20, "{lay:#}");
    assert!(age <= 3, "sent just now: {lay:#}");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let lay = cli::get_json(admin, "/layouts").await.unwrap();
    let (later, _) = recall(&lay);
    assert!(later >= age + 2, "the recall is older: {lay:#}");

    // The tables say the same.
    let table = pnfsd_cli(&["layouts", "--admin", &addr]);
    let row = table.lines().nth(1).unwrap_or_else(|| panic!("{table}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cols[..4],
        [
            f_id.to_string().as_str(),
            &format!("{:016x}", a.clientid),
            "block",
            "127.0.0.1"
        ],
        "{table}"
    );
    assert!(row.contains(" rw"), "{table}");
    let recall_cell = row
        .split("sent ")
        .nth(1)
        .and_then(|r| r.split_once("s ago, "))
        .and_then(|(age, rest)| Some((age.parse::<u64>().ok()?, rest.split_once("s left")?.0)))
        .unwrap_or_else(|| panic!("the recall's age and deadline: {table}"));
    assert!(recall_cell.0 >= later, "{table}");
    assert_eq!(
        recall_cell.0 + recall_cell.1.parse::<u64>().unwrap(),
        20,
        "{table}"
    );
    // --json prints the view as served.
    let v: Value =
        serde_json::from_str(&pnfsd_cli(&["layouts", "--admin", &addr, "--json"])).unwrap();
    assert_eq!(v[0]["holders"][0]["client"], a.clientid, "{v:#}");
    assert!(
        v[0]["holders"][0]["recall"]["age_seconds"].is_u64(),
        "{v:#}"
    );
    let states = pnfsd_cli(&[
        "clients",
        "states",
        &format!("{:016x}", a.clientid),
        "--admin",
        &addr,
    ]);
    assert_eq!(states.lines().count(), 4, "{states}");
    for (kind, sid) in [
        ("open", hex(&f.stateid.other)),
        ("layout", hex(&l.stateid.other)),
    ] {
        let row = states
            .lines()
            .find(|r| r.split_whitespace().nth(1) == Some(kind))
            .unwrap_or_else(|| panic!("{kind} in {states}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            (cols[0], cols[2]),
            (f_id.to_string().as_str(), sid.as_str())
        );
    }
    assert!(
        states
            .lines()
            .any(|l| l.contains(" open ") && l.contains("deny none")),
        "{states}"
    );
    assert!(
        states
            .lines()
            .any(|l| l.contains(" lock ") && l.contains(" write")),
        "{states}"
    );
    let v: Value = serde_json::from_str(&pnfsd_cli(&[
        "clients",
        "states",
        &format!("{:016x}", a.clientid),
        "--admin",
        &addr,
        "--json",
    ]))
    .unwrap();
    assert_eq!(v.as_array().map(Vec::len), Some(3), "{v:#}");
    println!("{table}\n{states}");

    // Eviction: a's client, sessions and states go; its layouts are handed to expiry (and
    // fenced); a's next request is refused; b is untouched.
    let out = pnfsd_cli(&[
        "clients",
        "evict",
        &format!("{:016x}", a.clientid),
        "--admin",
        &addr,
    ]);
    assert!(out.contains("evicted"), "{out}");
    println!("{out}");
    let clients = cli::get_json(admin, "/clients").await.unwrap();
    assert_eq!(clients.as_array().unwrap().len(), 1, "{clients:#}");
    client(&clients, &b);
    assert_eq!(
        cli::get_json(admin, "/layouts").await.unwrap(),
        serde_json::json!([]),
        "the evicted client's layouts are forgotten"
    );
    let st = a.run(Compound::new()).await.unwrap().status;
    assert!(
        matches!(
            st,
            NfsStat::BADSESSION | NfsStat::STALE_CLIENTID | NfsStat::DEADSESSION
        ),
        "the evicted client's session: {}",
        st.name()
    );
    let m = cli::get(admin, "/metrics").await.unwrap();
    assert!(
        m.lines()
            .any(|l| l.starts_with("pnfsd_layout_fences_total ") && !l.ends_with(" 0")),
        "the eviction fenced the layout holder: {m}"
    );
    // Evicting it again, or a client that never was: 404 and a failing command.
    let again = std::process::Command::new(client_tests::harness::pnfsd_bin().unwrap())
        .args([
            "clients",
            "evict",
            &format!("{:016x}", a.clientid),
            "--admin",
            &addr,
        ])
        .output()
        .unwrap();
    assert!(!again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("no client"),
        "{again:?}"
    );
    b.destroy().await.unwrap();
}

/// An expiry: a client that stops renewing while it holds an open is
/// shown as a courtesy client by `/clients`, `pnfsd clients` (table and `--json`) and the
/// `pnfsd_clients{state}` gauge, while the other client, which renews, stays active; when the
/// other's conflicting OPEN takes the courtesy client's state, its open shows as revoked
/// (EXPIRED) in `/clients/ID/states` and `pnfsd clients states ID`. The state layer keeps
/// no "expired" client: one whose lease ends with no state goes at once, a courtesy client
/// goes after `courtesy_seconds` (docs/operations.md). Lease 2 s: time must pass.
#[tokio::test]
async fn an_expired_client_shows_as_courtesy_and_its_state_as_revoked() {
    use client_tests::ops::{share, OpenClaim};
    use client_tests::{Compound, NfsStat};
    use std::time::Duration;

    let TwoClients {
        server: _p,
        http: admin,
        a,
        b,
    } = TwoClients::start(
        &format!("{ADMIN_TOML}lease_seconds = 2\n"),
        ["expiry-a", "expiry-b"],
    )
    .await
    .unwrap();
    let addr = admin.to_string();
    let root = a.lookup_path("").await.unwrap();
    let _x = a.create_file(&root, "x", 0o644).await.unwrap();

    // a goes quiet; b renews until the server's tick has made a a courtesy client.
    let mut clients = Value::Null;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        b.run_ok(Compound::new()).await.unwrap();
        clients = cli::get_json(admin, "/clients").await.unwrap();
        if client(&clients, &a)["lease"] == "courtesy" {
            break;
        }
    }
    let ca = client(&clients, &a);
    assert_eq!(ca["lease"], "courtesy", "{clients:#}");
    assert!(ca["idle_seconds"].as_u64().unwrap() >= 2, "{clients:#}");
    assert_eq!(ca["states"]["opens"], 1, "kept: {clients:#}");
    assert_eq!(client(&clients, &b)["lease"], "active", "{clients:#}");

    let m = cli::get(admin, "/metrics").await.unwrap();
    for (state, n) in [("active", 1), ("courtesy", 1), ("unconfirmed", 0)] {
        let sample = format!("pnfsd_clients{{state=\"{state}\"}} {n}");
        assert!(m.lines().any(|l| l == sample), "{sample}: {m}");
    }
    let table = pnfsd_cli(&["clients", "--admin", &addr]);
    for (s, lease) in [(&a, "courtesy"), (&b, "active")] {
        let owner = String::from_utf8(s.options.owner.clone()).unwrap();
        let row = table
            .lines()
            .find(|l| l.ends_with(&owner))
            .unwrap_or_else(|| panic!("{owner} in {table}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            (cols[0], cols[1]),
            (format!("{:016x}", s.clientid).as_str(), lease),
            "{table}"
        );
    }
    let v: Value =
        serde_json::from_str(&pnfsd_cli(&["clients", "--admin", &addr, "--json"])).unwrap();
    assert_eq!(client(&v, &a)["lease"], "courtesy", "{v:#}");
    println!("{table}");

    // b opens x denying writes: a's courtesy open is in the way and is revoked as EXPIRED
    // (DELAY while the server takes it is allowed: retry).
    let mut deny = b.open_args(share::ACCESS_READ, None, OpenClaim::Null(b"x".to_vec()));
    deny.share_deny = 2; // OPEN4_SHARE_DENY_WRITE
    let mut st = NfsStat::DELAY;
    for _ in 0..50 {
        st = b
            .run(Compound::new().putfh(&root).open(deny.clone()))
            .await
            .unwrap()
            .status;
        if st != NfsStat::DELAY {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(st, NfsStat::OK);
    let clients = cli::get_json(admin, "/clients").await.unwrap();
    let ca = client(&clients, &a);
    assert_eq!(
        (&ca["states"]["opens"], &ca["states"]["revoked"]),
        (&Value::from(0), &Value::from(1)),
        "{clients:#}"
    );
    assert_eq!(client(&clients, &b)["states"]["opens"], 1, "{clients:#}");
    let id = format!("{:016x}", a.clientid);
    let st = cli::get_json(admin, &format!("/clients/{id}/states"))
        .await
        .unwrap();
    assert_eq!(st[0]["kind"], "open", "{st:#}");
    assert_eq!(st[0]["revoked"], "EXPIRED", "{st:#}");
    let states = pnfsd_cli(&["clients", "states", &id, "--admin", &addr]);
    assert!(
        states
            .lines()
            .any(|l| l.contains(" open ") && l.ends_with("revoked (EXPIRED)")),
        "{states}"
    );
    let m = cli::get(admin, "/metrics").await.unwrap();
    assert!(m.lines().any(|l| l == "pnfsd_revoked_states 1"), "{m}");
    b.destroy().await.unwrap();
}

/// `log_format = "json"`: every line the daemon logs is one JSON object
/// with a level, a target and the message, as tracing-subscriber's json format writes them.
#[tokio::test]
async fn json_log_lines_for_log_shippers() {
    let p = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some("volume_size = \"1G\"\nlog_format = \"json\"\n".into()),
        ..Default::default()
    })
    .unwrap();
    let s = Session::connect(p.addr()).await.unwrap();
    s.destroy().await.unwrap();
    let log = p.log_text();
    // The harness prefixes each line with the run it came from ("[run 1] ").
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match l.strip_prefix("[run ") {
            Some(r) => r.split_once("] ").map_or(l, |(_, rest)| rest),
            None => l,
        })
        .collect();
    assert!(lines.len() >= 2, "{log}");
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"));
        assert!(v["level"].is_string() && v["target"].is_string(), "{l}");
        assert!(v["fields"]["message"].is_string(), "{l}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.contains("\"level\":\"INFO\"") && l.contains("pnfsd ready")),
        "{log}"
    );
}
