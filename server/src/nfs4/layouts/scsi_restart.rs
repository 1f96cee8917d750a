//! The SCSI layout's reservations after a restart (docs/pnfs.md "After a restart"). The
//! volume's reservation state outlives the MDS: the embedded target persists it (PTPL, as
//! the Linux client asks when it registers), and an external target never lost it. So the
//! registrations of the previous instance's clients are still there — which is what lets a
//! write that was in flight at the crash land when the client's NVMe host replays it,
//! unregistered otherwise — and so is the MDS's own registration and reservation, and so
//! is a fence (a preempted host stays out).
//!
//! It also leaves a hole: a client of the previous instance that does not come back would
//! keep its access to the volume and could write into blocks this instance frees and hands
//! out again. So, once the previous instance's layouts are past their time — the nominal
//! grace period (`StateManager::previous_layouts_expired`), the same window in which their
//! in-flight LAYOUTCOMMITs are still taken as reclaims — every registered key that this
//! instance did not issue is preempted and aborted (RFC 8154 §2.4: fencing is PREEMPT AND
//! ABORT of the client's key). A key names its clientid and a clientid its instance
//! (`layout::scsi::clientid_of_key`, `StateManager::is_current_clientid`). A client that came
//! back has registered its key of this instance by then (GETDEVICEINFO of the device id new
//! at this start; Linux's Register with IEKEY replaces its old key in our target), or it
//! does no I/O on the volume: its old layouts are void either way.
//!
//! Until the sweep has succeeded, the grace period and the layout reclaim window are held
//! open (`StateManager::hold_grace`): no previous client is taken as gone, nothing past EOF
//! is trimmed, no truncation or removal frees blocks it may still write. A failed sweep is
//! retried from the tick.
//!
//! One more wait, for the clients that come back (`check_layoutget`): the Linux client
//! registers its new key when it first uses a layout naming the device id new at this
//! start, and a reservation command sent while its NVMe controller is still reconnecting
//! (10 s after the target went) fails at once; the client then keeps the device unusable
//! for 120 s and writes through the MDS (measured: 119 of 126 MB). So, within the window,
//! SCSI LAYOUTGETs answer NFS4ERR_DELAY (the client waits and asks again) until as many of
//! the hosts registered before the restart have reconnected as previous clients have come
//! back, or all of them have. A host that never comes back holds nobody past the window.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::nfs4::layouts::add;
use crate::nfs4::layouts::scsi::{PrFencer, PreemptError};
use crate::nfs4::layouts::Layouts;
use crate::nfs4::state::StateManager;
use crate::nfs4::status::NfsStat;

/// Whether the sweep is still to be done (`Pnfs::scsi_restart`).
#[derive(Debug, Default)]
pub struct RestartSweep {
    pending: AtomicBool,
    failures: AtomicU32,
}

impl RestartSweep {
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }
}

/// At start, once the SCSI fencer is installed: the sweep is due when the previous
/// instance's layouts expire, and grace waits for it. With no previous clients it runs now.
pub fn begin(layouts: &Layouts, state: &StateManager) {
    state.hold_grace();
    layouts.scsi_restart.pending.store(true, Ordering::Release);
    run_if_due(layouts, state);
}

/// From the tick: the sweep, once due; grace is released when it succeeded.
pub fn run_if_due(layouts: &Layouts, state: &StateManager) {
    let r = &layouts.scsi_restart;
    if !r.pending() || !state.previous_layouts_expired() {
        return;
    }
    let Some(fencer) = layouts.scsi.get() else {
        return;
    };
    match sweep(state, fencer.as_ref()) {
        Ok(n) => {
            r.pending.store(false, Ordering::Release);
            state.release_grace();
            add(&layouts.metrics.fences, n as u64);
            tracing::info!(
                preempted = n,
                "SCSI layout: registrations of the previous instance's clients swept"
            );
        }
        Err(e) => {
            let k = r.failures.fetch_add(1, Ordering::Relaxed) + 1;
            if k == 1 || k.is_multiple_of(60) {
                tracing::error!(
                    attempts = k,
                    %e,
                    "SCSI layout: the previous instance's clients could not be cut off the \
                     volume; grace stays open and nothing they held is freed until they are"
                );
            }
        }
    }
}

