//! The daemon: what puts the pieces together from the configuration and serves them.
//! main.rs parses the command line and dispatches here.
//!
//! - `args`: the `mkfs` and `serve` arguments;
//! - `mkfs`: formatting a volume, and the fresh volume file `serve` creates;
//! - `serve`: listeners, mount, the services until a signal, unmount;
//! - `signals`: systemd notifications, the signals handled, a SIGHUP's reload;
//! - `logging`: the log lines and their reloadable filter;
//! - `nvme`: the embedded NVMe/TCP target (or an external namespace) wired to the server;
//! - `target`: `pnfsd target`, the standalone NVMe/TCP target of a storage node.
//!
//! A module of the library rather than of the binary: the library's own tests use the NVMe
//! wiring (nfs4/tests/pnfs/, nvme/ tests), and tools/deps.py sees the daemon's imports
//! against the layers like any other module's.

pub mod args;
pub mod logging;
pub mod mkfs;
pub mod nvme;
pub mod serve;
pub mod signals;
pub mod target;

use std::path::{Path, PathBuf};

use crate::preflight::PreflightError;
use crate::store::StoreError;

/// Why a command failed: main.rs prints it as `pnfsd: error: …`.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("configuration {path}: {err}")]
    ConfigFile {
        path: PathBuf,
        err: crate::config::ConfigError,
    },
    #[error("cannot format {target}: {err}")]
    Mkfs { target: String, err: StoreError },
    #[error("cannot mount {volume}: {err}")]
    Mount { volume: String, err: StoreError },
    #[error("unmount of {volume}: {err}")]
    Unmount { volume: String, err: StoreError },
    #[error(transparent)]
    Nvme(#[from] crate::nvme::NvmeError),
    #[error(transparent)]
    Volume(#[from] crate::volume::VolumeError),
    #[error(transparent)]
    Target(#[from] target::TargetError),
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error(transparent)]
    Admin(#[from] crate::admin::cli::CommandError),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    /// The volume's reservation is another MDS's (docs/ha.md "Takeover").
    #[error(transparent)]
    Claim(#[from] crate::nvme::volume::ClaimError),
    #[error("{0}")]
    Takeover(String),
    /// Another MDS took the volume over while this one served it: it stopped at once and
    /// wrote nothing more (docs/ha.md "A fenced MDS").
    #[error(
        "fenced: another MDS took {volume} over (its NVMe reservation refused this MDS); \
         this MDS stopped serving without writing the volume again"
    )]
    Fenced { volume: String },
}

/// A configuration error, naming the file when the message does not already.
pub fn config_err(path: Option<&Path>, err: crate::config::ConfigError) -> DaemonError {
    match path {
        Some(path) if matches!(err, crate::config::ConfigError::Invalid(_)) => {
            DaemonError::ConfigFile {
                path: path.to_path_buf(),
                err,
            }
        }
        _ => err.into(),
    }
}

/// An I/O error, saying what was being done.
pub fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DaemonError {
    let what = what.into();
    move |err| DaemonError::Io { what, err }
}

/// `status`, `clients`, `layouts`: one view of a running daemon's admin endpoint, printed.
pub fn admin(
    view: crate::admin::cli::View,
    a: &crate::admin::cli::AdminArgs,
) -> Result<(), DaemonError> {
    let out = crate::admin::cli::run(view, a)?;
    print!("{out}");
    Ok(())
}
