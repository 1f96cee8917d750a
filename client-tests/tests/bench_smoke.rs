//! Smoke test of `pnfs-bench`: a tiny run of every workload must finish and write a
//! JSON file with every mode's figures positive and the server's counters present. It checks
//! that the bench runs, not how fast anything is (speed lives in the bench's own ratios).

use std::process::Command;

/// Runs `pnfs-bench <args> --json <tmp> <tail>`, checks that it succeeded, and returns its
/// stdout and the JSON it wrote.
fn bench(args: &[&str], tail: &[&str]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench.json");
    let run = Command::new(env!("CARGO_BIN_EXE_pnfs-bench"))
        .args(args)
        .arg("--json")
        .arg(&out)
        .args(tail)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "pnfs-bench failed:\n{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    (stdout, std::fs::read_to_string(&out).unwrap())
}

/// The number after `"key": ` at every occurrence of `key` in `json`.
fn values(json: &str, key: &str) -> Vec<f64> {
    let pat = format!("\"{key}\": ");
    json.match_indices(&pat)
        .map(|(i, _)| {
            let rest = &json[i + pat.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
                .unwrap_or(rest.len());
            rest[..end].parse::<f64>().unwrap_or(f64::NAN)
        })
        .collect()
}

#[test]
fn tiny_run_writes_json_with_positive_figures() {
    let (stdout, json) = bench(&["--rounds", "1", "--scale", "64"], &[]);
    assert!(stdout.contains("pnfsd ÷ limit"), "no table: {stdout}");
    for w in [
        "overwrite-1",
        "overwrite-4",
        "small",
        "newfiles",
        "meta-1",
        "meta-8",
    ] {
        assert!(
            json.contains(&format!("\"name\": \"{w}\"")),
            "{w} missing: {json}"
        );
    }
    for m in ["pnfsd", "sync", "limit", "device"] {
        assert_eq!(
            json.matches(&format!("\"{m}\": {{")).count(),
            4,
            "{m}: {json}"
        );
    }
    for m in ["sync-export", "async-export"] {
        assert_eq!(
            json.matches(&format!("\"{m}\": {{")).count(),
            2,
            "{m}: {json}"
        );
    }
    for key in [
        "wall_ms",
        "commits_per_s",
        "p50_us",
        "p99_us",
        "commits_per_round",
    ] {
        let v = values(&json, key);
        assert_eq!(v.len(), 20, "{key}: {json}");
        assert!(v.iter().all(|x| *x > 0.0), "{key} not positive: {v:?}");
    }
    // Ratios: the layout workloads first, then `meta` (its own ratio only; the others null).
    for key in ["pnfsd_over_limit", "pnfsd_over_device", "sync_over_pnfsd"] {
        let v = values(&json, key);
        assert_eq!(v.len(), 6);
        assert!(v[..4].iter().all(|x| *x > 0.0), "{key}: {v:?}");
    }
    let v = values(&json, "sync_export_over_async");
    assert!(v.len() == 6 && v[4] > 0.0 && v[5] > 0.0, "{v:?}");
    // The server's counters, per mode (modes in the order pnfsd, limit, sync, device for the
    // layout workloads, then sync-export, async-export for each `meta`): every LAYOUTCOMMIT
    // mode reached its server and made each commit durable somehow; the others made none.
    let commits = values(&json, "layoutcommits");
    assert_eq!(commits.len(), 20, "{json}");
    let logs = values(&json, "forces_that_wrote_per_commit");
    let issued = values(&json, "data_flushes_issued_per_commit");
    let joined = values(&json, "data_flushes_joined_per_commit");
    for w in 0..4 {
        for m in 0..4 {
            let i = w * 4 + m;
            if m == 0 || m == 2 {
                assert!(commits[i] > 0.0, "workload {w} mode {m}: {commits:?}");
                // Each commit waited for a log write or a data flush (issued or joined).
                assert!(
                    (logs[i] + issued[i] + joined[i] - 1.0).abs() < 0.01,
                    "commits without exactly one log write or flush: {logs:?} {issued:?} {joined:?}"
                );
            } else {
                assert_eq!(commits[i], 0.0, "workload {w} mode {m}: {commits:?}");
            }
        }
    }
    // `newfiles` (the fourth) counts groups of concurrent LAYOUTCOMMITs for pnfsd and sync.
    let groups = values(&json, "commit_groups");
    assert_eq!(groups.len(), 20);
    assert!(groups[12] >= 1.0 && groups[14] >= 1.0, "{groups:?}");
    assert!(groups[..12].iter().all(|g| g.is_nan()), "{groups:?}");
    // A chain of overlapping commits holds at least one set of commits concurrent at once.
    let sets = values(&json, "commit_sets");
    assert!(
        sets[12] >= groups[12] && sets[14] >= groups[14],
        "{sets:?} {groups:?}"
    );
    // `meta` on a sync export wrote the log; the log counters are per mode.
    let log_writes = values(&json, "log_writes");
    assert!(
        log_writes[16] > 0.0 && log_writes[18] > 0.0,
        "{log_writes:?}"
    );
}

/// `--server` against a pnfsd started here (with its metrics endpoint), writing through its
/// NVMe/TCP target (`--nvme`): the modes that need a second server are skipped with a note,
/// and the server counters still come from the endpoint.
#[test]
fn running_server_over_nvme() {
    let p = client_tests::PnfsdProcess::start_with(client_tests::ServerOptions {
        config_toml: Some("volume_size = \"1G\"\ngrace_seconds = 1\n".into()),
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
    })
    .unwrap();
    let log = p.log_text();
    let at = log.find("metrics on http://").unwrap() + "metrics on http://".len();
    let metrics = log[at..].split('/').next().unwrap().to_string();
    let (addr, nvme_addr) = (p.addr().to_string(), p.nvme_addr().to_string());
    let args = [
        "--rounds",
        "1",
        "--scale",
        "64",
        "--nvme",
        "--server",
        &addr,
        "--nvme-addr",
        &nvme_addr,
        "--metrics",
        &metrics,
    ];
    let (_, json) = bench(&args, &["overwrite-1", "meta-1"]);
    assert!(!json.contains("\"sync\": {") && !json.contains("\"async-export\": {"));
    assert!(json.contains("sync skipped") && json.contains("async-export skipped"));
    assert!(json.contains("NVMe/TCP Write"), "{json}");
    let commits = values(&json, "layoutcommits");
    // overwrite-1: pnfsd, limit, device; meta-1: sync-export.
    assert_eq!(commits.len(), 4, "{json}");
    assert!(commits[0] > 0.0 && commits[1] == 0.0, "{commits:?}");
}
