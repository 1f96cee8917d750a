//! The embedded NVMe/TCP target (crate `nvme-tcp`): exports the data volume as
//! namespace 1 so that one daemon is a complete pNFS system (docs/design.md §1, §6).
//!
//! The namespace is the very `BlockDev` the store mounted (`VolumeBackend` wraps the same
//! `Arc`, hence the same open file descriptor): a client's NVMe Write lands in the file the
//! store reads, and an NVMe Flush is `BlockDev::flush` — the `fdatasync` of that descriptor
//! the store's log force and COMMIT use — so either flush covers both parties' completed
//! writes (docs/design.md §6 "honest volatile write cache").
//!
//! Reservations persist through power loss: the target keeps them in
//! `<data_dir>/nvme-ns1.reservations` (nvme-tcp `reservation::persist`), so the MDS's
//! reservation, its fences and the clients' registrations are back after a restart
//! (docs/pnfs.md "After a restart").
//!
//! This module knows the namespace, the target and the initiator (`volume`), not the server:
//! what wires the target to the configuration, the layouts' host registry and the SCSI
//! layout's fencer is the daemon's (daemon/nvme.rs).

pub mod meta_guard;
pub mod volume;

use std::net::SocketAddr;
use std::sync::Arc;

use metalog::BlockDev;
use nvme_tcp::{
    AcquireAction, Backend, Cptpl, RType, RegisterAction, ReleaseAction, Target, TargetConfig,
};

/// The namespace's LBA size (layout::LBA_SIZE: the store's block size).
pub use layout::LBA_SIZE;
/// The namespace that carries the volume.
pub const NSID: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum NvmeError {
    #[error(
        "NVMe/TCP target: {addr} is already in use; choose another address with \
         --nvme-listen ADDR:PORT (config nvme_listen), or disable the target with --no-nvme \
         (nvme_listen = \"off\")"
    )]
    AddrInUse { addr: SocketAddr },
    #[error("NVMe/TCP target on {addr}: {err}")]
    Target {
        addr: SocketAddr,
        err: nvme_tcp::Error,
    },
}

/// `nvme_tcp::Backend` over the store's device.
pub struct VolumeBackend {
    dev: Arc<dyn BlockDev>,
    num_blocks: u64,
}

impl VolumeBackend {
    pub fn new(dev: Arc<dyn BlockDev>) -> Self {
        let num_blocks = dev.size() / LBA_SIZE as u64;
        VolumeBackend { dev, num_blocks }
    }
}

impl Backend for VolumeBackend {
    fn block_size(&self) -> u32 {
        LBA_SIZE
    }
    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.dev.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.dev.write_at(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        // The same fdatasync the store's flushes issue (module comment).
        self.dev.flush()
    }
    fn io_file(&self) -> Option<nvme_tcp::IoFile> {
        // The target's io_uring reads and writes the same descriptor (docs/nvme-tcp.md).
        self.dev
            .raw_file()
            .map(|(fd, direct)| nvme_tcp::IoFile { fd, direct })
    }
}

/// No host writes the volume's own blocks through the target: the superblock, the log and
/// the checkpoints, everything before the data area (the target answers Access
/// Denied). The MDS writes them through its own device. Tree nodes live among the data
/// blocks (docs/store.md): keeping hosts off those is the layouts' enforcement
/// (`gate_hosts`), not this.
pub fn guard_mds_blocks(tc: &mut TargetConfig, g: &layout::Geometry) {
    // A split volume's namespace 1 is its data member: only its label is the MDS's.
    let blocks = match g.is_split() {
        true => g.data_base,
        false => g.data_start,
    };
    let lbas = blocks * u64::from(layout::BLOCK_SIZE) / u64::from(LBA_SIZE);
    tc.mds_blocks = vec![(NSID, lbas)];
}

/// The target's fence state file in the data directory (hosts.rs).
pub const FENCE_FILE: &str = "nvme-fences";

/// Binds the target on `addr` (nothing is served until `Target::spawn`). The target bound
/// last is the one `/metrics` (metrics/nvme.rs) and `/status` (admin/status.rs) show.
pub async fn bind(addr: SocketAddr, tc: TargetConfig) -> Result<Target, NvmeError> {
    let t = Target::bind(addr, tc).await.map_err(|err| match err {
        nvme_tcp::Error::Io(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            NvmeError::AddrInUse { addr }
        }
        err => NvmeError::Target { addr, err },
    })?;
    *EMBEDDED.lock().unwrap_or_else(|e| e.into_inner()) = Some(t.clone());
    Ok(t)
}

