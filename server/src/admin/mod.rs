//! The admin endpoint: JSON views of a running pnfsd on the metrics listener
//! (`GET /status`, `/clients`, `/clients/ID/states`, `/layouts`) and one action
//! (`POST /clients/ID/evict`), when the configuration says `admin = true` (off by default).
//! Unauthenticated, like `/metrics`: the listener belongs on the loopback or a management
//! network (docs/operations.md). `pnfsd status`, `pnfsd clients` and `pnfsd layouts`
//! (`cli`) use them.
//!
//! Each view is copied out under the lock that guards it, then encoded: a request never
//! holds the state lock or the store while JSON is written or sent.

pub mod cli;
pub mod status;

use std::time::Instant;

use crate::server::Server;

/// What the views need beyond the server: set once at start.
#[derive(Debug, Clone)]
pub struct AdminInfo {
    pub started: Instant,
    /// The volume as the daemon names it (a path or an nvme-tcp:// URL).
    pub volume: String,
    /// The configured `metadata_cache` budget in bytes.
    pub metadata_cache: u64,
}

/// What a request to an admin path gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Json(String),
    /// No such path, or no such client: the text says which.
    NotFound(String),
}

fn json(v: &impl serde::Serialize) -> Answer {
    // Plain data structs: encoding cannot fail, but a failure must not panic the endpoint.
    let s = serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    Answer::Json(s + "\n")
}

/// `/clients/ID/<what>` → the clientid (hex, as `/clients` and `pnfsd clients` print it,
/// or decimal).
fn client_path<'a>(path: &'a str, what: &str) -> Option<&'a str> {
    path.strip_prefix("/clients/")?
        .strip_suffix(what)?
        .strip_suffix('/')
}

/// A clientid as a person types it: 16 hex digits as `pnfsd clients` prints them, `0x…`,
/// or decimal.
pub fn parse_clientid(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok();
    }
    if s.len() == 16 {
        return u64::from_str_radix(s, 16).ok();
    }
    s.parse().ok()
}

fn no_client(id: &str) -> Answer {
    Answer::NotFound(format!("no client {id}\n"))
}

/// A view by request path: `Some` for an admin path, `None` for any other.
pub fn view(path: &str, srv: &Server, info: &AdminInfo) -> Option<Answer> {
    Some(match path {
        "/status" => json(&status::status(srv, info)),
        "/clients" => {
            let mut v = srv.state.clients_snapshot();
            for c in &mut v {
                c.address = srv.layouts.peer_of(c.id).map(|a| a.ip().to_string());
            }
            json(&v)
        }
        "/layouts" => json(&layouts(srv, Instant::now())),
        _ => {
            let id = client_path(path, "states")?;
            match parse_clientid(id).and_then(|c| srv.state.client_states(c)) {
                Some(v) => json(&v),
                None => no_client(id),
            }
        }
    })
}

/// `/layouts`: the ledger's view, each recall in flight with its age as well as its
/// deadline. The ledger keeps only the deadline, which is the send time plus the recall
/// window (`recall_deadline`, two leases), so the age is that window less the time left.
fn layouts(srv: &Server, now: Instant) -> serde_json::Value {
    let window = crate::nfs4::layouts::recall::recall_deadline(&srv.layouts_env(), now)
        .saturating_duration_since(now)
        .as_secs();
    let mut v = serde_json::to_value(srv.layouts.snapshot(now)).unwrap_or_default();
    let holders = v
        .as_array_mut()
        .into_iter()
        .flatten()
        .filter_map(|f| f.get_mut("holders")?.as_array_mut())
        .flatten();
    for recall in holders.filter_map(|h| h.get_mut("recall")?.as_object_mut()) {
        let left = recall.get("deadline_in_seconds").and_then(|d| d.as_u64());
        let age = window.saturating_sub(left.unwrap_or(0));
        recall.insert("age_seconds".into(), age.into());
    }
    v
}

/// An action by request path (POST): `Some` for an admin action, `None` for any other.
/// `/clients/ID/evict` expires the client now and fences its layouts, as lease expiry
/// does (`layouts::recall::expire`), before it answers.
pub fn action(path: &str, srv: &Server) -> Option<Answer> {
    let id = client_path(path, "evict")?;
    let Some(client) = parse_clientid(id) else {
        return Some(no_client(id));
    };
    if !srv.state.evict_client(client) {
        return Some(no_client(id));
    }
    crate::nfs4::layouts::recall::expire(
        &srv.layouts_env(),
        &srv.state.take_dropped_layouts(),
        Instant::now(),
    );
    tracing::info!(
        client = format!("{client:016x}"),
        "client evicted by the administrator"
    );
    Some(json(
        &serde_json::json!({ "evicted": format!("{client:016x}") }),
    ))
}

/// The paths `view` and `action` answer (for the 404 text).
pub const PATHS: &[&str] = &[
    "/status",
    "/clients",
    "/clients/ID/states",
    "/layouts",
    "POST /clients/ID/evict",
];
