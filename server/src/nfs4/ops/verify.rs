//! VERIFY (RFC 8881 §18.31): OK if the given attribute values are those of the current
//! object, NOT_SAME otherwise. NVERIFY shares `compare`.

use crate::nfs4::attr::{decode_raw, encode_values, is_supported, is_write_only, num, AttrEnv};
use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::attr::with_env;
use crate::nfs4::helpers::fh::cur_attr;
use crate::nfs4::status::NfsStat;
use crate::store::Attr;
use crate::xdr::{XdrReader, XdrWriter};

/// Whether the `fattr4` in `r` equals our encoding of the same attributes of `a`.
/// Attributes we do not support are ATTRNOTSUPP; rdattr_error and write-only ones are
/// INVAL (§18.31.3). Values are compared as encoded bytes: our encoding is canonical.
pub fn compare_with(env: &AttrEnv<'_>, a: &Attr, r: &mut XdrReader<'_>) -> Result<bool, NfsStat> {
    let (mask, vals) = decode_raw(r)?;
    for bit in mask.iter() {
        if !is_supported(env.minor, bit) {
            return Err(NfsStat::ATTRNOTSUPP);
        }
        if bit == num::RDATTR_ERROR || is_write_only(bit) {
            return Err(NfsStat::INVAL);
        }
    }
    let mut ours = XdrWriter::new();
    encode_values(env, a, &mask, &mut ours);
    Ok(ours.buf == vals)
}

pub fn compare(ctx: &Ctx<'_>, r: &mut XdrReader<'_>) -> Result<bool, NfsStat> {
    let a = cur_attr(ctx)?;
    with_env(ctx, |env| compare_with(env, &a, r))
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    match compare(ctx, r) {
        Ok(true) => Ok(()),
        Ok(false) => Err(NfsStat::NOT_SAME),
        Err(s) => Err(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::attr::encode_fattr;
    use crate::nfs4::types::Bitmap;
    use crate::store::{FileType, FsStat, Ino, Timespec};

    fn attr(size: u64) -> Attr {
        Attr {
            ino: Ino(8),
            generation: 1,
            ftype: FileType::Regular,
            mode: 0o600,
            nlink: 1,
            uid: 5,
            gid: 6,
            size,
            used: 0,
            rdev: (0, 0),
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            crtime: Timespec::default(),
            change: 9,
            parent: Ino(1),
        }
    }

    fn bits(b: &[u32]) -> Bitmap {
        let mut m = Bitmap::default();
        for x in b {
            m.set(*x);
        }
        m
    }

    #[test]
    fn same_not_same_and_errors() {
        let f = || FsStat {
            total_bytes: 10,
            free_bytes: 5,
            total_files: 10,
            free_files: 5,
        };
        let env = AttrEnv {
            minor: 1,
            lease_seconds: 90,
            layout_types: &[layout::block::LayoutType::BLOCK_VOLUME],
            volume_uuid: [1; 16],
            block_size: 4096,
            fsstat: &f,
        };
        // What GETATTR returned verifies against the same object, not against a changed one.
        let req = bits(&[
            num::TYPE,
            num::SIZE,
            num::FSID,
            num::FILEHANDLE,
            num::OWNER,
            num::SPACE_FREE,
        ]);
        let mut w = XdrWriter::new();
        encode_fattr(&env, &attr(100), &req, &mut w);
        assert_eq!(
            compare_with(&env, &attr(100), &mut XdrReader::new(&w.buf)),
            Ok(true)
        );
        assert_eq!(
            compare_with(&env, &attr(101), &mut XdrReader::new(&w.buf)),
            Ok(false)
        );
        let fattr = |m: &[u32], v: &[u8]| {
            let mut w = XdrWriter::new();
            crate::xdr::Xdr::encode(&bits(m), &mut w);
            w.opaque(v);
            w.buf
        };
        let chk = |b: Vec<u8>| compare_with(&env, &attr(1), &mut XdrReader::new(&b));
        assert_eq!(chk(fattr(&[num::ACL], &[])), Err(NfsStat::ATTRNOTSUPP));
        assert_eq!(
            chk(fattr(&[num::CHANGE_ATTR_TYPE], &[0; 4])),
            Err(NfsStat::ATTRNOTSUPP)
        );
        assert_eq!(
            chk(fattr(&[num::RDATTR_ERROR], &[0; 4])),
            Err(NfsStat::INVAL)
        );
        assert_eq!(
            chk(fattr(&[num::TIME_MODIFY_SET], &[0; 4])),
            Err(NfsStat::INVAL)
        );
        // Short values are simply not the same; a cut fattr4 is BADXDR.
        assert_eq!(chk(fattr(&[num::SIZE], &[0; 4])), Ok(false));
        assert_eq!(chk(vec![0, 0, 0, 1, 0]), Err(NfsStat::BADXDR));
    }
}
