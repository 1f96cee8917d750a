use std::cell::Cell;

use super::*;
use crate::store::{FileType, Ino, SetTime, Timespec};

fn attr() -> Attr {
    let t = Timespec {
        sec: 1_700_000_000,
        nsec: 5,
    };
    Attr {
        ino: Ino(42),
        generation: 3,
        ftype: FileType::Regular,
        mode: 0o644,
        nlink: 1,
        uid: 1000,
        gid: 100,
        size: 12345,
        used: 16384,
        rdev: (0, 0),
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        change: 77,
        parent: Ino(1),
    }
}

fn stat() -> FsStat {
    FsStat {
        total_bytes: 1 << 30,
        free_bytes: 1 << 29,
        total_files: 1000,
        free_files: 900,
    }
}

fn env<'a>(minor: u32, f: &'a dyn Fn() -> FsStat) -> AttrEnv<'a> {
    AttrEnv {
        minor,
        lease_seconds: 90,
        layout_types: &[LayoutType::BLOCK_VOLUME, LayoutType::SCSI],
        volume_uuid: [7; 16],
        block_size: 4096,
        fsstat: f,
    }
}

fn bm(bits: &[u32]) -> Bitmap {
    bitmap_of(bits)
}

fn fattr(bits: &[u32], vals: impl FnOnce(&mut XdrWriter)) -> Vec<u8> {
    let mut w = XdrWriter::new();
    bm(bits).encode(&mut w);
    let mut v = XdrWriter::new();
    vals(&mut v);
    w.opaque(&v.buf);
    w.buf
}

#[test]
fn supported_depends_on_minor_version() {
    assert!(!supported(1).is_set(num::CHANGE_ATTR_TYPE));
    assert!(!supported(1).is_set(num::XATTR_SUPPORT));
    assert!(supported(2).is_set(num::XATTR_SUPPORT));
    assert!(supported(2).is_set(num::CHANGE_ATTR_TYPE));
    for b in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 19, 75] {
        assert!(supported(1).is_set(b), "mandatory attribute {b}");
    }
    assert!(!supported(2).is_set(num::ACL));
}

#[test]
fn every_supported_attribute_has_an_encoder() {
    let f = stat;
    let e = env(2, &f);
    for bit in supported(2).iter().filter(|b| !is_write_only(*b)) {
        let mut w = XdrWriter::new();
        encode_values(&e, &attr(), &bm(&[bit]), &mut w);
        assert!(
            !w.is_empty() && w.len().is_multiple_of(4),
            "attribute {bit}"
        );
    }
}

#[test]
fn encode_leaves_out_unsupported_and_write_only_attributes() {
    let f = stat;
    let e = env(1, &f);
    let req = bm(&[
        num::TYPE,
        num::SIZE,
        num::ACL,
        num::OWNER,
        num::TIME_ACCESS_SET,
        num::CHANGE_ATTR_TYPE,
        95,
    ]);
    let mut w = XdrWriter::new();
    let got = encode_fattr(&e, &attr(), &req, &mut w);
    assert_eq!(got, bm(&[num::TYPE, num::SIZE, num::OWNER]));
    let mut r = XdrReader::new(&w.buf);
    assert_eq!(Bitmap::decode(&mut r).unwrap(), got);
    let vals = r.opaque(1000).unwrap();
    r.finish().unwrap();
    let mut r = XdrReader::new(vals);
    assert_eq!(r.u32().unwrap(), 1); // NF4REG
    assert_eq!(r.u64().unwrap(), 12345);
    assert_eq!(r.string(100).unwrap(), b"1000");
    r.finish().unwrap();
}

