//! File attributes (RFC 8881 §5, `fattr4`): the numbers, a decoder for the attributes the
//! tests read, and an encoder for the ones they set. A reply carrying an attribute this
//! decoder does not know is an error (the values are packed without lengths, so one unknown
//! attribute hides all that follow it).

use pnfsd::nfs4::types::Bitmap;
use pnfsd::xdr::{Xdr, XdrError, XdrReader, XdrResult, XdrWriter};

/// Attribute numbers (RFC 8881 §5.6–5.8, RFC 5662).
pub mod attr {
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
    pub const ACLSUPPORT: u32 = 13;
    pub const CANSETTIME: u32 = 15;
    pub const CASE_INSENSITIVE: u32 = 16;
    pub const CASE_PRESERVING: u32 = 17;
    pub const CHOWN_RESTRICTED: u32 = 18;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const FILES_AVAIL: u32 = 21;
    pub const FILES_FREE: u32 = 22;
    pub const FILES_TOTAL: u32 = 23;
    pub const HOMOGENEOUS: u32 = 26;
    pub const MAXFILESIZE: u32 = 27;
    pub const MAXLINK: u32 = 28;
    pub const MAXNAME: u32 = 29;
    pub const MAXREAD: u32 = 30;
    pub const MAXWRITE: u32 = 31;
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
    pub const TIME_DELTA: u32 = 51;
    pub const TIME_METADATA: u32 = 52;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
    pub const FS_LAYOUT_TYPES: u32 = 62;
    pub const LAYOUT_BLKSIZE: u32 = 65;
    pub const SUPPATTR_EXCLCREAT: u32 = 75;
}

/// `nfs_ftype4`.
pub mod ftype {
    pub const REG: u32 = 1;
    pub const DIR: u32 = 2;
    pub const BLK: u32 = 3;
    pub const CHR: u32 = 4;
    pub const LNK: u32 = 5;
    pub const SOCK: u32 = 6;
    pub const FIFO: u32 = 7;
}

/// A bitmap with the given attributes set.
pub fn bitmap(attrs: &[u32]) -> Bitmap {
    let mut b = Bitmap::default();
    for a in attrs {
        b.set(*a);
    }
    b
}

/// The attributes most tests look at.
pub fn basic() -> Bitmap {
    use attr::*;
    bitmap(&[TYPE, CHANGE, SIZE, FILEID, MODE, NUMLINKS])
}

/// `nfstime4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Time {
    pub sec: i64,
    pub nsec: u32,
}

/// Decoded attribute values; `None` for attributes the server did not return.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attrs {
    /// The mask the server returned.
    pub mask: Bitmap,
    pub supported: Option<Bitmap>,
    pub ftype: Option<u32>,
    pub fh_expire_type: Option<u32>,
    pub change: Option<u64>,
    pub size: Option<u64>,
    pub fsid: Option<(u64, u64)>,
    pub lease_time: Option<u32>,
    pub rdattr_error: Option<u32>,
    pub filehandle: Option<Vec<u8>>,
    pub fileid: Option<u64>,
    pub maxname: Option<u32>,
    pub maxread: Option<u64>,
    pub maxwrite: Option<u64>,
    pub mode: Option<u32>,
    pub numlinks: Option<u32>,
    pub owner: Option<Vec<u8>>,
    pub owner_group: Option<Vec<u8>>,
    pub rawdev: Option<(u32, u32)>,
    pub space_used: Option<u64>,
    pub time_access: Option<Time>,
    pub time_metadata: Option<Time>,
    pub time_modify: Option<Time>,
    pub mounted_on_fileid: Option<u64>,
    pub fs_layout_types: Option<Vec<u32>>,
    pub layout_blksize: Option<u32>,
    /// Flags and counters the decoder reads but the tests seldom need, by number.
    pub other: Vec<(u32, u64)>,
}

fn time(r: &mut XdrReader<'_>) -> XdrResult<Time> {
    Ok(Time {
        sec: r.i64()?,
        nsec: r.u32()?,
    })
}

impl Attrs {
    /// Decodes a `fattr4` (mask + opaque attribute list).
    pub fn decode(r: &mut XdrReader<'_>) -> XdrResult<Attrs> {
        let mask = Bitmap::decode(r)?;
        let vals = r.opaque(usize::MAX)?;
        let mut a = Attrs::decode_values(&mask, vals)?;
        a.mask = mask;
        Ok(a)
    }

