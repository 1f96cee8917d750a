//! Checks before pnfsd writes a volume, run before the store's mkfs and
//! before `serve` creates a volume file:
//! - where a volume may be: a path under /dev must be an existing block device, never a
//!   file pnfsd creates (a mistyped `/dev/nvme0n1x` would become a file in RAM on devtmpfs);
//! - what a volume already holds: mkfs refuses, without `--force`, our own superblock and
//!   every signature libblkid recognises (file systems, partition tables, RAID, LVM, swap…).
//!
//! libblkid is asked through `blkid -p` (low-level probe, no cache), not through a binding
//! crate: the maintained one (`libblkid-rs`) generates its bindings with bindgen at build
//! time, so every build — the README's first command included — would need libclang and the
//! libblkid headers installed, while `blkid` comes with util-linux, an essential package on
//! every Debian system. If blkid cannot run, mkfs refuses (fail safe) and names `--force`.
//!
//! An external NVMe/TCP namespace is not a local path blkid can open: its first 2 MiB and
//! last 1 MiB (where the signatures blkid knows live: superblocks near the start, GPT
//! backups and RAID metadata at the end) are copied into a sparse image of the same size,
//! which blkid probes.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use metalog::BlockDev;

/// How much of a namespace's start and end the probe image holds (module comment).
const PROBE_HEAD: u64 = 2 << 20;
const PROBE_TAIL: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "volume {0} does not exist, and pnfsd never creates a volume file under /dev (a \
         mistyped device name would become a file in RAM): check the name with lsblk"
    )]
    NoDevice(PathBuf),
    #[error("volume {0} is under /dev but is not a block device")]
    NotBlockDevice(PathBuf),
    #[error(
        "{target} already holds {what}; refusing to format it (`pnfsd mkfs --force {target}` \
         destroys it)"
    )]
    Signature { target: String, what: String },
    #[error(
        "cannot check {target} for existing data ({why}); refusing to format it (`pnfsd mkfs \
         --force {target}` formats it unchecked)"
    )]
    Probe { target: String, why: String },
}

