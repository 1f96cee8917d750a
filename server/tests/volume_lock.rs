//! Two daemons never mount one volume file at once (docs/nvme-tcp.md "Volume lock"): the
//! second `pnfsd serve`, and a `pnfsd mkfs --force`, fail with "in use" while the first runs;
//! once it stopped (or died), the volume is free again.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn pnfsd() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pnfsd"));
    c.env("RUST_LOG", "info");
    c
}

fn serve_cmd(dir: &Path, vol: &Path) -> Command {
    let cfg = dir.join(format!("c{}.toml", free_port().port()));
    std::fs::write(&cfg, format!("volume = \"{}\"\n", vol.display())).unwrap();
    let mut c = pnfsd();
    c.args(["serve", "--no-nvme", "--config"])
        .arg(&cfg)
        .args(["--listen", &free_port().to_string()]);
    c
}

/// Starts `pnfsd serve` and waits for its ready line.
fn start(dir: &Path, vol: &Path) -> Child {
    let mut child = serve_cmd(dir, vol)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut log = Vec::new();
    while Instant::now() < deadline {
        if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
            let ready = l.contains("pnfsd ready");
            log.push(l);
            if ready {
                return child;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("pnfsd not ready:\n{}", log.join("\n"));
}

/// `pnfsd mkfs <vol> <args>`, run to its end.
fn mkfs(vol: &Path, args: &[&str]) -> Output {
    pnfsd().arg("mkfs").arg(vol).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_second_daemon_or_mkfs_on_a_mounted_volume_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("v.img");
    let o = mkfs(&vol, &["--size", "128M"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let mut first = start(dir.path(), &vol);
    let o = serve_cmd(dir.path(), &vol).output().unwrap();
    assert!(
        !o.status.success(),
        "a second daemon started on the same volume"
    );
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
    let o = mkfs(&vol, &["--force"]);
    assert!(
        !o.status.success(),
        "mkfs --force formatted a mounted volume"
    );
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));

    // SIGKILL: the kernel drops the lock with the process; the next daemon mounts.
    first.kill().unwrap();
    first.wait().unwrap();
    let mut second = start(dir.path(), &vol);
    second.kill().unwrap();
    second.wait().unwrap();
    let o = mkfs(&vol, &["--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
}
