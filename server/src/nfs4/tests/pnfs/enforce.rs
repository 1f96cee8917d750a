//! The embedded target enforces the layouts (docs/pnfs.md "The target enforces the layouts"), over
//! real NVMe/TCP with our initiator: the NFS clients come from 127.0.0.`conn id`, their NVMe hosts
//! bind the same source address, and the namespace is the fixture's own volume (nvme.rs
//! `target_config`), so the LBAs LAYOUTGET's extents name are the ones the hosts write.

use super::*;
use crate::config::Config;
use crate::nfs4::layouts::hosts::PROBE_LBAS;
use bytes::Bytes;
use metalog::BlockDev;
use nvme_tcp::{Initiator, InitiatorConfig, Status, Target};

const NSID: u32 = crate::nvme::NSID;
const LBA: u64 = layout::LBA_SIZE as u64;

/// The embedded target over the fixture's volume as `pnfsd serve` wires it (the MDS guard,
/// `gate_hosts`, `install_fencing`), with `cfg`'s NVMe keys.
async fn target_on(fx: &Fx, cfg: Config) -> Target {
    let dev: Arc<dyn BlockDev> = fx.dev.clone();
    let mut tc = crate::daemon::nvme::target_config(&cfg, dev, fx.srv.store.volume_uuid());
    crate::nvme::guard_mds_blocks(&mut tc, &fx.srv.store.superblock().geometry);
    crate::daemon::nvme::gate_hosts(&mut tc, &fx.srv, &cfg);
    let t = crate::nvme::bind("127.0.0.1:0".parse().unwrap(), tc)
        .await
        .unwrap();
    crate::daemon::nvme::install_fencing(&fx.srv, &t, &cfg);
    drop(t.spawn());
    t
}

fn cfg_in(dir: &std::path::Path) -> Config {
    Config {
        data_dir: dir.to_path_buf(),
        ..Config::default()
    }
}

/// An NVMe host named `name` connecting from `ip`.
async fn host(t: &Target, name: &str, ip: &str) -> Initiator {
    let mut c = InitiatorConfig::new(t.subsystem_nqn(), nqn(name));
    c.source = Some(ip.parse().unwrap());
    c.kato_ms = 0;
    Initiator::connect(t.local_addr(), c).await.unwrap()
}

fn nqn(name: &str) -> String {
    format!("nqn.2014-08.org.example:{name}")
}

async fn write(i: &Initiator, lba: u64) -> Result<(), nvme_tcp::Error> {
    i.write(
        NSID,
        lba,
        Bytes::from(vec![0x5a; LBA as usize]),
        LBA as u32,
        false,
    )
    .await
}

async fn read(i: &Initiator, lba: u64) -> Result<(), nvme_tcp::Error> {
    i.read(NSID, lba, 1, LBA as u32).await.map(|_| ())
}

fn denied(r: Result<(), nvme_tcp::Error>) -> bool {
    matches!(r, Err(nvme_tcp::Error::Status(s)) if s == Status::ACCESS_DENIED)
}

/// The volume LBA behind byte `off` of the file, as the layout `g` says.
fn lba_of(g: &Got, off: u64) -> u64 {
    let e = g
        .extents
        .iter()
        .find(|e| e.file_offset <= off && off < e.file_offset + e.length)
        .unwrap();
    (e.storage_offset + off - e.file_offset) / LBA
}

/// Whether some extent of the layouts names `lba`.
fn in_layouts(gs: &[&Got], lba: u64) -> bool {
    gs.iter().flat_map(|g| &g.extents).any(|e| {
        e.state != ExtentState::NONE_DATA
            && (e.storage_offset / LBA..(e.storage_offset + e.length) / LBA).contains(&lba)
    })
}

/// The namespace's size in LBAs.
fn lbas(fx: &Fx) -> u64 {
    fx.dev.size() / LBA
}

