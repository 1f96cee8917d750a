//! The operator's metrics endpoint: with `metrics_listen` set (off by
//! default), `pnfsd serve` answers `GET /metrics` with a prometheus-client [`Registry`] of
//! one collector that reads, at each scrape: the services' counters (`counters`, under
//! the names the benches scrape), per-operation counts and latencies and the log-force latency
//! (`ops`: the server's operation ledger, recorded lock-free by the COMPOUND dispatcher, and
//! metalog's force hook), and gauges of what clients hold, the log, free space and the grace
//! period (`gauges`).
//! pnfs-bench reads it before and after each mode; anything that speaks HTTP can too.
//! docs/operations.md lists every metric.
//!
//! HTTP/1 by hyper on the daemon's tokio runtime (docs/operations.md says why hyper), the
//! request head bounded to [`MAX_HEAD`] bytes and [`READ_TIMEOUT`]. A scrape reads atomics
//! and copies the client and layout tables once under their locks (no store write, no
//! I/O), so it never slows an NFS operation down for long. With `admin = true` the same
//! listener serves the admin views (crate::admin). Bind it to the loopback or a
//! management network: it has no authentication.

pub mod counters;
pub mod gauges;
pub mod hist;
pub mod nvme;
pub mod ops;
pub mod text;

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
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tokio::net::{TcpListener, TcpStream};

pub use counters::Snapshot;
pub use gauges::{ControllerCount, Gauges};

use crate::server::Server;

/// A request head larger than this is refused (a GET line and a few headers fit easily).
pub const MAX_HEAD: usize = 8192;
/// A client that sends no complete request head within this is dropped.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; more are closed at accept (a scraper needs one).
pub const MAX_CONNECTIONS: usize = 16;

/// The collector behind the registry: everything is read when a scrape encodes it.
struct ServerCollector {
    srv: Arc<Server>,
    controllers: Option<ControllerCount>,
}

impl std::fmt::Debug for ServerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerCollector")
    }
}

impl Collector for ServerCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        counters::encode(&Snapshot::of(&self.srv), &mut e)?;
        self.srv.ops.encode(&mut e)?;
        let m = e.encode_descriptor(
            "pnfsd_log_force_seconds",
            "Wall time of metadata log forces (group commit: a force that found its checkpoint durable counts near zero).",
            None,
            MetricType::Histogram,
        )?;
        ops::LOG_FORCE.encode(m)?;
        gauges::encode(&Gauges::of(&self.srv, self.controllers.as_ref()), &mut e)
    }
}

/// The registry `/metrics` encodes.
pub struct Metrics {
    registry: Registry,
}

impl Metrics {
    /// The metrics of `srv`; `controllers` reads the embedded target's live controllers.
    /// Installs the log-force hook (metalog reports durations, [`ops::LOG_FORCE`] keeps
    /// them).
    pub fn new(srv: Arc<Server>, controllers: Option<ControllerCount>) -> Metrics {
        srv.store.log().set_force_observer(ops::observe_log_force);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ServerCollector { srv, controllers }));
        nvme::register(&mut registry);
        Metrics { registry }
    }

    /// The exposition in OpenMetrics (`openmetrics`) or the Prometheus text format 0.0.4.
    pub fn render(&self, openmetrics: bool) -> String {
        let mut om = String::with_capacity(16 << 10);
        // Writing to a String fails only if a collector does, and ours do not: an error
        // still answers what was written rather than panic the endpoint.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut om, &self.registry) {
            tracing::warn!("metrics encoding: {e}");
        }
        if openmetrics {
            om
        } else {
            text::to_text_004(&om)
        }
    }
}

/// What the listener serves: the metrics always, the admin views when `admin` is set.
pub struct Endpoint {
    pub srv: Arc<Server>,
    pub metrics: Metrics,
    /// `admin = true`: `/status` and `/clients` answer; 404 otherwise.
    pub admin: Option<crate::admin::AdminInfo>,
}

impl Endpoint {
    pub fn new(
        srv: Arc<Server>,
        controllers: Option<ControllerCount>,
        admin: Option<crate::admin::AdminInfo>,
    ) -> Endpoint {
        Endpoint {
            metrics: Metrics::new(srv.clone(), controllers),
            srv,
            admin,
        }
    }
}

type Reply = Response<Full<Bytes>>;

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

const TEXT: &str = text::TEXT_004;