/// A volume path that may be opened or created: under /dev only an existing block device.
pub fn check_volume_path(path: &Path) -> Result<(), PreflightError> {
    match std::fs::metadata(path) {
        Ok(md) if in_dev(path) && !md.file_type().is_block_device() => {
            Err(PreflightError::NotBlockDevice(path.to_path_buf()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && in_dev(path) => {
            Err(PreflightError::NoDevice(path.to_path_buf()))
        }
        // Other errors (permissions) surface, with the path, when the volume is opened.
        _ => Ok(()),
    }
}

/// Whether `path` lies under /dev, judged by the real location of its nearest existing
/// ancestor (so `/tmp/../dev/x` and a symlink into /dev count).
fn in_dev(path: &Path) -> bool {
    let Ok(abs) = std::path::absolute(path) else {
        return false;
    };
    abs.ancestors()
        .skip(1)
        .find_map(|a| a.canonicalize().ok())
        .is_some_and(|real| real.starts_with("/dev"))
}

/// mkfs without `--force` on an existing file or block device: refuses one that holds our
/// superblock or anything blkid recognises.
pub fn check_unused_path(path: &Path) -> Result<(), PreflightError> {
    let target = path.display().to_string();
    let probe_err = |why: String| PreflightError::Probe {
        target: target.clone(),
        why,
    };
    let f = File::open(path).map_err(|e| probe_err(e.to_string()))?;
    let mut b0 = vec![0u8; layout::BLOCK_SIZE as usize];
    let n = read_full(&f, &mut b0, 0).map_err(|e| probe_err(e.to_string()))?;
    if let Some(what) = own_superblock(&b0[..n]) {
        return Err(PreflightError::Signature { target, what });
    }
    match blkid(path).map_err(probe_err)? {
        Some(what) => Err(PreflightError::Signature { target, what }),
        None => Ok(()),
    }
}

/// The same for a device reached only through `BlockDev` (an external NVMe/TCP namespace).
pub fn check_unused_dev(dev: &dyn BlockDev, target: &str) -> Result<(), PreflightError> {
    let probe_err = |why: String| PreflightError::Probe {
        target: target.to_string(),
        why,
    };
    let size = dev.size();
    let bs = layout::BLOCK_SIZE as u64;
    let head_len = PROBE_HEAD.min(size / bs * bs);
    let mut head = vec![0u8; head_len as usize];
    dev.read_at(&mut head, 0)
        .map_err(|e| probe_err(e.to_string()))?;
    if let Some(what) = own_superblock(&head) {
        return Err(PreflightError::Signature {
            target: target.to_string(),
            what,
        });
    }
    let tail_start = (size.saturating_sub(PROBE_TAIL) / bs * bs).max(head_len);
    let mut tail = vec![0u8; (size / bs * bs - tail_start) as usize];
    dev.read_at(&mut tail, tail_start)
        .map_err(|e| probe_err(e.to_string()))?;
    let img = ProbeImage::create(size).map_err(|e| probe_err(format!("probe image: {e}")))?;
    img.file
        .write_all_at(&head, 0)
        .and_then(|()| img.file.write_all_at(&tail, tail_start))
        .and_then(|()| (&img.file).flush())
        .map_err(|e| probe_err(format!("probe image {}: {e}", img.path.display())))?;
    match blkid(&img.path).map_err(probe_err)? {
        Some(what) => Err(PreflightError::Signature {
            target: target.to_string(),
            what,
        }),
        None => Ok(()),
    }
}

/// `Some(description)` if `b0` starts with a pnfsd superblock or a split volume's member
/// label.
fn own_superblock(b0: &[u8]) -> Option<String> {
    if let Ok(l) = layout::MemberLabel::decode(b0) {
        return Some(format!(
            "the data member of a split pnfsd volume (uuid {})",
            uuid::Uuid::from_bytes(l.uuid)
        ));
    }
    if !layout::Superblock::looks_formatted(b0) {
        return None;
    }
    Some(match layout::Superblock::decode(b0) {
        Ok(sb) => format!(
            "a pnfsd volume (uuid {}, {} bytes){}",
            uuid::Uuid::from_bytes(sb.uuid),
            sb.geometry.total_blocks * layout::BLOCK_SIZE as u64,
            // An external namespace cannot be locked: the mark names who may serve it.
            sb.mounted.map_or(String::new(), |m| format!(
                " marked mounted by {}: a pnfsd may be serving it, or stopped without a clean \
                 unmount",
                crate::store::describe_mark(&m)
            ))
        ),
        Err(e) => format!("a pnfsd volume ({e})"),
    })
}

fn read_full(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], off + n as u64)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// `blkid -p -o export PATH`: `Ok(Some(what))` for a recognised signature, `Ok(None)` for
/// none, `Err(why)` when blkid could not tell.
fn blkid(path: &Path) -> Result<Option<String>, String> {
    let out = Command::new(blkid_program())
        .args(["-p", "-o", "export", "--"])
        .arg(path)
        .output()
        .map_err(|e| format!("cannot run blkid (util-linux): {e}"))?;
    // blkid(8): 0 = something found, 2 = nothing identifiable, 8 = ambivalent (-p).
    match out.status.code() {
        Some(0) => Ok(Some(describe_blkid(&String::from_utf8_lossy(&out.stdout)))),
        Some(2) => Ok(None),
        Some(8) => Ok(Some(
            "several conflicting signatures (blkid -p: ambivalent result)".into(),
        )),
        _ => Err(format!(
            "blkid -p failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
    }
}

/// blkid lives in /sbin or /usr/sbin, which an unprivileged user's PATH may lack.
fn blkid_program() -> PathBuf {
    let in_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    in_path
        .into_iter()
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join("blkid"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("blkid"))
}

/// `TYPE=ext4\nUUID=…` → "ext4 data (blkid -p: UUID=… TYPE=ext4)".
fn describe_blkid(export: &str) -> String {
    let kv: Vec<(&str, &str)> = export
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| *k != "DEVNAME")
        .collect();
    let get = |key: &str| kv.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let what = match (get("TYPE"), get("PTTYPE")) {
        (Some(t), _) => format!("{t} data"),
        (None, Some(p)) => format!("a {p} partition table"),
        (None, None) => "a signature".to_string(),
    };
    let detail: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{what} (blkid -p: {})", detail.join(" "))
}

/// A sparse temporary file holding a namespace's probed regions; removed on drop.
struct ProbeImage {
    path: PathBuf,
    file: File,
}

impl ProbeImage {
    fn create(size: u64) -> std::io::Result<ProbeImage> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path =
            std::env::temp_dir().join(format!("pnfsd-probe-{}-{stamp}.img", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let img = ProbeImage { path, file };
        img.file.set_len(size)?;
        Ok(img)
    }
}

impl Drop for ProbeImage {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blkid_output_is_described() {
        let d = describe_blkid("DEVNAME=x\nUUID=1234\nTYPE=ext4\nUSAGE=filesystem\n");
        assert_eq!(
            d,
            "ext4 data (blkid -p: UUID=1234 TYPE=ext4 USAGE=filesystem)"
        );
        assert!(describe_blkid("PTUUID=ab\nPTTYPE=gpt\n").starts_with("a gpt partition table"));
    }

    #[test]
    fn dev_paths_must_be_block_devices() {
        let e = check_volume_path(Path::new("/dev/nvme9n9x-does-not-exist")).unwrap_err();
        assert!(matches!(e, PreflightError::NoDevice(_)), "{e}");
        assert!(
            e.to_string().contains("/dev/nvme9n9x-does-not-exist"),
            "{e}"
        );
        let e = check_volume_path(Path::new("/dev/null")).unwrap_err();
        assert!(matches!(e, PreflightError::NotBlockDevice(_)), "{e}");
        // The same directory reached through `..` is still /dev.
        let e = check_volume_path(Path::new("/tmp/../dev/nvme9n9x")).unwrap_err();
        assert!(matches!(e, PreflightError::NoDevice(_)), "{e}");
        let dir = tempfile::tempdir().unwrap();
        check_volume_path(&dir.path().join("new.img")).unwrap();
    }

    #[test]
    fn signatures_on_a_file_and_on_a_device_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        std::fs::File::create(&p)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        check_unused_path(&p).unwrap();
        let dev = metalog::FileDev::open(&p).unwrap();
        check_unused_dev(&dev, "dev").unwrap();
        // A swap area (mkswap is util-linux, like blkid).
        let o = Command::new("mkswap").arg(&p).output().unwrap();
        assert!(o.status.success(), "{o:?}");
        let e = check_unused_path(&p).unwrap_err().to_string();
        assert!(e.contains("swap") && e.contains("--force"), "{e}");
        let e = check_unused_dev(&dev, "nvme-tcp://h/nqn.x").unwrap_err();
        assert!(e.to_string().contains("swap"), "{e}");
        // Our own superblock.
        drop(dev);
        crate::store::Store::mkfs(&p, 64 << 20, true).unwrap();
        let e = check_unused_path(&p).unwrap_err().to_string();
        assert!(e.contains("a pnfsd volume (uuid"), "{e}");
    }

    /// A volume whose server lost power keeps its mount mark (written with FUA); mkfs
    /// without --force names who marked it.
    #[test]
    fn a_mark_left_by_a_crash_is_named_by_mkfs() {
        use std::sync::Arc;

        use crate::store::{describe_mark, Store, StoreOptions};
        let dev = Arc::new(metalog::CrashDev::new(16 << 20, 8));
        Store::mkfs_dev(dev.clone(), false).unwrap();
        let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
        let survivor = Arc::new(dev.crash());
        dev.freeze();
        drop(s);
        let mut b0 = vec![0u8; layout::BLOCK_SIZE as usize];
        survivor.read_at(&mut b0, 0).unwrap();
        let m = layout::Superblock::decode(&b0).unwrap().mounted.unwrap();
        let e = check_unused_dev(&*survivor, "nvme-tcp://h/nqn.x")
            .unwrap_err()
            .to_string();
        let since = describe_mark(&m);
        assert!(
            e.contains(&format!("marked mounted by {since}")) && e.contains("--force"),
            "{e}"
        );
    }
}
