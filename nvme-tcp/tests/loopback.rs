//! Initiator against target over loopback: every command, many queues, byte-for-byte I/O,
//! reservations, keep-alive expiry and Traffic Based Keep Alive.

mod common;
use bytes::Bytes;
use common::*;
use nvme_tcp::{
    discover, AcquireAction, Error, Initiator, NamespaceIds, RType, RegisterAction, ReleaseAction,
    Status,
};
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;

fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn status_of<T: std::fmt::Debug>(r: Result<T, Error>) -> Status {
    match r {
        Err(Error::Status(s)) => s,
        other => panic!("expected an NVMe status error, got {other:?}"),
    }
}

/// `r` is the reservation conflict a fenced or unregistered host gets.
#[track_caller]
fn assert_conflict<T: std::fmt::Debug>(r: Result<T, Error>) {
    assert_eq!(status_of(r), Status::RESERVATION_CONFLICT);
}

/// One 4 KiB block of `byte`.
fn block(byte: u8) -> Bytes {
    Bytes::from(vec![byte; 4096])
}

#[tokio::test]
async fn identify_features_logs_and_properties() {
    let r = rig(1024, None).await;
    let ini = Initiator::connect(r.target.local_addr(), host("a", 3))
        .await
        .unwrap();
    assert_eq!(ini.io_queue_count(), 3);
    let id = ini.controller_data().to_vec();
    assert_eq!(u16::from_le_bytes([id[78], id[79]]), ini.cntlid());
    assert_ne!(u16::from_le_bytes([id[320], id[321]]), 0, "KAS");
    assert!(le32(&id, 1792) >= 4, "IOCCSZ");
    assert!(le32(&id, 1796) >= 1, "IORCSZ");
    assert_eq!(u16::from_le_bytes([id[1800], id[1801]]), 0, "ICDOFF");
    assert_eq!(le32(&id, 536) & 3, 1, "SGLS");
    assert_eq!(id[525] & 1, 1, "VWC");
    assert_eq!(le32(&id, 516), 1, "NN");
    assert_eq!(id[111], 1, "CNTRLTYPE I/O");
    assert!(id[768..].starts_with(NQN.as_bytes()));

    let ns = ini.identify_namespace(1).await.unwrap();
    assert_eq!((ns.blocks, ns.block_size), (1024, BS));
    let ids = NamespaceIds::from_volume_uuid(UUID);
    assert_eq!((ns.nguid, ns.eui64), (ids.nguid, ids.eui64));
    assert_eq!(ns.rescap & 0x7E, 0x7E);
    assert_eq!(ini.active_namespaces().await.unwrap(), vec![1]);
    let d = ini.ns_descriptors(1).await.unwrap();
    // EUI-64 and NGUID, and no UUID: a Linux host's wwid is then eui.<NGUID>, the name of the
    // udev link the SCSI-layout client opens (NamespaceIds).
    assert_eq!(d, vec![(1, ids.eui64.to_vec()), (2, ids.nguid.to_vec())]);
    assert_ne!(ids.nguid, [0; 16]);
    assert_eq!(
        status_of(ini.identify_namespace(2).await.map(|_| ())),
        Status::INVALID_NS
    );
    assert_eq!(
        ini.identify_raw(0x08, 1).await.unwrap()[14],
        1,
        "NSTAT ready"
    );

    // Features: number of queues (as granted), write cache, async event config, KATO.
    assert_eq!(ini.get_features(0x07, 0).await.unwrap(), 2 | 2 << 16);
    assert_eq!(ini.get_features(0x06, 0).await.unwrap(), 1);
    ini.set_features(0x06, 0).await.unwrap();
    assert_eq!(ini.get_features(0x06, 0).await.unwrap(), 0);
    ini.set_features(0x0B, 0x100).await.unwrap();
    assert_eq!(ini.get_features(0x0B, 0).await.unwrap(), 0x100);
    assert_eq!(ini.get_features(0x0F, 0).await.unwrap(), 5000);
    assert_eq!(
        status_of(ini.get_features(0x42, 0).await),
        Status::INVALID_FIELD
    );
    // Get Features of reserved FID 0 is an invalid field.
    assert_eq!(
        status_of(
            ini.admin_cmd(nvme_tcp::pdu::Sqe::new(0x0A), None, 16)
                .await
                .map(|_| ())
        ),
        Status::INVALID_FIELD
    );

    // Logs, keep alive, properties.
    assert_eq!(
        ini.get_log_page(0x02, 0xFFFF_FFFF, 0, 512)
            .await
            .unwrap()
            .len(),
        512
    );
    assert_eq!(
        status_of(ini.get_log_page(0x33, 0, 0, 512).await),
        Status::INVALID_LOG_PAGE
    );
    ini.keep_alive().await.unwrap();
    assert_eq!(ini.property_get(0x08, false).await.unwrap(), 0x0001_0300);
    assert_eq!(ini.property_get(0x1C, false).await.unwrap() & 1, 1);
    assert_eq!(
        status_of(ini.property_set(0x00, 1).await),
        Status::INVALID_FIELD
    );
    ini.disconnect().await.unwrap();
    // The admin connection closing ends the association.
    for _ in 0..50 {
        if r.target.controller_count() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(r.target.controller_count(), 0);
}

#[tokio::test]
async fn async_event_request_stays_pending() {
    let r = rig(64, None).await;
    let ini = Arc::new(
        Initiator::connect(r.target.local_addr(), host("aer", 1))
            .await
            .unwrap(),
    );
    let i2 = ini.clone();
    let aer =
        tokio::spawn(async move { i2.admin_cmd(nvme_tcp::pdu::Sqe::new(0x0C), None, 0).await });
    for _ in 0..10 {
        ini.keep_alive().await.unwrap();
    }
    assert!(!aer.is_finished(), "AER must stay pending");
    aer.abort();
}

#[tokio::test]
async fn discovery_lists_the_subsystem() {
    let r = rig(64, None).await;
    let entries = discover(r.target.local_addr(), "nqn.2014-08.org.nvmexpress:uuid:d")
        .await
        .unwrap();
    assert_eq!(entries.len(), 1);
    let e = &entries[0];
    assert_eq!((e.trtype, e.adrfam, e.subtype), (3, 1, 2));
    assert_eq!(e.traddr, "127.0.0.1");
    assert_eq!(e.trsvcid, r.target.local_addr().port().to_string());
    assert_eq!(e.subnqn, NQN);
    // The raw entry at the offsets Linux reads (struct nvmf_disc_rsp_page_entry, NVMe-oF 1.1
    // Figure 38): a host other than ours must find each field where the spec puts it.
    let mut cfg = nvme_tcp::InitiatorConfig::new(
        nvme_tcp::DISCOVERY_NQN,
        "nqn.2014-08.org.nvmexpress:uuid:d",
    );
    cfg.io_queues = 0;
    cfg.kato_ms = 0;
    let ini = Initiator::connect(r.target.local_addr(), cfg)
        .await
        .unwrap();
    let raw = ini.get_log_page(0x70, 0, 1024, 1024).await.unwrap();
    let field = |a: usize, b: usize| {
        let f = &raw[a..b];
        let n = f.iter().position(|&c| c == 0).unwrap_or(f.len());
        assert!(f[n..].iter().all(|&c| c == 0), "NUL padded");
        String::from_utf8(f[..n].to_vec()).unwrap()
    };
    assert_eq!(field(32, 64), r.target.local_addr().port().to_string());
    assert_eq!(field(256, 512), NQN);
    assert_eq!(field(512, 768), "127.0.0.1");
    assert_eq!(raw[768], 0, "TSAS SECTYPE: no security");
    ini.disconnect().await.unwrap();
}

#[tokio::test]
async fn discovery_advertises_the_configured_address() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(nvme_tcp::MemBackend::new(16, 4096));
    let mut cfg = nvme_tcp::TargetConfig::new(
        NQN,
        vec![nvme_tcp::NamespaceConfig {
            nsid: 1,
            backend,
            volume_uuid: UUID,
        }],
    );
    cfg.advertise = Some("10.0.2.2:4420".parse().unwrap());
    let t = nvme_tcp::Target::bind("127.0.0.1:0", cfg).await.unwrap();
    t.spawn();
    let e = discover(t.local_addr(), "nqn.2014-08.org.nvmexpress:uuid:d")
        .await
        .unwrap();
    assert_eq!(
        (e[0].traddr.as_str(), e[0].trsvcid.as_str()),
        ("10.0.2.2", "4420")
    );
    drop(dir);
}

