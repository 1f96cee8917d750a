//! `fattr4` (RFC 8881 §3.3.4, §5): which attributes pnfsd offers, how they are encoded for
//! GETATTR / READDIR / VERIFY, and how SETATTR / CREATE / OPEN values are decoded.
//!
//! Split by group (docs/design.md, house rule 7): `file.rs` has per-object attributes (from the
//! inode), `fs.rs` the file-system-wide ones, `set.rs` the decoding of settable attributes and of
//! owner strings. No store calls here except through `AttrEnv`, so the codec is testable
//! without a volume.

pub mod file;
pub mod fs;
mod set;

pub use set::{decode_setattrs, parse_owner};

use layout::block::LayoutType;

use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Bitmap;
use crate::store::{Attr, FsStat, SetAttrs};
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// Attribute numbers (RFC 8881 §5.8, §5.12; RFC 7862 §12.2).
pub mod num {
    pub const SUPPORTED_ATTRS: u32 = 0;
    pub const TYPE: u32 = 1;
    pub const FH_EXPIRE_TYPE: u32 = 2;
    pub const CHANGE: u32 = 3;
    pub const SIZE: u32 = 4;
    pub const LINK_SUPPORT: u32 = 5;
    pub const SYMLINK_SUPPORT: u32 = 6;
    pub const NAMED_ATTR: u32 = 7;
    pub const FSID: u32 = 8;
    pub const UNIQUE_HANDLES: u32 = 9;
    pub const LEASE_TIME: u32 = 10;
    pub const RDATTR_ERROR: u32 = 11;
    pub const ACL: u32 = 12;
    pub const ACLSUPPORT: u32 = 13;
    pub const ARCHIVE: u32 = 14;
    pub const CANSETTIME: u32 = 15;
    pub const CASE_INSENSITIVE: u32 = 16;
    pub const CASE_PRESERVING: u32 = 17;
    pub const CHOWN_RESTRICTED: u32 = 18;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const FILES_AVAIL: u32 = 21;
    pub const FILES_FREE: u32 = 22;
    pub const FILES_TOTAL: u32 = 23;
    pub const FS_LOCATIONS: u32 = 24;
    pub const HIDDEN: u32 = 25;
    pub const HOMOGENEOUS: u32 = 26;
    pub const MAXFILESIZE: u32 = 27;
    pub const MAXLINK: u32 = 28;
    pub const MAXNAME: u32 = 29;
    pub const MAXREAD: u32 = 30;
    pub const MAXWRITE: u32 = 31;
    pub const MIMETYPE: u32 = 32;
    pub const MODE: u32 = 33;
    pub const NO_TRUNC: u32 = 34;
    pub const NUMLINKS: u32 = 35;
    pub const OWNER: u32 = 36;
    pub const OWNER_GROUP: u32 = 37;
    pub const RAWDEV: u32 = 41;
    pub const SPACE_AVAIL: u32 = 42;
    pub const SPACE_FREE: u32 = 43;
    pub const SPACE_TOTAL: u32 = 44;
    pub const SPACE_USED: u32 = 45;
    pub const TIME_ACCESS: u32 = 47;
    pub const TIME_ACCESS_SET: u32 = 48;
    pub const TIME_CREATE: u32 = 50;
    pub const TIME_DELTA: u32 = 51;
    pub const TIME_METADATA: u32 = 52;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
    pub const FS_LAYOUT_TYPES: u32 = 62;
    pub const LAYOUT_BLKSIZE: u32 = 65;
    pub const LAYOUT_ALIGNMENT: u32 = 66;
    pub const SUPPATTR_EXCLCREAT: u32 = 75;
    /// NFSv4.2 (RFC 7862 §12.2.3).
    pub const CHANGE_ATTR_TYPE: u32 = 79;
    /// NFSv4.2 extended attributes (RFC 8276 §8.1).
    pub const XATTR_SUPPORT: u32 = 82;
    /// What OPEN supports (RFC 9754 §6, draft-ietf-nfsv4-delstid: `open_arguments4`).
    pub const OPEN_ARGUMENTS: u32 = 86;
}

