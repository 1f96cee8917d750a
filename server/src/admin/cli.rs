//! `pnfsd status`, `pnfsd clients [states ID | evict ID]` and `pnfsd layouts`: GET the admin
//! views of a running pnfsd (POST for an eviction) and print them as a table for a person,
//! or the JSON as served (`--json`). The tables read the JSON
//! loosely (a field a newer daemon adds is ignored, one it lacks prints as "-"), so the CLI
//! and the daemon need not be the same build.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// A request that gets no answer in this long fails (the daemon answers in milliseconds).
pub const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot reach the admin endpoint at {addr}: {err}")]
    Connect { addr: SocketAddr, err: String },
    #[error("http://{addr}{path}: {status}: {body}")]
    Status {
        addr: SocketAddr,
        path: String,
        status: StatusCode,
        body: String,
    },
    #[error("http://{addr}{path}: no answer within {TIMEOUT:?}")]
    Timeout { addr: SocketAddr, path: String },
    #[error("http://{addr}{path}: not JSON: {err}")]
    Json {
        addr: SocketAddr,
        path: String,
        err: serde_json::Error,
    },
}

/// `GET path` on `addr` with hyper's HTTP/1 client; the body if the status is 200.
pub async fn get(addr: SocketAddr, path: &str) -> Result<String, CliError> {
    request(hyper::Method::GET, addr, path).await
}

/// `method path` on `addr`; the body if the status is 200.
pub async fn request(
    method: hyper::Method,
    addr: SocketAddr,
    path: &str,
) -> Result<String, CliError> {
    let connect = |err: String| CliError::Connect { addr, err };
    let fetch = async {
        let sock = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| connect(e.to_string()))?;
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(sock))
            .await
            .map_err(|e| connect(e.to_string()))?;
        tokio::spawn(conn);
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::<Bytes>::new())
            .map_err(|e| connect(e.to_string()))?;
        let res = tx
            .send_request(req)
            .await
            .map_err(|e| connect(e.to_string()))?;
        let status = res.status();
        let body = res
            .into_body()
            .collect()
            .await
            .map_err(|e| connect(e.to_string()))?
            .to_bytes();
        let body = String::from_utf8_lossy(&body).into_owned();
        if status != StatusCode::OK {
            return Err(CliError::Status {
                addr,
                path: path.to_string(),
                status,
                body: body.trim().to_string(),
            });
        }
        Ok(body)
    };
    tokio::time::timeout(TIMEOUT, fetch)
        .await
        .map_err(|_| CliError::Timeout {
            addr,
            path: path.to_string(),
        })?
}

/// `GET path` as JSON.
pub async fn get_json(addr: SocketAddr, path: &str) -> Result<Value, CliError> {
    let body = get(addr, path).await?;
    serde_json::from_str(&body).map_err(|err| CliError::Json {
        addr,
        path: path.to_string(),
        err,
    })
}

/// The arguments of `pnfsd status` and `pnfsd clients`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AdminArgs {
    /// The admin endpoint (the daemon's metrics_listen); default: metrics_listen of --config.
    #[arg(long, value_name = "ADDR:PORT", global = true)]
    pub admin: Option<SocketAddr>,
    /// The daemon's configuration, to find its metrics_listen.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<std::path::PathBuf>,
    /// Print the JSON as served instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Which view a command prints (or which action it takes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum View {
    Status,
    Clients,
    /// One client's states, by the id `pnfsd clients` prints.
    ClientStates(String),
    Layouts,
    /// Expire a client now, its layouts fenced (POST).
    Evict(String),
}