async fn io_commands(digests: bool) {
    let r = rig(1024, None).await;
    let mut cfg = host("io", 2);
    cfg.header_digest = digests;
    cfg.data_digest = digests;
    let ini = Initiator::connect(r.target.local_addr(), cfg)
        .await
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    // In-capsule (4 KiB, 8 KiB) and R2T (64 KiB, and 512 KiB split into H2CData PDUs).
    for (lba, blocks) in [(0u64, 1u32), (10, 2), (20, 16), (100, 128)] {
        let data: Vec<u8> = (0..blocks * BS).map(|_| rng.gen()).collect();
        ini.write(1, lba, Bytes::from(data.clone()), BS, lba == 20)
            .await
            .unwrap();
        assert_eq!(ini.read(1, lba, blocks, BS).await.unwrap(), data);
    }
    ini.flush(1).await.unwrap();
    let raw = std::fs::read(&r.path).unwrap();
    let back = ini.read(1, 100, 128, BS).await.unwrap();
    assert_eq!(&raw[100 * 4096..228 * 4096], &back[..]);
    // Write Zeroes and deallocate.
    ini.write_zeroes(1, 100, 4).await.unwrap();
    assert!(ini
        .read(1, 100, 4, BS)
        .await
        .unwrap()
        .iter()
        .all(|&b| b == 0));
    assert_eq!(
        ini.read(1, 104, 1, BS).await.unwrap(),
        back[4 * 4096..5 * 4096]
    );
    ini.deallocate(1, &[(0, 8), (500, 10)]).await.unwrap();
    // Errors: out of range, unknown namespace, broadcast flush works.
    assert_eq!(
        status_of(ini.read(1, 1020, 8, BS).await),
        Status::LBA_OUT_OF_RANGE
    );
    assert_eq!(
        status_of(
            ini.write(1, 1023, Bytes::from(vec![0; 8192]), BS, false)
                .await
        ),
        Status::LBA_OUT_OF_RANGE
    );
    assert_eq!(
        status_of(ini.deallocate(1, &[(1000, 100)]).await),
        Status::LBA_OUT_OF_RANGE
    );
    assert_eq!(status_of(ini.flush(7).await), Status::INVALID_NS);
    ini.flush(0xFFFF_FFFF).await.unwrap();
    // Write cache off: writes become write-through and still land.
    ini.set_features(0x06, 0).await.unwrap();
    ini.write(1, 7, block(0x5A), BS, false).await.unwrap();
    assert_eq!(std::fs::read(&r.path).unwrap()[7 * 4096], 0x5A);
}