/// The daemon's embedded target, for the metrics and admin views: they are built where the
/// target is not passed (metrics.rs, admin/mod.rs), and a process runs one target.
static EMBEDDED: std::sync::Mutex<Option<Target>> = std::sync::Mutex::new(None);

/// The embedded target, if this process bound one.
pub fn embedded() -> Option<Target> {
    EMBEDDED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The Host Identifier under which the MDS holds its registration (it never connects: the
/// in-process reservation API plays its commands, `Target` docs).
pub const MDS_HOSTID: [u8; 16] = *b"pnfsd-mds-hostid";

/// SCSI layout (RFC 8154 §2.4.2 over NVMe): the MDS registers its key and holds
/// EXCLUSIVE_ACCESS_REG_ONLY on the volume, so only hosts that registered the key
/// GETDEVICEINFO gave them may do I/O, and a preempted one may not. With Persist Through
/// Power Loss, so that a restart keeps all of it (after one, the stored registration and
/// reservation are found again and nothing changes).
pub fn claim_for_scsi(target: &Target) -> Result<(), nvme_tcp::Status> {
    let key = layout::scsi::MDS_PR_KEY;
    // IEKEY: whatever key this host id held before (a previous registration) is replaced.
    target.reservation_register_cptpl(
        NSID,
        MDS_HOSTID,
        RegisterAction::Register,
        true,
        Cptpl::Persist,
        0,
        key,
    )?;
    target.reservation_acquire(
        NSID,
        MDS_HOSTID,
        AcquireAction::Acquire,
        RType::EXCLUSIVE_ACCESS_REG_ONLY,
        key,
        0,
    )?;
    Ok(())
}

/// A start without the SCSI layout: a reservation the MDS took on an earlier start (and the
/// target kept) would refuse every block-layout host, so the MDS clears it, and with it
/// every registration (Reservation Release, Clear). Nothing to do when it holds none.
pub fn release_scsi_claim(target: &Target) -> Result<(), nvme_tcp::Status> {
    let (_, regs) = target.reservation_state(NSID)?;
    let key = layout::scsi::MDS_PR_KEY;
    if !regs.iter().any(|r| r.hostid == MDS_HOSTID && r.key == key) {
        return Ok(());
    }
    target.reservation_release(NSID, MDS_HOSTID, ReleaseAction::Clear, RType(0), key)?;
    tracing::info!(
        "SCSI layout not offered: the reservation and registrations kept from an earlier \
         start are cleared"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::daemon::nvme::{target_config, TargetFencer};
    use crate::nfs4::layouts::scsi::{PrFencer, PreemptError};
    use metalog::FileDev;

    #[test]
    fn backend_is_the_device() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.img");
        let dev: Arc<dyn BlockDev> = Arc::new(FileDev::create(&p, 1 << 20).unwrap());
        let b = VolumeBackend::new(dev.clone());
        assert_eq!((b.block_size(), b.num_blocks()), (4096, 256));
        b.write_at(&[7u8; 4096], 8192).unwrap();
        b.flush().unwrap();
        let mut got = vec![0u8; 4096];
        dev.read_at(&mut got, 8192).unwrap();
        assert!(got.iter().all(|&x| x == 7));
        dev.write_at(&[9u8; 4096], 0).unwrap();
        b.read_at(&mut got, 0).unwrap();
        assert!(got.iter().all(|&x| x == 9));
        assert_eq!(std::fs::read(&p).unwrap()[8192], 7);
    }

    #[tokio::test]
    async fn a_taken_port_names_the_port_and_the_flag() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let dev: Arc<dyn BlockDev> =
            Arc::new(FileDev::create(&dir.path().join("v"), 1 << 20).unwrap());
        let cfg = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let tc = target_config(&cfg, dev, [1; 16]);
        let e = bind(addr, tc).await.err().unwrap().to_string();
        assert!(
            e.contains(&addr.to_string()) && e.contains("--nvme-listen"),
            "{e}"
        );
    }

    /// The `nvme_max_send_queued` and `nvme_connect_timeout_ms` keys reach the target, and
    /// a send bound below one Read's answer is refused at bind, naming the bound.
    #[tokio::test]
    async fn the_send_bound_and_connect_timeout_keys_reach_the_target() {
        let dir = tempfile::tempdir().unwrap();
        let dev: Arc<dyn BlockDev> =
            Arc::new(FileDev::create(&dir.path().join("v"), 1 << 20).unwrap());
        let mut cfg = Config {
            data_dir: dir.path().to_path_buf(),
            nvme_max_send_queued: crate::config::Size(1 << 20),
            nvme_connect_timeout_ms: 1234,
            ..Config::default()
        };
        let tc = target_config(&cfg, dev.clone(), [1; 16]);
        assert_eq!(tc.limits.max_send_queued_per_connection, 1 << 20);
        assert_eq!(tc.limits.connect_timeout_ms, 1234);
        assert!(bind("127.0.0.1:0".parse().unwrap(), tc).await.is_ok());
        cfg.nvme_max_send_queued = crate::config::Size(4096);
        let tc = target_config(&cfg, dev, [1; 16]);
        let e = bind("127.0.0.1:0".parse().unwrap(), tc)
            .await
            .err()
            .unwrap();
        assert!(e.to_string().contains("max_send_queued"), "{e}");
    }

    /// Real NVMe/TCP: the MDS holds EXCLUSIVE_ACCESS_REG_ONLY, a client
    /// that registered the key GETDEVICEINFO gives it writes; once fencing preempts that key
    /// its next write gets Reservation Conflict.
    #[tokio::test]
    async fn fenced_scsi_client_gets_reservation_conflict() {
        use bytes::Bytes;
        use nvme_tcp::{Initiator, InitiatorConfig, Status};
        let dir = tempfile::tempdir().unwrap();
        let dev: Arc<dyn BlockDev> =
            Arc::new(FileDev::create(&dir.path().join("v"), 1 << 20).unwrap());
        let uuid = [0x5a; 16];
        let cfg = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let tc = target_config(&cfg, dev, uuid);
        let target = bind("127.0.0.1:0".parse().unwrap(), tc).await.unwrap();
        claim_for_scsi(&target).unwrap();
        let (rtype, regs) = target.reservation_state(NSID).unwrap();
        assert_eq!(rtype, Some(RType::EXCLUSIVE_ACCESS_REG_ONLY));
        assert_eq!(regs.len(), 1);
        assert_eq!(regs[0].key, layout::scsi::MDS_PR_KEY);
        let _task = target.spawn();

        let ini = Initiator::connect(
            target.local_addr(),
            InitiatorConfig::new(cfg.nvme_nqn.clone(), "nqn.2014-08.org.example:client"),
        )
        .await
        .unwrap();
        // The designator GETDEVICEINFO sends is the NGUID the namespace reports, and no UUID
        // descriptor makes a Linux host's wwid something else (nfs4::layouts::scsi::volume_designator).
        let info = ini.identify_namespace(NSID).await.unwrap();
        assert_eq!(
            info.nguid,
            nvme_tcp::NamespaceIds::from_volume_uuid(uuid).nguid
        );
        let descs = ini.ns_descriptors(NSID).await.unwrap();
        assert!(descs.iter().all(|(t, _)| *t != 3), "{descs:?}");
        let conflict = |r: Result<(), nvme_tcp::Error>| match r {
            Err(nvme_tcp::Error::Status(s)) => s == Status::RESERVATION_CONFLICT,
            _ => false,
        };
        let block = || Bytes::from(vec![0xabu8; LBA_SIZE as usize]);
        // Unregistered: refused.
        assert!(conflict(
            ini.write(NSID, 10, block(), LBA_SIZE, false).await
        ));
        let key = layout::scsi::client_pr_key(42);
        ini.reservation_register(NSID, RegisterAction::Register, false, 0, key)
            .await
            .unwrap();
        ini.write(NSID, 10, block(), LBA_SIZE, false).await.unwrap();
        // Fencing: preempt-and-abort the client's key.
        let fencer = TargetFencer(target.clone());
        fencer.preempt_and_abort(key).unwrap();
        assert!(conflict(
            ini.write(NSID, 11, block(), LBA_SIZE, false).await
        ));
        // Nothing left to preempt; the MDS still holds the reservation alone.
        assert_eq!(
            fencer.preempt_and_abort(key),
            Err(PreemptError::NotRegistered)
        );
        let (rtype, regs) = target.reservation_state(NSID).unwrap();
        assert_eq!(rtype, Some(RType::EXCLUSIVE_ACCESS_REG_ONLY));
        assert_eq!(regs.len(), 1);
        target.shutdown();
    }

    /// Through the embedded target no host writes, zeroes or deallocates the
    /// superblock, the log or the checkpoints (Access Denied), while it still reads them (the
    /// block layout's signature) and writes the data area; the volume mounts afterwards.
    #[tokio::test]
    async fn no_host_writes_the_mds_blocks() {
        use crate::store::{Store, StoreOptions};
        use bytes::Bytes;
        use nvme_tcp::{Initiator, InitiatorConfig, Status};
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume.img");
        Store::mkfs(&volume, 64 << 20, false).unwrap();
        let store = Store::open(&volume, StoreOptions::default()).unwrap();
        let g = store.superblock().geometry;
        let uuid = store.volume_uuid();
        drop(store);
        let cfg = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&volume).unwrap());
        let mut tc = target_config(&cfg, dev, uuid);
        guard_mds_blocks(&mut tc, &g);
        let target = bind("127.0.0.1:0".parse().unwrap(), tc).await.unwrap();
        let _task = target.spawn();
        let ini = Initiator::connect(
            target.local_addr(),
            InitiatorConfig::new(cfg.nvme_nqn.clone(), "nqn.2014-08.org.example:stray"),
        )
        .await
        .unwrap();
        let denied = |r: Result<(), nvme_tcp::Error>| matches!(r, Err(nvme_tcp::Error::Status(s)) if s == Status::ACCESS_DENIED);
        let lba = |block: u64| block * u64::from(layout::BLOCK_SIZE) / u64::from(LBA_SIZE);
        let junk = || Bytes::from(vec![0xeeu8; LBA_SIZE as usize]);
        let first_data = lba(g.data_start);
        assert!(first_data > 0);
        for at in [0, lba(g.log_start), first_data - 1] {
            assert!(
                denied(ini.write(NSID, at, junk(), LBA_SIZE, false).await),
                "{at}"
            );
            assert!(
                denied(ini.write(NSID, at, junk(), LBA_SIZE, true).await),
                "{at}"
            );
            assert!(denied(ini.write_zeroes(NSID, at, 1).await), "{at}");
            assert!(denied(ini.deallocate(NSID, &[(at, 1)]).await), "{at}");
        }
        // A write that starts before the data area and runs into it is refused whole.
        let two = Bytes::from(vec![0xeeu8; 2 * LBA_SIZE as usize]);
        assert!(denied(
            ini.write(NSID, first_data - 1, two, LBA_SIZE, false).await
        ));
        // Reads are allowed (the signature), and so are the data area (its last block: no
        // tree node there in a fresh volume) and Flush.
        let sb = ini.read(NSID, 0, 1, LBA_SIZE).await.unwrap();
        assert_eq!(
            &sb[..],
            &std::fs::read(&volume).unwrap()[..LBA_SIZE as usize]
        );
        let last = lba(g.total_blocks) - 1;
        ini.write(NSID, last, junk(), LBA_SIZE, false)
            .await
            .unwrap();
        ini.flush(NSID).await.unwrap();
        target.shutdown();
        drop(ini);
        Store::open(&volume, StoreOptions::default()).unwrap();
    }

    /// After a SIGKILL restart the SCSI reservations and the fence state are back, over
    /// real NVMe/TCP: the MDS's reservation, a
    /// client's registration and a fence survive a kill of the daemon (target and store
    /// dropped, no unmount); the registered host's replayed write lands, the fenced host's
    /// does not; a client that comes back registers its new key over the old one; the
    /// previous instance's client that does not come back is preempted when its layouts
    /// expire, and grace waits for that.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reservations_and_fences_survive_a_kill_and_the_absent_go_after_grace() {
        use crate::nfs4::state::{ExchangeIdReq, Principal};
        use crate::server::{NfsOptions, Server};
        use crate::store::{Store, StoreOptions};
        use bytes::Bytes;
        use nvme_tcp::{Initiator, InitiatorConfig, Status};
        use std::time::{Duration, Instant};

        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume.img");
        Store::mkfs(&volume, 64 << 20, false).unwrap();
        let target_file = dir.path().join("nvme.img");
        FileDev::create(&target_file, 1 << 20).unwrap();
        let cfg = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let opts = NfsOptions {
            lease_seconds: 1,
            grace_seconds: 1,
            layout_types: vec![
                layout::block::LayoutType::BLOCK_VOLUME,
                layout::block::LayoutType::SCSI,
            ],
            ..NfsOptions::default()
        };
        // One start of the daemon: store, server, target, the MDS's claim.
        let start = || async {
            let store = Arc::new(Store::open(&volume, StoreOptions::default()).unwrap());
            let srv = Arc::new(Server::new(store, opts.clone()));
            let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&target_file).unwrap());
            let tc = target_config(&cfg, dev, srv.store.volume_uuid());
            let target = bind("127.0.0.1:0".parse().unwrap(), tc).await.unwrap();
            claim_for_scsi(&target).unwrap();
            srv.layouts
                .scsi
                .install(Arc::new(TargetFencer(target.clone())));
            crate::nfs4::layouts::scsi_restart::begin(&srv.layouts, &srv.state);
            drop(target.spawn());
            (srv, target)
        };
        let client = |srv: &Server, owner: &[u8]| {
            let req = ExchangeIdReq {
                owner: owner.to_vec(),
                verifier: [7; 8],
                flags: 0,
                principal: Principal { flavor: 1, uid: 0 },
            };
            let id = srv.state.exchange_id(&req).unwrap().clientid;
            // What its CREATE_SESSION would have stored: it may reclaim after a restart.
            srv.store.put_client_record(owner, Some(b"v1")).unwrap();
            id
        };
        let host = |t: &Target, name: &str| {
            let c = InitiatorConfig::new(
                cfg.nvme_nqn.clone(),
                format!("nqn.2014-08.org.example:{name}"),
            );
            Initiator::connect(t.local_addr(), c)
        };
        // As the Linux client does at GETDEVICEINFO: Register, IEKEY, CPTPL = persist.
        async fn register(ini: &Initiator, key: u64) -> Result<(), nvme_tcp::Error> {
            ini.reservation_register_cptpl(
                NSID,
                RegisterAction::Register,
                true,
                Cptpl::Persist,
                0,
                key,
            )
            .await
        }
        let block = || Bytes::from(vec![0x5au8; LBA_SIZE as usize]);
        let conflict = |r: Result<(), nvme_tcp::Error>| match r {
            Err(nvme_tcp::Error::Status(s)) => s == Status::RESERVATION_CONFLICT,
            _ => false,
        };
        let keys = |t: &Target| {
            let mut k: Vec<u64> = t
                .reservation_state(NSID)
                .unwrap()
                .1
                .iter()
                .map(|r| r.key)
                .collect();
            k.sort_unstable();
            k
        };
        let sorted = |mut v: Vec<u64>| {
            v.sort_unstable();
            v
        };
        let key = crate::nfs4::layouts::scsi::client_key;

        let (srv, target) = start().await;
        let (a, b, c) = (client(&srv, b"a"), client(&srv, b"b"), client(&srv, b"c"));
        let (ha, hb, hc) = (
            host(&target, "a").await.unwrap(),
            host(&target, "b").await.unwrap(),
            host(&target, "c").await.unwrap(),
        );
        register(&ha, key(a)).await.unwrap();
        register(&hb, key(b)).await.unwrap();
        register(&hc, key(c)).await.unwrap();
        ha.write(NSID, 1, block(), LBA_SIZE, false).await.unwrap();
        // c is fenced (its layouts were dropped without a return).
        crate::nfs4::layouts::scsi::fence(&srv.layouts.scsi, c).unwrap();
        assert!(conflict(hc.write(NSID, 2, block(), LBA_SIZE, false).await));
        // SIGKILL: everything goes, nothing is unmounted or saved on the way out.
        target.shutdown();
        drop((ha, hb, hc, target, srv));

        let (srv, target) = start().await;
        // Back before any host connected: the MDS holds, a and b are registered, c is not.
        let (rtype, _) = target.reservation_state(NSID).unwrap();
        assert_eq!(rtype, Some(RType::EXCLUSIVE_ACCESS_REG_ONLY));
        assert_eq!(
            keys(&target),
            sorted(vec![layout::scsi::MDS_PR_KEY, key(a), key(b)])
        );
        assert!(srv.state.in_grace() && srv.layouts.scsi_restart.pending());
        let (ha, hb, hc) = (
            host(&target, "a").await.unwrap(),
            host(&target, "b").await.unwrap(),
            host(&target, "c").await.unwrap(),
        );
        // The NVMe hosts replay what was in flight: a's and b's land, the fenced c's does not.
        ha.write(NSID, 3, block(), LBA_SIZE, false).await.unwrap();
        hb.write(NSID, 4, block(), LBA_SIZE, false).await.unwrap();
        assert!(conflict(hc.write(NSID, 5, block(), LBA_SIZE, false).await));
        // a comes back and registers the key of its new clientid over the old one.
        let a2 = client(&srv, b"a");
        register(&ha, key(a2)).await.unwrap();
        // Nothing is swept while the previous instance's layouts may still commit.
        crate::nfs4::layouts::recall::tick(&srv.layouts_env(), Instant::now());
        hb.write(NSID, 6, block(), LBA_SIZE, false).await.unwrap();
        // Then b, which did not come back, is cut off; a keeps writing; grace may end.
        let t0 = Instant::now();
        while !srv.state.previous_layouts_expired() {
            assert!(t0.elapsed() < Duration::from_secs(5), "grace never ended");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            srv.state.layouts_reclaimable(),
            "the reclaim window closed before the sweep"
        );
        srv.state.tick();
        crate::nfs4::layouts::recall::tick(&srv.layouts_env(), Instant::now());
        assert!(!srv.layouts.scsi_restart.pending());
        assert!(conflict(hb.write(NSID, 7, block(), LBA_SIZE, false).await));
        ha.write(NSID, 8, block(), LBA_SIZE, false).await.unwrap();
        assert_eq!(
            keys(&target),
            sorted(vec![layout::scsi::MDS_PR_KEY, key(a2)])
        );
        assert_eq!(srv.layouts.metrics.snapshot().fences, 1);
        assert!(!srv.state.layouts_reclaimable());
        srv.state.tick();
        assert!(!srv.state.in_grace());
        target.shutdown();
    }

    /// A start without the SCSI layout clears a reservation the MDS kept from a start with
    /// it, so block-layout hosts (which never register) are not refused.
    #[tokio::test]
    async fn a_start_without_scsi_clears_the_kept_reservation() {
        use bytes::Bytes;
        use nvme_tcp::{Initiator, InitiatorConfig};
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("v");
        FileDev::create(&file, 1 << 20).unwrap();
        let cfg = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let dev = || -> Arc<dyn BlockDev> { Arc::new(FileDev::open(&file).unwrap()) };
        let t = bind(
            "127.0.0.1:0".parse().unwrap(),
            target_config(&cfg, dev(), [3; 16]),
        )
        .await
        .unwrap();
        claim_for_scsi(&t).unwrap();
        t.shutdown();
        drop(t);
        let t = bind(
            "127.0.0.1:0".parse().unwrap(),
            target_config(&cfg, dev(), [3; 16]),
        )
        .await
        .unwrap();
        assert_eq!(
            t.reservation_state(NSID).unwrap().0,
            Some(RType::EXCLUSIVE_ACCESS_REG_ONLY)
        );
        release_scsi_claim(&t).unwrap();
        assert_eq!(t.reservation_state(NSID).unwrap(), (None, vec![]));
        let _task = t.spawn();
        let ini = Initiator::connect(
            t.local_addr(),
            InitiatorConfig::new(cfg.nvme_nqn.clone(), "nqn.2014-08.org.example:block"),
        )
        .await
        .unwrap();
        let data = Bytes::from(vec![1u8; LBA_SIZE as usize]);
        ini.write(NSID, 0, data, LBA_SIZE, false).await.unwrap();
        // Nothing kept: nothing to clear.
        release_scsi_claim(&t).unwrap();
        t.shutdown();
    }
}