/// One request: the method and path decide (and, for `/metrics`, the `Accept` header);
/// the body is not read.
async fn answer(method: &Method, path: &str, accept: Option<&str>, ep: Arc<Endpoint>) -> Reply {
    let post = method == Method::POST;
    if method != Method::GET && !(post && ep.admin.is_some()) {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            TEXT,
            "only GET is served (and POST for the admin actions)\n".into(),
        );
    }
    if path == "/metrics" && !post {
        let om = text::wants_openmetrics(accept);
        let ct = if om { text::OPENMETRICS } else { TEXT };
        // The scrape copies the state's tables under their locks: not on a runtime worker.
        let ep2 = ep.clone();
        return match tokio::task::spawn_blocking(move || ep2.metrics.render(om)).await {
            Ok(body) => reply(StatusCode::OK, ct, body),
            Err(_) => reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                TEXT,
                "metrics failed\n".into(),
            ),
        };
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
            let accept = req
                .headers()
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            Ok::<_, std::convert::Infallible>(answer(&method, &path, accept.as_deref(), ep).await)
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .max_buf_size(MAX_HEAD)
        // One request per connection, as a scraper does: an idle client cannot keep a slot.
        .keep_alive(false)
        // Header names in title case (Content-Type, ...), as pnfsd has always sent them.
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

    fn server(dir: &std::path::Path) -> (Arc<crate::store::Store>, Arc<Server>) {
        let vol = dir.join("v.img");
        crate::store::Store::mkfs(&vol, 64 << 20, false).unwrap();
        let store = Arc::new(crate::store::Store::open(&vol, Default::default()).unwrap());
        let srv = Arc::new(Server::new(store.clone(), Default::default()));
        (store, srv)
    }

    #[test]
    fn the_exposition_has_every_counter_gauge_and_histogram_by_the_conventions() {
        use crate::nfs4::opcode::NfsOp;
        use crate::nfs4::status::NfsStat;
        use std::sync::atomic::Ordering::Relaxed;
        let dir = tempfile::tempdir().unwrap();
        let (store, srv) = server(dir.path());
        let m = &srv.layouts.metrics;
        // The layout op series come from the ledger: 40 LAYOUTCOMMITs, one an error, that
        // ran 4.000000123 s in all.
        for _ in 0..39 {
            srv.ops.record(
                NfsOp::LAYOUTCOMMIT,
                NfsStat::OK,
                Some(Duration::from_millis(100)),
            );
        }
        srv.ops.record(
            NfsOp::LAYOUTCOMMIT,
            NfsStat::BADLAYOUT,
            Some(Duration::from_nanos(100_000_123)),
        );
        m.fences.store(5, Relaxed);
        m.fences_without_mechanism.store(2, Relaxed);
        let metrics = Metrics::new(srv.clone(), Some(Arc::new(|| 3)));
        // A force through the hook Metrics installed: the log-force histogram moves.
        let forces = ops::LOG_FORCE.count();
        store.log().force_all().unwrap();
        srv.ops.record(
            NfsOp::LAYOUTGET,
            NfsStat::LAYOUTTRYLATER,
            Some(Duration::from_micros(70)),
        );
        // Refused by the dispatcher before LAYOUTRETURN ran: counted, not timed.
        srv.ops
            .record(NfsOp::LAYOUTRETURN, NfsStat::NOFILEHANDLE, None);
        let t = metrics.render(false);
        assert!(ops::LOG_FORCE.count() > forces);
        assert_eq!(text::problems(&t), Vec::<String>::new(), "{t}");
        for c in counters::COUNTERS {
            assert_eq!(
                t.matches(&format!("\n{} ", c.name)).count(),
                1,
                "{}",
                c.name
            );
            assert!(
                t.contains(&format!("# TYPE {} counter\n", c.name)),
                "{}",
                c.name
            );
        }
        assert_eq!(value(&t, "pnfsd_layoutcommits_total"), Some(40.0));
        assert_eq!(
            value(&t, "pnfsd_layoutcommit_seconds_total"),
            Some(4.000000123)
        );
        assert_eq!(value(&t, "pnfsd_layoutcommit_errors_total"), Some(1.0));
        assert_eq!(value(&t, "pnfsd_layoutgets_total"), Some(1.0));
        assert_eq!(value(&t, "pnfsd_layoutget_errors_total"), Some(1.0));
        assert_eq!(value(&t, "pnfsd_layoutget_seconds_total"), Some(0.00007));
        assert_eq!(value(&t, "pnfsd_layoutreturns_total"), Some(1.0));
        assert_eq!(
            value(&t, "pnfsd_layout_fences_with_mechanism_total"),
            Some(3.0)
        );
        assert_eq!(
            value(&t, "pnfsd_layout_fences_without_mechanism_total"),
            Some(2.0)
        );
        assert_eq!(value(&t, "pnfsd_nvme_controllers"), Some(3.0));
        assert_eq!(value(&t, "pnfsd_log_shut_down"), Some(0.0));
        assert_eq!(value(&t, "pnfsd_clients{state=\"active\"}"), Some(0.0));
        let bs = u64::from(store.block_size());
        assert_eq!(
            value(&t, "pnfsd_free_blocks"),
            Some((store.fsstat().free_bytes / bs) as f64)
        );
        assert!(t.contains("# TYPE pnfsd_log_force_seconds histogram\n"));
        assert!(t.contains("pnfsd_log_force_seconds_bucket{le=\"+Inf\"} "));
        assert!(
            t.contains("pnfsd_nfs_ops_total{op=\"LAYOUTGET\",status=\"LAYOUTTRYLATER\"} "),
            "{t}"
        );
        assert!(
            t.contains("pnfsd_nfs_op_seconds_bucket{le=\"+Inf\",op=\"LAYOUTGET\"} "),
            "{t}"
        );
        // The OpenMetrics form: counters typed without _total, and the EOF marker.
        let om = metrics.render(true);
        assert!(om.contains("# TYPE pnfsd_layoutcommits counter\n"));
        assert!(om.ends_with("# EOF\n"), "{om}");
        drop((metrics, srv));
        store.unmount().unwrap();
    }

    /// A failed log flush: the gauge turns 1 and one ERROR line names the device and the
    /// error ("log shut down").
    #[test]
    fn a_failed_log_flush_shows_in_the_gauge_and_one_line_naming_the_device() {
        use metalog::{CrashDev, Fault, FaultDev};
        let (log, _g) = crate::log_capture::capture();
        let fault = Arc::new(FaultDev::new(Arc::new(CrashDev::new(64 << 20, 1))));
        crate::store::Store::mkfs_dev(fault.clone(), false).unwrap();
        let store =
            Arc::new(crate::store::Store::open_dev(fault.clone(), Default::default()).unwrap());
        assert!(store.log().set_device_name("/srv/pnfs/volume.img"));
        let srv = Arc::new(Server::new(store.clone(), Default::default()));
        let metrics = Metrics::new(srv.clone(), None);
        assert_eq!(
            value(&metrics.render(false), "pnfsd_log_shut_down"),
            Some(0.0)
        );
        fault.fail_flushes_after(0, Fault::Io);
        let set = crate::store::SetAttrs::default();
        let made = store.create(
            crate::store::ROOT_INO,
            b"f",
            crate::store::NewNode::Regular,
            &set,
            (0, 0),
        );
        let forced = store.log().force_all();
        assert!(made.is_err() || forced.is_err());
        assert_eq!(
            value(&metrics.render(false), "pnfsd_log_shut_down"),
            Some(1.0)
        );
        let text = log.text();
        assert_eq!(text.matches("metadata log shut down").count(), 1, "{text}");
        assert!(
            text.contains("ERROR") && text.contains("device=\"/srv/pnfs/volume.img\""),
            "{text}"
        );
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
        let (store, srv) = server(dir.path());
        for _ in 0..3 {
            srv.ops.record(
                crate::nfs4::opcode::NfsOp::LAYOUTCOMMIT,
                crate::nfs4::status::NfsStat::OK,
                Some(Duration::from_micros(1)),
            );
        }
        let before = store.log().counters().commits;
        let set = crate::store::SetAttrs::default();
        let root = crate::store::ROOT_INO;
        store
            .create(root, b"f", crate::store::NewNode::Regular, &set, (0, 0))
            .unwrap();
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(serve(l, Endpoint::new(srv.clone(), None, None), rx));

        let r = get(addr, b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").await;
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.0 200 OK\r\n"), "{head}");
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert_eq!(value(body, "pnfsd_layoutcommits_total"), Some(3.0));
        // The 0.0.4 text format by default (pnfsd-bench and promtool read it).
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
            "{head}"
        );
        assert_eq!(text::problems(body), Vec::<String>::new());
        // The create committed: the log counters are the live ones.
        assert_eq!(
            value(body, "pnfsd_log_commits_total"),
            Some((before + 1) as f64),
            "{body}"
        );
        // A Prometheus server asks for OpenMetrics and gets it.
        let r = get(
            addr,
            b"GET /metrics HTTP/1.0\r\nAccept: application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1\r\n\r\n",
        )
        .await;
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains("Content-Type: application/openmetrics-text"),
            "{head}"
        );
        assert!(body.ends_with("# EOF\n"));
        assert_eq!(value(body, "pnfsd_layoutcommits_total"), Some(3.0));

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
        let admin = crate::admin::AdminInfo {
            started: std::time::Instant::now(),
            volume: "v.img".into(),
            metadata_cache: 1 << 20,
        };
        let ep = Endpoint::new(srv.clone(), None, Some(admin));
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
