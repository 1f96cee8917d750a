//! `pnfsd target`, the standalone NVMe/TCP target (docs/admin-guide.md "pnfsd target"): the
//! real binary on volume files in a temp directory, reached with the crate's initiator as
//! the hosts of a failover deployment would (the MDSes and a client), and by `pnfsd serve`
//! as its `nvme-tcp://` volume.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use client_tests::harness::{free_ports, pnfsd_bin};
use client_tests::ops::Stable;
use client_tests::{PnfsdProcess, ServerOptions, Session};
use nvme_tcp::{AcquireAction, Cptpl, Initiator, InitiatorConfig, RType, RegisterAction, Status};

const NQN: &str = "nqn.2026-11.org.example:storage";
const MDS: &str = "nqn.2014-08.org.example:mds-a";
const MDS_B: &str = "nqn.2014-08.org.example:mds-b";
const CLIENT: &str = "nqn.2014-08.org.example:client";
const BS: u32 = 4096;

/// A `pnfsd target` process on `dir/target.toml`.
struct TargetProc {
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
    addr: SocketAddr,
}

impl TargetProc {
    /// Starts `pnfsd target` with `toml` (its `listen` is added on a free port unless the
    /// text sets one) and waits for its ready line; `Err(log)` if it exits first.
    fn start(dir: &Path, toml: &str) -> Result<TargetProc, String> {
        for _ in 0..5 {
            let [addr] = free_ports::<1>().map_err(|e| e.to_string())?;
            match Self::start_on(dir, toml, addr) {
                Err(log) if log.contains("already in use") => continue,
                r => return r,
            }
        }
        Err("no free port".into())
    }

    fn start_on(dir: &Path, toml: &str, addr: SocketAddr) -> Result<TargetProc, String> {
        let text = if toml.contains("\nlisten =") {
            toml.to_string()
        } else {
            toml.replacen("[target]\n", &format!("[target]\nlisten = \"{addr}\"\n"), 1)
        };
        let cfg = dir.join("target.toml");
        std::fs::write(&cfg, text).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(pnfsd_bin().map_err(|e| e.to_string())?);
        cmd.arg("target")
            .arg("--config")
            .arg(&cfg)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        client_tests::sys::kill_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|e| e.to_string())?;
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = mpsc::channel::<()>();
        for out in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let (log, tx) = (log.clone(), tx.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let ready = line.contains("pnfsd target ready");
                    log.lock().unwrap().push(line);
                    if ready {
                        let _ = tx.send(());
                    }
                }
            });
        }
        drop(tx);
        let mut p = TargetProc {
            child: Some(child),
            log,
            addr,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if rx.recv_timeout(Duration::from_millis(50)).is_ok() {
                return Ok(p);
            }
            if let Some(c) = p.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    p.child = None;
                    // Let the readers drain what it wrote.
                    std::thread::sleep(Duration::from_millis(100));
                    return Err(format!("exit {st}\n{}", p.log_text()));
                }
            }
            if Instant::now() > deadline {
                return Err(format!("not ready\n{}", p.log_text()));
            }
        }
    }

    fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// SIGTERM, and the exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        c.wait().unwrap()
    }

    fn metrics_addr(&self) -> Option<SocketAddr> {
        let log = self.log_text();
        let at = log.rfind("metrics on http://")? + "metrics on http://".len();
        log[at..].split('/').next()?.parse().ok()
    }
}

impl Drop for TargetProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn mkfs(path: &Path, size: &str) {
    let out = Command::new(pnfsd_bin().unwrap())
        .arg("mkfs")
        .arg(path)
        .args(["--size", size])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mkfs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `pnfsd target` with `toml` that must fail: its stderr.
fn refused(dir: &Path, toml: &str) -> String {
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, toml).unwrap();
    let out = Command::new(pnfsd_bin().unwrap())
        .arg("target")
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "accepted:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("pnfsd: error: "), "{err}");
    err
}

