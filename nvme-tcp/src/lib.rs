//! `nvme-tcp`: an NVMe over TCP target and initiator, small and strict, for pnfsd's data
//! volume (docs/design.md §1, §6).
//!
//! ```text
//!   Initiator ──TCP──▶ transport ──▶ pdu::validate_header ──▶ tgt::conn (one per queue)
//!   (host side)        (digests,       (pure codec: PDUs,       │ Connect/Property → controller
//!                       framing)        SQE/CQE)                │ admin → controller/admin, discovery
//!                                                              └ I/O   → controller/io → backend
//! ```
//!
//! Owns: the NVMe/TCP PDUs and their validation (`pdu`), sockets and digests (`transport`),
//! a discovery controller and dynamic I/O controllers (`controller`), namespaces backed by a
//! file, block device or memory (`backend`) with stable identifiers derived from a volume
//! UUID (`namespace`), NVMe reservations (`reservation`), the `Target` the daemon embeds and
//! the async `Initiator`.
//!
//! Never does: anything NFS (it knows nothing of files, layouts or clients), TLS or
//! in-band authentication, or caching of its own — writes go straight to the backend, whose
//! volatile cache (the page cache) Flush and FUA drain with `fdatasync`.
#![deny(unsafe_code)]

pub mod backend;
mod controller;
pub mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod initiator;
pub mod limits;
pub mod namespace;
pub mod pdu;
pub mod policy;
mod quiesce;
pub mod reservation;
pub mod stats;
pub mod status;
mod tgt;
mod transport;

pub use backend::{Backend, FileBackend, HeldMem, IoFile, MemBackend};
pub use controller::DISCOVERY_NQN;
pub use error::Error;
pub use initiator::{discover, DiscoveryEntry, Initiator, InitiatorConfig, NamespaceInfo};
pub use limits::{Limits, RateLimit, TargetStats};
pub use namespace::{NamespaceConfig, NamespaceIds};
pub use policy::{HostPolicy, HostRef};
pub use reservation::persist::RestoredHosts;
pub use reservation::{AcquireAction, Cptpl, RType, RegisterAction, ReleaseAction};
pub use stats::{CommandCount, CommandStats, ControllerInfo, NamespaceStats};
pub use status::Status;
pub use tgt::{Target, TargetConfig};
