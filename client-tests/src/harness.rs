//! Runs the real `pnfsd` binary for integration tests: `pnfsd serve --data-dir <tmp>
//! --listen 127.0.0.1:<free> --nvme-listen 127.0.0.1:<free>`, waits for its one `pnfsd ready` log
//! line, and can SIGKILL / SIGTERM it and start it again on the same data directory.
//!
//! Finding the binary (`pnfsd_bin`), in order:
//! 1. `PNFSD_BIN` (a path), for running the tests against another build;
//! 2. `CARGO_BIN_EXE_pnfsd` if set at run time;
//! 3. `<target>/<profile>/pnfsd`, where `<target>/<profile>` is the directory above the test
//!    executable's `deps/` — the same target dir and profile as the test itself. Before using
//!    it, `cargo build -p pnfsd --bin pnfsd` is run once per test process with that target dir
//!    and profile, so the binary is never stale (a no-op when it is up to date). Set
//!    `PNFSD_NO_BUILD=1` to skip the build (e.g. when cargo is not on PATH).
//!
//! So `cargo test -p client-tests` works on a fresh checkout with no other step.
//!
//! `PNFSD_EXTERNAL=ADDR:PORT` points every test at a server that is already running (another
//! pnfsd, or another NFSv4.1 server to check the client against); stopping and restarting it
//! then fail, and tests that expect an empty export may see other tests' files.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::error::{ClientError, Result};
use crate::sys;

/// How long the server may take to log "ready" (it may format a volume first).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a SIGTERM'd server may take to stop.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(30);

fn harness_err(s: impl Into<String>) -> ClientError {
    ClientError::Harness(s.into())
}

/// The `pnfsd` binary to run (see the module comment).
pub fn pnfsd_bin() -> Result<PathBuf> {
    static BIN: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(find_or_build).clone().map_err(harness_err)
}

