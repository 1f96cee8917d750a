//! Filehandles, names, directories: CREATE, LOOKUP(P), READDIR, RENAME, LINK, REMOVE, SECINFO.

use super::*;
use crate::nfs4::attr::file::ftype;
use crate::nfs4::attr::num;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::ops::{
    create, getfh, link, lookup, lookupp, putfh, readdir, readlink, remove, rename, restorefh,
    savefh, secinfo, secinfo_no_name,
};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, Fh};
use crate::store::ROOT_INO;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

#[test]
fn filehandles_put_get_save_restore() {
    let fx = fixture();
    let mut ctx = fx.ctx(2);
    let r = root(&mut ctx);
    let (s, body) = call(&mut ctx, getfh::run, &[]);
    assert_eq!(s, NfsStat::OK);
    let mut w = XdrWriter::new();
    w.opaque(&r.to_bytes());
    assert_eq!(body, w.buf);
    ctx.current_fh = None;
    assert_eq!(st(&mut ctx, putfh::run, &w.buf), NfsStat::OK);
    assert_eq!(ctx.current_fh, Some(r));
    assert_eq!(st(&mut ctx, putfh::run, &name(b"abc")), NfsStat::BADHANDLE);
    assert_eq!(st(&mut ctx, putfh::run, &[0, 0, 0, 9]), NfsStat::BADXDR);
    // A handle of a removed file is STALE.
    let f = fx.file(ROOT_INO, "gone", 0o644);
    fx.srv.store.remove(ROOT_INO, b"gone").unwrap();
    let mut w = XdrWriter::new();
    w.opaque(&f.to_bytes());
    assert_eq!(st(&mut ctx, putfh::run, &w.buf), NfsStat::STALE);
    // SAVEFH / RESTOREFH.
    assert_eq!(st(&mut ctx, restorefh::run, &[]), NfsStat::RESTOREFH);
    let d = mkdir(&mut ctx, r, "d");
    assert_eq!(st(&mut ctx, savefh::run, &[]), NfsStat::OK);
    root(&mut ctx);
    assert_eq!(st(&mut ctx, restorefh::run, &[]), NfsStat::OK);
    assert_eq!(ctx.current_fh, Some(d));
}

#[test]
fn create_lookup_lookupp_and_name_rules() {
    let fx = fixture();
    let mut ctx = fx.ctx(2);
    let r = root(&mut ctx);
    let d = mkdir(&mut ctx, r, "dir");
    let sub = mkdir(&mut ctx, d, "sub");
    ctx.current_fh = Some(d);
    assert_eq!(st(&mut ctx, lookup::run, &name(b"sub")), NfsStat::OK);
    assert_eq!(ctx.current_fh, Some(sub));
    assert_eq!(st(&mut ctx, lookupp::run, &[]), NfsStat::OK);
    assert_eq!(ctx.current_fh, Some(d));
    root(&mut ctx);
    assert_eq!(st(&mut ctx, lookupp::run, &[]), NfsStat::NOENT);
    for (n, want) in [
        (&b""[..], NfsStat::INVAL),
        (b"missing", NfsStat::NOENT),
        (b"..", NfsStat::NOENT),
        (b"\xff", NfsStat::INVAL),
        (&[b'x'; 300][..], NfsStat::NAMETOOLONG),
    ] {
        root(&mut ctx);
        assert_eq!(st(&mut ctx, lookup::run, &name(n)), want, "{n:?}");
    }
    let c = |t, n: &[u8]| create_args(t, &[], n);
    for (args, want) in [
        (c(ftype::NF4REG, b"f"), NfsStat::BADTYPE),
        (c(ftype::NF4DIR, b"."), NfsStat::BADNAME),
        (c(ftype::NF4DIR, b""), NfsStat::INVAL),
        (c(ftype::NF4DIR, b"dir"), NfsStat::EXIST),
        (c(ftype::NF4FIFO, b"fifo"), NfsStat::OK),
        (c(ftype::NF4SOCK, b"sock"), NfsStat::OK),
        (
            create_args(ftype::NF4BLK, &[0, 0, 0, 8, 0, 0, 0, 1], b"blk"),
            NfsStat::OK,
        ),
    ] {
        root(&mut ctx);
        assert_eq!(st(&mut ctx, create::run, &args), want);
    }
    // The new object became current, its rawdev is what we asked.
    let blk = ctx.current_fh.unwrap();
    let raw = getattr_of(&mut ctx, blk, &[num::TYPE, num::RAWDEV]);
    assert_eq!(raw, [0, 0, 0, 3, 0, 0, 0, 8, 0, 0, 0, 1]);
    // Inside a non-directory: NOTDIR (and SYMLINK for LOOKUP through a link).
    let f = fx.file(ROOT_INO, "file", 0o644);
    ctx.current_fh = Some(f);
    assert_eq!(
        st(&mut ctx, create::run, &c(ftype::NF4DIR, b"x")),
        NfsStat::NOTDIR
    );
    assert_eq!(st(&mut ctx, lookup::run, &name(b"x")), NfsStat::NOTDIR);
    assert_eq!(st(&mut ctx, lookupp::run, &[]), NfsStat::NOTDIR);
    root(&mut ctx);
    let mut w = XdrWriter::new();
    w.string(b"/target");
    let (s, body) = call(
        &mut ctx,
        create::run,
        &create_args(ftype::NF4LNK, &w.buf, b"ln"),
    );
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert!(r.bool().unwrap());
    let (before, after) = (r.u64().unwrap(), r.u64().unwrap());
    assert!(after > before);
    assert_eq!(st(&mut ctx, lookup::run, &name(b"x")), NfsStat::SYMLINK);
    assert_eq!(st(&mut ctx, lookupp::run, &[]), NfsStat::SYMLINK);
    let (s, body) = call(&mut ctx, readlink::run, &[]);
    assert_eq!((s, body), (NfsStat::OK, name(b"/target")));
    root(&mut ctx);
    assert_eq!(st(&mut ctx, readlink::run, &[]), NfsStat::INVAL);
}

