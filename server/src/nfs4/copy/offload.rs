//! Asynchronous COPY (RFC 7862 §4.8, §15.2.3, §15.8, §15.9, §16.1): the copies that outlive
//! their COMPOUND, by copy stateid.
//!
//! ```text
//! COPY, ca_synchronous = false ─▶ copy::copy (checks, recalls) ─▶ Offloads::start
//!   ├ over a cap (per client, in all) ─▶ None: the COPY runs synchronously instead
//!   └ a copy stateid; the COPY answers at once (wr_callback_id, wr_count 0, UNSTABLE4)
//! workers (run_workers, COPY_WORKERS threads) ─▶ step: STEP bytes of one copy, round robin
//!   ├ a layout or conflicting delegation of the destination appeared ─▶ recalled, the copy
//!   │   ends short (§15.2.3: the client copies the rest with another COPY)
//!   └ the last step: COMMIT of the destination (log force + device flush, as the synchronous
//!       COPY), then CB_OFFLOAD queued (callback::CbQueue) with the result
//! OFFLOAD_STATUS ─▶ status: bytes so far, the result once done
//! OFFLOAD_CANCEL ─▶ cancel: waits out the step in progress, then the copy is gone (no
//!   CB_OFFLOAD); partially copied bytes stay
//! CB_OFFLOAD answered ─▶ the copy is freed; else after KEEP_DONE (tick)
//! the client gone (DESTROY_CLIENTID, expiry: tick) ─▶ its copies cancelled and freed
//! ```
//!
//! Why steps and not one store copy per job: a cancel, an expiry or a layout that shows up
//! takes effect within one step, OFFLOAD_STATUS sees progress, and two workers share
//! themselves between all copies in flight, so a long copy never starves a short one.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::nfs4::callback::{Callback, CbKind, OffloadOutcome};
use crate::nfs4::delegs::{break_conflicts, Breaker};
use crate::nfs4::state::ShareAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Fh, Stateid};
use crate::store::{CopyMethod, Stable};

use super::{CopyDone, Env};

/// Async copies of one client not yet freed (running, waiting, or done and not yet
/// reported). The Linux client sends one COPY per copy_file_range(2) and waits for it, so
/// 4 lets four copying processes of one client run at once; a fifth COPY is synchronous.
pub const MAX_PER_CLIENT: usize = 4;
/// Async copies running or waiting, of all clients: 16. They share `COPY_WORKERS` threads a
/// step at a time, so more would only make each slower; past it a COPY is synchronous.
pub const MAX_IN_FLIGHT: usize = 16;
/// Threads that run the async copies: the copy is bound by the volume, not the CPU, and the
/// hosts have 2 cores; two keep the device busy while one waits on a flush.
pub const COPY_WORKERS: usize = 2;
/// The most one async COPY moves: 1 GiB, some seconds at the volume's sequential rate
/// (docs/benchmarks.md). A longer copy ends short (§15.2.3) and the client continues it,
/// so no copy holds a worker's share indefinitely.
pub const MAX_ASYNC_COPY: u64 = 1 << 30;
/// Bytes per step: 4 MiB, four of the store's copy chunks (store/copy.rs), a few
/// milliseconds of device time: how long a cancel waits at most, and how fine
/// OFFLOAD_STATUS's count moves.
pub const STEP: u64 = 4 << 20;
/// How long the result of a copy is kept when CB_OFFLOAD could not be delivered: 2 leases
/// from its end. The CB_OFFLOAD is retried for one lease (its deadline); a client whose
/// backchannel is down asks OFFLOAD_STATUS within its lease or has expired.
const KEEP_LEASES: u32 = 2;
/// How long a cancel waits for a step in progress before it looks again.
const CANCEL_WAIT: Duration = Duration::from_millis(50);

/// A copy stateid (RFC 7862 §4.8): `other` is a tag of this boot (4 bytes, so that one of
/// an earlier boot is unknown) and a serial with its top bit set (8 bytes). The state
/// manager's ids count up from 1 (nfs4/state/stateid.rs) and never reach 2^63, so no copy
/// stateid equals an open, lock, delegation or layout stateid. The seqid is always 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CopyStateid(pub Stateid);

