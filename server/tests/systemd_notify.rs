//! `pnfsd serve` under `Type=notify` (deploy/pnfsd.service). systemd's
//! side of the protocol is a datagram socket named by NOTIFY_SOCKET; this test plays it and
//! checks the messages the daemon sends: STATUS while it mounts, READY=1 with the ready line
//! once it serves, RELOADING=1 then READY=1 around a SIGHUP, STOPPING=1 at SIGTERM.

use std::net::TcpListener;
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Receives until a message after the first `from` ones contains `want`.
fn recv_until(sock: &UnixDatagram, got: &mut Vec<String>, from: usize, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = vec![0u8; 4096];
    while !got[from.min(got.len())..].iter().any(|m| m.contains(want)) {
        assert!(Instant::now() < deadline, "no {want:?} in {got:?}");
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
}

#[test]
fn serve_reports_ready_reloading_and_stopping_to_systemd() {
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let nfs = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let cfg = dir.path().join("pnfsd.toml");
    std::fs::write(
        &cfg,
        format!("volume_size = \"64M\"\nnvme_listen = \"off\"\nlisten = \"{nfs}\"\n"),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pnfsd"))
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("NOTIFY_SOCKET", &sock_path)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut got = Vec::new();
    recv_until(&sock, &mut got, 0, "READY=1");
    let ready = got.iter().find(|m| m.contains("READY=1")).unwrap().clone();
    assert!(
        ready.contains("STATUS=pnfsd ready: nfs") && ready.contains(&nfs.to_string()),
        "{ready}"
    );
    // Before READY: what it was doing (mounting the volume), not yet ready.
    assert!(
        got.iter()
            .take_while(|m| !m.contains("READY=1"))
            .any(|m| m.contains("STATUS=mounting")),
        "{got:?}"
    );
    let kill = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap()
            .success())
    };
    kill("-HUP");
    let n = got.len();
    recv_until(&sock, &mut got, n, "RELOADING=1");
    let n = got.len();
    recv_until(&sock, &mut got, n, "READY=1");
    kill("-TERM");
    let n = got.len();
    recv_until(&sock, &mut got, n, "STOPPING=1");
    assert!(child.wait().unwrap().success());
}
