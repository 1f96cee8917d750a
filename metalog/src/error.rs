//! The one error enum of the log layer (docs/design.md, house rule 3).

/// Errors of the metadata log. `Clone` because a shut-down log hands the same error to every
/// later caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// A device read, write or flush failed. After a failed write or flush the log is shut
    /// down and every later call returns this same error.
    #[error("log I/O error: {0}")]
    Io(String),
    /// A device write failed with ENOSPC (the filesystem under a sparse volume file is
    /// full). Like `Io`, the log is shut down after it; kept apart so that the store can
    /// answer NFS4ERR_NOSPC rather than NFS4ERR_IO.
    #[error("log I/O error: no space left on the device: {0}")]
    NoDeviceSpace(String),
    /// The log was unmounted (or its owner dropped it).
    #[error("log is shut down")]
    Shutdown,
    /// The on-disk log cannot be interpreted (bad superblock, no valid record).
    #[error("log corrupt: {0}")]
    Corrupt(String),
    /// A transaction can never fit, or the log is full and nothing can move its tail.
    #[error("log has no space")]
    NoSpace,
    /// The caller's replay callback refused an item during recovery.
    #[error("replay failed: {0}")]
    Replay(String),
    /// The caller's write-back failed while the log needed space.
    #[error("write-back failed: {0}")]
    Writeback(String),
    /// Bad arguments to format/mount (sizes, alignment, UUID mismatch).
    #[error("invalid argument: {0}")]
    Invalid(String),
}

impl From<std::io::Error> for LogError {
    fn from(e: std::io::Error) -> Self {
        if e.raw_os_error() == Some(libc::ENOSPC) {
            return LogError::NoDeviceSpace(e.to_string());
        }
        LogError::Io(e.to_string())
    }
}
