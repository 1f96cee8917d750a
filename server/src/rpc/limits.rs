//! What the connections of one listener may use, alone and together: the blocking
//! threads their COMPOUNDs run on, the reply bytes one connection may have queued, how many
//! connections there are and how long one without a session may sit idle, and log lines
//! that a peer can cause, rate-limited.
//!
//! The figures that set the defaults (RpcOptions) are in docs/robustness.md, measured with
//! `nfs-abuse` (client-tests/src/bin/).

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, Notify, OwnedSemaphorePermit, Semaphore};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every map here stays consistent if a holder panicked.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The budget of bytes a connection may have queued for its writer. A reply takes its size
/// (at most the whole budget, so that one larger reply still goes out alone) before it is
/// queued, and gives it back once written to the socket: a peer that does not read its
/// replies stops being served once the budget is spent (RFC 5531 gives no other remedy;
/// knfsd reserves reply space per socket the same way, `svc_tcp_has_wspace`).
#[derive(Debug)]
pub struct ReplyBudget {
    sem: Semaphore,
    total: usize,
}

impl ReplyBudget {
    pub fn new(bytes: usize) -> Self {
        let total = bytes.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        ReplyBudget {
            sem: Semaphore::new(total),
            total,
        }
    }

    /// Waits until `len` bytes (capped at the budget) are free and takes them; returns what
    /// was taken, for [`ReplyBudget::give_back`]. `None` once the budget is closed.
    pub async fn take(&self, len: usize) -> Option<u32> {
        let n = len.min(self.total) as u32;
        let p = self.sem.acquire_many(n).await.ok()?;
        p.forget();
        Some(n)
    }

    /// Waits until some of the budget is free, without taking it: the reader starts nothing
    /// new while every byte is spent.
    pub async fn wait_for_room(&self) -> bool {
        self.sem.acquire().await.is_ok()
    }

    pub fn give_back(&self, n: u32) {
        if n > 0 {
            self.sem.add_permits(n as usize);
        }
    }

    /// Every byte of the budget is taken.
    pub fn is_spent(&self) -> bool {
        self.sem.available_permits() == 0
    }

    /// Bytes queued now.
    pub fn queued(&self) -> usize {
        self.total - self.sem.available_permits().min(self.total)
    }

    /// Wakes and fails every waiter (the connection is closing).
    pub fn close(&self) {
        self.sem.close();
    }
}

/// What the listener knows of one connection: when it last received a byte, what it has in
/// flight and queued, and the signal that closes it.
#[derive(Debug)]
pub struct ConnTrack {
    /// Milliseconds since the listener started.
    last_rx_ms: AtomicU64,
    inflight: Arc<Semaphore>,
    max_inflight: usize,
    budget: Arc<ReplyBudget>,
    /// Already asked to close.
    evicting: AtomicBool,
    pub evict: Notify,
}

impl ConnTrack {
    pub fn touch(&self, now_ms: u64) {
        self.last_rx_ms.store(now_ms, Ordering::Relaxed);
    }

    pub fn last_rx_ms(&self) -> u64 {
        self.last_rx_ms.load(Ordering::Relaxed)
    }

    /// Asked to close, it found itself busy again: it may be chosen later.
    pub fn spared(&self) {
        self.evicting.store(false, Ordering::Relaxed);
    }

    /// Nothing in flight and no reply waiting for the socket.
    pub fn quiet(&self) -> bool {
        self.inflight.available_permits() == self.max_inflight && self.budget.queued() == 0
    }
}

/// State shared by every connection of one listener.
#[derive(Debug)]
pub struct Shared {
    /// Turns on the COMPOUND threads, all connections together. Tokio's semaphore is FIFO,
    /// and each connection waits for at most one permit at a time (conn.rs), so when every
    /// thread is busy the connections take turns: a busy connection cannot make a quiet one
    /// wait behind all of its requests.
    pub blocking: Arc<Semaphore>,
    pub max_blocking: usize,
    /// The threads COMPOUNDs run on: exactly `max_blocking` at most. Not tokio's blocking
    /// pool, which starts a thread whenever none is idle at the instant of a call (up to
    /// 512): permits handed from one COMPOUND to the next made it grow to twice the bound.
    pub pool: BlockingPool,
    started: Instant,
    conns: Mutex<HashMap<u64, Arc<ConnTrack>>>,
    /// Refused oversize records, failed accepts, refused connections: one line per
    /// interval each, with the count of those not logged (RateLimit).
    pub log_oversize: RateLimit,
    pub log_accept: RateLimit,
    pub log_refused: RateLimit,
}

