//! End-to-end smoke test of the public API on the crash device and on a file.
mod common;

use std::sync::Arc;

use common::*;
use metalog::{BlockDev, Csn, FileDev};

#[test]
fn commit_force_crash_replay() {
    let dev = crash_dev(1 << 20, 1, 0, 256 * 1024);
    let (log, got) = mount_collect(dev.clone(), 0, 256 * 1024).unwrap();
    assert!(got.is_empty());
    let c1 = log.commit(tx(vec![kv(1, 10)], &[(7, false)])).unwrap();
    let c1b = log.commit(tx(vec![kv(2, 20)], &[(7, true)])).unwrap();
    assert_eq!(c1, c1b);
    assert_eq!(log.object_seqs(7), (Some(c1), Some(c1)));
    let f = log.force_object(7, true).unwrap();
    assert!(f.wrote_log);
    assert_eq!(log.object_seqs(7), (None, None));
    assert!(!log.force_seq(c1).unwrap().wrote_log);
    let c2 = log.commit(tx(vec![kv(3, 30)], &[(7, true)])).unwrap();
    assert!(c2 > c1);
    // Timestamp-only: datasync_seq stays cleared, a datasync force does nothing.
    assert_eq!(log.object_seqs(7), (Some(c2), None));
    assert!(!log.force_object(7, true).unwrap().wrote_log);
    let img = dev.crash();
    drop(log);
    let (_log2, got) = mount_collect(Arc::new(img), 0, 256 * 1024).unwrap();
    let keys: Vec<_> = got.iter().map(|(c, _)| *c).collect();
    assert!(keys.len() >= 2 && keys[..2] == [c1, c1]);
    assert!(got.iter().all(|(c, _)| *c <= c2));
}

#[test]
fn clean_unmount_then_mount_on_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("log");
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::create(&p, 1 << 20).unwrap());
    metalog::Log::format(dev.clone(), 4096, 512 * 1024, UUID).unwrap();
    let (log, _) = mount_collect(dev.clone(), 4096, 512 * 1024).unwrap();
    let c = log.commit(tx(vec![kv(1, 1)], &[])).unwrap();
    log.force_seq(c).unwrap();
    log.unmount().unwrap();
    assert!(log.force_all().is_err());
    drop(log);
    let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(&p).unwrap());
    let (log, got) = mount_collect(dev, 4096, 512 * 1024).unwrap();
    // No write-back registered: the unmounted log still replays what was never written back.
    assert_eq!(got.len(), 1);
    assert!(log.last_committed() >= Csn(c.0));
}

/// Forces this test's observer saw (a `fn` pointer cannot capture).
static OBSERVED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn count_force(_: std::time::Duration) {
    OBSERVED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

#[test]
fn the_force_observer_sees_every_force_once() {
    let dev = crash_dev(1 << 20, 2, 0, 256 * 1024);
    let (log, _) = mount_collect(dev, 0, 256 * 1024).unwrap();
    assert!(log.set_force_observer(count_force));
    assert!(!log.set_force_observer(count_force), "set once");
    let before = log.counters().forces;
    let c = log.commit(tx(vec![kv(1, 1)], &[])).unwrap();
    log.force_seq(c).unwrap();
    // Already durable: still a force, and still observed (a near-zero latency).
    log.force_seq(c).unwrap();
    log.force_all().unwrap();
    let forces = log.counters().forces - before;
    assert_eq!(forces, 3);
    assert_eq!(OBSERVED.load(std::sync::atomic::Ordering::Relaxed), forces);
}
