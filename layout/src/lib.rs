//! layout: the geometry of the data volume and where file blocks live on it (docs/design.md §1–2).
//!
//! ```text
//!  block 0        log          2 blocks        data area
//! [superblock][ internal log ][ checkpoints ][ file blocks and B+tree nodes, mixed ......... ]
//!              (metalog owns)  (server::store)  alloc::Allocator hands out both
//!                                               extent_map::ExtentMap maps (in memory)
//! split volume (`metadata_volume`): one block space over two members
//! metadata member: [superblock][ log ][ checkpoints ][ node area: tree nodes, blobs ]
//! data member:     [ member label, to 1 MiB ][ file blocks ....................... ]
//! striped set: N data members, each as above, the file area in stripe units round robin
//! ```
//!
//! Owns: the on-disk superblock (`superblock`), the data members' label (`member`),
//! the striping of a data set (`stripe`), the free-space allocator of the data area
//! (`alloc`), per-file extent maps with written / unwritten / hole (`extent_map`), the pNFS block
//! layout bodies and device address (`block`, RFC 5663 §2) and the LAYOUTGET / LAYOUTCOMMIT /
//! LAYOUTRETURN rules (`policy`: ranges, extent states, maxcount, grants, commit checks; `reach`:
//! how far a layout reaches past the request, speculative preallocation), and
//! the SCSI layout's bodies (`scsi`, RFC 8154 §2) and commit checks (`scsi_policy`).
//!
//! Never: RPC, sockets, NFS XDR, or any I/O of its own — callers read and write the blocks; this
//! crate only encodes, decodes and computes.
#![deny(unsafe_code)]

pub mod alloc;
pub mod block;
pub mod extent_map;
pub mod member;
pub mod policy;
pub mod reach;
pub mod scsi;
pub mod scsi_policy;
pub mod stripe;
pub mod superblock;

pub use alloc::{AllocError, Allocator};
pub use extent_map::{ExtState, ExtentMap, Segment};
pub use member::{LabelError, MemberLabel};
pub use stripe::Stripe;
pub use superblock::{Geometry, MountMark, Superblock, SuperblockError, BLOCK_SIZE, LBA_SIZE};
