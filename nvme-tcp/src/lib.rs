//! pdu-only bootstrap
#![deny(unsafe_code)]
pub mod error;
pub mod pdu;
pub mod status;
