//! Opening the data volume (docs/design.md §2): a file or block device, which the daemon locks so
//! that a second daemon (or a `pnfsd mkfs`) cannot use it at the same time, or an external
//! NVMe/TCP namespace reached through the initiator (`crate::nvme::volume`).
//!
//! The lock is an exclusive `flock` on a descriptor of the volume, held until the store has
//! unmounted; the kernel drops it when the process dies, so a SIGKILL'd daemon never leaves
//! a stale lock behind. A block device is also opened `O_EXCL`, which Linux refuses while the
//! device is mounted or another exclusive opener holds it (`open(2)`). Both are advisory
//! between cooperating programs: a tool that opens the device without either is not stopped.
//! An external namespace is not locked here: two MDSes must not share one (a SCSI-layout
//! MDS's reservation makes the second one's writes fail, a block-layout one is not detected).

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use metalog::BlockDev;

use crate::nvme::volume::{is_nvme_url, NvmeDev, NvmeVolumeError, NvmeVolumeSpec};

/// What `volume` (or `pnfsd mkfs`'s argument) names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeSource {
    File(PathBuf),
    Nvme(NvmeVolumeSpec),
}

impl VolumeSource {
    pub fn parse(p: &Path) -> Result<VolumeSource, String> {
        match p.to_str() {
            Some(s) if is_nvme_url(s) => NvmeVolumeSpec::parse(s).map(VolumeSource::Nvme),
            _ => Ok(VolumeSource::File(p.to_path_buf())),
        }
    }
}

impl fmt::Display for VolumeSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VolumeSource::File(p) => write!(f, "{}", p.display()),
            VolumeSource::Nvme(s) => write!(f, "{s}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error(
        "volume {0} is in use by another process (a running pnfsd, or a pnfsd mkfs, holds it \
         locked); stop it first or choose another volume"
    )]
    Busy(PathBuf),
    #[error("volume {path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error(transparent)]
    Nvme(#[from] NvmeVolumeError),
    #[error("volume {0} is not formatted: run `pnfsd mkfs {0}` first")]
    Unformatted(String),
    #[error(
        "split volume {data} (metadata on {meta}) is not formatted: run \
         `pnfsd mkfs --metadata-volume {meta} {data}` first"
    )]
    SplitUnformatted { meta: String, data: String },
    /// A split volume's member that is not what its superblock or label says: named by the
    /// member it is about.
    #[error("volume member {member}: {err}")]
    Member {
        member: String,
        err: crate::store::SplitError,
    },
    #[error("volume {0}: the superblock cannot be read: {1}")]
    BadSuperblock(String, layout::SuperblockError),
    /// A volume file that was truncated, or grown by hand, is not mounted: a
    /// smaller one lost blocks the metadata may point at; pnfsd does not grow a volume.
    #[error(
        "volume {volume} is {actual} bytes but its superblock says {expected} bytes: it was \
         resized after mkfs. pnfsd neither shrinks nor grows a volume: give it back its size \
         ({hint}), or reformat it (`pnfsd mkfs --force`, which destroys its contents)"
    )]
    SizeMismatch {
        volume: String,
        actual: u64,
        expected: u64,
        hint: String,
    },
}

/// The exclusive lock on a volume file or block device (module comment); released on drop.
#[derive(Debug)]
pub struct VolumeLock {
    _file: File,
}

impl VolumeLock {
    pub fn acquire(path: &Path) -> Result<VolumeLock, VolumeError> {
        let io = |err| VolumeError::Io {
            path: path.to_path_buf(),
            err,
        };
        let mut o = OpenOptions::new();
        o.read(true);
        let is_blockdev = std::fs::metadata(path)
            .map_err(io)?
            .file_type()
            .is_block_device();
        if is_blockdev {
            o.custom_flags(libc::O_EXCL);
        }
        let file = match o.open(path) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(VolumeError::Busy(path.to_path_buf()))
            }
            Err(e) => return Err(io(e)),
        };
        match file.try_lock() {
            Ok(()) => Ok(VolumeLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(VolumeError::Busy(path.to_path_buf())),
            Err(std::fs::TryLockError::Error(e)) => Err(io(e)),
        }
    }
}

