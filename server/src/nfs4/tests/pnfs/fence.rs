//! Fencing of clients whose layouts go without a LAYOUTRETURN (RFC 8881 §12.5.5, §12.7.3;
//! RFC 5663 §2.3.6; RFC 8154 §2.4.5; docs/pnfs.md "Fencing"): a client whose lease ran out
//! is fenced once — `fence_command` with its address, or a preempt of its SCSI key — before
//! the blocks past EOF its RW layout held are trimmed; when the fence fails they are kept.

use super::*;
use crate::nfs4::layouts::scsi::{PrFencer, PreemptError};
use crate::nfs4::state::{Clock, StateManager, COURTESY_SECONDS};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The lease clock, set by the test.
#[derive(Default)]
pub(super) struct FakeClock(AtomicU64);

impl Clock for FakeClock {
    fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A server over a 64 MiB volume (room for speculative preallocation) on a fake clock.
pub(super) fn fixture_clocked(opts: NfsOptions) -> (Fx, Arc<FakeClock>) {
    let dev = Arc::new(CrashDev::new(64 << 20, 1));
    Store::mkfs_dev(dev.clone(), false).unwrap();
    let store = Arc::new(Store::open_dev(dev.clone(), StoreOptions::default()).unwrap());
    let clock = Arc::new(FakeClock::default());
    let cfg = opts.state_config(store.boot_verifier());
    let state = StateManager::with_parts(cfg, store.clone(), clock.clone());
    // As `Server::new`: an unlinked file lives on while open.
    store.set_open_probe(Box::new(state.open_probe()));
    let fx = Fx {
        dev,
        srv: Server {
            store,
            state,
            opts,
            boot_verifier: 1,
            layouts: Default::default(),
            callbacks: Default::default(),
            cb_getattrs: Default::default(),
            copies: Default::default(),
            exports: Default::default(),
            ops: Default::default(),
        },
        conn: conn(1, None),
    };
    (fx, clock)
}

/// A fence script that appends its arguments to `log` and exits 0 while `ok` exists.
fn fence_script(dir: &std::path::Path) -> (String, std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let log = dir.join("fenced");
    let ok = dir.join("ok");
    let script = dir.join("fence.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$@\" >> {}\ntest -e {}\n",
            log.display(),
            ok.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script.display().to_string(), log, ok)
}

fn lines(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The lease clock past a courtesy client's purge, then one server tick (as main.rs does).
pub(super) fn expire_and_tick(fx: &Fx, clock: &FakeClock, now: Instant) {
    let past = u64::from(fx.srv.opts.lease_seconds) + COURTESY_SECONDS + 2;
    clock.0.fetch_add(past, Ordering::Relaxed);
    fx.srv.state.tick();
    recall::tick(&fx.srv.layouts_env(), now);
}

/// Blocks of `ino` mapped in its first `n` blocks.
fn mapped(srv: &Server, ino: Ino, n: u64) -> u64 {
    srv.store
        .extents(ino, 0, n)
        .unwrap()
        .iter()
        .filter(|s| matches!(s, layout::Segment::Mapped { .. }))
        .map(|s| s.len())
        .sum()
}

fn dev_hex(srv: &Server) -> String {
    crate::nfs4::layouts::device_id(&srv.store)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn an_expired_clients_layout_is_fenced_once_then_trimmed() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, log, ok) = fence_script(dir.path());
    std::fs::write(&ok, b"").unwrap();
    let (fx, clock) = fixture_clocked(NfsOptions {
        fence_command: Some(cmd),
        ..NfsOptions::default()
    });
    let c = conn(3, None);
    let mut x = ctx(&fx.srv, &c);
    mount(&mut x, b"a");
    let (fh, sid) = create(&mut x, b"f");
    let g = get(&mut x, IoMode::RW.0, 0, 2 * B, sid).unwrap();
    let n = g.length / B;
    assert!(n > 2, "preallocated past the asked range: {n}");
    assert_eq!(mapped(&fx.srv, fh.ino, n), n);
    // Within the lease nothing happens.
    recall::tick(&fx.srv.layouts_env(), Instant::now());
    assert!(lines(&log).is_empty());
    expire_and_tick(&fx, &clock, Instant::now());
    // Fenced once, with the address it used and the device id; then trimmed.
    assert_eq!(lines(&log), vec![format!("127.0.0.3 {}", dev_hex(&fx.srv))]);
    let m = fx.srv.layouts.metrics.snapshot();
    assert_eq!((m.fences, m.trimmed_blocks, m.fences_failed), (1, n, 0));
    assert_eq!(mapped(&fx.srv, fh.ino, n), 0);
    // Later ticks fence no more.
    recall::tick(&fx.srv.layouts_env(), Instant::now());
    expire_and_tick(&fx, &clock, Instant::now() + Duration::from_secs(600));
    assert_eq!(lines(&log).len(), 1);
    assert_eq!(fx.srv.layouts.metrics.snapshot().fences, 1);
}

#[test]
fn a_failed_fence_keeps_the_blocks_until_a_retry_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, log, ok) = fence_script(dir.path());
    let (fx, clock) = fixture_clocked(NfsOptions {
        fence_command: Some(cmd),
        ..NfsOptions::default()
    });
    let c = conn(4, None);
    let mut x = ctx(&fx.srv, &c);
    mount(&mut x, b"a");
    let (fh, sid) = create(&mut x, b"f");
    let g = get(&mut x, IoMode::RW.0, 0, 2 * B, sid).unwrap();
    let n = g.length / B;
    let free0 = fx.srv.store.fsstat().free_bytes;
    let t0 = Instant::now();
    expire_and_tick(&fx, &clock, t0);
    // The script failed: nothing counted, nothing trimmed, the file keeps every block.
    assert_eq!(lines(&log).len(), 1);
    let m = fx.srv.layouts.metrics.snapshot();
    assert_eq!((m.fences, m.trimmed_blocks), (0, 0));
    assert_eq!(m.fences_failed, 1, "a non-zero exit is a failed fence");
    assert_eq!(mapped(&fx.srv, fh.ino, n), n);
    assert_eq!(fx.srv.store.fsstat().free_bytes, free0);
    assert!(fx.srv.layouts.kept(fh.ino));
    // Nor does an explicit trim free them.
    crate::nfs4::layouts::trim_released(&fx.srv.layouts_env());
    assert_eq!(mapped(&fx.srv, fh.ino, n), n);
    // Another client cannot remove the file's last link meanwhile.
    let c2 = conn(5, None);
    let mut y = ctx(&fx.srv, &c2);
    mount(&mut y, b"b");
    let root = fx.srv.store.getattr(ROOT_INO).unwrap();
    y.current_fh = Some(Fh {
        ino: root.ino,
        generation: root.generation,
    });
    let mut w = XdrWriter::new();
    w.string(b"f");
    assert_eq!(
        call(&mut y, crate::nfs4::ops::remove::run, &w.buf).0,
        NfsStat::DELAY
    );
    // Retried a lease later; still failing, still kept.
    let lease = Duration::from_secs(u64::from(fx.srv.opts.lease_seconds));
    recall::tick(&fx.srv.layouts_env(), t0 + lease / 2);
    assert_eq!(lines(&log).len(), 1, "no retry before a lease passed");
    recall::tick(&fx.srv.layouts_env(), t0 + lease);
    assert_eq!(lines(&log).len(), 2);
    assert_eq!(fx.srv.layouts.metrics.snapshot().fences_failed, 2);
    assert_eq!(mapped(&fx.srv, fh.ino, n), n);
    // Once the fence works, the retry fences it and the blocks past EOF go.
    std::fs::write(&ok, b"").unwrap();
    recall::tick(&fx.srv.layouts_env(), t0 + 2 * lease);
    assert_eq!(lines(&log).len(), 3);
    let m = fx.srv.layouts.metrics.snapshot();
    assert_eq!((m.fences, m.trimmed_blocks, m.fences_failed), (1, n, 2));
    assert_eq!(mapped(&fx.srv, fh.ino, n), 0);
    assert!(!fx.srv.layouts.kept(fh.ino));
    recall::tick(&fx.srv.layouts_env(), t0 + 4 * lease);
    assert_eq!(lines(&log).len(), 3);
}

