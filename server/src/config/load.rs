//! Reading a file and the flags over it, and the checks a start or a reload makes.

use std::path::{Path, PathBuf};

use super::{Config, ConfigError, Overrides};
use crate::exports::ExportTable;
use crate::volume::VolumeSource;

impl Config {
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|err| {
            if err.message().contains("`allow_auth_none`") {
                return ConfigError::Invalid(format!(
                    "{}: allow_auth_none is gone: AUTH_NONE is off by default, and an \
                     [[exports.clients]] rule with sec = [\"sys\", \"none\"] accepts it",
                    path.display()
                ));
            }
            ConfigError::Parse {
                path: path.to_path_buf(),
                err: Box::new(err),
            }
        })?;
        c.validate()?;
        Ok(c)
    }

    /// The file (or the defaults when `path` is `None`) with the flags applied; the file's
    /// relative paths are resolved against its directory (module comment).
    pub fn load(path: Option<&Path>, o: &Overrides) -> Result<Config, ConfigError> {
        let mut c = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|err| ConfigError::Read {
                    path: p.to_path_buf(),
                    err,
                })?;
                let mut c = Config::parse(&text, p)?;
                let abs = std::path::absolute(p).map_err(|err| ConfigError::Read {
                    path: p.to_path_buf(),
                    err,
                })?;
                c.resolve_paths(abs.parent().unwrap_or(Path::new("/")));
                c
            }
            None => Config::default(),
        };
        c.apply(o);
        c.validate()?;
        Ok(c)
    }

    /// `data_dir` and a `volume` path that are relative become relative to `dir` (the config
    /// file's directory); so does the default `./pnfsd-data` of a file that sets no data_dir.
    /// An NVMe/TCP URL is not a path.
    fn resolve_paths(&mut self, dir: &Path) {
        let under = |p: &Path| -> PathBuf {
            let rel = p
                .components()
                .filter(|c| *c != std::path::Component::CurDir);
            dir.join(rel.collect::<PathBuf>())
        };
        if self.data_dir.is_relative() {
            self.data_dir = under(&self.data_dir);
        }
        if let Some(v) = &self.volume {
            if v.is_relative() && !v.to_str().is_some_and(crate::nvme::volume::is_nvme_url) {
                self.volume = Some(under(v));
            }
        }
        if let Some(v) = &self.metadata_volume {
            if v.is_relative() && !v.to_str().is_some_and(crate::nvme::volume::is_nvme_url) {
                self.metadata_volume = Some(under(v));
            }
        }
    }

    /// Takes the [`RELOADABLE`](super::RELOADABLE) keys of `new` (a SIGHUP); everything else stays as started.
    pub fn apply_reloadable(&mut self, new: &Config) {
        self.log_level = new.log_level.clone();
        self.exports = new.exports.clone();
    }

    /// The exports compiled (host names resolved): checked at load, so a bad rule fails the
    /// start or the reload.
    pub fn export_table(&self) -> Result<ExportTable, ConfigError> {
        ExportTable::compile(&self.exports).map_err(|e| ConfigError::Invalid(e.to_string()))
    }

    pub fn apply(&mut self, o: &Overrides) {
        if let Some(d) = &o.data_dir {
            self.data_dir = d.clone();
        }
        if let Some(l) = o.listen {
            self.listen = l;
        }
        if let Some(n) = o.nvme_listen {
            self.nvme_listen = Some(n);
        }
        if o.no_nvme {
            self.nvme_listen = None;
        }
        if let Some(s) = o.lease_seconds {
            self.lease_seconds = s;
        }
        if let Some(m) = o.metrics_listen {
            self.metrics_listen = Some(m);
        }
        if let Some(m) = &o.metadata_volume {
            self.metadata_volume = Some(m.clone());
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_seconds == 0 {
            return Err(ConfigError::Invalid("lease_seconds must be > 0".into()));
        }
        if self.layout_types.is_empty() {
            return Err(ConfigError::Invalid(
                "layout_types must name at least one type".into(),
            ));
        }
        // NVMe Base 2.0 §4.5: an NQN is "nqn." plus at most 223 bytes in all.
        let nqn = &self.nvme_nqn;
        if !nqn.starts_with("nqn.") || nqn.len() > 223 || nqn.contains(char::is_whitespace) {
            return Err(ConfigError::Invalid(format!(
                "nvme_nqn {nqn:?} must start with \"nqn.\" and have at most 223 bytes"
            )));
        }
        self.volume_source()?;
        if let Some(m) = self.metadata_volume_source()? {
            if self.volume.is_none() {
                return Err(ConfigError::Invalid(
                    "metadata_volume needs volume (the data member) set too".into(),
                ));
            }
            if m == self.volume_source()? {
                return Err(ConfigError::Invalid(
                    "metadata_volume and volume must be different devices".into(),
                ));
            }
        }
        // Below this not even a CREATE_SESSION with its channel attributes fits.
        if self.max_record_size.0 < 4096 || self.max_record_size.0 > (1 << 30) {
            return Err(ConfigError::Invalid(
                "max_record_size must be between 4K and 1G".into(),
            ));
        }
        if self.max_connections == 0 || self.idle_timeout_seconds == 0 {
            return Err(ConfigError::Invalid(
                "max_connections and idle_timeout_seconds must be > 0".into(),
            ));
        }
        if self.max_clients == 0 || self.max_sessions_per_client == 0 {
            return Err(ConfigError::Invalid(
                "max_clients and max_sessions_per_client must be > 0".into(),
            ));
        }
        // One session of one slot with the smallest cache must fit.
        if self.max_client_memory.0 < 64 << 10 {
            return Err(ConfigError::Invalid(
                "max_client_memory must be at least 64K".into(),
            ));
        }
        self.log_filter()?;
        self.export_table()?;
        self.check_nvme_access()
    }

    /// Any host that reaches the target can read and write the whole volume, so a
    /// listener beyond the loopback must say whom it admits (nvmet, likewise, admits no host
    /// that is not named unless `attr_allow_any_host` is set).
    fn check_nvme_access(&self) -> Result<(), ConfigError> {
        let Some(addr) = self.embedded_target() else {
            return Ok(());
        };
        match (&self.nvme_allowed_hosts, self.nvme_allow_any_host) {
            (Some(_), true) => Err(ConfigError::Invalid(
                "nvme_allowed_hosts and nvme_allow_any_host = true contradict each other: \
                 keep one"
                    .into(),
            )),
            (None, false) if !addr.ip().is_loopback() => Err(ConfigError::Invalid(format!(
                "nvme_listen {addr} is reachable from other hosts, and every host that \
                 connects could read and overwrite the whole volume: list the hosts' NQNs \
                 (their /etc/nvme/hostnqn) in nvme_allowed_hosts = [\"nqn...\"], or set \
                 nvme_allow_any_host = true on a trusted network"
            ))),
            _ => Ok(()),
        }
    }

    /// `log_level` as a filter (checked at load, so a typo fails the start or the reload).
    pub fn log_filter(&self) -> Result<tracing_subscriber::EnvFilter, ConfigError> {
        tracing_subscriber::EnvFilter::builder()
            .parse(&self.log_level)
            .map_err(|e| ConfigError::Invalid(format!("log_level {:?}: {e}", self.log_level)))
    }

    /// NFS reachable from other hosts while the data path is not (or the other way
    /// round) is legal, but remote clients then silently do all their I/O through the MDS
    /// (or reach a target they cannot use): worth a warning at start.
    pub fn reachability_warnings(&self) -> Vec<String> {
        let nfs_remote = !self.listen.ip().is_loopback();
        let data = match self.volume_source() {
            Ok(VolumeSource::Nvme(_)) if self.embedded_target().is_none() => None,
            _ => Some(self.nvme_listen),
        };
        let mut w = Vec::new();
        if nfs_remote && self.export_table().is_ok_and(|t| !t.admits_remote()) {
            w.push(format!(
                "NFS listens on {} but the exports admit only this machine: other hosts get \
                 NFS4ERR_ACCESS (add [[exports]] client rules, docs/admin-guide.md \"Exports\")",
                self.listen
            ));
        }
        match data {
            Some(None) if nfs_remote => w.push(format!(
                "NFS listens on {} but the NVMe/TCP target is off: remote clients get no \
                 layout device and do all their I/O through the MDS",
                self.listen
            )),
            Some(Some(n)) if nfs_remote && n.ip().is_loopback() => w.push(format!(
                "NFS listens on {} but the NVMe/TCP target only on {n}: remote clients \
                 cannot reach the volume and silently fall back to NFS READ/WRITE through \
                 the MDS (set nvme_listen to an address they reach, docs/admin-guide.md)",
                self.listen
            )),
            Some(Some(n)) if !nfs_remote && !n.ip().is_loopback() => w.push(format!(
                "the NVMe/TCP target listens on {n} but NFS only on {}: remote hosts can \
                 reach the volume but cannot mount it",
                self.listen
            )),
            _ => {}
        }
        match (self.admin, self.metrics_listen) {
            (true, None) => w.push(
                "admin = true but metrics_listen is unset: the admin views are not served".into(),
            ),
            (true, Some(m)) if !m.ip().is_loopback() => w.push(format!(
                "the admin views (/status, /clients) are served on {m} without \
                 authentication: anyone who reaches it sees every client"
            )),
            _ => {}
        }
        w
    }
}
