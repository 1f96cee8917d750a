//! systemd notifications, the signals the daemon handles, and a SIGHUP's reload.

use std::path::Path;
use std::sync::Arc;

use crate::config::{reload_plan, Config, Overrides};
use crate::server::Server;

use super::logging::Logging;
use super::{config_err, io_err, DaemonError};

/// systemd readiness (Type=notify, deploy/pnfsd.service); a no-op without NOTIFY_SOCKET.
pub fn notify(states: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("sd_notify: {e}");
    }
}

/// The signals `serve` handles, registered before anything else so that none of them kills
/// the daemon mid-start (a SIGTERM during the mount stops it cleanly once it is up).
pub struct Signals {
    pub term: tokio::signal::unix::Signal,
    pub int: tokio::signal::unix::Signal,
    pub hup: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn register(rt: &tokio::runtime::Runtime) -> Result<Signals, DaemonError> {
        use tokio::signal::unix::{signal, SignalKind};
        let _rt = rt.enter();
        Ok(Signals {
            term: signal(SignalKind::terminate()).map_err(io_err("SIGTERM handler"))?,
            int: signal(SignalKind::interrupt()).map_err(io_err("SIGINT handler"))?,
            hup: signal(SignalKind::hangup()).map_err(io_err("SIGHUP handler"))?,
        })
    }
}

/// What a SIGHUP reloads: the file `serve` started from, with the same flags over it.
pub struct Reloader<'a> {
    pub path: Option<&'a Path>,
    pub overrides: Overrides,
    pub log: &'a Logging,
    pub running: Config,
    /// The server whose exports a reload replaces (set once it exists).
    pub srv: Option<Arc<Server>>,
}

impl Reloader<'_> {
    pub fn reload(&mut self) {
        let Some(path) = self.path else {
            tracing::info!("SIGHUP: no configuration file (--config): nothing to reload");
            return;
        };
        let new = match Config::load(Some(path), &self.overrides) {
            Ok(c) => c,
            Err(e) => {
                let e = config_err(Some(path), e);
                tracing::error!("SIGHUP: {e}; the running configuration stays");
                return;
            }
        };
        let plan = match reload_plan(&self.running, &new) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("SIGHUP: {e}; the running configuration stays");
                return;
            }
        };
        let mut new = new;
        for (key, old, new_v) in &plan.apply {
            if key == "exports" {
                if !self.reload_exports(&new) {
                    // Not applied: the running rules stay, and stay the running config.
                    new.exports = self.running.exports.clone();
                }
                continue;
            }
            if key == "log_level" && self.log.env.is_some() {
                tracing::warn!("SIGHUP: {key} {old} -> {new_v} not applied: RUST_LOG overrides it");
                continue;
            }
            tracing::info!("SIGHUP: {key} {old} -> {new_v}");
        }
        if let Err(e) = self.log.apply(&new) {
            tracing::error!("SIGHUP: {e}");
        }
        if !plan.restart.is_empty() {
            tracing::warn!(
                "SIGHUP: changed in {} but applied only after a restart: {}",
                path.display(),
                plan.restart.join(", ")
            );
        }
        if plan.apply.is_empty() && plan.restart.is_empty() {
            tracing::info!("SIGHUP: {} reloaded, nothing changed", path.display());
        }
        self.running.apply_reloadable(&new);
    }

    /// Puts `new`'s exports in force; `false` (logged) if they do not compile.
    pub fn reload_exports(&self, new: &Config) -> bool {
        let table = match new.export_table() {
            Ok(t) => t,
            Err(e) => {
                tracing::error!("SIGHUP: {e}; the running exports stay");
                return false;
            }
        };
        if let Some(srv) = &self.srv {
            srv.exports.replace(table);
        }
        let old = crate::exports::describe(&self.running.exports);
        let now = crate::exports::describe(&new.exports);
        let mut told = false;
        for r in old.iter().filter(|r| !now.contains(r)) {
            tracing::info!("SIGHUP: exports: rule removed: {r}");
            told = true;
        }
        for r in now.iter().filter(|r| !old.contains(r)) {
            tracing::info!("SIGHUP: exports: rule added: {r}");
            told = true;
        }
        if !told {
            // Same rules in another order (the first match decides) or spelled otherwise.
            tracing::info!("SIGHUP: exports: rules now: {}", now.join("; "));
        }
        true
    }
}