async fn host(addr: SocketAddr, nqn: &str) -> Result<Initiator, nvme_tcp::Error> {
    let mut c = InitiatorConfig::new(NQN, nqn);
    c.kato_ms = 0;
    Initiator::connect(addr, c).await
}

fn is(r: Result<(), nvme_tcp::Error>, want: Status) -> bool {
    matches!(r, Err(nvme_tcp::Error::Status(s)) if s.same_code(want))
}

fn block(v: u8) -> Bytes {
    Bytes::from(vec![v; BS as usize])
}

fn scrape(addr: SocketAddr) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn value(text: &str, series: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// A deployment's two members: `meta.img` (namespace 1, the MDSes' alone) and `data.img`
/// (namespace 2, MDSes and client), both pnfsd volumes.
fn deployment(dir: &Path) -> String {
    mkfs(&dir.join("meta.img"), "64M");
    mkfs(&dir.join("data.img"), "64M");
    format!(
        "[target]\nnqn = \"{NQN}\"\nallowed_hosts = [\"{MDS}\", \"{MDS_B}\", \"{CLIENT}\"]\n\
         mds_hosts = [\"{MDS}\", \"{MDS_B}\"]\nstate_dir = \"state\"\n\
         metrics_listen = \"127.0.0.1:0\"\n\
         [[target.namespaces]]\npath = \"meta.img\"\nhosts = [\"{MDS}\", \"{MDS_B}\"]\n\
         [[target.namespaces]]\npath = \"data.img\"\n"
    )
}

/// Both namespaces served: the client reads and writes the data member's data area, never
/// the metadata member nor the data member's metadata region; the MDSes write both; a host
/// not allowed cannot connect; the refusals are counted on /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_namespaces_with_host_rules_and_the_metadata_guard() {
    let dir = tempfile::tempdir().unwrap();
    let toml = deployment(dir.path());
    let t = TargetProc::start(dir.path(), &toml).unwrap();
    let log = t.log_text();
    assert!(log.contains(&format!("nqn {NQN}")), "{log}");
    assert!(log.contains("1 = ") && log.contains("meta.img"), "{log}");
    assert!(log.contains("2 = ") && log.contains("data.img"), "{log}");

    let mds = host(t.addr, MDS).await.unwrap();
    let client = host(t.addr, CLIENT).await.unwrap();
    let end1 = mds.identify_namespace(1).await.unwrap().blocks - 1;
    let end2 = mds.identify_namespace(2).await.unwrap().blocks - 1;
    // The MDS: both namespaces, the metadata region included (its own superblock back).
    let sb1 = mds.read(1, 0, 1, BS).await.unwrap();
    mds.write(1, 0, Bytes::from(sb1), BS, false).await.unwrap();
    mds.write(1, end1, block(1), BS, false).await.unwrap();
    let sb2 = mds.read(2, 0, 1, BS).await.unwrap();
    mds.write(2, 0, Bytes::from(sb2.clone()), BS, false)
        .await
        .unwrap();
    // The client: the data member's data area only.
    client.write(2, end2, block(2), BS, false).await.unwrap();
    assert_eq!(client.read(2, end2, 1, BS).await.unwrap(), block(2));
    assert_eq!(mds.read(1, end1, 1, BS).await.unwrap(), block(1));
    assert!(is(
        client.write(2, 0, block(9), BS, false).await,
        Status::ACCESS_DENIED
    ));
    assert!(is(
        client.write_zeroes(2, 1, 1).await,
        Status::ACCESS_DENIED
    ));
    // It still reads the signature there.
    assert_eq!(client.read(2, 0, 1, BS).await.unwrap(), sb2);
    // Namespace 1 names only the MDSes: reads and writes refused.
    assert!(is(
        client.write(1, end1, block(3), BS, false).await,
        Status::ACCESS_DENIED
    ));
    assert!(is(
        client.read(1, end1, 1, BS).await.map(|_| ()),
        Status::ACCESS_DENIED
    ));
    // Nor may the client touch the MDSes' reservations there.
    assert!(is(
        client
            .reservation_register(1, RegisterAction::Register, false, 0, 0xc)
            .await,
        Status::ACCESS_DENIED
    ));
    // A host not allowed is refused at Connect.
    match host(t.addr, "nqn.2014-08.org.example:stranger").await {
        Err(nvme_tcp::Error::ConnectRefused { .. }) => {}
        r => panic!("a stranger connected: {:?}", r.map(|_| ())),
    }
    let m = scrape(t.metrics_addr().expect("metrics address logged"));
    assert_eq!(
        value(
            &m,
            "pnfsd_target_access_denied_total{nsid=\"1\",reason=\"host\"}"
        ),
        Some(2),
        "{m}"
    );
    assert_eq!(
        value(
            &m,
            "pnfsd_target_access_denied_total{nsid=\"2\",reason=\"metadata\"}"
        ),
        Some(2),
        "{m}"
    );
    assert!(m.contains("pnfsd_nvme_commands_total{"), "{m}");
    assert!(m.contains("pnfsd_nvme_controllers 2"), "{m}");
    drop((mds, client));
}

