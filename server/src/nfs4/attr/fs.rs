//! File-system-wide attributes: the same for every object of the export (RFC 8881 §5.8,
//! §5.12 for the pNFS ones, RFC 7862 §12.2 for 4.2).

use super::{num, suppattr_exclcreat, supported, AttrEnv};
use crate::nfs4::state::MAX_IO;
use crate::store::{self, FsStat};
use crate::xdr::{Xdr, XdrWriter};

/// `fh_expire_type`: our handles never expire (inode number + generation).
const FH4_PERSISTENT: u32 = 0;
/// Timestamps are kept to the nanosecond.
const TIME_DELTA_NSEC: u32 = 1;
/// `change_attr_type4`: the store's change attribute strictly increases (RFC 7862 §12.2.3).
const NFS4_CHANGE_TYPE_IS_MONOTONIC_INCR: u32 = 0;

/// `open_arguments4` (RFC 9754 §6): five bitmaps of what OPEN takes, each bit the value
/// of its enum. Share access READ, WRITE, BOTH; deny NONE, READ, WRITE, BOTH; of the
/// wants ANY_DELEG, NO_DELEG and CANCEL (the values RFC 9754 defines for the ones OPEN
/// honours, nfs4/delegs/mod.rs: neither SIGNAL nor PUSH, no delegated timestamps, no
/// OPEN_XOR_DELEGATION — OPEN ignores those bits); claims NULL, PREVIOUS and FH (no
/// DELEGATE_CUR/PREV); every create mode (UNCHECKED4, GUARDED4, EXCLUSIVE4, EXCLUSIVE4_1).
pub const OPEN_ARGS: [u32; 5] = [
    0b1110,    // READ 1, WRITE 2, BOTH 3
    0b1111,    // NONE 0, READ 1, WRITE 2, BOTH 3
    0b11_1000, // ANY_DELEG 3, NO_DELEG 4, CANCEL 5
    0b1_0011,  // CLAIM_NULL 0, CLAIM_PREVIOUS 1, CLAIM_FH 4
    0b1111,    // UNCHECKED4 0, GUARDED4 1, EXCLUSIVE4 2, EXCLUSIVE4_1 3
];

fn open_arguments(w: &mut XdrWriter) {
    for word in OPEN_ARGS {
        w.u32(1);
        w.u32(word);
    }
}

pub fn encode(env: &AttrEnv<'_>, st: &mut Option<FsStat>, bit: u32, w: &mut XdrWriter) {
    let mut stat = || *st.get_or_insert_with(|| (env.fsstat)());
    match bit {
        num::SUPPORTED_ATTRS => supported(env.minor).encode(w),
        num::FH_EXPIRE_TYPE => w.u32(FH4_PERSISTENT),
        num::LINK_SUPPORT | num::SYMLINK_SUPPORT => w.bool(true),
        num::NAMED_ATTR => w.bool(false),
        num::FSID => {
            // One file system per volume: the fsid is the volume UUID.
            let u = env.volume_uuid;
            w.u64(u64::from_be_bytes([
                u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7],
            ]));
            w.u64(u64::from_be_bytes([
                u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15],
            ]));
        }
        num::UNIQUE_HANDLES => w.bool(true),
        num::LEASE_TIME => w.u32(env.lease_seconds),
        // No ACLs: aclsupport is 0 (RFC 8881 §6.2.1.1).
        num::ACLSUPPORT => w.u32(0),
        num::CANSETTIME => w.bool(true),
        num::CASE_INSENSITIVE => w.bool(false),
        num::CASE_PRESERVING => w.bool(true),
        num::CHOWN_RESTRICTED => w.bool(true),
        num::HOMOGENEOUS => w.bool(true),
        num::NO_TRUNC => w.bool(true),
        num::FILES_AVAIL | num::FILES_FREE => w.u64(stat().free_files),
        num::FILES_TOTAL => w.u64(stat().total_files),
        num::SPACE_AVAIL | num::SPACE_FREE => w.u64(stat().free_bytes),
        num::SPACE_TOTAL => w.u64(stat().total_bytes),
        // The limits are advertised from the layer that enforces them: the store (file size,
        // links, name length) and the session (I/O size).
        num::MAXFILESIZE => w.u64(store::MAX_FILE_SIZE),
        num::MAXLINK => w.u32(store::LINK_MAX),
        num::MAXNAME => w.u32(store::NAME_MAX as u32),
        num::MAXREAD | num::MAXWRITE => w.u64(u64::from(MAX_IO)),
        num::TIME_DELTA => {
            w.i64(0);
            w.u32(TIME_DELTA_NSEC);
        }
        num::FS_LAYOUT_TYPES => {
            w.u32(env.layout_types.len() as u32);
            for t in env.layout_types {
                w.u32(t.0);
            }
        }
        num::LAYOUT_BLKSIZE | num::LAYOUT_ALIGNMENT => w.u32(env.block_size),
        num::SUPPATTR_EXCLCREAT => suppattr_exclcreat().encode(w),
        num::CHANGE_ATTR_TYPE => w.u32(NFS4_CHANGE_TYPE_IS_MONOTONIC_INCR),
        // The store keeps extended attributes on every object (RFC 8276 §8.1; store/xattr.rs).
        num::XATTR_SUPPORT => w.bool(true),
        num::OPEN_ARGUMENTS => open_arguments(w),
        // Unreachable for bits of `supported()`; the encoder's mask guarantees it.
        _ => {}
    }
}
