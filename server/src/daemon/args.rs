//! The arguments of `mkfs` and `serve` (clap definitions; the commands are main.rs's).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::config::{parse_size, Overrides};

#[derive(Debug, Args)]
pub struct MkfsArgs {
    /// The volume: a file, a block device, or nvme-tcp://HOST[:PORT]/NQN[?nsid=N].
    #[arg(value_name = "VOLUME")]
    pub path: PathBuf,
    /// Size of a volume file to create or grow, e.g. 8G (a block device or namespace keeps
    /// its own size).
    #[arg(long, default_value = "8G", value_parser = size_arg)]
    pub size: u64,
    /// Format even if the volume holds a file system, a partition table or a pnfsd volume
    /// (destroys it). A volume that a running pnfsd holds is refused all the same.
    #[arg(long)]
    pub force: bool,
    /// Format a split volume: the superblock, the log and the metadata on this member (a
    /// file, block device or nvme-tcp:// URL), VOLUME its data member.
    #[arg(long, value_name = "VOLUME")]
    pub metadata_volume: Option<PathBuf>,
}

#[derive(Debug, Args, Default)]
pub struct ServeArgs {
    /// TOML configuration (deploy/pnfsd.toml shows every key; packaged as
    /// /etc/pnfsd/pnfsd.toml); its relative paths are relative to its own directory. Flags
    /// override it.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Directory of the embedded default volume (`<DIR>/volume.img`).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// NFS address, default 127.0.0.1:2049.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// Embedded NVMe/TCP target address, default 127.0.0.1:4420 (off the loopback it needs
    /// nvme_allowed_hosts or nvme_allow_any_host in the configuration).
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "no_nvme")]
    pub nvme_listen: Option<SocketAddr>,
    /// Do not start the embedded NVMe/TCP target.
    #[arg(long)]
    pub no_nvme: bool,
    /// NFSv4 lease time in seconds (RFC 8881 §8.3), default 90.
    #[arg(long, value_name = "SECONDS")]
    pub lease_seconds: Option<u32>,
    /// Serve Prometheus metrics (`GET /metrics`) on this address; off by default.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<SocketAddr>,
    /// Take an external volume over from the MDS that holds its reservation, fencing it
    /// (NVMe Preempt and Abort) before the log is read; without it such a volume is refused.
    /// For a standby MDS, as the Pacemaker agent starts it (docs/ha.md).
    #[arg(long)]
    pub takeover: bool,
    /// The metadata member of a split volume (the `metadata_volume` key).
    #[arg(long, value_name = "VOLUME")]
    pub metadata_volume: Option<PathBuf>,
}

impl ServeArgs {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            data_dir: self.data_dir.clone(),
            listen: self.listen,
            nvme_listen: self.nvme_listen,
            no_nvme: self.no_nvme,
            lease_seconds: self.lease_seconds,
            metrics_listen: self.metrics_listen,
            metadata_volume: self.metadata_volume.clone(),
        }
    }
}

pub fn size_arg(s: &str) -> Result<u64, String> {
    parse_size(s).map(|s| s.0).map_err(|e| e.to_string())
}
