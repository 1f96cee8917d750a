//! Exports and client rules: each rule seen from its own client host.
//! The server listens on 127.0.0.1 and each client binds its socket to another 127.0.0.x
//! (the whole 127/8 is local on Linux), so the server sees distinct hosts.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use client_tests::attrs::{attr, bitmap};
use client_tests::fs::OpenFile;
use client_tests::open_args::{share, OpenClaim};
use client_tests::ops::{Op, Stable};
use client_tests::pnfs::{iomode, layout_type, LayoutGetArgs};
use client_tests::rpc::{AuthSys, Cred};
use client_tests::sys;
use client_tests::{
    Compound, Connection, NfsStat, PnfsdProcess, ServerOptions, Session, SessionOptions, Stateid,
};

/// One rule per client host; 127.0.0.9 is in none.
const RULES: &str = r#"
[[exports]]
path = "/"
[[exports.clients]]
hosts = ["127.0.0.1"]
squash = "no_root_squash"
[[exports.clients]]
hosts = ["127.0.0.2"]
access = "ro"
[[exports.clients]]
hosts = ["127.0.0.3"]
[[exports.clients]]
hosts = ["127.0.0.4"]
squash = "all_squash"
anon_uid = 1234
anon_gid = 4321
[[exports.clients]]
hosts = ["127.0.0.5"]
pnfs = false
[[exports.clients]]
hosts = ["127.0.0.6"]
sec = ["sys", "none"]
[[exports.clients]]
hosts = ["127.0.1.0/24"]
access = "ro"
"#;

fn sys(uid: u32, gid: u32) -> Cred {
    Cred::Sys(AuthSys {
        stamp: 1,
        machine: b"exports-test".to_vec(),
        uid,
        gid,
        gids: vec![gid],
    })
}

/// A session from host `from` with `cred`.
async fn from(srv: &PnfsdProcess, from: &str, cred: Cred) -> Session {
    let ip: IpAddr = from.parse().unwrap();
    let conn = Connection::connect_from(ip, srv.addr(), cred)
        .await
        .unwrap();
    let name = format!("exports-{from}-{:?}", conn.cred).replace(' ', "");
    Session::establish(Arc::new(conn), SessionOptions::new(&name))
        .await
        .unwrap()
}

/// LAYOUTGET of the whole file `fh` with `stateid`.
fn layoutget(fh: &[u8], stateid: Stateid, mode: u32) -> Compound {
    Compound::new().putfh(fh).op(Op::LayoutGet(LayoutGetArgs {
        signal_avail: false,
        layout_type: layout_type::BLOCK_VOLUME,
        iomode: mode,
        offset: 0,
        length: 1 << 20,
        minlength: 0,
        stateid,
        maxcount: 64 << 10,
    }))
}

async fn open_read(s: &Session, fh: &[u8]) -> Result<OpenFile, NfsStat> {
    let args = s.open_args(share::ACCESS_READ, None, OpenClaim::Fh);
    let rep = s.run(Compound::new().putfh(fh).open(args)).await.unwrap();
    match rep.first_error() {
        (_, NfsStat::OK) => Ok(OpenFile {
            fh: fh.to_vec(),
            stateid: rep.open().unwrap().stateid,
        }),
        (_, st) => Err(st),
    }
}

async fn owner_of(s: &Session, fh: &[u8]) -> (String, String) {
    let a = s
        .getattr_fh(fh, bitmap(&[attr::OWNER, attr::OWNER_GROUP]))
        .await
        .unwrap();
    let id = |v: Option<Vec<u8>>| {
        let s = String::from_utf8_lossy(&v.unwrap_or_default()).into_owned();
        s.split('@').next().unwrap_or_default().to_string()
    };
    (id(a.owner), id(a.owner_group))
}

