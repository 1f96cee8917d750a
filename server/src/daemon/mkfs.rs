//! `mkfs`, and the fresh volume file `serve` formats when none exists.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::Config;
use crate::preflight::{self};
use crate::store::{Store, StoreError};
use crate::volume::{Volume, VolumeLock, VolumeSource};

use super::args::MkfsArgs;
use super::{io_err, DaemonError};
use crate::progress;

pub fn mkfs(a: &MkfsArgs) -> Result<(), DaemonError> {
    if let Some(meta) = &a.metadata_volume {
        return mkfs_split(a, meta);
    }
    let src = VolumeSource::parse(&a.path).map_err(crate::config::ConfigError::Invalid)?;
    let mkfs_err = |err| DaemonError::Mkfs {
        target: src.to_string(),
        err,
    };
    match &src {
        VolumeSource::File(path) => {
            preflight::check_volume_path(path)?;
            if path.exists() {
                // Never under a running daemon (volume.rs), --force or not.
                let _lock = VolumeLock::acquire(path)?;
                if !a.force {
                    preflight::check_unused_path(path)?;
                }
                mkfs_file(path, a.size, a.force).map_err(mkfs_err)?;
            } else {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    if !dir.is_dir() {
                        return Err(DaemonError::Io {
                            what: format!("create {}", path.display()),
                            err: std::io::Error::new(
                                std::io::ErrorKind::NotFound,
                                format!("no directory {}", dir.display()),
                            ),
                        });
                    }
                }
                // A file made here and not formatted is removed again (no half-made volume).
                let fresh = FreshVolume {
                    file: path.clone(),
                    dirs: Vec::new(),
                };
                if let Err(e) = mkfs_file(path, a.size, false) {
                    fresh.remove();
                    return Err(mkfs_err(e));
                }
            }
        }
        // The namespace's size is the volume's; `--size` does not apply.
        VolumeSource::Nvme(_) => {
            let vol = Volume::open(&src)?;
            let r = match a.force {
                true => Ok(()),
                false => preflight::check_unused_dev(&*vol.dev, &src.to_string()),
            }
            .map_err(DaemonError::from)
            .and_then(|()| mkfs_dev(vol.dev.clone(), &src.to_string(), a.force).map_err(mkfs_err));
            vol.close();
            r?;
        }
    }
    tracing::info!("formatted {src}");
    Ok(())
}

/// A new metadata member file is this share of `--size` (the data member's), and at least
/// [`META_FILE_MIN`]: all of it past the log is the node area (docs/store.md "Split volume").
const META_FILE_SHARE: u64 = 16;
const META_FILE_MIN: u64 = 64 << 20;

/// `pnfsd mkfs --metadata-volume META DATA`: both members checked and opened as `mkfs` does
/// a volume (files made sparse if missing, removed again if the format fails), then the
/// data member's label and the metadata member's superblock, log and checkpoint.
fn mkfs_split(a: &MkfsArgs, meta_path: &Path) -> Result<(), DaemonError> {
    let parse = |p: &Path| VolumeSource::parse(p).map_err(crate::config::ConfigError::Invalid);
    let (meta, data) = (parse(meta_path)?, parse(&a.path)?);
    if meta == data {
        return Err(crate::config::ConfigError::Invalid(
            "--metadata-volume and the volume must be different devices".into(),
        )
        .into());
    }
    let meta_size = (a.size / META_FILE_SHARE).max(META_FILE_MIN);
    let mut made = Vec::new();
    let r = open_member(&meta, meta_size, a.force, &mut made).and_then(|m| {
        let r = open_member(&data, a.size, a.force, &mut made).and_then(|d| {
            let shown = progress::ProgressDev::new(m.dev.clone(), &meta.to_string());
            let r = Store::mkfs_split(shown.clone(), d.dev.clone(), a.force);
            shown.finish();
            d.close();
            r.map_err(|err| DaemonError::Mkfs {
                target: format!("{data} (metadata on {meta})"),
                err,
            })
        });
        m.close();
        r
    });
    if r.is_err() {
        for f in made {
            f.remove();
        }
    }
    r?;
    tracing::info!("formatted {data} with its metadata on {meta}");
    Ok(())
}

