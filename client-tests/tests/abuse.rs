//! Hostile clients against the real daemon (docs/robustness.md): what they may cost
//! is bounded, and a well-behaved client still gets in. Each test names the figure the same
//! abuse reached before the bounds (measured with `nfs-abuse` on the daemon of main d301194).
//! Latency under abuse is a benchmark figure (`nfs-abuse`), not asserted here.

use std::time::Duration;

use client_tests::abuse::{self, UnreadFlood};
use client_tests::{Compound, PnfsdProcess, ServerOptions, Session};
use pnfsd::admin::cli;
use serde_json::Value;

fn stats(srv: &PnfsdProcess) -> abuse::ProcStats {
    abuse::proc_stats(srv.pid().expect("server running")).unwrap()
}

/// 20 connections flood 180-byte requests for 30 KiB replies (retries answered from the
/// reply cache) and never read. Before: 823 MB RSS and 516 threads. Now each connection
/// is stopped after its reply budget (1 MiB) and a few replies in flight, and COMPOUNDs run
/// on at most 64 threads; a well-behaved session still gets its answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_nobody_reads_cost_bounded_memory_and_threads() {
    let srv = PnfsdProcess::start().unwrap();
    let good = Session::connect(srv.addr()).await.unwrap();
    let before = stats(&srv);
    let flood = UnreadFlood::start(srv.addr(), 20, 30 << 10).await.unwrap();
    let sent = flood
        .wait_stalled(Duration::from_millis(500), Duration::from_secs(120))
        .await;
    let peak = stats(&srv);
    assert!(
        sent.is_some(),
        "the server kept reading a peer that reads nothing"
    );
    good.run_ok(Compound::new().putrootfh().getfh())
        .await
        .unwrap();
    let grown_mb = (peak.rss_kib.saturating_sub(before.rss_kib)) / 1024;
    eprintln!("before {before:?}, stalled {peak:?}: +{grown_mb} MB");
    // 20 × (1 MiB budget + the replies of the COMPOUNDs running when it filled + read
    // buffers), with room for the allocator.
    assert!(grown_mb <= 100, "RSS grew by {grown_mb} MB");
    assert!(peak.threads <= 64 + 16, "{} threads", peak.threads);
}

/// 50 connections that never read their replies grow the daemon by ~100 MB. Before, 10 s
/// after they left glibc still held 64–91 MB of that above the idle RSS (its arenas keep
/// freed pages); now pnfsd asks it to give them back when a burst of connections ends
/// (rpc/trim.rs), and at least two thirds of the growth goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_falls_back_after_the_abusers_leave() {
    let srv = PnfsdProcess::start().unwrap();
    let good = Session::connect(srv.addr()).await.unwrap();
    let before = stats(&srv);
    let mut flood = UnreadFlood::start(srv.addr(), 50, 30 << 10).await.unwrap();
    let stalled = flood
        .wait_stalled(Duration::from_millis(500), Duration::from_secs(120))
        .await;
    assert!(stalled.is_some(), "the flood never stalled");
    let peak = stats(&srv);
    flood.stop();
    drop(flood);
    let grown = peak.rss_kib.saturating_sub(before.rss_kib);
    assert!(grown > 30 << 10, "the flood grew RSS by {grown} KiB only");
    let mut after = peak;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = stats(&srv);
        if after.rss_kib.saturating_sub(before.rss_kib) <= grown / 3 {
            break;
        }
    }
    good.run_ok(Compound::new().putrootfh().getfh())
        .await
        .unwrap();
    eprintln!("before {before:?}, stalled {peak:?}, after {after:?}");
    let kept = after.rss_kib.saturating_sub(before.rss_kib);
    assert!(
        kept <= grown / 3,
        "15 s after the abusers left, {} of the {} MB they grew are still held",
        kept >> 10,
        grown >> 10
    );
}

/// Past the file-descriptor limit, idle connections with no session make room for a new
/// client instead of locking it out, and the failed accepts are logged once per 10 s.
/// Before: under a 1,024-file limit, 1,100 idle sockets locked new clients out for ~10 s
/// and the accept error was logged 218 times in 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_past_the_file_limit_do_not_lock_clients_out() {
    let srv = PnfsdProcess::start().unwrap();
    let pid = srv.pid().unwrap().to_string();
    // Lower the running server's limit (root may; CI runs as root).
    let out = std::process::Command::new("prlimit")
        .args(["--pid", &pid, "--nofile=128:128"])
        .output()
        .expect("prlimit (util-linux)");
    assert!(out.status.success(), "prlimit: {out:?}");
    let idle = abuse::idle_connections(srv.addr(), 200).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let t = std::time::Instant::now();
    let s = tokio::time::timeout(Duration::from_secs(5), Session::connect(srv.addr()))
        .await
        .expect("a new client was locked out")
        .unwrap();
    eprintln!("session after {:?}", t.elapsed());
    s.run_ok(Compound::new().putrootfh().getfh()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = srv.log_text();
    let lines = log.matches("accept failed").count();
    assert!(lines <= 2, "{lines} accept-failure lines:\n{log}");
    drop(idle);
}

