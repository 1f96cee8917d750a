//! Decoding the values of settable attributes (SETATTR, CREATE, OPEN createattrs) and of
//! owner strings (RFC 8881 §5.9).

use super::num;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, NFS4_OPAQUE_LIMIT};
use crate::store::{SetAttrs, SetTime, Timespec};
use crate::xdr::{XdrError, XdrReader};

/// `time_how4` (RFC 8881 §3.3.7).
const SET_TO_SERVER_TIME4: u32 = 0;
const SET_TO_CLIENT_TIME4: u32 = 1;

/// Decodes `vals` (an `attrlist4`) for the bits of `mask`, which the caller has checked are
/// all settable. Every byte must be used.
pub fn decode_setattrs(mask: &Bitmap, vals: &[u8]) -> Result<SetAttrs, NfsStat> {
    let mut r = XdrReader::new(vals);
    let mut sa = SetAttrs::default();
    for bit in mask.iter() {
        match bit {
            num::SIZE => sa.size = Some(r.u64()?),
            num::MODE => {
                let m = r.u32()?;
                // Only permission, setuid/setgid and sticky bits are attributes of mode4.
                if m & !0o7777 != 0 {
                    return Err(NfsStat::INVAL);
                }
                sa.mode = Some(m);
            }
            num::OWNER => sa.uid = Some(parse_owner(&r.string(NFS4_OPAQUE_LIMIT)?)?),
            num::OWNER_GROUP => sa.gid = Some(parse_owner(&r.string(NFS4_OPAQUE_LIMIT)?)?),
            num::TIME_ACCESS_SET => sa.atime = Some(settime(&mut r)?),
            num::TIME_MODIFY_SET => sa.mtime = Some(settime(&mut r)?),
            _ => return Err(NfsStat::INVAL),
        }
    }
    r.finish()?;
    Ok(sa)
}

/// `settime4`: server time, or a client time whose nanoseconds must be < 10^9 (else INVAL,
/// RFC 8881 §3.3.1).
fn settime(r: &mut XdrReader<'_>) -> Result<SetTime, NfsStat> {
    match r.u32()? {
        SET_TO_SERVER_TIME4 => Ok(SetTime::ServerNow),
        SET_TO_CLIENT_TIME4 => {
            let sec = r.i64()?;
            let nsec = r.u32()?;
            if nsec >= 1_000_000_000 {
                return Err(NfsStat::INVAL);
            }
            Ok(SetTime::Client(Timespec { sec, nsec }))
        }
        _ => Err(NfsStat::from(XdrError::BadValue)),
    }
}

/// An owner or group as we encode them: a decimal id. A `name@domain` form is accepted
/// when the name is a decimal id (some clients add their domain). Anything else is
/// BADOWNER: pnfsd has no idmapper.
pub fn parse_owner(s: &[u8]) -> Result<u32, NfsStat> {
    let id = match s.iter().position(|c| *c == b'@') {
        Some(at) => &s[..at],
        None => s,
    };
    if id.is_empty() || id.len() > 10 || !id.iter().all(u8::is_ascii_digit) {
        return Err(NfsStat::BADOWNER);
    }
    let mut v: u64 = 0;
    for c in id {
        v = v * 10 + u64::from(c - b'0');
    }
    u32::try_from(v).map_err(|_| NfsStat::BADOWNER)
}
