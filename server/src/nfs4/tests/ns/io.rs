//! Data and attributes: READ, WRITE, COMMIT, SETATTR, (N)VERIFY, ACCESS, ALLOCATE, SEEK, and
//! garbage arguments to every handler.

use super::*;
use crate::nfs4::attr::file::ftype;
use crate::nfs4::attr::num;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::ops::{
    access, allocate, commit, create, getattr, lookup, nverify, read, remove, seek, setattr,
    verify, write,
};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, Fh, Stateid};
use crate::store::{NewNode, SetAttrs, StoreOptions, ROOT_INO};
use crate::xdr::{Xdr, XdrReader, XdrWriter};

#[test]
fn write_read_commit_and_types() {
    let fx = fixture();
    let mut ctx = fx.ctx(2);
    let f = fx.file(ROOT_INO, "data", 0o644);
    ctx.current_fh = Some(f);
    let mut w = XdrWriter::new();
    Stateid::ANONYMOUS.encode(&mut w);
    w.u64(4096);
    w.u32(crate::nfs4::types::FILE_SYNC4);
    w.opaque(b"hello, world");
    let (s, body) = call(&mut ctx, write::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert_eq!(r.u32().unwrap(), 12);
    assert_eq!(r.u32().unwrap(), crate::nfs4::types::FILE_SYNC4);
    assert_eq!(r.array::<8>().unwrap(), BOOT.to_be_bytes());
    let rd = |ctx: &mut Ctx<'_>, off: u64, count: u32| {
        let mut w = XdrWriter::new();
        Stateid::BYPASS.encode(&mut w);
        w.u64(off);
        w.u32(count);
        call(ctx, read::run, &w.buf)
    };
    let (s, body) = rd(&mut ctx, 4096, 100);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert!(r.bool().unwrap());
    assert_eq!(r.opaque(200).unwrap(), b"hello, world");
    let (_, body) = rd(&mut ctx, 4090, 8);
    let mut r = XdrReader::new(&body);
    assert!(!r.bool().unwrap());
    assert_eq!(r.opaque(200).unwrap(), b"\0\0\0\0\0\0he");
    let (s, body) = call(&mut ctx, commit::run, &[0; 12]);
    assert_eq!((s, body), (NfsStat::OK, BOOT.to_be_bytes().to_vec()));
    // Size reflects the write.
    assert_eq!(
        getattr_of(&mut ctx, f, &[num::SIZE]),
        (4096u64 + 12).to_be_bytes()
    );
    // I/O on a directory or a symlink.
    root(&mut ctx);
    assert_eq!(rd(&mut ctx, 0, 1).0, NfsStat::ISDIR);
    assert_eq!(st(&mut ctx, commit::run, &[0; 12]), NfsStat::ISDIR);
    // A stateid nobody issued is refused by the state manager.
    ctx.current_fh = Some(f);
    let mut w = XdrWriter::new();
    Stateid {
        seqid: 1,
        other: [7; 12],
    }
    .encode(&mut w);
    w.u64(0);
    w.u32(1);
    assert_ne!(st(&mut ctx, read::run, &w.buf), NfsStat::OK);
    // The current stateid with none set.
    let mut w = XdrWriter::new();
    Stateid::CURRENT.encode(&mut w);
    w.u64(0);
    w.u32(1);
    assert_eq!(st(&mut ctx, read::run, &w.buf), NfsStat::BAD_STATEID);
}

