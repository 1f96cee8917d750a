//! AUTH_SYS identities (RFC 5531 appendix A, RFC 8881 §5.9): a new object belongs to the
//! caller, and mode bits decide who may change a directory.

use std::sync::Arc;

use client_tests::attrs::{attr, bitmap};
use client_tests::rpc::{AuthSys, Cred};
use client_tests::{Compound, Connection, NfsStat, PnfsdProcess, Session, SessionOptions};

async fn session_as(addr: std::net::SocketAddr, uid: u32, gid: u32) -> Session {
    let cred = Cred::Sys(AuthSys {
        stamp: 1,
        machine: b"user-host".to_vec(),
        uid,
        gid,
        gids: vec![gid],
    });
    let conn = Arc::new(Connection::connect_with(addr, cred).await.unwrap());
    Session::establish(conn, SessionOptions::new(&format!("uid{uid}")))
        .await
        .unwrap()
}

/// `who` running `c` is refused with ACCESS (RFC 8881 §15.1.6.1); `what` names the attempt.
async fn assert_denied(who: &Session, c: Compound, what: &str) {
    let st = who.status(c).await.unwrap();
    assert_eq!(st, NfsStat::ACCESS, "{what} → {}", st.name());
}

/// The `which` (owner or group) attribute names id 1000: the bare number or `1000@domain`.
fn assert_is_1000(which: &str, got: Option<&[u8]>) {
    let s = String::from_utf8_lossy(got.unwrap_or_default()).into_owned();
    assert!(s == "1000" || s.starts_with("1000@"), "{which} {s:?}");
}

#[tokio::test]
async fn owners_and_directory_permissions() {
    let srv = PnfsdProcess::start().unwrap();
    let root_s = Session::connect(srv.addr()).await.unwrap();
    let root = root_s.lookup_path("").await.unwrap();
    let private = root_s.mkdir(&root, "private", 0o755).await.unwrap();
    let public = root_s.mkdir(&root, "public", 0o777).await.unwrap();

    let user = session_as(srv.addr(), 1000, 1000).await;
    // Not the owner, no write bit for others → ACCESS (RFC 8881 §15.1.6.1).
    assert_denied(
        &user,
        Compound::new().putfh(&private).mkdir("x", 0o755),
        "uid 1000 creating in a root 0755 directory",
    )
    .await;
    assert_denied(
        &user,
        Compound::new().putfh(&root).remove("private"),
        "uid 1000 removing from the root directory",
    )
    .await;
    // In a 0777 directory it may, and the new directory is its own.
    let rep = user
        .run_ok(
            Compound::new()
                .putfh(&public)
                .mkdir("mine", 0o700)
                .getattr(bitmap(&[attr::OWNER, attr::OWNER_GROUP])),
        )
        .await
        .unwrap();
    let a = rep.attrs().unwrap();
    assert_is_1000("owner", a.owner.as_deref());
    assert_is_1000("group", a.owner_group.as_deref());
    // Another user cannot create inside the 0700 directory of uid 1000.
    let other = session_as(srv.addr(), 1001, 1001).await;
    let mine = user.lookup_path("public/mine").await.unwrap();
    assert_denied(
        &other,
        Compound::new().putfh(&mine).mkdir("y", 0o755),
        "uid 1001 creating in uid 1000's 0700 directory",
    )
    .await;
}

#[tokio::test]
async fn file_permissions_on_open_and_io() {
    use client_tests::ops::{share, OpenClaim, Stable};
    use client_tests::Stateid;
    let srv = PnfsdProcess::start().unwrap();
    let root_s = Session::connect(srv.addr()).await.unwrap();
    let root = root_s.lookup_path("").await.unwrap();
    root_s.mkdir(&root, "public", 0o777).await.unwrap();
    let user = session_as(srv.addr(), 1000, 1000).await;
    let public = user.lookup_path("public").await.unwrap();
    let f = user.create_file(&public, "secret", 0o600).await.unwrap();
    user.write_all(&f, 0, b"top secret", Stable::FileSync)
        .await
        .unwrap();

    let other = session_as(srv.addr(), 1001, 1001).await;
    let args = other.open_args(
        share::ACCESS_READ,
        None,
        OpenClaim::Null(b"secret".to_vec()),
    );
    assert_denied(
        &other,
        Compound::new().putfh(&public).open(args),
        "uid 1001 opening a 0600 file of uid 1000",
    )
    .await;
    assert_denied(
        &other,
        Compound::new().putfh(&f.fh).read(Stateid::ANONYMOUS, 0, 10),
        "anonymous READ of a 0600 file of another uid",
    )
    .await;
    assert_denied(
        &other,
        Compound::new()
            .putfh(&f.fh)
            .write(Stateid::ANONYMOUS, 0, Stable::FileSync, b"x"),
        "anonymous WRITE to a 0600 file of another uid",
    )
    .await;
    // root may (no root squashing is configured).
    let rep = root_s
        .run_ok(
            Compound::new()
                .putfh(&f.fh)
                .read(Stateid::ANONYMOUS, 0, 100),
        )
        .await
        .unwrap();
    assert_eq!(rep.read().unwrap().data, b"top secret");
}
