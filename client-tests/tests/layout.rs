//! The block-layout round trip, with real layout I/O on the volume
//! file: LAYOUTGET RW → write straight into the volume → LAYOUTCOMMIT → READ through the
//! server; durability across SIGKILL; never stale bytes after a crash before LAYOUTCOMMIT.
//!
//! After a restart the same client comes back (same owner) and sends RECLAIM_COMPLETE, which
//! ends the grace period, as in `restart.rs`.

use std::os::unix::fs::FileExt;
use std::time::Duration;

use client_tests::attrs::{attr, basic, bitmap, SetAttrs};
use client_tests::harness::pattern;
use client_tests::layout_io::{
    read_through_extents, reread_after_restart, write_through_extents, BlockLayout,
};
use client_tests::pnfs::{extent_state, iomode, BlockVolume};
use client_tests::{Compound, NfsStat, PnfsdProcess, ServerOptions, Session, Stateid};

const BLOCK: u64 = 4096;
const LEN: u64 = 1 << 20;

fn server() -> PnfsdProcess {
    // A short grace period: after a restart the test opens files again (RFC 8881 §8.4.2).
    PnfsdProcess::start_with(ServerOptions {
        config_toml: Some("volume_size = \"1G\"\ngrace_seconds = 2\nlease_seconds = 10\n".into()),
        ..Default::default()
    })
    .unwrap()
}

fn volume(srv: &PnfsdProcess) -> std::fs::File {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(srv.data_dir().join("volume.img"))
        .unwrap()
}

fn check_layout(l: &BlockLayout, offset: u64, state: u32) {
    assert!(!l.extents.is_empty());
    let mut at = offset;
    for e in &l.extents {
        assert_eq!(
            e.file_offset, at,
            "extents must be contiguous: {:?}",
            l.extents
        );
        assert_eq!(e.file_offset % BLOCK, 0);
        assert_eq!(e.length % BLOCK, 0);
        assert_eq!(e.storage_offset % BLOCK, 0);
        assert_eq!(e.state, state, "{e:?}");
        at += e.length;
    }
}

#[tokio::test]
async fn layout_write_commit_read_and_survive_sigkill() {
    let mut srv = server();
    let s = Session::connect(srv.addr()).await.unwrap();
    let opts = s.options.clone();
    let root = s.lookup_path("").await.unwrap();
    let a = s
        .getattr_fh(
            &root,
            bitmap(&[attr::FS_LAYOUT_TYPES, attr::LAYOUT_BLKSIZE]),
        )
        .await
        .unwrap();
    assert_eq!(a.layout_blksize, Some(BLOCK as u32));

    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    let l = s.layoutget(&f, iomode::RW, 0, LEN).await.unwrap();
    check_layout(&l, 0, extent_state::INVALID_DATA);
    assert_eq!(l.stateid.seqid, 1, "first LAYOUTGET answers seqid 1");

    // The device: one SIMPLE volume whose signature is on the volume file.
    let vol = volume(&srv);
    let vols = s.block_deviceinfo(l.extents[0].deviceid).await.unwrap();
    match &vols[..] {
        [BlockVolume::Simple(sig)] => {
            for (off, bytes) in sig {
                let mut b = vec![0u8; bytes.len()];
                vol.read_exact_at(&mut b, *off as u64).unwrap();
                assert_eq!(&b, bytes, "signature at {off} does not match the volume");
            }
        }
        v => panic!("expected one SIMPLE volume: {v:?}"),
    }

    let data = pattern(20, LEN as usize);
    write_through_extents(&vol, &l.extents, 0, &data).unwrap();
    vol.sync_data().unwrap();
    let newsize = s.layoutcommit_all(&f, &l, LEN - 1).await.unwrap();
    assert_eq!(newsize, Some(LEN));
    assert_eq!(s.getattr_fh(&f.fh, basic()).await.unwrap().size, Some(LEN));
    assert!(
        s.read_all(&f, 0, LEN as usize).await.unwrap() == data,
        "READ after LAYOUTCOMMIT differs"
    );
    let extents_before = l.extents.clone();

    let s = srv.sigkill_and_reconnect(&opts).await.unwrap();
    let l = reread_after_restart(&s, "f", &data).await;
    check_layout(&l, 0, extent_state::READ_DATA);
    let vol = volume(&srv);
    assert!(read_through_extents(&vol, &l.extents, 0, LEN as usize).unwrap() == data);
    let mapped: Vec<(u64, u64)> = l
        .extents
        .iter()
        .map(|e| (e.file_offset, e.storage_offset))
        .collect();
    let mapped_before: Vec<(u64, u64)> = extents_before
        .iter()
        .map(|e| (e.file_offset, e.storage_offset))
        .collect();
    assert_eq!(mapped, mapped_before, "extents moved across the restart");
}

