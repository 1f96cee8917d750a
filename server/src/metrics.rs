//! The operator's metrics endpoint (issue 7): with `metrics_listen` set (off by default),
//! `pnfsd serve` answers `GET /metrics` in the Prometheus text format (version 0.0.4) with
//! the pNFS layout counters (`nfs4::layouts::PnfsMetrics`), the metadata log's counters
//! (`metalog::LogCounters`) and the data-volume flush sharing (`FlushSeq`). pnfs-bench reads
//! it before and after each mode; anything that speaks HTTP can too (`curl`).
//!
//! HTTP/1 by hyper on the daemon's tokio runtime (docs/operations.md says why hyper), the
//! request head bounded to [`MAX_HEAD`] bytes and [`READ_TIMEOUT`]. A scrape only reads
//! atomics and one short mutex (no store lock, no I/O), so it never slows an NFS operation
//! down. With `admin = true` the same listener serves the admin views (crate::admin). Bind
//! it to the loopback or a management network: it has no authentication.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use metalog::LogCounters;
use tokio::net::{TcpListener, TcpStream};

use crate::nfs4::layouts::PnfsCounters;
use crate::server::Server;

/// A request head larger than this is refused (a GET line and a few headers fit easily).
pub const MAX_HEAD: usize = 8192;
/// A client that sends no complete request head within this is dropped.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more are closed at accept (a scraper needs one).
pub const MAX_CONNECTIONS: usize = 16;

/// Every counter the endpoint shows, read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub pnfs: PnfsCounters,
    /// The embedded target's fences and host admission (nfs4/layouts/hosts.rs).
    pub hosts: crate::nfs4::layouts::hosts::HostCounters,
    pub log: LogCounters,
    /// Data-volume flushes of every store caller: (issued, joined another caller's).
    pub data_flushes: (u64, u64),
    /// The metadata log shut down after a failed write or flush: changes are refused.
    pub log_shut_down: bool,
    /// Delegations granted, recalled and revoked (issue 15).
    pub delegs: crate::nfs4::state::DelegCounters,
}

impl Snapshot {
    pub fn of(srv: &Server) -> Snapshot {
        Snapshot {
            pnfs: srv.layouts.metrics.snapshot(),
            hosts: srv.layouts.hosts.metrics.snapshot(),
            log: srv.store.log().counters(),
            data_flushes: srv.store.data_flush_counts(),
            log_shut_down: srv.store.log().shutdown_error().is_some(),
            delegs: srv.state.deleg_counters(),
        }
    }
}

fn counter(out: &mut String, name: &str, help: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} counter");
    let _ = writeln!(out, "{name} {value}");
}

fn seconds(ns: u64) -> String {
    format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000)
}

