//! A real device failing under the volume (docs/robustness.md): an ext4 that is shut
//! down under the volume file (EXT4_IOC_SHUTDOWN), an ext4 that fills up under a sparse
//! volume file, and a loop device set read-only under pnfsd. Each time the client gets
//! NFS4ERR_IO or NFS4ERR_NOSPC at once, the daemon logs one line naming the device and stays
//! up, and after the device is healed a restart finds every acknowledged file.
//!
//! Needs root and loop devices (CI runs as root on a machine that has them); these tests
//! fail, saying why, when either is missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use client_tests::ops::Stable;
use client_tests::{Compound, NfsStat, PnfsdProcess, ServerOptions, Session};

fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A loop device over a new image of `mb` MiB; detached on drop.
struct Loop {
    dev: String,
    _img: tempfile::NamedTempFile,
}

impl Loop {
    fn new(mb: u64) -> Loop {
        let img = tempfile::NamedTempFile::new().unwrap();
        img.as_file().set_len(mb << 20).unwrap();
        let path = img.path().to_str().unwrap().to_string();
        let dev = sh("losetup", &["-f", "--show", &path]);
        Loop { dev, _img: img }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// An ext4 on a loop device, mounted; unmounted on drop.
struct Ext4 {
    lo: Loop,
    mnt: tempfile::TempDir,
}

impl Ext4 {
    fn new(mb: u64) -> Ext4 {
        let lo = Loop::new(mb);
        sh("mkfs.ext4", &["-q", "-F", &lo.dev]);
        let mnt = tempfile::tempdir().unwrap();
        sh("mount", &[&lo.dev, mnt.path().to_str().unwrap()]);
        Ext4 { lo, mnt }
    }
    fn path(&self) -> &Path {
        self.mnt.path()
    }
    fn remount(&self) {
        sh("umount", &[self.path().to_str().unwrap()]);
        sh("mount", &[&self.lo.dev, self.path().to_str().unwrap()]);
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.mnt.path()).status();
    }
}

/// EXT4_IOC_SHUTDOWN (`_IOR('X', 125, __u32)`) with EXT4_GOING_FLAGS_LOGFLUSH: the
/// filesystem stops taking I/O, as a dying disk does. Python's fcntl makes the ioctl (the
/// project's crates forbid unsafe code outside named modules).
fn ext4_shutdown(mnt: &Path) {
    let script = format!(
        "import fcntl,os,struct; fd=os.open({:?}, os.O_RDONLY); \
         fcntl.ioctl(fd, 0x8004587d, struct.pack('I', 1))",
        mnt.to_str().unwrap()
    );
    sh("python3", &["-c", &script]);
}

fn server(volume: &Path, size: &str) -> PnfsdProcess {
    PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(format!(
            // A short grace period: the restarted server lets the new client open at once.
            "volume = {:?}\nvolume_size = {size:?}\ngrace_seconds = 2\n",
            volume.to_str().unwrap()
        )),
        ..Default::default()
    })
    .unwrap()
}

/// Creates `n` files of 16 KiB written FILE_SYNC: acknowledged, so durable.
async fn acknowledged(s: &Session, n: usize) {
    let root = s.lookup_path("").await.unwrap();
    for i in 0..n {
        let f = s.create_file(&root, &format!("f{i}"), 0o644).await.unwrap();
        s.write_all(&f, 0, &[i as u8; 16 << 10], Stable::FileSync)
            .await
            .unwrap();
        s.close_file(&f).await.unwrap();
    }
}

async fn all_there(s: &Session, n: usize) {
    for i in 0..n {
        let fh = s.lookup_path(&format!("f{i}")).await.unwrap();
        let f = client_tests::harness::after_grace(|| s.open_fh(&fh)).await;
        assert_eq!(
            s.read_all(&f, 0, 16 << 10).await.unwrap(),
            vec![i as u8; 16 << 10]
        );
    }
}

