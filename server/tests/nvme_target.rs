//! The embedded NVMe/TCP target of a running `pnfsd serve`: the nvme-tcp
//! Initiator reads the volume's superblock through it, writes the data area, and the bytes
//! are in the volume file after a clean SIGTERM shutdown.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nvme_tcp::{discover, Initiator, InitiatorConfig};

const NQN: &str = "nqn.2026-11.org.pnfsd:test-volume";

fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Daemon {
    fn start(dir: &Path, nfs: SocketAddr, nvme: SocketAddr) -> Daemon {
        Self::start_with(dir, nfs, nvme, "")
    }

    fn start_with(dir: &Path, nfs: SocketAddr, nvme: SocketAddr, extra: &str) -> Daemon {
        let cfg = dir.join("pnfsd.toml");
        std::fs::write(
            &cfg,
            format!("volume_size = \"256M\"\nnvme_nqn = \"{NQN}\"\nlease_seconds = 10\n{extra}\n"),
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_pnfsd"))
            .args(["serve", "--config"])
            .arg(&cfg)
            .arg("--data-dir")
            .arg(dir)
            .args(["--listen", &nfs.to_string()])
            .args(["--nvme-listen", &nvme.to_string()])
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Daemon {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// The next log line containing `pat` (panics with the log after 60 s or at exit).
    fn wait_for(&mut self, pat: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(l) => {
                    self.log.push(l.clone());
                    if l.contains(pat) {
                        return l;
                    }
                }
                Err(_) => panic!("no {pat:?} from pnfsd:\n{}", self.log.join("\n")),
            }
        }
    }

    fn terminate(mut self) -> (bool, String) {
        let st = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let code = self.child.wait().unwrap();
        // The reader thread may still hold the last lines: drain until it sees EOF.
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.log.push(l);
        }
        (code.success(), self.log.join("\n"))
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_initiator_reads_the_superblock_and_writes_the_volume_through_pnfsd() {
    let dir = tempfile::tempdir().unwrap();
    let (nfs, nvme) = (free_port(), free_port());
    // The host belongs to no NFS client: it writes the data area only as an admin host
    // (docs/pnfs.md "The target enforces the layouts").
    let hostnqn = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001";
    let admin = format!("nvme_admin_hosts = [\"{hostnqn}\"]\n");
    let mut d = Daemon::start_with(dir.path(), nfs, nvme, &admin);
    let ready = d.wait_for("pnfsd ready");
    assert!(
        ready.contains(NQN) && ready.contains(&nvme.to_string()),
        "{ready}"
    );
    let uuid = ready.rsplit("uuid ").next().unwrap().trim().to_string();
    let uuid = *uuid::Uuid::parse_str(&uuid).unwrap().as_bytes();

    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    let last_lba = rt().block_on(async {
        let found = discover(nvme, hostnqn).await.unwrap();
        assert!(found.iter().any(|e| e.subnqn == NQN), "{found:?}");
        let ini = Initiator::connect(nvme, InitiatorConfig::new(NQN, hostnqn))
            .await
            .unwrap();
        let ns = ini.identify_namespace(1).await.unwrap();
        assert_eq!(ns.block_size, 4096);
        assert_eq!(ns.blocks * 4096, 256 << 20);
        assert_eq!(ns.nguid, uuid, "NGUID is the volume UUID");
        let b0 = ini.read(1, 0, 1, 4096).await.unwrap();
        assert_eq!(&b0[..8], &layout::superblock::MAGIC);
        assert_eq!(&b0[32..48], &uuid, "the same volume");
        // The superblock is the MDS's: no host writes it through the target.
        let stray = ini
            .write(1, 0, bytes::Bytes::from(vec![0u8; 4096]), 4096, false)
            .await;
        assert!(
            matches!(stray, Err(nvme_tcp::Error::Status(s)) if s == nvme_tcp::Status::ACCESS_DENIED),
            "{stray:?}"
        );
        // The last two blocks are data area, unused on a fresh volume: a host of no client
        // that is not an admin host writes nothing there.
        let last = ns.blocks - 2;
        let other = Initiator::connect(nvme, InitiatorConfig::new(NQN, "nqn.2014-08.org.example:other"))
            .await
            .unwrap();
        let refused = other
            .write(1, last, bytes::Bytes::from(pattern.clone()), 4096, false)
            .await;
        assert!(
            matches!(refused, Err(nvme_tcp::Error::Status(s)) if s == nvme_tcp::Status::ACCESS_DENIED),
            "{refused:?}"
        );
        other.read(1, last, 2, 4096).await.unwrap();
        other.disconnect().await.unwrap();
        ini.write(1, last, bytes::Bytes::from(pattern.clone()), 4096, false)
            .await
            .unwrap();
        ini.flush(1).await.unwrap();
        assert_eq!(ini.read(1, last, 2, 4096).await.unwrap(), pattern);
        ini.disconnect().await.unwrap();
        last
    });

    let (ok, log) = d.terminate();
    assert!(ok, "pnfsd exit status after SIGTERM:\n{log}");
    let stop = log.find("nvme-tcp target stopped").expect(&log);
    let unmount = log.find("unmounted cleanly").expect(&log);
    // shutdown_and_wait returned in time: no connection or backend call outlived it.
    let quiet = log.find("nvme-tcp target quiet").expect(&log);
    assert!(quiet < unmount, "target quiet before the unmount:\n{log}");
    assert!(
        stop < unmount,
        "target stops before the store unmounts:\n{log}"
    );
    let img = std::fs::read(dir.path().join("volume.img")).unwrap();
    let off = (last_lba * 4096) as usize;
    assert_eq!(&img[off..off + pattern.len()], &pattern[..]);
    assert_eq!(&img[32..48], &uuid);
}

#[test]
fn a_taken_nvme_port_fails_with_the_port_and_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap();
    let mut d = Daemon::start(dir.path(), free_port(), taken);
    let line = d.wait_for("pnfsd: error:");
    assert!(
        line.contains(&taken.to_string()) && line.contains("--nvme-listen"),
        "{line}"
    );
    let st = d.child.wait().unwrap();
    assert!(!st.success());
    drop(held);
}

#[test]
fn nvme_allowed_hosts_restricts_the_subsystem() {
    let dir = tempfile::tempdir().unwrap();
    let nvme = free_port();
    let ok_host = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000aa";
    let other = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000bb";
    let mut d = Daemon::start_with(
        dir.path(),
        free_port(),
        nvme,
        &format!("nvme_allowed_hosts = [\"{ok_host}\"]"),
    );
    d.wait_for("pnfsd ready");
    rt().block_on(async {
        let refused = Initiator::connect(nvme, InitiatorConfig::new(NQN, other)).await;
        assert!(
            matches!(refused, Err(nvme_tcp::Error::ConnectRefused { .. })),
            "{:?}",
            refused.err()
        );
        let ini = Initiator::connect(nvme, InitiatorConfig::new(NQN, ok_host))
            .await
            .unwrap();
        assert_eq!(ini.active_namespaces().await.unwrap(), vec![1]);
        ini.disconnect().await.unwrap();
    });
    let (ok, log) = d.terminate();
    assert!(ok, "{log}");
}