/// The Prometheus text exposition of `s` (every metric a counter, names ending in `_total`).
pub fn render(s: &Snapshot) -> String {
    let (p, l) = (&s.pnfs, &s.log);
    let mut o = String::with_capacity(4096);
    let c = &mut o;
    counter(
        c,
        "pnfsd_layoutgets_total",
        "LAYOUTGET operations.",
        p.layoutgets,
    );
    counter(
        c,
        "pnfsd_layoutget_seconds_total",
        "Time spent in LAYOUTGET handlers.",
        seconds(p.layoutget_ns),
    );
    counter(
        c,
        "pnfsd_layoutget_errors_total",
        "LAYOUTGETs answered with an error.",
        p.layoutget_errors,
    );
    counter(
        c,
        "pnfsd_layoutcommits_total",
        "LAYOUTCOMMIT operations.",
        p.layoutcommits,
    );
    counter(
        c,
        "pnfsd_layoutcommit_seconds_total",
        "Time spent in LAYOUTCOMMIT handlers (server time per commit = this / layoutcommits).",
        seconds(p.layoutcommit_ns),
    );
    counter(
        c,
        "pnfsd_layoutcommit_errors_total",
        "LAYOUTCOMMITs answered with an error.",
        p.layoutcommit_errors,
    );
    counter(
        c,
        "pnfsd_layoutcommit_log_forces_wrote_total",
        "LAYOUTCOMMITs whose log force waited for a log write (several can share one write).",
        p.commit_log_writes,
    );
    counter(
        c,
        "pnfsd_layoutcommit_data_flushes_issued_total",
        "Data-volume flushes LAYOUTCOMMITs issued themselves.",
        p.commit_data_flushes,
    );
    counter(
        c,
        "pnfsd_layoutcommit_data_flushes_joined_total",
        "LAYOUTCOMMITs served by a data-volume flush another caller issued (flush sharing).",
        p.commit_data_flushes_joined,
    );
    counter(
        c,
        "pnfsd_layoutcommit_converted_blocks_total",
        "Unwritten blocks LAYOUTCOMMIT converted to written.",
        p.commit_converted_blocks,
    );
    counter(
        c,
        "pnfsd_layoutreturns_total",
        "LAYOUTRETURN operations.",
        p.layoutreturns,
    );
    counter(
        c,
        "pnfsd_layout_recalls_sent_total",
        "CB_LAYOUTRECALLs sent.",
        p.recalls_sent,
    );
    counter(c, "pnfsd_layout_fences_total", "Clients fenced.", p.fences);
    counter(
        c,
        "pnfsd_layout_fences_without_mechanism_total",
        "Fences with no fence command, embedded target or SCSI fencer: nothing was done.",
        p.fences_without_mechanism,
    );
    let h = &s.hosts;
    counter(
        c,
        "pnfsd_nvme_fences_disconnect_total",
        "Block-layout clients fenced by disconnecting their hosts at the embedded target.",
        h.fences_disconnect,
    );
    counter(
        c,
        "pnfsd_nvme_fences_shared_host_total",
        "Target fences refused: other clients share the address and no [nvme_hosts] entry.",
        h.fences_shared_host,
    );
    counter(
        c,
        "pnfsd_nvme_hosts_disconnected_total",
        "Controllers the target fences disconnected.",
        h.hosts_disconnected,
    );
    counter(
        c,
        "pnfsd_nvme_connects_refused_total",
        "NVMe Connects refused because the host's NFS client is fenced.",
        h.connects_refused,
    );
    counter(
        c,
        "pnfsd_layoutget_allocations_total",
        "RW LAYOUTGETs that allocated blocks (each forced the log once).",
        p.layoutget_allocations,
    );
    counter(
        c,
        "pnfsd_layoutget_allocated_blocks_total",
        "Blocks LAYOUTGET allocated, speculative preallocation included.",
        p.layoutget_allocated_blocks,
    );
    counter(
        c,
        "pnfsd_layout_trimmed_blocks_total",
        "Never-committed unwritten blocks past EOF freed after the last RW layout went.",
        p.trimmed_blocks,
    );
    counter(
        c,
        "pnfsd_log_commits_total",
        "Metadata log transactions committed.",
        l.commits,
    );
    counter(
        c,
        "pnfsd_log_forces_total",
        "Metadata log forces.",
        l.forces,
    );
    counter(
        c,
        "pnfsd_log_forces_wrote_total",
        "Log forces whose wait included a log write that flushed the device (XFS log_flushed).",
        l.forces_that_wrote,
    );
    counter(
        c,
        "pnfsd_log_forces_joined_total",
        "Log forces that did not (already durable, or joined a write that began before them).",
        l.forces.saturating_sub(l.forces_that_wrote),
    );
    counter(
        c,
        "pnfsd_log_writes_total",
        "Log records written (checkpoints, tail and unmount records).",
        l.log_writes,
    );
    counter(
        c,
        "pnfsd_log_bytes_total",
        "Bytes of log records written.",
        l.log_bytes,
    );
    counter(
        c,
        "pnfsd_log_checkpoints_total",
        "Checkpoints written.",
        l.checkpoints,
    );
    counter(
        c,
        "pnfsd_log_flushes_issued_total",
        "Log-device flushes the log issued.",
        l.flushes_issued,
    );
    counter(
        c,
        "pnfsd_log_flushes_shared_total",
        "Log-device flush requests served by another caller's flush.",
        l.flushes_shared,
    );
    counter(
        c,
        "pnfsd_log_wait_seconds_total",
        "Time callers waited in log forces and for log space.",
        seconds(l.wait_ns),
    );
    counter(
        c,
        "pnfsd_log_writebacks_total",
        "Metadata write-backs that moved the log tail.",
        l.writebacks,
    );
    counter(
        c,
        "pnfsd_data_flushes_issued_total",
        "Data-volume flushes issued by the store (LAYOUTCOMMIT, COMMIT, stable WRITE).",
        s.data_flushes.0,
    );
    counter(
        c,
        "pnfsd_data_flushes_joined_total",
        "Store data-volume flush requests served by another caller's flush.",
        s.data_flushes.1,
    );
    counter(
        c,
        "pnfsd_delegations_granted_total",
        "Delegations granted by OPEN.",
        s.delegs.granted,
    );
    counter(
        c,
        "pnfsd_delegations_recalled_total",
        "Delegations recalled (a CB_RECALL queued for a conflicting access).",
        s.delegs.recalled,
    );
    counter(
        c,
        "pnfsd_delegations_revoked_total",
        "Recalled delegations revoked for not being returned within a lease.",
        s.delegs.revoked,
    );
    let _ = writeln!(
        c,
        "# HELP pnfsd_log_shut_down 1 once a failed log write or flush shut the metadata log \
         down: changes are refused until pnfsd restarts (the log names the device).\n\
         # TYPE pnfsd_log_shut_down gauge\npnfsd_log_shut_down {}",
        u8::from(s.log_shut_down)
    );
    o
}