/// What a change answers now.
async fn mkdir_status(s: &Session, name: &str) -> NfsStat {
    let c = Compound::new().putrootfh().mkdir(name, 0o755);
    tokio::time::timeout(std::time::Duration::from_secs(30), s.status(c))
        .await
        .expect("the server hangs")
        .unwrap()
}

/// The daemon writes the line before it answers the client, but the harness reads the
/// daemon's stderr on its own thread: give that a moment, then require exactly one line.
fn one_failure_line(srv: &PnfsdProcess, device: &str) {
    let failures = |log: &str| {
        log.lines()
            .filter(|l| l.contains("storage failure"))
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while failures(&srv.log_text()) == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let log = srv.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("storage failure"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains(device), "{}", lines[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ext4_shut_down_under_the_volume_fails_safe() {
    let fs = Ext4::new(256);
    let vol: PathBuf = fs.path().join("volume.img");
    let mut srv = server(&vol, "128M");
    let s = Session::connect(srv.addr()).await.unwrap();
    acknowledged(&s, 6).await;
    ext4_shutdown(fs.path());
    assert_eq!(mkdir_status(&s, "late").await, NfsStat::IO);
    assert_eq!(mkdir_status(&s, "later").await, NfsStat::IO);
    assert!(srv.is_running(), "pnfsd exited");
    one_failure_line(&srv, vol.to_str().unwrap());
    drop(s);
    let _ = srv.terminate().unwrap();
    // Healed: the filesystem mounts again (its journal replays).
    fs.remount();
    srv.restart().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    all_there(&s, 6).await;
    assert_eq!(mkdir_status(&s, "after").await, NfsStat::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_filesystem_under_a_sparse_volume_answers_nospc() {
    // 48 MiB of ext4 under a 1 GiB sparse volume, and a filler to delete to heal it.
    let fs = Ext4::new(48);
    let vol = fs.path().join("volume.img");
    let filler = fs.path().join("filler");
    let mut srv = server(&vol, "1G");
    let s = Session::connect(srv.addr()).await.unwrap();
    acknowledged(&s, 4).await;
    std::fs::write(&filler, vec![0u8; 8 << 20]).unwrap();
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "big", 0o644).await.unwrap();
    let chunk = vec![7u8; 256 << 10];
    let mut status = NfsStat::OK;
    for i in 0..400u64 {
        let c = Compound::new().putfh(&f.fh).write(
            f.stateid,
            i * chunk.len() as u64,
            Stable::FileSync,
            &chunk,
        );
        status = s.status(c).await.unwrap();
        if status != NfsStat::OK {
            break;
        }
    }
    assert_eq!(
        status,
        NfsStat::NOSPC,
        "the filesystem filled and WRITE said {status:?}"
    );
    assert!(srv.is_running());
    one_failure_line(&srv, vol.to_str().unwrap());
    drop(s);
    let _ = srv.terminate().unwrap();
    std::fs::remove_file(&filler).unwrap();
    srv.restart().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    all_there(&s, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loop_device_set_read_only_under_pnfsd_fails_safe() {
    let lo = Loop::new(128);
    let bin = client_tests::harness::pnfsd_bin().unwrap();
    sh(bin.to_str().unwrap(), &["mkfs", &lo.dev]);
    let mut srv = server(Path::new(&lo.dev), "128M");
    let s = Session::connect(srv.addr()).await.unwrap();
    acknowledged(&s, 5).await;
    sh("blockdev", &["--setro", &lo.dev]);
    let st = mkdir_status(&s, "late").await;
    sh("blockdev", &["--setrw", &lo.dev]);
    assert_eq!(st, NfsStat::IO);
    assert!(srv.is_running());
    one_failure_line(&srv, &lo.dev);
    drop(s);
    let _ = srv.terminate().unwrap();
    srv.restart().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    all_there(&s, 5).await;
}