impl CopyStateid {
    const SERIAL_BIT: u64 = 1 << 63;

    fn new(boot: u64, serial: u64) -> CopyStateid {
        let mut other = [0u8; 12];
        other[..4].copy_from_slice(&boot_tag(boot).to_be_bytes());
        other[4..].copy_from_slice(&(Self::SERIAL_BIT | serial).to_be_bytes());
        CopyStateid(Stateid { seqid: 1, other })
    }

    /// The copy a client names: seqid 0 (the current one) or 1, else BAD_STATEID.
    fn key_of(given: &Stateid) -> Result<[u8; 12], NfsStat> {
        match given.seqid {
            0 | 1 => Ok(given.other),
            _ => Err(NfsStat::BAD_STATEID),
        }
    }
}

/// The 4 bytes of `other` that tell this boot's copy stateids from another's.
fn boot_tag(boot: u64) -> u32 {
    (boot ^ (boot >> 32)) as u32
}

/// What an async copy moves, decided and checked by `copy::copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    pub src: Fh,
    pub src_off: u64,
    pub dst: Fh,
    pub dst_off: u64,
    pub len: u64,
}

/// One async copy.
#[derive(Debug)]
struct Entry {
    client: u64,
    stateid: Stateid,
    job: Job,
    /// Bytes copied so far (OFFLOAD_STATUS's `osr_count`).
    copied: u64,
    /// A worker is doing a step of it now.
    busy: bool,
    /// OFFLOAD_CANCEL or the client's end asked it to stop: the worker doing its step frees
    /// it when the step ends.
    cancelled: bool,
    /// Its result and when it came: the copy is over.
    done: Option<(Result<CopyDone, NfsStat>, Instant)>,
}

#[derive(Debug, Default)]
struct Book {
    next_serial: u64,
    copies: HashMap<[u8; 12], Entry>,
    /// The copies waiting for their next step, in turn.
    run: VecDeque<[u8; 12]>,
    #[cfg(test)]
    step: Option<u64>,
}

impl Book {
    fn of_client(&self, client: u64) -> usize {
        self.copies.values().filter(|e| e.client == client).count()
    }

    fn in_flight(&self) -> usize {
        self.copies.values().filter(|e| e.done.is_none()).count()
    }

    /// The copy `given` names, if `client` started it.
    fn find(&mut self, client: u64, given: &Stateid) -> Result<&mut Entry, NfsStat> {
        let key = CopyStateid::key_of(given)?;
        match self.copies.get_mut(&key) {
            Some(e) if e.client == client && !e.cancelled => Ok(e),
            _ => Err(NfsStat::BAD_STATEID),
        }
    }

    fn remove(&mut self, key: &[u8; 12]) {
        self.copies.remove(key);
        self.run.retain(|k| k != key);
    }
}

/// The async copies of the server (`Server::copies`).
#[derive(Debug, Default)]
pub struct Offloads {
    book: Mutex<Book>,
    /// Signalled when a copy is started (workers wait on it).
    work: Condvar,
    /// Signalled when a step ends (a cancel waits on it).
    idle: Condvar,
    stop: AtomicBool,
}

/// What OFFLOAD_STATUS answers (RFC 7862 §15.9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffloadStatus {
    /// `osr_count`: bytes copied so far.
    pub count: u64,
    /// `osr_complete`: the copy's status once it is over.
    pub complete: Option<NfsStat>,
}

impl Offloads {
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `job` for `client` and wakes a worker: its copy stateid, or `None` when the
    /// client or the server has as many async copies as allowed (the caller then copies
    /// synchronously).
    pub fn start(&self, boot: u64, client: u64, job: Job) -> Option<Stateid> {
        let mut b = self.lock();
        if b.of_client(client) >= MAX_PER_CLIENT || b.in_flight() >= MAX_IN_FLIGHT {
            return None;
        }
        b.next_serial += 1;
        let CopyStateid(stateid) = CopyStateid::new(boot, b.next_serial);
        b.copies.insert(
            stateid.other,
            Entry {
                client,
                stateid,
                job,
                copied: 0,
                busy: false,
                cancelled: false,
                done: None,
            },
        );
        b.run.push_back(stateid.other);
        drop(b);
        self.work.notify_one();
        Some(stateid)
    }

