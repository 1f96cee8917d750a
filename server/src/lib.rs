//! pnfsd: a pNFS block-layout metadata server for NFSv4.1/4.2 (docs/design.md §1).
//!
//! ```text
//! rpc (record marking, RPC headers) → nfs4::compound (dispatch table) → nfs4::ops::<op>
//!     → store (inodes, directories, extent maps) + nfs4::state → metalog → BlockDev
//! ```
//! Data flows one way; lower layers know nothing of the ones above. `nvme` exports the same
//! `BlockDev` over NVMe/TCP (crate `nvme-tcp`); `daemon` wires it to the server.
//! `nvme::volume` is the reverse: a `BlockDev` on an external NVMe/TCP namespace.
// Unsafe code only where an item allows it, each with a `// SAFETY:` comment: alloc.rs
// (mallopt), rpc/trim.rs (mallinfo2, malloc_trim); the store crate says its own.
#![deny(unsafe_code)]
pub mod admin;
pub mod alloc;
pub mod config;
pub mod daemon;
pub mod device_watch;
pub mod exports;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
#[cfg(test)]
mod log_capture;
pub mod metrics;
pub mod nfs4;
pub mod nvme;
pub mod preflight;
mod progress;
pub mod rpc;
pub mod server;
// The metadata store is its own crate (store/); `crate::store::…` paths name it.
pub use store;
pub mod volume;
pub mod xdr;