/// What the listener serves: the counters always, the admin views when `admin` is set.
pub struct Endpoint {
    pub srv: Arc<Server>,
    /// `admin = true` (issue 16): `/status` and `/clients` answer; 404 otherwise.
    pub admin: Option<crate::admin::AdminInfo>,
}

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// One request: the method and path decide; headers and body are not read.
async fn answer(method: &Method, path: &str, ep: Arc<Endpoint>) -> Reply {
    let post = method == Method::POST;
    if method != Method::GET && !(post && ep.admin.is_some()) {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "only GET is served (and POST for the admin actions)\n".into(),
        );
    }
    if path == "/metrics" && !post {
        return reply(StatusCode::OK, TEXT, render(&Snapshot::of(&ep.srv)));
    }
    let Some(info) = ep.admin.clone() else {
        return reply(
            StatusCode::NOT_FOUND,
            TEXT,
            "only /metrics is served (admin = true in the configuration adds /status and /clients)\n"
                .into(),
        );
    };
    let (srv, path_owned) = (ep.srv.clone(), path.to_string());
    // The views read the store and the state under their locks, an eviction fences: not on
    // a runtime worker.
    let view = tokio::task::spawn_blocking(move || {
        if post {
            crate::admin::action(&path_owned, &srv)
        } else {
            crate::admin::view(&path_owned, &srv, &info)
        }
    });
    match view.await {
        Ok(Some(crate::admin::Answer::Json(json))) => {
            reply(StatusCode::OK, "application/json", json)
        }
        Ok(Some(crate::admin::Answer::NotFound(text))) => reply(StatusCode::NOT_FOUND, TEXT, text),
        Ok(None) => reply(
            StatusCode::NOT_FOUND,
            TEXT,
            format!("served: /metrics {}\n", crate::admin::PATHS.join(" ")),
        ),
        Err(_) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            TEXT,
            "view failed\n".into(),
        ),
    }
}