// Multi-thread runtime: QD 1 commands take the block_in_place path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_flush_zeroes_dsm() {
    io_commands(false).await;
}

#[tokio::test]
async fn read_write_with_header_and_data_digests() {
    io_commands(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_queues_random_mixed_io_byte_for_byte() {
    const TASKS: usize = 64;
    const REGION: u64 = 16; // blocks each task owns
    let r = rig(TASKS as u64 * REGION, None).await;
    let mut hosts = Vec::new();
    for h in 0..2 {
        let mut cfg = host(&format!("h{h}"), 8);
        cfg.queue_depth = 16;
        hosts.push(Arc::new(
            Initiator::connect(r.target.local_addr(), cfg)
                .await
                .unwrap(),
        ));
    }
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let ini = hosts[t % 2].clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
            let base = t as u64 * REGION;
            let mut model = vec![0u8; (REGION * BS as u64) as usize];
            for _ in 0..40 {
                let off = rng.gen_range(0..REGION);
                let n = rng.gen_range(1..=(REGION - off).min(8)) as u32;
                let range = (off * BS as u64) as usize..((off + n as u64) * BS as u64) as usize;
                if rng.gen_bool(0.5) {
                    let data: Vec<u8> = (0..range.len()).map(|_| rng.gen()).collect();
                    model[range].copy_from_slice(&data);
                    ini.write(1, base + off, Bytes::from(data), BS, rng.gen_bool(0.1))
                        .await
                        .unwrap();
                } else {
                    let got = ini.read(1, base + off, n, BS).await.unwrap();
                    assert_eq!(got, model[range], "task {t} read mismatch");
                }
            }
            model
        }));
    }
    let mut whole = Vec::new();
    for t in tasks {
        whole.extend(t.await.unwrap());
    }
    hosts[0].flush(1).await.unwrap();
    assert_eq!(std::fs::read(&r.path).unwrap(), whole);
}

