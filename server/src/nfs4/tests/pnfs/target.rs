//! Fencing at the embedded target without a fence command (docs/pnfs.md
//! "Fencing at the embedded target"): a block-layout client that ignores a recall, or whose
//! lease runs out, has its NVMe hosts disconnected and refused; a new instance of it, or the
//! same client once its state is gone, is served again; the fences survive a restart.
//! The NFS clients come from 127.0.0.`conn id`; their NVMe hosts (our initiator) bind the
//! same source address.

use super::fence::{expire_and_tick, fixture_clocked};
use super::*;
use crate::config::Config;
use bytes::Bytes;
use nvme_tcp::{Initiator, InitiatorConfig, MemBackend, NamespaceConfig, Target, TargetConfig};

/// The embedded target as `pnfsd serve` wires it (nvme.rs `gate_hosts`, `install_fencing`),
/// over a memory namespace, its state in `dir`.
async fn target_for(srv: &Server, dir: &std::path::Path) -> Target {
    let mem = Arc::new(MemBackend::new(1024, 4096));
    target_over(srv, dir, mem, nvme_tcp::Limits::default()).await
}

/// `target_for` over `backend`, with `limits`.
async fn target_over(
    srv: &Server,
    dir: &std::path::Path,
    backend: Arc<dyn nvme_tcp::Backend>,
    limits: nvme_tcp::Limits,
) -> Target {
    // These hosts write anywhere in the namespace: what is checked here is fencing; the
    // per-command layout check has its own tests (enforce.rs).
    let cfg = Config {
        data_dir: dir.to_path_buf(),
        nvme_enforce_layouts: false,
        ..Config::default()
    };
    let ns = NamespaceConfig {
        nsid: 1,
        backend,
        volume_uuid: [9; 16],
    };
    let mut tc = TargetConfig::new(cfg.nvme_nqn.clone(), vec![ns]);
    tc.limits = limits;
    crate::daemon::nvme::gate_hosts(&mut tc, srv, &cfg);
    let t = Target::bind("127.0.0.1:0", tc).await.unwrap();
    crate::daemon::nvme::install_fencing(srv, &t, &cfg);
    drop(t.spawn());
    t
}

/// An NVMe host named `name` connecting from `ip`.
async fn host(t: &Target, name: &str, ip: &str) -> Result<Initiator, nvme_tcp::Error> {
    let mut c = InitiatorConfig::new(t.subsystem_nqn(), format!("nqn.2014-08.org.example:{name}"));
    c.source = Some(ip.parse().unwrap());
    c.kato_ms = 0;
    Initiator::connect(t.local_addr(), c).await
}

async fn write(i: &Initiator, lba: u64) -> Result<(), nvme_tcp::Error> {
    i.write(1, lba, Bytes::from(vec![0x5a; 4096]), 4096, false)
        .await
}

fn refused(r: Result<Initiator, nvme_tcp::Error>) -> bool {
    matches!(r, Err(nvme_tcp::Error::ConnectRefused { status, .. }) if status == nvme_tcp::Status::CONNECT_INVALID_HOST)
}

