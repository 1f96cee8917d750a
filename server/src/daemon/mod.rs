//! The daemon: what puts the pieces together from the configuration and serves them.
//!
//! A module of the library, not of the binary: the NVMe wiring (`nvme`) is also what the
//! library's own tests of the target's enforcement use (nfs4/tests/pnfs/).
pub mod nvme;