/// An open volume: the device the store mounts, and what must live as long as it.
pub struct Volume {
    /// What the store mounts: the volume, or a split volume's two members as one device
    /// (`store::SplitDev`).
    pub dev: Arc<dyn BlockDev>,
    /// Where the blocks of layouts are (the embedded target's namespace 1, whose LBAs are
    /// layouts' storage offsets): `dev` itself, or a split volume's data member.
    pub data_dev: Arc<dyn BlockDev>,
    /// Set for an external namespace holding the data blocks: its identity and the SCSI
    /// layout's reservations (nvme::volume).
    pub nvme: Option<Arc<NvmeDev>>,
    /// Set for a split volume whose metadata member is an external namespace: the one only
    /// MDS hosts use, where a WRITE EXCLUSIVE reservation fences an MDS without shutting
    /// out block-layout clients (they never register keys).
    pub meta_nvme: Option<Arc<NvmeDev>>,
    split: bool,
    _locks: Vec<VolumeLock>,
}

/// One member opened: its device, its namespace if external, its lock if a file.
struct Member {
    dev: Arc<dyn BlockDev>,
    nvme: Option<Arc<NvmeDev>>,
    lock: Option<VolumeLock>,
}

impl Member {
    fn open(src: &VolumeSource) -> Result<Member, VolumeError> {
        match src {
            VolumeSource::File(path) => {
                let lock = VolumeLock::acquire(path)?;
                let dev = metalog::FileDev::open(path).map_err(|err| VolumeError::Io {
                    path: path.clone(),
                    err,
                })?;
                // Says once, when it happens, that the volume failed (device_watch.rs).
                let name = path.display().to_string();
                let dev = crate::device_watch::WatchedDev::new(Arc::new(dev), name);
                Ok(Member {
                    dev: Arc::new(dev),
                    nvme: None,
                    lock: Some(lock),
                })
            }
            VolumeSource::Nvme(spec) => {
                let d = Arc::new(NvmeDev::connect(spec)?);
                Ok(Member {
                    dev: d.clone(),
                    nvme: Some(d),
                    lock: None,
                })
            }
        }
    }

    fn close(&self) {
        if let Some(d) = &self.nvme {
            if let Err(e) = d.disconnect() {
                tracing::warn!("NVMe/TCP volume disconnect: {e}");
            }
        }
    }
}

impl Volume {
    /// `open`, or `open_split` when `meta` (the `metadata_volume`) is given.
    pub fn open_with(
        src: &VolumeSource,
        meta: Option<&VolumeSource>,
    ) -> Result<Volume, VolumeError> {
        match meta {
            None => Volume::open(src),
            Some(m) => Volume::open_split(m, src),
        }
    }

    /// Opens a split volume's two members (each locked or connected as `open` does) and
    /// checks that they are one volume: the metadata member's superblock says split, the
    /// data member's label names it (store::SplitDev::open). A refusal names the member.
    pub fn open_split(meta: &VolumeSource, data: &VolumeSource) -> Result<Volume, VolumeError> {
        use crate::store::SplitError;
        let m = Member::open(meta)?;
        let d = match Member::open(data) {
            Ok(d) => d,
            Err(e) => {
                m.close();
                return Err(e);
            }
        };
        match crate::store::SplitDev::open(m.dev.clone(), d.dev.clone()) {
            Ok(split) => Ok(Volume {
                dev: Arc::new(split),
                data_dev: d.dev,
                nvme: d.nvme,
                meta_nvme: m.nvme,
                split: true,
                _locks: [m.lock, d.lock].into_iter().flatten().collect(),
            }),
            Err(err) => {
                m.close();
                d.close();
                Err(match err {
                    SplitError::Superblock(layout::SuperblockError::BadMagic) => {
                        VolumeError::SplitUnformatted {
                            meta: meta.to_string(),
                            data: data.to_string(),
                        }
                    }
                    SplitError::Label(_)
                    | SplitError::Mismatch(_)
                    | SplitError::TooSmall("data", ..) => VolumeError::Member {
                        member: data.to_string(),
                        err,
                    },
                    err => VolumeError::Member {
                        member: meta.to_string(),
                        err,
                    },
                })
            }
        }
    }

