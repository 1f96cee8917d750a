//! CB_GETATTR for write delegations (RFC 8881 §10.4.3, §20.1): another client's GETATTR of
//! the size or change of a file that a client writes under a delegation asks the holder.
//!
//! ```text
//! GETATTR {size|change} by client B, client A holds the write delegation
//!   ├ A's answer of the last second in hand ─▶ answered from it
//!   ├ else a CB_GETATTR queued (callback::CbQueue; one at a time per delegation),
//!   │   then a wait of at most CB_GETATTR_WAIT for the answer
//!   │   ├ answered in time ─▶ answered from it
//!   │   └ not yet ─▶ DELAY; the answer, when it comes, serves B's retry
//!   └ A failed to answer (error, bad reply, no answer in CB_GETATTR_LIMIT, backchannel
//!       down) ─▶ the delegation is recalled (as for a conflicting OPEN), DELAY
//! ```
//!
//! What the answer does (§10.4.3, as knfsd `nfsd4_deleg_getattr_conflict`): when A's size
//! differs from the server's, or A's change differs from the one it reported last (the
//! server's own at the first answer), the file was modified under the delegation. The
//! server then moves the file's mtime and ctime to now (`SetTime::ServerNow`, which
//! advances the store's change attribute, so B sees a new change value that only ever
//! grows), and B gets A's size. The store's size is never set from an answer: A's
//! LAYOUTCOMMIT or WRITEs do that.
//!
//! Why a short wait and not only DELAY: knfsd waits `NFSD_CB_GETATTR_TIMEOUT` (HZ/34, some
//! 30 ms) for the answer inside the GETATTR, and recalls the delegation if it does not come
//! in that time. A client that retries on DELAY (the Linux client waits 0.1 s and more)
//! would pay that retry on every GETATTR of a file another client writes; pynfs DELEG24/25
//! take the first answer as final. So the GETATTR waits, but briefly (`CB_GETATTR_WAIT`)
//! and never for the round trip itself: the sender does that, and a dead or slow
//! backchannel costs the GETATTR at most the wait, then DELAY (never a blocked COMPOUND,
//! §10.4.1). Unlike knfsd, a holder that is merely slow is not recalled: its late answer
//! serves the retry; only one that fails, or stays silent for `CB_GETATTR_LIMIT`, is.
//!
//! The functions take an [`Env`]: the store, the state, the callback queue and the
//! answers (`CbGetattrs`); server.rs builds it (`Server::cb_getattr_env`) and hands it the
//! CB_GETATTRs' answers (`wanted`, `answered`).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::nfs4::attr::num;
use crate::nfs4::callback::{decode_getattr, Callback, CbAttrs, CbKind, CbQueue};
use crate::nfs4::delegs::{break_conflicts, Breaker};
use crate::nfs4::state::{ShareAccess, StateManager, WriteHolder};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{fh_of, Bitmap};
use crate::store::{Attr, FileType, SetAttrs, SetTime, Store};

/// What CB_GETATTR uses: the store (the times an answer moves), the state (who holds the
/// write delegation), the callback queue and the answers so far.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    pub store: &'a Store,
    pub state: &'a StateManager,
    pub callbacks: &'a CbQueue,
    pub cb_getattrs: &'a CbGetattrs,
}

impl<'a> Env<'a> {
    /// What the recall of a delegation that failed to answer uses.
    pub fn delegs(&self) -> super::Env<'a> {
        super::Env {
            state: self.state,
            callbacks: self.callbacks,
        }
    }
}

/// How long a GETATTR waits for the holder's answer before it answers DELAY: 100 ms. A
/// client answers CB_GETATTR from its cache (the Linux client without I/O; pynfs from its
/// callback thread) within a few milliseconds of the call; knfsd allows 30 ms. Ours is
/// longer because the callback goes out through the sender's thread, not the GETATTR's,
/// and the 2-core hosts these run on are loaded; it holds one COMPOUND thread at most that
/// long.
pub const CB_GETATTR_WAIT: Duration = Duration::from_millis(100);

/// An answer serves the GETATTRs of the next second (a client retrying after DELAY comes
/// back within 0.1–1 s); after it the holder is asked again.
pub const CB_GETATTR_FRESH: Duration = Duration::from_secs(1);