impl View {
    fn path(&self) -> String {
        match self {
            View::Status => "/status".into(),
            View::Clients => "/clients".into(),
            View::ClientStates(id) => format!("/clients/{id}/states"),
            View::Layouts => "/layouts".into(),
            View::Evict(id) => format!("/clients/{id}/evict"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(
        "no admin address: pass --admin ADDR:PORT, or --config with metrics_listen set \
         (and admin = true)"
    )]
    NoAddress,
    #[error(transparent)]
    Get(#[from] CliError),
    #[error("tokio runtime: {0}")]
    Runtime(std::io::Error),
}

/// Where the daemon's endpoint is: `--admin`, else the configuration's `metrics_listen`
/// (an unspecified address such as 0.0.0.0 is reached on the loopback).
pub fn address(a: &AdminArgs) -> Result<SocketAddr, CommandError> {
    if let Some(addr) = a.admin {
        return Ok(addr);
    }
    let Some(path) = a.config.as_deref() else {
        return Err(CommandError::NoAddress);
    };
    let cfg = crate::config::Config::load(Some(path), &Default::default())?;
    let mut addr = cfg.metrics_listen.ok_or(CommandError::NoAddress)?;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Ok(addr)
}

/// Runs `pnfsd status` / `pnfsd clients`: what to print.
pub fn run(view: View, a: &AdminArgs) -> Result<String, CommandError> {
    let addr = address(a)?;
    let path = view.path();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CommandError::Runtime)?;
    let method = if matches!(view, View::Evict(_)) {
        hyper::Method::POST
    } else {
        hyper::Method::GET
    };
    let body = rt.block_on(request(method, addr, &path))?;
    if a.json {
        return Ok(body);
    }
    let v: Value = serde_json::from_str(&body).map_err(|err| CliError::Json { addr, path, err })?;
    Ok(match view {
        View::Status => status_table(&v),
        View::Clients => clients_table(&v),
        View::ClientStates(_) => states_table(&v),
        View::Layouts => layouts_table(&v),
        View::Evict(_) => format!(
            "client {} evicted: its sessions and state are gone, its layouts fenced\n",
            text(&v, &["evicted"])
        ),
    })
}

/// Bytes for a person: `512 B`, `3.5 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let (mut v, mut u) = (n as f64 / 1024.0, 0);
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

fn num(v: &Value, path: &[&str]) -> Option<u64> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_u64()
}

fn text(v: &Value, path: &[&str]) -> String {
    match path.iter().try_fold(v, |v, k| v.get(k)) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(other) => other.to_string(),
    }
}

fn n_or_dash(v: Option<u64>) -> String {
    v.map_or("-".into(), |n| n.to_string())
}

fn b_or_dash(v: Option<u64>) -> String {
    v.map_or("-".into(), bytes)
}

/// `pnfsd status` for a person.
pub fn status_table(s: &Value) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "pnfsd {}, up {} s, {} client(s)",
        text(s, &["version"]),
        n_or_dash(num(s, &["uptime_seconds"])),
        n_or_dash(num(s, &["clients"]))
    );
    let _ = writeln!(
        o,
        "volume    {} uuid {}",
        text(s, &["volume", "path"]),
        text(s, &["volume", "uuid"])
    );
    let _ = writeln!(
        o,
        "geometry  {} blocks of {} B: log {} at {}, data {} at {}",
        n_or_dash(num(s, &["volume", "total_blocks"])),
        n_or_dash(num(s, &["volume", "block_size"])),
        n_or_dash(num(s, &["volume", "log_blocks"])),
        n_or_dash(num(s, &["volume", "log_start"])),
        n_or_dash(num(s, &["volume", "data_blocks"])),
        n_or_dash(num(s, &["volume", "data_start"]))
    );
    let _ = writeln!(
        o,
        "space     {} free of {}; {} files",
        b_or_dash(num(s, &["volume", "free_bytes"])),
        b_or_dash(num(s, &["volume", "total_bytes"])),
        n_or_dash(num(s, &["volume", "files"]))
    );
    let grace = match num(s, &["grace", "remaining_seconds"]) {
        Some(left) => format!(
            "{left} s left, {} of {} previous clients reclaimed",
            n_or_dash(num(s, &["grace", "reclaimed"])),
            n_or_dash(num(s, &["grace", "previous_clients"]))
        ),
        None => "over".into(),
    };
    let _ = writeln!(o, "grace     {grace}");
    let shut = match s.get("log").and_then(|l| l.get("shut_down")) {
        Some(Value::Null) | None => "running".to_string(),
        Some(e) => format!("SHUT DOWN ({})", e.as_str().unwrap_or("?")),
    };
    let _ = writeln!(
        o,
        "log       {} used of {} (tail {} head {}), {shut}",
        b_or_dash(num(s, &["log", "used_bytes"])),
        b_or_dash(num(s, &["log", "size_bytes"])),
        n_or_dash(num(s, &["log", "tail_lsn"])),
        n_or_dash(num(s, &["log", "head_lsn"]))
    );
    let _ = writeln!(
        o,
        "metadata  cache {} pages ({}) of a {} budget, {} not written back, {} tree nodes",
        n_or_dash(num(s, &["metadata_cache", "pages"])),
        b_or_dash(num(s, &["metadata_cache", "page_bytes"])),
        b_or_dash(num(s, &["metadata_cache", "budget_bytes"])),
        b_or_dash(num(s, &["metadata_cache", "dirty_bytes"])),
        n_or_dash(num(s, &["metadata_cache", "tree_nodes"]))
    );
    // The embedded NVMe/TCP target: one line, then one per controller connected.
    match s.get("nvme") {
        Some(n) if !n.is_null() => {
            let _ = writeln!(
                o,
                "nvme      {} {}: {} controller(s), {} connection(s)",
                text(n, &["listen"]),
                text(n, &["subsystem_nqn"]),
                n_or_dash(num(n, &["controllers_connected"])),
                n_or_dash(num(n, &["connections"]))
            );
            let ctrls = n.get("controllers").and_then(Value::as_array);
            for c in ctrls.into_iter().flatten() {
                let kind = match c.get("discovery").and_then(Value::as_bool) {
                    Some(true) => "discovery",
                    _ => "io",
                };
                let _ = writeln!(
                    o,
                    "          controller {} ({kind}) {} from {}: {} I/O queue(s), KATO {} ms",
                    n_or_dash(num(c, &["cntlid"])),
                    text(c, &["host_nqn"]),
                    text(c, &["host_addr"]),
                    n_or_dash(num(c, &["io_queues"])),
                    n_or_dash(num(c, &["kato_ms"]))
                );
            }
        }
        _ => {
            let _ = writeln!(o, "nvme      no embedded target");
        }
    }
    o
}