/// Waits (a little) for the target to close a disconnected host's connection.
async fn closed(i: &Initiator) -> bool {
    for _ in 0..100 {
        if i.is_closed() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_ignoring_a_recall_is_cut_off_at_the_target_and_its_new_instance_served() {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture(NfsOptions::default());
    assert!(fx.srv.opts.fence_command.is_none());
    let t = target_for(&fx.srv, dir.path()).await;
    let (ca, cb) = (conn(2, None), conn(3, None));
    let (mut a, mut b) = (ctx(&fx.srv, &ca), ctx(&fx.srv, &cb));
    let id_a = mount_v(&mut a, b"a", [1; 8]);
    mount_v(&mut b, b"b", [1; 8]);
    let (_, sa) = create(&mut a, b"f");
    get(&mut a, IoMode::RW.0, 0, 2 * B, sa).unwrap();
    let ha = host(&t, "a", "127.0.0.2").await.unwrap();
    let hb = host(&t, "b", "127.0.0.3").await.unwrap();
    write(&ha, 100).await.unwrap();
    write(&hb, 101).await.unwrap();
    // B's LAYOUTGET conflicts: A is recalled, does not answer, and is fenced after two
    // leases — with no fence command, at the target.
    let (_, sb) = create(&mut b, b"f");
    assert_eq!(
        get(&mut b, IoMode::READ.0, 0, B, sb).err(),
        Some(NfsStat::RECALLCONFLICT)
    );
    let lease = Duration::from_secs(u64::from(fx.srv.opts.lease_seconds));
    let late = Instant::now() + 2 * lease + Duration::from_secs(1);
    recall::tick(&fx.srv.layouts_env(), late);
    let m = fx.srv.layouts.metrics.snapshot();
    assert_eq!(
        (m.fences, m.fences_without_mechanism, m.fences_failed),
        (1, 0, 0)
    );
    assert_eq!(fx.srv.layouts.hosts.metrics.snapshot().fences_disconnect, 1);
    // Its next NVMe write fails: the connection is gone, and so is any reconnect.
    assert!(closed(&ha).await);
    assert!(write(&ha, 102).await.is_err());
    assert!(refused(host(&t, "a", "127.0.0.2").await));
    assert!(fx.srv.layouts.hosts.metrics.snapshot().connects_refused >= 1);
    // B, at another address, is untouched.
    write(&hb, 103).await.unwrap();
    assert!(
        std::fs::read_to_string(dir.path().join(crate::nvme::FENCE_FILE))
            .unwrap()
            .starts_with("127.0.0.2 ")
    );
    // Ticks while A's state stands keep the fence.
    recall::tick(&fx.srv.layouts_env(), late + 2 * lease);
    assert!(refused(host(&t, "a", "127.0.0.2").await));
    // A reboots: a new verifier, a new instance, not fenced for its predecessor.
    let id_a2 = mount_v(&mut a, b"a", [2; 8]);
    assert_ne!(id_a, id_a2);
    assert!(fx.srv.state.client_identity(id_a).is_none());
    recall::tick(&fx.srv.layouts_env(), late + 2 * lease);
    let ha2 = host(&t, "a", "127.0.0.2").await.unwrap();
    write(&ha2, 104).await.unwrap();
    assert_eq!(fx.srv.layouts.hosts.fence_count(), 0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join(crate::nvme::FENCE_FILE)).unwrap(),
        ""
    );
    t.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_client_is_fenced_at_the_target_then_readmitted_once_cleaned_up() {
    let dir = tempfile::tempdir().unwrap();
    let (fx, clock) = fixture_clocked(NfsOptions::default());
    let t = target_for(&fx.srv, dir.path()).await;
    let c = conn(4, None);
    let mut x = ctx(&fx.srv, &c);
    mount_v(&mut x, b"c", [1; 8]);
    let (_, sid) = create(&mut x, b"f");
    get(&mut x, IoMode::RW.0, 0, B, sid).unwrap();
    let h = host(&t, "c", "127.0.0.4").await.unwrap();
    write(&h, 7).await.unwrap();
    let now = Instant::now();
    expire_and_tick(&fx, &clock, now);
    assert_eq!(fx.srv.layouts.hosts.metrics.snapshot().fences_disconnect, 1);
    assert!(closed(&h).await);
    assert!(refused(host(&t, "c", "127.0.0.4").await));
    // Its state is gone (purged with its layouts): a lease later it is still refused (what it
    // queued may not have failed yet); past READMIT_AFTER it is admitted.
    let lease = Duration::from_secs(u64::from(fx.srv.opts.lease_seconds));
    recall::tick(&fx.srv.layouts_env(), now + lease + Duration::from_secs(1));
    assert!(refused(host(&t, "c", "127.0.0.4").await));
    let hold = lease.max(crate::nfs4::layouts::hosts::READMIT_AFTER);
    recall::tick(&fx.srv.layouts_env(), now + hold + Duration::from_secs(1));
    let h = host(&t, "c", "127.0.0.4").await.unwrap();
    write(&h, 8).await.unwrap();
    t.shutdown();
}

/// A SIGKILL-style restart (the Server dropped, nothing saved on the way out, a new one on
/// the same volume and directory): the fence is back before any host connects, the same
/// instance of the client stays refused, a new instance of it is admitted. (The SCSI
/// layout's reservations across the same kind of restart: nvme.rs
/// `reservations_and_fences_survive_a_kill_and_the_absent_go_after_grace`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_state_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let fx = fixture(NfsOptions::default());
    let t = target_for(&fx.srv, dir.path()).await;
    let ca = conn(5, None);
    let mut a = ctx(&fx.srv, &ca);
    mount_v(&mut a, b"a", [1; 8]);
    let (fh, sa) = create(&mut a, b"f");
    get(&mut a, IoMode::RW.0, 0, B, sa).unwrap();
    let h = host(&t, "a", "127.0.0.5").await.unwrap();
    write(&h, 1).await.unwrap();
    // Truncate by another client: A is recalled, ignores it, is fenced.
    recall::recall_file(
        &fx.srv.layouts_env(),
        fh,
        &[fx.srv.layouts.holders(fh.ino)[0]],
    );
    let lease = Duration::from_secs(u64::from(fx.srv.opts.lease_seconds));
    recall::tick(
        &fx.srv.layouts_env(),
        Instant::now() + 2 * lease + Duration::from_secs(1),
    );
    assert!(closed(&h).await);
    t.shutdown();
    drop((a, h, t));
    let Fx { dev, srv, .. } = fx;
    drop(srv);

    let store = Arc::new(Store::open_dev(dev.clone(), StoreOptions::default()).unwrap());
    let srv = super::super::fixture::server(store, NfsOptions::default(), 2);
    assert!(srv.state.in_grace());
    let t = target_for(&srv, dir.path()).await;
    assert!(refused(host(&t, "a", "127.0.0.5").await));
    assert!(host(&t, "z", "127.0.0.6").await.is_ok());
    // The same instance back (same verifier): still fenced while grace lasts.
    let mut a = ctx(&srv, &ca);
    mount_v(&mut a, b"a", [1; 8]);
    recall::tick(&srv.layouts_env(), Instant::now());
    assert!(refused(host(&t, "a", "127.0.0.5").await));
    // A new instance: admitted.
    mount_v(&mut a, b"a", [2; 8]);
    recall::tick(&srv.layouts_env(), Instant::now());
    let h = host(&t, "a", "127.0.0.5").await.unwrap();
    write(&h, 2).await.unwrap();
    t.shutdown();
}

/// A write of the client's host still at the media when the fence's wait runs out
/// (`Limits::fence_drain_ms`): the fence fails, so the file keeps its blocks; the retry a
/// lease later, once the write is done, fences it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_with_a_write_stuck_at_the_media_fails_until_the_write_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let (fx, clock) = fixture_clocked(NfsOptions::default());
    let held = Arc::new(nvme_tcp::HeldMem::new(1024, 4096));
    let limits = nvme_tcp::Limits {
        fence_drain_ms: 100,
        ..nvme_tcp::Limits::default()
    };
    let t = target_over(&fx.srv, dir.path(), held.clone(), limits).await;
    let c = conn(6, None);
    let mut x = ctx(&fx.srv, &c);
    mount_v(&mut x, b"c", [1; 8]);
    let (fh, sid) = create(&mut x, b"f");
    get(&mut x, IoMode::RW.0, 0, B, sid).unwrap();
    let h = Arc::new(host(&t, "c", "127.0.0.6").await.unwrap());
    held.hold(true);
    let w = {
        let h = h.clone();
        tokio::spawn(async move { write(&h, 7).await })
    };
    for _ in 0..1000 {
        if held.writes_begun() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        held.writes_begun(),
        1,
        "the write never reached the backend"
    );
    let now = Instant::now();
    expire_and_tick(&fx, &clock, now);
    let m = fx.srv.layouts.metrics.snapshot();
    assert_eq!((m.fences, m.fences_failed), (0, 1));
    assert!(fx.srv.layouts.kept(fh.ino));
    // Disconnected and refused all the same.
    assert!(refused(host(&t, "c", "127.0.0.6").await));
    held.hold(false);
    let _ = w.await.unwrap();
    let lease = Duration::from_secs(u64::from(fx.srv.opts.lease_seconds));
    recall::tick(&fx.srv.layouts_env(), now + lease);
    let m = fx.srv.layouts.metrics.snapshot();
    assert_eq!((m.fences, m.fences_failed), (1, 1));
    assert!(!fx.srv.layouts.kept(fh.ino));
    t.shutdown();
}