#[test]
fn fs_attributes_come_from_the_environment() {
    let f = stat;
    let e = env(2, &f);
    let mut w = XdrWriter::new();
    let req = bm(&[
        num::FSID,
        num::LEASE_TIME,
        num::FS_LAYOUT_TYPES,
        num::LAYOUT_BLKSIZE,
        num::SPACE_TOTAL,
        num::FILEHANDLE,
    ]);
    encode_values(&e, &attr(), &req, &mut w);
    let mut r = XdrReader::new(&w.buf);
    assert_eq!(r.u64().unwrap(), 0x0707_0707_0707_0707);
    assert_eq!(r.u64().unwrap(), 0x0707_0707_0707_0707);
    assert_eq!(r.u32().unwrap(), 90);
    let fh = r.opaque(128).unwrap();
    assert_eq!(
        crate::nfs4::types::Fh::from_bytes(fh).map(|f| (f.ino, f.generation)),
        Some((Ino(42), 3))
    );
    assert_eq!(r.u64().unwrap(), 1 << 30);
    assert_eq!(r.u32().unwrap(), 2);
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (3, 5));
    assert_eq!(r.u32().unwrap(), 4096);
    r.finish().unwrap();
}

#[test]
fn fsstat_is_read_once_and_only_when_needed() {
    let calls = Cell::new(0);
    let f = || {
        calls.set(calls.get() + 1);
        stat()
    };
    let e = env(2, &f);
    let mut w = XdrWriter::new();
    encode_fattr(&e, &attr(), &bm(&[num::TYPE, num::MODE]), &mut w);
    assert_eq!(calls.get(), 0);
    let req = bm(&[num::FILES_FREE, num::SPACE_AVAIL, num::SPACE_TOTAL]);
    encode_fattr(&e, &attr(), &req, &mut w);
    assert_eq!(calls.get(), 1);
}

#[test]
fn setattr_values_round_trip() {
    let bits = [
        num::SIZE,
        num::MODE,
        num::OWNER,
        num::OWNER_GROUP,
        num::TIME_ACCESS_SET,
        num::TIME_MODIFY_SET,
    ];
    let buf = fattr(&bits, |v| {
        v.u64(4096);
        v.u32(0o4755);
        v.string(b"1000");
        v.string(b"100@example.org");
        v.u32(0);
        v.u32(1);
        v.i64(-5);
        v.u32(999_999_999);
    });
    let mut r = XdrReader::new(&buf);
    let (mask, sa) = decode_fattr(&mut r).unwrap();
    r.finish().unwrap();
    assert_eq!(mask, bm(&bits));
    assert_eq!(sa.size, Some(4096));
    assert_eq!(sa.mode, Some(0o4755));
    assert_eq!((sa.uid, sa.gid), (Some(1000), Some(100)));
    assert_eq!(sa.atime, Some(SetTime::ServerNow));
    assert_eq!(
        sa.mtime,
        Some(SetTime::Client(Timespec {
            sec: -5,
            nsec: 999_999_999
        }))
    );
}

fn dec(buf: &[u8]) -> Result<(Bitmap, SetAttrs), NfsStat> {
    decode_fattr_minor(&mut XdrReader::new(buf), 1)
}