    /// Locks and opens a file or block device (`FileDev`, O_DIRECT where possible), or
    /// connects to an external namespace.
    pub fn open(src: &VolumeSource) -> Result<Volume, VolumeError> {
        let m = Member::open(src)?;
        Ok(Volume {
            dev: m.dev.clone(),
            data_dev: m.dev,
            nvme: m.nvme,
            meta_nvme: None,
            split: false,
            _locks: m.lock.into_iter().collect(),
        })
    }

    /// Whether this is a split volume (`open_split`).
    pub fn is_split(&self) -> bool {
        self.split
    }

    /// Refuses a volume without our superblock magic with a hint, before the store tries to
    /// mount it (`serve` formats only a missing volume file, never an existing device or an
    /// external namespace).
    /// A split volume was checked when opened (`open_split`).
    pub fn check_formatted(&self, src: &VolumeSource) -> Result<(), VolumeError> {
        if self.split {
            return Ok(());
        }
        let mut b0 = vec![0u8; 4096];
        if self.dev.size() < b0.len() as u64 {
            return Err(VolumeError::Unformatted(src.to_string()));
        }
        self.dev
            .read_at(&mut b0, 0)
            .map_err(|err| VolumeError::Io {
                path: PathBuf::from(src.to_string()),
                err,
            })?;
        if !layout::Superblock::looks_formatted(&b0) {
            return Err(VolumeError::Unformatted(src.to_string()));
        }
        let sb = layout::Superblock::decode(&b0)
            .map_err(|e| VolumeError::BadSuperblock(src.to_string(), e))?;
        let bs = layout::BLOCK_SIZE as u64;
        let (actual, expected) = (self.dev.size(), sb.geometry.total_blocks * bs);
        // mkfs uses the whole blocks of the volume, so a tail of less than a block is not a
        // resize (a device whose size is not a multiple of 4096).
        if actual / bs != sb.geometry.total_blocks {
            let hint = match src {
                VolumeSource::File(p) if actual < expected => {
                    format!("truncate -s {expected} {}", p.display())
                }
                VolumeSource::File(p) => format!(
                    "truncate -s {expected} {}, if nothing was written past that",
                    p.display()
                ),
                VolumeSource::Nvme(_) => format!("resize the namespace to {expected} bytes"),
            };
            return Err(VolumeError::SizeMismatch {
                volume: src.to_string(),
                actual,
                expected,
                hint,
            });
        }
        Ok(())
    }