#[tokio::test]
async fn sigkill_before_layoutcommit_reads_zeros_never_stale_bytes() {
    let mut srv = server();
    let s = Session::connect(srv.addr()).await.unwrap();
    let opts = s.options.clone();
    let root = s.lookup_path("").await.unwrap();
    // A file with data, then removed: its blocks go back to the free space.
    let old = s.create_file(&root, "old", 0o644).await.unwrap();
    s.write_all(
        &old,
        0,
        &pattern(30, LEN as usize),
        client_tests::ops::Stable::FileSync,
    )
    .await
    .unwrap();
    s.close_file(&old).await.unwrap();
    s.run_ok(Compound::new().putfh(&root).remove("old"))
        .await
        .unwrap();

    let g = s.create_file(&root, "g", 0o644).await.unwrap();
    s.run_ok(
        Compound::new()
            .putfh(&g.fh)
            .setattr(g.stateid, SetAttrs::size(LEN)),
    )
    .await
    .unwrap();
    let l = s.layoutget(&g, iomode::RW, 0, LEN).await.unwrap();
    check_layout(&l, 0, extent_state::INVALID_DATA);
    let vol = volume(&srv);
    write_through_extents(&vol, &l.extents, 0, &pattern(31, LEN as usize)).unwrap();
    vol.sync_data().unwrap();
    // Crash before LAYOUTCOMMIT: the written blocks never became part of the file.
    let s = srv.sigkill_and_reconnect(&opts).await.unwrap();
    let fh = s.lookup_path("g").await.unwrap();
    assert_eq!(s.getattr_fh(&fh, basic()).await.unwrap().size, Some(LEN));
    let anon = client_tests::fs::OpenFile {
        fh,
        stateid: Stateid::ANONYMOUS,
    };
    let back = s.read_all(&anon, 0, LEN as usize).await.unwrap();
    assert_eq!(back.len(), LEN as usize);
    assert!(
        back.iter().all(|b| *b == 0),
        "uncommitted range must read as zeros"
    );
}