#[test]
fn setattr_errors() {
    // An attribute we do not offer; then one we offer but that is read-only.
    assert_eq!(dec(&fattr(&[num::ACL], |_| {})), Err(NfsStat::ATTRNOTSUPP));
    assert_eq!(
        dec(&fattr(&[num::CHANGE_ATTR_TYPE], |v| v.u32(0))),
        Err(NfsStat::ATTRNOTSUPP)
    );
    assert_eq!(dec(&fattr(&[num::TYPE], |v| v.u32(1))), Err(NfsStat::INVAL));
    assert_eq!(
        dec(&fattr(&[num::MODE, num::ACL], |v| v.u32(0))),
        Err(NfsStat::ATTRNOTSUPP)
    );
    // Malformed values.
    assert_eq!(
        dec(&fattr(&[num::SIZE], |v| v.u32(1))),
        Err(NfsStat::BADXDR)
    );
    assert_eq!(
        dec(&fattr(&[num::MODE], |v| {
            v.u32(0o644);
            v.u32(0)
        })),
        Err(NfsStat::BADXDR)
    );
    assert_eq!(
        dec(&fattr(&[num::TIME_MODIFY_SET], |v| v.u32(7))),
        Err(NfsStat::BADXDR)
    );
    assert_eq!(
        dec(&fattr(&[num::TIME_MODIFY_SET], |v| {
            v.u32(1);
            v.i64(0);
            v.u32(1_000_000_000)
        })),
        Err(NfsStat::INVAL)
    );
    assert_eq!(
        dec(&fattr(&[num::MODE], |v| v.u32(0o10644))),
        Err(NfsStat::INVAL)
    );
    assert_eq!(
        dec(&fattr(&[num::OWNER], |v| v.string(b"alice"))),
        Err(NfsStat::BADOWNER)
    );
    // Truncated fattr4 and a bitmap longer than any we accept.
    assert_eq!(dec(&[0, 0, 0, 1]), Err(NfsStat::BADXDR));
    let mut w = XdrWriter::new();
    w.u32(9);
    for _ in 0..9 {
        w.u32(0);
    }
    w.u32(0);
    assert_eq!(dec(&w.buf), Err(NfsStat::BADXDR));
    // An empty fattr4 sets nothing.
    assert_eq!(
        dec(&fattr(&[], |_| {})),
        Ok((Bitmap::default(), SetAttrs::default()))
    );
}

#[test]
fn owner_strings() {
    assert_eq!(parse_owner(b"0"), Ok(0));
    assert_eq!(parse_owner(b"4294967295"), Ok(u32::MAX));
    assert_eq!(parse_owner(b"1000@localdomain"), Ok(1000));
    for bad in [
        &b""[..],
        b"4294967296",
        b"99999999999",
        b"-1",
        b"root",
        b"@x",
        b"12a",
        b" 1",
    ] {
        assert_eq!(parse_owner(bad), Err(NfsStat::BADOWNER), "{bad:?}");
    }
    assert_eq!(super::file::owner_string(65534), "65534");
}

#[test]
fn intersect_and_clear() {
    let a = bm(&[1, 33, 70]);
    let b = bm(&[1, 70]);
    assert_eq!(intersect(&a, &b), bm(&[1, 70]));
    let mut c = a.clone();
    clear(&mut c, 33);
    clear(&mut c, 200);
    assert_eq!(c.iter().collect::<Vec<_>>(), vec![1, 70]);
}

proptest::proptest! {
    #[test]
    fn decode_fattr_never_panics(buf in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
        let _ = decode_fattr(&mut XdrReader::new(&buf));
    }

    #[test]
    fn decode_fattr_of_structured_garbage(words in proptest::collection::vec(0u32..64, 0..12)) {
        let mut w = XdrWriter::new();
        for x in &words { w.u32(*x); }
        let _ = decode_fattr(&mut XdrReader::new(&w.buf));
    }
}

/// `open_arguments` (RFC 9754 §6) at both minor versions: five one-word bitmaps, what OPEN
/// honours — pynfs DELEG24/25 need it at minor version 1 too.
#[test]
fn open_arguments() {
    let f = stat;
    for minor in [1, 2] {
        assert!(supported(minor).is_set(num::OPEN_ARGUMENTS));
        let mut req = Bitmap::default();
        req.set(num::OPEN_ARGUMENTS);
        let mut w = XdrWriter::new();
        encode_fattr(&env(minor, &f), &attr(), &req, &mut w);
        let mut r = XdrReader::new(&w.buf);
        assert_eq!(Bitmap::decode(&mut r).unwrap(), req);
        assert_eq!(r.u32().unwrap(), 40);
        let words: Vec<(u32, u32)> = (0..5)
            .map(|_| (r.u32().unwrap(), r.u32().unwrap()))
            .collect();
        assert_eq!(
            words,
            vec![
                (1, 0b1110),
                (1, 0b1111),
                (1, 0b11_1000),
                (1, 0b1_0011),
                (1, 0b1111)
            ]
        );
        assert!(r.finish().is_ok());
    }
}
