//! Targeted tests of the log: bad CRC in the middle and at the end, torn last
//! record, wrap-around, log full, I/O errors (the log shuts down), clean unmount → O(1) mount,
//! plus the flush rules, intents, multi-record checkpoints and the background force.
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use metalog::{
    BlockDev, CrashDev, Csn, FlushSeq, Item, Log, LogError, LogOptions, Transaction, Writeback,
};

const LEN: u64 = 128 * 1024;

fn keys(got: &Replayed) -> Vec<u64> {
    got.iter()
        .filter_map(|(_, it)| match it {
            Item::Opaque { kind: 1, key, .. } => bytecodec::get_u64_le(key, 0).ok(),
            _ => None,
        })
        .collect()
}

/// Commit and force `n` one-item checkpoints (keys 0..n); returns the device.
fn forced_checkpoints(n: u64) -> Arc<CrashDev> {
    let dev = crash_dev(LEN, 3, 0, LEN);
    let (log, _) = mount_collect(dev.clone(), 0, LEN).unwrap();
    for k in 0..n {
        let c = log.commit(tx(vec![kv(k, k)], &[])).unwrap();
        log.force_seq(c).unwrap();
    }
    drop(log);
    dev
}

/// Physical offset of the record holding checkpoint `i` (one 4 KiB record each, after the
/// format's unmount record at LSN 0; the superblock is block 0 of the region).
fn rec_off(i: u64) -> usize {
    (4096 + 4096 * (i + 1)) as usize
}

#[test]
fn bad_crc_in_the_middle_stops_replay_there() {
    let dev = forced_checkpoints(6);
    let mut img = dev.crash().image();
    img[rec_off(3) + 70] ^= 0xff;
    let (_l, got) = mount_collect(Arc::new(CrashDev::from_image(img, 1)), 0, LEN).unwrap();
    assert_eq!(keys(&got), vec![0, 1, 2]);
}

#[test]
fn bad_crc_at_the_end_drops_only_the_last() {
    let dev = forced_checkpoints(6);
    let mut img = dev.crash().image();
    img[rec_off(5) + 70] ^= 0xff;
    let (_l, got) = mount_collect(Arc::new(CrashDev::from_image(img, 1)), 0, LEN).unwrap();
    assert_eq!(keys(&got), vec![0, 1, 2, 3, 4]);
    // Header corruption too (the CRC covers the header).
    let mut img = dev.crash().image();
    img[rec_off(5) + 33] ^= 1;
    let (_l, got) = mount_collect(Arc::new(CrashDev::from_image(img, 1)), 0, LEN).unwrap();
    assert_eq!(keys(&got), vec![0, 1, 2, 3, 4]);
}

#[test]
fn torn_last_record_is_never_half_replayed() {
    let (mut whole, mut none) = (0, 0);
    for seed in 0..60 {
        let dev = crash_dev(LEN, seed, 0, LEN);
        let (log, _) = mount_collect(dev.clone(), 0, LEN).unwrap();
        let c = log.commit(tx(vec![kv(0, 0)], &[])).unwrap();
        log.force_seq(c).unwrap();
        // A 3-block checkpoint whose flush fails: its writes sit in the cache and tear.
        let big: Vec<Item> = (1..=40).map(|k| kv(k, k)).collect();
        let pad = Item::Opaque {
            kind: 2,
            key: vec![1],
            value: Some(vec![7; 9000]),
        };
        let c = log.commit(tx([big, vec![pad]].concat(), &[])).unwrap();
        dev.fail_next_flush();
        assert!(matches!(log.force_seq(c), Err(LogError::Io(_))));
        let img = dev.crash();
        drop(log);
        let (_l, got) = mount_collect(Arc::new(img), 0, LEN).unwrap();
        match keys(&got).len() {
            1 => none += 1,
            41 => whole += 1,
            n => panic!("seed {seed}: half-replayed checkpoint ({n} keys)"),
        }
    }
    assert!(none > 0, "tearing never lost the checkpoint");
    let _ = whole;
}

/// A write-back that has nothing to write: every change is "durable outside the log" once
/// the log has it (enough to exercise tail movement).
struct NullStore(Mutex<Option<Arc<Log>>>);