/// Records the keys preempted; fails while `fail` is set.
#[derive(Default)]
struct Preempts {
    keys: Mutex<Vec<u64>>,
    fail: AtomicBool,
}

impl PrFencer for Preempts {
    fn preempt_and_abort(&self, key: u64) -> Result<(), PreemptError> {
        self.keys.lock().unwrap().push(key);
        if self.fail.load(Ordering::Relaxed) {
            Err(PreemptError::Failed("transport down".into()))
        } else {
            Ok(())
        }
    }
    fn registered_keys(&self) -> Result<Vec<u64>, PreemptError> {
        Ok(Vec::new())
    }
}

/// A SCSI LAYOUTGET (type 5) of RW `[0, len)`.
fn scsi_rw(x: &mut Ctx<'_>, len: u64, sid: Stateid) {
    let (s, _) = call(
        x,
        layoutget::run,
        &layoutget_args(5, IoMode::RW.0, 0, len, len, sid, 0xffff),
    );
    assert_eq!(s, NfsStat::OK);
}

#[test]
fn an_expired_scsi_clients_key_is_preempted_once_and_a_failed_preempt_keeps_blocks() {
    let opts = NfsOptions {
        layout_types: vec![LayoutType::BLOCK_VOLUME, LayoutType::SCSI],
        ..NfsOptions::default()
    };
    let (fx, clock) = fixture_clocked(opts);
    let pr = Arc::new(Preempts::default());
    assert!(fx.srv.layouts.scsi.install(pr.clone()));
    pr.fail.store(true, Ordering::Relaxed);
    let (ca, cb) = (conn(1, None), conn(2, None));
    let mut a = ctx(&fx.srv, &ca);
    let mut b = ctx(&fx.srv, &cb);
    let ida = mount(&mut a, b"a");
    let (fa, sa) = create(&mut a, b"fa");
    scsi_rw(&mut a, 2 * B, sa);
    let na = fx.srv.layouts.grants_of(ida, fa.ino);
    assert!(!na.is_empty());
    let t0 = Instant::now();
    expire_and_tick(&fx, &clock, t0);
    let key_a = layout::scsi::client_pr_key(ida);
    assert_eq!(*pr.keys.lock().unwrap(), vec![key_a]);
    let m = fx.srv.layouts.metrics.snapshot();
    assert_eq!((m.trimmed_blocks, m.fences, m.fences_failed), (0, 0, 1));
    assert!(fx.srv.layouts.kept(fa.ino));
    // B's layout expires while the preempt works: fenced, trimmed; A's file still kept.
    pr.fail.store(false, Ordering::Relaxed);
    let idb = mount(&mut b, b"b");
    let (fb, sb) = create(&mut b, b"fb");
    scsi_rw(&mut b, 2 * B, sb);
    let blocks_b = mapped(&fx.srv, fb.ino, 1 << 14);
    assert!(blocks_b > 2);
    expire_and_tick(&fx, &clock, t0);
    let key_b = layout::scsi::client_pr_key(idb);
    assert_eq!(*pr.keys.lock().unwrap(), vec![key_a, key_b]);
    let m = fx.srv.layouts.metrics.snapshot();
    assert_eq!((m.fences, m.trimmed_blocks), (1, blocks_b));
    assert!(mapped(&fx.srv, fa.ino, 1 << 14) > 2);
    // A's retry, a lease later, succeeds: A's blocks go too; nobody is preempted twice.
    let lease = Duration::from_secs(u64::from(fx.srv.opts.lease_seconds));
    recall::tick(&fx.srv.layouts_env(), t0 + lease);
    recall::tick(&fx.srv.layouts_env(), t0 + 3 * lease);
    assert_eq!(*pr.keys.lock().unwrap(), vec![key_a, key_b, key_a]);
    assert_eq!(fx.srv.layouts.metrics.snapshot().fences, 2);
    assert_eq!(mapped(&fx.srv, fa.ino, 1 << 14), 0);
}

