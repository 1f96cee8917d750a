//! Per-object attributes: the values come from the inode (RFC 8881 §5.8.1–2).

use super::num;
use crate::nfs4::types::Fh;
use crate::store::{Attr, FileType};
use crate::xdr::{Xdr, XdrWriter};

/// `nfs_ftype4` (RFC 8881 §3.3.14).
pub mod ftype {
    pub const NF4REG: u32 = 1;
    pub const NF4DIR: u32 = 2;
    pub const NF4BLK: u32 = 3;
    pub const NF4CHR: u32 = 4;
    pub const NF4LNK: u32 = 5;
    pub const NF4SOCK: u32 = 6;
    pub const NF4FIFO: u32 = 7;
    pub const NF4ATTRDIR: u32 = 8;
    pub const NF4NAMEDATTR: u32 = 9;
}

pub fn nfs_ftype(t: FileType) -> u32 {
    match t {
        FileType::Regular => ftype::NF4REG,
        FileType::Directory => ftype::NF4DIR,
        FileType::BlockDev => ftype::NF4BLK,
        FileType::CharDev => ftype::NF4CHR,
        FileType::Symlink => ftype::NF4LNK,
        FileType::Socket => ftype::NF4SOCK,
        FileType::Fifo => ftype::NF4FIFO,
    }
}

/// Owners and groups go on the wire as decimal ids: a Linux client with the default
/// `nfs4_disable_idmapping` maps them back without an idmapper (RFC 8881 §5.9).
pub fn owner_string(id: u32) -> String {
    id.to_string()
}

/// Encodes `bit` if it is a per-object attribute; false if it is not one.
pub fn encode(a: &Attr, bit: u32, w: &mut XdrWriter) -> bool {
    match bit {
        num::TYPE => w.u32(nfs_ftype(a.ftype)),
        num::CHANGE => w.u64(a.change),
        num::SIZE => w.u64(a.size),
        num::FILEHANDLE => w.opaque(
            &Fh {
                ino: a.ino,
                generation: a.generation,
            }
            .to_bytes(),
        ),
        num::FILEID => w.u64(a.ino.0),
        // No file system is mounted inside the export: the same as fileid (RFC 8881 §5.8.2.23).
        num::MOUNTED_ON_FILEID => w.u64(a.ino.0),
        num::MODE => w.u32(a.mode & 0o7777),
        num::NUMLINKS => w.u32(a.nlink),
        num::OWNER => w.string(owner_string(a.uid).as_bytes()),
        num::OWNER_GROUP => w.string(owner_string(a.gid).as_bytes()),
        num::RAWDEV => {
            w.u32(a.rdev.0);
            w.u32(a.rdev.1);
        }
        num::SPACE_USED => w.u64(a.used),
        num::TIME_ACCESS => a.atime.encode(w),
        num::TIME_METADATA => a.ctime.encode(w),
        num::TIME_MODIFY => a.mtime.encode(w),
        // Read here, never set: SETATTR of it is INVAL (the store keeps the birth time).
        num::TIME_CREATE => a.crtime.encode(w),
        // Only asked for in a fattr4 of a READDIR entry or GETATTR that succeeded.
        num::RDATTR_ERROR => w.u32(0),
        _ => return false,
    }
    true
}
