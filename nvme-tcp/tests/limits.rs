//! The target's bounds under abuse (docs/nvme-tcp.md "Limits"): what a host leaves behind
//! when it goes, the controller and connection caps, the KATO cap, and the H2C data a queue
//! may be made to buffer.

mod common;
use bytes::Bytes;
use common::*;
use nvme_tcp::pdu::{sgl_id, DataPdu, FcType, Pdu, Sgl, Sqe};
use nvme_tcp::{Initiator, Limits, Status};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Feature Identifier of the Keep Alive Timer (NVMe Base 2.0 §5.27.1.12).
const FID_KATO: u8 = 0x0F;
const MAX_TRANSFER: usize = 512 * 1024;

async fn limit_rig(limits: Limits) -> Rig {
    rig_with(256, |cfg| cfg.limits = limits).await
}

async fn connect_status(s: &mut TcpStream, pdu: Vec<u8>) -> Status {
    s.write_all(&pdu).await.unwrap();
    match read_pdu(s).await {
        Pdu::CapsuleResp(cqe) => cqe.status,
        p => panic!("expected the Connect response, got {p:?}"),
    }
}

fn vm_rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Connect/close cycles with KATO 0xFFFFFFFF leave nothing behind: the controller and its
/// keep-alive timer go with the admin connection, not at KATO × 1.5 (a timer task kept
/// until then took RSS from 6.7 to 72 MB over 100,000 cycles). NVME_LIMITS_CYCLES sets the
/// count (default 3,000; the figure in docs/nvme-tcp.md is from 100,000).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_close_cycles_with_max_kato_leave_no_controller_or_timer() {
    let r = limit_rig(Limits::default()).await;
    let addr = r.target.local_addr();
    let cycles: usize = std::env::var("NVME_LIMITS_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let rss0 = vm_rss_kb();
    for i in 0..cycles {
        let mut s = raw(addr).await;
        let st = connect_status(
            &mut s,
            connect_pdu(0, 0xFFFF, u32::MAX, "nqn.x:cycler", [7; 16]),
        )
        .await;
        assert!(st.is_success(), "cycle {i}: {st}");
        drop(s);
        // Past a few hundred cycles the earlier controllers must already be gone.
        if i % 500 == 499 {
            let live = r.target.stats();
            assert!(
                live.keep_alive_timers < 64,
                "cycle {i}: {live:?} (timers outlive their controllers)"
            );
        }
    }
    let t = &r.target;
    eventually("no controller, timer or connection left", || {
        let s = t.stats();
        s.controllers == 0 && s.keep_alive_timers == 0 && s.connections == 0
    })
    .await;
    let rss1 = vm_rss_kb();
    eprintln!(
        "{cycles} connect/close cycles with KATO 0xFFFFFFFF: VmRSS {rss0} → {rss1} kB, {:?}",
        t.stats()
    );
}

/// A host asking for KATO 0xFFFFFFFF gets `max_kato_ms`, reported by Get Features, and is
/// torn down when it stays silent past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kato_is_capped_and_enforced() {
    let r = limit_rig(Limits {
        max_kato_ms: 300,
        ..Limits::default()
    })
    .await;
    let mut cfg = host("sleepy", 1);
    cfg.kato_ms = u32::MAX;
    cfg.send_keep_alive = false;
    let ini = Initiator::connect(r.target.local_addr(), cfg)
        .await
        .unwrap();
    assert_eq!(ini.get_features(FID_KATO, 0).await.unwrap(), 300);
    ini.set_features(FID_KATO, u32::MAX).await.unwrap();
    assert_eq!(ini.get_features(FID_KATO, 0).await.unwrap(), 300);
    // Silent from here: the capped KATO (× 1.5) ends the controller, not 75 days.
    let t = &r.target;
    eventually("silent host torn down", || t.controller_count() == 0).await;
    assert_eq!(t.stats().keep_alive_timers, 0);
}

