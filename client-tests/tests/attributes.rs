//! GETATTR / SETATTR / VERIFY rules (RFC 8881 §5, §18.7, §18.30, §18.31, §18.15): unknown
//! attributes are left out of a GETATTR answer, read-only ones cannot be set, unsupported ones
//! are ATTRNOTSUPP, and VERIFY / NVERIFY compare.

use client_tests::attrs::{attr, basic, bitmap, SetAttrs};
use client_tests::ops::Op;
use client_tests::{Bitmap, Compound, NfsStat, PnfsdProcess, Session, Stateid};
use pnfsd::nfs4::ops::opnum;
use pnfsd::xdr::{Xdr, XdrWriter};

/// A raw `fattr4` with `mask` and already-encoded values.
fn fattr(mask: &Bitmap, vals: &[u8]) -> Vec<u8> {
    let mut w = XdrWriter::new();
    mask.encode(&mut w);
    w.opaque(vals);
    w.into_inner()
}

/// SETATTR(anonymous stateid, raw fattr4).
fn setattr_raw(mask: &Bitmap, vals: &[u8]) -> Op {
    let mut body = XdrWriter::new();
    Stateid::ANONYMOUS.encode(&mut body);
    body.buf.extend_from_slice(&fattr(mask, vals));
    Op::Raw {
        opnum: opnum::SETATTR,
        body: body.buf,
    }
}

#[tokio::test]
async fn getattr_leaves_out_what_it_does_not_know() {
    let srv = PnfsdProcess::start().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let rep = s
        .run_ok(
            Compound::new()
                .putrootfh()
                .getattr(bitmap(&[attr::SUPPORTED_ATTRS])),
        )
        .await
        .unwrap();
    let supported = rep.attrs().unwrap().supported.clone().unwrap();
    // Ask for size plus bits no server has (90, 95) in a 3-word mask.
    let mut ask = bitmap(&[attr::SIZE, 90, 95]);
    ask.set(attr::TYPE);
    let rep = s
        .run_ok(Compound::new().putrootfh().getattr(ask.clone()))
        .await
        .unwrap();
    let got = &rep.attrs().unwrap().mask;
    for b in got.iter() {
        assert!(
            ask.is_set(b) && supported.is_set(b),
            "attribute {b} returned: not asked or not supported"
        );
    }
    assert!(got.is_set(attr::SIZE) && got.is_set(attr::TYPE));
    assert!(!got.is_set(90) && !got.is_set(95));
}

#[tokio::test]
async fn setattr_rules() {
    let srv = PnfsdProcess::start().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();

    // A read-only attribute (type) → INVAL (§18.30.4).
    let st = s
        .run(
            Compound::new()
                .putfh(&f.fh)
                .op(setattr_raw(&bitmap(&[attr::TYPE]), &1u32.to_be_bytes())),
        )
        .await
        .unwrap()
        .status;
    assert_eq!(st, NfsStat::INVAL, "SETATTR of type → {}", st.name());
    // An attribute the server does not support (acl, 12, an empty ACL) → ATTRNOTSUPP, unless
    // it is supported.
    let rep = s
        .run_ok(
            Compound::new()
                .putfh(&f.fh)
                .getattr(bitmap(&[attr::SUPPORTED_ATTRS])),
        )
        .await
        .unwrap();
    if !rep.attrs().unwrap().supported.clone().unwrap().is_set(12) {
        let st = s
            .run(
                Compound::new()
                    .putfh(&f.fh)
                    .op(setattr_raw(&bitmap(&[12]), &0u32.to_be_bytes())),
            )
            .await
            .unwrap()
            .status;
        assert_eq!(
            st,
            NfsStat::ATTRNOTSUPP,
            "SETATTR of an unsupported acl → {}",
            st.name()
        );
    }
    // Nothing of the above changed the file.
    let a = s.getattr_fh(&f.fh, basic()).await.unwrap();
    assert_eq!((a.size, a.mode.map(|m| m & 0o7777)), (Some(0), Some(0o644)));
    // A mode with bits beyond 07777 → INVAL.
    let st = s
        .run(
            Compound::new()
                .putfh(&f.fh)
                .setattr(Stateid::ANONYMOUS, SetAttrs::mode(0o170644)),
        )
        .await
        .unwrap()
        .status;
    assert_eq!(st, NfsStat::INVAL, "mode 0170644 → {}", st.name());
}

