//! Exports and client access rules, the knfsd / NFS-Ganesha way: which
//! hosts may use the namespace, read-only or read-write, with which credentials, squashed how,
//! and whether they get layouts.
//!
//! ```text
//! [[exports]] path = "/"                 config.rs holds the list; this module compiles it
//!   [[exports.clients]] hosts = [...]    (host names resolved, CIDRs parsed) into an
//!     access, squash, anon_uid/gid,      `ExportTable`, and answers one `Decision` per
//!     sec, pnfs                          COMPOUND from the peer address and the credential.
//! ```
//! The dispatcher (`nfs4/compound.rs`) asks for the decision once per request and enforces it
//! from each operation's `OpFlags::access`; operations never look at the rules themselves.
//! A reload (SIGHUP) swaps the whole table, so a COMPOUND sees one table from start to end.
//!
//! Rules are tried in file order and the first whose `hosts` match the peer decides, as in
//! Ganesha's CLIENT blocks (knfsd orders by kind of match instead; file order is explicit).
//! Refusals, as knfsd answers them:
//! - a peer that no rule names: NFS4ERR_ACCESS on every operation that touches the namespace
//!   (session operations still work, as in knfsd, which checks exports per filehandle);
//! - a flavor the rule's `sec` does not list: NFS4ERR_WRONGSEC (knfsd `check_nfsd_access`),
//!   except SECINFO / SECINFO_NO_NAME, which answer the rule's flavors (RFC 8881 §2.6.3.1);
//! - a change on a read-only rule: NFS4ERR_ROFS (knfsd maps EROFS so);
//! - LAYOUTGET / GETDEVICEINFO / GETDEVICELIST with `pnfs = false`, or LAYOUTGET on a
//!   read-only rule (a read-write layout would let the client write the volume directly):
//!   NFS4ERR_LAYOUTUNAVAILABLE, and `fs_layout_types` is empty for that client.
//!
//! Only the root of the namespace can be exported for now: a sub-directory export needs the
//! export in the filehandle (a regular file records no parent), which is left for later.

use std::net::{IpAddr, ToSocketAddrs};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::nfs4::status::NfsStat;
use crate::rpc::auth::{Cred, Squash};
use crate::rpc::msg::flavor;

/// `nobody` / `nogroup`, knfsd's default `anonuid` / `anongid`.
pub const ANON_ID: u32 = 65534;

/// One `[[exports]]` block of the configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ExportConfig {
    /// The exported directory, a path in pnfsd's namespace (only "/" for now).
    #[serde(default = "root_path")]
    pub path: String,
    /// The client rules, tried in order.
    pub clients: Vec<ClientRule>,
}

fn root_path() -> String {
    "/".to_string()
}

/// `access`: knfsd's `rw` / `ro`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AccessMode {
    #[default]
    Rw,
    Ro,
}

/// A flavor a rule accepts: knfsd's `sec=sys` / `sec=none`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SecFlavor {
    Sys,
    None,
}

impl SecFlavor {
    fn number(self) -> u32 {
        match self {
            SecFlavor::Sys => flavor::AUTH_SYS,
            SecFlavor::None => flavor::AUTH_NONE,
        }
    }
}

/// One `[[exports.clients]]` rule.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientRule {
    /// Host names, addresses, CIDR networks (`10.0.0.0/24`, `fd00::/8`) or `"*"` (any host).
    pub hosts: Vec<String>,
    #[serde(default)]
    pub access: AccessMode,
    /// `root_squash` (the default, as in knfsd), `no_root_squash` or `all_squash`.
    #[serde(default)]
    pub squash: Squash,
    /// The ids squashed callers (and AUTH_NONE callers) get.
    #[serde(default = "anon_id")]
    pub anon_uid: u32,
    #[serde(default = "anon_id")]
    pub anon_gid: u32,
    /// Flavors accepted, in order of preference (what SECINFO answers). AUTH_NONE only when
    /// listed.
    #[serde(default = "sec_sys")]
    pub sec: Vec<SecFlavor>,
    /// Offer pNFS layouts to these clients.
    #[serde(default = "yes")]
    pub pnfs: bool,
}

fn anon_id() -> u32 {
    ANON_ID
}
fn sec_sys() -> Vec<SecFlavor> {
    vec![SecFlavor::Sys]
}
fn yes() -> bool {
    true
}