/// The active MDS's WRITE EXCLUSIVE reservation, registered with Persist Through Power
/// Loss, is back after the target restarts; the standby (an MDS host too) is then refused
/// with Reservation Conflict, counted on /metrics and logged with its NQN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_reservation_survives_a_restart_and_fences_the_other_mds() {
    let dir = tempfile::tempdir().unwrap();
    let toml = deployment(dir.path());
    let mut t = TargetProc::start(dir.path(), &toml).unwrap();
    let a = host(t.addr, MDS).await.unwrap();
    a.reservation_register_cptpl(1, RegisterAction::Register, false, Cptpl::Persist, 0, 0xa)
        .await
        .unwrap();
    a.reservation_acquire(1, AcquireAction::Acquire, RType::WRITE_EXCLUSIVE, 0xa, 0)
        .await
        .unwrap();
    drop(a);
    assert!(t.terminate().success(), "{}", t.log_text());
    assert!(t.log_text().contains("pnfsd target stopped"));

    let t = TargetProc::start(dir.path(), &toml).unwrap();
    let b = host(t.addr, MDS_B).await.unwrap();
    let r = b.reservation_report(1).await.unwrap();
    assert_eq!(r.rtype, RType::WRITE_EXCLUSIVE.0);
    assert!(r.ptpl);
    assert_eq!(r.registrants.len(), 1);
    assert_eq!(r.registrants[0].key, 0xa);
    let end = b.identify_namespace(1).await.unwrap().blocks - 1;
    for _ in 0..3 {
        assert!(is(
            b.write(1, end, block(5), BS, false).await,
            Status::RESERVATION_CONFLICT
        ));
    }
    // The holder still writes.
    let a = host(t.addr, MDS).await.unwrap();
    a.write(1, end, block(6), BS, false).await.unwrap();
    let m = scrape(t.metrics_addr().unwrap());
    assert_eq!(
        value(&m, "pnfsd_nvme_reservation_conflicts_total{nsid=\"1\"}"),
        Some(3),
        "{m}"
    );
    assert_eq!(
        value(&m, "pnfsd_nvme_reservation_conflicts_total{nsid=\"2\"}"),
        Some(0),
        "{m}"
    );
    // Which MDS wrote: the holder's write, none of the refused ones.
    let writes = |h: &str| {
        value(
            &m,
            &format!("pnfsd_target_mds_writes_total{{host=\"{h}\"}}"),
        )
    };
    assert_eq!((writes(MDS), writes(MDS_B)), (Some(1), Some(0)), "{m}");
    let log = t.log_text();
    let lines: Vec<_> = log
        .lines()
        .filter(|l| l.contains("reservation conflict"))
        .collect();
    // The first refusal and the second (a power of two), not the third.
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].contains(MDS_B), "{log}");
}

