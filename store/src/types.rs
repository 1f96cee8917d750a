//! The types of the store's API (re-exported at the crate root by lib.rs): inode numbers,
//! attributes, what the operations take and return, the errors. They sit below both layers of
//! the store so that the tree layer can name them without importing the file layer.

use std::time::SystemTime;

/// Block size of the volume in bytes (layout::BLOCK_SIZE as u64).
pub const BLOCK: u64 = layout::BLOCK_SIZE as u64;
/// Largest file size: 1 PiB keeps every byte offset and block number far from overflow.
pub const MAX_FILE_SIZE: u64 = 1 << 50;

/// Inode number. `ROOT_INO` is the export's root directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ino(pub u64);

pub const ROOT_INO: Ino = Ino(1);

/// Seconds and nanoseconds since the epoch, as NFS `nfstime4` carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    pub fn now() -> Timespec {
        let d = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Timespec {
            sec: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    BlockDev,
    CharDev,
    Fifo,
    Socket,
}

/// What CREATE / OPEN(create) makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewNode {
    Regular,
    Directory,
    Symlink(Vec<u8>),
    BlockDev { major: u32, minor: u32 },
    CharDev { major: u32, minor: u32 },
    Fifo,
    Socket,
}

/// The attributes of an inode, as the store keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    /// Bumped each time an inode number is reused; part of the filehandle.
    pub generation: u32,
    pub ftype: FileType,
    /// Permission bits (07777).
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// Bytes of allocated blocks (written + unwritten).
    pub used: u64,
    pub rdev: (u32, u32),
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
    /// NFS change attribute: strictly increases with every change of the inode.
    pub change: u64,
    /// Parent directory (directories only; the root is its own parent).
    pub parent: Ino,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    ServerNow,
    Client(Timespec),
}

/// SETATTR / CREATE attributes; `None` leaves a field alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttrs {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Truncate or extend; truncation frees the blocks past the new size.
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// The change attribute of a directory before and after an operation (NFS `change_info4`).
/// `atomic` is true: the store changes a directory under its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirChange {
    pub before: u64,
    pub after: u64,
}

/// REMOVE / RENAME may drop the last link of a file: the caller recalls its layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unlinked {
    pub ino: Ino,
    /// The inode is gone (last link dropped and no open keeps it; see `Store::release`).
    pub last_link: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Resume READDIR after this entry with this cookie; never 0, 1 or 2 (reserved by NFS).
    pub cookie: u64,
    pub name: Vec<u8>,
    pub attr: Attr,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadDir {
    pub entries: Vec<DirEntry>,
    pub eof: bool,
    /// Changes when cookies of this directory become invalid.
    pub verifier: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stable {
    Unstable,
    DataSync,
    FileSync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeekWhat {
    Data,
    Hole,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStat {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub total_files: u64,
    pub free_files: u64,
}

/// Errors of the store. Each maps to one `nfsstat4` in the server's `nfs4/status.rs`.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum StoreError {
    #[error("no such file or directory")]
    NoEnt,
    #[error("file exists")]
    Exist,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("invalid argument")]
    Inval,
    #[error("name too long")]
    NameTooLong,
    #[error("bad name")]
    BadName,
    #[error("no space left on the volume")]
    NoSpace,
    #[error("file too big")]
    FileTooBig,
    #[error("stale inode")]
    Stale,
    #[error("wrong type for this operation")]
    WrongType,
    #[error("too many links")]
    TooManyLinks,
    #[error("cookie is no longer valid")]
    BadCookie,
    #[error("no such extended attribute")]
    NoXattr,
    #[error("extended attribute value too large")]
    XattrTooBig,
    #[error("the metadata log is shut down or failed: {0}")]
    Io(String),
    /// The device (or the file holding the volume) ran out of space under us: ENOSPC from
    /// the backing file system, not a full volume.
    #[error("the device holding the volume is full: {0}")]
    DeviceFull(String),
    /// Mount or mkfs of a volume whose superblock is marked mounted by a pnfsd that is running
    /// on this machine (an external namespace has no lock file: the mark is all there is).
    #[error(
        "the volume is marked mounted by {0}, and that pnfsd is running: two servers on one \
         volume corrupt it (stop it first; --force does not override a live mount)"
    )]
    Served(String),
}

/// The one conversion of device errors (docs/design.md, house rule 3): ENOSPC of the backing file stays
/// apart from every other I/O error.
impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> StoreError {
        if e.kind() == std::io::ErrorKind::StorageFull {
            StoreError::DeviceFull(e.to_string())
        } else {
            StoreError::Io(e.to_string())
        }
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// How the store is opened (from the config; see `config.rs`).
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// `sync` export (default): namespace changes are durable before the reply (docs/design.md §4).
    pub sync: bool,
    /// How often the background worker forces the log so lazy timestamps reach the disk.
    pub log_force_interval: std::time::Duration,
    /// Bytes of metadata kept in memory (config `metadata_cache`): changes
    /// not yet written back start a write-back at an eighth and make committers wait at a
    /// quarter; the page cache of tree nodes gets half (mount.rs `budget`).
    pub metadata_cache: u64,
    /// The volume was just taken over from another MDS by NVMe reservation (the daemon's
    /// `--takeover`, docs/ha.md): a live pnfsd's mount mark is the fenced MDS's, which can
    /// write nothing more, so it does not refuse the mount.
    pub taken_over: bool,
}

/// `metadata_cache` by default: 256 MiB.
pub const DEFAULT_METADATA_CACHE: u64 = 256 << 20;

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            sync: true,
            log_force_interval: std::time::Duration::from_secs(30),
            metadata_cache: DEFAULT_METADATA_CACHE,
            taken_over: false,
        }
    }
}
