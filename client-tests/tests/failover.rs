//! MDS failover on one external NVMe/TCP namespace (docs/ha.md): two `pnfsd serve`
//! processes with the same volume and their own node identity (host NQN, reservation key),
//! the SCSI layout offered so that the active MDS's reservation fences the old one. The
//! namespace's backing file and the target's reservation state are checked from outside the
//! servers.

use std::time::{Duration, Instant};

use client_tests::external::ExternalTarget;
use client_tests::harness::{after_grace, pattern};
use client_tests::ops::Stable;
use client_tests::{PnfsdProcess, Session};
use nvme_tcp::{InitiatorConfig, RType};

const HOST_A: &str = "nqn.2026-11.org.pnfsd:mds-a";
const HOST_B: &str = "nqn.2026-11.org.pnfsd:mds-b";
/// The SCSI layout: the reservation that fences an MDS and not the (registered) clients.
const NODE_A: &str = "layout_types = [\"block\", \"scsi\"]\nreservation_key = \"pnfsdMDA\"\n";
const NODE_B: &str = "layout_types = [\"block\", \"scsi\"]\nreservation_key = \"pnfsdMDB\"\n";

fn start(ext: &ExternalTarget, host: &str, node: &str, args: &[&str]) -> PnfsdProcess {
    ext.serve_as(&ext.url_as(host), node, args)
        .unwrap_or_else(|e| panic!("{host}: {e}"))
}

fn hostid(host: &str) -> [u8; 16] {
    InitiatorConfig::new(client_tests::external::NQN, host).hostid
}

fn holder(ext: &ExternalTarget) -> Option<[u8; 16]> {
    let (rtype, regs) = ext.target.reservation_state(1).unwrap();
    assert_eq!(rtype, Some(RType::EXCLUSIVE_ACCESS_REG_ONLY));
    // The holder of a REG_ONLY reservation is among the registrants; the MDS nodes are the
    // registrants with an MDS key.
    regs.iter()
        .find(|r| r.key >> 8 == u64::from_be_bytes(*b"pnfsdMD\0") >> 8)
        .map(|r| r.hostid)
}

/// Writes `data` to `name` in the root, FILE_SYNC: acknowledged means on the volume.
async fn write_acknowledged(s: &Session, name: &str, data: &[u8]) {
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, name, 0o644).await.unwrap();
    s.write_all(&f, 0, data, Stable::FileSync).await.unwrap();
    s.close_file(&f).await.unwrap();
}