    /// OFFLOAD_STATUS of `client`'s copy `given`.
    pub fn status(&self, client: u64, given: &Stateid) -> Result<OffloadStatus, NfsStat> {
        let mut b = self.lock();
        let e = b.find(client, given)?;
        Ok(OffloadStatus {
            count: e.copied,
            complete: e.done.as_ref().map(|(r, _)| match r {
                Ok(_) => NfsStat::OK,
                Err(s) => *s,
            }),
        })
    }

    /// OFFLOAD_CANCEL of `client`'s copy `given`: once it returns, no byte more is copied
    /// and no CB_OFFLOAD goes out for it (one already on the wire may still arrive).
    pub fn cancel(&self, client: u64, given: &Stateid) -> Result<(), NfsStat> {
        let mut b = self.lock();
        let e = b.find(client, given)?;
        let key = e.stateid.other;
        if !e.busy {
            b.remove(&key);
            return Ok(());
        }
        e.cancelled = true;
        // The worker frees it when its step ends; a step is bounded (`STEP`).
        while b.copies.contains_key(&key) {
            b = self
                .idle
                .wait_timeout(b, CANCEL_WAIT)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(())
    }

    /// Cancels and frees every copy of `client` (DESTROY_CLIENTID, expiry). A copy in the
    /// middle of a step is freed by its worker when the step ends.
    pub fn forget_client(&self, client: u64) {
        let mut b = self.lock();
        let keys: Vec<[u8; 12]> = b
            .copies
            .iter()
            .filter(|(_, e)| e.client == client)
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            match b.copies.get_mut(&k) {
                Some(e) if e.busy => e.cancelled = true,
                _ => b.remove(&k),
            }
        }
    }

    /// Copies not yet freed (tests, metrics).
    pub fn len(&self) -> usize {
        self.lock().copies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends `run_workers`' threads.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.work.notify_all();
    }

    /// Sets the bytes per step (tests, to see a copy in the middle with small files).
    #[cfg(test)]
    pub fn set_step(&self, bytes: u64) {
        self.lock().step = Some(bytes);
    }

    fn step_bytes(&self) -> u64 {
        #[cfg(test)]
        if let Some(s) = self.lock().step {
            return s;
        }
        STEP
    }
}

/// Takes the next copy due a step and marks it busy.
fn take_next(srv: &Env) -> Option<([u8; 12], u64, Job, u64)> {
    let mut b = srv.copies.lock();
    while let Some(key) = b.run.pop_front() {
        if let Some(e) = b.copies.get_mut(&key) {
            if !e.busy && !e.cancelled && e.done.is_none() {
                e.busy = true;
                return Some((key, e.client, e.job, e.copied));
            }
        }
    }
    None
}

/// How one step ended.
enum Stepped {
    /// More to copy.
    More(u64),
    /// The copy is over: its result and the bytes it copied.
    Over(Result<CopyDone, NfsStat>, u64),
}

/// One step of the next copy in turn, on the calling thread: false if no copy was due.
/// The workers loop on it; tests call it to move a copy along.
pub fn step(srv: &Env) -> bool {
    let Some((key, client, job, copied)) = take_next(srv) else {
        return false;
    };
    let stepped = copy_step(srv, client, &job, copied, srv.copies.step_bytes());
    let mut b = srv.copies.lock();
    let Some(e) = b.copies.get_mut(&key) else {
        srv.copies.idle.notify_all();
        return true;
    };
    e.busy = false;
    if e.cancelled {
        b.remove(&key);
    } else {
        match stepped {
            Stepped::More(n) => {
                e.copied = n;
                b.run.push_back(key);
            }
            Stepped::Over(res, n) => {
                e.copied = n;
                e.done = Some((res, Instant::now()));
                let cb = offload_callback(srv, e);
                drop(b);
                srv.pnfs.callbacks.push(cb);
                srv.copies.idle.notify_all();
                return true;
            }
        }
    }
    drop(b);
    srv.copies.idle.notify_all();
    true
}

