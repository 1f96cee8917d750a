//! The `fattr4` createattrs of OPEN(create), decoded for the few attributes a create sets.
//! A stop-gap until `nfs4::attr::decode_fattr` (the namespace work) is merged; then OPEN
//! calls that and this file goes.

use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Bitmap;
use crate::store::{SetAttrs, SetTime, Timespec};
use crate::xdr::XdrReader;

pub const SIZE: u32 = 4;
pub const MODE: u32 = 33;
pub const OWNER: u32 = 36;
pub const OWNER_GROUP: u32 = 37;
pub const TIME_ACCESS: u32 = 47;
pub const TIME_ACCESS_SET: u32 = 48;
pub const TIME_MODIFY: u32 = 53;
pub const TIME_MODIFY_SET: u32 = 54;

/// Writable attributes we do not keep (ACL, ARCHIVE, HIDDEN, SYSTEM, TIME_BACKUP,
/// TIME_CREATE): ATTRNOTSUPP. Other unknown bits (read-only ones) are INVAL.
const WRITABLE_UNSUPPORTED: [u32; 6] = [12, 14, 25, 46, 50, 52];

fn owner_id(s: &[u8]) -> Result<u32, NfsStat> {
    let s = std::str::from_utf8(s).map_err(|_| NfsStat::BADOWNER)?;
    let name = s.split('@').next().unwrap_or("");
    match name {
        "root" => Ok(0),
        "nobody" => Ok(65534),
        _ => name.parse().map_err(|_| NfsStat::BADOWNER),
    }
}

fn settime(r: &mut XdrReader<'_>) -> Result<SetTime, NfsStat> {
    match r.u32()? {
        0 => Ok(SetTime::ServerNow),
        1 => Ok(SetTime::Client(r.read::<Timespec>()?)),
        _ => Err(NfsStat::BADXDR),
    }
}

/// `fattr4` → (the attributes given, what to set).
pub fn decode(r: &mut XdrReader<'_>) -> Result<(Bitmap, SetAttrs), NfsStat> {
    let mask: Bitmap = r.read()?;
    let list = r.opaque(64 * 1024)?;
    let mut a = XdrReader::new(list);
    let mut set = SetAttrs::default();
    for bit in mask.iter() {
        match bit {
            SIZE => set.size = Some(a.u64()?),
            MODE => set.mode = Some(a.u32()? & 0o7777),
            OWNER => set.uid = Some(owner_id(a.opaque(1024)?)?),
            OWNER_GROUP => set.gid = Some(owner_id(a.opaque(1024)?)?),
            TIME_ACCESS_SET => set.atime = Some(settime(&mut a)?),
            TIME_MODIFY_SET => set.mtime = Some(settime(&mut a)?),
            b if WRITABLE_UNSUPPORTED.contains(&b) => return Err(NfsStat::ATTRNOTSUPP),
            _ => return Err(NfsStat::INVAL),
        }
    }
    a.finish()?;
    Ok((mask, set))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdr::{Xdr, XdrWriter};

    fn fattr(bits: &[u32], body: &XdrWriter) -> Vec<u8> {
        let mut m = Bitmap::default();
        for b in bits {
            m.set(*b);
        }
        let mut w = XdrWriter::new();
        m.encode(&mut w);
        w.opaque(&body.buf);
        w.buf
    }

    #[test]
    fn decodes_mode_owner_and_times() {
        let mut body = XdrWriter::new();
        body.u32(0o100644);
        body.string(b"1000@example.org");
        body.u32(1);
        Timespec { sec: 9, nsec: 0 }.encode(&mut body);
        let b = fattr(&[MODE, OWNER, TIME_MODIFY_SET], &body);
        let (mask, set) = decode(&mut XdrReader::new(&b)).unwrap();
        assert!(mask.is_set(OWNER));
        assert_eq!(set.mode, Some(0o644));
        assert_eq!(set.uid, Some(1000));
        assert_eq!(
            set.mtime,
            Some(SetTime::Client(Timespec { sec: 9, nsec: 0 }))
        );
    }

    #[test]
    fn refuses_unknown_and_trailing() {
        let body = XdrWriter::new();
        assert_eq!(
            decode(&mut XdrReader::new(&fattr(&[1], &body))),
            Err(NfsStat::INVAL)
        );
        assert_eq!(
            decode(&mut XdrReader::new(&fattr(&[12], &body))),
            Err(NfsStat::ATTRNOTSUPP)
        );
        let mut body = XdrWriter::new();
        body.u64(5);
        body.u32(0);
        assert_eq!(
            decode(&mut XdrReader::new(&fattr(&[SIZE], &body))),
            Err(NfsStat::BADXDR)
        );
    }
}