impl Writeback for NullStore {
    fn write_back(&self) -> Result<Csn, String> {
        let log = self.0.lock().unwrap().clone().ok_or("unmounted")?;
        let c = log.last_committed();
        log.force_seq(c).map_err(|e| e.to_string())?;
        Ok(c)
    }
}

#[test]
fn wrap_around_keeps_forced_commits_recoverable() {
    let len = 20 * 4096;
    let dev = crash_dev(len, 5, 0, len);
    let (log, _) = mount_collect(dev.clone(), 0, len).unwrap();
    let store = Arc::new(NullStore(Mutex::new(Some(log.clone()))));
    let wb: Arc<dyn Writeback> = store.clone();
    log.set_writeback(Arc::downgrade(&wb));
    let mut last = Csn(0);
    for k in 0..200 {
        last = log.commit(tx(vec![kv(k, k)], &[])).unwrap();
        log.force_seq(last).unwrap();
    }
    let (tail, head) = log.tail_head();
    assert!(head.0 > 3 * len, "log did not wrap: head {head:?}");
    assert!(tail.0 > 0);
    assert!(log.counters().writebacks > 0);
    let img = dev.crash();
    *store.0.lock().unwrap() = None;
    drop(log);
    let (log2, got) = mount_collect(Arc::new(img), 0, len).unwrap();
    // Everything before the tail was written back; what is replayed is a suffix ending in the
    // last forced commit.
    let ks = keys(&got);
    assert_eq!(ks.last(), Some(&199));
    assert!(ks.windows(2).all(|w| w[1] == w[0] + 1));
    assert!(log2.last_committed() >= last);
}

#[test]
fn log_full_without_writeback_fails_and_with_writeback_waits() {
    let len = 20 * 4096;
    let dev = crash_dev(len, 6, 0, len);
    let (log, _) = mount_collect(dev.clone(), 0, len).unwrap();
    let mut res = Ok(Csn(0));
    for k in 0..100 {
        res = log.commit(tx(vec![kv(k, k)], &[]));
        if res.is_err() {
            break;
        }
        log.force_seq(res.clone().unwrap()).unwrap();
    }
    assert_eq!(res, Err(LogError::NoSpace));
    // Too big for any log: NoSpace at once rather than a wait.
    let huge = Item::Opaque {
        kind: 1,
        key: vec![],
        value: Some(vec![0; len as usize]),
    };
    assert_eq!(log.commit(tx(vec![huge], &[])), Err(LogError::NoSpace));
    // Now register write-back: the next commit waits for the tail instead of failing.
    let store = Arc::new(NullStore(Mutex::new(Some(log.clone()))));
    let wb: Arc<dyn Writeback> = store.clone();
    log.set_writeback(Arc::downgrade(&wb));
    let c = log.commit(tx(vec![kv(999, 1)], &[])).unwrap();
    log.force_seq(c).unwrap();
    assert!(log.counters().writebacks > 0);
    assert!(log.counters().wait_ns > 0);
    *store.0.lock().unwrap() = None;
}

#[test]
fn failed_flush_fails_the_force_and_shuts_the_log_down() {
    let dev = crash_dev(LEN, 7, 0, LEN);
    let (log, _) = mount_collect(dev.clone(), 0, LEN).unwrap();
    let c = log.commit(tx(vec![kv(1, 1)], &[(1, false)])).unwrap();
    dev.fail_next_flush();
    let e = log.force_seq(c).unwrap_err();
    assert!(matches!(e, LogError::Io(_)), "{e:?}");
    // Every later force returns the error, nothing more is acknowledged.
    assert_eq!(log.force_seq(c), Err(e.clone()));
    assert_eq!(log.force_all(), Err(e.clone()));
    assert_eq!(log.force_object(1, false), Err(e.clone()));
    assert_eq!(log.commit(tx(vec![kv(2, 2)], &[])), Err(e.clone()));
    assert!(log.durable_csn() < c);
    assert_eq!(log.shutdown_error(), Some(e));
    assert!(log.unmount().is_err());
}

#[test]
fn failed_write_fails_the_force_and_shuts_the_log_down() {
    let dev = crash_dev(LEN, 8, 0, LEN);
    let (log, _) = mount_collect(dev.clone(), 0, LEN).unwrap();
    let c = log.commit(tx(vec![kv(1, 1)], &[])).unwrap();
    dev.fail_next_write();
    assert!(matches!(log.force_seq(c), Err(LogError::Io(_))));
    assert!(log.force_seq(c).is_err());
}