/// The limits GETATTR advertises are the ones the operations enforce: a client that
/// believes `maxfilesize`, `maxname` and `maxread` gets neither FBIG below them nor more than
/// them (maxfilesize was i64::MAX while the store refused sizes past 2^50).
#[test]
fn advertised_limits_are_the_enforced_ones() {
    let fx = fixture();
    let mut ctx = fx.ctx(2);
    let r = root(&mut ctx);
    let vals = getattr_of(
        &mut ctx,
        r,
        &[num::MAXFILESIZE, num::MAXNAME, num::MAXREAD, num::MAXWRITE],
    );
    let mut v = XdrReader::new(&vals);
    let maxfilesize = v.u64().unwrap();
    let maxname = v.u32().unwrap() as usize;
    let (maxread, maxwrite) = (v.u64().unwrap(), v.u64().unwrap());
    v.finish().unwrap();
    let f = fx.file(ROOT_INO, "limits", 0o644);
    ctx.current_fh = Some(f);
    let write_at = |ctx: &mut Ctx<'_>, off: u64, data: &[u8]| {
        let mut w = XdrWriter::new();
        Stateid::ANONYMOUS.encode(&mut w);
        w.u64(off);
        w.u32(crate::nfs4::types::UNSTABLE4);
        w.opaque(data);
        st(ctx, write::run, &w.buf)
    };
    // The last byte below maxfilesize can be written; the one at it cannot.
    assert_eq!(write_at(&mut ctx, maxfilesize - 1, b"x"), NfsStat::OK);
    assert_eq!(write_at(&mut ctx, maxfilesize, b"x"), NfsStat::FBIG);
    // A maxwrite-sized WRITE is taken whole; READ gives at most maxread.
    let big = vec![7u8; maxwrite as usize + 4096];
    assert_eq!(
        write_at(&mut ctx, 0, &big[..maxwrite as usize]),
        NfsStat::OK
    );
    let mut w = XdrWriter::new();
    Stateid::ANONYMOUS.encode(&mut w);
    w.u64(0);
    w.u32(u32::MAX);
    let (s, body) = call(&mut ctx, read::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut rd = XdrReader::new(&body);
    assert!(!rd.bool().unwrap());
    assert_eq!(rd.opaque(usize::MAX).unwrap().len() as u64, maxread);
    // A name of maxname bytes is a name; one more is NAMETOOLONG.
    let dir = mkdir(&mut ctx, r, &"d".repeat(maxname));
    assert_ne!(dir, r);
    ctx.current_fh = Some(r);
    let long = name("d".repeat(maxname + 1).as_bytes());
    assert_eq!(st(&mut ctx, lookup::run, &long), NfsStat::NAMETOOLONG);
}

fn setattr_args(bits: &[u32], vals: impl FnOnce(&mut XdrWriter)) -> Vec<u8> {
    let mut w = XdrWriter::new();
    Stateid::ANONYMOUS.encode(&mut w);
    let mut m = Bitmap::default();
    for b in bits {
        m.set(*b);
    }
    m.encode(&mut w);
    let mut v = XdrWriter::new();
    vals(&mut v);
    w.opaque(&v.buf);
    w.buf
}

#[test]
fn setattr_getattr_verify() {
    let fx = fixture();
    let mut ctx = fx.ctx(2);
    let f = fx.file(ROOT_INO, "f", 0o644);
    ctx.current_fh = Some(f);
    let args = setattr_args(&[num::SIZE, num::MODE, num::OWNER], |v| {
        v.u64(10);
        v.u32(0o600);
        v.string(b"1000");
    });
    let (s, body) = call(&mut ctx, setattr::run, &args);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    let set = Bitmap::decode(&mut r).unwrap();
    assert!(set.is_set(num::SIZE) && set.is_set(num::MODE) && set.is_set(num::OWNER));
    let vals = getattr_of(&mut ctx, f, &[num::SIZE, num::MODE, num::OWNER]);
    let mut r = XdrReader::new(&vals);
    assert_eq!(r.u64().unwrap(), 10);
    assert_eq!(r.u32().unwrap(), 0o600);
    assert_eq!(r.string(20).unwrap(), b"1000");
    // Read-only and unsupported attributes; the body is an empty bitmap.
    let (s, body) = call(
        &mut ctx,
        setattr::run,
        &setattr_args(&[num::TYPE], |v| v.u32(1)),
    );
    assert_eq!((s, body), (NfsStat::INVAL, vec![0, 0, 0, 0]));
    let s = st(&mut ctx, setattr::run, &setattr_args(&[num::ACL], |_| {}));
    assert_eq!(s, NfsStat::ATTRNOTSUPP);
    // A size on a directory.
    root(&mut ctx);
    let s = st(
        &mut ctx,
        setattr::run,
        &setattr_args(&[num::SIZE], |v| v.u64(0)),
    );
    assert_eq!(s, NfsStat::ISDIR);
    // Someone else may not chmod.
    ctx.current_fh = Some(f);
    ctx.cred = cred(2000, 2000);
    let s = st(
        &mut ctx,
        setattr::run,
        &setattr_args(&[num::MODE], |v| v.u32(0o777)),
    );
    assert_eq!(s, NfsStat::PERM);
    ctx.cred = root_cred();
    // VERIFY / NVERIFY of the size.
    let fattr = |size: u64| {
        let mut w = XdrWriter::new();
        let mut m = Bitmap::default();
        m.set(num::SIZE);
        m.encode(&mut w);
        w.opaque(&size.to_be_bytes());
        w.buf
    };
    assert_eq!(st(&mut ctx, verify::run, &fattr(10)), NfsStat::OK);
    assert_eq!(st(&mut ctx, verify::run, &fattr(11)), NfsStat::NOT_SAME);
    assert_eq!(st(&mut ctx, nverify::run, &fattr(10)), NfsStat::SAME);
    assert_eq!(st(&mut ctx, nverify::run, &fattr(11)), NfsStat::OK);
    // GETATTR of a write-only attribute.
    let mut w = XdrWriter::new();
    let mut m = Bitmap::default();
    m.set(num::TIME_MODIFY_SET);
    m.encode(&mut w);
    assert_eq!(st(&mut ctx, getattr::run, &w.buf), NfsStat::INVAL);
}