#[tokio::test]
async fn each_client_rule_from_its_own_host() {
    let srv = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(RULES.to_string()),
        ..ServerOptions::default()
    })
    .unwrap();
    // 127.0.0.1, no_root_squash: root sets up a public directory and a file with a layout.
    let admin = from(&srv, "127.0.0.1", sys(0, 0)).await;
    let root = admin.lookup_path("").await.unwrap();
    let public = admin.mkdir(&root, "pub", 0o777).await.unwrap();
    let f = admin.create_file(&root, "f", 0o644).await.unwrap();
    admin
        .write_all(&f, 0, b"hello", Stable::FileSync)
        .await
        .unwrap();
    assert_eq!(owner_of(&admin, &f.fh).await, ("0".into(), "0".into()));
    let st = admin.status(layoutget(&f.fh, f.stateid, iomode::RW)).await;
    assert_eq!(st.unwrap(), NfsStat::OK, "127.0.0.1 gets a layout");
    let types = admin
        .getattr_fh(&root, bitmap(&[attr::FS_LAYOUT_TYPES]))
        .await
        .unwrap();
    assert_eq!(types.fs_layout_types, Some(vec![layout_type::BLOCK_VOLUME]));

    // 127.0.0.2, ro: reads, no change (ROFS), no layout.
    let ro = from(&srv, "127.0.0.2", sys(1000, 1000)).await;
    let rf = open_read(&ro, &f.fh).await.unwrap();
    assert_eq!(ro.read_all(&rf, 0, 5).await.unwrap(), b"hello");
    let st = ro.status(Compound::new().putfh(&public).mkdir("x", 0o755));
    assert_eq!(st.await.unwrap(), NfsStat::ROFS, "mkdir on ro");
    let create = ro.create_args("new");
    let st = ro.status(Compound::new().putfh(&root).open(create)).await;
    assert_eq!(st.unwrap(), NfsStat::ROFS, "OPEN create on ro");
    assert_eq!(open_read(&ro, &public).await.unwrap_err(), NfsStat::ISDIR);
    let write = ro.open_args(share::ACCESS_BOTH, None, OpenClaim::Fh);
    let st = ro.status(Compound::new().putfh(&f.fh).open(write)).await;
    assert_eq!(st.unwrap(), NfsStat::ROFS, "OPEN for write on ro");
    let st = ro.status(layoutget(&f.fh, rf.stateid, iomode::READ)).await;
    assert_eq!(st.unwrap(), NfsStat::LAYOUTUNAVAILABLE, "layout on ro");

    // 127.0.0.3, root_squash by default: root is nobody, so the root directory (0755 root) is
    // closed to it and what it makes in the public one belongs to 65534.
    let squashed = from(&srv, "127.0.0.3", sys(0, 0)).await;
    let st = squashed.status(Compound::new().putfh(&root).mkdir("r", 0o755));
    assert_eq!(st.await.unwrap(), NfsStat::ACCESS, "squashed root in /");
    let d = squashed
        .mkdir(&public, "by-squashed-root", 0o755)
        .await
        .unwrap();
    assert_eq!(owner_of(&admin, &d).await, ("65534".into(), "65534".into()));

    // 127.0.0.4, all_squash with anon ids: anyone is 1234:4321.
    let all = from(&srv, "127.0.0.4", sys(1000, 1000)).await;
    let d = all.mkdir(&public, "by-all-squash", 0o755).await.unwrap();
    assert_eq!(owner_of(&admin, &d).await, ("1234".into(), "4321".into()));

    // 127.0.0.5, pnfs = false: no layout type offered, LAYOUTGET unavailable.
    let nopnfs = from(&srv, "127.0.0.5", sys(0, 0)).await;
    let types = nopnfs
        .getattr_fh(&root, bitmap(&[attr::FS_LAYOUT_TYPES]))
        .await
        .unwrap();
    assert_eq!(types.fs_layout_types, Some(vec![]));
    let nf = open_read(&nopnfs, &f.fh).await.unwrap();
    let st = nopnfs
        .status(layoutget(&f.fh, nf.stateid, iomode::READ))
        .await;
    assert_eq!(st.unwrap(), NfsStat::LAYOUTUNAVAILABLE, "pnfs = false");

    // AUTH_NONE: off unless the rule's sec lists it (WRONGSEC, as knfsd).
    let anon = from(&srv, "127.0.0.1", Cred::None).await;
    let st = anon.status(Compound::new().putrootfh().getfh()).await;
    assert_eq!(
        st.unwrap(),
        NfsStat::WRONGSEC,
        "AUTH_NONE on sec = [\"sys\"]"
    );
    let anon6 = from(&srv, "127.0.0.6", Cred::None).await;
    let st = anon6.status(Compound::new().putrootfh().getfh()).await;
    assert_eq!(
        st.unwrap(),
        NfsStat::OK,
        "AUTH_NONE on sec = [\"sys\", \"none\"]"
    );

    // 127.0.1.7 is in the ro network 127.0.1.0/24.
    let net = from(&srv, "127.0.1.7", sys(1000, 1000)).await;
    let st = net.status(Compound::new().putrootfh().getfh()).await;
    assert_eq!(st.unwrap(), NfsStat::OK, "127.0.1.0/24");
    let st = net.status(Compound::new().putfh(&public).mkdir("y", 0o755));
    assert_eq!(st.await.unwrap(), NfsStat::ROFS, "127.0.1.0/24 is ro");

    // 127.0.0.9 is in no rule: ACCESS on the namespace, and never a layout.
    let outsider = from(&srv, "127.0.0.9", sys(0, 0)).await;
    let st = outsider.status(Compound::new().putrootfh().getfh()).await;
    assert_eq!(st.unwrap(), NfsStat::ACCESS, "outside every rule");
    let st = outsider
        .status(layoutget(&f.fh, f.stateid, iomode::RW))
        .await;
    assert_eq!(st.unwrap(), NfsStat::ACCESS, "no layout outside every rule");
}