#[test]
fn clean_unmount_mounts_in_constant_reads() {
    let mut reads = Vec::new();
    for len in [128 * 1024u64, 4 << 20] {
        let dev = crash_dev(len, 9, 0, len);
        let (log, _) = mount_collect(dev.clone(), 0, len).unwrap();
        for k in 0..20 {
            let c = log.commit(tx(vec![kv(k, k)], &[])).unwrap();
            log.force_seq(c).unwrap();
        }
        let store = Arc::new(NullStore(Mutex::new(Some(log.clone()))));
        let wb: Arc<dyn Writeback> = store.clone();
        log.set_writeback(Arc::downgrade(&wb));
        log.unmount().unwrap();
        *store.0.lock().unwrap() = None;
        drop(log);
        let dev2 = Arc::new(CrashDev::from_image(dev.durable_image(), 1));
        let (_l, got) = mount_collect(dev2.clone(), 0, len).unwrap();
        assert!(got.is_empty(), "written back: nothing to replay");
        reads.push(dev2.io_counts().0);
    }
    assert_eq!(
        reads[0], reads[1],
        "clean mount reads depend on the log size"
    );
    assert!(reads[0] <= 3, "{reads:?}");
    // For contrast: a crash mount scans the area.
    let dev = forced_checkpoints(2);
    let d = Arc::new(CrashDev::from_image(dev.crash().image(), 1));
    let _ = mount_collect(d.clone(), 0, LEN).unwrap();
    assert!(d.io_counts().0 >= 2);
}

#[test]
fn unmount_without_writeback_replays_the_unwritten_suffix_only() {
    let dev = crash_dev(LEN, 10, 0, LEN);
    let (log, _) = mount_collect(dev.clone(), 0, LEN).unwrap();
    for k in 0..3 {
        log.commit(tx(vec![kv(k, k)], &[])).unwrap();
    }
    log.unmount().unwrap();
    drop(log);
    let (_l, got) = mount_collect(Arc::new(dev.crash()), 0, LEN).unwrap();
    assert_eq!(keys(&got), vec![0, 1, 2]);
}

#[test]
fn external_log_flushes_data_before_a_converting_checkpoint() {
    let data_dev = Arc::new(CrashDev::new(1 << 20, 1));
    let data = Arc::new(FlushSeq::new(data_dev.clone()));
    let dev = crash_dev(LEN, 11, 0, LEN);
    let opts = LogOptions {
        external_data: Some(data.clone()),
        ..LogOptions::default()
    };
    let fs = Arc::new(FlushSeq::new(dev.clone()));
    let log = Log::mount(dev.clone(), 0, LEN, UUID, fs, opts, &mut |_, _| Ok(())).unwrap();
    let c = log
        .commit(tx(vec![Item::Size { ino: 1, size: 9 }], &[]))
        .unwrap();
    log.force_seq(c).unwrap();
    assert_eq!(data.issued(), 0, "no conversion, no data flush");
    // Client data written to the data device, then the conversion is committed and forced.
    data_dev.write_at(&[5; 4096], 0).unwrap();
    let conv = Item::ExtentConvert {
        ino: 1,
        file_block: 0,
        len_blocks: 1,
    };
    let c = log.commit(tx(vec![conv], &[(1, false)])).unwrap();
    log.force_object(1, true).unwrap();
    assert!(log.durable_csn() >= c);
    assert_eq!(data.issued(), 1);
    // The data is durable whenever the conversion is.
    assert_eq!(&data_dev.crash().image()[..4096], &[5; 4096][..]);
}

#[test]
fn intents_without_done_are_applied_at_the_end_of_replay() {
    let dev = crash_dev(LEN, 12, 0, LEN);
    let (log, _) = mount_collect(dev.clone(), 0, LEN).unwrap();
    let body = |k| vec![kv(k, 100 + k)];
    log.commit(tx(
        vec![Item::Intent {
            id: 1,
            body: body(1),
        }],
        &[],
    ))
    .unwrap();
    log.commit(tx(
        vec![Item::Intent {
            id: 2,
            body: body(2),
        }],
        &[],
    ))
    .unwrap();
    log.commit(tx(vec![kv(2, 100 + 2), Item::Done { id: 2 }], &[]))
        .unwrap();
    log.commit(tx(vec![kv(1, 5)], &[])).unwrap();
    log.force_all().unwrap();
    drop(log);
    let (_l, got) = mount_collect(Arc::new(dev.crash()), 0, LEN).unwrap();
    // kv(2) from the done transaction, kv(1,5), then intent 1's body last.
    assert_eq!(keys(&got), vec![2, 1, 1]);
    assert_eq!(got.last().map(|(_, it)| it.clone()), Some(kv(1, 101)));
}