/// A discovery controller asking for no keep-alive gets `max_kato_ms` (as nvmet gives its
/// discovery controllers 120 s): a silent discovery connection does not stay for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_discovery_controller_without_kato_goes() {
    let r = limit_rig(Limits {
        max_kato_ms: 200,
        ..Limits::default()
    })
    .await;
    let mut s = raw(r.target.local_addr()).await;
    let mut pdu_sqe = connect_pdu(0, 0xFFFF, 0, "nqn.x:disc", [3; 16]);
    // Point the Connect at the discovery subsystem: SUBNQN at 256 of the data (72 + 256).
    let nqn = nvme_tcp::DISCOVERY_NQN.as_bytes();
    let at = 72 + 256;
    pdu_sqe[at..at + 256].fill(0);
    pdu_sqe[at..at + nqn.len()].copy_from_slice(nqn);
    assert!(connect_status(&mut s, pdu_sqe).await.is_success());
    assert_eq!(r.target.stats().keep_alive_timers, 1);
    let t = &r.target;
    eventually("silent discovery controller torn down", || {
        t.controller_count() == 0
    })
    .await;
    // Its connection closes with it.
    let mut b = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await;
    assert!(
        matches!(n, Ok(Ok(0)) | Ok(Err(_))),
        "connection closed: {n:?}"
    );
}

/// `max_controllers_per_host` and `max_controllers` refuse the next Connect with Connect
/// Controller Busy, and a controller that goes makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_caps_refuse_the_next_connect_with_controller_busy() {
    let r = limit_rig(Limits {
        max_controllers: 3,
        max_controllers_per_host: 2,
        ..Limits::default()
    })
    .await;
    let addr = r.target.local_addr();
    let busy = |e: nvme_tcp::Error| match e {
        nvme_tcp::Error::ConnectRefused { status, .. } => status,
        e => panic!("expected a refused Connect, got {e}"),
    };
    let a1 = Initiator::connect(addr, host("a", 0)).await.unwrap();
    let _a2 = Initiator::connect(addr, host("a", 0)).await.unwrap();
    let e = Initiator::connect(addr, host("a", 0)).await.err().unwrap();
    assert_eq!(busy(e), Status::CONNECT_CTRL_BUSY, "third of host a");
    let _b = Initiator::connect(addr, host("b", 0)).await.unwrap();
    let e = Initiator::connect(addr, host("c", 0)).await.err().unwrap();
    assert_eq!(busy(e), Status::CONNECT_CTRL_BUSY, "fourth in all");
    assert_eq!(r.target.stats().connects_refused, 2);
    a1.disconnect().await.unwrap();
    let t = &r.target;
    eventually("a's first controller gone", || t.controller_count() == 2).await;
    Initiator::connect(addr, host("c", 0)).await.unwrap();
}

/// Past `max_connections` a new connection is closed at accept, before its ICReq is read;
/// one that goes makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap_closes_the_next_connection_at_accept() {
    let r = limit_rig(Limits {
        max_connections: 3,
        ..Limits::default()
    })
    .await;
    let addr = r.target.local_addr();
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(raw(addr).await);
    }
    let mut over = TcpStream::connect(addr).await.unwrap();
    let _ = over.write_all(&[0u8; 128]).await;
    let mut b = [0u8; 128];
    let n = tokio::time::timeout(Duration::from_secs(5), over.read(&mut b)).await;
    assert!(
        matches!(n, Ok(Ok(0)) | Ok(Err(_))),
        "closed without an ICResp: {n:?}"
    );
    assert_eq!(r.target.stats().connections_refused, 1);
    assert_eq!(r.target.stats().connections, 3);
    drop(open.pop());
    let t = &r.target;
    eventually("a slot freed", || t.stats().connections == 2).await;
    raw(addr).await;
}

