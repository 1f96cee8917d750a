//! A block-layout client across a restart of the MDS (RFC 8881 §12.7.4, §18.42.3;
//! docs/pnfs.md "After a restart"). The client wrote through an RW layout onto the volume and
//! the server died before the LAYOUTCOMMIT. After the restart:
//! - a reclaiming LAYOUTCOMMIT during grace converts what it wrote (blocks the file owns);
//! - the Linux client never sets `loca_reclaim`: it re-sends its LAYOUTCOMMIT with the old
//!   layout stateid once its recovery is done (after RECLAIM_COMPLETE). That commit is taken
//!   as a reclaim while the previous instance's layouts may still commit, and is BADLAYOUT
//!   after (today's STALE_STATEID kept the Linux client retrying it forever);
//! - non-reclaim LAYOUTCOMMITs and LAYOUTGETs wait for the grace period (GRACE);
//! - a LAYOUTGET with the old layout stateid is BAD_STATEID, and one with an open stateid of
//!   this instance gets a new layout;
//! - a previous-instance commit never converts blocks under another client's new layout.

use std::time::Duration;

use client_tests::fs::OpenFile;
use client_tests::harness::pattern;
use client_tests::layout_io::{write_through_extents, BlockLayout};
use client_tests::ops::{share, Op, OpenClaim};
use client_tests::pnfs::{extent_state, iomode, layout_type, BlockExtent, LayoutCommitArgs};
use client_tests::{
    Compound, NfsStat, PnfsdProcess, ServerOptions, Session, SessionOptions, Stateid,
};

const LEN: u64 = 256 << 10;

fn server(grace_seconds: u32) -> PnfsdProcess {
    PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(format!(
            "volume_size = \"1G\"\ngrace_seconds = {grace_seconds}\nlease_seconds = 10\n"
        )),
        ..Default::default()
    })
    .unwrap()
}

/// What the client had when the server died.
struct Before {
    opts: SessionOptions,
    f: OpenFile,
    layout: BlockLayout,
    data: Vec<u8>,
}

/// A new file, an RW layout of `[0, LEN)`, the data written onto the volume through it and
/// flushed (a client's fsync before its LAYOUTCOMMIT); then the server stops by `stop`
/// before any LAYOUTCOMMIT and starts again on the same data.
async fn written_then_restart(srv: &mut PnfsdProcess, stop: fn(&mut PnfsdProcess)) -> Before {
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    let layout = s.layoutget(&f, iomode::RW, 0, LEN).await.unwrap();
    assert!(layout
        .extents
        .iter()
        .all(|e| e.state == extent_state::INVALID_DATA));
    let data = pattern(81, LEN as usize);
    let vol = std::fs::OpenOptions::new()
        .write(true)
        .open(srv.data_dir().join("volume.img"))
        .unwrap();
    write_through_extents(&vol, &layout.extents, 0, &data).unwrap();
    vol.sync_data().unwrap();
    let opts = s.options.clone();
    drop(s);
    stop(srv);
    srv.restart().unwrap();
    Before {
        opts,
        f,
        layout,
        data,
    }
}

fn sigkill(srv: &mut PnfsdProcess) {
    srv.kill().unwrap();
}

fn sigterm(srv: &mut PnfsdProcess) {
    assert!(srv.terminate().unwrap().success());
}

/// The LAYOUTCOMMIT the Linux block client sends for `[0, LEN)`: one extent, storage offset
/// 0 (it tracks file ranges only), last byte written LEN - 1.
async fn commit(
    s: &Session,
    b: &Before,
    stateid: Stateid,
    reclaim: bool,
) -> (NfsStat, Option<u64>) {
    let e = BlockExtent {
        file_offset: 0,
        length: LEN,
        storage_offset: 0,
        state: extent_state::READ_WRITE_DATA,
        ..b.layout.extents[0]
    };
    let args = LayoutCommitArgs {
        offset: 0,
        length: LEN,
        reclaim,
        stateid,
        last_write_offset: Some(LEN - 1),
        time_modify: None,
        layout_type: layout_type::BLOCK_VOLUME,
        body: BlockExtent::encode_list(&[e]),
    };
    let rep = s
        .run(Compound::new().putfh(&b.f.fh).op(Op::LayoutCommit(args)))
        .await
        .unwrap();
    let size = if rep.status == NfsStat::OK {
        rep.layoutcommit().unwrap()
    } else {
        None
    };
    (rep.status, size)
}

/// LAYOUTGET RW of `[0, LEN)` presenting `stateid`: its status.
async fn layoutget_status(s: &Session, fh: &[u8], stateid: Stateid) -> NfsStat {
    let args = client_tests::pnfs::LayoutGetArgs {
        signal_avail: false,
        layout_type: layout_type::BLOCK_VOLUME,
        iomode: iomode::RW,
        offset: 0,
        length: LEN,
        minlength: 4096,
        stateid,
        maxcount: 64 << 10,
    };
    s.run(Compound::new().putfh(fh).op(Op::LayoutGet(args)))
        .await
        .unwrap()
        .status
}

/// The file's bytes as the server serves them (READ with the anonymous stateid).
async fn served(s: &Session, b: &Before) -> Vec<u8> {
    let anon = OpenFile {
        fh: b.f.fh.clone(),
        stateid: Stateid::ANONYMOUS,
    };
    s.read_all(&anon, 0, LEN as usize).await.unwrap()
}