#[tokio::test]
async fn verify_and_nverify() {
    let srv = PnfsdProcess::start().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    let size0 = fattr(&bitmap(&[attr::SIZE]), &0u64.to_be_bytes());
    let size9 = fattr(&bitmap(&[attr::SIZE]), &9u64.to_be_bytes());
    let verify = |v: &[u8]| Op::Raw {
        opnum: opnum::VERIFY,
        body: v.to_vec(),
    };
    let nverify = |v: &[u8]| Op::Raw {
        opnum: opnum::NVERIFY,
        body: v.to_vec(),
    };
    assert_eq!(
        s.run(Compound::new().putfh(&f.fh).op(verify(&size0)))
            .await
            .unwrap()
            .status,
        NfsStat::OK
    );
    assert_eq!(
        s.run(Compound::new().putfh(&f.fh).op(verify(&size9)))
            .await
            .unwrap()
            .status,
        NfsStat::NOT_SAME
    );
    assert_eq!(
        s.run(Compound::new().putfh(&f.fh).op(nverify(&size0)))
            .await
            .unwrap()
            .status,
        NfsStat::SAME
    );
    assert_eq!(
        s.run(Compound::new().putfh(&f.fh).op(nverify(&size9)))
            .await
            .unwrap()
            .status,
        NfsStat::OK
    );
}

/// SETATTR4res carries `attrsset` whatever the status (RFC 8881 §18.30.2), also when the
/// arguments do not decode.
#[tokio::test]
async fn setattr_with_a_malformed_attrlist_is_badxdr_with_attrsset() {
    let srv = PnfsdProcess::start().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    // Values shorter than the mask says → BADXDR; longer → BADXDR too (attrlist4 must be
    // consumed exactly).
    let st = s
        .run(
            Compound::new()
                .putfh(&f.fh)
                .op(setattr_raw(&bitmap(&[attr::SIZE, attr::MODE]), &[0; 8])),
        )
        .await
        .unwrap()
        .status;
    assert_eq!(st, NfsStat::BADXDR, "short attrlist4 → {}", st.name());
    let st = s
        .run(Compound::new().putfh(&f.fh).op(setattr_raw(
            &bitmap(&[attr::MODE]),
            &[0, 0, 1, 0xa4, 0, 0, 0, 0],
        )))
        .await
        .unwrap()
        .status;
    assert_eq!(st, NfsStat::BADXDR, "long attrlist4 → {}", st.name());
    let a = s.getattr_fh(&f.fh, basic()).await.unwrap();
    assert_eq!((a.size, a.mode.map(|m| m & 0o7777)), (Some(0), Some(0o644)));
}

/// SETATTR of times (settime4: SET_TO_CLIENT_TIME4 with a value, SET_TO_SERVER_TIME4).
#[tokio::test]
async fn setattr_times() {
    use client_tests::attrs::{SetTime, Time};
    let srv = PnfsdProcess::start().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "t", 0o644).await.unwrap();
    let t = Time {
        sec: 1_000_000_000,
        nsec: 123_456_789,
    };
    let set = SetAttrs {
        mtime: Some(SetTime::ClientTime(t)),
        atime: Some(SetTime::ServerTime),
        ..Default::default()
    };
    let rep = s
        .run_ok(
            Compound::new()
                .putfh(&f.fh)
                .setattr(Stateid::ANONYMOUS, set)
                .getattr(bitmap(&[attr::TIME_ACCESS, attr::TIME_MODIFY])),
        )
        .await
        .unwrap();
    let a = rep.attrs().unwrap();
    assert_eq!(a.time_modify, Some(t));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let at = a.time_access.unwrap().sec;
    assert!(
        (now - 60..=now + 60).contains(&at),
        "atime {at} is not the server's now ({now})"
    );
}
