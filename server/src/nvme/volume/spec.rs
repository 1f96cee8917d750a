//! The external volume's address: `nvme-tcp://HOST[:PORT]/SUBSYSTEM-NQN[?KEY=VALUE&...]`.
//!
//! ```text
//! nvme-tcp://10.0.0.5:4420/nqn.2014-08.org.example:vol0?nsid=1&hostnqn=nqn.2026-11.org.pnfsd:mds
//! ```
//! HOST is a name, an IPv4 address or `[IPv6]`; PORT defaults to 4420 (the NVMe/TCP I/O
//! port). The NQN may be percent-encoded (`%3A` for `:`). Keys, all optional:
//! `nsid` (default 1), `hostnqn` (default [`DEFAULT_HOSTNQN`]; the Host ID the reservations
//! key on derives from it), `io_queues` (default 2), `timeout` (seconds a command may take
//! before the volume reports an I/O error, default 30). Unknown keys are an error, as in the
//! config file (a typo must not silently fall back).

use std::fmt;
use std::time::Duration;

/// The URL scheme that marks `volume` as an external NVMe/TCP namespace.
pub const SCHEME: &str = "nvme-tcp://";
/// The IANA port of NVMe/TCP I/O controllers.
pub const DEFAULT_PORT: u16 = 4420;
/// The host NQN the MDS connects with unless the URL names one.
pub const DEFAULT_HOSTNQN: &str = "nqn.2026-11.org.pnfsd:mds";

/// A parsed `nvme-tcp://` volume address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmeVolumeSpec {
    pub host: String,
    pub port: u16,
    pub subnqn: String,
    pub nsid: u32,
    pub hostnqn: String,
    pub io_queues: u16,
    /// Longest a command may take: a target that stops answering (but keeps the TCP
    /// connection) becomes an I/O error instead of a hang.
    pub timeout: Duration,
}

/// True if `s` names an external NVMe/TCP namespace rather than a file.
pub fn is_nvme_url(s: &str) -> bool {
    s.len() >= SCHEME.len() && s[..SCHEME.len()].eq_ignore_ascii_case(SCHEME)
}

impl NvmeVolumeSpec {
    pub fn parse(url: &str) -> Result<NvmeVolumeSpec, String> {
        let bad = |why: &str| format!("bad volume URL {url:?}: {why}");
        if !is_nvme_url(url) {
            return Err(bad("must start with nvme-tcp://"));
        }
        let rest = &url[SCHEME.len()..];
        let (authority, rest) = rest
            .split_once('/')
            .ok_or_else(|| bad("no /SUBSYSTEM-NQN after the address"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (host, port) = split_host_port(authority).ok_or_else(|| bad("bad HOST[:PORT]"))?;
        let subnqn = percent_decode(path).ok_or_else(|| bad("bad %-escape in the NQN"))?;
        check_nqn(&subnqn).map_err(|e| bad(&e))?;
        let mut s = NvmeVolumeSpec {
            host,
            port,
            subnqn,
            nsid: 1,
            hostnqn: DEFAULT_HOSTNQN.to_string(),
            io_queues: 2,
            timeout: Duration::from_secs(30),
        };
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad("query is KEY=VALUE"))?;
            let v = percent_decode(v).ok_or_else(|| bad("bad %-escape"))?;
            match k {
                "nsid" => {
                    // NSID 0 and FFFFFFFFh are not namespaces (NVMe Base 2.0 §3.2.1.2).
                    s.nsid = v
                        .parse()
                        .ok()
                        .filter(|&n| n != 0 && n != u32::MAX)
                        .ok_or_else(|| bad("nsid must be 1..=4294967294"))?
                }
                "hostnqn" => {
                    check_nqn(&v).map_err(|e| bad(&e))?;
                    s.hostnqn = v;
                }
                "io_queues" => {
                    s.io_queues = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=64).contains(n))
                        .ok_or_else(|| bad("io_queues must be 1..=64"))?
                }
                "timeout" => {
                    s.timeout = v
                        .parse()
                        .ok()
                        .filter(|&n: &u64| (1..=3600).contains(&n))
                        .map(Duration::from_secs)
                        .ok_or_else(|| bad("timeout must be 1..=3600 seconds"))?
                }
                _ => return Err(bad(&format!("unknown key {k:?}"))),
            }
        }
        Ok(s)
    }

    /// `HOST:PORT` as a resolver takes it.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for NvmeVolumeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{SCHEME}{}/{}?nsid={}",
            self.authority(),
            self.subnqn,
            self.nsid
        )
    }
}