#[test]
fn readdir_pages_through_cookies() {
    let fx = fixture();
    let mut ctx = fx.ctx(2);
    let r = root(&mut ctx);
    let d = mkdir(&mut ctx, r, "big");
    let mut want: Vec<String> = (0..60).map(|i| format!("entry-{i:03}")).collect();
    for n in &want {
        fx.file(d.ino, n, 0o644);
    }
    let page = |ctx: &mut Ctx<'_>, cookie: u64, verf: [u8; 8], maxcount: u32| {
        let mut w = XdrWriter::new();
        w.u64(cookie);
        w.opaque_fixed(&verf);
        w.u32(0);
        w.u32(maxcount);
        let mut m = Bitmap::default();
        m.set(num::FILEID);
        m.set(num::TYPE);
        m.encode(&mut w);
        call(ctx, readdir::run, &w.buf)
    };
    ctx.current_fh = Some(d);
    let (mut cookie, mut verf, mut got, mut pages) = (0, [0u8; 8], Vec::new(), 0);
    loop {
        let (s, body) = page(&mut ctx, cookie, verf, 600);
        assert_eq!(s, NfsStat::OK);
        assert!(body.len() <= 600);
        let mut r = XdrReader::new(&body);
        verf = r.array().unwrap();
        while r.bool().unwrap() {
            cookie = r.u64().unwrap();
            got.push(String::from_utf8(r.string(255).unwrap()).unwrap());
            let m = Bitmap::decode(&mut r).unwrap();
            assert!(m.is_set(num::FILEID) && m.is_set(num::TYPE));
            assert_eq!(r.opaque(100).unwrap().len(), 12);
        }
        pages += 1;
        if r.bool().unwrap() {
            break;
        }
        assert!(pages < 100);
    }
    assert!(pages > 2, "maxcount must split the listing");
    got.sort();
    want.sort();
    assert_eq!(got, want);
    // A stale verifier, reserved cookies, a maxcount too small for one entry.
    assert_eq!(page(&mut ctx, cookie, [9; 8], 600).0, NfsStat::NOT_SAME);
    assert_eq!(page(&mut ctx, 1, verf, 600).0, NfsStat::BAD_COOKIE);
    assert_eq!(page(&mut ctx, 0, [0; 8], 20).0, NfsStat::TOOSMALL);
    let f = fx.file(ROOT_INO, "plain", 0o644);
    ctx.current_fh = Some(f);
    assert_eq!(page(&mut ctx, 0, [0; 8], 600).0, NfsStat::NOTDIR);
}