/// A member for `mkfs_split`: a file made (sparse, `size`) or grown to `size` if it is
/// smaller, or a device or namespace as it is; refused if it holds something, unless `force`.
fn open_member(
    src: &VolumeSource,
    size: u64,
    force: bool,
    made: &mut Vec<FreshVolume>,
) -> Result<Volume, DaemonError> {
    if let VolumeSource::File(path) = src {
        preflight::check_volume_path(path)?;
        if path.exists() {
            {
                // Never under a running daemon (volume.rs), --force or not.
                let _lock = VolumeLock::acquire(path)?;
                if !force {
                    preflight::check_unused_path(path)?;
                }
            }
            let md = std::fs::metadata(path).map_err(io_err(format!("stat {}", path.display())))?;
            if md.is_file() && md.len() < size {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .and_then(|f| f.set_len(size))
                    .map_err(io_err(format!("grow {}", path.display())))?;
            }
        } else {
            metalog::FileDev::create(path, size)
                .map_err(io_err(format!("create {}", path.display())))?;
            made.push(FreshVolume {
                file: path.clone(),
                dirs: Vec::new(),
            });
        }
    }
    let vol = Volume::open(src)?;
    if let (VolumeSource::Nvme(_), false) = (src, force) {
        if let Err(e) = preflight::check_unused_dev(&*vol.dev, &src.to_string()) {
            vol.close();
            return Err(e.into());
        }
    }
    Ok(vol)
}

/// `Store::mkfs` of a file with progress (progress.rs): the file made or grown (sparse) as
/// the store's `mkfs_path` does, then formatted through the progress device.
pub fn mkfs_file(path: &Path, size: u64, force: bool) -> Result<(), StoreError> {
    let dev: Arc<dyn metalog::BlockDev> = if path.exists() {
        // A regular file smaller than asked grows (sparse); a block device keeps its size.
        let md = std::fs::metadata(path)?;
        if md.is_file() && md.len() < size {
            std::fs::OpenOptions::new()
                .write(true)
                .open(path)?
                .set_len(size)?;
        }
        Arc::new(metalog::FileDev::open(path)?)
    } else {
        Arc::new(metalog::FileDev::create(path, size)?)
    };
    mkfs_dev(dev, &path.display().to_string(), force)
}

pub fn mkfs_dev(
    dev: Arc<dyn metalog::BlockDev>,
    what: &str,
    force: bool,
) -> Result<(), StoreError> {
    let shown = progress::ProgressDev::new(dev, what);
    let r = Store::mkfs_dev(shown.clone(), force);
    shown.finish();
    r
}

/// What `serve` created on this start: removed again if the start fails.
#[derive(Debug)]
pub struct FreshVolume {
    pub file: PathBuf,
    /// Directories made for it, deepest first.
    pub dirs: Vec<PathBuf>,
}

impl FreshVolume {
    pub fn remove(self) {
        match std::fs::remove_file(&self.file) {
            Ok(()) => tracing::info!(
                "removed {} (made by this failed start)",
                self.file.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot remove {}: {e}", self.file.display()),
        }
        for d in &self.dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Formats the volume file on first start (the embedded default); `Some` if it
/// was made now.
/// A split volume (`metadata_volume`) is never formatted here: `pnfsd mkfs
/// --metadata-volume` formats its two members.
pub fn ensure_volume(cfg: &Config, volume: &Path) -> Result<Option<FreshVolume>, DaemonError> {
    preflight::check_volume_path(volume)?;
    if cfg.metadata_volume.is_some() {
        return Ok(None);
    }
    if volume.exists() {
        return Ok(None);
    }
    let mut fresh = FreshVolume {
        file: volume.to_path_buf(),
        dirs: Vec::new(),
    };
    if let Some(dir) = volume.parent().filter(|d| !d.as_os_str().is_empty()) {
        fresh.dirs = dir
            .ancestors()
            .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(dir).map_err(io_err(format!("create {}", dir.display())))?;
    }
    if let Err(err) = Store::mkfs(volume, cfg.volume_size.0, false) {
        fresh.remove();
        return Err(DaemonError::Mkfs {
            target: volume.display().to_string(),
            err,
        });
    }
    tracing::info!(
        "formatted {} ({} bytes)",
        volume.display(),
        cfg.volume_size.0
    );
    Ok(Some(fresh))
}