impl ClientRule {
    /// A rule for `hosts` with every other setting at its default.
    pub fn for_hosts(hosts: &[&str]) -> ClientRule {
        ClientRule {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            access: AccessMode::Rw,
            squash: Squash::Root,
            anon_uid: ANON_ID,
            anon_gid: ANON_ID,
            sec: sec_sys(),
            pnfs: true,
        }
    }
}

/// What pnfsd exports when the file has no `[[exports]]`: the namespace to this machine only
/// (nothing is opened to the network silently), without root squashing, since root on the
/// server host can read and write the volume itself anyway.
pub fn default_exports() -> Vec<ExportConfig> {
    vec![ExportConfig {
        path: root_path(),
        clients: vec![ClientRule {
            squash: Squash::None,
            ..ClientRule::for_hosts(&["127.0.0.0/8", "::1"])
        }],
    }]
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExportError {
    #[error("exports: path {0:?}: only the root \"/\" can be exported for now")]
    Path(String),
    #[error("exports: an export of {0:?} has no client rule (its clients = [] admits no one)")]
    NoClients(String),
    #[error("exports: a client rule has no hosts")]
    NoHosts,
    #[error("exports: a client rule has an empty sec list")]
    NoSec,
    #[error("exports: bad network {0:?} (ADDRESS/PREFIX, e.g. 10.0.0.0/24)")]
    Network(String),
    #[error("exports: cannot resolve host {host:?}: {err}")]
    Resolve { host: String, err: String },
}

/// A `hosts` entry, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Any,
    /// An address or a network (a host name resolves to its addresses, prefix full).
    Net(IpAddr, u8),
}

impl HostMatch {
    fn matches(&self, peer: IpAddr) -> bool {
        match *self {
            HostMatch::Any => true,
            HostMatch::Net(net, len) => in_network(peer, net, len),
        }
    }
}

/// `peer` is in `net/len` (an IPv4-mapped IPv6 peer counts as its IPv4 address).
fn in_network(peer: IpAddr, net: IpAddr, len: u8) -> bool {
    match (canonical(peer), canonical(net)) {
        (IpAddr::V4(p), IpAddr::V4(n)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(len.min(32)))
                .unwrap_or(0);
            u32::from(p) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(p), IpAddr::V6(n)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(len.min(128)))
                .unwrap_or(0);
            u128::from(p) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

fn canonical(a: IpAddr) -> IpAddr {
    match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    }
}

/// Compiles one `hosts` entry: `*`, `ADDR`, `ADDR/PREFIX`, or a host name (resolved now:
/// its addresses at load or reload time, as knfsd resolves at export time).
fn compile_host(h: &str) -> Result<Vec<HostMatch>, ExportError> {
    let h = h.trim();
    if h == "*" {
        return Ok(vec![HostMatch::Any]);
    }
    if let Some((addr, len)) = h.split_once('/') {
        let net: IpAddr = addr
            .parse()
            .map_err(|_| ExportError::Network(h.to_string()))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| ExportError::Network(h.to_string()))?;
        return Ok(vec![HostMatch::Net(net, len)]);
    }
    if let Ok(a) = h.parse::<IpAddr>() {
        return Ok(vec![HostMatch::Net(a, full_prefix(a))]);
    }
    let resolved = (h, 0u16)
        .to_socket_addrs()
        .map_err(|e| ExportError::Resolve {
            host: h.to_string(),
            err: e.to_string(),
        })?;
    let out: Vec<_> = resolved
        .map(|s| HostMatch::Net(s.ip(), full_prefix(s.ip())))
        .collect();
    if out.is_empty() {
        return Err(ExportError::Resolve {
            host: h.to_string(),
            err: "no address".into(),
        });
    }
    Ok(out)
}

fn full_prefix(a: IpAddr) -> u8 {
    if a.is_ipv4() {
        32
    } else {
        128
    }
}

/// A rule, compiled.
#[derive(Debug, Clone)]
struct Rule {
    hosts: Vec<HostMatch>,
    conf: ClientRule,
}

/// The exports in force: built from the configuration at start and on every reload.
#[derive(Debug, Clone)]
pub struct ExportTable {
    rules: Vec<Rule>,
}

impl Default for ExportTable {
    /// The built-in default ([`default_exports`]); it resolves no name, so it cannot fail.
    fn default() -> Self {
        ExportTable::compile(&default_exports()).unwrap_or(ExportTable { rules: Vec::new() })
    }
}