fn find_or_build() -> std::result::Result<PathBuf, String> {
    for var in ["PNFSD_BIN", "CARGO_BIN_EXE_pnfsd"] {
        if let Some(p) = std::env::var_os(var) {
            return Ok(PathBuf::from(p));
        }
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // <target>/<profile>/deps/<test-exe>
    let profile_dir = exe
        .parent()
        .and_then(|d| {
            if d.ends_with("deps") {
                d.parent()
            } else {
                Some(d)
            }
        })
        .ok_or("test executable has no parent directory")?
        .to_path_buf();
    let bin = profile_dir.join("pnfsd");
    if std::env::var_os("PNFSD_NO_BUILD").is_none() {
        let target_dir = profile_dir.parent().ok_or("profile dir has no parent")?;
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev".to_string(),
            Some(p) => p.to_string(),
            None => "dev".to_string(),
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .args([
                "build",
                "-p",
                "pnfsd",
                "--bin",
                "pnfsd",
                "--profile",
                &profile,
            ])
            .env("CARGO_TARGET_DIR", target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .map_err(|e| format!("running cargo build: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo build -p pnfsd failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "{} does not exist (set PNFSD_BIN or build pnfsd)",
            bin.display()
        ))
    }
}

/// `N` distinct free TCP ports on the loopback. They are held together while chosen (so they
/// differ) and released on return: another process could take one before pnfsd binds it, a
/// small race the tests accept.
pub fn free_ports<const N: usize>() -> Result<[SocketAddr; N]> {
    let held = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    let mut out = [SocketAddr::from(([127, 0, 0, 1], 0)); N];
    for (o, l) in out.iter_mut().zip(&held) {
        *o = l.local_addr()?;
    }
    Ok(out)
}

/// Options for starting the server.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// Written to `<dir>/pnfsd.toml` and passed as `--config`.
    pub config_toml: Option<String>,
    /// Extra arguments after `serve ...`.
    pub extra_args: Vec<String>,
}

/// A running (or stopped) pnfsd with its own temporary directory.
pub struct PnfsdProcess {
    bin: PathBuf,
    /// Holds `data/` and the config; removed on drop.
    dir: tempfile::TempDir,
    opts: ServerOptions,
    child: Option<Child>,
    addr: SocketAddr,
    nvme_addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    /// The threads copying the current run's stdout/stderr into `log`.
    readers: Vec<std::thread::JoinHandle<()>>,
    starts: u32,
}

impl PnfsdProcess {
    pub fn start() -> Result<PnfsdProcess> {
        PnfsdProcess::start_with(ServerOptions::default())
    }

    pub fn start_with(opts: ServerOptions) -> Result<PnfsdProcess> {
        let dir = tempfile::Builder::new().prefix("pnfsd-test-").tempdir()?;
        std::fs::create_dir_all(dir.path().join("data"))?;
        if let Some(ext) = std::env::var_os("PNFSD_EXTERNAL") {
            let addr = ext
                .to_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| harness_err("PNFSD_EXTERNAL is not ADDR:PORT"))?;
            return Ok(PnfsdProcess {
                bin: PathBuf::new(),
                dir,
                opts,
                child: None,
                addr,
                nvme_addr: addr,
                log: Arc::default(),
                readers: Vec::new(),
                starts: 0,
            });
        }
        PnfsdProcess::start_bin(pnfsd_bin()?, dir, opts)
    }

    /// Starts another `pnfsd` binary (`pnfs-bench scale --baseline`: an older build to
    /// compare against in the same run).
    pub fn start_with_bin(bin: PathBuf, opts: ServerOptions) -> Result<PnfsdProcess> {
        let dir = tempfile::Builder::new().prefix("pnfsd-test-").tempdir()?;
        std::fs::create_dir_all(dir.path().join("data"))?;
        PnfsdProcess::start_bin(bin, dir, opts)
    }

    /// Starts `bin` as the server (tests of the harness use a stand-in script).
    fn start_bin(
        bin: PathBuf,
        dir: tempfile::TempDir,
        opts: ServerOptions,
    ) -> Result<PnfsdProcess> {
        let ports = free_ports::<2>()?;
        let mut p = PnfsdProcess {
            bin,
            dir,
            opts,
            child: None,
            addr: ports[0],
            nvme_addr: ports[1],
            log: Arc::default(),
            readers: Vec::new(),
            starts: 0,
        };
        p.spawn()?;
        Ok(p)
    }

    /// The NFS address of the running server.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn nvme_addr(&self) -> SocketAddr {
        self.nvme_addr
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The metrics/admin listener the server logged (`--metrics-listen 127.0.0.1:0`).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        let log = self.log_text();
        let at = log.rfind("metrics on http://")? + "metrics on http://".len();
        log[at..].split('/').next()?.parse().ok()
    }

    /// Everything the server logged so far (all runs), one line per entry.
    pub fn log_text(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// Starts the process; if it could not bind a port (another process took the free port
    /// meanwhile, e.g. as a client connection's local port), tries again on fresh ports.
    /// "already in use" matches both the OS's "Address already in use" and pnfsd's own
    /// message for the NVMe/TCP port ("... is already in use; choose another address").
    fn spawn(&mut self) -> Result<()> {
        let mut tries = 0;
        loop {
            match self.spawn_once() {
                Err(ClientError::Harness(m)) if m.contains("already in use") && tries < 5 => {
                    tries += 1;
                    [self.addr, self.nvme_addr] = free_ports::<2>()?;
                }
                r => return r,
            }
        }
    }

    fn spawn_once(&mut self) -> Result<()> {
        self.starts += 1;
        let mut cmd = Command::new(&self.bin);
        cmd.arg("serve");
        if let Some(t) = &self.opts.config_toml {
            let path = self.dir.path().join("pnfsd.toml");
            std::fs::write(&path, t)?;
            cmd.arg("--config").arg(path);
        }
        cmd.arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen")
            .arg(self.addr.to_string())
            .arg("--nvme-listen")
            .arg(self.nvme_addr.to_string())
            .args(&self.opts.extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        sys::kill_with_parent(&mut cmd);
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        // ETXTBSY: a binary just written (cargo, or a test's stand-in script) may still be open
        // for writing in a child another thread is forking; it clears in a moment.
        let mut tries = 0;
        let mut child = loop {
            match cmd.spawn() {
                Ok(c) => break c,
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(harness_err(format!("spawn {}: {e}", self.bin.display()))),
            }
        };
        let (tx, rx) = mpsc::channel::<()>();
        let run = self.starts;
        for out in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let log = self.log.clone();
            let tx = tx.clone();
            self.readers.push(std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    let ready = line.contains("pnfsd ready");
                    if let Ok(mut l) = log.lock() {
                        l.push(format!("[run {run}] {line}"));
                    }
                    if ready {
                        let _ = tx.send(());
                    }
                }
            }));
        }
        drop(tx);
        self.child = Some(child);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(()) => return Ok(()),
                Err(mpsc::RecvTimeoutError::Disconnected)
                | Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Some(st) = self
                        .child
                        .as_mut()
                        .and_then(|c| c.try_wait().ok().flatten())
                    {
                        self.child = None;
                        return Err(harness_err(format!(
                            "pnfsd exited ({st}) before logging ready:\n{}",
                            self.log_text()
                        )));
                    }
                    if Instant::now() > deadline {
                        return Err(harness_err(format!(
                            "pnfsd not ready after {READY_TIMEOUT:?}:\n{}",
                            self.log_text()
                        )));
                    }
                }
            }
        }
    }

    /// SIGKILL: the crash case. Waits for the process to be gone.
    pub fn kill(&mut self) -> Result<()> {
        let mut c = self
            .child
            .take()
            .ok_or_else(|| harness_err("kill: not running"))?;
        sys::signal(c.id(), sys::SIGKILL)?;
        c.wait()?;
        self.drain_log();
        Ok(())
    }

    /// SIGTERM: the clean stop. Returns the exit status; fails if it takes longer than
    /// `STOP_TIMEOUT` (the process is then killed).
    pub fn terminate(&mut self) -> Result<ExitStatus> {
        let mut c = self
            .child
            .take()
            .ok_or_else(|| harness_err("terminate: not running"))?;
        sys::signal(c.id(), sys::SIGTERM)?;
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(st) = c.try_wait()? {
                self.drain_log();
                return Ok(st);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                return Err(harness_err(format!(
                    "pnfsd ignored SIGTERM for {STOP_TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// After the process exited: waits (briefly) until its last log lines are in `log`, so a
    /// check of the log right after a stop sees them (the pipes end when the process does).
    fn drain_log(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.readers.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for h in std::mem::take(&mut self.readers) {
            if h.is_finished() {
                let _ = h.join();
            }
        }
    }

    /// Starts the server again on the same data directory, on fresh ports (a stopped server's
    /// port may linger in TIME_WAIT).
    pub fn restart(&mut self) -> Result<()> {
        if self.child.is_some() {
            return Err(harness_err("restart: still running"));
        }
        [self.addr, self.nvme_addr] = free_ports::<2>()?;
        self.spawn()
    }

    /// SIGKILL, restart on the same data, and a new session as the same client (`opts`: the
    /// old session's owner, so the server knows it again).
    pub async fn sigkill_and_reconnect(
        &mut self,
        opts: &crate::SessionOptions,
    ) -> Result<crate::Session> {
        self.kill()?;
        self.restart()?;
        crate::Session::connect_with(self.addr, opts.clone()).await
    }

    /// Sends `sig` (`sys::SIGSTOP`, `sys::SIGCONT`, ...) to the running process.
    pub fn signal(&self, sig: i32) -> Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| harness_err("signal: not running"))?;
        Ok(sys::signal(pid, sig)?)
    }

    /// Waits up to `timeout` for the process to exit by itself: its status, or `None` if it
    /// is still running then.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<Option<ExitStatus>> {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self
                .child
                .as_mut()
                .ok_or_else(|| harness_err("wait_exit: not running"))?;
            if let Some(st) = c.try_wait()? {
                self.child = None;
                self.drain_log();
                return Ok(Some(st));
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process is still alive.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .map(|c| matches!(c.try_wait(), Ok(None)))
            .unwrap_or(false)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PnfsdProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let ran = self.starts > 0;
        if ran && (std::thread::panicking() || std::env::var_os("PNFSD_SHOW_LOG").is_some()) {
            let text = self.log_text();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(200);
            eprintln!("---- pnfsd log (last {} lines) ----", lines.len() - from);
            for l in &lines[from..] {
                eprintln!("{l}");
            }
        }
    }
}

/// A pnfsd with its metrics listener on a free loopback port and two clients connected to
/// it: the setup tests/admin.rs and tests/metrics.rs share.
pub struct TwoClients {
    pub server: PnfsdProcess,
    /// The metrics (and, with `admin = true`, admin) listener the server logged.
    pub http: SocketAddr,
    pub a: crate::Session,
    pub b: crate::Session,
}

impl TwoClients {
    /// Starts pnfsd with `config_toml` and `--metrics-listen 127.0.0.1:0`, then connects
    /// two clients whose owners are `owners` (EXCHANGE_ID and CREATE_SESSION each).
    pub async fn start(config_toml: &str, owners: [&str; 2]) -> Result<TwoClients> {
        let server = PnfsdProcess::start_with(ServerOptions {
            config_toml: Some(config_toml.into()),
            extra_args: vec!["--metrics-listen".into(), "127.0.0.1:0".into()],
        })?;
        let http = server
            .metrics_addr()
            .ok_or_else(|| harness_err("no \"metrics on http://\" line in the log"))?;
        let connect = |owner: &str| {
            crate::Session::connect_with(server.addr(), crate::SessionOptions::new(owner))
        };
        let a = connect(owners[0]).await?;
        let b = connect(owners[1]).await?;
        Ok(TwoClients { server, http, a, b })
    }
}

/// Deterministic test data: `len` bytes that differ for every `seed` and offset, so a misplaced
/// or stale block is caught.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Runs `f` until it stops failing with GRACE (at most 30 s), as a client does after a
/// server restart (RFC 8881 §8.4.2); panics on any other error (for tests).
pub async fn after_grace<T, F, Fut>(mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    for _ in 0..300 {
        match f().await {
            Err(ClientError::Nfs {
                status: crate::NfsStat::GRACE,
                ..
            }) => tokio::time::sleep(Duration::from_millis(100)).await,
            r => return r.unwrap(),
        }
    }
    panic!("still in grace after 30 s");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn start_terminate_restart_kill_with_a_stand_in_server() {
        let bins = tempfile::tempdir().unwrap();
        let bin = script(
            bins.path(),
            "fake",
            // The trap is set before "ready" is printed, or a quick SIGTERM would kill it.
            "trap 'echo bye; exit 0' TERM\necho \"pnfsd ready: $*\" >&2\nwhile true; do sleep 0.05; done",
        );
        let dir = tempfile::tempdir().unwrap();
        let mut p = PnfsdProcess::start_bin(bin, dir, ServerOptions::default()).unwrap();
        assert!(p.is_running());
        let log = p.log_text();
        assert!(log.contains(&format!("--listen {}", p.addr())), "{log}");
        assert!(log.contains("--data-dir"), "{log}");
        assert!(p.terminate().unwrap().success());
        let first = p.addr();
        p.restart().unwrap();
        assert!(p.is_running());
        assert!(p.log_text().contains("[run 2] pnfsd ready"));
        assert_ne!(p.addr(), p.nvme_addr());
        let _ = first;
        p.kill().unwrap();
        assert!(!p.is_running());
        assert!(p.kill().is_err(), "nothing left to kill");
    }

    /// pnfsd names a taken NVMe/TCP port in words of its own (server/src/nvme.rs): the
    /// harness tries again on fresh ports, as for the NFS port.
    #[test]
    fn a_taken_nvme_port_at_start_is_tried_again_on_fresh_ports() {
        let bins = tempfile::tempdir().unwrap();
        let once = bins.path().join("once");
        let bin = script(
            bins.path(),
            "taken",
            &format!(
                "if [ ! -e {o} ]; then touch {o}; echo 'pnfsd: error: NVMe/TCP target: \
                 127.0.0.1:9 is already in use; choose another address' >&2; exit 1; fi\n\
                 trap 'exit 0' TERM\necho \"pnfsd ready: $*\" >&2\n\
                 while true; do sleep 0.05; done",
                o = once.display()
            ),
        );
        let mut p =
            PnfsdProcess::start_bin(bin, tempfile::tempdir().unwrap(), ServerOptions::default())
                .unwrap();
        assert!(
            p.log_text().contains("[run 2] pnfsd ready"),
            "{}",
            p.log_text()
        );
        p.kill().unwrap();
    }

    #[test]
    fn a_server_that_exits_before_ready_is_an_error_with_its_log() {
        let bins = tempfile::tempdir().unwrap();
        let bin = script(bins.path(), "bad", "echo 'cannot open volume' >&2\nexit 3");
        let e =
            PnfsdProcess::start_bin(bin, tempfile::tempdir().unwrap(), ServerOptions::default())
                .err()
                .unwrap();
        let msg = e.to_string();
        assert!(
            msg.contains("cannot open volume") && msg.contains("exit status: 3"),
            "{msg}"
        );
    }
}
