//! The pnfsd a workload talks to: one the bench starts itself (with its metrics endpoint on
//! and a config of the workload's choosing), or one already running (`--server`), with the
//! data path its writers use (the volume file, or the embedded NVMe/TCP target with `--nvme`)
//! and the metrics endpoint its counters come from.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use client_tests::{ClientError, PnfsdProcess, Result, ServerOptions};

use super::counters::{scrape, ServerCounters};
use super::data::{DataPath, NvmeVol};

/// The NQN the bench gives the servers it starts (and pnfsd's default, for `--server`).
pub const DEFAULT_NQN: &str = "nqn.2026-11.org.pnfsd:volume";

/// How the bench reaches its servers (command-line options).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--server HOST:PORT`: a running pnfsd instead of starting one.
    pub server: Option<SocketAddr>,
    /// `--volume PATH`: the running server's volume (file or block device).
    pub volume: Option<PathBuf>,
    /// `--nvme`: write through the NVMe/TCP initiator instead of the volume file.
    pub nvme: bool,
    /// `--nvme-addr HOST:PORT` of a running server's target (default: its host, port 4420).
    pub nvme_addr: Option<SocketAddr>,
    /// `--nqn`: the running server's subsystem NQN (default [`DEFAULT_NQN`]).
    pub nqn: Option<String>,
    /// `--metrics HOST:PORT`: the running server's metrics endpoint.
    pub metrics: Option<SocketAddr>,
    /// `--enforcement`: compare two started servers, the target's layout check on and off
    /// (bench/mod.rs `ENFORCEMENT_ORDER`); needs `--nvme`, where the check runs.
    pub enforcement: bool,
}

pub struct Target {
    proc: Option<PnfsdProcess>,
    pub nfs: SocketAddr,
    pub metrics: Option<SocketAddr>,
    /// Where writers put their bytes (None for `meta`, which writes no data).
    pub data: Option<DataPath>,
}

/// The address in pnfsd's `metrics on http://ADDR/metrics` log line.
fn metrics_addr(log: &str) -> Option<SocketAddr> {
    let at = log.rfind("metrics on http://")? + "metrics on http://".len();
    log[at..].split('/').next()?.parse().ok()
}

impl Target {
    /// Starts a pnfsd with `extra_toml` added to the bench's config; `writers` I/O queues
    /// when its data path is NVMe.
    pub async fn start(
        extra_toml: &str,
        o: &Options,
        data: bool,
        writers: usize,
    ) -> Result<Target> {
        let toml = format!(
            "volume_size = \"2G\"\ngrace_seconds = 1\nnvme_nqn = \"{DEFAULT_NQN}\"\n{extra_toml}"
        );
        let proc = PnfsdProcess::start_with(ServerOptions {
            config_toml: Some(toml),
            // Port 0: the server picks a free one and logs it before "ready".
            extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
        })?;
        let metrics = metrics_addr(&proc.log_text());
        if metrics.is_none() {
            return Err(ClientError::Harness(format!(
                "pnfsd logged no metrics address:\n{}",
                proc.log_text()
            )));
        }
        let data = match (data, o.nvme) {
            (false, _) => None,
            (true, true) => Some(DataPath::Nvme(Arc::new(
                NvmeVol::connect(proc.nvme_addr(), DEFAULT_NQN, writers as u16).await?,
            ))),
            (true, false) => Some(DataPath::File(Arc::new(
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(proc.data_dir().join("volume.img"))?,
            ))),
        };
        Ok(Target {
            nfs: proc.addr(),
            proc: Some(proc),
            metrics,
            data,
        })
    }

    /// The running server of `--server`.
    pub async fn external(o: &Options, data: bool, writers: usize) -> Result<Target> {
        let nfs = o
            .server
            .ok_or_else(|| ClientError::Harness("no --server".into()))?;
        let data = match (data, o.nvme, &o.volume) {
            (false, _, _) => None,
            (true, true, _) => {
                let addr = o
                    .nvme_addr
                    .unwrap_or_else(|| SocketAddr::new(nfs.ip(), 4420));
                let nqn = o.nqn.as_deref().unwrap_or(DEFAULT_NQN);
                Some(DataPath::Nvme(Arc::new(
                    NvmeVol::connect(addr, nqn, writers as u16).await?,
                )))
            }
            (true, false, Some(p)) => Some(DataPath::File(Arc::new(
                std::fs::OpenOptions::new().read(true).write(true).open(p)?,
            ))),
            (true, false, None) => {
                return Err(ClientError::Harness(
                    "--server needs --volume PATH or --nvme for layout I/O".into(),
                ))
            }
        };
        Ok(Target {
            proc: None,
            nfs,
            metrics: o.metrics,
            data,
        })
    }

    /// The server's counters now (None without a metrics endpoint).
    pub async fn counters(&self) -> Result<Option<ServerCounters>> {
        match self.metrics {
            Some(a) => Ok(Some(scrape(a).await?)),
            None => Ok(None),
        }
    }

    pub fn data(&self) -> Result<&DataPath> {
        self.data
            .as_ref()
            .ok_or_else(|| ClientError::Harness("no data path".into()))
    }

    /// Stops a server the bench started (SIGTERM, clean unmount); a running one is left alone.
    pub fn stop(mut self) -> Result<()> {
        match self.proc.as_mut() {
            Some(p) => p.terminate().map(|_| ()),
            None => Ok(()),
        }
    }
}

/// `after - before` when both were read.
pub fn delta(
    before: Option<ServerCounters>,
    after: Option<ServerCounters>,
) -> Option<ServerCounters> {
    Some(after?.since(&before?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_metrics_address_in_the_log() {
        let log =
            "[run 1] 2026 INFO pnfsd: metrics on http://127.0.0.1:41234/metrics\n[run 1] ready";
        assert_eq!(metrics_addr(log), Some("127.0.0.1:41234".parse().unwrap()));
        assert_eq!(metrics_addr("nothing"), None);
    }
}