/// Serves one connection with hyper's HTTP/1 server (keep-alive allowed; the head bounded to
/// [`MAX_HEAD`] bytes and [`READ_TIMEOUT`]).
async fn one(sock: TcpStream, ep: Arc<Endpoint>) {
    let service = service_fn(move |req: Request<Incoming>| {
        let ep = ep.clone();
        async move {
            let (method, path) = (req.method().clone(), req.uri().path().to_string());
            Ok::<_, std::convert::Infallible>(answer(&method, &path, ep).await)
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        // One request per connection, as a scraper does: an idle client cannot keep a slot.
        .keep_alive(false)
        // Header names as the HTTP/1.0 server of issue 7 wrote them (Content-Type, ...).
        .title_case_headers(true)
        .serve_connection(TokioIo::new(sock), service);
    if let Err(e) = conn.await {
        tracing::debug!("metrics connection: {e}");
    }
}

/// Serves `listener` until `stop` turns true; each connection on its own task.
pub async fn serve(
    listener: TcpListener,
    ep: Endpoint,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let ep = Arc::new(ep);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            a = listener.accept() => match a {
                Ok((sock, _)) => {
                    // Slow or idle clients cannot pile up tasks: past the limit, close.
                    if let Ok(permit) = slots.clone().try_acquire_owned() {
                        let ep = ep.clone();
                        tokio::spawn(async move {
                            one(sock, ep).await;
                            drop(permit);
                        });
                    }
                }
                Err(e) => {
                    tracing::warn!("metrics accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            r = stop.changed() => if r.is_err() || *stop.borrow() {
                return;
            },
        }
    }
}

/// Binds the endpoint (before "ready", so a bad address fails the start).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The value of `name` in an exposition (None if absent or not a number).
    fn value(text: &str, name: &str) -> Option<f64> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn render_shows_every_counter_once_with_its_type() {
        let mut s = Snapshot::default();
        s.pnfs.layoutcommits = 40;
        s.pnfs.layoutcommit_ns = 4_000_000_123;
        s.pnfs.commit_data_flushes = 7;
        s.pnfs.commit_data_flushes_joined = 33;
        s.log.forces = 10;
        s.log.forces_that_wrote = 4;
        s.log.log_writes = 5;
        s.data_flushes = (9, 31);
        s.pnfs.trimmed_blocks = 12;
        s.delegs.granted = 21;
        s.delegs.revoked = 2;
        let t = render(&s);
        assert_eq!(value(&t, "pnfsd_delegations_granted_total"), Some(21.0));
        assert_eq!(value(&t, "pnfsd_delegations_revoked_total"), Some(2.0));
        assert_eq!(value(&t, "pnfsd_layout_trimmed_blocks_total"), Some(12.0));
        assert_eq!(value(&t, "pnfsd_layoutcommits_total"), Some(40.0));
        assert_eq!(
            value(&t, "pnfsd_layoutcommit_seconds_total"),
            Some(4.000000123)
        );
        assert_eq!(
            value(&t, "pnfsd_layoutcommit_data_flushes_issued_total"),
            Some(7.0)
        );
        assert_eq!(
            value(&t, "pnfsd_layoutcommit_data_flushes_joined_total"),
            Some(33.0)
        );
        assert_eq!(value(&t, "pnfsd_log_forces_joined_total"), Some(6.0));
        assert_eq!(value(&t, "pnfsd_log_writes_total"), Some(5.0));
        assert_eq!(value(&t, "pnfsd_data_flushes_joined_total"), Some(31.0));
        // Every sample has exactly one TYPE line, and every name is a counter.
        let samples: Vec<&str> = t
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(samples.len(), 38);
        for n in samples.iter().filter(|n| **n != "pnfsd_log_shut_down") {
            assert!(n.ends_with("_total"), "{n}");
            assert_eq!(
                t.matches(&format!("# TYPE {n} counter\n")).count(),
                1,
                "{n}"
            );
        }
    }

    async fn get(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn serves_metrics_over_http_and_refuses_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("v.img");
        crate::store::Store::mkfs(&vol, 64 << 20, false).unwrap();
        let store = Arc::new(crate::store::Store::open(&vol, Default::default()).unwrap());
        let srv = Arc::new(Server::new(store.clone(), Default::default()));
        srv.layouts
            .metrics
            .layoutcommits
            .store(3, std::sync::atomic::Ordering::Relaxed);
        let before = store.log().counters().commits;
        let set = crate::store::SetAttrs::default();
        let root = crate::store::ROOT_INO;
        store
            .create(root, b"f", crate::store::NewNode::Regular, &set, (0, 0))
            .unwrap();
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::watch::channel(false);
        let ep = Endpoint {
            srv: srv.clone(),
            admin: None,
        };
        let task = tokio::spawn(serve(l, ep, rx));

        let r = get(addr, b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").await;
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert_eq!(value(body, "pnfsd_layoutcommits_total"), Some(3.0));
        // Byte for byte the exposition of issue 7 (pnfs-bench and the guest scenarios parse it).
        assert_eq!(body, render(&Snapshot::of(&srv)));
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
            "{head}"
        );
        // The create committed: the log counters are the live ones.
        assert_eq!(
            value(body, "pnfsd_log_commits_total"),
            Some((before + 1) as f64),
            "{body}"
        );

        assert!(get(addr, b"GET / HTTP/1.0\r\n\r\n")
            .await
            .starts_with("HTTP/1.0 404"));
        assert!(get(addr, b"POST /metrics HTTP/1.0\r\n\r\n")
            .await
            .starts_with("HTTP/1.0 405"));
        let huge = vec![b'a'; MAX_HEAD + 10];
        // Too big a head: refused (hyper answers 431) or the connection is closed, never served.
        let r = get(addr, &huge).await;
        assert!(r.is_empty() || r.starts_with("HTTP/1.1 4"), "{r}");

        // Admin off: its paths are not served.
        assert!(get(addr, b"GET /clients HTTP/1.0\r\n\r\n")
            .await
            .starts_with("HTTP/1.0 404"));

        tx.send(true).unwrap();
        task.await.unwrap();

        // Admin on: the same listener serves the views as JSON.
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::watch::channel(false);
        let ep = Endpoint {
            srv: srv.clone(),
            admin: Some(crate::admin::AdminInfo {
                started: std::time::Instant::now(),
                volume: "v.img".into(),
                metadata_cache: 1 << 20,
            }),
        };
        let task = tokio::spawn(serve(l, ep, rx));
        let r = get(addr, b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("Content-Type: application/json"), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["volume"]["path"], "v.img", "{v:#}");
        assert_eq!(v["metadata_cache"]["budget_bytes"], 1 << 20, "{v:#}");
        assert_eq!(v["clients"], 0, "{v:#}");
        let r = get(addr, b"GET /clients HTTP/1.0\r\n\r\n").await;
        assert_eq!(r.split_once("\r\n\r\n").unwrap().1, "[]\n");
        assert!(get(addr, b"GET /nothing HTTP/1.0\r\n\r\n")
            .await
            .starts_with("HTTP/1.0 404"));
        tx.send(true).unwrap();
        task.await.unwrap();
        drop(srv);
        store.unmount().unwrap();
    }
}