/// Connections with no session that say nothing are closed after `idle_timeout_seconds`;
/// a session's connection is not. Before: 2,000 idle connections were all kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_without_a_session_are_closed() {
    let srv = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some("idle_timeout_seconds = 1\n".into()),
        ..Default::default()
    })
    .unwrap();
    let good = Session::connect(srv.addr()).await.unwrap();
    let idle = abuse::idle_connections(srv.addr(), 50).await;
    assert_eq!(idle.len(), 50);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(abuse::open_count(&idle).await, 0);
    // Idle as long, but in a session: still served.
    good.run_ok(Compound::new().putrootfh().getfh())
        .await
        .unwrap();
}

/// Oversize records from 200 connections: one WARN line per 10 s, with the count of those
/// left out. Before: one line each (6,750 in one campaign).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_records_do_not_flood_the_log() {
    let srv = PnfsdProcess::start().unwrap();
    for _ in 0..200 {
        let c = client_tests::Connection::connect(srv.addr()).await.unwrap();
        // A fragment header announcing 64 MiB: refused at the header.
        c.send_bytes(&(0x8000_0000u32 | (64 << 20)).to_be_bytes())
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log = srv.log_text();
    let lines = log.matches("closing connection").count();
    assert!((1..=2).contains(&lines), "{lines} lines:\n{log}");
}

/// The admin `/status` of `srv` (started with `admin = true` and `--metrics-listen`).
async fn status(srv: &PnfsdProcess) -> Value {
    let admin = srv.metrics_addr().expect("the metrics listener in the log");
    cli::get_json(admin, "/status").await.unwrap()
}

/// 200 clients each create a session asking for 64 slots of 32 KiB cached replies, fill
/// every slot and walk away. Before: 393 MB, all of it still there after 2.5 leases (an
/// expired client without state was kept 24 h as a courtesy client; nothing bounded the
/// sessions). Now the reply caches are sized from `max_client_memory` at CREATE_SESSION,
/// and a client without state goes at lease end with its sessions: what the state holds
/// (`/status` `client_state`; RSS is the allocator's and noisy, so only reported) returns to
/// its idle level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn walk_away_clients_are_bounded_and_go_at_lease_end() {
    const LEASE: u64 = 4;
    const BUDGET: u64 = 64 << 20;
    let srv = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(format!(
            "lease_seconds = {LEASE}\nadmin = true\nmax_client_memory = \"{}M\"\n",
            BUDGET >> 20
        )),
        extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
    })
    .unwrap();
    let setup = Session::connect(srv.addr()).await.unwrap();
    let fh = abuse::reply_file(&setup, 32 << 10).await.unwrap();
    setup.destroy().await.unwrap();
    let idle = status(&srv).await;
    let rss_idle = stats(&srv);
    let w = abuse::walk_away_clients(srv.addr(), 200, 64, 32 << 10, &fh)
        .await
        .unwrap();
    let peak = status(&srv).await;
    let rss_peak = stats(&srv);
    eprintln!("walk-away: {w:?}\nidle {idle:#}\npeak {peak:#}");
    // Each client got a session (fewer or smaller slots when the budget ran short) or
    // NFS4ERR_DELAY, and the caches never held more than the budget.
    assert_eq!(w.sessions + w.refused, 200, "{w:?}");
    assert!(w.sessions >= 1, "{w:?}");
    let cs = &peak["client_state"];
    let held = cs["reply_cache_bytes"]
        .as_u64()
        .expect("client_state in /status");
    let reserved = cs["reserved_bytes"].as_u64().unwrap();
    assert!(reserved <= BUDGET, "{cs:#}");
    assert!(held <= reserved, "{cs:#}");
    // 2.5 leases later (the server expires leases on its 1 s tick) nothing is left.
    tokio::time::sleep(Duration::from_millis(LEASE * 2500 + 1500)).await;
    let after = status(&srv).await;
    let rss_after = stats(&srv);
    eprintln!(
        "RSS: idle {} MB, peak {} MB, after 2.5 leases {} MB (load {})\nafter {after:#}",
        rss_idle.rss_kib / 1024,
        rss_peak.rss_kib / 1024,
        rss_after.rss_kib / 1024,
        abuse::loadavg()
    );
    assert_eq!(after["clients"], 0, "{after:#}");
    assert_eq!(after["client_state"]["sessions"], 0, "{after:#}");
    assert_eq!(
        after["client_state"]["reply_cache_bytes"], idle["client_state"]["reply_cache_bytes"],
        "{after:#}"
    );
    assert_eq!(after["client_state"]["reserved_bytes"], 0, "{after:#}");
    // The budget is free again: a client refused with DELAY would now get all it asks for.
    let again = abuse::walk_away_clients(srv.addr(), 1, 64, 32 << 10, &fh)
        .await
        .unwrap();
    assert_eq!((again.sessions, again.slots), (1, 64), "{again:?}");
}
