//! `[target]`: the standalone NVMe/TCP target a storage node runs (`pnfsd target`,
//! daemon/target.rs; deploy/pnfsd-target.toml shows every key). It exports volume files or
//! block devices as namespaces of one NVM subsystem with the embedded target's code; it never
//! mounts them. Not `pnfsd serve`'s: the section is read from the same file format, and
//! `serve` ignores it.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ConfigError, Size};

/// The `[target]` table. Unknown keys are an error, as in the rest of the file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TargetSection {
    /// Where the target listens; off the loopback only with `allowed_hosts` or
    /// `allow_any_host = true` (`check`).
    pub listen: SocketAddr,
    /// Subsystem NQN.
    pub nqn: String,
    /// Host NQNs that may connect; unset admits any host.
    pub allowed_hosts: Option<Vec<String>>,
    /// Admit any host NQN on a listener reachable beyond this machine.
    pub allow_any_host: bool,
    /// Address the Discovery Log advertises (behind NAT); default: the one the host reached.
    pub advertise: Option<SocketAddr>,
    /// Hosts that may write the region before `data_start` (superblock, log, checkpoint
    /// slots) of a namespace that holds a pnfsd superblock: the MDSes. Every other host is
    /// refused there (Access Denied).
    pub mds_hosts: Vec<String>,
    /// Where each namespace keeps its reservations with Persist Through Power Loss
    /// (`nvme-ns<nsid>.reservations`) and, without a pnfsd superblock, its identifier
    /// (`nvme-ns<nsid>.uuid`); created if missing.
    pub state_dir: PathBuf,
    /// `GET /metrics` with the target's NVMe series; off when unset.
    pub metrics_listen: Option<SocketAddr>,
    /// The embedded target's bounds, under the names `pnfsd serve` gives them
    /// (`Config::nvme_limits`, docs/nvme-tcp.md "Limits").
    pub nvme_max_controllers: usize,
    pub nvme_max_controllers_per_host: usize,
    pub nvme_max_connections: usize,
    pub nvme_max_kato_ms: u32,
    pub nvme_max_send_queued: Size,
    pub nvme_connect_timeout_ms: u32,
    /// `[[target.namespaces]]`, in NSID order unless `nsid` says otherwise.
    pub namespaces: Vec<TargetNamespace>,
}

/// One `[[target.namespaces]]` entry.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetNamespace {
    /// A volume file or block device; never created or formatted by the target.
    pub path: PathBuf,
    /// Default: its place in the list, from 1.
    #[serde(default)]
    pub nsid: Option<u32>,
    /// Host NQNs allowed to read and write it and issue its reservation commands; unset:
    /// every host admitted to the target.
    #[serde(default)]
    pub hosts: Option<Vec<String>>,
}

impl Default for TargetSection {
    fn default() -> Self {
        let l = nvme_tcp::Limits::default();
        TargetSection {
            listen: SocketAddr::from(([127, 0, 0, 1], 4420)),
            nqn: "nqn.2026-11.org.pnfsd:target".to_string(),
            allowed_hosts: None,
            allow_any_host: false,
            advertise: None,
            mds_hosts: Vec::new(),
            state_dir: PathBuf::from("/var/lib/pnfsd-target"),
            metrics_listen: None,
            nvme_max_controllers: l.max_controllers,
            nvme_max_controllers_per_host: l.max_controllers_per_host,
            nvme_max_connections: l.max_connections,
            nvme_max_kato_ms: l.max_kato_ms,
            nvme_max_send_queued: Size(l.max_send_queued_per_connection as u64),
            nvme_connect_timeout_ms: l.connect_timeout_ms,
            namespaces: Vec::new(),
        }
    }
}

/// A namespace as the target serves it: `nsid` settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSpec {
    pub nsid: u32,
    pub path: PathBuf,
    pub hosts: Option<Vec<String>>,
}

fn invalid(s: String) -> ConfigError {
    ConfigError::Invalid(s)
}

impl TargetSection {
    /// Relative paths become relative to `dir`, the configuration file's directory (as
    /// `data_dir` and `volume` do, config/mod.rs).
    pub fn resolve_paths(&mut self, dir: &Path) {
        let under = |p: &Path| -> PathBuf {
            let rel = p
                .components()
                .filter(|c| *c != std::path::Component::CurDir);
            dir.join(rel.collect::<PathBuf>())
        };
        if self.state_dir.is_relative() {
            self.state_dir = under(&self.state_dir);
        }
        for ns in &mut self.namespaces {
            if ns.path.is_relative() {
                ns.path = under(&ns.path);
            }
        }
    }

    pub fn limits(&self) -> nvme_tcp::Limits {
        nvme_tcp::Limits {
            max_controllers: self.nvme_max_controllers,
            max_controllers_per_host: self.nvme_max_controllers_per_host,
            max_connections: self.nvme_max_connections,
            max_kato_ms: self.nvme_max_kato_ms,
            // Past usize (a 32-bit host): no bound any host could reach.
            max_send_queued_per_connection: usize::try_from(self.nvme_max_send_queued.0)
                .unwrap_or(usize::MAX),
            connect_timeout_ms: self.nvme_connect_timeout_ms,
            ..nvme_tcp::Limits::default()
        }
    }