/// NVMe Base 2.0 §4.5: "nqn." and at most 223 bytes, no whitespace.
fn check_nqn(n: &str) -> Result<(), String> {
    if !n.starts_with("nqn.") || n.len() > 223 || n.contains(char::is_whitespace) {
        return Err(format!(
            "NQN {n:?} must start with \"nqn.\" and have at most 223 bytes"
        ));
    }
    Ok(())
}

fn split_host_port(a: &str) -> Option<(String, u16)> {
    let (host, port) = if let Some(r) = a.strip_prefix('[') {
        let (h, after) = r.split_once(']')?;
        match after {
            "" => (h, None),
            p => (h, Some(p.strip_prefix(':')?)),
        }
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    if host.is_empty() || (host.contains(':') && !a.starts_with('[')) {
        return None;
    }
    let port = match port {
        Some(p) => p.parse().ok().filter(|&p| p != 0)?,
        None => DEFAULT_PORT,
    };
    Some((host.to_string(), port))
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_and_minimal_urls() {
        let s = NvmeVolumeSpec::parse(
            "nvme-tcp://10.0.0.5:4421/nqn.2014-08.org.example%3Avol0?nsid=3&hostnqn=nqn.h:1&io_queues=4&timeout=5",
        )
        .unwrap();
        assert_eq!((s.host.as_str(), s.port), ("10.0.0.5", 4421));
        assert_eq!(s.subnqn, "nqn.2014-08.org.example:vol0");
        assert_eq!((s.nsid, s.hostnqn.as_str()), (3, "nqn.h:1"));
        assert_eq!((s.io_queues, s.timeout), (4, Duration::from_secs(5)));
        let m = NvmeVolumeSpec::parse("NVMe-TCP://storage/nqn.x:y").unwrap();
        assert_eq!((m.host.as_str(), m.port, m.nsid), ("storage", 4420, 1));
        assert_eq!(m.hostnqn, DEFAULT_HOSTNQN);
        assert_eq!(m.authority(), "storage:4420");
        let v6 = NvmeVolumeSpec::parse("nvme-tcp://[::1]:9/nqn.a").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9));
        assert_eq!(v6.authority(), "[::1]:9");
        assert_eq!(v6.to_string(), "nvme-tcp://[::1]:9/nqn.a?nsid=1");
        assert_eq!(NvmeVolumeSpec::parse(&v6.to_string()).unwrap(), v6);
    }

    #[test]
    fn bad_urls_are_refused() {
        for bad in [
            "/var/vol.img",
            "nvme-tcp://host",
            "nvme-tcp://host/",
            "nvme-tcp://host/notnqn",
            "nvme-tcp://:4420/nqn.a",
            "nvme-tcp://host:0/nqn.a",
            "nvme-tcp://host:99999/nqn.a",
            "nvme-tcp://::1/nqn.a",
            "nvme-tcp://[::1/nqn.a",
            "nvme-tcp://h/nqn.a?nsid=0",
            "nvme-tcp://h/nqn.a?nsid=4294967295",
            "nvme-tcp://h/nqn.a?nsid",
            "nvme-tcp://h/nqn.a?nisd=1",
            "nvme-tcp://h/nqn.a?hostnqn=me",
            "nvme-tcp://h/nqn.a?io_queues=0",
            "nvme-tcp://h/nqn.a?timeout=0",
            "nvme-tcp://h/nqn.%zz",
        ] {
            assert!(NvmeVolumeSpec::parse(bad).is_err(), "{bad}");
        }
        assert!(is_nvme_url("nvme-tcp://x/nqn.y") && !is_nvme_url("nvme-tc"));
    }
}