#[test]
fn rename_link_remove() {
    let fx = fixture();
    let mut ctx = fx.ctx(2);
    let r = root(&mut ctx);
    let a = mkdir(&mut ctx, r, "a");
    let b = mkdir(&mut ctx, r, "b");
    let f = fx.file(a.ino, "f", 0o644);
    let ren = |ctx: &mut Ctx<'_>, from: Fh, old: &[u8], to: Fh, new: &[u8]| {
        ctx.current_fh = Some(from);
        assert_eq!(st(ctx, savefh::run, &[]), NfsStat::OK);
        ctx.current_fh = Some(to);
        let mut w = XdrWriter::new();
        w.string(old);
        w.string(new);
        call(ctx, rename::run, &w.buf)
    };
    assert_eq!(ren(&mut ctx, a, b"f", b, b"g").0, NfsStat::OK);
    ctx.current_fh = Some(b);
    assert_eq!(st(&mut ctx, lookup::run, &name(b"g")), NfsStat::OK);
    assert_eq!(ctx.current_fh, Some(f));
    // LINK: saved = file, current = directory.
    ctx.current_fh = Some(f);
    st(&mut ctx, savefh::run, &[]);
    ctx.current_fh = Some(a);
    assert_eq!(st(&mut ctx, link::run, &name(b"h")), NfsStat::OK);
    assert_eq!(st(&mut ctx, link::run, &name(b"h")), NfsStat::EXIST);
    // Renaming a name onto another name of the same file changes nothing.
    let (s, body) = ren(&mut ctx, a, b"h", b, b"g");
    assert_eq!(s, NfsStat::OK);
    let mut rd = XdrReader::new(&body);
    for _ in 0..2 {
        assert!(rd.bool().unwrap());
        assert_eq!(rd.u64().unwrap(), rd.u64().unwrap());
    }
    // A file onto a directory, a directory onto a file; "." as a name.
    assert_eq!(ren(&mut ctx, a, b"h", r, b"b").0, NfsStat::EXIST);
    assert_eq!(ren(&mut ctx, r, b"b", a, b"h").0, NfsStat::EXIST);
    assert_eq!(ren(&mut ctx, r, b".", a, b"x").0, NfsStat::BADNAME);
    assert_eq!(ren(&mut ctx, r, b"nope", a, b"x").0, NfsStat::NOENT);
    // Directories cannot be linked.
    ctx.current_fh = Some(b);
    st(&mut ctx, savefh::run, &[]);
    ctx.current_fh = Some(a);
    assert_eq!(st(&mut ctx, link::run, &name(b"bb")), NfsStat::ISDIR);
    // REMOVE.
    assert_eq!(st(&mut ctx, remove::run, &name(b"h")), NfsStat::OK);
    assert_eq!(st(&mut ctx, remove::run, &name(b"h")), NfsStat::NOENT);
    ctx.current_fh = Some(r);
    assert_eq!(st(&mut ctx, remove::run, &name(b"b")), NfsStat::NOTEMPTY);
    assert_eq!(st(&mut ctx, remove::run, &name(b"..")), NfsStat::BADNAME);
}

#[test]
fn secinfo_consumes_the_filehandle() {
    let fx = fixture();
    let mut ctx = fx.ctx(2);
    let r = root(&mut ctx);
    mkdir(&mut ctx, r, "d");
    root(&mut ctx);
    let (s, body) = call(&mut ctx, secinfo::run, &name(b"d"));
    assert_eq!(s, NfsStat::OK);
    // The flavors of the export rule: the built-in one takes AUTH_SYS only.
    assert_eq!(body, [0, 0, 0, 1, 0, 0, 0, 1]);
    assert_eq!(ctx.current_fh, None);
    root(&mut ctx);
    assert_eq!(st(&mut ctx, secinfo::run, &name(b"none")), NfsStat::NOENT);
    assert_eq!(
        st(&mut ctx, secinfo_no_name::run, &1u32.to_be_bytes()),
        NfsStat::NOENT
    );
    assert_eq!(
        st(&mut ctx, secinfo_no_name::run, &0u32.to_be_bytes()),
        NfsStat::OK
    );
    assert_eq!(ctx.current_fh, None);
}
