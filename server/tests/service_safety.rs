//! Safety and signals: everyday mistakes of an operator, made against the
//! real `pnfsd` binary, fail safe with a message that names the path or address.
//! `PNFSD_TEST_BIN=/path/to/an/older/pnfsd` runs the same tests against another binary (to
//! see them fail where that binary was unsafe).

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn bin() -> PathBuf {
    std::env::var_os("PNFSD_TEST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_pnfsd")))
}

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn pnfsd() -> Command {
    let mut c = Command::new(bin());
    c.env("RUST_LOG", "info");
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs `pnfsd serve --config CFG` to its end (for starts that must fail); kills it if it
/// becomes ready instead, so an unsafe binary does not keep serving.
fn serve_must_fail(cfg: &Path, cwd: &Path) -> String {
    let mut d = Daemon::spawn(
        pnfsd()
            .args(["serve", "--config"])
            .arg(cfg)
            .current_dir(cwd),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        d.drain();
        if d.text().contains("pnfsd ready") {
            d.kill();
            panic!("the daemon started:\n{}", d.text());
        }
        if let Some(st) = d.child.try_wait().unwrap() {
            d.finish_reading();
            assert!(!st.success(), "exit {st}:\n{}", d.text());
            return d.text();
        }
        assert!(Instant::now() < deadline, "neither failed nor ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Daemon {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Daemon {
    fn spawn(cmd: &mut Command) -> Daemon {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
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

    fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.log.push(l);
        }
    }

    fn finish_reading(&mut self) {
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.log.push(l);
        }
    }

    fn text(&self) -> String {
        self.log.join("\n")
    }

    fn count(&mut self, needle: &str) -> usize {
        self.drain();
        self.log.iter().filter(|l| l.contains(needle)).count()
    }

    /// Waits until `needle` has been logged `n` times.
    fn wait_for(&mut self, needle: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.count(needle) < n {
            if let Some(st) = self.child.try_wait().unwrap() {
                self.finish_reading();
                panic!(
                    "pnfsd exited ({st}) waiting for {needle:?}:\n{}",
                    self.text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} (x{n}):\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        let st = self.child.wait().unwrap();
        self.finish_reading();
        st
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

fn head(path: &Path, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    std::fs::File::open(path)
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    b
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// `pnfsd mkfs` formatted over an ext4 image without `--force`. Now it refuses
/// anything blkid recognises (ext4 and swap here) and leaves the bytes alone; `--force`
/// still formats.
#[test]
fn mkfs_refuses_a_file_system_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let mut makers: Vec<(&str, Vec<&str>)> = vec![("mkswap", vec![])];
    if have("mkfs.ext4") {
        makers.push(("mkfs.ext4", vec!["-q", "-F"]));
    } else {
        eprintln!("NOTE mkfs.ext4 not installed: only the swap signature is tried");
    }
    for (tool, args) in makers {
        let img = dir.path().join(format!("{tool}.img"));
        std::fs::File::create(&img)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        let o = Command::new(tool).args(&args).arg(&img).output().unwrap();
        assert!(o.status.success(), "{tool}: {o:?}");
        let before = head(&img, 1 << 16);
        let o = pnfsd().arg("mkfs").arg(&img).output().unwrap();
        let e = stderr(&o);
        assert!(!o.status.success(), "{tool}: mkfs formatted it:\n{e}");
        assert!(
            e.contains(&img.display().to_string()) && e.contains("--force"),
            "{tool}: {e}"
        );
        assert_eq!(head(&img, 1 << 16), before, "{tool}: the image changed");
        let o = pnfsd()
            .arg("mkfs")
            .arg(&img)
            .arg("--force")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        // And now it holds a pnfsd volume, which is refused in turn.
        let o = pnfsd().arg("mkfs").arg(&img).output().unwrap();
        assert!(
            !o.status.success() && stderr(&o).contains("a pnfsd volume"),
            "{}",
            stderr(&o)
        );
    }
}

/// A typo'd `volume = "/dev/nvme0n1x"` became an 8 GiB file on devtmpfs and was
/// served. Now neither serve nor mkfs creates anything under /dev.
#[test]
fn a_missing_device_is_an_error_never_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let dev = PathBuf::from(format!("/dev/pnfsd-test-typo-{}", std::process::id()));
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "volume = \"{}\"\nvolume_size = \"64M\"\nlisten = \"{}\"\nnvme_listen = \"off\"\n",
            dev.display(),
            free_port()
        ),
    )
    .unwrap();
    let log = serve_must_fail(&cfg, dir.path());
    let created = dev.exists();
    let _ = std::fs::remove_file(&dev);
    assert!(!created, "serve created {}:\n{log}", dev.display());
    assert!(
        log.contains(&dev.display().to_string()) && log.contains("does not exist"),
        "{log}"
    );
    let o = pnfsd()
        .arg("mkfs")
        .arg(&dev)
        .args(["--size", "64M"])
        .output()
        .unwrap();
    let created = dev.exists();
    let _ = std::fs::remove_file(&dev);
    assert!(
        !o.status.success() && !created,
        "mkfs made {}: {}",
        dev.display(),
        stderr(&o)
    );
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
}

/// `data_dir` was relative to the current directory, so `cd / && pnfsd serve
/// --config …` formatted a fresh volume there. Now it is the config file's directory.
#[test]
fn relative_paths_in_the_config_are_the_config_files() {
    let conf_dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let cfg = conf_dir.path().join("pnfsd.toml");
    std::fs::write(
        &cfg,
        format!(
            "data_dir = \"data\"\nvolume_size = \"64M\"\nlisten = \"{}\"\nnvme_listen = \"off\"\n",
            free_port()
        ),
    )
    .unwrap();
    let mut d = Daemon::spawn(
        pnfsd()
            .args(["serve", "--config"])
            .arg(&cfg)
            .current_dir(elsewhere.path()),
    );
    d.wait_for("pnfsd ready", 1);
    d.signal("TERM");
    assert!(d.wait().success(), "{}", d.text());
    let made_elsewhere = elsewhere.path().join("data").exists();
    assert!(
        !made_elsewhere,
        "a volume was made in the current directory"
    );
    assert!(
        conf_dir.path().join("data/volume.img").is_file(),
        "{}",
        d.text()
    );
}

/// SIGHUP killed the daemon without a clean unmount. Now it reloads the file:
/// log_level applies at once (checked by what is logged after), every other changed key is
/// named as needing a restart, a broken file keeps the running configuration, and the
/// daemon keeps serving until SIGTERM unmounts it cleanly.
#[test]
fn sighup_reloads_the_log_level_and_names_what_needs_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pnfsd.toml");
    let nfs = free_port();
    let write = |level: &str, listen: SocketAddr, extra: &str| {
        std::fs::write(
            &cfg,
            format!(
                "volume_size = \"64M\"\nnvme_listen = \"off\"\nlisten = \"{listen}\"\n\
                 log_level = \"{level}\"\n{extra}"
            ),
        )
        .unwrap()
    };
    write("info", nfs, "");
    let mut cmd = Command::new(bin());
    cmd.env_remove("RUST_LOG")
        .args(["serve", "--config"])
        .arg(&cfg);
    let mut d = Daemon::spawn(&mut cmd);
    d.wait_for("pnfsd ready", 1);

    write("warn", free_port(), "");
    d.signal("HUP");
    d.wait_for("applied only after a restart: listen", 1);
    assert_eq!(d.count(r#"SIGHUP: log_level "info" -> "warn""#), 1);
    // A broken file: reported, and the daemon keeps what it runs with.
    write("warn", nfs, "lisen = 1\n");
    d.signal("HUP");
    d.wait_for("the running configuration stays", 1);
    TcpStream::connect(nfs).expect("NFS still served after SIGHUP");
    // Back to info: the change itself is logged while the level is still warn (not shown),
    // what comes after is.
    write("info", nfs, "");
    d.signal("HUP");
    std::thread::sleep(Duration::from_millis(500));
    d.signal("TERM");
    let st = d.wait();
    assert!(st.success(), "exit {st}:\n{}", d.text());
    let log = d.text();
    assert!(!log.contains(r#"log_level "warn" -> "info""#), "{log}");
    assert!(log.contains("SIGTERM: stopping"), "{log}");
    assert!(log.contains("unmounted cleanly"), "{log}");
}

/// `RUST_LOG=off pnfsd mkfs /nonexistent/x` exited 1 without a word. Fatal errors
/// are now printed whatever RUST_LOG says, with the path or address.
#[test]
fn fatal_errors_are_printed_whatever_rust_log_says() {
    let dir = tempfile::tempdir().unwrap();
    let o = pnfsd()
        .env("RUST_LOG", "off")
        .args(["mkfs", "/nonexistent/x", "--size", "64M"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("/nonexistent/x"), "{}", stderr(&o));
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = held.local_addr().unwrap();
    let o = pnfsd()
        .env("RUST_LOG", "off")
        .args(["serve", "--no-nvme", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", &addr.to_string()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains(&addr.to_string()), "{}", stderr(&o));
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "lease_seconds = 0\n").unwrap();
    let o = pnfsd()
        .env("RUST_LOG", "off")
        .args(["serve", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(
        e.contains(&bad.display().to_string()) && e.contains("lease_seconds"),
        "{e}"
    );
}

/// A start that failed after formatting left the new volume behind. Now a taken
/// NVMe or NFS port fails the start before anything is formatted, and a failed format
/// removes the file and the directories it made.
#[test]
fn a_failed_start_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap();
    let cases = [
        (
            "nvme port taken",
            format!(
                "listen = \"{}\"\nnvme_listen = \"{taken}\"\nvolume_size = \"64M\"\n",
                free_port()
            ),
        ),
        (
            "nfs port taken",
            format!("listen = \"{taken}\"\nnvme_listen = \"off\"\nvolume_size = \"64M\"\n"),
        ),
        (
            "too small to format",
            format!(
                "listen = \"{}\"\nnvme_listen = \"off\"\nvolume_size = \"1M\"\n",
                free_port()
            ),
        ),
    ];
    for (i, (what, text)) in cases.iter().enumerate() {
        let cfg = dir.path().join(format!("c{i}.toml"));
        std::fs::write(&cfg, format!("data_dir = \"d{i}/deeper\"\n{text}")).unwrap();
        let log = serve_must_fail(&cfg, dir.path());
        let left = dir.path().join(format!("d{i}"));
        assert!(
            !left.exists(),
            "{what}: {} left behind:\n{log}",
            left.display()
        );
        assert!(log.contains("error"), "{what}: {log}");
    }
}

/// A volume file larger or smaller than its superblock says is refused with both
/// sizes and the way back.
#[test]
fn a_resized_volume_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.img");
    let o = pnfsd()
        .arg("mkfs")
        .arg(&vol)
        .args(["--size", "64M"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "volume = \"v.img\"\nlisten = \"{}\"\nnvme_listen = \"off\"\n",
            free_port()
        ),
    )
    .unwrap();
    for len in [128u64 << 20, 32 << 20] {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&vol)
            .unwrap()
            .set_len(len)
            .unwrap();
        let log = serve_must_fail(&cfg, dir.path());
        assert!(
            log.contains(&len.to_string()) && log.contains(&(64u64 << 20).to_string()),
            "{len}: {log}"
        );
    }
}

/// A target reachable from other hosts admitted any host NQN. Now the
/// daemon refuses to start, and says which keys decide.
#[test]
fn an_nvme_listener_off_the_loopback_without_allowed_hosts_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    let port = free_port().port();
    std::fs::write(
        &cfg,
        format!(
            "volume_size = \"64M\"\nlisten = \"{}\"\nnvme_listen = \"0.0.0.0:{port}\"\n",
            free_port()
        ),
    )
    .unwrap();
    let log = serve_must_fail(&cfg, dir.path());
    assert!(
        log.contains(&format!("0.0.0.0:{port}")) && log.contains("nvme_allowed_hosts"),
        "{log}"
    );
    assert!(!dir.path().join("pnfsd-data").exists(), "{log}");
}

/// The help, man pages and completions come from the clap definitions.
#[test]
fn help_man_pages_and_completions() {
    let o = pnfsd().arg("--help").output().unwrap();
    let h = String::from_utf8_lossy(&o.stdout);
    for cmd in ["mkfs", "serve", "man", "completions"] {
        assert!(h.contains(cmd), "{h}");
    }
    let o = pnfsd().args(["mkfs", "--help"]).output().unwrap();
    let h = String::from_utf8_lossy(&o.stdout);
    assert!(h.contains("blkid") && h.contains("--force"), "{h}");
    let o = pnfsd().arg("man").output().unwrap();
    assert!(o.stdout.starts_with(b".ie") || o.stdout.starts_with(b".TH"));
    let dir = tempfile::tempdir().unwrap();
    let o = pnfsd()
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for page in ["pnfsd.1", "pnfsd-mkfs.1", "pnfsd-serve.1"] {
        let t = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(t.contains(".TH"), "{page}");
    }
    let o = pnfsd().args(["completions", "bash"]).output().unwrap();
    let c = String::from_utf8_lossy(&o.stdout);
    assert!(c.contains("_pnfsd") && c.contains("--data-dir"), "{c}");
}