/// The Linux client's case: its recovery (new client ID, open reclaims, RECLAIM_COMPLETE,
/// which ends the grace period early) comes first, then the LAYOUTCOMMIT it had in flight,
/// with reclaim = false and the previous instance's layout stateid. It converts the data,
/// after SIGKILL and after SIGTERM alike, and the same commit sent again is still OK.
#[tokio::test]
async fn previous_instance_layoutcommit_after_reclaim_complete_converts_the_data() {
    for stop in [sigkill, sigterm] {
        let mut srv = server(60);
        let b = written_then_restart(&mut srv, stop).await;
        let s = Session::connect_with(srv.addr(), b.opts.clone())
            .await
            .unwrap();
        let (st, size) = commit(&s, &b, b.layout.stateid, false).await;
        assert_eq!(
            st,
            NfsStat::OK,
            "the in-flight LAYOUTCOMMIT after the restart"
        );
        assert_eq!(size, Some(LEN));
        assert!(served(&s, &b).await == b.data, "the committed data");
        assert_eq!(commit(&s, &b, b.layout.stateid, false).await.0, NfsStat::OK);
    }
}

/// Once the previous instance's layouts may no longer commit (grace_seconds after the start),
/// its layout stateid is BADLAYOUT on LAYOUTCOMMIT (the Linux client then ends the call; its
/// layout is already gone) and BAD_STATEID on LAYOUTGET (it drops the stateid and asks with
/// its open stateid); the open stateid of this instance gets a new layout. Nothing was
/// converted: the range reads as zeros.
#[tokio::test]
async fn previous_instance_layout_after_the_window_is_dropped_and_asked_again() {
    let mut srv = server(2);
    let b = written_then_restart(&mut srv, sigkill).await;
    let s = Session::connect_with(srv.addr(), b.opts.clone())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (st, _) = commit(&s, &b, b.layout.stateid, false).await;
    assert_eq!(
        st,
        NfsStat::BADLAYOUT,
        "old layout stateid after the window"
    );
    assert_eq!(
        layoutget_status(&s, &b.f.fh, b.layout.stateid).await,
        NfsStat::BAD_STATEID,
        "LAYOUTGET with the old layout stateid"
    );
    let of = s.open_fh(&b.f.fh).await.unwrap();
    let l = s.layoutget(&of, iomode::RW, 0, LEN).await.unwrap();
    assert_eq!(l.stateid.seqid, 1, "a new layout");
    assert!(served(&s, &b).await.iter().all(|x| *x == 0));
}

/// RFC 8881 §18.42.3 as written: during grace, before the client's RECLAIM_COMPLETE, a
/// LAYOUTCOMMIT with `loca_reclaim` converts what the client wrote; a LAYOUTGET and a
/// non-reclaim LAYOUTCOMMIT with a stateid of this instance answer GRACE; after
/// RECLAIM_COMPLETE a reclaim is NO_GRACE.
#[tokio::test]
async fn reclaim_layoutcommit_in_grace_converts_and_the_rest_waits_for_grace() {
    let mut srv = server(300);
    let b = written_then_restart(&mut srv, sigkill).await;
    let mut o = b.opts.clone();
    o.reclaim_complete = false;
    let s = Session::connect_with(srv.addr(), o).await.unwrap();
    let rargs = s.open_args(share::ACCESS_BOTH, None, OpenClaim::Previous(0));
    let rep = s
        .run_ok(Compound::new().putfh(&b.f.fh).open(rargs))
        .await
        .unwrap();
    let reclaimed = rep.open().unwrap().stateid;
    assert_eq!(
        layoutget_status(&s, &b.f.fh, reclaimed).await,
        NfsStat::GRACE,
        "LAYOUTGET in grace"
    );
    assert_eq!(
        commit(&s, &b, reclaimed, false).await.0,
        NfsStat::GRACE,
        "non-reclaim LAYOUTCOMMIT with a stateid of this instance in grace"
    );
    let (st, size) = commit(&s, &b, b.layout.stateid, true).await;
    assert_eq!(st, NfsStat::OK, "reclaiming LAYOUTCOMMIT in grace");
    assert_eq!(size, Some(LEN));
    s.run_ok(Compound::new().op(Op::ReclaimComplete { one_fs: false }))
        .await
        .unwrap();
    assert!(served(&s, &b).await == b.data, "the reclaimed data");
    assert_eq!(
        commit(&s, &b, b.layout.stateid, true).await.0,
        NfsStat::NO_GRACE,
        "reclaim after RECLAIM_COMPLETE"
    );
}

/// After grace another client may get an RW layout of the same range: the first client's
/// previous-instance commit must then not convert those blocks (BADLAYOUT) — the new holder
/// may be writing them.
#[tokio::test]
async fn previous_instance_layoutcommit_never_converts_under_another_clients_layout() {
    let mut srv = server(60);
    let b = written_then_restart(&mut srv, sigkill).await;
    let a = Session::connect_with(srv.addr(), b.opts.clone())
        .await
        .unwrap();
    let c = Session::connect(srv.addr()).await.unwrap();
    let of = c.open_fh(&b.f.fh).await.unwrap();
    c.layoutget(&of, iomode::RW, 0, LEN).await.unwrap();
    assert_eq!(
        commit(&a, &b, b.layout.stateid, false).await.0,
        NfsStat::BADLAYOUT
    );
    assert!(served(&a, &b).await.iter().all(|x| *x == 0));
}