/// A CB_GETATTR not answered within 5 s counts as failed and the delegation is recalled:
/// five times the queue's retry interval (`callback::RETRY_EVERY`), so a busy backchannel
/// (CB_COMPOUND answered DELAY, a slot in use) gets several tries first.
pub const CB_GETATTR_LIMIT: Duration = Duration::from_secs(5);

/// Entries untouched this long go (their delegation was returned or revoked).
const FORGET_AFTER: Duration = Duration::from_secs(60);

/// One write delegation's CB_GETATTR exchange.
#[derive(Debug, Clone)]
struct Entry {
    /// When the CB_GETATTR now awaited was queued (`None`: none awaited).
    asked: Option<Instant>,
    /// The last answer and when it came.
    answer: Option<(CbAttrs, Instant)>,
    /// Whether the last answer was already applied (the times moved for it).
    applied: bool,
    /// The holder's (change, size) of the answer before the last one.
    previous: Option<CbAttrs>,
    /// The holder failed to answer the last CB_GETATTR.
    failed: bool,
    touched: Instant,
}

/// The CB_GETATTR exchanges under way, by delegation stateid (`Server::cb_getattrs`).
#[derive(Debug, Default)]
pub struct CbGetattrs {
    m: Mutex<HashMap<[u8; 12], Entry>>,
    answered: Condvar,
}

/// What a GETATTR does next.
#[derive(Debug)]
enum Next {
    /// Queue a CB_GETATTR, then wait.
    Ask,
    /// One is on its way: wait.
    Wait,
    /// Use this answer (whether it was applied already).
    Use(CbAttrs, bool, Option<CbAttrs>),
    /// The holder failed: recall.
    Failed,
}

impl CbGetattrs {
    fn lock(&self) -> MutexGuard<'_, HashMap<[u8; 12], Entry>> {
        self.m.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next(&self, key: [u8; 12], now: Instant) -> Next {
        let mut m = self.lock();
        m.retain(|_, e| now.saturating_duration_since(e.touched) < FORGET_AFTER);
        let e = m.entry(key).or_insert(Entry {
            asked: None,
            answer: None,
            applied: false,
            previous: None,
            failed: false,
            touched: now,
        });
        e.touched = now;
        if e.failed {
            return Next::Failed;
        }
        if let Some((a, at)) = e.answer {
            if now.saturating_duration_since(at) < CB_GETATTR_FRESH && e.asked.is_none() {
                return Next::Use(a, e.applied, e.previous);
            }
        }
        match e.asked {
            Some(t) if now.saturating_duration_since(t) >= CB_GETATTR_LIMIT => {
                e.failed = true;
                Next::Failed
            }
            Some(_) => Next::Wait,
            None => {
                e.asked = Some(now);
                Next::Ask
            }
        }
    }

    /// The answer to the awaited CB_GETATTR (`Err`: the holder failed).
    fn answer(&self, key: [u8; 12], ans: Result<CbAttrs, ()>, now: Instant) {
        let mut m = self.lock();
        if let Some(e) = m.get_mut(&key) {
            e.asked = None;
            match ans {
                Ok(a) => {
                    e.previous = e.answer.map(|(p, _)| p).or(e.previous);
                    e.answer = Some((a, now));
                    e.applied = false;
                }
                Err(()) => e.failed = true,
            }
        }
        self.answered.notify_all();
    }

