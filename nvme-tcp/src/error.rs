//! The crate's error type (docs/design.md, house rule 3: one error enum per layer).

use crate::pdu::Fes;
use crate::status::Status;

/// Everything that can go wrong for an embedder of the target or a user of the initiator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection (or it was torn down locally).
    #[error("connection closed")]
    Closed,
    /// The peer broke the NVMe/TCP protocol; we answered with a TermReq.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The peer sent us a termination request.
    #[error("peer terminated the connection: fes {fes:?} fei {fei:#x}")]
    Terminated { fes: Fes, fei: u32 },
    /// An NVMe command completed with an error status.
    #[error("command failed: {0}")]
    Status(Status),
    /// Fabrics Connect refused; `iattr`/`ipo` locate the invalid parameter.
    #[error("connect refused: {status} (iattr {iattr}, ipo {ipo})")]
    ConnectRefused { status: Status, iattr: u8, ipo: u16 },
    /// `Target::disconnect_host` ended the hosts' controllers, but I/O of theirs was still at
    /// the media when its wait ran out.
    #[error(
        "{controllers} disconnected controller(s) still had I/O at the media when the wait ran out"
    )]
    StillInFlight { controllers: usize },
    /// Configuration given by the embedder is unusable.
    #[error("bad configuration: {0}")]
    Config(String),
}

impl From<Status> for Error {
    fn from(s: Status) -> Self {
        Error::Status(s)
    }
}
