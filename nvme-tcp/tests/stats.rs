//! The target's counters and controller list (docs/nvme-tcp.md "Counters") against what an
//! initiator did.

mod common;
use bytes::Bytes;
use common::*;
use nvme_tcp::Initiator;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_stats_and_controllers_match_what_the_host_did() {
    let r = rig(64, None).await;
    let t = &r.target;
    let cfg = host("counted", 2);
    let ini = Initiator::connect(t.local_addr(), cfg.clone())
        .await
        .unwrap();
    let before = t.command_stats();
    for lba in [0u64, 8] {
        ini.write(1, lba, Bytes::from(vec![1u8; 2 * BS as usize]), BS, false)
            .await
            .unwrap();
    }
    ini.read(1, 0, 1, BS).await.unwrap();
    // Past the end of the namespace (64 blocks): LBA Out of Range (SCT 0, SC 80h).
    assert!(ini.read(1, 64, 1, BS).await.is_err());
    let s = t.command_stats();
    let count = |s: &nvme_tcp::CommandStats, q: &str, op: &str, st: &str| {
        s.commands
            .iter()
            .find(|c| c.queue == q && c.opcode == op && c.status == st)
            .map_or(0, |c| c.count)
    };
    assert_eq!(
        count(&s, "io", "write", "success") - count(&before, "io", "write", "success"),
        2
    );
    assert_eq!(
        count(&s, "io", "read", "success") - count(&before, "io", "read", "success"),
        1
    );
    assert_eq!(count(&s, "io", "read", "sct0_sc80"), 1);
    assert_eq!(s.write_bytes - before.write_bytes, 4 * BS as u64);
    assert_eq!(s.read_bytes - before.read_bytes, BS as u64);
    // The connection's own commands: one Connect per queue, Identify on the admin queue.
    assert_eq!(count(&s, "admin", "connect", "success"), 1);
    assert_eq!(count(&s, "io", "connect", "success"), 2);
    assert!(count(&s, "admin", "identify", "success") >= 1);
    let c = t.controllers();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].cntlid, ini.cntlid());
    assert_eq!(c[0].host_nqn, cfg.hostnqn);
    assert_eq!(c[0].host_addr.to_string(), "127.0.0.1");
    assert_eq!(
        (c[0].io_queues, c[0].kato_ms, c[0].discovery),
        (2, cfg.kato_ms, false)
    );
    // The counts stay when the queues go.
    drop(ini);
    let t2 = t.clone();
    for _ in 0..500 {
        if t2.controller_count() == 0 && t2.stats().connections == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(t.controllers().len(), 0);
    assert_eq!(t.command_stats().write_bytes, s.write_bytes);
    assert_eq!(
        count(&t.command_stats(), "io", "write", "success"),
        count(&s, "io", "write", "success")
    );
}

/// Reservation Conflicts are counted per namespace (`Target::namespace_stats`): the
/// writes and the Flush of a host that WRITE EXCLUSIVE shuts out, and its refused Acquire;
/// its reads pass and are not counted, nor are the holder's commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservation_conflicts_are_counted_per_namespace() {
    use nvme_tcp::{AcquireAction, RType, RegisterAction};
    let r = rig(64, None).await;
    let t = &r.target;
    let holder = Initiator::connect(t.local_addr(), host("holder", 1))
        .await
        .unwrap();
    let other = Initiator::connect(t.local_addr(), host("other", 1))
        .await
        .unwrap();
    holder
        .reservation_register(1, RegisterAction::Register, false, 0, 7)
        .await
        .unwrap();
    holder
        .reservation_acquire(1, AcquireAction::Acquire, RType::WRITE_EXCLUSIVE, 7, 0)
        .await
        .unwrap();
    let block = || Bytes::from(vec![3u8; BS as usize]);
    holder.write(1, 0, block(), BS, false).await.unwrap();
    assert_eq!(t.namespace_stats()[0].reservation_conflicts, 0);
    for lba in [1, 2] {
        assert!(other.write(1, lba, block(), BS, false).await.is_err());
    }
    assert!(other.flush(1).await.is_err());
    other.read(1, 0, 1, BS).await.unwrap();
    assert!(other
        .reservation_acquire(1, AcquireAction::Acquire, RType::WRITE_EXCLUSIVE, 9, 0)
        .await
        .is_err());
    let s = t.namespace_stats();
    assert_eq!(
        s,
        vec![nvme_tcp::NamespaceStats {
            nsid: 1,
            reservation_conflicts: 4
        }]
    );
}