/// Copies the next at most `step` bytes of `job`, of which `copied` are done.
fn copy_step(srv: &Env, client: u64, job: &Job, copied: u64, step: u64) -> Stepped {
    if let Err(short) = still_clear(srv, client, job) {
        return finish(srv, job, copied, short);
    }
    let n = step.min(job.len - copied);
    let got = srv.pnfs.store.copy(
        job.src.ino,
        job.src_off + copied,
        job.dst.ino,
        job.dst_off + copied,
        n,
        false,
        CopyMethod::Auto,
    );
    match got {
        Ok(c) => {
            let copied = copied + c.bytes;
            if c.bytes < n || copied >= job.len {
                finish(srv, job, copied, None)
            } else {
                Stepped::More(copied)
            }
        }
        Err(e) => finish(srv, job, copied, Some(NfsStat::from(e))),
    }
}

/// Whether the copy may go on: `Err(None)` ends it short, successfully, when a layout or a
/// delegation that conflicts with it appeared since the COPY (they are recalled: the copy
/// would write under them); `Err(Some(status))` when its destination is gone.
fn still_clear(srv: &Env, client: u64, job: &Job) -> Result<(), Option<NfsStat>> {
    if super::break_layouts(srv, job.dst).is_err() {
        return Err(None);
    }
    let read = Breaker::Access(ShareAccess::READ);
    let write = Breaker::Access(ShareAccess::WRITE);
    if break_conflicts(&srv.pnfs.delegs(), client, job.src, read).is_err()
        || break_conflicts(&srv.pnfs.delegs(), client, job.dst, write).is_err()
    {
        return Err(None);
    }
    Ok(())
}

/// The end of a copy of `copied` bytes: the destination made durable as the synchronous
/// COPY does (the store's COMMIT: the log forced to the file, the data device flushed if
/// that wrote no log), so that FILE_SYNC4 in CB_OFFLOAD is true; `failed` is the error that
/// stopped it (the bytes before it are reported, not committed).
fn finish(srv: &Env, job: &Job, copied: u64, failed: Option<NfsStat>) -> Stepped {
    if let Some(st) = failed {
        return Stepped::Over(Err(st), copied);
    }
    if copied > 0 {
        if let Err(e) = srv.pnfs.store.commit(job.dst.ino) {
            return Stepped::Over(Err(NfsStat::from(e)), copied);
        }
    }
    let done = CopyDone {
        count: copied,
        committed: Stable::FileSync,
    };
    Stepped::Over(Ok(done), copied)
}

/// The CB_OFFLOAD of a copy that is over, retried until one lease has passed.
fn offload_callback(srv: &Env, e: &Entry) -> Callback {
    let outcome = match e.done.as_ref().map(|(r, _)| *r) {
        Some(Ok(d)) => OffloadOutcome::Done {
            count: d.count,
            committed: d.committed,
            verifier: srv.boot_verifier.to_be_bytes(),
        },
        Some(Err(status)) => OffloadOutcome::Failed {
            status,
            copied: e.copied,
        },
        None => OffloadOutcome::Failed {
            status: NfsStat::SERVERFAULT,
            copied: e.copied,
        },
    };
    let lease = Duration::from_secs(u64::from(srv.pnfs.state.lease_seconds()));
    Callback {
        client: e.client,
        kind: CbKind::Offload {
            fh: e.job.dst,
            stateid: e.stateid,
            outcome,
        },
        deadline: Instant::now() + lease,
    }
}

/// A CB_OFFLOAD is sent only while its copy is still kept (not cancelled, not freed).
pub fn offload_wanted(srv: &Env, cb: &Callback) -> bool {
    let CbKind::Offload { stateid, .. } = &cb.kind else {
        return false;
    };
    let b = srv.copies.lock();
    b.copies
        .get(&stateid.other)
        .is_some_and(|e| e.done.is_some() && !e.cancelled)
}