/// CB_LAYOUTRECALL over the backchannel (docs/design.md §5): another client's SETATTR
/// truncate of a file with a layout is answered DELAY while the server recalls the layout
/// from the holder; once the holder returns it, the truncate goes through.
#[tokio::test]
async fn truncate_recalls_the_layout_over_the_backchannel() {
    use client_tests::callback::{CbEvent, RecallWhat};
    let srv = server();
    let a = Session::connect(srv.addr()).await.unwrap();
    let b = Session::connect(srv.addr()).await.unwrap();
    let root = a.lookup_path("").await.unwrap();
    let f = a.create_file(&root, "recalled", 0o666).await.unwrap();
    let l = a.layoutget(&f, iomode::RW, 0, LEN).await.unwrap();
    let vol = volume(&srv);
    write_through_extents(&vol, &l.extents, 0, &pattern(60, LEN as usize)).unwrap();
    vol.sync_data().unwrap();
    a.layoutcommit_all(&f, &l, LEN - 1).await.unwrap();

    let truncate = Compound::new()
        .putfh(&f.fh)
        .setattr(Stateid::ANONYMOUS, SetAttrs::size(4096));
    let st = b.run(truncate.clone()).await.unwrap().status;
    assert_eq!(
        st,
        NfsStat::DELAY,
        "truncate while a layout is out → {}",
        st.name()
    );
    let ev = a
        .conn
        .callbacks
        .wait_for(Duration::from_secs(10), |e| {
            matches!(e, CbEvent::LayoutRecall { .. })
        })
        .await
        .expect("no CB_LAYOUTRECALL arrived on the holder's backchannel");
    match ev {
        CbEvent::LayoutRecall {
            layout_type: 3,
            what: RecallWhat::File { fh, .. },
            ..
        } => assert_eq!(fh, f.fh),
        e => panic!("unexpected recall {e:?}"),
    }
    // The CB_COMPOUND began with CB_SEQUENCE on the holder's session (RFC 8881 §20.9).
    let seq = a.conn.callbacks.drain();
    assert!(
        seq.iter()
            .any(|e| matches!(e, CbEvent::Sequence { sessionid, .. } if *sessionid == a.sessionid)),
        "CB_SEQUENCE names the holder's session: {seq:?}"
    );
    a.layoutreturn_file(&f, l.stateid).await.unwrap();
    let mut st = NfsStat::DELAY;
    for _ in 0..100 {
        st = b.run(truncate.clone()).await.unwrap().status;
        if st != NfsStat::DELAY {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(st, NfsStat::OK, "truncate after LAYOUTRETURN");
    assert_eq!(b.getattr_fh(&f.fh, basic()).await.unwrap().size, Some(4096));
}

/// Speculative preallocation (docs/pnfs.md "Preallocation") across a SIGKILL: an RW
/// LAYOUTGET of 64 KiB on a new file hands out more (preallocated past EOF, unwritten); the
/// client writes all of it but commits 64 KiB; after a SIGKILL and restart the file keeps
/// only what was committed, the rest is trimmed once the grace period is over (the file's
/// space_used falls back), and growing the file over it reads zeros, never those bytes.
#[tokio::test]
async fn sigkill_with_preallocated_blocks_exposes_nothing_and_trims_after_grace() {
    const STEP: u64 = 64 << 10;
    let mut srv = server();
    let s = Session::connect(srv.addr()).await.unwrap();
    let opts = s.options.clone();
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "p", 0o644).await.unwrap();
    let l = s.layoutget(&f, iomode::RW, 0, STEP).await.unwrap();
    check_layout(&l, 0, extent_state::INVALID_DATA);
    let covered: u64 = l.extents.iter().map(|e| e.length).sum();
    assert!(
        covered > STEP,
        "a new file's RW layout preallocates: {covered}"
    );
    let vol = volume(&srv);
    write_through_extents(&vol, &l.extents, 0, &pattern(70, covered as usize)).unwrap();
    vol.sync_data().unwrap();
    let first = client_tests::pnfs::BlockExtent {
        length: STEP,
        ..l.extents[0]
    };
    let size = s
        .layoutcommit(&f, l.stateid, 0, STEP, STEP - 1, &[first])
        .await
        .unwrap();
    assert_eq!(size, Some(STEP));
    let used = |a: client_tests::attrs::Attrs| a.space_used.unwrap();
    let mask = bitmap(&[attr::SIZE, attr::SPACE_USED]);
    assert!(used(s.getattr_fh(&f.fh, mask.clone()).await.unwrap()) >= covered);

    let s = srv.sigkill_and_reconnect(&opts).await.unwrap();
    let fh = s.lookup_path("p").await.unwrap();
    let a = s.getattr_fh(&fh, mask.clone()).await.unwrap();
    assert_eq!(a.size, Some(STEP));
    // Once the grace period is over, the server's tick trims what lies past EOF.
    let mut now_used = used(a);
    for _ in 0..100 {
        if now_used == STEP {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        now_used = used(s.getattr_fh(&fh, mask.clone()).await.unwrap());
    }
    assert_eq!(now_used, STEP, "blocks past EOF not trimmed after grace");
    let anon = client_tests::fs::OpenFile {
        fh: fh.clone(),
        stateid: Stateid::ANONYMOUS,
    };
    s.run_ok(
        Compound::new()
            .putfh(&fh)
            .setattr(Stateid::ANONYMOUS, SetAttrs::size(covered)),
    )
    .await
    .unwrap();
    let back = s.read_all(&anon, 0, covered as usize).await.unwrap();
    assert_eq!(back.len() as u64, covered);
    assert!(back[..STEP as usize] == pattern(70, covered as usize)[..STEP as usize]);
    assert!(
        back[STEP as usize..].iter().all(|b| *b == 0),
        "uncommitted preallocated bytes exposed"
    );
}