impl ExportTable {
    /// Checks and compiles the `[[exports]]` blocks (resolving host names).
    pub fn compile(exports: &[ExportConfig]) -> Result<ExportTable, ExportError> {
        let mut rules = Vec::new();
        for e in exports {
            if !e.path.trim_end_matches('/').is_empty() {
                return Err(ExportError::Path(e.path.clone()));
            }
            if e.clients.is_empty() {
                return Err(ExportError::NoClients(e.path.clone()));
            }
            for c in &e.clients {
                if c.hosts.is_empty() {
                    return Err(ExportError::NoHosts);
                }
                if c.sec.is_empty() {
                    return Err(ExportError::NoSec);
                }
                let mut hosts = Vec::new();
                for h in &c.hosts {
                    hosts.extend(compile_host(h)?);
                }
                rules.push(Rule {
                    hosts,
                    conf: c.clone(),
                });
            }
        }
        Ok(ExportTable { rules })
    }

    /// The access of a request from `peer` with credential `cred`.
    pub fn decide(&self, peer: IpAddr, cred: &Cred) -> Decision {
        let Some(rule) = self
            .rules
            .iter()
            .find(|r| r.hosts.iter().any(|h| h.matches(peer)))
        else {
            return Decision::refused();
        };
        let c = &rule.conf;
        let flavors: Vec<u32> = c.sec.iter().map(|s| s.number()).collect();
        Decision {
            admitted: true,
            flavor_ok: flavors.contains(&cred.flavor),
            write: c.access == AccessMode::Rw,
            pnfs: c.pnfs,
            flavors,
            cred: cred.squashed(c.squash, c.anon_uid, c.anon_gid),
        }
    }

    /// Whether any rule admits a host beyond this machine (for the start-up warnings).
    pub fn admits_remote(&self) -> bool {
        self.rules.iter().flat_map(|r| &r.hosts).any(|h| match *h {
            HostMatch::Any => true,
            HostMatch::Net(a, len) => !canonical(a).is_loopback() || len < 8,
        })
    }
}

/// The shared, swappable table (`Server::exports`).
#[derive(Debug, Default)]
pub struct Exports(RwLock<Arc<ExportTable>>);

impl Exports {
    pub fn new(t: ExportTable) -> Exports {
        Exports(RwLock::new(Arc::new(t)))
    }

    /// The table now in force (a COMPOUND keeps this one to its end).
    pub fn current(&self) -> Arc<ExportTable> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `t` in force for the COMPOUNDs that start from now on (SIGHUP).
    pub fn replace(&self, t: ExportTable) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
    }
}

/// What one request may do, computed once per COMPOUND by the dispatcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// A rule names the peer.
    pub admitted: bool,
    /// The request's flavor is one the rule accepts.
    pub flavor_ok: bool,
    /// The rule is `rw`.
    pub write: bool,
    /// The rule offers layouts.
    pub pnfs: bool,
    /// The rule's flavors, in order (SECINFO's answer).
    pub flavors: Vec<u32>,
    /// The credential the operations act with (squashed by the rule).
    pub cred: Cred,
}

impl Decision {
    /// A peer no rule names.
    fn refused() -> Decision {
        Decision {
            admitted: false,
            flavor_ok: false,
            write: false,
            pnfs: false,
            flavors: Vec::new(),
            cred: Cred::anonymous(ANON_ID, ANON_ID),
        }
    }

    /// Everything allowed, the credential as given (handler tests that bypass the
    /// dispatcher).
    pub fn allow_all(cred: Cred) -> Decision {
        Decision {
            admitted: true,
            flavor_ok: true,
            write: true,
            pnfs: true,
            flavors: vec![flavor::AUTH_SYS],
            cred,
        }
    }

    /// The dispatcher's check of an operation that needs `need`: `Some(status)` refuses it.
    pub fn check(&self, need: Need) -> Option<NfsStat> {
        if need == Need::Nothing {
            return None;
        }
        if !self.admitted {
            return Some(NfsStat::ACCESS);
        }
        if need == Need::Secinfo {
            return None;
        }
        if !self.flavor_ok {
            return Some(NfsStat::WRONGSEC);
        }
        match need {
            Need::Write | Need::LayoutWrite if !self.write => Some(NfsStat::ROFS),
            Need::Layout | Need::LayoutWrite if !self.pnfs => Some(NfsStat::LAYOUTUNAVAILABLE),
            // A layout is read-write (the client writes the volume with it): none for `ro`.
            Need::Layout if !self.write => Some(NfsStat::LAYOUTUNAVAILABLE),
            _ => None,
        }
    }