/// Outside the probe windows at both ends (where any host may read, hosts.rs PROBE_LBAS).
fn mid(fx: &Fx, lba: u64) -> bool {
    lba >= PROBE_LBAS && lba < lbas(fx) - PROBE_LBAS
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_write_only_their_clients_rw_layouts_and_read_only_their_layouts() {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture(NfsOptions::default());
    let t = target_on(&fx, cfg_in(dir.path())).await;
    let (ca, cb) = (conn(2, None), conn(3, None));
    let (mut a, mut b) = (ctx(&fx.srv, &ca), ctx(&fx.srv, &cb));
    mount_v(&mut a, b"a", [1; 8]);
    mount_v(&mut b, b"b", [1; 8]);
    let (_, sa) = create(&mut a, b"fa");
    let ga = get(&mut a, IoMode::RW.0, 0, 2 * B, sa).unwrap();
    // B's file is large, so that some of its blocks lie outside the probe windows.
    let (_, sb) = create(&mut b, b"fb");
    let gb = get(&mut b, IoMode::RW.0, 0, 4 << 20, sb).unwrap();
    let ha = host(&t, "a", "127.0.0.2").await;
    let hb = host(&t, "b", "127.0.0.3").await;
    let a0 = lba_of(&ga, 0);
    let b_mid = lba_of(&gb, 3 << 20);
    assert!(mid(&fx, b_mid), "{b_mid}");

    // Inside its client's RW layout: written and read back.
    write(&ha, a0).await.unwrap();
    write(&ha, lba_of(&ga, B)).await.unwrap();
    read(&ha, a0).await.unwrap();
    write(&hb, b_mid).await.unwrap();
    // A write spanning A's last block and the next one is refused whole.
    let two = Bytes::from(vec![1u8; 2 * LBA as usize]);
    let last = ga.extents.last().unwrap();
    let a_end = (last.storage_offset + last.length) / LBA;
    assert!(!in_layouts(&[&ga], a_end));
    assert!(denied(
        ha.write(NSID, a_end - 1, two, LBA as u32, false).await
    ));
    // Into another client's layout: refused, both ways; and into a block no layout names.
    assert!(denied(write(&ha, b_mid).await));
    assert!(denied(read(&ha, b_mid).await));
    let nobody = (lbas(&fx) / 2..lbas(&fx))
        .find(|l| mid(&fx, *l) && !in_layouts(&[&ga, &gb], *l))
        .unwrap();
    assert!(denied(write(&hb, nobody).await));
    assert!(denied(read(&hb, nobody).await));
    assert!(denied(hb.write_zeroes(NSID, nobody, 1).await));
    assert!(denied(hb.deallocate(NSID, &[(nobody, 1)]).await));
    // The signature's block reads (GETDEVICEINFO's signature check).
    let (sig_off, _) = fx.srv.store.superblock().signature();
    read(&ha, sig_off / LBA).await.unwrap();
    let m = fx.srv.layouts.hosts.metrics.snapshot();
    assert_eq!((m.writes_refused, m.reads_refused), (5, 2), "{m:?}");

    // After LAYOUTRETURN, A's host may no longer write or read its old blocks.
    let st = call(
        &mut a,
        layoutreturn::run,
        &return_args(IoMode::ANY.0, 1, Some((0, u64::MAX, ga.stateid))),
    )
    .0;
    assert_eq!(st, NfsStat::OK);
    assert!(denied(write(&ha, a0).await));
    if mid(&fx, a0) {
        assert!(denied(read(&ha, a0).await));
    }
    // B returns its RW layout: its host's writes there are refused too.
    let st = call(
        &mut b,
        layoutreturn::run,
        &return_args(IoMode::RW.0, 1, Some((0, u64::MAX, gb.stateid))),
    )
    .0;
    assert_eq!(st, NfsStat::OK);
    assert!(denied(write(&hb, b_mid).await));
    t.shutdown();
}

/// With `nvme_enforce_layouts = false` the same out-of-layout write goes through, and the
/// MDS's blocks stay guarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforcement_off_lets_the_out_of_layout_write_through() {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture(NfsOptions::default());
    let cfg = Config {
        nvme_enforce_layouts: false,
        ..cfg_in(dir.path())
    };
    let t = target_on(&fx, cfg).await;
    let ca = conn(2, None);
    let mut a = ctx(&fx.srv, &ca);
    mount_v(&mut a, b"a", [1; 8]);
    let (_, sa) = create(&mut a, b"fa");
    get(&mut a, IoMode::RW.0, 0, B, sa).unwrap();
    let ha = host(&t, "a", "127.0.0.2").await;
    write(&ha, lbas(&fx) / 2 + 7).await.unwrap();
    assert!(denied(write(&ha, 0).await));
    let m = fx.srv.layouts.hosts.metrics.snapshot();
    assert_eq!(m.writes_refused, 0);
    t.shutdown();
}

/// The first B+tree node block the volume holds in its data area (found by its magic).
fn a_tree_node(fx: &Fx) -> u64 {
    let g = fx.srv.store.superblock().geometry;
    let bs = u64::from(layout::BLOCK_SIZE);
    let mut buf = vec![0u8; bs as usize];
    (g.data_start..g.total_blocks)
        .find(|b| {
            fx.dev.read_at(&mut buf, b * bs).unwrap();
            &buf[..4] == b"PNBT"
        })
        .map(|b| b * bs / LBA)
        .expect("a tree node")
}

/// Hosts of no NFS client: one not in `nvme_admin_hosts` writes nothing (not a tree node,
/// not the superblock, not a data block) and still reads; an admin host writes data blocks
/// but not the MDS's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_of_no_client_only_read_unless_admin_and_never_the_mds_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture(NfsOptions::default());
    // Some metadata on disk: files, then a write-back of the tree.
    let mut x = fx.client();
    mount(&mut x, b"a");
    for i in 0..20u32 {
        create(&mut x, format!("f{i}").as_bytes());
    }
    fx.srv.store.write_back().unwrap();
    let node = a_tree_node(&fx);
    let cfg = Config {
        nvme_admin_hosts: vec![nqn("admin")],
        ..cfg_in(dir.path())
    };
    let t = target_on(&fx, cfg).await;
    let stray = host(&t, "stray", "127.0.0.9").await;
    let admin = host(&t, "admin", "127.0.0.8").await;
    let data = lbas(&fx) / 2 + 7;
    assert!(denied(write(&stray, node).await));
    assert!(denied(write(&stray, 0).await));
    assert!(denied(write(&stray, data).await));
    read(&stray, data).await.unwrap();
    write(&admin, data).await.unwrap();
    read(&admin, node).await.unwrap();
    assert!(denied(write(&admin, 0).await));
    let lba = |b: u64| b * u64::from(layout::BLOCK_SIZE) / LBA;
    let g = fx.srv.store.superblock().geometry;
    assert!(denied(write(&admin, lba(g.log_start)).await));
    // The tree is intact: the store still reads every file.
    for i in 0..20u32 {
        let name = format!("f{i}");
        fx.srv.store.lookup(ROOT_INO, name.as_bytes()).unwrap();
    }
    t.shutdown();
}