/// A host that is sent an R2T and never sends the data cannot make the queue solicit more
/// than `max_h2c_buffered_per_queue`: further R2Ts wait until the transfer completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r2ts_wait_while_a_queue_holds_its_h2c_bound() {
    let r = limit_rig(Limits {
        max_h2c_buffered_per_queue: MAX_TRANSFER,
        ..Limits::default()
    })
    .await;
    let addr = r.target.local_addr();
    // The initiator creates and enables the controller; the I/O queue is ours, raw.
    let cfg = host("withholder", 0);
    let ini = Initiator::connect(addr, cfg.clone()).await.unwrap();
    let mut q = raw(addr).await;
    let st = connect_status(
        &mut q,
        connect_pdu(1, ini.cntlid(), 0, &cfg.hostnqn, cfg.hostid),
    )
    .await;
    assert!(st.is_success(), "{st}");
    let write = |cid: u16, len: u32| {
        let mut s = Sqe::new(0x01);
        s.set_cid(cid);
        s.set_nsid(1);
        s.set_cdw(12, len / BS - 1);
        s.set_sgl(Sgl {
            addr: 0,
            len,
            id: sgl_id::TRANSPORT,
        });
        enc(&Pdu::CapsuleCmd(s, Bytes::new()))
    };
    let flush = |cid: u16| {
        let mut s = Sqe::new(0x00);
        s.set_cid(cid);
        s.set_nsid(1);
        enc(&Pdu::CapsuleCmd(s, Bytes::new()))
    };
    // A: the whole bound. B: 4 KiB more. C: a Flush, whose answer comes after any R2T the
    // target sent for B (PDUs are handled in order).
    q.write_all(&write(10, MAX_TRANSFER as u32)).await.unwrap();
    q.write_all(&write(11, BS)).await.unwrap();
    q.write_all(&flush(12)).await.unwrap();
    let mut r2ts = Vec::new();
    loop {
        match read_pdu(&mut q).await {
            Pdu::R2t(t) => r2ts.push(t),
            Pdu::CapsuleResp(c) if c.cid == 12 => break,
            p => panic!("unexpected {p:?}"),
        }
    }
    assert_eq!(r2ts.len(), 1, "only A solicited: {r2ts:?}");
    assert_eq!((r2ts[0].cccid, r2ts[0].r2tl as usize), (10, MAX_TRANSFER));
    // Half of A's data: still nothing for B.
    let half = MAX_TRANSFER / 2;
    let h2c = |datao: usize, len: usize, last: bool| {
        enc(&Pdu::H2cData(DataPdu {
            cccid: 10,
            ttag: r2ts[0].ttag,
            datao: datao as u32,
            last,
            success: false,
            data: Bytes::from(vec![0xAB; len]),
        }))
    };
    // In MAXH2CDATA (128 KiB) pieces.
    const PIECE: usize = 128 * 1024;
    for off in (0..half).step_by(PIECE) {
        q.write_all(&h2c(off, PIECE, false)).await.unwrap();
    }
    q.write_all(&flush(13)).await.unwrap();
    match read_pdu(&mut q).await {
        Pdu::CapsuleResp(c) => assert_eq!(c.cid, 13, "no R2T for B yet"),
        p => panic!("unexpected {p:?}"),
    }
    // The rest of A: A completes, and B's R2T goes out.
    for off in (half..MAX_TRANSFER).step_by(PIECE) {
        let last = off + PIECE == MAX_TRANSFER;
        q.write_all(&h2c(off, PIECE, last)).await.unwrap();
    }
    let (mut a_done, mut b_r2t) = (false, None);
    while !(a_done && b_r2t.is_some()) {
        match read_pdu(&mut q).await {
            Pdu::CapsuleResp(c) if c.cid == 10 => {
                assert!(c.status.is_success());
                a_done = true;
            }
            Pdu::R2t(t) if t.cccid == 11 => b_r2t = Some(t),
            p => panic!("unexpected {p:?}"),
        }
    }
    let t = b_r2t.unwrap();
    assert_eq!(t.r2tl, BS);
    q.write_all(&enc(&Pdu::H2cData(DataPdu {
        cccid: 11,
        ttag: t.ttag,
        datao: 0,
        last: true,
        success: false,
        data: Bytes::from(vec![0xCD; BS as usize]),
    })))
    .await
    .unwrap();
    match read_pdu(&mut q).await {
        Pdu::CapsuleResp(c) => assert_eq!((c.cid, c.status.is_success()), (11, true)),
        p => panic!("unexpected {p:?}"),
    }
}

