//! READDIR (RFC 8881 §18.23): entries of the current directory after `cookie`, each with
//! the requested attributes, within the client's `maxcount` (and `dircount`) bytes.

use super::getattr::check_readable;
use crate::nfs4::attr::encode_fattr;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::attr::with_env;
use crate::nfs4::helpers::fh::{cur_attr, require_dir};
use crate::nfs4::helpers::name::is_dot;
use crate::nfs4::helpers::perm::{require, ACCESS4_READ};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, NFS4_VERIFIER_SIZE};
use crate::store::DirEntry;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// `READDIR4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirArgs {
    pub cookie: u64,
    pub cookieverf: [u8; NFS4_VERIFIER_SIZE],
    pub dircount: u32,
    pub maxcount: u32,
    pub attr_request: Bitmap,
}

pub fn decode(r: &mut XdrReader<'_>) -> Result<ReaddirArgs, NfsStat> {
    Ok(ReaddirArgs {
        cookie: r.u64()?,
        cookieverf: r.array()?,
        dircount: r.u32()?,
        maxcount: r.u32()?,
        attr_request: Bitmap::decode(r)?,
    })
}

/// Bytes of `READDIR4resok` around the entries: cookieverf, the final "no next entry" and
/// `eof`.
const RESOK_OVERHEAD: usize = NFS4_VERIFIER_SIZE + 4 + 4;
/// How many entries one READDIR asks of the store at most.
const MAX_BATCH: usize = 4096;
/// The smallest entry: value-follows, cookie, a 1-byte name, an empty fattr4.
const MIN_ENTRY: usize = 4 + 8 + 8 + 4 + 4;

/// Encodes entries into `out` while they fit in `maxcount` (whole result) and `dircount`
/// (cookie and name bytes, RFC 8881 §18.23.3; 0 = no limit). Returns how many were taken.
pub fn encode_entries(
    entries: &[DirEntry],
    maxcount: usize,
    dircount: usize,
    mut enc_attrs: impl FnMut(&DirEntry, &mut XdrWriter),
    out: &mut XdrWriter,
) -> usize {
    let mut used = RESOK_OVERHEAD;
    let mut dir_used = 0;
    let mut taken = 0;
    for e in entries {
        let mut one = XdrWriter::new();
        one.bool(true);
        one.u64(e.cookie);
        one.string(&e.name);
        enc_attrs(e, &mut one);
        let dir_bytes = 8 + 4 + e.name.len().div_ceil(4) * 4;
        if used + one.len() > maxcount
            || (dircount > 0 && taken > 0 && dir_used + dir_bytes > dircount)
        {
            break;
        }
        used += one.len();
        dir_used += dir_bytes;
        out.buf.extend_from_slice(&one.buf);
        taken += 1;
    }
    taken
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let args = decode(r)?;
    let dir = cur_attr(ctx)?;
    require_dir(&dir)?;
    check_readable(&args.attr_request)?;
    // Cookies 1 and 2 are reserved (RFC 8881 §18.23.3).
    if args.cookie == 1 || args.cookie == 2 {
        return Err(NfsStat::BAD_COOKIE);
    }
    require(&ctx.cred, &dir, ACCESS4_READ)?;
    // The reply must fit the session's `ca_maxresponsesize`.
    let maxcount = (args.maxcount as usize).min(ctx.result_room());
    if maxcount < RESOK_OVERHEAD + MIN_ENTRY {
        return Err(NfsStat::TOOSMALL);
    }
    let store = &ctx.srv.store;
    // A cookie from an older verifier may point anywhere (§18.23.3): compare the verifier
    // before the store interprets the cookie.
    if args.cookie != 0 && args.cookieverf != store.readdir(dir.ino, 0, 0)?.verifier.to_be_bytes() {
        return Err(NfsStat::NOT_SAME);
    }
    let batch = (maxcount / MIN_ENTRY).clamp(1, MAX_BATCH);
    let rd = store.readdir(dir.ino, args.cookie, batch)?;
    let verf = rd.verifier.to_be_bytes();
    let entries: Vec<DirEntry> = rd
        .entries
        .into_iter()
        .filter(|e| !is_dot(&e.name))
        .collect();
    let mut body = XdrWriter::new();
    let taken = with_env(ctx, |env| {
        encode_entries(
            &entries,
            maxcount,
            args.dircount as usize,
            |e, out| {
                encode_fattr(env, &e.attr, &args.attr_request, out);
            },
            &mut body,
        )
    });
    if taken == 0 && !entries.is_empty() {
        return Err(NfsStat::TOOSMALL);
    }
    w.opaque_fixed(&verf);
    w.buf.extend_from_slice(&body.buf);
    w.bool(false);
    w.bool(rd.eof && taken == entries.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Attr, FileType, Ino, Timespec};

    fn entry(cookie: u64, name: &str) -> DirEntry {
        DirEntry {
            cookie,
            name: name.as_bytes().to_vec(),
            attr: Attr {
                ino: Ino(cookie),
                generation: 1,
                ftype: FileType::Regular,
                mode: 0o644,
                nlink: 1,
                uid: 0,
                gid: 0,
                size: 0,
                used: 0,
                rdev: (0, 0),
                atime: Timespec::default(),
                mtime: Timespec::default(),
                ctime: Timespec::default(),
                crtime: Timespec::default(),
                change: 1,
                parent: Ino(1),
            },
        }
    }

    fn empty_fattr(_: &DirEntry, w: &mut XdrWriter) {
        w.u32(0);
        w.u32(0);
    }

    #[test]
    fn entries_stop_at_maxcount_and_dircount() {
        let es: Vec<_> = (3..13).map(|c| entry(c, "abcd")).collect();
        // One entry: 4 + 8 + 8 + 8 = 28 bytes.
        let mut w = XdrWriter::new();
        let n = encode_entries(&es, RESOK_OVERHEAD + 3 * 28 + 27, 0, empty_fattr, &mut w);
        assert_eq!((n, w.len()), (3, 3 * 28));
        let mut r = XdrReader::new(&w.buf);
        for c in 3..6 {
            assert!(r.bool().unwrap());
            assert_eq!(r.u64().unwrap(), c);
            assert_eq!(r.string(10).unwrap(), b"abcd");
            assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (0, 0));
        }
        let mut w = XdrWriter::new();
        assert_eq!(encode_entries(&es, 1 << 20, 2 * 16, empty_fattr, &mut w), 2);
        // dircount never keeps out the first entry; maxcount does.
        assert_eq!(
            encode_entries(&es, 1 << 20, 1, empty_fattr, &mut XdrWriter::new()),
            1
        );
        assert_eq!(
            encode_entries(
                &es,
                RESOK_OVERHEAD + 27,
                0,
                empty_fattr,
                &mut XdrWriter::new()
            ),
            0
        );
    }

    #[test]
    fn decode_args() {
        let mut w = XdrWriter::new();
        w.u64(5);
        w.opaque_fixed(&[9; 8]);
        w.u32(100);
        w.u32(200);
        w.u32(1);
        w.u32(3);
        let a = decode(&mut XdrReader::new(&w.buf)).unwrap();
        assert_eq!(
            (a.cookie, a.cookieverf, a.dircount, a.maxcount),
            (5, [9; 8], 100, 200)
        );
        assert_eq!(a.attr_request, Bitmap(vec![3]));
        for n in 0..w.buf.len() {
            assert_eq!(
                decode(&mut XdrReader::new(&w.buf[..n])),
                Err(NfsStat::BADXDR)
            );
        }
    }
}