    /// Waits until the awaited answer of `key` came, or `until`.
    fn wait(&self, key: [u8; 12], until: Instant) {
        let mut m = self.lock();
        loop {
            let pending = m.get(&key).is_some_and(|e| e.asked.is_some() && !e.failed);
            let now = Instant::now();
            if !pending || now >= until {
                return;
            }
            m = match self.answered.wait_timeout(m, until - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    fn mark_applied(&self, key: [u8; 12]) {
        if let Some(e) = self.lock().get_mut(&key) {
            e.applied = true;
        }
    }

    /// Forgets a delegation's exchange (after its recall).
    fn forget(&self, key: [u8; 12]) {
        self.lock().remove(&key);
    }
}

/// The attributes a GETATTR of `a` by this COMPOUND's client reports (RFC 8881 §10.4.3):
/// `a` itself unless another client holds a write delegation of the file and the request
/// names the size or the change attribute; then those come from the holder (see the
/// module's text), or DELAY while its answer is awaited or the delegation is recalled.
pub fn attrs_for(srv: &Env, caller: Option<u64>, a: Attr, req: &Bitmap) -> Result<Attr, NfsStat> {
    if a.ftype != FileType::Regular || !(req.is_set(num::SIZE) || req.is_set(num::CHANGE)) {
        return Ok(a);
    }
    // No session (not possible past SEQUENCE): no client of ours is excluded.
    let cid = caller.unwrap_or(u64::MAX);
    let Some(h) = srv.state.write_deleg_holder(cid, a.ino) else {
        return Ok(a);
    };
    if h.recalled {
        // The holder is flushing and returning it: its size will be the server's.
        return Err(NfsStat::DELAY);
    }
    let key = h.stateid.other;
    let book = &srv.cb_getattrs;
    let now = Instant::now();
    let mut next = book.next(key, now);
    if !srv.state.backchannel_works(h.client) {
        next = Next::Failed;
    }
    if let Next::Ask = next {
        queue(srv, &a, &h, now);
    }
    if matches!(next, Next::Ask | Next::Wait) {
        book.wait(key, now + CB_GETATTR_WAIT);
        next = book.next(key, Instant::now());
    }
    match next {
        Next::Use(ans, applied, previous) => apply(srv, a, key, ans, applied, previous),
        Next::Failed => {
            book.forget(key);
            tracing::info!(
                client = h.client,
                ino = a.ino.0,
                "CB_GETATTR not answered: recalling the write delegation"
            );
            break_conflicts(
                &srv.delegs(),
                cid,
                fh_of(&a),
                Breaker::Access(ShareAccess::WRITE),
            )?;
            Err(NfsStat::DELAY)
        }
        Next::Ask | Next::Wait => Err(NfsStat::DELAY),
    }
}

/// Queues the CB_GETATTR of `h`'s delegation of `a`.
fn queue(srv: &Env, a: &Attr, h: &WriteHolder, now: Instant) {
    srv.callbacks.push(Callback {
        client: h.client,
        kind: CbKind::Getattr {
            fh: fh_of(a),
            stateid: h.stateid,
        },
        deadline: now + CB_GETATTR_LIMIT,
    });
}

/// A CB_GETATTR goes only while the delegation is held.
pub fn wanted(srv: &Env, cb: &Callback) -> bool {
    match &cb.kind {
        CbKind::Getattr { stateid, .. } => srv.state.deleg_held(cb.client, stateid),
        _ => false,
    }
}

/// The holder answered: its change and size, or a failure (an error status, a reply
/// without both values).
pub fn answered(srv: &Env, cb: &Callback, st: NfsStat, reply: &[u8]) {
    let CbKind::Getattr { stateid, .. } = &cb.kind else {
        return;
    };
    let ans = if st == NfsStat::OK {
        decode_getattr(reply).map_err(|_| ())
    } else {
        Err(())
    };
    tracing::debug!(
        client = cb.client,
        status = st.name(),
        ?ans,
        "CB_GETATTR answered"
    );
    srv.cb_getattrs.answer(stateid.other, ans, Instant::now());
}

/// `a` as the holder's answer shows it. Modified — the holder's size is not the server's,
/// or its change moved since its previous answer (the server's own change at the first) —
/// the times move to now once per answer (the change attribute with them), and the size is
/// the holder's.
fn apply(
    srv: &Env,
    mut a: Attr,
    key: [u8; 12],
    ans: CbAttrs,
    applied: bool,
    previous: Option<CbAttrs>,
) -> Result<Attr, NfsStat> {
    let base = previous.map_or(a.change, |p| p.change);
    let modified = ans.size != a.size || ans.change != base || applied;
    if !modified {
        return Ok(a);
    }
    if !applied {
        let touch = SetAttrs {
            mtime: Some(SetTime::ServerNow),
            ..SetAttrs::default()
        };
        a = srv.store.setattr(a.ino, &touch).map_err(NfsStat::from)?;
        srv.cb_getattrs.mark_applied(key);
    }
    a.size = ans.size;
    Ok(a)
}
