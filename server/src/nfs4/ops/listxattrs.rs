//! LISTXATTRS (RFC 8276 §8.4.3): the names, from a cookie, as many as fit `lxa_maxcount`
//! bytes of result. The cookie is the number of names (in byte order) already returned.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::perm::xattr_target;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

/// The names of one reply: `(names, next cookie, eof)`; TOOSMALL if not even one name (or
/// the empty reply) fits `maxcount`, BAD_COOKIE past the end.
pub fn page(
    all: &[Vec<u8>],
    cookie: u64,
    maxcount: u32,
) -> Result<(&[Vec<u8>], u64, bool), NfsStat> {
    let start = usize::try_from(cookie).map_err(|_| NfsStat::BAD_COOKIE)?;
    if start > all.len() {
        return Err(NfsStat::BAD_COOKIE);
    }
    // cookie + array length + eof
    let mut used: u64 = 8 + 4 + 4;
    if used > maxcount as u64 {
        return Err(NfsStat::TOOSMALL);
    }
    let mut end = start;
    for n in &all[start..] {
        let sz = 4 + (n.len() as u64).div_ceil(4) * 4;
        if used + sz > maxcount as u64 {
            break;
        }
        used += sz;
        end += 1;
    }
    if end == start && start < all.len() {
        return Err(NfsStat::TOOSMALL);
    }
    Ok((&all[start..end], end as u64, end == all.len()))
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let cookie = r.u64()?;
    let maxcount = r.u32()?;
    let a = xattr_target(ctx, false)?;
    let all = ctx.srv.store.listxattrs(a.ino)?;
    let (names, next, eof) = page(&all, cookie, maxcount)?;
    w.u64(next);
    w.u32(names.len() as u32);
    for n in names {
        w.opaque(n);
    }
    w.bool(eof);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paging() {
        let all: Vec<Vec<u8>> = vec![b"user.a".to_vec(), b"user.bb".to_vec(), b"c".to_vec()];
        assert_eq!(page(&all, 0, 8192), Ok((&all[..], 3, true)));
        // 16 fixed bytes + 12 for "user.a" fit, "user.bb" (12) does not.
        assert_eq!(page(&all, 0, 28), Ok((&all[..1], 1, false)));
        assert_eq!(page(&all, 1, 36), Ok((&all[1..], 3, true)));
        assert_eq!(page(&all, 0, 27), Err(NfsStat::TOOSMALL));
        assert_eq!(page(&all, 3, 16), Ok((&all[3..], 3, true)));
        assert_eq!(page(&all, 4, 8192), Err(NfsStat::BAD_COOKIE));
        assert_eq!(page(&[], 0, 15), Err(NfsStat::TOOSMALL));
    }
}
