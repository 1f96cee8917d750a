//! The daemon's configuration: a TOML file (`deploy/pnfsd.toml` is the annotated, packaged
//! file: `/etc/pnfsd/pnfsd.toml`), then command-line flags over it. Every key has a default,
//! so no file is needed.
//!
//! Paths in a file are relative to the file's own directory, never to the daemon's current
//! directory (`cd / && pnfsd serve --config …` must not format a fresh volume
//! elsewhere); flags are relative to the current directory, as for any command.
//! SIGHUP re-reads the file: [`reload_plan`] says which changed keys apply at once
//! ([`RELOADABLE`]) and which need a restart.

mod file;
mod ha;
mod load;
mod options;
mod reload;
mod size;
pub mod target;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::PathBuf;

pub use file::{Config, ExportSync, LayoutCommitMode, LayoutTypeName, LogFormat};
pub use ha::ReservationKey;
pub use reload::{reload_plan, ReloadPlan, RELOADABLE};
pub use size::{parse_size, Size};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: {err}")]
    Parse {
        path: PathBuf,
        err: Box<toml::de::Error>,
    },
    #[error("bad size {0:?} (expected bytes or a number with K, M, G or T)")]
    Size(String),
    #[error("{0}")]
    Invalid(String),
}

/// The `serve` flags that override the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub data_dir: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub nvme_listen: Option<SocketAddr>,
    /// `--no-nvme`: no embedded target, whatever the file says.
    pub no_nvme: bool,
    pub lease_seconds: Option<u32>,
    /// `--metrics-listen`: turns the metrics endpoint on (or moves it).
    pub metrics_listen: Option<SocketAddr>,
    /// `--metadata-volume`: the metadata member of a split volume.
    pub metadata_volume: Option<PathBuf>,
}
