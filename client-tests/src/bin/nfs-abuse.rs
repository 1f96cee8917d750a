//! `nfs-abuse`: the hostile clients of docs/robustness.md against a pnfsd, with the figures they
//! reach (docs/robustness.md). Each round measures a well-behaved client's SEQUENCE round trip
//! with no abuser, then with the abusers connected and stalled, interleaved; the figures
//! are medians of the rounds, with the server's RSS and threads and the load average.
#![deny(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use client_tests::abuse::{self, UnreadFlood};
use client_tests::{PnfsdProcess, ServerOptions, Session};

const USAGE: &str = "usage: nfs-abuse [OPTIONS]
  --conns N          abusive connections per round (default 50)
  --reply BYTES      reply size each abusive request asks for (default 30720)
  --rounds N         interleaved idle/abused rounds (default 5)
  --samples N        SEQUENCE round trips per measurement (default 300)
  --idle N           instead: open N idle connections with no session, then time a new
                     client's session and count the idle ones still open after --wait
  --wait SECONDS     with --idle: how long to keep them (default 5)
  --settle SECONDS   without --idle/--walkaway: how long after the abusers left the
                     server's RSS is read again (default 10)
  --walkaway N       instead: N clients each create a session, fill its slots with cached
                     replies and go without destroying anything; RSS (and with a started
                     server, the state's held bytes from /status) before, at the peak and
                     after 2.5 leases
  --slots N          with --walkaway: slots each client asks for (default 64)
  --cached BYTES     with --walkaway: ca_maxresponsesize_cached asked for (default 32768)
  --lease SECONDS    lease_seconds of the started server (default 90)
  --server HOST:PORT use a running pnfsd (give --pid for its memory and threads)
  --pid PID          its process id
  Without --server a pnfsd is started (PNFSD_BIN chooses the binary).";

struct Args {
    conns: usize,
    reply: usize,
    rounds: usize,
    samples: usize,
    idle: Option<usize>,
    wait: u64,
    settle: u64,
    walkaway: Option<usize>,
    slots: u32,
    cached: u32,
    lease: u64,
    /// The started server's admin endpoint (for `/status`).
    admin: Option<std::net::SocketAddr>,
    server: Option<std::net::SocketAddr>,
    pid: Option<u32>,
}

fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args {
        conns: 50,
        reply: 30 << 10,
        rounds: 5,
        samples: 300,
        idle: None,
        wait: 5,
        settle: 10,
        walkaway: None,
        slots: 64,
        cached: 32 << 10,
        lease: 90,
        admin: None,
        server: None,
        pid: None,
    };
    while let Some(x) = it.next() {
        let mut val = |n: &str| it.next().ok_or(format!("{n} needs a value"));
        let num = |n: &str, v: String| v.parse::<usize>().map_err(|e| format!("{n}: {e}"));
        match x.as_str() {
            "--conns" => a.conns = num("--conns", val("--conns")?)?,
            "--reply" => a.reply = num("--reply", val("--reply")?)?,
            "--rounds" => a.rounds = num("--rounds", val("--rounds")?)?.max(1),
            "--samples" => a.samples = num("--samples", val("--samples")?)?.max(1),
            "--idle" => a.idle = Some(num("--idle", val("--idle")?)?),
            "--wait" => a.wait = num("--wait", val("--wait")?)? as u64,
            "--settle" => a.settle = num("--settle", val("--settle")?)? as u64,
            "--walkaway" => a.walkaway = Some(num("--walkaway", val("--walkaway")?)?),
            "--slots" => a.slots = num("--slots", val("--slots")?)? as u32,
            "--cached" => a.cached = num("--cached", val("--cached")?)? as u32,
            "--lease" => a.lease = (num("--lease", val("--lease")?)? as u64).max(1),
            "--server" => {
                a.server = Some(
                    val("--server")?
                        .parse()
                        .map_err(|e| format!("--server: {e}"))?,
                )
            }
            "--pid" => a.pid = Some(num("--pid", val("--pid")?)? as u32),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(a)
}

fn stats(pid: Option<u32>) -> String {
    match pid.map(abuse::proc_stats) {
        Some(Ok(s)) => format!(
            "rss {:.1} MB threads {}",
            s.rss_kib as f64 / 1024.0,
            s.threads
        ),
        _ => "rss ? threads ?".into(),
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn unread(a: &Args, addr: std::net::SocketAddr) -> Result<(), String> {
    let e = |e: client_tests::ClientError| e.to_string();
    let good = Session::connect(addr).await.map_err(e)?;
    abuse::sequence_rtts(&good, 50).await.map_err(e)?;
    println!(
        "before: {} load {} ({} abusive connections, {} byte replies, {} rounds of {} samples)",
        stats(a.pid),
        abuse::loadavg(),
        a.conns,
        a.reply,
        a.rounds,
        a.samples
    );
    let (mut idle_m, mut abused_m) = (vec![], vec![]);
    for r in 0..a.rounds {
        let mut idle = abuse::sequence_rtts(&good, a.samples).await.map_err(e)?;
        let idle_med = abuse::median(&mut idle);
        let t0 = Instant::now();
        let mut flood = UnreadFlood::start(addr, a.conns, a.reply)
            .await
            .map_err(e)?;
        let stalled = flood
            .wait_stalled(Duration::from_millis(500), Duration::from_secs(60))
            .await;
        let peak = stats(a.pid);
        let mut abused = abuse::sequence_rtts(&good, a.samples).await.map_err(e)?;
        let abused_med = abuse::median(&mut abused);
        println!(
            "round {r}: idle median {:.0} us p99 {:.0} us | abused median {:.0} us p99 {:.0} us | \
             ratio {:.2} | flood {} requests of {} bytes, {} after {:.1} s | {peak} | load {}",
            us(idle_med),
            us(abuse::percentile(&idle, 99)),
            us(abused_med),
            us(abuse::percentile(&abused, 99)),
            abused_med.as_secs_f64() / idle_med.as_secs_f64(),
            flood.sent.load(std::sync::atomic::Ordering::Relaxed),
            flood.request_len,
            if stalled.is_some() {
                "stalled"
            } else {
                "still read"
            },
            t0.elapsed().as_secs_f64(),
            abuse::loadavg()
        );
        flood.stop();
        drop(flood);
        idle_m.push(idle_med);
        abused_m.push(abused_med);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (i, b) = (abuse::median(&mut idle_m), abuse::median(&mut abused_m));
    println!(
        "median of rounds: idle {:.0} us, abused {:.0} us, ratio {:.2} (goal <= 2)",
        us(i),
        us(b),
        b.as_secs_f64() / i.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_secs(a.settle)).await;
    println!(
        "{} s after the abusers left: {} load {}",
        a.settle,
        stats(a.pid),
        abuse::loadavg()
    );
    Ok(())
}

async fn idle(a: &Args, n: usize, addr: std::net::SocketAddr) -> Result<(), String> {
    println!("before: {} load {}", stats(a.pid), abuse::loadavg());
    let conns = abuse::idle_connections(addr, n).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!(
        "{n} idle connections: {} connected, {} open; {}",
        conns.len(),
        abuse::open_count(&conns).await,
        stats(a.pid)
    );
    let t = Instant::now();
    let s = tokio::time::timeout(Duration::from_secs(30), Session::connect(addr)).await;
    match s {
        Ok(Ok(_)) => println!(
            "a new client's session: {:.1} ms",
            t.elapsed().as_secs_f64() * 1e3
        ),
        Ok(Err(e)) => println!("a new client's session failed: {e}"),
        Err(_) => println!("a new client's session: no answer in 30 s"),
    }
    tokio::time::sleep(Duration::from_secs(a.wait)).await;
    println!(
        "after {} s: {} of the idle connections open; {}",
        a.wait,
        abuse::open_count(&conns).await,
        stats(a.pid)
    );
    Ok(())
}

/// The state's held bytes from the admin `/status` (`client_state`), when it has them.
async fn held(a: &Args) -> String {
    let Some(admin) = a.admin else {
        return "held ?".into();
    };
    match pnfsd::admin::cli::get_json(admin, "/status").await {
        Ok(v) => match v.get("client_state") {
            Some(c) => format!(
                "clients {} sessions {} reply cache {} B (reserved {} B)",
                c["clients"], c["sessions"], c["reply_cache_bytes"], c["reserved_bytes"]
            ),
            None => "held ? (no client_state in /status)".into(),
        },
        Err(e) => format!("held ? ({e})"),
    }
}

async fn walkaway(a: &Args, n: usize, addr: std::net::SocketAddr) -> Result<(), String> {
    let e = |e: client_tests::ClientError| e.to_string();
    let setup = Session::connect(addr).await.map_err(e)?;
    let fh = abuse::reply_file(&setup, a.cached as usize)
        .await
        .map_err(e)?;
    setup.destroy().await.map_err(e)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!(
        "before: {} | {} | load {} ({n} clients x {} slots x {} B cached, lease {} s)",
        stats(a.pid),
        held(a).await,
        abuse::loadavg(),
        a.slots,
        a.cached,
        a.lease
    );
    let t = Instant::now();
    let w = abuse::walk_away_clients(addr, n, a.slots, a.cached, &fh)
        .await
        .map_err(e)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    println!(
        "peak: {} | {} | load {} | {} sessions ({} refused), {} slots, {:.1} MB of replies \
         cached, in {:.1} s",
        stats(a.pid),
        held(a).await,
        abuse::loadavg(),
        w.sessions,
        w.refused,
        w.slots,
        w.cached_bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    tokio::time::sleep(Duration::from_millis(a.lease * 2500)).await;
    println!(
        "after 2.5 leases: {} | {} | load {}",
        stats(a.pid),
        held(a).await,
        abuse::loadavg()
    );
    Ok(())
}

fn main() -> ExitCode {
    let a = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let res = rt.block_on(async {
        let started;
        let mut admin = None;
        let (addr, pid) = match a.server {
            Some(s) => (s, a.pid),
            None => {
                started = PnfsdProcess::start_with(ServerOptions {
                    config_toml: Some(format!("lease_seconds = {}\nadmin = true\n", a.lease)),
                    extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
                })
                .map_err(|e| e.to_string())?;
                admin = started.metrics_addr();
                (started.addr(), started.pid())
            }
        };
        let a = Args { pid, admin, ..a };
        match (a.idle, a.walkaway) {
            (Some(n), _) => idle(&a, n, addr).await,
            (None, Some(n)) => walkaway(&a, n, addr).await,
            (None, None) => unread(&a, addr).await,
        }
    });
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nfs-abuse: {e}");
            ExitCode::FAILURE
        }
    }
}