#[test]
fn a_truncate_after_the_state_dropped_a_layout_fences_before_freeing() {
    let dir = tempfile::tempdir().unwrap();
    let (cmd, log, ok) = fence_script(dir.path());
    let (fx, clock) = fixture_clocked(NfsOptions {
        fence_command: Some(cmd),
        ..NfsOptions::default()
    });
    let ca = conn(6, None);
    let mut a = ctx(&fx.srv, &ca);
    mount(&mut a, b"a");
    let (fh, sa) = create(&mut a, b"f");
    get(&mut a, IoMode::RW.0, 0, 2 * B, sa).unwrap();
    commit_size(&fx.srv, fh.ino);
    // A's lease runs out and the state drops its layout; the tick has not run yet.
    let past = u64::from(fx.srv.opts.lease_seconds) + COURTESY_SECONDS + 2;
    clock.0.fetch_add(past, Ordering::Relaxed);
    fx.srv.state.tick();
    let cb = conn(7, None);
    let mut b = ctx(&fx.srv, &cb);
    mount(&mut b, b"b");
    let (_, sb) = create(&mut b, b"f");
    // B's truncate finds A's grants: A is fenced first; the fence fails, so nothing is freed.
    assert_eq!(truncate(&mut b, fh, sb, 0), NfsStat::DELAY);
    assert_eq!(lines(&log), vec![format!("127.0.0.6 {}", dev_hex(&fx.srv))]);
    assert_eq!(fx.srv.store.getattr(fh.ino).unwrap().size, 2 * B);
    assert_eq!(mapped(&fx.srv, fh.ino, 2), 2);
    assert_eq!(truncate(&mut b, fh, sb, 0), NfsStat::DELAY);
    assert_eq!(fx.srv.layouts.metrics.snapshot().fences, 0);
    // The retried fence works: the truncate goes through.
    std::fs::write(&ok, b"").unwrap();
    let lease = Duration::from_secs(u64::from(fx.srv.opts.lease_seconds));
    recall::tick(&fx.srv.layouts_env(), Instant::now() + lease);
    assert_eq!(fx.srv.layouts.metrics.snapshot().fences, 1);
    assert_eq!(truncate(&mut b, fh, sb, 0), NfsStat::OK);
    assert_eq!(fx.srv.store.getattr(fh.ino).unwrap().size, 0);
    assert_eq!(lines(&log).len(), 2);
}