    /// After the store unmounted: an orderly NVMe disconnect (nothing to do for a file).
    pub fn close(&self) {
        for d in self.nvme.iter().chain(&self.meta_nvme) {
            if let Err(e) = d.disconnect() {
                tracing::warn!("NVMe/TCP volume disconnect: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources() {
        assert_eq!(
            VolumeSource::parse(Path::new("/srv/v.img")).unwrap(),
            VolumeSource::File("/srv/v.img".into())
        );
        let n = VolumeSource::parse(Path::new("nvme-tcp://h:1/nqn.a")).unwrap();
        assert!(matches!(&n, VolumeSource::Nvme(s) if s.port == 1 && s.subnqn == "nqn.a"));
        assert_eq!(n.to_string(), "nvme-tcp://h:1/nqn.a?nsid=1");
        assert!(VolumeSource::parse(Path::new("nvme-tcp://h")).is_err());
    }

    #[test]
    fn a_locked_volume_is_busy_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        std::fs::File::create(&p).unwrap().set_len(1 << 20).unwrap();
        let v = Volume::open(&VolumeSource::File(p.clone())).unwrap();
        assert_eq!(v.dev.size(), 1 << 20);
        // flock conflicts between open file descriptions, even in one process.
        let e = VolumeLock::acquire(&p).unwrap_err();
        assert!(matches!(e, VolumeError::Busy(_)), "{e}");
        assert!(e.to_string().contains("in use"), "{e}");
        assert!(Volume::open(&VolumeSource::File(p.clone())).is_err());
        let e = v
            .check_formatted(&VolumeSource::File(p.clone()))
            .unwrap_err();
        assert!(e.to_string().contains("pnfsd mkfs"), "{e}");
        drop(v);
        crate::store::Store::mkfs(&p, 64 << 20, false).unwrap();
        let src = VolumeSource::File(p.clone());
        Volume::open(&src).unwrap().check_formatted(&src).unwrap();
        VolumeLock::acquire(&p).unwrap();
        assert!(matches!(
            VolumeLock::acquire(&dir.path().join("missing")),
            Err(VolumeError::Io { .. })
        ));
    }

    /// A volume file resized after mkfs is refused with its sizes and a remedy;
    /// less than a block more is not a resize.
    #[test]
    fn a_volume_resized_after_mkfs_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        let size = 64u64 << 20;
        crate::store::Store::mkfs(&p, size, false).unwrap();
        let src = VolumeSource::File(p.clone());
        let resize = |len| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(len)
                .unwrap()
        };
        for len in [size + 4096, size + (1 << 30), size - 4096] {
            resize(len);
            let e = Volume::open(&src)
                .unwrap()
                .check_formatted(&src)
                .unwrap_err();
            let m = e.to_string();
            assert!(matches!(e, VolumeError::SizeMismatch { .. }), "{m}");
            assert!(
                m.contains(&len.to_string())
                    && m.contains(&format!("truncate -s {size} {}", p.display())),
                "{m}"
            );
        }
        resize(size + 100);
        Volume::open(&src).unwrap().check_formatted(&src).unwrap();
        resize(size);
        Volume::open(&src).unwrap().check_formatted(&src).unwrap();
    }

    /// A split volume opens only as the pair mkfs made: a missing, foreign or swapped member
    /// is refused with a message naming it.
    #[test]
    fn a_split_volume_refuses_a_wrong_member() {
        let dir = tempfile::tempdir().unwrap();
        let f = |n: &str| VolumeSource::File(dir.path().join(n));
        let mkfs = |m: &str, d: &str| {
            let meta = Arc::new(metalog::FileDev::create(&dir.path().join(m), 16 << 20).unwrap());
            let data = Arc::new(metalog::FileDev::create(&dir.path().join(d), 32 << 20).unwrap());
            crate::store::Store::mkfs_split(meta, data, false).unwrap();
        };
        mkfs("m1", "d1");
        mkfs("m2", "d2");
        let v = Volume::open_split(&f("m1"), &f("d1")).unwrap();
        assert!(v.is_split() && v.meta_nvme.is_none());
        assert_eq!(v.data_dev.size(), 32 << 20);
        v.check_formatted(&f("d1")).unwrap();
        // Both members are locked while open.
        assert!(matches!(
            VolumeLock::acquire(&dir.path().join("m1")),
            Err(VolumeError::Busy(_))
        ));
        drop(v);
        let refused = |m: &str, d: &str, names: &str, says: &str| {
            let e = Volume::open_split(&f(m), &f(d)).err().expect("refused");
            let msg = e.to_string();
            assert!(
                msg.contains(&f(names).to_string()) && msg.contains(says),
                "{msg}"
            );
        };
        refused("m1", "d2", "d2", "another volume");
        // The data member as the metadata member: no superblock there.
        refused("d1", "m1", "d1", "pnfsd mkfs --metadata-volume");
        // A single volume's superblock is not a split volume's metadata member.
        crate::store::Store::mkfs(&dir.path().join("one"), 64 << 20, false).unwrap();
        refused("one", "d1", "one", "single volume");
        // A data member without a label (a blank device).
        metalog::FileDev::create(&dir.path().join("blank"), 32 << 20).unwrap();
        refused("m1", "blank", "blank", "no pnfsd member label");
    }
}
