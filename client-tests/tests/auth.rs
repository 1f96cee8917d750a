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

#[tokio::test]
async fn owners_and_directory_permissions() {
    let srv = PnfsdProcess::start().unwrap();
    let root_s = Session::connect(srv.addr()).await.unwrap();
    let root = root_s.lookup_path("").await.unwrap();
    let private = root_s.mkdir(&root, "private", 0o755).await.unwrap();
    let public = root_s.mkdir(&root, "public", 0o777).await.unwrap();

    let user = session_as(srv.addr(), 1000, 1000).await;
    // Not the owner, no write bit for others → ACCESS (RFC 8881 §15.1.6.1).
    let st = user
        .run(Compound::new().putfh(&private).mkdir("x", 0o755))
        .await
        .unwrap()
        .status;
    assert_eq!(
        st,
        NfsStat::ACCESS,
        "uid 1000 creating in a root 0755 directory → {}",
        st.name()
    );
    let st = user
        .run(Compound::new().putfh(&root).remove("private"))
        .await
        .unwrap()
        .status;
    assert_eq!(
        st,
        NfsStat::ACCESS,
        "uid 1000 removing from the root directory → {}",
        st.name()
    );
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
    let owner = String::from_utf8_lossy(a.owner.as_deref().unwrap_or_default()).into_owned();
    let group = String::from_utf8_lossy(a.owner_group.as_deref().unwrap_or_default()).into_owned();
    assert!(
        owner == "1000" || owner.starts_with("1000@"),
        "owner {owner:?}"
    );
    assert!(
        group == "1000" || group.starts_with("1000@"),
        "group {group:?}"
    );
    // Another user cannot create inside the 0700 directory of uid 1000.
    let other = session_as(srv.addr(), 1001, 1001).await;
    let mine = user.lookup_path("public/mine").await.unwrap();
    let st = other
        .run(Compound::new().putfh(&mine).mkdir("y", 0o755))
        .await
        .unwrap()
        .status;
    assert_eq!(
        st,
        NfsStat::ACCESS,
        "uid 1001 creating in uid 1000's 0700 directory → {}",
        st.name()
    );
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
    let st = other
        .run(Compound::new().putfh(&public).open(args))
        .await
        .unwrap()
        .status;
    assert_eq!(
        st,
        NfsStat::ACCESS,
        "uid 1001 opening a 0600 file of uid 1000 → {}",
        st.name()
    );
    let st = other
        .run(Compound::new().putfh(&f.fh).read(Stateid::ANONYMOUS, 0, 10))
        .await
        .unwrap()
        .status;
    assert_eq!(
        st,
        NfsStat::ACCESS,
        "anonymous READ of a 0600 file of another uid → {}",
        st.name()
    );
    let st = other
        .run(
            Compound::new()
                .putfh(&f.fh)
                .write(Stateid::ANONYMOUS, 0, Stable::FileSync, b"x"),
        )
        .await
        .unwrap()
        .status;
    assert_eq!(
        st,
        NfsStat::ACCESS,
        "anonymous WRITE to a 0600 file of another uid → {}",
        st.name()
    );
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