/// Rows as aligned columns; the last column is not padded.
fn columns(rows: &[Vec<String>]) -> String {
    let cols = rows.first().map_or(0, Vec::len);
    let width: Vec<usize> = (0..cols)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut o = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == cols {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = width[i]);
            }
        }
        let _ = writeln!(o, "{}", line.trim_end());
    }
    o
}

fn header(h: &[&str]) -> Vec<Vec<String>> {
    vec![h.iter().map(|h| h.to_string()).collect()]
}

/// `pnfsd clients states ID` for a person: one line per state.
pub fn states_table(v: &Value) -> String {
    let mut rows = header(&["FILEID", "KIND", "STATEID", "SEQ", "MODE", "DETAIL"]);
    for st in v.as_array().into_iter().flatten() {
        let mode = match (st.get("access").and_then(Value::as_str), st.get("deny")) {
            (Some(a), Some(Value::String(d))) => format!("{a}/deny {d}"),
            (Some(a), _) => a.to_string(),
            (None, _) => "-".into(),
        };
        let mut detail: Vec<String> = st
            .get("ranges")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect();
        if st.get("recalled").and_then(Value::as_bool) == Some(true) {
            detail.push("recalled".into());
        }
        if let Some(r) = st.get("revoked").and_then(Value::as_str) {
            detail.push(format!("revoked ({r})"));
        }
        rows.push(vec![
            n_or_dash(num(st, &["fileid"])),
            text(st, &["kind"]),
            text(st, &["stateid"]),
            n_or_dash(num(st, &["seqid"])),
            mode,
            if detail.is_empty() {
                "-".into()
            } else {
                detail.join(", ")
            },
        ]);
    }
    columns(&rows)
}

/// `pnfsd layouts` for a person: one line per (file, holder).
pub fn layouts_table(v: &Value) -> String {
    let mut rows = header(&[
        "FILEID", "CLIENTID", "TYPE", "ADDRESS", "RECALL", "FENCED", "RANGES",
    ]);
    for f in v.as_array().into_iter().flatten() {
        for h in f
            .get("holders")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ranges: Vec<String> = h
                .get("ranges")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|r| {
                    format!(
                        "{}+{} {}",
                        n_or_dash(num(r, &["offset"])),
                        n_or_dash(num(r, &["length"])),
                        text(r, &["iomode"])
                    )
                })
                .collect();
            rows.push(vec![
                n_or_dash(num(f, &["fileid"])),
                num(h, &["client"]).map_or("-".into(), |id| format!("{id:016x}")),
                text(h, &["layout_type"]),
                text(h, &["address"]),
                match (
                    num(h, &["recall", "age_seconds"]),
                    num(h, &["recall", "deadline_in_seconds"]),
                ) {
                    (Some(age), Some(left)) => format!("sent {age}s ago, {left}s left"),
                    (None, Some(left)) => format!("{left}s left"),
                    _ => "-".into(),
                },
                match h.get("fenced").and_then(Value::as_bool) {
                    Some(true) => "yes".into(),
                    Some(false) => "no".into(),
                    None => "-".into(),
                },
                ranges.join(", "),
            ]);
        }
    }
    columns(&rows)
}

