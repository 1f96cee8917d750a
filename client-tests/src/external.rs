//! An "external" NVMe/TCP target for tests of pnfsd on an external volume
//! (`volume = "nvme-tcp://..."`): the crate's own target over a temp file, on a runtime of
//! its own (the test's runtime blocks while the harness waits for pnfsd).

use std::path::PathBuf;
use std::sync::Arc;

use nvme_tcp::{FileBackend, Initiator, InitiatorConfig, NamespaceConfig, Target, TargetConfig};

use crate::harness::{pnfsd_bin, PnfsdProcess, ServerOptions};

pub const NQN: &str = "nqn.2026-11.org.example:external";
/// The external namespace's identity: unrelated to the volume UUID mkfs writes.
pub const TARGET_UUID: [u8; 16] = *b"external-target!";

pub struct ExternalTarget {
    rt: Option<tokio::runtime::Runtime>,
    pub target: Target,
    /// The namespace's backing file: what the test checks "from outside" the server.
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl ExternalTarget {
    /// A 256 MiB namespace 1.
    pub fn start() -> ExternalTarget {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("external.img");
        std::fs::File::create(&path)
            .and_then(|f| f.set_len(256 << 20))
            .expect("namespace file");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("target runtime");
        let ns = NamespaceConfig {
            nsid: 1,
            backend: Arc::new(FileBackend::open(&path, 4096).expect("file backend")),
            volume_uuid: TARGET_UUID,
        };
        let target = std::thread::scope(|s| {
            s.spawn(|| Target::start_on(&rt, "127.0.0.1:0", TargetConfig::new(NQN, vec![ns])))
                .join()
                .expect("target thread")
                .expect("target start")
        });
        ExternalTarget {
            rt: Some(rt),
            target,
            path,
            _dir: dir,
        }
    }

    /// The volume URL pnfsd serves, as the default MDS host.
    pub fn url(&self) -> String {
        format!(
            "nvme-tcp://{}/{NQN}?nsid=1&timeout=5",
            self.target.local_addr()
        )
    }

    /// The volume URL as MDS node `hostnqn` reaches it.
    pub fn url_as(&self, hostnqn: &str) -> String {
        format!("{}&hostnqn={hostnqn}", self.url())
    }

    /// A pNFS client's own connection to the namespace.
    pub async fn client(&self) -> Initiator {
        Initiator::connect(
            self.target.local_addr(),
            InitiatorConfig::new(NQN, "nqn.2014-08.org.example:client"),
        )
        .await
        .expect("client connect")
    }

    /// `pnfsd mkfs` of the namespace.
    pub fn mkfs(&self) {
        let out = std::process::Command::new(pnfsd_bin().expect("pnfsd binary"))
            .args(["mkfs", &self.url()])
            .output()
            .expect("pnfsd mkfs");
        assert!(
            out.status.success(),
            "pnfsd mkfs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `pnfsd serve` of the namespace, with `extra` config lines.
    pub fn serve(&self, extra: &str) -> PnfsdProcess {
        self.serve_as(&self.url(), extra, &[]).expect("pnfsd serve")
    }

    /// `pnfsd serve` of `url` with `extra` config lines and `args` (e.g. `--takeover`).
    pub fn serve_as(
        &self,
        url: &str,
        extra: &str,
        args: &[&str],
    ) -> crate::error::Result<PnfsdProcess> {
        PnfsdProcess::start_with(ServerOptions {
            config_toml: Some(format!(
                "volume = \"{url}\"\ngrace_seconds = 2\nlease_seconds = 10\n{extra}"
            )),
            extra_args: args.iter().map(|a| a.to_string()).collect(),
        })
    }
}

impl Drop for ExternalTarget {
    fn drop(&mut self) {
        self.target.shutdown();
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}