/// The admin queue keeps SQ flow control too (its pending AERs hold slots): a host past its
/// SQSIZE + 1 there is cut off, as on I/O queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_queue_overrun_is_cut_off() {
    let r = limit_rig(Limits::default()).await;
    let mut s = raw(r.target.local_addr()).await;
    // SQSIZE 1: two commands outstanding at most (the SQE is at 8 of the PDU).
    let mut connect = connect_pdu(0, 0xFFFF, 0, "nqn.x:aer-flood", [9; 16]);
    connect[8 + 44..8 + 46].copy_from_slice(&1u16.to_le_bytes());
    assert!(connect_status(&mut s, connect).await.is_success());
    let mut cc = Sqe::fabrics(FcType::PROPERTY_SET);
    cc.set_cid(2);
    cc.set_cdw(11, 0x14);
    cc.set_cdw(12, 1 | (6 << 16) | (4 << 20));
    s.write_all(&enc(&Pdu::CapsuleCmd(cc, Bytes::new())))
        .await
        .unwrap();
    assert!(matches!(read_pdu(&mut s).await, Pdu::CapsuleResp(c) if c.status.is_success()));
    // Two AERs stay pending and fill the SQ; a Keep Alive is a third outstanding command.
    let mut burst = Vec::new();
    for (cid, opc) in [(100u16, 0x0C), (101, 0x0C), (102, 0x18)] {
        let mut a = Sqe::new(opc);
        a.set_cid(cid);
        burst.extend(enc(&Pdu::CapsuleCmd(a, Bytes::new())));
    }
    s.write_all(&burst).await.unwrap();
    match read_pdu(&mut s).await {
        Pdu::C2hTermReq(_) => {}
        p => panic!("expected a C2HTermReq, got {p:?}"),
    }
    let mut b = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await;
    assert!(
        matches!(n, Ok(Ok(0)) | Ok(Err(_))),
        "connection closed: {n:?}"
    );
    let t = &r.target;
    eventually("its controller gone", || t.controller_count() == 0).await;
}

/// A connection that sends no ICReq, or no Connect after its ICReq, is closed at
/// `connect_timeout_ms` and counted; a host that connected keeps its connections past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_without_connect_are_closed_at_the_connect_timeout() {
    let r = limit_rig(Limits {
        connect_timeout_ms: 300,
        ..Limits::default()
    })
    .await;
    let addr = r.target.local_addr();
    let ini = Initiator::connect(addr, host("prompt", 1)).await.unwrap();
    let closed = |mut s: TcpStream| async move {
        let mut b = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await;
        assert!(matches!(n, Ok(Ok(0)) | Ok(Err(_))), "closed: {n:?}");
    };
    // Silent from the start.
    closed(TcpStream::connect(addr).await.unwrap()).await;
    assert_eq!(r.target.stats().connect_timeouts, 1);
    // ICReq, then nothing.
    closed(raw(addr).await).await;
    assert_eq!(r.target.stats().connect_timeouts, 2);
    // A refused Connect does not stop the clock either.
    let mut s = raw(addr).await;
    let st = connect_status(&mut s, connect_pdu(1, 0x7777, 0, "nqn.x:y", [5; 16])).await;
    assert!(!st.is_success());
    closed(s).await;
    assert_eq!(r.target.stats().connect_timeouts, 3);
    // The host that connected at once is still served, well past the timeout.
    tokio::time::sleep(Duration::from_millis(600)).await;
    ini.write(1, 0, Bytes::from(vec![7u8; BS as usize]), BS, false)
        .await
        .unwrap();
    assert_eq!(r.target.controller_count(), 1);
    assert_eq!(r.target.stats().connect_timeouts, 3);
}