#[test]
fn access_by_mode_and_credential() {
    let fx = fixture();
    let mut ctx = fx.ctx(2);
    let f = fx.file(ROOT_INO, "private", 0o600);
    ctx.current_fh = Some(f);
    let all = 0x3f_u32;
    let ask = |ctx: &mut Ctx<'_>| {
        let (s, body) = call(ctx, access::run, &all.to_be_bytes());
        assert_eq!(s, NfsStat::OK);
        let mut r = XdrReader::new(&body);
        (r.u32().unwrap(), r.u32().unwrap())
    };
    let file_bits = crate::nfs4::helpers::perm::ACCESS4_READ
        | crate::nfs4::helpers::perm::ACCESS4_MODIFY
        | crate::nfs4::helpers::perm::ACCESS4_EXTEND
        | crate::nfs4::helpers::perm::ACCESS4_EXECUTE;
    assert_eq!(
        ask(&mut ctx),
        (
            file_bits,
            file_bits & !crate::nfs4::helpers::perm::ACCESS4_EXECUTE
        )
    );
    ctx.cred = cred(1000, 1000);
    assert_eq!(ask(&mut ctx), (file_bits, 0));
    // Anonymous READ by someone who may not read.
    let mut w = XdrWriter::new();
    Stateid::ANONYMOUS.encode(&mut w);
    w.u64(0);
    w.u32(1);
    assert_eq!(st(&mut ctx, read::run, &w.buf), NfsStat::ACCESS);
    // Creating in a directory without write permission.
    root(&mut ctx);
    let d = mkdir(&mut fx.ctx(2), ctx.current_fh.unwrap(), "ro");
    ctx.current_fh = Some(d);
    let args = create_args(ftype::NF4DIR, &[], b"x");
    assert_eq!(st(&mut ctx, create::run, &args), NfsStat::ACCESS);
    // A sticky, world-writable directory: only the file's owner (or root) removes it.
    let store = &fx.srv.store;
    let sticky = SetAttrs {
        mode: Some(0o1777),
        ..SetAttrs::default()
    };
    let (t, _) = store
        .create(ROOT_INO, b"tmp", NewNode::Directory, &sticky, (0, 0))
        .unwrap();
    store
        .create(
            t.ino,
            b"mine",
            NewNode::Regular,
            &SetAttrs::default(),
            (2000, 2000),
        )
        .unwrap();
    ctx.current_fh = Some(Fh {
        ino: t.ino,
        generation: t.generation,
    });
    ctx.cred = cred(3000, 3000);
    assert_eq!(st(&mut ctx, remove::run, &name(b"mine")), NfsStat::PERM);
    ctx.cred = cred(2000, 2000);
    assert_eq!(st(&mut ctx, remove::run, &name(b"mine")), NfsStat::OK);
}