/// `pnfsd clients` for a person: one line per client.
pub fn clients_table(c: &Value) -> String {
    let mut rows = header(&[
        "CLIENTID", "LEASE", "IDLE", "SESS", "SLOTS", "CONNS", "OPENS", "LOCKS", "DELEGS",
        "LAYOUTS", "REVOKED", "RECLAIM", "ADDRESS", "OWNER",
    ]);
    for cl in c.as_array().into_iter().flatten() {
        let sessions = cl.get("sessions").and_then(Value::as_array);
        let sum = |k: &str| {
            sessions.map_or(0, |ss| {
                ss.iter()
                    .filter_map(|s| s.get(k).and_then(Value::as_u64))
                    .sum::<u64>()
            })
        };
        rows.push(vec![
            num(cl, &["id"]).map_or("-".into(), |id| format!("{id:016x}")),
            text(cl, &["lease"]),
            num(cl, &["idle_seconds"]).map_or("-".into(), |s| format!("{s}s")),
            sessions.map_or(0, |s| s.len()).to_string(),
            sum("slots").to_string(),
            sum("connections").to_string(),
            n_or_dash(num(cl, &["states", "opens"])),
            n_or_dash(num(cl, &["states", "locks"])),
            n_or_dash(num(cl, &["states", "delegations"])),
            n_or_dash(num(cl, &["states", "layouts"])),
            n_or_dash(num(cl, &["states", "revoked"])),
            text(cl, &["reclaim"]),
            text(cl, &["address"]),
            text(cl, &["owner"]),
        ]);
    }
    columns(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_for_a_person() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 19), "1.5 MiB");
        assert_eq!(bytes(1 << 30), "1.0 GiB");
    }

    #[test]
    fn clients_table_has_a_row_per_client_and_sums_sessions() {
        let j: Value = serde_json::from_str(
            r#"[{"id": 258, "owner": "Linux NFSv4.2 a", "lease": "active", "idle_seconds": 3,
                 "sessions": [{"id": "00", "slots": 16, "slots_busy": 0, "connections": 1,
                               "backchannel": true},
                              {"id": "01", "slots": 8, "slots_busy": 0, "connections": 2,
                               "backchannel": false}],
                 "states": {"opens": 2, "locks": 1, "delegations": 0, "layouts": 1,
                            "revoked": 0},
                 "reclaim": "none"},
                {"id": 259, "owner": "b", "lease": "courtesy", "sessions": [],
                 "reclaim": "reclaiming"}]"#,
        )
        .unwrap();
        let t = clients_table(&j);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("CLIENTID"), "{t}");
        let a: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(
            &a[..12],
            &[
                "0000000000000102",
                "active",
                "3s",
                "2",
                "24",
                "3",
                "2",
                "1",
                "0",
                "1",
                "0",
                "none"
            ],
            "{t}"
        );
        assert!(lines[1].ends_with("Linux NFSv4.2 a"), "{t}");
        // Missing fields print as "-", not as a failure.
        let b: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(&b[..4], &["0000000000000103", "courtesy", "-", "0"], "{t}");
        assert_eq!(b[6], "-", "{t}");
    }

    #[test]
    fn status_table_says_grace_and_a_shut_down_log() {
        let j: Value = serde_json::from_str(
            r#"{"version": "0.1.0", "uptime_seconds": 5, "clients": 2,
                "volume": {"path": "/v.img", "total_bytes": 1073741824, "free_bytes": 536870912},
                "grace": {"remaining_seconds": 40, "previous_clients": 2, "reclaimed": 1},
                "log": {"size_bytes": 16777216, "used_bytes": 4096, "shut_down": "EIO"}}"#,
        )
        .unwrap();
        let t = status_table(&j);
        assert!(t.contains("512.0 MiB free of 1.0 GiB"), "{t}");
        assert!(
            t.contains("40 s left, 1 of 2 previous clients reclaimed"),
            "{t}"
        );
        assert!(t.contains("4.0 KiB used of 16.0 MiB"), "{t}");
        assert!(t.contains("SHUT DOWN (EIO)"), "{t}");
        assert!(t.contains("nvme      no embedded target"), "{t}");
        let j: Value = serde_json::from_str(
            r#"{"nvme": {"listen": "127.0.0.1:4420", "subsystem_nqn": "nqn.x", "controllers_connected": 1,
                "connections": 2, "controllers": [{"cntlid": 3, "discovery": false,
                "host_nqn": "nqn.h", "host_addr": "127.0.0.2", "io_queues": 1, "kato_ms": 5000}]}}"#,
        )
        .unwrap();
        let t = status_table(&j);
        assert!(
            t.contains("nvme      127.0.0.1:4420 nqn.x: 1 controller(s), 2 connection(s)"),
            "{t}"
        );
        assert!(
            t.contains("controller 3 (io) nqn.h from 127.0.0.2: 1 I/O queue(s), KATO 5000 ms"),
            "{t}"
        );
        let j: Value =
            serde_json::from_str(r#"{"grace": {"remaining_seconds": null}, "log": {}}"#).unwrap();
        let t = status_table(&j);
        assert!(
            t.contains("grace     over") && t.contains(", running"),
            "{t}"
        );
    }
}