async fn read_back(s: &Session, name: &str, len: usize) -> Vec<u8> {
    let fh = s.lookup_path(name).await.unwrap();
    let f = after_grace(|| s.open_fh(&fh)).await;
    s.read_all(&f, 0, len).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_mds_taken_over_exits_fenced_and_writes_nothing() {
    let ext = ExternalTarget::start();
    ext.mkfs();
    let mut a = start(&ext, HOST_A, NODE_A, &[]);
    let data = pattern(5, 256 << 10);
    {
        let s = Session::connect(a.addr()).await.unwrap();
        write_acknowledged(&s, "before", &data).await;
    }
    assert_eq!(holder(&ext), Some(hostid(HOST_A)));

    // A live holder: a second MDS without --takeover is refused, and changes nothing.
    let e = ext
        .serve_as(&ext.url_as(HOST_B), NODE_B, &[])
        .err()
        .expect("a second MDS started on a held volume");
    let msg = e.to_string();
    assert!(
        msg.contains("held by another MDS") && msg.contains("--takeover"),
        "{msg}"
    );
    assert_eq!(holder(&ext), Some(hostid(HOST_A)));

    // A pauses (a hung machine); B takes over.
    a.signal(client_tests::sys::SIGSTOP).unwrap();
    let mut b = start(&ext, HOST_B, NODE_B, &["--takeover"]);
    assert!(b.log_text().contains("takeover"), "{}", b.log_text());
    assert_eq!(holder(&ext), Some(hostid(HOST_B)));

    // Freeze B, resume A: whatever A tries, the volume does not change, and A exits.
    b.signal(client_tests::sys::SIGSTOP).unwrap();
    let image = std::fs::read(&ext.path).unwrap();
    a.signal(client_tests::sys::SIGCONT).unwrap();
    let st = a
        .wait_exit(Duration::from_secs(20))
        .unwrap()
        .expect("the fenced MDS kept running");
    assert!(!st.success(), "the fenced MDS exited 0:\n{}", a.log_text());
    assert!(a.log_text().contains("fenced"), "{}", a.log_text());
    assert!(!a.log_text().contains("panicked"), "{}", a.log_text());
    assert!(
        std::fs::read(&ext.path).unwrap() == image,
        "the fenced MDS wrote the volume"
    );
    b.signal(client_tests::sys::SIGCONT).unwrap();

    // B serves what A acknowledged, and new work.
    let s = Session::connect(b.addr()).await.unwrap();
    assert!(read_back(&s, "before", data.len()).await == data);
    let more = pattern(6, 64 << 10);
    after_grace(|| async {
        let root = s.lookup_path("").await?;
        s.create_file(&root, "after", 0o644).await
    })
    .await;
    s.write_all(
        &s.open_fh(&s.lookup_path("after").await.unwrap())
            .await
            .unwrap(),
        0,
        &more,
        Stable::FileSync,
    )
    .await
    .unwrap();
    assert!(b.terminate().unwrap().success(), "{}", b.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_mds_is_taken_over_with_every_acknowledged_write() {
    let ext = ExternalTarget::start();
    ext.mkfs();
    let mut a = start(&ext, HOST_A, NODE_A, &[]);
    let data = pattern(7, 1 << 20);
    {
        let s = Session::connect(a.addr()).await.unwrap();
        write_acknowledged(&s, "f", &data).await;
        s.mkdir(&s.lookup_path("").await.unwrap(), "d", 0o755)
            .await
            .unwrap();
    }
    a.kill().unwrap();
    let t0 = Instant::now();
    let b = start(&ext, HOST_B, NODE_B, &["--takeover"]);
    let s = Session::connect(b.addr()).await.unwrap();
    assert!(read_back(&s, "f", data.len()).await == data);
    assert!(s.lookup_path("d").await.is_ok());
    println!(
        "SIGKILL of A to the first READ on B: {} ms (grace 2 s)",
        t0.elapsed().as_millis()
    );
    assert!(
        b.log_text().contains("recovery after a crash"),
        "{}",
        b.log_text()
    );
    // A restarted A is now the one refused.
    let e = ext
        .serve_as(&ext.url_as(HOST_A), NODE_A, &[])
        .err()
        .expect("A restarted on B's volume");
    assert!(e.to_string().contains("pnfsdMDB"), "{e}");
}

#[test]
fn two_mds_started_at_once_only_one_serves() {
    let ext = ExternalTarget::start();
    ext.mkfs();
    let (ra, rb) = std::thread::scope(|s| {
        let a = s.spawn(|| ext.serve_as(&ext.url_as(HOST_A), NODE_A, &[]));
        let b = s.spawn(|| ext.serve_as(&ext.url_as(HOST_B), NODE_B, &[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(ra.is_ok() != rb.is_ok(), "both or neither served");
    let (winner, loser) = match (ra, rb) {
        (Ok(w), Err(l)) => ((w, HOST_A), l),
        (Err(l), Ok(w)) => ((w, HOST_B), l),
        _ => unreachable!(),
    };
    assert!(loser.to_string().contains("held by another MDS"), "{loser}");
    assert_eq!(holder(&ext), Some(hostid(winner.1)));
}

#[test]
fn takeover_with_the_block_layout_alone_is_refused() {
    let ext = ExternalTarget::start();
    ext.mkfs();
    let e = ext
        .serve_as(&ext.url_as(HOST_B), "", &["--takeover"])
        .err()
        .expect("--takeover without a fencing reservation");
    assert!(e.to_string().contains("SCSI layout"), "{e}");
    // Without the flag the block layout serves as before: no reservation is taken.
    let mut a = ext.serve_as(&ext.url_as(HOST_A), "", &[]).unwrap();
    assert_eq!(ext.target.reservation_state(1).unwrap().0, None);
    assert!(a.terminate().unwrap().success());
}