#[test]
fn allocate_seek_deallocate() {
    let fx = fixture();
    let mut ctx = fx.ctx(2);
    let f = fx.file(ROOT_INO, "sparse", 0o644);
    ctx.current_fh = Some(f);
    let range = |off: u64, len: u64| {
        let mut w = XdrWriter::new();
        Stateid::ANONYMOUS.encode(&mut w);
        w.u64(off);
        w.u64(len);
        w.buf
    };
    assert_eq!(st(&mut ctx, allocate::run, &range(0, 0)), NfsStat::INVAL);
    assert_eq!(
        st(&mut ctx, allocate::run, &range(u64::MAX, 2)),
        NfsStat::INVAL
    );
    assert_eq!(
        st(&mut ctx, allocate::run, &range(65536, 8192)),
        NfsStat::OK
    );
    assert_eq!(
        getattr_of(&mut ctx, f, &[num::SIZE]),
        (65536u64 + 8192).to_be_bytes()
    );
    let sk = |ctx: &mut Ctx<'_>, off: u64, what: u32| {
        let mut w = XdrWriter::new();
        Stateid::ANONYMOUS.encode(&mut w);
        w.u64(off);
        w.u32(what);
        call(ctx, seek::run, &w.buf)
    };
    // Unwritten blocks read as zeros: a hole for SEEK.
    let (s, body) = sk(&mut ctx, 0, 1);
    assert_eq!(s, NfsStat::OK);
    assert_eq!(&body[4..], &0u64.to_be_bytes());
    assert_eq!(sk(&mut ctx, 1 << 30, 0).0, NfsStat::NXIO);
    assert_eq!(
        st(&mut ctx, crate::nfs4::ops::deallocate::run, &range(0, 4096)),
        NfsStat::OK
    );
    root(&mut ctx);
    assert_eq!(st(&mut ctx, allocate::run, &range(0, 1)), NfsStat::ISDIR);
}

/// Garbage and truncated arguments to every namespace and I/O operation, with a directory,
/// a file and a symlink as current filehandle: a status comes back, never a panic.
#[test]
fn garbage_arguments_never_panic() {
    let sopts = StoreOptions {
        sync: false,
        ..StoreOptions::default()
    };
    let fx = fixture_with(sopts);
    let mut ctx = fx.ctx(2);
    let r = root(&mut ctx);
    let f = fx.file(ROOT_INO, "f", 0o644);
    let mut w = XdrWriter::new();
    w.string(b"t");
    ctx.current_fh = Some(r);
    assert_eq!(
        st(
            &mut ctx,
            create::run,
            &create_args(ftype::NF4LNK, &w.buf, b"l")
        ),
        NfsStat::OK
    );
    let l = ctx.current_fh.unwrap();
    use crate::nfs4::opcode::NfsOp;
    let ops = [
        NfsOp::PUTROOTFH,
        NfsOp::PUTPUBFH,
        NfsOp::PUTFH,
        NfsOp::GETFH,
        NfsOp::SAVEFH,
        NfsOp::RESTOREFH,
        NfsOp::LOOKUP,
        NfsOp::LOOKUPP,
        NfsOp::GETATTR,
        NfsOp::SETATTR,
        NfsOp::VERIFY,
        NfsOp::NVERIFY,
        NfsOp::ACCESS,
        NfsOp::CREATE,
        NfsOp::REMOVE,
        NfsOp::RENAME,
        NfsOp::LINK,
        NfsOp::READDIR,
        NfsOp::READLINK,
        NfsOp::READ,
        NfsOp::WRITE,
        NfsOp::COMMIT,
        NfsOp::SECINFO,
        NfsOp::SECINFO_NO_NAME,
        NfsOp::ALLOCATE,
        NfsOp::DEALLOCATE,
        NfsOp::SEEK,
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for round in 0..150 {
        // Small words make plausible lengths and enum values; large ones forged lengths.
        let words = (next() % 12) as usize;
        let mut args = XdrWriter::new();
        for _ in 0..words {
            let v = next();
            args.u32(if v % 3 == 0 {
                v as u32
            } else {
                (v % 40) as u32
            });
        }
        let cut = (next() as usize) % (args.len() + 1);
        for op in ops {
            let d = crate::nfs4::ops::lookup(op).unwrap();
            for fh in [r, f, l] {
                ctx.current_fh = Some(fh);
                ctx.saved_fh = Some(if round % 2 == 0 { r } else { f });
                let mut rd = XdrReader::new(&args.buf[..cut]);
                let mut out = XdrWriter::new();
                let _status = (d.handler)(&mut ctx, &mut rd, &mut out);
            }
        }
    }
}