/// Whether a SCSI LAYOUTGET may be answered now (module comment): NFS4ERR_DELAY while the
/// previous instance's layouts are in their window and fewer of its registered hosts have
/// reconnected than of its clients have come back.
pub fn check_layoutget(layouts: &Layouts, state: &StateManager) -> Result<(), NfsStat> {
    if !layouts.scsi_restart.pending() || state.previous_layouts_expired() {
        return Ok(());
    }
    let Some(fencer) = layouts.scsi.get() else {
        return Ok(());
    };
    let h = fencer.restored_hosts();
    if h.awaited == 0 || h.reconnected >= state.previous_clients_back() {
        return Ok(());
    }
    Err(NfsStat::DELAY)
}

/// Preempts and aborts every registered key this instance did not issue (not the MDS's,
/// nor key 0, which no preempt can name); the number preempted.
pub fn sweep(state: &StateManager, f: &dyn PrFencer) -> Result<usize, PreemptError> {
    let mut keys = f.registered_keys()?;
    keys.sort_unstable();
    keys.dedup();
    let mut n = 0;
    for key in keys {
        let Some(clientid) = layout::scsi::clientid_of_key(key) else {
            continue;
        };
        if state.is_current_clientid(clientid) {
            continue;
        }
        match f.preempt_and_abort(key) {
            Ok(()) => {
                n += 1;
                tracing::warn!(
                    key = format_args!("{key:#018x}"),
                    clientid = format_args!("{clientid:#018x}"),
                    "SCSI layout: registration of a client of the previous instance preempted"
                );
            }
            // Gone since the report (the client replaced its key, or unregistered).
            Err(PreemptError::NotRegistered) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::nfs4::state::{Clock, ExchangeIdReq, Principal, StateConfig, StateManager};
    use crate::server::{NfsOptions, Server};
    use crate::store::{Store, StoreOptions};
    use layout::scsi::{client_pr_key, MDS_PR_KEY};

    /// The volume's registrations, as a target would hold them; the report fails while
    /// `fail` is set.
    #[derive(Default)]
    struct Volume {
        keys: Mutex<Vec<u64>>,
        fail: AtomicBool,
    }

    impl PrFencer for Volume {
        fn preempt_and_abort(&self, key: u64) -> Result<(), PreemptError> {
            let mut k = self.keys.lock().unwrap();
            let before = k.len();
            k.retain(|x| *x != key);
            if k.len() == before {
                return Err(PreemptError::NotRegistered);
            }
            Ok(())
        }
        fn registered_keys(&self) -> Result<Vec<u64>, PreemptError> {
            if self.fail.load(Ordering::SeqCst) {
                return Err(PreemptError::Failed("transport down".into()));
            }
            Ok(self.keys.lock().unwrap().clone())
        }
    }

    struct At(AtomicU64);
    impl Clock for At {
        fn now(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// A server whose store remembers one client of an earlier start, `boot` its boot
    /// verifier, on a clock the test moves.
    fn restarted(dir: &std::path::Path, boot: u64) -> (Server, Arc<At>) {
        let dev: Arc<dyn metalog::BlockDev> =
            Arc::new(metalog::FileDev::create(&dir.join("v"), 64 << 20).unwrap());
        Store::mkfs_dev(dev.clone(), false).unwrap();
        let store = Arc::new(Store::open_dev(dev, StoreOptions::default()).unwrap());
        store.put_client_record(b"gone", Some(b"v1")).unwrap();
        let clock = Arc::new(At(AtomicU64::new(0)));
        let cfg = StateConfig {
            lease_seconds: 10,
            grace_seconds: 10,
            boot_verifier: boot,
        };
        let state = StateManager::with_parts(cfg, store.clone(), clock.clone());
        let srv = Server {
            store,
            state,
            opts: NfsOptions::default(),
            boot_verifier: boot,
            layouts: Default::default(),
            callbacks: Default::default(),
            cb_getattrs: Default::default(),
            copies: Default::default(),
            exports: Default::default(),
            ops: Default::default(),
        };
        (srv, clock)
    }

    /// After a restart: nothing is preempted while the previous instance's layouts may
    /// still commit; then every key that instance issued goes, this instance's keys, the
    /// MDS's and key 0 stay; grace (held meanwhile) is released; a failed sweep keeps it.
    #[test]
    fn the_previous_instances_keys_go_when_its_layouts_expire() {
        let dir = tempfile::tempdir().unwrap();
        let (srv, clock) = restarted(dir.path(), 0x5eed_0002_0000_0002);
        let now = srv
            .state
            .exchange_id(&ExchangeIdReq {
                owner: b"back".to_vec(),
                verifier: [1; 8],
                flags: 0,
                principal: Principal { flavor: 1, uid: 0 },
            })
            .unwrap()
            .clientid;
        // A clientid of the previous instance: another epoch in its high half.
        let old = now ^ (0x77 << 40);
        assert!(!srv.state.is_current_clientid(old));
        let vol = Arc::new(Volume::default());
        *vol.keys.lock().unwrap() = vec![MDS_PR_KEY, client_pr_key(old), client_pr_key(now), 0];
        assert!(srv.layouts.scsi.install(vol.clone()));
        begin(&srv.layouts, &srv.state);
        assert!(srv.layouts.scsi_restart.pending());
        clock.0.store(9, Ordering::SeqCst);
        run_if_due(&srv.layouts, &srv.state);
        assert_eq!(vol.keys.lock().unwrap().len(), 4, "swept inside the window");
        // The window closes; the report fails: grace stays, nothing is taken as gone.
        clock.0.store(11, Ordering::SeqCst);
        srv.state.tick();
        vol.fail.store(true, Ordering::SeqCst);
        run_if_due(&srv.layouts, &srv.state);
        assert!(srv.layouts.scsi_restart.pending());
        assert!(srv.state.in_grace() && srv.state.layouts_reclaimable());
        assert_eq!(vol.keys.lock().unwrap().len(), 4);
        // It works again: the previous instance's key goes, and grace with it.
        vol.fail.store(false, Ordering::SeqCst);
        run_if_due(&srv.layouts, &srv.state);
        assert!(!srv.layouts.scsi_restart.pending());
        let mut left = vol.keys.lock().unwrap().clone();
        left.sort_unstable();
        let mut want = vec![0, MDS_PR_KEY, client_pr_key(now)];
        want.sort_unstable();
        assert_eq!(left, want);
        assert_eq!(srv.layouts.metrics.snapshot().fences, 1);
        assert!(!srv.state.in_grace() && !srv.state.layouts_reclaimable());
    }

    /// A start that found no client records has nothing to wait for: the sweep runs at once.
    #[test]
    fn without_previous_clients_the_sweep_runs_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let (srv, _clock) = restarted(dir.path(), 9);
        srv.store.put_client_record(b"gone", None).unwrap();
        let srv = Server {
            state: StateManager::with_parts(
                StateConfig {
                    lease_seconds: 10,
                    grace_seconds: 10,
                    boot_verifier: 9,
                },
                srv.store.clone(),
                Arc::new(At(AtomicU64::new(0))),
            ),
            ..srv
        };
        let vol = Arc::new(Volume::default());
        *vol.keys.lock().unwrap() = vec![MDS_PR_KEY, client_pr_key(5 << 32 | 1)];
        srv.layouts.scsi.install(vol.clone());
        begin(&srv.layouts, &srv.state);
        assert_eq!(*vol.keys.lock().unwrap(), vec![MDS_PR_KEY]);
        assert!(!srv.layouts.scsi_restart.pending() && !srv.state.layouts_reclaimable());
    }
}