    /// An operation that changes the namespace only in some of its forms (OPEN with
    /// create or write access) asks this once it has decoded its arguments.
    pub fn require_write(&self) -> Result<(), NfsStat> {
        if self.write {
            Ok(())
        } else {
            Err(NfsStat::ROFS)
        }
    }
}

/// What an operation needs of the access rules (the op table's `OpFlags::access`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Touches no file (session and state operations, the put-filehandle operations, which
    /// leave the refusal to the operation after them as RFC 8881 §2.6.3.1.1 asks, and the
    /// operations that only give state back: CLOSE, LOCKU, DELEGRETURN, LAYOUTRETURN).
    Nothing,
    /// SECINFO, SECINFO_NO_NAME: a rule must name the peer; any flavor.
    Secinfo,
    /// Reads the namespace.
    Read,
    /// Changes it: NFS4ERR_ROFS on a read-only rule.
    Write,
    /// Hands out layouts or device addresses: `pnfs = true`, and `rw`.
    Layout,
    /// LAYOUTCOMMIT: a change made through a layout.
    LayoutWrite,
}

/// One line per rule, for the logs (start and SIGHUP).
pub fn describe(exports: &[ExportConfig]) -> Vec<String> {
    let mut out = Vec::new();
    for e in exports {
        for c in &e.clients {
            let sec: Vec<&str> = c
                .sec
                .iter()
                .map(|s| match s {
                    SecFlavor::Sys => "sys",
                    SecFlavor::None => "none",
                })
                .collect();
            out.push(format!(
                "{} {} {} {} anon {}:{} sec={} pnfs={}",
                e.path,
                c.hosts.join(","),
                match c.access {
                    AccessMode::Rw => "rw",
                    AccessMode::Ro => "ro",
                },
                c.squash.name(),
                c.anon_uid,
                c.anon_gid,
                sec.join(":"),
                c.pnfs
            ));
        }
    }
    out
}

