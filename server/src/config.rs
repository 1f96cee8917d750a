//! The daemon's configuration: a TOML file (`deploy/pnfsd.toml` is the annotated example),
//! then command-line flags over it. Every key has a default, so no file is needed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::rpc::RpcOptions;
use crate::server::NfsOptions;
use crate::store::StoreOptions;
use crate::volume::VolumeSource;

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

/// `export_sync`: design.md §4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ExportSync {
    #[default]
    Sync,
    Async,
}

/// `layoutcommit`: design.md §4 ("sync" reproduces XFS forcing the log on every LAYOUTCOMMIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LayoutCommitMode {
    #[default]
    Datasync,
    Sync,
}

/// A layout type offered in `fs_layout_types` (design.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayoutTypeName {
    Block,
    Scsi,
}

impl LayoutTypeName {
    /// `layouttype4`: LAYOUT4_BLOCK_VOLUME = 3, LAYOUT4_SCSI = 5.
    pub fn number(self) -> u32 {
        match self {
            LayoutTypeName::Block => 3,
            LayoutTypeName::Scsi => 5,
        }
    }
}

/// A size written as bytes (`8589934592`) or with a suffix (`"8G"`, `"512M"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Num(u64),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Num(n) => Ok(Size(n)),
            Raw::Str(s) => parse_size(&s).map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `123`, `4K`, `512M`, `8G`, `1T` (binary multiples; a trailing `iB`/`B` is allowed).
pub fn parse_size(s: &str) -> Result<Size, ConfigError> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (num, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(ConfigError::Size(s.to_string())),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| ConfigError::Size(s.to_string()))?;
    n.checked_mul(1 << shift)
        .map(Size)
        .ok_or_else(|| ConfigError::Size(s.to_string()))
}

/// The file's keys. Unknown keys are an error (a typo must not silently fall back).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the embedded default volume lives.
    pub data_dir: PathBuf,
    /// The data volume: a file, a block device or an external NVMe/TCP namespace
    /// (`nvme-tcp://HOST[:PORT]/NQN[?nsid=..]`, crate::nvme_volume); default
    /// `<data_dir>/volume.img`.
    pub volume: Option<PathBuf>,
    /// Size of a volume file created on first start.
    pub volume_size: Size,
    pub listen: SocketAddr,
    /// The embedded NVMe/TCP target (issue 5, server/src/nvme.rs); `"off"` disables it.
    #[serde(deserialize_with = "listen_or_off")]
    pub nvme_listen: Option<SocketAddr>,
    /// Subsystem NQN of the target.
    pub nvme_nqn: String,
    /// Host NQNs the target admits; unset admits any host.
    pub nvme_allowed_hosts: Option<Vec<String>>,
    /// Address the Discovery Log advertises (behind NAT); default: the one the host reached.
    pub nvme_advertise: Option<SocketAddr>,
    /// With an external NVMe/TCP volume, also export it through the embedded target (off by
    /// default: the clients connect to the external target themselves).
    pub nvme_reexport: bool,
    pub lease_seconds: u32,
    /// Default: one lease, as knfsd does (a client reclaims within its first renewal).
    pub grace_seconds: Option<u32>,
    pub export_sync: ExportSync,
    pub layout_types: Vec<LayoutTypeName>,
    pub layoutcommit: LayoutCommitMode,
    /// Run to fence a block-layout client that does not return its layout (design.md §5).
    pub fence_command: Option<String>,
    /// Most speculative preallocation past EOF per RW LAYOUTGET ("0" turns it off;
    /// docs/pnfs.md "Preallocation").
    pub layout_prealloc_max: Size,
    pub log_force_interval_seconds: u64,
    /// Transport limit on one RPC record (rpc/record.rs).
    pub max_record_size: Size,
    /// Accept AUTH_NONE for COMPOUND (as "nobody").
    pub allow_auth_none: bool,
    /// Open NFS connections; at the cap an idle one with no session makes room (rpc/limits.rs).
    pub max_connections: usize,
    /// A connection with no session that is idle this long is closed.
    pub idle_timeout_seconds: u64,
    /// The Prometheus metrics endpoint (`GET /metrics`, server/src/metrics.rs); off when unset.
    pub metrics_listen: Option<SocketAddr>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./pnfsd-data"),
            volume: None,
            volume_size: Size(8 << 30),
            listen: SocketAddr::from(([127, 0, 0, 1], 2049)),
            nvme_listen: Some(SocketAddr::from(([127, 0, 0, 1], 4420))),
            nvme_nqn: "nqn.2026-11.org.pnfsd:volume".to_string(),
            nvme_allowed_hosts: None,
            nvme_advertise: None,
            nvme_reexport: false,
            lease_seconds: 90,
            grace_seconds: None,
            export_sync: ExportSync::Sync,
            layout_types: vec![LayoutTypeName::Block],
            layoutcommit: LayoutCommitMode::Datasync,
            fence_command: None,
            layout_prealloc_max: Size(layout::reach::DEFAULT_PREALLOC_MAX_BYTES),
            log_force_interval_seconds: 30,
            max_record_size: Size(crate::rpc::record::DEFAULT_MAX_RECORD as u64),
            allow_auth_none: true,
            max_connections: crate::rpc::DEFAULT_MAX_CONNECTIONS,
            idle_timeout_seconds: crate::rpc::DEFAULT_IDLE_TIMEOUT.as_secs(),
            metrics_listen: None,
        }
    }
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
}

