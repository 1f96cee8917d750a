//! GETATTR / SETATTR / VERIFY rules (RFC 8881 §5, §18.7, §18.30, §18.31, §18.15): unknown
//! attributes are left out of a GETATTR answer, read-only ones cannot be set, unsupported ones
//! are ATTRNOTSUPP, and VERIFY / NVERIFY compare.

use client_tests::attrs::{attr, basic, bitmap, SetAttrs};
use client_tests::fs::{server_and_root, server_and_session, OpenFile};
use client_tests::ops::Op;
use client_tests::{Bitmap, Compound, NfsStat, PnfsdProcess, Session, Stateid};
use pnfsd::nfs4::opcode::NfsOp;
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
        opnum: NfsOp::SETATTR,
        body: body.buf,
    }
}

/// A fresh server, a session, and an empty 0644 file `name` in the root directory.
async fn server_with_file(name: &str) -> (PnfsdProcess, Session, OpenFile) {
    let (srv, s, root) = server_and_root().await.unwrap();
    let f = s.create_file(&root, name, 0o644).await.unwrap();
    (srv, s, f)
}

/// The status of PUTFH(`f`) + `op`.
async fn status_on(s: &Session, f: &OpenFile, op: Op) -> NfsStat {
    s.status(Compound::new().putfh(&f.fh).op(op)).await.unwrap()
}

/// `f` still has size 0 and mode 0644: a refused SETATTR changed nothing.
async fn assert_unchanged(s: &Session, f: &OpenFile) {
    let a = s.getattr_fh(&f.fh, basic()).await.unwrap();
    assert_eq!((a.size, a.mode.map(|m| m & 0o7777)), (Some(0), Some(0o644)));
}

#[tokio::test]
async fn getattr_leaves_out_what_it_does_not_know() {
    let (_srv, s) = server_and_session().await.unwrap();
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
    let (_srv, s, f) = server_with_file("f").await;

    // A read-only attribute (type) → INVAL (§18.30.4).
    let st = status_on(
        &s,
        &f,
        setattr_raw(&bitmap(&[attr::TYPE]), &1u32.to_be_bytes()),
    )
    .await;
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
        let st = status_on(&s, &f, setattr_raw(&bitmap(&[12]), &0u32.to_be_bytes())).await;
        assert_eq!(
            st,
            NfsStat::ATTRNOTSUPP,
            "SETATTR of an unsupported acl → {}",
            st.name()
        );
    }
    // Nothing of the above changed the file.
    assert_unchanged(&s, &f).await;
    // A mode with bits beyond 07777 → INVAL.
    let st = s
        .status(
            Compound::new()
                .putfh(&f.fh)
                .setattr(Stateid::ANONYMOUS, SetAttrs::mode(0o170644)),
        )
        .await
        .unwrap();
    assert_eq!(st, NfsStat::INVAL, "mode 0170644 → {}", st.name());
}

#[tokio::test]
async fn verify_and_nverify() {
    let (_srv, s, f) = server_with_file("f").await;
    let size0 = fattr(&bitmap(&[attr::SIZE]), &0u64.to_be_bytes());
    let size9 = fattr(&bitmap(&[attr::SIZE]), &9u64.to_be_bytes());
    let cases = [
        (NfsOp::VERIFY, &size0, NfsStat::OK),
        (NfsOp::VERIFY, &size9, NfsStat::NOT_SAME),
        (NfsOp::NVERIFY, &size0, NfsStat::SAME),
        (NfsOp::NVERIFY, &size9, NfsStat::OK),
    ];
    for (op, vals, want) in cases {
        let body = vals.clone();
        let st = status_on(&s, &f, Op::Raw { opnum: op, body }).await;
        assert_eq!(st, want, "op {op} → {}", st.name());
    }
}

/// SETATTR4res carries `attrsset` whatever the status (RFC 8881 §18.30.2), also when the
/// arguments do not decode.
#[tokio::test]
async fn setattr_with_a_malformed_attrlist_is_badxdr_with_attrsset() {
    let (_srv, s, f) = server_with_file("f").await;
    // Values shorter than the mask says → BADXDR; longer → BADXDR too (attrlist4 must be
    // consumed exactly).
    let short = setattr_raw(&bitmap(&[attr::SIZE, attr::MODE]), &[0; 8]);
    let st = status_on(&s, &f, short).await;
    assert_eq!(st, NfsStat::BADXDR, "short attrlist4 → {}", st.name());
    let long = setattr_raw(&bitmap(&[attr::MODE]), &[0, 0, 1, 0xa4, 0, 0, 0, 0]);
    let st = status_on(&s, &f, long).await;
    assert_eq!(st, NfsStat::BADXDR, "long attrlist4 → {}", st.name());
    assert_unchanged(&s, &f).await;
}

/// SETATTR of times (settime4: SET_TO_CLIENT_TIME4 with a value, SET_TO_SERVER_TIME4).
#[tokio::test]
async fn setattr_times() {
    use client_tests::attrs::{SetTime, Time};
    let (_srv, s, f) = server_with_file("t").await;
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
