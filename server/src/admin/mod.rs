//! The admin endpoint (issue 16): read-only JSON views of a running pnfsd on the metrics
//! listener, `GET /status` and `GET /clients`, when the configuration says `admin = true`
//! (off by default). Unauthenticated, like `/metrics`: the listener belongs on the loopback
//! or a management network (docs/operations.md). `pnfsd status` and `pnfsd clients`
//! (`cli`) read them.
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

/// A view by request path: `Some(json)` for an admin path, `None` for any other.
pub fn view(path: &str, srv: &Server, info: &AdminInfo) -> Option<String> {
    let json = match path {
        "/status" => serde_json::to_string_pretty(&status::status(srv, info)),
        "/clients" => serde_json::to_string_pretty(&srv.state.clients_snapshot()),
        _ => return None,
    };
    // Plain data structs: encoding cannot fail, but a failure must not panic the endpoint.
    Some(json.unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")) + "\n")
}

/// The paths `view` answers (for the 404 text).
pub const PATHS: &[&str] = &["/status", "/clients"];