/// Waits until the server's log has `what` (after a SIGHUP).
fn wait_log(srv: &PnfsdProcess, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !srv.log_text().contains(what) {
        assert!(
            Instant::now() < deadline,
            "no {what:?} in:\n{}",
            srv.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// SIGHUP puts new client rules in force, logs them, and names what
/// needs a restart.
#[tokio::test]
async fn sighup_reloads_the_client_rules() {
    let only_here = "[[exports]]\n[[exports.clients]]\nhosts = [\"127.0.0.1\"]\n";
    let srv = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(only_here.to_string()),
        ..ServerOptions::default()
    })
    .unwrap();
    let outsider = from(&srv, "127.0.0.9", sys(1000, 1000)).await;
    let st = outsider.status(Compound::new().putrootfh().getfh()).await;
    assert_eq!(st.unwrap(), NfsStat::ACCESS);

    let file = srv.data_dir().parent().unwrap().join("pnfsd.toml");
    let any_ro = format!(
        "lease_seconds = 60\n{only_here}[[exports.clients]]\nhosts = [\"*\"]\naccess = \"ro\"\n"
    );
    std::fs::write(&file, any_ro).unwrap();
    let pid = srv.pid().unwrap();
    sys::signal(pid, sys::SIGHUP).unwrap();
    wait_log(&srv, "SIGHUP: exports: rule added: / * ro");
    wait_log(&srv, "applied only after a restart: lease_seconds");
    // The same session: the next COMPOUND sees the new rules.
    let st = outsider.status(Compound::new().putrootfh().getfh()).await;
    assert_eq!(st.unwrap(), NfsStat::OK, "admitted after SIGHUP");
    let root = outsider.lookup_path("").await.unwrap();
    let st = outsider.status(Compound::new().putfh(&root).mkdir("z", 0o777));
    assert_eq!(st.await.unwrap(), NfsStat::ROFS);

    // A rule that does not compile leaves the running ones in force.
    std::fs::write(
        &file,
        "[[exports]]\n[[exports.clients]]\nhosts = [\"10.0.0.0/99\"]\n",
    )
    .unwrap();
    sys::signal(pid, sys::SIGHUP).unwrap();
    wait_log(&srv, "the running configuration stays");
    let st = outsider.status(Compound::new().putrootfh().getfh()).await;
    assert_eq!(st.unwrap(), NfsStat::OK, "still admitted");
}
