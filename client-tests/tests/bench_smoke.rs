//! Smoke test of `pnfs-bench` (issue 7): a tiny run of every workload must finish and write a
//! JSON file with every mode's figures positive and the server's counters present. It checks
//! that the bench runs, not how fast anything is (speed lives in the bench's own ratios).

use std::process::Command;

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
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bench.json");
    let run = Command::new(env!("CARGO_BIN_EXE_pnfs-bench"))
        .args(["--rounds", "1", "--scale", "64", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "pnfs-bench failed:\n{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("pnfsd ÷ limit"), "no table: {stdout}");
    let json = std::fs::read_to_string(&out).unwrap();
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
    // The server's own counters: every workload's LAYOUTCOMMITs reached both servers, and
    // each made at least one log write or data flush (it is durable somehow).
    let commits = values(&json, "layoutcommits");
    assert_eq!(commits.len(), 8, "{json}");
    assert!(commits.iter().all(|c| *c > 0.0), "{commits:?}");
    let logs = values(&json, "log_writes_per_commit");
    let flushes = values(&json, "data_flushes_per_commit");
    assert!(
        logs.iter().zip(&flushes).all(|(l, f)| l + f > 0.0),
        "a mode made commits durable without a log write or a flush: {logs:?} {flushes:?}"
    );
}