#[tokio::test]
async fn reservations_register_acquire_preempt_and_fence() {
    let r = rig(64, None).await;
    let addr = r.target.local_addr();
    let mds = Initiator::connect(addr, host("mds", 1)).await.unwrap();
    let client = Initiator::connect(addr, host("client", 1)).await.unwrap();
    let stranger = Initiator::connect(addr, host("stranger", 1)).await.unwrap();
    let (ka, kb) = (0xAAAA_u64, 0xBBBB_u64);
    let t = RType::EXCLUSIVE_ACCESS_REG_ONLY;
    mds.reservation_register(1, RegisterAction::Register, false, 0, ka)
        .await
        .unwrap();
    mds.reservation_acquire(1, AcquireAction::Acquire, t, ka, 0)
        .await
        .unwrap();
    client
        .reservation_register(1, RegisterAction::Register, false, 0, kb)
        .await
        .unwrap();
    // A registrant may do I/O; a non-registrant may not.
    client.write(1, 0, block(1), BS, false).await.unwrap();
    assert_conflict(stranger.read(1, 0, 1, BS).await);
    assert_conflict(stranger.write(1, 0, block(2), BS, false).await);
    // Conflicting registrant actions are refused.
    assert_conflict(
        client
            .reservation_register(1, RegisterAction::Register, false, 0, 0xCCCC)
            .await,
    );
    assert_conflict(
        client
            .reservation_acquire(1, AcquireAction::Acquire, t, kb, 0)
            .await,
    );
    assert_conflict(
        client
            .reservation_acquire(1, AcquireAction::Acquire, t, 0xDEAD, 0)
            .await,
    );
    assert_conflict(
        stranger
            .reservation_acquire(1, AcquireAction::Preempt, t, 0, ka)
            .await,
    );
    let rep = mds.reservation_report(1).await.unwrap();
    assert_eq!(rep.rtype, 4);
    assert_eq!(rep.registrants.len(), 2);
    assert!(rep.registrants.iter().any(|g| g.key == ka && g.holds));
    assert!(rep.registrants.iter().any(|g| g.key == kb && !g.holds));
    // Fence: preempt-and-abort the client's key; its I/O now conflicts.
    mds.reservation_acquire(1, AcquireAction::PreemptAndAbort, t, ka, kb)
        .await
        .unwrap();
    assert_conflict(client.write(1, 0, block(3), BS, false).await);
    assert_conflict(client.read(1, 0, 1, BS).await);
    assert_conflict(client.flush(1).await);
    assert_eq!(mds.read(1, 0, 1, BS).await.unwrap(), vec![1u8; 4096]);
    let rep = mds.reservation_report(1).await.unwrap();
    assert_eq!(rep.registrants.len(), 1);
    // Release with the wrong type, then properly; clear drops every registration.
    assert_eq!(
        status_of(
            mds.reservation_release(1, ReleaseAction::Release, RType::WRITE_EXCLUSIVE, ka)
                .await
        ),
        Status::INVALID_FIELD
    );
    mds.reservation_release(1, ReleaseAction::Release, t, ka)
        .await
        .unwrap();
    stranger.read(1, 0, 1, BS).await.unwrap();
    mds.reservation_release(1, ReleaseAction::Clear, RType(0), ka)
        .await
        .unwrap();
    assert!(mds
        .reservation_report(1)
        .await
        .unwrap()
        .registrants
        .is_empty());
    // Linux registers with CPTPL = 11b (persist through power loss): accepted, ignored.
    let mut reg = nvme_tcp::pdu::Sqe::new(0x0D);
    reg.set_nsid(1);
    reg.set_cdw(10, 3 << 30);
    let mut keys = vec![0u8; 16];
    keys[8..].copy_from_slice(&0x1234u64.to_le_bytes());
    let c = stranger
        .io_cmd_on(0, reg, Some(Bytes::from(keys)), 0)
        .await
        .unwrap();
    assert!(c.cqe.status.is_success(), "{:?}", c.cqe.status);
    assert_eq!(
        mds.reservation_report(1).await.unwrap().registrants[0].key,
        0x1234
    );
}