/// Set Features Keep Alive Timer on a controller that connected with KATO 0 starts the timer
/// (capped), and one that lowers KATO takes effect at once, not at the old deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_features_kato_starts_and_restarts_the_timer() {
    let r = limit_rig(Limits {
        max_kato_ms: 300,
        ..Limits::default()
    })
    .await;
    let t = &r.target;
    let mut cfg = host("late-kato", 0);
    cfg.kato_ms = 0;
    cfg.send_keep_alive = false;
    let ini = Initiator::connect(t.local_addr(), cfg).await.unwrap();
    assert_eq!(t.stats().keep_alive_timers, 0);
    ini.set_features(FID_KATO, u32::MAX).await.unwrap();
    assert_eq!(ini.get_features(FID_KATO, 0).await.unwrap(), 300);
    assert_eq!(t.stats().keep_alive_timers, 1);
    eventually("silent host torn down after Set Features", || {
        t.controller_count() == 0
    })
    .await;
    assert_eq!(t.stats().keep_alive_timers, 0);
    drop(ini);
    // KATO 100 s at Connect (cap raised), then 200 ms: gone in ~300 ms, not 150 s.
    let r = limit_rig(Limits::default()).await;
    let t = &r.target;
    let mut cfg = host("lowered-kato", 0);
    cfg.kato_ms = 100_000;
    cfg.send_keep_alive = false;
    let ini = Initiator::connect(t.local_addr(), cfg).await.unwrap();
    ini.set_features(FID_KATO, 200).await.unwrap();
    assert_eq!(t.stats().keep_alive_timers, 1);
    eventually("silent host torn down at the lowered KATO", || {
        t.controller_count() == 0
    })
    .await;
    // KATO 0 by Set Features ends the timer, and the controller stays.
    let mut cfg = host("no-kato", 0);
    cfg.kato_ms = 5_000;
    cfg.send_keep_alive = false;
    let ini2 = Initiator::connect(t.local_addr(), cfg).await.unwrap();
    ini2.set_features(FID_KATO, 0).await.unwrap();
    eventually("timer ended", || t.stats().keep_alive_timers == 0).await;
    assert_eq!(t.controller_count(), 1);
    drop(ini);
}

/// Traffic Based Keep Alive (NVMe Base 2.0 §3.9.5): Identify Controller says so (CTRATT bit
/// 6), and a host that sends no Keep Alive but keeps its I/O queue busy keeps its controller
/// for many KATO periods; once its I/O stops, the timer ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn io_traffic_keeps_the_controller_alive() {
    let r = limit_rig(Limits::default()).await;
    let t = &r.target;
    let mut cfg = host("tbkas", 1);
    cfg.kato_ms = 200;
    cfg.send_keep_alive = false;
    let ini = Initiator::connect(t.local_addr(), cfg).await.unwrap();
    let id = ini.identify_raw(1, 0).await.unwrap();
    let ctratt = u32::from_le_bytes(id[96..100].try_into().unwrap());
    assert_eq!(ctratt & (1 << 6), 1 << 6, "CTRATT {ctratt:#x}: no TBKAS");
    // 1.5 s of reads: five times KATO × 1.5, with no Keep Alive sent.
    let t0 = std::time::Instant::now();
    let mut reads = 0u32;
    while t0.elapsed() < Duration::from_millis(1500) {
        ini.read(1, u64::from(reads % 256), 1, 4096)
            .await
            .unwrap_or_else(|e| panic!("read {reads} after {:?}: {e}", t0.elapsed()));
        reads += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(t.controller_count(), 1, "torn down while its I/O flowed");
    eventually("a silent host torn down", || t.controller_count() == 0).await;
    drop(ini);
}