    /// The namespaces with their NSIDs, after the checks a start makes: at least one, no
    /// NSID or path twice, the NQN well formed, host rules consistent, and a listener off the
    /// loopback only with a host rule (every admitted host could otherwise overwrite every
    /// namespace; nvmet, likewise, admits no host that is not named unless
    /// `attr_allow_any_host` is set).
    pub fn check(&self) -> Result<Vec<NamespaceSpec>, ConfigError> {
        // NVMe Base 2.0 §4.5: an NQN is "nqn." plus at most 223 bytes in all.
        let nqn = &self.nqn;
        if !nqn.starts_with("nqn.") || nqn.len() > 223 || nqn.contains(char::is_whitespace) {
            return Err(invalid(format!(
                "[target] nqn {nqn:?} must start with \"nqn.\" and have at most 223 bytes"
            )));
        }
        if self.namespaces.is_empty() {
            return Err(invalid(
                "[target] exports no namespace: add [[target.namespaces]] with path = \
                 \"/path/to/volume\""
                    .into(),
            ));
        }
        let mut specs: Vec<NamespaceSpec> = Vec::with_capacity(self.namespaces.len());
        for (i, ns) in self.namespaces.iter().enumerate() {
            let nsid = match ns.nsid {
                Some(n) => n,
                None => u32::try_from(i + 1).map_err(|_| invalid("too many namespaces".into()))?,
            };
            // 0 and FFFFFFFFh are not namespace IDs; FFFFFFFEh is reserved (NVMe Base §3.2.1).
            if nsid == 0 || nsid >= 0xFFFF_FFFE {
                return Err(invalid(format!(
                    "[[target.namespaces]] {}: nsid {nsid} is not a valid namespace ID",
                    ns.path.display()
                )));
            }
            if let Some(o) = specs.iter().find(|s| s.nsid == nsid) {
                return Err(invalid(format!(
                    "[[target.namespaces]]: nsid {nsid} is given to both {} and {}",
                    o.path.display(),
                    ns.path.display()
                )));
            }
            if specs.iter().any(|s| s.path == ns.path) {
                return Err(invalid(format!(
                    "[[target.namespaces]]: {} is exported twice",
                    ns.path.display()
                )));
            }
            specs.push(NamespaceSpec {
                nsid,
                path: ns.path.clone(),
                hosts: ns.hosts.clone(),
            });
        }
        specs.sort_by_key(|s| s.nsid);
        match (&self.allowed_hosts, self.allow_any_host) {
            (Some(_), true) => {
                return Err(invalid(
                    "[target] allowed_hosts and allow_any_host = true contradict each other: \
                     keep one"
                        .into(),
                ))
            }
            (None, false) if !self.listen.ip().is_loopback() => {
                return Err(invalid(format!(
                    "[target] listen {} is reachable from other hosts, and every host that \
                     connects could read and overwrite every namespace: list the hosts' NQNs \
                     (their /etc/nvme/hostnqn) in allowed_hosts = [\"nqn...\"], or set \
                     allow_any_host = true on a trusted network",
                    self.listen
                )))
            }
            _ => {}
        }
        // A host named in a rule but never admitted is a mistake worth failing on.
        if let Some(allowed) = &self.allowed_hosts {
            let allowed: HashSet<&str> = allowed.iter().map(String::as_str).collect();
            let named = self.mds_hosts.iter().map(|h| ("mds_hosts", h)).chain(
                specs
                    .iter()
                    .flat_map(|s| s.hosts.iter().flatten().map(|h| ("a namespace's hosts", h))),
            );
            for (key, h) in named {
                if !allowed.contains(h.as_str()) {
                    return Err(invalid(format!(
                        "[target] {key} names {h:?}, which is not in allowed_hosts: it could \
                         not connect"
                    )));
                }
            }
        }
        Ok(specs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn parse(text: &str) -> Result<TargetSection, ConfigError> {
        Ok(Config::parse(text, Path::new("t.toml"))?.target)
    }

    fn err(text: &str) -> String {
        match parse(text).and_then(|t| t.check()) {
            Err(e) => e.to_string(),
            Ok(s) => panic!("accepted: {s:?}"),
        }
    }

    #[test]
    fn namespaces_get_their_place_as_nsid_and_paths_resolve_against_the_file() {
        let mut t = parse(
            "[target]\nstate_dir = \"state\"\n\
             [[target.namespaces]]\npath = \"meta.img\"\nhosts = [\"nqn.mds\"]\n\
             [[target.namespaces]]\npath = \"/srv/data.img\"\n\
             [[target.namespaces]]\npath = \"x.img\"\nnsid = 7\n",
        )
        .unwrap();
        t.resolve_paths(Path::new("/etc/pnfsd"));
        let s = t.check().unwrap();
        let got: Vec<_> = s.iter().map(|s| (s.nsid, s.path.clone())).collect();
        assert_eq!(
            got,
            vec![
                (1, PathBuf::from("/etc/pnfsd/meta.img")),
                (2, PathBuf::from("/srv/data.img")),
                (7, PathBuf::from("/etc/pnfsd/x.img")),
            ]
        );
        assert_eq!(s[0].hosts, Some(vec!["nqn.mds".to_string()]));
        assert_eq!(t.state_dir, PathBuf::from("/etc/pnfsd/state"));
        assert_eq!(t.listen.to_string(), "127.0.0.1:4420");
        assert_eq!(t.limits(), nvme_tcp::Limits::default());
    }

    #[test]
    fn bad_sections_are_refused_with_what_is_wrong() {
        let ns = "[[target.namespaces]]\npath = \"/a\"\n";
        assert!(err("[target]\n").contains("no namespace"));
        let e = err(&format!(
            "{ns}nsid = 1\n[[target.namespaces]]\npath = \"/b\"\nnsid = 1\n"
        ));
        assert!(
            e.contains("nsid 1") && e.contains("/a") && e.contains("/b"),
            "{e}"
        );
        let e = err(&format!("{ns}[[target.namespaces]]\npath = \"/a\"\n"));
        assert!(e.contains("/a is exported twice"), "{e}");
        let e = err(&format!("{ns}nsid = 0\n"));
        assert!(e.contains("nsid 0"), "{e}");
        let e = err(&format!("[target]\nlisten = \"0.0.0.0:4420\"\n{ns}"));
        assert!(
            e.contains("allowed_hosts") && e.contains("0.0.0.0:4420"),
            "{e}"
        );
        let e = err(&format!(
            "[target]\nallowed_hosts = [\"nqn.a\"]\nallow_any_host = true\n{ns}"
        ));
        assert!(e.contains("contradict"), "{e}");
        let e = err(&format!(
            "[target]\nallowed_hosts = [\"nqn.a\"]\nmds_hosts = [\"nqn.m\"]\n{ns}"
        ));
        assert!(e.contains("nqn.m") && e.contains("mds_hosts"), "{e}");
        let e = err(&format!(
            "[target]\nallowed_hosts = [\"nqn.a\"]\n{ns}hosts = [\"nqn.b\"]\n"
        ));
        assert!(e.contains("nqn.b"), "{e}");
        let e = err(&format!("[target]\nnqn = \"vol\"\n{ns}"));
        assert!(e.contains("nqn"), "{e}");
        assert!(parse("[target]\nlisten_typo = 1\n").is_err());
        // A world listener with a host rule, or with allow_any_host, is accepted.
        for rule in ["allowed_hosts = [\"nqn.a\"]", "allow_any_host = true"] {
            parse(&format!(
                "[target]\nlisten = \"0.0.0.0:4420\"\n{rule}\n{ns}"
            ))
            .unwrap()
            .check()
            .unwrap();
        }
    }

    /// deploy/pnfsd-target.toml: the defaults but for its two namespaces, and its
    /// commented defaults are the built-in ones (uncommented, they change nothing).
    #[test]
    fn the_example_file_is_the_defaults_with_two_namespaces() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/pnfsd-target.toml");
        let text = std::fs::read_to_string(&p).unwrap();
        let t = Config::parse(&text, &p).unwrap().target;
        assert_eq!(t.check().unwrap().len(), 2);
        let d = TargetSection {
            namespaces: t.namespaces.clone(),
            ..TargetSection::default()
        };
        assert_eq!(t, d);
        // The commented keys of [target] with a default, uncommented.
        let defaults: String = text
            .lines()
            .skip_while(|l| *l != "[target]")
            .take_while(|l| !l.starts_with("[[target.namespaces]]"))
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| l.split_once(" = ").is_some_and(|(k, _)| !k.contains(' ')))
            .filter(|l| {
                !["allowed_hosts", "advertise", "metrics_listen"]
                    .iter()
                    .any(|k| l.starts_with(k))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(defaults.contains("nvme_max_connections"), "{defaults}");
        let u = Config::parse(&format!("[target]\n{defaults}"), &p)
            .unwrap()
            .target;
        assert_eq!(u, TargetSection::default());
    }

    /// The failover example of docs/admin-guide.md "pnfsd target" is accepted as it stands.
    #[test]
    fn the_admin_guide_example_is_accepted() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/admin-guide.md");
        let guide = std::fs::read_to_string(&p).unwrap();
        let at = guide.find("\n## pnfsd target\n").unwrap();
        let block = guide[at..].split("```toml\n").nth(1).unwrap();
        let block = &block[..block.find("```").unwrap()];
        let t = Config::parse(block, &p).unwrap().target;
        let s = t.check().unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].hosts.as_ref().map(Vec::len), Some(2));
        assert_eq!(t.mds_hosts.len(), 2);
    }

    /// `pnfsd serve` reads a file with a `[target]` table as before, and its SIGHUP
    /// comparison does not see the table (`serve` does not use it).
    #[test]
    fn serve_ignores_the_section() {
        let with = Config::parse(
            "[target]\n[[target.namespaces]]\npath = \"/a\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let plan = crate::config::reload_plan(&Config::default(), &with).unwrap();
        assert_eq!(plan, crate::config::ReloadPlan::default());
    }
}