#[tokio::test]
async fn keep_alive_expiry_tears_the_controller_down() {
    let r = rig(64, None).await;
    let mut quiet = host("quiet", 1);
    quiet.kato_ms = 300;
    quiet.send_keep_alive = false;
    let mut chatty = host("chatty", 1);
    chatty.kato_ms = 2000; // sends every 1 s: survives a loaded machine
    let q = Initiator::connect(r.target.local_addr(), quiet)
        .await
        .unwrap();
    let c = Initiator::connect(r.target.local_addr(), chatty)
        .await
        .unwrap();
    assert_eq!(r.target.controller_count(), 2);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(
        q.read(1, 0, 1, BS).await.is_err(),
        "expired controller's queues are closed"
    );
    assert!(q.is_closed());
    c.read(1, 0, 1, BS).await.unwrap();
    assert_eq!(r.target.controller_count(), 1);
}

/// Traffic Based Keep Alive on the host (as Linux's `nvme_keep_alive_work`): our target sets
/// CTRATT.TBKAS, so while reads complete the initiator sends no Keep Alive and the controller
/// stays; once they stop, Keep Alives go every KATO/2 again. Counts, not timing: six periods
/// of reads would bring six Keep Alives without it, five idle periods bring about five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alives_pause_while_io_completes() {
    let r = rig(64, None).await;
    let t = &r.target;
    let mut cfg = host("tbkas-host", 1);
    cfg.kato_ms = 600; // a check every 300 ms
    let ini = Initiator::connect(t.local_addr(), cfg).await.unwrap();
    let keep_alives = || {
        t.command_stats()
            .commands
            .iter()
            .find(|c| (c.queue, c.opcode, c.status.as_str()) == ("admin", "keep_alive", "success"))
            .map_or(0, |c| c.count)
    };
    let k0 = keep_alives();
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_millis(1800) {
        ini.read(1, 0, 1, BS).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let during_io = keep_alives() - k0;
    assert!(
        during_io <= 2,
        "{during_io} Keep Alives while reads completed"
    );
    assert_eq!(t.controller_count(), 1, "torn down while its I/O flowed");
    let k1 = keep_alives();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let idle = keep_alives() - k1;
    assert!(idle >= 2, "{idle} Keep Alives in five idle periods");
    assert_eq!(t.controller_count(), 1);
}

#[tokio::test]
async fn connect_refusals() {
    let r = rig(64, Some(vec!["nqn.2014-08.org.nvmexpress:uuid:ok".into()])).await;
    let addr = r.target.local_addr();
    let mut wrong = host("ok", 1);
    wrong.subnqn = "nqn.2026-11.org.pnfsd:nope".into();
    match Initiator::connect(addr, wrong).await {
        Err(Error::ConnectRefused { status, iattr, ipo }) => {
            assert_eq!(
                (status, iattr, ipo),
                (Status::CONNECT_INVALID_PARAM, 1, 256)
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    match Initiator::connect(addr, host("bad", 1)).await {
        Err(Error::ConnectRefused { status, .. }) => {
            assert_eq!(status, Status::CONNECT_INVALID_HOST)
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let ok = Initiator::connect(addr, host("ok", 1)).await.unwrap();
    ok.read(1, 0, 1, BS).await.unwrap();
    // Shutdown closes everyone.
    r.target.shutdown();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(ok.read(1, 0, 1, BS).await.is_err());
}

#[tokio::test]
async fn in_process_mds_fences_a_remote_client() {
    let r = rig(64, None).await;
    let mds_id = [0xAD; 16];
    let t = RType::EXCLUSIVE_ACCESS_REG_ONLY;
    r.target
        .reservation_register(1, mds_id, RegisterAction::Register, false, 0, 0xA)
        .unwrap();
    r.target
        .reservation_acquire(1, mds_id, AcquireAction::Acquire, t, 0xA, 0)
        .unwrap();
    let client = Initiator::connect(r.target.local_addr(), host("c", 1))
        .await
        .unwrap();
    assert_conflict(client.write(1, 0, block(1), BS, false).await);
    client
        .reservation_register(1, RegisterAction::Register, false, 0, 0xC)
        .await
        .unwrap();
    client.write(1, 0, block(1), BS, false).await.unwrap();
    let gone = r
        .target
        .reservation_acquire(1, mds_id, AcquireAction::PreemptAndAbort, t, 0xA, 0xC)
        .unwrap();
    assert_eq!(gone.len(), 1);
    assert_conflict(client.write(1, 0, block(2), BS, false).await);
    let (rtype, regs) = r.target.reservation_state(1).unwrap();
    assert_eq!((rtype, regs.len()), (Some(t), 1));
    assert_eq!(
        r.target
            .reservation_register(9, mds_id, RegisterAction::Register, false, 0, 1),
        Err(Status::INVALID_NS)
    );
}