/// One volume file, one target: a second `pnfsd target` of it is refused, naming it; so is
/// a `pnfsd serve` of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_is_served_by_one_process_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    mkfs(&dir.path().join("v.img"), "64M");
    let toml = "[target]\nstate_dir = \"state\"\n[[target.namespaces]]\npath = \"v.img\"\n";
    let _t = TargetProc::start(dir.path(), toml).unwrap();
    let other = tempfile::tempdir().unwrap();
    std::fs::write(
        other.path().join("bad.toml"),
        format!(
            "[target]\nstate_dir = \"state\"\n[[target.namespaces]]\npath = \"{}\"\n",
            dir.path().join("v.img").display()
        ),
    )
    .unwrap();
    let err = refused(
        other.path(),
        &std::fs::read_to_string(other.path().join("bad.toml")).unwrap(),
    );
    assert!(err.contains("v.img") && err.contains("in use"), "{err}");
    let out = Command::new(pnfsd_bin().unwrap())
        .args(["serve", "--no-nvme", "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--config")
        .arg({
            let p = other.path().join("serve.toml");
            std::fs::write(
                &p,
                format!("volume = \"{}\"\n", dir.path().join("v.img").display()),
            )
            .unwrap();
            p
        })
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("in use"), "{err}");
}

/// Bad configurations: refused with what is wrong and a non-zero exit, never a panic; no
/// volume file is created.
#[test]
fn bad_configurations_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let err = refused(
        d,
        "[target]\nstate_dir = \"state\"\n[[target.namespaces]]\npath = \"missing.img\"\n",
    );
    assert!(
        err.contains("missing.img") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!d.join("missing.img").exists());
    std::fs::write(d.join("a.img"), vec![0u8; 1 << 20]).unwrap();
    std::fs::write(d.join("b.img"), vec![0u8; 1 << 20]).unwrap();
    let err = refused(
        d,
        "[target]\nstate_dir = \"state\"\n[[target.namespaces]]\npath = \"a.img\"\nnsid = 3\n\
         [[target.namespaces]]\npath = \"b.img\"\nnsid = 3\n",
    );
    assert!(err.contains("nsid 3"), "{err}");
    let err = refused(
        d,
        "[target]\nstate_dir = \"state\"\n[[target.namespaces]]\npath = \"a.img\"\n\
         [[target.namespaces]]\npath = \"a.img\"\n",
    );
    assert!(err.contains("exported twice"), "{err}");
    let err = refused(
        d,
        "[target]\nlisten = \"0.0.0.0:4420\"\nstate_dir = \"state\"\n\
         [[target.namespaces]]\npath = \"a.img\"\n",
    );
    assert!(err.contains("allowed_hosts"), "{err}");
    let err = refused(d, "[target]\nnamespace = 1\n");
    assert!(err.contains("namespace"), "{err}");
    // No configuration at all: nothing to export.
    let out = Command::new(pnfsd_bin().unwrap())
        .arg("target")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no namespace"),
        "{err}"
    );
}

/// `pnfsd serve` with `volume = "nvme-tcp://..."` on a volume `pnfsd target` exports: it
/// mounts (writing its log through the target, as an `mds_hosts` host) and serves NFS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_mounts_a_volume_pnfsd_target_exports() {
    let dir = tempfile::tempdir().unwrap();
    mkfs(&dir.path().join("v.img"), "128M");
    let mds = "nqn.2026-11.org.pnfsd:mds";
    let toml = format!(
        "[target]\nnqn = \"{NQN}\"\nmds_hosts = [\"{mds}\"]\nstate_dir = \"state\"\n\
         [[target.namespaces]]\npath = \"v.img\"\n"
    );
    let t = TargetProc::start(dir.path(), &toml).unwrap();
    let mut srv = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(format!(
            "volume = \"nvme-tcp://{}/{NQN}?nsid=1&timeout=5&hostnqn={mds}\"\n\
             grace_seconds = 1\nlease_seconds = 10\n",
            t.addr
        )),
        ..Default::default()
    })
    .unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    let d = s.mkdir(&root, "on-the-storage-node", 0o755).await.unwrap();
    let f = s.create_file(&d, "f", 0o644).await.unwrap();
    s.write_all(&f, 0, b"through pnfsd target", Stable::FileSync)
        .await
        .unwrap();
    assert_eq!(
        s.read_all(&f, 0, 20).await.unwrap(),
        b"through pnfsd target".to_vec()
    );
    assert!(srv.terminate().unwrap().success(), "{}", srv.log_text());
    assert!(srv.log_text().contains("unmounted cleanly"));
    // Nothing of the MDS's was refused by the metadata guard.
    assert!(!t.log_text().contains("access denied"), "{}", t.log_text());
}