/// Attributes offered in every minor version (4.1 and later).
const SUPPORTED_41: &[u32] = &[
    num::SUPPORTED_ATTRS,
    num::TYPE,
    num::FH_EXPIRE_TYPE,
    num::CHANGE,
    num::SIZE,
    num::LINK_SUPPORT,
    num::SYMLINK_SUPPORT,
    num::NAMED_ATTR,
    num::FSID,
    num::UNIQUE_HANDLES,
    num::LEASE_TIME,
    num::RDATTR_ERROR,
    num::ACLSUPPORT,
    num::CANSETTIME,
    num::CASE_INSENSITIVE,
    num::CASE_PRESERVING,
    num::CHOWN_RESTRICTED,
    num::FILEHANDLE,
    num::FILEID,
    num::FILES_AVAIL,
    num::FILES_FREE,
    num::FILES_TOTAL,
    num::HOMOGENEOUS,
    num::MAXFILESIZE,
    num::MAXLINK,
    num::MAXNAME,
    num::MAXREAD,
    num::MAXWRITE,
    num::MODE,
    num::NO_TRUNC,
    num::NUMLINKS,
    num::OWNER,
    num::OWNER_GROUP,
    num::RAWDEV,
    num::SPACE_AVAIL,
    num::SPACE_FREE,
    num::SPACE_TOTAL,
    num::SPACE_USED,
    num::TIME_ACCESS,
    num::TIME_ACCESS_SET,
    num::TIME_CREATE,
    num::TIME_DELTA,
    num::TIME_METADATA,
    num::TIME_MODIFY,
    num::TIME_MODIFY_SET,
    num::MOUNTED_ON_FILEID,
    num::FS_LAYOUT_TYPES,
    num::LAYOUT_BLKSIZE,
    num::LAYOUT_ALIGNMENT,
    num::SUPPATTR_EXCLCREAT,
    // RFC 9754 extends NFSv4.2, but the attribute describes OPEN as 4.1 has it too, and
    // pynfs DELEG24/25 ask for it at minor version 1 (a client ignores a bit it does not
    // know in `supported_attrs`).
    num::OPEN_ARGUMENTS,
];

/// Added by NFSv4.2.
const SUPPORTED_42: &[u32] = &[num::CHANGE_ATTR_TYPE, num::XATTR_SUPPORT];

/// What SETATTR (and CREATE / OPEN createattrs) may set.
const WRITABLE: &[u32] = &[
    num::SIZE,
    num::MODE,
    num::OWNER,
    num::OWNER_GROUP,
    num::TIME_ACCESS_SET,
    num::TIME_MODIFY_SET,
];

/// Settable together with an EXCLUSIVE4_1 create verifier (RFC 8881 §5.8.1.14): the
/// times are left out because a server may keep the verifier in them.
const EXCLCREAT: &[u32] = &[num::SIZE, num::MODE, num::OWNER, num::OWNER_GROUP];

/// Attributes that only SETATTR takes (GETATTR / VERIFY of them is INVAL).
const WRITE_ONLY: &[u32] = &[num::TIME_ACCESS_SET, num::TIME_MODIFY_SET];

fn bitmap_of(bits: &[u32]) -> Bitmap {
    let mut b = Bitmap::default();
    for x in bits {
        b.set(*x);
    }
    b
}

/// The `supported_attrs` bitmap of a minor version.
pub fn supported(minor: u32) -> Bitmap {
    let mut b = bitmap_of(SUPPORTED_41);
    if minor >= 2 {
        for x in SUPPORTED_42 {
            b.set(*x);
        }
    }
    b
}

pub fn is_supported(minor: u32, bit: u32) -> bool {
    SUPPORTED_41.contains(&bit) || (minor >= 2 && SUPPORTED_42.contains(&bit))
}

pub fn is_writable(bit: u32) -> bool {
    WRITABLE.contains(&bit)
}

pub fn is_write_only(bit: u32) -> bool {
    WRITE_ONLY.contains(&bit)
}

/// `suppattr_exclcreat` (RFC 8881 §5.8.1.14), for OPEN EXCLUSIVE4_1.
pub fn suppattr_exclcreat() -> Bitmap {
    bitmap_of(EXCLCREAT)
}