/// `nvme_listen`: an address, or `"off"`.
fn listen_or_off<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    s.trim()
        .parse()
        .map(Some)
        .map_err(|_| serde::de::Error::custom(format!("bad address {s:?} (ADDR:PORT or \"off\")")))
}

impl Config {
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|err| ConfigError::Parse {
            path: path.to_path_buf(),
            err: Box::new(err),
        })?;
        c.validate()?;
        Ok(c)
    }

    /// The file (or the defaults when `path` is `None`) with the flags applied.
    pub fn load(path: Option<&Path>, o: &Overrides) -> Result<Config, ConfigError> {
        let mut c = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|err| ConfigError::Read {
                    path: p.to_path_buf(),
                    err,
                })?;
                Config::parse(&text, p)?
            }
            None => Config::default(),
        };
        c.apply(o);
        c.validate()?;
        Ok(c)
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
        Ok(())
    }

    /// The volume path: `volume`, or `<data_dir>/volume.img`.
    pub fn volume_path(&self) -> PathBuf {
        self.volume
            .clone()
            .unwrap_or_else(|| self.data_dir.join("volume.img"))
    }

    /// What `volume` names: a file or block device, or an external NVMe/TCP namespace.
    pub fn volume_source(&self) -> Result<VolumeSource, ConfigError> {
        VolumeSource::parse(&self.volume_path()).map_err(ConfigError::Invalid)
    }

    /// Where the embedded NVMe/TCP target listens, if it runs: `nvme_listen`, except that an
    /// external volume is only re-exported when `nvme_reexport` asks for it.
    pub fn embedded_target(&self) -> Option<SocketAddr> {
        match self.volume_source() {
            Ok(VolumeSource::Nvme(_)) if !self.nvme_reexport => None,
            _ => self.nvme_listen,
        }
    }

    pub fn nfs_options(&self) -> NfsOptions {
        let mut types: Vec<u32> = self.layout_types.iter().map(|t| t.number()).collect();
        types.dedup();
        NfsOptions {
            lease_seconds: self.lease_seconds,
            grace_seconds: self.grace_seconds.unwrap_or(self.lease_seconds),
            layout_types: types,
            sync: self.export_sync == ExportSync::Sync,
            layoutcommit_sync: self.layoutcommit == LayoutCommitMode::Sync,
            fence_command: self.fence_command.clone(),
            layout_prealloc_max: self.layout_prealloc_max.0,
        }
    }

    pub fn store_options(&self) -> StoreOptions {
        StoreOptions {
            sync: self.export_sync == ExportSync::Sync,
            log_force_interval: Duration::from_secs(self.log_force_interval_seconds.max(1)),
        }
    }

    pub fn rpc_options(&self) -> RpcOptions {
        RpcOptions {
            max_record: self.max_record_size.0 as usize,
            auth: crate::rpc::auth::AuthPolicy {
                allow_none: self.allow_auth_none,
            },
            max_connections: self.max_connections,
            idle_timeout: Duration::from_secs(self.idle_timeout_seconds),
            ..RpcOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8G").unwrap(), Size(8 << 30));
        assert_eq!(parse_size("512m").unwrap(), Size(512 << 20));
        assert_eq!(parse_size("4KiB").unwrap(), Size(4096));
        assert_eq!(parse_size("1T").unwrap(), Size(1 << 40));
        assert_eq!(parse_size("12345").unwrap(), Size(12345));
        for bad in ["", "G", "8X", "-1G", "99999999999T", "1.5G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_full_file_parses() {
        let text = r#"
            data_dir = "/srv/pnfs"
            volume = "/dev/nvme0n1"
            volume_size = "16G"
            listen = "0.0.0.0:2049"
            nvme_listen = "0.0.0.0:4420"
            nvme_nqn = "nqn.test:vol"
            lease_seconds = 30
            grace_seconds = 45
            export_sync = "async"
            layout_types = ["block", "scsi"]
            layoutcommit = "sync"
            fence_command = "/usr/local/bin/fence %c"
            log_force_interval_seconds = 5
            max_record_size = 2097152
            allow_auth_none = false
            max_connections = 50
            idle_timeout_seconds = 7
        "#;
        let c = Config::parse(text, Path::new("t.toml")).unwrap();
        assert_eq!(c.volume_path(), PathBuf::from("/dev/nvme0n1"));
        assert_eq!(c.volume_size, Size(16 << 30));
        assert_eq!(c.nvme_listen, Some("0.0.0.0:4420".parse().unwrap()));
        assert_eq!(c.nvme_nqn, "nqn.test:vol");
        let n = c.nfs_options();
        assert_eq!((n.lease_seconds, n.grace_seconds, n.sync), (30, 45, false));
        assert_eq!(n.layout_types, vec![3, 5]);
        assert!(n.layoutcommit_sync);
        assert_eq!(n.fence_command.as_deref(), Some("/usr/local/bin/fence %c"));
        assert_eq!(c.store_options().log_force_interval, Duration::from_secs(5));
        let r = c.rpc_options();
        assert_eq!((r.max_record, r.auth.allow_none), (2 << 20, false));
        assert_eq!(
            (r.max_connections, r.idle_timeout),
            (50, Duration::from_secs(7))
        );
    }

    #[test]
    fn defaults_and_errors() {
        let c = Config::parse("", Path::new("empty.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.volume_path(), PathBuf::from("./pnfsd-data/volume.img"));
        assert_eq!(c.nfs_options().layout_types, vec![3]);
        assert!(c.nfs_options().sync && !c.nfs_options().layoutcommit_sync);
        for bad in [
            "lisen = \"1.2.3.4:5\"",
            "export_sync = \"maybe\"",
            "layout_types = [\"files\"]",
            "layout_types = []",
            "lease_seconds = 0",
            "volume_size = \"big\"",
            "listen = \"nohost\"",
            "nvme_listen = \"of\"",
            "nvme_nqn = \"volume\"",
            "max_connections = 0",
            "idle_timeout_seconds = 0",
        ] {
            assert!(Config::parse(bad, Path::new("x")).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_nvme_target_is_on_by_default_and_off_by_name() {
        let c = Config::default();
        assert_eq!(c.nvme_listen, Some("127.0.0.1:4420".parse().unwrap()));
        assert_eq!(c.nvme_allowed_hosts, None);
        for off in ["nvme_listen = \"off\"", "nvme_listen = \"OFF\""] {
            assert_eq!(
                Config::parse(off, Path::new("x")).unwrap().nvme_listen,
                None
            );
        }
        let c = Config::parse(
            "nvme_allowed_hosts = [\"nqn.2014-08.org.nvmexpress:uuid:1\"]\n\
             nvme_advertise = \"10.0.2.2:4420\"",
            Path::new("x"),
        )
        .unwrap();
        assert_eq!(c.nvme_allowed_hosts.unwrap().len(), 1);
        assert_eq!(c.nvme_advertise.map(|a| a.port()), Some(4420));
    }

    #[test]
    fn metrics_endpoint_is_off_by_default_and_set_by_key_or_flag() {
        assert_eq!(Config::default().metrics_listen, None);
        let c = Config::parse("metrics_listen = \"127.0.0.1:9400\"", Path::new("x")).unwrap();
        assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9400));
        assert!(Config::parse("metrics_listen = \"nowhere\"", Path::new("x")).is_err());
        let o = Overrides {
            metrics_listen: Some("127.0.0.1:9401".parse().unwrap()),
            ..Overrides::default()
        };
        let c = Config::load(None, &o).unwrap();
        assert_eq!(c.metrics_listen.map(|a| a.port()), Some(9401));
    }

    #[test]
    fn the_example_file_is_the_defaults() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/pnfsd.toml");
        let c = Config::load(Some(&p), &Overrides::default()).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.toml");
        std::fs::write(
            &p,
            "listen = \"127.0.0.1:3049\"\nlease_seconds = 20\ndata_dir = \"/a\"\n",
        )
        .unwrap();
        let c = Config::load(Some(&p), &Overrides::default()).unwrap();
        assert_eq!((c.listen.port(), c.lease_seconds), (3049, 20));
        let o = Overrides {
            data_dir: Some("/b".into()),
            listen: Some("127.0.0.1:4049".parse().unwrap()),
            nvme_listen: Some("127.0.0.1:4421".parse().unwrap()),
            no_nvme: false,
            lease_seconds: Some(60),
            metrics_listen: None,
        };
        let c = Config::load(Some(&p), &o).unwrap();
        assert_eq!((c.listen.port(), c.lease_seconds), (4049, 60));
        // The grace period follows the lease unless the file sets it.
        assert_eq!(c.nfs_options().grace_seconds, 60);
        assert_eq!(c.volume_path(), PathBuf::from("/b/volume.img"));
        assert_eq!(c.nvme_listen.map(|a| a.port()), Some(4421));
        let off = Overrides {
            no_nvme: true,
            ..o.clone()
        };
        assert_eq!(Config::load(Some(&p), &off).unwrap().nvme_listen, None);
        assert!(Config::load(Some(&dir.path().join("missing.toml")), &o).is_err());
        assert!(Config::load(
            None,
            &Overrides {
                lease_seconds: Some(0),
                ..o
            }
        )
        .is_err());
    }

    #[test]
    fn an_external_volume_turns_the_embedded_target_off() {
        let c = Config::default();
        assert!(matches!(c.volume_source().unwrap(), VolumeSource::File(_)));
        assert_eq!(c.embedded_target(), c.nvme_listen);
        let text = "volume = \"nvme-tcp://10.1.2.3/nqn.2014-08.org.example:vol?nsid=2\"\n";
        let c = Config::parse(text, Path::new("x")).unwrap();
        match c.volume_source().unwrap() {
            VolumeSource::Nvme(s) => assert_eq!((s.port, s.nsid), (4420, 2)),
            v => panic!("{v:?}"),
        }
        assert_eq!(c.embedded_target(), None);
        let c = Config::parse(&format!("{text}nvme_reexport = true\n"), Path::new("x")).unwrap();
        assert_eq!(c.embedded_target(), c.nvme_listen);
        assert!(c.embedded_target().is_some());
        for bad in [
            "volume = \"nvme-tcp://10.1.2.3/vol\"",
            "volume = \"nvme-tcp://10.1.2.3/nqn.a?nsid=0\"",
        ] {
            assert!(Config::parse(bad, Path::new("x")).is_err(), "{bad}");
        }
    }
}
