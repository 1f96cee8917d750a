//! A host that sends Reads and never reads the answers (docs/nvme-tcp.md "Limits",
//! `max_send_queued_per_connection`): the target stops taking commands from that socket at
//! the bound instead of queuing answers without end, and resumes once the host reads. Its
//! own test binary: it measures the process's RSS, and switches io_uring off for its first
//! half (`NVME_TCP_NO_URING`, read at each connection), which no other test may see.

mod common;
use bytes::Bytes;
use common::*;
use nvme_tcp::pdu::{sgl_id, Pdu, Sgl, Sqe};
use nvme_tcp::{Initiator, Limits};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

const READ_LEN: u32 = 512 * 1024;
/// 400 Reads of 512 KiB: 200 MiB of answers. More than the SQ window (128) without reading
/// a single SQHD: a host past the protocol, which the task path reads one PDU at a time
/// and answers as it goes. The queue thread parses everything buffered in one round, so
/// after it resumes it counts such a host's backlog as one overrun and cuts it off (as it
/// must); it is given a host that keeps within the window: 128 Reads, 64 MiB.
const READS_TASK: u16 = 400;
const READS_THREAD: u16 = 128;
/// Sent in bursts, each within the SQ window (SQSIZE 127), as the target answers them.
const BURST: u16 = 16;
const BOUND: usize = 1 << 20;
/// The test fails if the process grows by more: the bound, the reads in flight (one burst,
/// 8 MiB) and the allocator's slack.
const MAX_GROWTH_KB: u64 = 32 * 1024;

fn vm_rss_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn read_cmd(cid: u16) -> Vec<u8> {
    let mut s = Sqe::new(0x02);
    s.set_cid(cid);
    s.set_nsid(1);
    s.set_cdw(12, READ_LEN / BS - 1);
    s.set_sgl(Sgl {
        addr: 0,
        len: READ_LEN,
        id: sgl_id::TRANSPORT,
    });
    enc(&Pdu::CapsuleCmd(s, Bytes::new()))
}

/// Returns the RSS growth (kB) while the host does not read.
async fn unread_answers_stay_bounded(path: &str, reads: u16) -> u64 {
    let r = rig_with(2048, |cfg| {
        cfg.limits = Limits {
            max_send_queued_per_connection: BOUND,
            ..Limits::default()
        }
    })
    .await;
    let addr = r.target.local_addr();
    let cfg = host(path, 0);
    let ini = Initiator::connect(addr, cfg.clone()).await.unwrap();
    let mut q = raw(addr).await;
    let pdu = connect_pdu_sq(1, ini.cntlid(), 0, &cfg.hostnqn, cfg.hostid, 127);
    q.write_all(&pdu).await.unwrap();
    match read_pdu(&mut q).await {
        Pdu::CapsuleResp(c) => assert!(c.status.is_success(), "{}", c.status),
        p => panic!("expected the Connect response, got {p:?}"),
    }
    let before = vm_rss_kb();
    // At most 400 × 72 bytes of commands: the socket buffers take them all, the writes never wait.
    for b in (0..reads).step_by(BURST as usize) {
        let burst: Vec<u8> = (b..(b + BURST).min(reads)).flat_map(read_cmd).collect();
        q.write_all(&burst).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Give the target time to take whatever it would take (unbounded, it reads 200 MiB of
    // answers into memory in well under a second); the highest RSS counts.
    let mut growth = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        growth = growth.max(vm_rss_kb().saturating_sub(before));
    }
    // The host reads now: every Read is answered, whole and successful (the target held
    // the rest of the commands back; it dropped neither them nor the connection).
    let mut answered = 0;
    while answered < reads {
        let p = tokio::time::timeout(Duration::from_secs(20), read_pdu(&mut q))
            .await
            .expect("answers resume once the host reads");
        match p {
            Pdu::C2hData(d) => assert_eq!(d.data.len(), READ_LEN as usize),
            Pdu::CapsuleResp(c) => {
                assert!(c.status.is_success(), "{}", c.status);
                answered += 1;
            }
            p => panic!("{path}: unexpected {p:?}"),
        }
    }
    drop(ini);
    growth
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_answers_stop_the_queue_at_the_send_bound() {
    // The tokio-task path first (io_uring off), then the queue-thread path.
    std::env::set_var("NVME_TCP_NO_URING", "1");
    let task = unread_answers_stay_bounded("task-path", READS_TASK).await;
    std::env::remove_var("NVME_TCP_NO_URING");
    let thread = unread_answers_stay_bounded("thread-path", READS_THREAD).await;
    println!("RSS growth while the host did not read: task path {task} kB, queue thread {thread} kB (bound {} kB)", BOUND / 1024);
    assert!(task < MAX_GROWTH_KB, "task path grew {task} kB");
    assert!(thread < MAX_GROWTH_KB, "queue-thread path grew {thread} kB");
}