/// `a ∩ b`, without trailing zero words (so that equal sets compare equal).
pub fn intersect(a: &Bitmap, b: &Bitmap) -> Bitmap {
    let n = a.0.len().min(b.0.len());
    let mut c = Bitmap((0..n).map(|i| a.0[i] & b.0[i]).collect());
    trim(&mut c);
    c
}

fn trim(b: &mut Bitmap) {
    while b.0.last() == Some(&0) {
        b.0.pop();
    }
}

/// Everything the encoders need from the server, so that they run without a volume in tests.
pub struct AttrEnv<'a> {
    pub minor: u32,
    pub lease_seconds: u32,
    pub layout_types: &'a [LayoutType],
    pub volume_uuid: [u8; 16],
    pub block_size: u32,
    /// Called at most once per encoding, and only if a space or files attribute is asked.
    pub fsstat: &'a dyn Fn() -> FsStat,
}

/// Writes a whole `fattr4` for `attr`: the bitmap of the requested attributes we support,
/// then their values. Returns that bitmap. Unsupported attributes are left out (RFC 8881
/// §18.7.3); `rdattr_error`, if asked, is NFS4_OK. The operations call it through
/// `helpers::attr::encode_attrs`, which builds `env` from the server.
pub fn encode_fattr(env: &AttrEnv<'_>, attr: &Attr, req: &Bitmap, w: &mut XdrWriter) -> Bitmap {
    let mut mask = intersect(req, &supported(env.minor));
    for b in WRITE_ONLY {
        clear(&mut mask, *b);
    }
    mask.encode(w);
    let at = w.reserve_u32();
    let start = w.len();
    encode_values(env, attr, &mask, w);
    let len = (w.len() - start) as u32;
    w.patch_u32(at, len);
    mask
}

/// The values of the attributes in `mask` (all supported and readable), in bit order:
/// the `attrlist4` of a `fattr4`.
pub fn encode_values(env: &AttrEnv<'_>, attr: &Attr, mask: &Bitmap, w: &mut XdrWriter) {
    let mut st: Option<FsStat> = None;
    for bit in mask.iter() {
        if !file::encode(attr, bit, w) {
            fs::encode(env, &mut st, bit, w);
        }
    }
}

fn clear(b: &mut Bitmap, bit: u32) {
    let w = (bit / 32) as usize;
    if w < b.0.len() {
        b.0[w] &= !(1 << (bit % 32));
    }
    trim(b);
}

/// Reads a `fattr4` a client sends to SETATTR, CREATE or OPEN: the bitmap of what it sets
/// and the values. Unsupported attributes → ATTRNOTSUPP, supported read-only ones → INVAL
/// (RFC 8881 §18.30.3), malformed values → BADXDR, a bad owner → BADOWNER.
pub fn decode_fattr(r: &mut XdrReader) -> Result<(Bitmap, SetAttrs), NfsStat> {
    decode_fattr_minor(r, 2)
}

/// `decode_fattr` for a given minor version (4.2 attributes are unsupported in 4.1).
pub fn decode_fattr_minor(r: &mut XdrReader, minor: u32) -> Result<(Bitmap, SetAttrs), NfsStat> {
    let (mask, vals) = decode_raw(r)?;
    for bit in mask.iter() {
        if !is_supported(minor, bit) {
            return Err(NfsStat::ATTRNOTSUPP);
        }
    }
    for bit in mask.iter() {
        if !is_writable(bit) {
            return Err(NfsStat::INVAL);
        }
    }
    let sa = decode_setattrs(&mask, vals)?;
    Ok((mask, sa))
}

/// The bitmap and the raw `attrlist4` of a `fattr4`.
pub fn decode_raw<'a>(r: &mut XdrReader<'a>) -> Result<(Bitmap, &'a [u8]), NfsStat> {
    let mask = Bitmap::decode(r)?;
    let n = r.remaining();
    let vals = r.opaque(n)?;
    Ok((mask, vals))
}

#[cfg(test)]
mod tests;