/// MDS failover on the block layout (docs/ha.md): the metadata member is a namespace of its
/// own, which the active MDS holds WRITE EXCLUSIVE; a standby started with `--takeover`
/// preempts it, the paused old MDS exits fenced when it resumes, and the standby serves what
/// the old one acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_volume_fails_over_on_the_block_layout() {
    let dir = tempfile::tempdir().unwrap();
    let (meta, data) = (dir.path().join("meta.img"), dir.path().join("data.img"));
    let out = Command::new(pnfsd_bin().unwrap())
        .arg("mkfs")
        .arg("--metadata-volume")
        .arg(&meta)
        .arg(&data)
        .args(["--size", "128M"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml = format!(
        "[target]\nnqn = \"{NQN}\"\nmds_hosts = [\"{MDS}\", \"{MDS_B}\"]\nstate_dir = \"state\"\n\
         [[target.namespaces]]\npath = \"meta.img\"\nhosts = [\"{MDS}\", \"{MDS_B}\"]\n\
         [[target.namespaces]]\npath = \"data.img\"\n"
    );
    let t = TargetProc::start(dir.path(), &toml).unwrap();
    let node = |host: &str, key: &str, args: &[&str]| {
        let url = |nsid| {
            format!(
                "nvme-tcp://{}/{NQN}?nsid={nsid}&timeout=5&hostnqn={host}",
                t.addr
            )
        };
        PnfsdProcess::start_with(ServerOptions {
            config_toml: Some(format!(
                "volume = \"{}\"\nmetadata_volume = \"{}\"\nreservation_key = \"{key}\"\n\
                 grace_seconds = 2\nlease_seconds = 10\n",
                url(2),
                url(1)
            )),
            extra_args: args.iter().map(|a| a.to_string()).collect(),
        })
    };
    let mut a = node(MDS, "pnfsdMDA", &[]).unwrap();
    let bytes = client_tests::harness::pattern(9, 128 << 10);
    {
        let s = Session::connect(a.addr()).await.unwrap();
        let root = s.lookup_path("").await.unwrap();
        let f = s.create_file(&root, "f", 0o644).await.unwrap();
        s.write_all(&f, 0, &bytes, Stable::FileSync).await.unwrap();
        s.close_file(&f).await.unwrap();
    }
    let e = node(MDS_B, "pnfsdMDB", &[])
        .err()
        .expect("B started on A's volume");
    assert!(e.to_string().contains("held by another MDS"), "{e}");

    a.signal(client_tests::sys::SIGSTOP).unwrap();
    let b = node(MDS_B, "pnfsdMDB", &["--takeover"]).unwrap();
    a.signal(client_tests::sys::SIGCONT).unwrap();
    let st = a
        .wait_exit(Duration::from_secs(20))
        .unwrap()
        .expect("the fenced MDS kept running");
    assert!(
        !st.success() && a.log_text().contains("fenced"),
        "{}",
        a.log_text()
    );

    let s = Session::connect(b.addr()).await.unwrap();
    let fh = s.lookup_path("f").await.unwrap();
    let f = client_tests::harness::after_grace(|| s.open_fh(&fh)).await;
    assert!(s.read_all(&f, 0, bytes.len()).await.unwrap() == bytes);
}
