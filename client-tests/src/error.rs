//! The client's one error enum (docs/design.md, house rule 3): transport, RPC, XDR and NFS status
//! errors, each saying which operation failed so a test failure reads as a protocol fact.

use pnfsd::nfs4::status::NfsStat;
use pnfsd::xdr::XdrError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ClientError {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed by the server")]
    Closed,
    #[error("RPC reply record of {0} bytes exceeds the client's limit")]
    RecordTooBig(usize),
    #[error("RPC call not accepted: {0}")]
    Rpc(RpcError),
    #[error("malformed reply from the server while decoding {what}: {err}")]
    Xdr { what: &'static str, err: XdrError },
    #[error("COMPOUND failed: {op} → {status} ({code})", status = .status.name(), code = .status.0)]
    Nfs { op: &'static str, status: NfsStat },
    #[error("reply has no result for {0}")]
    Missing(&'static str),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
    #[error("server process: {0}")]
    Harness(String),
}

/// Why the server did not run an RPC call (RFC 5531 `accept_stat` / `reject_stat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcError {
    ProgUnavail,
    ProgMismatch { low: u32, high: u32 },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
    RpcMismatch { low: u32, high: u32 },
    AuthError(u32),
    Unknown(u32),
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// Adds the name of what was being decoded to an XDR error.
pub trait XdrContext<T> {
    fn ctx(self, what: &'static str) -> Result<T, ClientError>;
}

impl<T> XdrContext<T> for Result<T, XdrError> {
    fn ctx(self, what: &'static str) -> Result<T, ClientError> {
        self.map_err(|err| ClientError::Xdr { what, err })
    }
}

pub type Result<T, E = ClientError> = std::result::Result<T, E>;