/// How often a line that any peer can cause may be logged.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

impl Shared {
    pub fn new(max_blocking: usize) -> Shared {
        let max_blocking = max_blocking.clamp(1, Semaphore::MAX_PERMITS);
        Shared {
            blocking: Arc::new(Semaphore::new(max_blocking)),
            max_blocking,
            pool: BlockingPool::new(max_blocking),
            started: Instant::now(),
            conns: Mutex::new(HashMap::new()),
            log_oversize: RateLimit::new(LOG_INTERVAL),
            log_accept: RateLimit::new(LOG_INTERVAL),
            log_refused: RateLimit::new(LOG_INTERVAL),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The instant of a [`Shared::now_ms`] reading.
    pub fn instant_of(&self, ms: u64) -> Instant {
        self.started + Duration::from_millis(ms)
    }

    /// Registers a new connection: `inflight` holds `max_inflight` permits when nothing is
    /// in flight.
    pub fn register(
        &self,
        id: u64,
        inflight: Arc<Semaphore>,
        max_inflight: usize,
        budget: Arc<ReplyBudget>,
    ) -> Arc<ConnTrack> {
        let t = Arc::new(ConnTrack {
            last_rx_ms: AtomicU64::new(self.now_ms()),
            inflight,
            max_inflight,
            budget,
            evicting: AtomicBool::new(false),
            evict: Notify::new(),
        });
        lock(&self.conns).insert(id, t.clone());
        t
    }

    pub fn unregister(&self, id: u64) {
        lock(&self.conns).remove(&id);
    }

    pub fn connections(&self) -> usize {
        lock(&self.conns).len()
    }

    /// Asks the connection idle the longest among those with nothing in flight and no
    /// session (`has_session` asks the state layer) to close, and returns its id; `None`
    /// when there is none.
    pub fn evict_one(&self, has_session: impl Fn(u64) -> bool) -> Option<u64> {
        let mut idle: Vec<(u64, Arc<ConnTrack>)> = lock(&self.conns)
            .iter()
            .filter(|(_, t)| t.quiet() && !t.evicting.load(Ordering::Relaxed))
            .map(|(id, t)| (*id, t.clone()))
            .collect();
        idle.sort_by_key(|(_, t)| t.last_rx_ms());
        let (id, t) = idle.into_iter().find(|(id, _)| !has_session(*id))?;
        // notify_one keeps the wake-up if the connection is not waiting right now; the
        // connection checks again before it closes.
        t.evicting.store(true, Ordering::Relaxed);
        t.evict.notify_one();
        Some(id)
    }

    /// Takes a blocking-thread permit (FIFO among connections).
    pub async fn blocking_permit(&self) -> Option<OwnedSemaphorePermit> {
        self.blocking.clone().acquire_owned().await.ok()
    }
}

type Task = Box<dyn FnOnce() + Send>;

/// A fixed set of threads, started as they are first needed, that run closures in order.
#[derive(Debug)]
pub struct BlockingPool {
    tx: Mutex<std_mpsc::Sender<Task>>,
    rx: Arc<Mutex<std_mpsc::Receiver<Task>>>,
    max: usize,
    spawned: AtomicUsize,
    /// Closures queued or running.
    busy: Arc<AtomicUsize>,
}

impl BlockingPool {
    pub fn new(max: usize) -> BlockingPool {
        let (tx, rx) = std_mpsc::channel();
        BlockingPool {
            tx: Mutex::new(tx),
            rx: Arc::new(Mutex::new(rx)),
            max: max.max(1),
            spawned: AtomicUsize::new(0),
            busy: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Runs `f` on a pool thread; the result, or `Err` if it panicked.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ()> {
        let (done, result) = oneshot::channel();
        let busy = self.busy.clone();
        let outstanding = busy.fetch_add(1, Ordering::SeqCst) + 1;
        let task: Task = Box::new(move || {
            let r = catch_unwind(AssertUnwindSafe(f)).map_err(|_| ());
            busy.fetch_sub(1, Ordering::SeqCst);
            let _ = done.send(r);
        });
        // A thread for every closure queued or running (up to the bound): none waits behind
        // a long one while the pool could have started another.
        if outstanding > self.spawned.load(Ordering::SeqCst) {
            self.spawn_worker();
        }
        if lock(&self.tx).send(task).is_err() {
            self.busy.fetch_sub(1, Ordering::SeqCst);
            return Err(());
        }
        result.await.unwrap_or(Err(()))
    }

    fn spawn_worker(&self) {
        let n = self.spawned.fetch_add(1, Ordering::SeqCst);
        if n >= self.max {
            self.spawned.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let rx = self.rx.clone();
        let spawned = std::thread::Builder::new()
            .name("pnfsd-nfs".into())
            .spawn(move || loop {
                let task = lock(&rx).recv();
                match task {
                    Ok(t) => t(),
                    Err(_) => return,
                }
            });
        if spawned.is_err() {
            // Out of threads: the ones already running take the work.
            self.spawned.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Threads started so far.
    pub fn threads(&self) -> usize {
        self.spawned.load(Ordering::SeqCst)
    }

    /// Waits (at most `limit`) until nothing is queued or running.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        let t0 = Instant::now();
        while self.busy.load(Ordering::SeqCst) > 0 {
            if t0.elapsed() >= limit {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

/// Lets one line through per interval and counts the rest, so that a peer repeating what
/// causes it (oversize records, connection floods) cannot grow the log at its own rate. One
/// limiter for the whole workspace, in the lowest crate the server uses (docs/nvme-tcp.md
/// "Limits").
pub use nvme_tcp::RateLimit;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reply_budget_caps_a_large_reply_at_the_whole_budget() {
        let b = ReplyBudget::new(100);
        assert_eq!(b.take(30).await, Some(30));
        assert_eq!(b.queued(), 30);
        b.give_back(30);
        // Larger than the budget: takes all of it, so it goes out alone.
        assert_eq!(b.take(1000).await, Some(100));
        assert_eq!(b.queued(), 100);
        let waiting = tokio::time::timeout(Duration::from_millis(50), b.wait_for_room()).await;
        assert!(waiting.is_err(), "no room while the budget is spent");
        b.give_back(100);
        assert!(b.wait_for_room().await);
        b.close();
        assert_eq!(b.take(1).await, None);
    }

    #[test]
    fn eviction_picks_the_longest_idle_quiet_connection_without_a_session() {
        let s = Shared::new(4);
        let reg = |id, busy: bool| {
            let inflight = Arc::new(Semaphore::new(2));
            if busy {
                inflight.try_acquire().unwrap().forget();
            }
            s.register(id, inflight, 2, Arc::new(ReplyBudget::new(10)))
        };
        let (a, b, c, d) = (reg(1, false), reg(2, false), reg(3, true), reg(4, false));
        a.touch(50);
        b.touch(10);
        c.touch(5); // busy
        d.touch(1); // in a session
        let in_session = |id| id == 4;
        assert_eq!(s.evict_one(in_session), Some(2));
        assert_eq!(s.evict_one(in_session), Some(1));
        assert_eq!(s.evict_one(in_session), None);
        // A reply waiting for the socket makes a connection busy too.
        let e = reg(5, false);
        e.touch(0);
        futures_lite_block_on(e.budget.take(3));
        assert_eq!(s.evict_one(in_session), None);
        s.unregister(2);
        assert_eq!(s.connections(), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_pool_never_starts_more_threads_than_its_bound() {
        let pool = Arc::new(BlockingPool::new(3));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut all = Vec::new();
        for i in 0..40 {
            let (pool, running, most) = (pool.clone(), running.clone(), most.clone());
            all.push(tokio::spawn(async move {
                pool.run(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(2));
                    running.fetch_sub(1, Ordering::SeqCst);
                    i
                })
                .await
            }));
        }
        for (i, t) in all.into_iter().enumerate() {
            assert_eq!(t.await.unwrap(), Ok(i));
        }
        assert!(pool.threads() <= 3 && most.load(Ordering::SeqCst) <= 3);
        assert_eq!(
            pool.run(|| panic!("a panicking closure")).await,
            Err::<(), ()>(())
        );
        assert_eq!(
            pool.run(|| 7).await,
            Ok(7),
            "a panic does not take a thread away"
        );
        assert!(pool.wait_idle(Duration::from_secs(1)).await);
    }

    fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }
}