#[test]
fn multi_record_checkpoint_roundtrips() {
    let len = 256 * 1024;
    let dev = crash_dev(len, 13, 0, len);
    let (log, _) = mount_collect(dev.clone(), 0, len).unwrap();
    let items: Vec<Item> = (0..3000).map(|k| kv(k, k)).collect();
    let c = log.commit(tx(items, &[])).unwrap();
    log.force_seq(c).unwrap();
    assert!(log.counters().log_writes >= 2, "{:?}", log.counters());
    drop(log);
    let (_l, got) = mount_collect(Arc::new(dev.crash()), 0, len).unwrap();
    assert_eq!(keys(&got), (0..3000).collect::<Vec<_>>());
}

#[test]
fn background_worker_forces_lazy_changes() {
    let dev = crash_dev(LEN, 14, 0, LEN);
    let fs = Arc::new(FlushSeq::new(dev.clone()));
    let opts = LogOptions {
        force_interval: Duration::from_millis(20),
        ..LogOptions::default()
    };
    let log = Log::mount(dev.clone(), 0, LEN, UUID, fs, opts, &mut |_, _| Ok(())).unwrap();
    let c = log.commit(tx(vec![kv(1, 1)], &[(1, true)])).unwrap();
    assert_eq!(log.object_seqs(1), (Some(c), None));
    // Nobody forces; the worker must (bounded wait, not a timing assertion).
    let deadline = Instant::now() + Duration::from_secs(30);
    while log.durable_csn() < c {
        assert!(Instant::now() < deadline, "worker never forced the log");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(log.object_seqs(1), (None, None));
}

#[test]
fn concurrent_forcers_share_log_writes() {
    let len = 4 << 20;
    let dev = crash_dev(len, 15, 0, len);
    // A device flush that takes time, as real ones do: commits arrive while it runs.
    dev.set_flush_delay(Duration::from_millis(2));
    let (log, _) = mount_collect(dev.clone(), 0, len).unwrap();
    let hs: Vec<_> = (0..8)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                for k in 0..40 {
                    let c = log
                        .commit(tx(vec![kv(t * 100 + k, k)], &[(t, false)]))
                        .unwrap();
                    log.force_object(t, false).unwrap();
                    assert!(log.durable_csn() >= c);
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let c = log.counters();
    assert_eq!(c.commits, 320);
    assert!(c.checkpoints < c.commits, "no group commit: {c:?}");
    drop(log);
    let (_l, got) = mount_collect(Arc::new(dev.crash()), 0, len).unwrap();
    assert_eq!(got.len(), 320);
}

#[test]
fn wrote_log_only_when_a_flush_started_after_the_call() {
    let dev = crash_dev(LEN, 16, 0, LEN);
    let (log, _) = mount_collect(dev.clone(), 0, LEN).unwrap();
    let c = log.commit(tx(vec![kv(1, 1)], &[])).unwrap();
    assert!(log.force_seq(c).unwrap().wrote_log);
    assert!(!log.force_seq(c).unwrap().wrote_log, "already durable");
    assert!(!log.force_all().unwrap().wrote_log, "nothing to force");
    let c = log.counters();
    assert_eq!((c.forces, c.forces_that_wrote), (3, 1));
}

#[test]
fn reservations_commit_without_waiting() {
    let dev = crash_dev(LEN, 17, 0, LEN);
    let (log, _) = mount_collect(dev.clone(), 0, LEN).unwrap();
    let t = tx(vec![kv(1, 1)], &[]);
    let r = log.reserve(log.tx_space(&t)).unwrap();
    let c = log.commit_reserved(t, r).unwrap();
    log.force_seq(c).unwrap();
    assert_eq!(log.reserve(LEN * 2).err(), Some(LogError::NoSpace));
    let _unused = log.reserve(4096).unwrap();
    let empty = Transaction::default();
    assert!(log.commit(empty).is_ok());
}