    /// Decodes `attrlist4` bytes for `mask`; every byte must be consumed.
    pub fn decode_values(mask: &Bitmap, vals: &[u8]) -> XdrResult<Attrs> {
        use attr::*;
        let mut a = Attrs::default();
        let mut r = XdrReader::new(vals);
        for bit in mask.iter() {
            match bit {
                SUPPORTED_ATTRS => a.supported = Some(Bitmap::decode(&mut r)?),
                TYPE => a.ftype = Some(r.u32()?),
                FH_EXPIRE_TYPE => a.fh_expire_type = Some(r.u32()?),
                CHANGE => a.change = Some(r.u64()?),
                SIZE => a.size = Some(r.u64()?),
                LINK_SUPPORT | SYMLINK_SUPPORT | NAMED_ATTR | UNIQUE_HANDLES | CANSETTIME
                | CASE_INSENSITIVE | CASE_PRESERVING | CHOWN_RESTRICTED | HOMOGENEOUS
                | NO_TRUNC => a.other.push((bit, r.bool()? as u64)),
                FSID => a.fsid = Some((r.u64()?, r.u64()?)),
                LEASE_TIME => a.lease_time = Some(r.u32()?),
                RDATTR_ERROR => a.rdattr_error = Some(r.u32()?),
                ACLSUPPORT | MAXLINK => a.other.push((bit, r.u32()? as u64)),
                FILEHANDLE => a.filehandle = Some(r.opaque_vec(128)?),
                FILEID => a.fileid = Some(r.u64()?),
                FILES_AVAIL | FILES_FREE | FILES_TOTAL | MAXFILESIZE | SPACE_AVAIL | SPACE_FREE
                | SPACE_TOTAL => a.other.push((bit, r.u64()?)),
                MAXNAME => a.maxname = Some(r.u32()?),
                MAXREAD => a.maxread = Some(r.u64()?),
                MAXWRITE => a.maxwrite = Some(r.u64()?),
                MODE => a.mode = Some(r.u32()?),
                NUMLINKS => a.numlinks = Some(r.u32()?),
                OWNER => a.owner = Some(r.string(1024)?),
                OWNER_GROUP => a.owner_group = Some(r.string(1024)?),
                RAWDEV => a.rawdev = Some((r.u32()?, r.u32()?)),
                SPACE_USED => a.space_used = Some(r.u64()?),
                TIME_ACCESS => a.time_access = Some(time(&mut r)?),
                TIME_DELTA => {
                    let t = time(&mut r)?;
                    a.other
                        .push((bit, t.sec as u64 * 1_000_000_000 + t.nsec as u64));
                }
                TIME_METADATA => a.time_metadata = Some(time(&mut r)?),
                TIME_MODIFY => a.time_modify = Some(time(&mut r)?),
                MOUNTED_ON_FILEID => a.mounted_on_fileid = Some(r.u64()?),
                FS_LAYOUT_TYPES => a.fs_layout_types = Some(r.vec(64, 4)?),
                LAYOUT_BLKSIZE => a.layout_blksize = Some(r.u32()?),
                SUPPATTR_EXCLCREAT => {
                    let b = Bitmap::decode(&mut r)?;
                    a.other
                        .push((bit, b.0.first().copied().unwrap_or(0) as u64));
                }
                // Unknown width: cannot go on.
                _ => return Err(XdrError::BadValue),
            }
        }
        r.finish()?;
        Ok(a)
    }
}

/// How SETATTR sets a time (`settime4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetTime {
    ServerTime,
    ClientTime(Time),
}

/// Attributes to set (SETATTR, CREATE, OPEN(create)); encoded in ascending attribute order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SetAttrs {
    pub size: Option<u64>,
    pub mode: Option<u32>,
    pub owner: Option<Vec<u8>>,
    pub owner_group: Option<Vec<u8>>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

fn settime(w: &mut XdrWriter, t: SetTime) {
    match t {
        SetTime::ServerTime => w.u32(0),
        SetTime::ClientTime(t) => {
            w.u32(1);
            w.i64(t.sec);
            w.u32(t.nsec);
        }
    }
}

impl SetAttrs {
    pub fn mode(mode: u32) -> SetAttrs {
        SetAttrs {
            mode: Some(mode),
            ..Default::default()
        }
    }

    pub fn size(size: u64) -> SetAttrs {
        SetAttrs {
            size: Some(size),
            ..Default::default()
        }
    }

    /// Encodes the `fattr4`.
    pub fn encode(&self, w: &mut XdrWriter) {
        let mut mask = Bitmap::default();
        let mut v = XdrWriter::new();
        if let Some(s) = self.size {
            mask.set(attr::SIZE);
            v.u64(s);
        }
        if let Some(m) = self.mode {
            mask.set(attr::MODE);
            v.u32(m);
        }
        if let Some(o) = &self.owner {
            mask.set(attr::OWNER);
            v.string(o);
        }
        if let Some(g) = &self.owner_group {
            mask.set(attr::OWNER_GROUP);
            v.string(g);
        }
        if let Some(t) = self.atime {
            mask.set(attr::TIME_ACCESS_SET);
            settime(&mut v, t);
        }
        if let Some(t) = self.mtime {
            mask.set(attr::TIME_MODIFY_SET);
            settime(&mut v, t);
        }
        mask.encode(w);
        w.opaque(&v.buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setattrs_round_trip_through_the_decoder() {
        let s = SetAttrs {
            size: Some(4096),
            mode: Some(0o640),
            ..Default::default()
        };
        let mut w = XdrWriter::new();
        s.encode(&mut w);
        let a = Attrs::decode(&mut XdrReader::new(&w.buf)).unwrap();
        assert_eq!(a.size, Some(4096));
        assert_eq!(a.mode, Some(0o640));
        assert_eq!(a.mask, bitmap(&[attr::SIZE, attr::MODE]));
    }

    #[test]
    fn unknown_or_short_values_are_errors() {
        assert!(Attrs::decode_values(&bitmap(&[90]), &[0, 0, 0, 0]).is_err());
        assert!(Attrs::decode_values(&bitmap(&[attr::SIZE]), &[0, 0, 0, 1]).is_err());
        assert!(Attrs::decode_values(&bitmap(&[attr::MODE]), &[0, 0, 0, 1, 0, 0, 0, 0]).is_err());
    }
}
