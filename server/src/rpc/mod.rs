//! ONC RPC v2 (RFC 5531) over TCP with record marking: the transport of pnfsd.

use crate::xdr::XdrWriter;

/// Sends a callback (program given by CREATE_SESSION's `csa_cb_program`) over a connection's
/// backchannel and waits for the reply body (RFC 8881 §2.10.3.1). Implemented by the transport.
pub trait Backchannel: Send + Sync + std::fmt::Debug {
    /// `args` is the encoded CB_COMPOUND4args; returns the encoded CB_COMPOUND4res.
    fn call(&self, program: u32, procedure: u32, args: XdrWriter) -> std::io::Result<Vec<u8>>;
}
