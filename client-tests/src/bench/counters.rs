//! The server's counters, read from its metrics endpoint (`pnfsd serve --metrics-listen`,
//! server/src/metrics.rs) before and after each timed round, so every mode gets exactly the
//! server work its own round caused. Also the grouping of concurrent LAYOUTCOMMITs that the
//! `newfiles` target ("at most one log write per group") is measured against.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use client_tests::{ClientError, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The counters the bench uses, as deltas over its rounds (or raw values of one scrape).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerCounters {
    pub layoutcommits: f64,
    pub layoutcommit_s: f64,
    /// LAYOUTCOMMITs whose force waited for a log write (several may share one write).
    pub commit_forces_wrote: f64,
    pub commit_flushes_issued: f64,
    pub commit_flushes_joined: f64,
    pub log_commits: f64,
    pub log_forces: f64,
    pub log_forces_wrote: f64,
    /// Log records written: what "log writes" means in the report.
    pub log_writes: f64,
    pub data_flushes_issued: f64,
}

const NAMES: [&str; 10] = [
    "pnfsd_layoutcommits_total",
    "pnfsd_layoutcommit_seconds_total",
    "pnfsd_layoutcommit_log_forces_wrote_total",
    "pnfsd_layoutcommit_data_flushes_issued_total",
    "pnfsd_layoutcommit_data_flushes_joined_total",
    "pnfsd_log_commits_total",
    "pnfsd_log_forces_total",
    "pnfsd_log_forces_wrote_total",
    "pnfsd_log_writes_total",
    "pnfsd_data_flushes_issued_total",
];

impl ServerCounters {
    fn fields(&mut self) -> [&mut f64; 10] {
        [
            &mut self.layoutcommits,
            &mut self.layoutcommit_s,
            &mut self.commit_forces_wrote,
            &mut self.commit_flushes_issued,
            &mut self.commit_flushes_joined,
            &mut self.log_commits,
            &mut self.log_forces,
            &mut self.log_forces_wrote,
            &mut self.log_writes,
            &mut self.data_flushes_issued,
        ]
    }

    /// Reads a Prometheus text exposition; every counter above must be present.
    pub fn parse(text: &str) -> Result<ServerCounters> {
        let mut c = ServerCounters::default();
        for (name, slot) in NAMES.iter().zip(c.fields()) {
            *slot = sample(text, name)
                .ok_or_else(|| ClientError::Protocol(format!("metrics: no {name}")))?;
        }
        Ok(c)
    }

    /// `self - before`, field by field.
    pub fn since(mut self, before: &ServerCounters) -> ServerCounters {
        let mut b = *before;
        for (x, y) in self.fields().into_iter().zip(b.fields()) {
            *x -= *y;
        }
        self
    }

    pub fn add(&mut self, other: &ServerCounters) {
        let mut o = *other;
        for (x, y) in self.fields().into_iter().zip(o.fields()) {
            *x += *y;
        }
    }

    fn per_commit(&self, x: f64) -> f64 {
        if self.layoutcommits > 0.0 {
            x / self.layoutcommits
        } else {
            f64::NAN
        }
    }
    pub fn us_per_commit(&self) -> f64 {
        self.per_commit(self.layoutcommit_s * 1e6)
    }
    pub fn forces_wrote_per_commit(&self) -> f64 {
        self.per_commit(self.commit_forces_wrote)
    }
    pub fn log_writes_per_commit(&self) -> f64 {
        self.per_commit(self.log_writes)
    }
    pub fn flushes_issued_per_commit(&self) -> f64 {
        self.per_commit(self.commit_flushes_issued)
    }
    pub fn flushes_joined_per_commit(&self) -> f64 {
        self.per_commit(self.commit_flushes_joined)
    }
}

/// One `GET /metrics` (HTTP/1.0, the connection closes after the body).
pub async fn scrape(addr: SocketAddr) -> Result<ServerCounters> {
    ServerCounters::parse(&scrape_text(addr).await?)
}

/// The value of the sample `name` (no labels) in an exposition.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The body of one `GET /metrics`.
pub async fn scrape_text(addr: SocketAddr) -> Result<String> {
    let go = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: pnfsd\r\n\r\n")
            .await?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    let raw = tokio::time::timeout(Duration::from_secs(10), go)
        .await
        .map_err(|_| ClientError::Timeout("the metrics endpoint"))??;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| ClientError::Protocol("metrics: no HTTP header".into()))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        let line = head.lines().next().unwrap_or_default();
        return Err(ClientError::Protocol(format!("metrics: {line}")));
    }
    Ok(body.to_string())
}

/// Client-side [start, end] of each LAYOUTCOMMIT of a round.
pub type Interval = (Instant, Instant);

/// Number of groups of concurrent LAYOUTCOMMITs: intervals that overlap (directly or through
/// a chain of overlaps) form one group. A group may be served by one log write at best.
pub fn groups(mut iv: Vec<Interval>) -> usize {
    iv.sort_by_key(|i| i.0);
    let mut n = 0;
    let mut end: Option<Instant> = None;
    for (s, e) in iv {
        match end {
            Some(x) if s <= x => end = Some(x.max(e)),
            _ => {
                n += 1;
                end = Some(e);
            }
        }
    }
    n
}

/// The least number of moments such that every LAYOUTCOMMIT was in flight at one of them:
/// the fewest groups of commits that were all concurrent at once (a minimum clique cover of
/// the interval graph, found greedily by end time). A log write can only serve commits in
/// flight while it runs, so this is the fewest log writes any group commit could have done;
/// [`groups`] chains overlaps and is smaller when writers run back to back.
pub fn concurrent_sets(mut iv: Vec<Interval>) -> usize {
    iv.sort_by_key(|i| i.1);
    let mut n = 0;
    let mut point: Option<Instant> = None;
    for (s, e) in iv {
        if point.is_some_and(|p| s <= p) {
            continue;
        }
        n += 1;
        point = Some(e);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_exposition_and_subtracts() {
        let mut text = String::from("# HELP x\n# TYPE x counter\n");
        for (i, n) in NAMES.iter().enumerate() {
            text.push_str(&format!("{n} {}\n", i + 1));
        }
        text.push_str("pnfsd_layoutcommits_totalx 99\n");
        let c = ServerCounters::parse(&text).unwrap();
        assert_eq!(c.layoutcommits, 1.0);
        assert_eq!(c.log_writes, 9.0);
        let d = c.since(&ServerCounters {
            layoutcommits: 0.5,
            ..Default::default()
        });
        assert_eq!(d.layoutcommits, 0.5);
        assert_eq!(d.log_writes_per_commit(), 18.0);
        assert!(ServerCounters::parse("pnfsd_layoutcommits_total 1\n").is_err());
    }

    #[test]
    fn overlapping_intervals_form_one_group() {
        let t = Instant::now();
        let at = |a: u64, b: u64| (t + Duration::from_millis(a), t + Duration::from_millis(b));
        // [0,10] [5,20] [15,16] chain into one; [30,40] alone; [41,50] [45,46] one more.
        let iv = vec![
            at(15, 16),
            at(0, 10),
            at(30, 40),
            at(5, 20),
            at(45, 46),
            at(41, 50),
        ];
        assert_eq!(groups(iv.clone()), 3);
        assert_eq!(groups(vec![]), 0);
        // [0,10] and [5,20] share a moment, [15,16] needs another; [41,50] [45,46] one.
        assert_eq!(concurrent_sets(iv), 4);
        assert_eq!(concurrent_sets(vec![]), 0);
    }
}