impl Default for ClientRule {
    fn default() -> Self {
        ClientRule::for_hosts(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn sys(uid: u32, gid: u32) -> Cred {
        Cred {
            flavor: flavor::AUTH_SYS,
            uid,
            gid,
            gids: vec![0, gid],
            machine: b"m".to_vec(),
        }
    }

    fn table(toml_text: &str) -> ExportTable {
        #[derive(Deserialize)]
        struct F {
            exports: Vec<ExportConfig>,
        }
        let f: F = toml::from_str(toml_text).unwrap();
        ExportTable::compile(&f.exports).unwrap()
    }

    #[test]
    fn hosts_networks_names_and_any() {
        let t = table(
            r#"
            [[exports]]
            [[exports.clients]]
            hosts = ["10.1.2.3"]
            access = "ro"
            [[exports.clients]]
            hosts = ["10.1.0.0/16", "fd00::/8"]
            [[exports.clients]]
            hosts = ["localhost"]
            pnfs = false
            "#,
        );
        let d = |a: &str| t.decide(ip(a), &sys(1, 1));
        // First matching rule decides: 10.1.2.3 is in the /16 too, but its own rule is first.
        assert!(!d("10.1.2.3").write);
        assert!(d("10.1.2.4").write && d("10.1.255.1").admitted);
        assert!(!d("10.2.0.1").admitted);
        assert!(d("fd12::1").admitted && !d("fe80::1").admitted);
        // An IPv4-mapped IPv6 peer (a listener on [::]) is its IPv4 address.
        assert!(d("::ffff:10.1.9.9").admitted);
        // "localhost" resolved to the loopback address(es).
        assert!(d("127.0.0.1").admitted && !d("127.0.0.1").pnfs);
        assert!(!d("127.0.0.2").admitted);
        let any = table("[[exports]]\n[[exports.clients]]\nhosts = [\"*\"]\n");
        assert!(any.decide(ip("192.0.2.1"), &sys(1, 1)).admitted);
        assert!(any.admits_remote() && !ExportTable::default().admits_remote());
        for bad in ["10.0.0.0/33", "10.0.0/8", "x/8", "::/129"] {
            assert!(compile_host(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            compile_host("no-such-host.invalid"),
            Err(ExportError::Resolve { .. })
        ));
    }

    #[test]
    fn the_default_serves_this_machine_only() {
        let t = ExportTable::default();
        let root = sys(0, 0);
        let d = t.decide(ip("127.0.0.1"), &root);
        assert!(d.admitted && d.flavor_ok && d.write && d.pnfs);
        assert_eq!(d.cred, root, "no root squash on the loopback default");
        assert!(t.decide(ip("::1"), &root).admitted);
        assert!(t.decide(ip("127.9.9.9"), &root).admitted);
        for remote in ["10.0.0.1", "192.168.1.1", "2001:db8::1"] {
            let d = t.decide(ip(remote), &root);
            assert_eq!(d.check(Need::Read), Some(NfsStat::ACCESS), "{remote}");
            assert_eq!(d.check(Need::Layout), Some(NfsStat::ACCESS), "{remote}");
            assert_eq!(d.check(Need::Nothing), None);
        }
        // AUTH_NONE is off by default: WRONGSEC, but SECINFO still answers.
        let none = Cred::anonymous(ANON_ID, ANON_ID);
        let d = t.decide(ip("127.0.0.1"), &none);
        assert_eq!(d.check(Need::Read), Some(NfsStat::WRONGSEC));
        assert_eq!(d.check(Need::Secinfo), None);
    }

    #[test]
    fn squash_access_sec_and_pnfs_rules() {
        let t = table(
            r#"
            [[exports]]
            path = "/"
            [[exports.clients]]
            hosts = ["127.0.0.2"]
            access = "ro"
            [[exports.clients]]
            hosts = ["127.0.0.3"]
            squash = "all_squash"
            anon_uid = 1234
            anon_gid = 4321
            sec = ["sys", "none"]
            pnfs = false
            [[exports.clients]]
            hosts = ["127.0.0.4"]
            "#,
        );
        // root_squash is the default: root's uid, gid and group 0 become the anon ids.
        let d = t.decide(ip("127.0.0.4"), &sys(0, 0));
        assert_eq!((d.cred.uid, d.cred.gid), (ANON_ID, ANON_ID));
        assert!(!d.cred.gids.contains(&0));
        let d = t.decide(ip("127.0.0.4"), &sys(1000, 100));
        assert_eq!(
            (d.cred.uid, d.cred.gid, &d.cred.gids[..]),
            (1000, 100, &[ANON_ID, 100][..])
        );
        assert_eq!(d.check(Need::LayoutWrite), None);
        // ro: reads yes, changes ROFS, no layout.
        let d = t.decide(ip("127.0.0.2"), &sys(1000, 100));
        assert_eq!(d.check(Need::Read), None);
        assert_eq!(d.check(Need::Write), Some(NfsStat::ROFS));
        assert_eq!(d.check(Need::Layout), Some(NfsStat::LAYOUTUNAVAILABLE));
        assert_eq!(d.require_write(), Err(NfsStat::ROFS));
        // all_squash with anon ids; AUTH_NONE accepted where listed; pnfs = false.
        let d = t.decide(ip("127.0.0.3"), &sys(1000, 100));
        assert_eq!((d.cred.uid, d.cred.gid, d.cred.gids.len()), (1234, 4321, 0));
        assert_eq!(d.flavors, vec![flavor::AUTH_SYS, flavor::AUTH_NONE]);
        let d = t.decide(ip("127.0.0.3"), &Cred::anonymous(ANON_ID, ANON_ID));
        assert_eq!(d.check(Need::Write), None);
        assert_eq!((d.cred.uid, d.cred.gid), (1234, 4321));
        assert_eq!(d.check(Need::Layout), Some(NfsStat::LAYOUTUNAVAILABLE));
    }

    #[test]
    fn bad_exports_are_refused() {
        let rule = ClientRule::for_hosts(&["*"]);
        let e = |path: &str, clients: Vec<ClientRule>| {
            ExportTable::compile(&[ExportConfig {
                path: path.into(),
                clients,
            }])
            .unwrap_err()
        };
        assert_eq!(
            e("/srv", vec![rule.clone()]),
            ExportError::Path("/srv".into())
        );
        assert_eq!(e("/", vec![]), ExportError::NoClients("/".into()));
        assert_eq!(e("/", vec![ClientRule::default()]), ExportError::NoHosts);
        let nosec = ClientRule {
            sec: vec![],
            ..rule
        };
        assert_eq!(e("/", vec![nosec]), ExportError::NoSec);
    }
}