/// The client has the result: the copy is freed, whatever the client answered (an error
/// answer means it did not want it; it cannot be told again better).
pub fn offload_answered(srv: &Env, cb: &Callback, st: NfsStat, _: &[u8]) {
    let CbKind::Offload { stateid, .. } = &cb.kind else {
        return;
    };
    if st != NfsStat::OK {
        tracing::info!(client = cb.client, status = st.name(), "CB_OFFLOAD refused");
    }
    let mut b = srv.copies.lock();
    if b.copies.get(&stateid.other).is_some_and(|e| !e.busy) {
        b.remove(&stateid.other);
    }
}

/// The periodic part (once a second): the copies of clients the state no longer knows
/// (expired, destroyed) are cancelled and freed, and results nobody collected within
/// `KEEP_LEASES` leases are dropped.
pub fn tick(srv: &Env, now: Instant) {
    let keep =
        Duration::from_secs(u64::from(srv.pnfs.state.lease_seconds()) * u64::from(KEEP_LEASES));
    let clients: Vec<u64> = {
        let b = srv.copies.lock();
        let mut c: Vec<u64> = b.copies.values().map(|e| e.client).collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    for c in clients {
        if srv.pnfs.state.client_identity(c).is_none() {
            srv.copies.forget_client(c);
        }
    }
    let mut b = srv.copies.lock();
    let stale: Vec<[u8; 12]> = b
        .copies
        .iter()
        .filter(|(_, e)| {
            e.done
                .as_ref()
                .is_some_and(|(_, at)| now.saturating_duration_since(*at) >= keep)
        })
        .map(|(k, _)| *k)
        .collect();
    for k in stale {
        b.remove(&k);
    }
}

/// Starts the `COPY_WORKERS` threads that run the async copies until `Offloads::stop`. The
/// threads share `owner`, from which `env` takes the copy service's handle.
pub fn run_workers<H: Send + Sync + 'static>(
    owner: &Arc<H>,
    env: fn(&H) -> Env<'_>,
) -> std::io::Result<()> {
    for i in 0..COPY_WORKERS {
        let s = owner.clone();
        std::thread::Builder::new()
            .name(format!("pnfsd-copy{i}"))
            .spawn(move || work(&env(&s)))?;
    }
    Ok(())
}

/// One worker: steps copies while there are any, else waits to be woken.
fn work(srv: &Env) {
    let o = &srv.copies;
    while !o.stop.load(Ordering::Relaxed) {
        if step(srv) {
            continue;
        }
        let b = o.lock();
        if b.run.is_empty() {
            let _ = o.work.wait_timeout(b, Duration::from_millis(250));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Ino;

    #[test]
    fn copy_stateids_are_unique_and_never_a_state_managers() {
        let a = CopyStateid::new(0x1234_5678_9abc_def0, 1).0;
        let b = CopyStateid::new(0x1234_5678_9abc_def0, 2).0;
        assert_ne!(a, b);
        assert_eq!(a.seqid, 1);
        // The serial has its top bit set: the state manager's ids count from 1.
        assert_eq!(a.other[4] & 0x80, 0x80);
        // Another boot's: another tag.
        assert_ne!(CopyStateid::new(7, 1).0.other[..4], a.other[..4]);
        assert_eq!(CopyStateid::key_of(&a), Ok(a.other));
        let mut old = a;
        old.seqid = 2;
        assert_eq!(CopyStateid::key_of(&old), Err(NfsStat::BAD_STATEID));
    }

    #[test]
    fn caps_per_client_and_in_all() {
        let o = Offloads::default();
        let fh = |n| Fh {
            ino: Ino(n),
            generation: 1,
        };
        let job = Job {
            src: fh(1),
            src_off: 0,
            dst: fh(2),
            dst_off: 0,
            len: 1,
        };
        for _ in 0..MAX_PER_CLIENT {
            assert!(o.start(1, 7, job).is_some());
        }
        assert_eq!(o.start(1, 7, job), None, "over the per-client cap");
        let mut client = 100;
        while o.len() < MAX_IN_FLIGHT {
            client += 1;
            assert!(o.start(1, client, job).is_some());
        }
        assert_eq!(o.start(1, 999, job), None, "over the cap of all");
        o.forget_client(7);
        assert!(o.start(1, 999, job).is_some());
        assert_eq!(o.len(), MAX_IN_FLIGHT - MAX_PER_CLIENT + 1);
    }
}