/// CLOSE `sid` of `fh`: whether the file still has its blocks afterwards.
fn close_survives(x: &mut Ctx<'_>, fh: Fh, sid: Stateid) -> bool {
    let mut w = XdrWriter::new();
    w.u32(0);
    sid.encode(&mut w);
    x.current_fh = Some(fh);
    assert_eq!(call(x, crate::nfs4::ops::close::run, &w.buf).0, NfsStat::OK);
    x.srv.store.extents(fh.ino, 0, 2).is_ok_and(|v| {
        v.iter()
            .any(|s| matches!(s, layout::Segment::Mapped { .. }))
    })
}

#[test]
fn an_unlinked_file_a_failed_fence_keeps_is_not_freed_at_its_last_close() {
    let (fx, _clock) = fixture_clocked(NfsOptions::default());
    let c = conn(8, None);
    let mut x = ctx(&fx.srv, &c);
    mount(&mut x, b"a");
    let (f, sf) = create(&mut x, b"f");
    get(&mut x, IoMode::RW.0, 0, 2 * B, sf).unwrap();
    let (g, sg) = create(&mut x, b"g");
    get(&mut x, IoMode::RW.0, 0, 2 * B, sg).unwrap();
    // Both unlinked while open: they live on until their last CLOSE.
    assert_eq!(remove(&mut x, b"f"), NfsStat::OK);
    assert_eq!(remove(&mut x, b"g"), NfsStat::OK);
    // Another client that held a layout of `f` could not be fenced.
    fx.srv.layouts.keep_unfenced(99, [f.ino], Instant::now());
    assert!(close_survives(&mut x, f, sf));
    assert_eq!(mapped(&fx.srv, f.ino, 2), 2);
    assert!(!close_survives(&mut x, g, sg));
    // And while kept, REMOVE of a last link waits.
    let (h, sh) = create(&mut x, b"h");
    get(&mut x, IoMode::RW.0, 0, 2 * B, sh).unwrap();
    fx.srv.layouts.keep_unfenced(99, [h.ino], Instant::now());
    assert_eq!(remove(&mut x, b"h"), NfsStat::DELAY);
    assert!(close_survives(&mut x, h, sh));
}

/// A client that is gone leaves the host ↔ client map once its fence window is over (its
/// dropped layouts fenced and forgotten): its address's hosts are no longer attached to it,
/// so the target treats them as a host of no client. One whose fence failed stays while
/// the retry, which needs its address, is pending.
#[test]
fn a_gone_client_leaves_the_host_map_once_fenced() {
    use crate::nfs4::layouts::hosts::Enforce;
    use nvme_tcp::policy::Access;
    use nvme_tcp::{HostPolicy, HostRef};
    let dir = tempfile::tempdir().unwrap();
    let (cmd, log, ok) = fence_script(dir.path());
    let (fx, clock) = fixture_clocked(NfsOptions {
        fence_command: Some(cmd),
        ..NfsOptions::default()
    });
    let hosts = &fx.srv.layouts.hosts;
    hosts.enforce(Enforce {
        on: true,
        lbas: 1 << 20,
        ..Enforce::default()
    });
    // A read of its address's host far from the probe windows and outside its layouts.
    let reads = || {
        hosts.access(
            &HostRef {
                nqn: "nqn.a",
                hostid: &[0; 16],
                ip: "127.0.0.6".parse().unwrap(),
            },
            1,
            Access::Read,
            1 << 19,
            1,
        )
    };
    let c = conn(6, None);
    let mut x = ctx(&fx.srv, &c);
    let id = mount(&mut x, b"a");
    let (_, sid) = create(&mut x, b"f");
    get(&mut x, IoMode::RW.0, 0, 2 * B, sid).unwrap();
    assert!(hosts.client(id).is_some());
    assert!(!reads(), "attached to its client: only its layouts");
    let t0 = Instant::now();
    expire_and_tick(&fx, &clock, t0);
    assert_eq!(lines(&log).len(), 1);
    assert!(fx.srv.state.client_identity(id).is_none());
    assert!(
        hosts.client(id).is_some(),
        "its failed fence waits for a retry"
    );
    assert!(fx.srv.layouts.peer_of(id).is_some());
    std::fs::write(&ok, b"").unwrap();
    let lease = Duration::from_secs(u64::from(fx.srv.opts.lease_seconds));
    recall::tick(&fx.srv.layouts_env(), t0 + lease);
    assert_eq!(lines(&log).len(), 2);
    assert!(hosts.client(id).is_none(), "fenced and gone: forgotten");
    assert!(fx.srv.layouts.peer_of(id).is_none());
    assert!(reads(), "its host belongs to no client now");
}
