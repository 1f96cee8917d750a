//! Hostile and broken clients for the robustness tests and the `nfs-abuse` tool
//! (docs/robustness.md): connections that send small requests for large replies and never
//! read them, idle connections that never create a session, the server's memory and thread
//! figures from `/proc`, and a well-behaved client's SEQUENCE round trip.
//!
//! Every loop here is bounded by its caller (a count, a deadline, or dropping the handle),
//! and every address is the server under test on the loopback.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::compound::Compound;
use crate::error::{ClientError, Result};
use crate::ops::Stable;
use crate::rpc::{self, AuthSys, Cred};
use crate::session::Session;

/// The server's resident memory and thread count, from `/proc/<pid>/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStats {
    pub rss_kib: u64,
    pub threads: u64,
}

pub fn proc_stats(pid: u32) -> Result<ProcStats> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| ClientError::Harness(format!("no {name} in /proc/{pid}/status")))
    };
    Ok(ProcStats {
        rss_kib: field("VmRSS:")?,
        threads: field("Threads:")?,
    })
}

/// The 1-minute load average, printed next to every figure (the machine is shared).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// Connections that repeat one request whose reply is `reply_len` bytes and never read.
///
/// The request is a retry: SEQUENCE on a slot whose last request (a READ of `reply_len`
/// bytes, `sa_cachethis`) already completed, so the server answers each copy from its reply
/// cache (RFC 8881 §2.10.6.1) — cheap for the server, ~170 bytes in, `reply_len` out. A
/// SEQUENCE on another connection of the session is allowed and binds it (§2.10.3.1).
pub struct UnreadFlood {
    /// Requests written into the sockets so far (all connections).
    pub sent: Arc<AtomicU64>,
    pub request_len: usize,
    tasks: Vec<JoinHandle<()>>,
    /// The session the flood retries on (kept so the server keeps it).
    pub session: Session,
}

impl UnreadFlood {
    /// Sets up the session and the file, then starts `conns` connections.
    pub async fn start(addr: SocketAddr, conns: usize, reply_len: usize) -> Result<UnreadFlood> {
        let s = Session::connect(addr).await?;
        let root = s.lookup_path("").await?;
        let name = format!("abuse-{}-{}", std::process::id(), rand_suffix());
        let f = s.create_file(&root, &name, 0o644).await?;
        // READ4resok carries the data plus a few words: ask for that much less.
        let data_len = reply_len.saturating_sub(200).max(1);
        s.write_all(&f, 0, &vec![0xab; data_len], Stable::FileSync)
            .await?;
        let read = Compound::new()
            .putfh(&f.fh)
            .read(f.stateid, 0, data_len as u32);
        let slot = s.take_slot().await?;
        // The original: executed and cached; every copy after it is a retry.
        s.send_on(&slot, &read, true).await?.ok()?;
        let mut full = Compound {
            tag: read.tag.clone(),
            ops: vec![s.sequence_op(&slot, true)],
        };
        full.ops.extend(read.ops.iter().cloned());
        // `slot` is dropped without advancing: the next seqid stays the one just used.
        drop(slot);
        let args = full.encode(s.minor);
        let cred = Cred::Sys(AuthSys::root());
        let request = rpc::frame(&rpc::encode_call(
            0x0ab0_5e00,
            pnfsd::rpc::program::NFS_PROGRAM,
            pnfsd::rpc::program::NFS_V4,
            pnfsd::rpc::program::PROC_COMPOUND,
            &cred,
            &args,
        ));
        let sent = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::with_capacity(conns);
        for _ in 0..conns {
            let stream = TcpStream::connect(addr).await?;
            let (request, sent) = (request.clone(), sent.clone());
            tasks.push(tokio::spawn(async move {
                // Never read: the read half stays open and unread until the task ends.
                let (_rd, mut wr) = stream.into_split();
                // A batch per write, so that the flood is not limited by system calls.
                let batch: Vec<u8> = request.repeat(16);
                while wr.write_all(&batch).await.is_ok() {
                    sent.fetch_add(16, Ordering::Relaxed);
                }
            }));
        }
        Ok(UnreadFlood {
            sent,
            request_len: request.len(),
            tasks,
            session: s,
        })
    }

    /// Waits until the server stops reading the flood: no request written for `quiet`
    /// (the sockets' buffers are full). Returns the requests written, or `None` at `limit`.
    pub async fn wait_stalled(&self, quiet: Duration, limit: Duration) -> Option<u64> {
        let t0 = Instant::now();
        let mut last = self.sent.load(Ordering::Relaxed);
        while t0.elapsed() < limit {
            tokio::time::sleep(quiet).await;
            let now = self.sent.load(Ordering::Relaxed);
            if now == last {
                return Some(now);
            }
            last = now;
        }
        None
    }

    /// Closes every abusive connection (the session stays until the handle drops).
    pub fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for UnreadFlood {
    fn drop(&mut self) {
        self.stop();
    }
}

fn rand_suffix() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// `n` connections that connect and then say nothing. Connections the server refuses or
/// closes are counted by [`open_count`].
pub async fn idle_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        if let Ok(s) = TcpStream::connect(addr).await {
            v.push(s);
        }
    }
    v
}

/// How many of `conns` the server has not closed (a closed one reads end of stream).
pub async fn open_count(conns: &[TcpStream]) -> usize {
    let mut open = 0;
    for c in conns {
        let mut b = [0u8; 1];
        match c.try_read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => open += 1,
            Ok(_) | Err(_) => {}
        }
    }
    open
}

/// `n` SEQUENCE-only COMPOUNDs on `s`, one after the other: each round trip.
pub async fn sequence_rtts(s: &Session, n: usize) -> Result<Vec<Duration>> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        s.run_ok(Compound::new()).await?;
        v.push(t.elapsed());
    }
    Ok(v)
}

/// The median of `v` (sorts it).
pub fn median(v: &mut [Duration]) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    v[v.len() / 2]
}

/// The `p`-th percentile (0..=100) of a sorted `v`.
pub fn percentile(v: &[Duration], p: usize) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() - 1) * p.min(100)) / 100]
}

/// A file of `len` bytes for [`walk_away_clients`] to read (a handle any session may use).
pub async fn reply_file(s: &Session, len: usize) -> Result<Vec<u8>> {
    let root = s.lookup_path("").await?;
    let name = format!("walkaway-{}-{}", std::process::id(), rand_suffix());
    let f = s.create_file(&root, &name, 0o644).await?;
    s.write_all(&f, 0, &vec![0xcd; len.max(1)], Stable::FileSync)
        .await?;
    Ok(f.fh)
}

/// What [`walk_away_clients`] got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalkAway {
    /// Clients that got a session (the rest were refused: RESOURCE or DELAY).
    pub sessions: usize,
    /// Slots the server granted, all sessions together, and cached replies they hold.
    pub slots: u64,
    pub cached_bytes: u64,
    /// EXCHANGE_ID or CREATE_SESSION refused by a limit.
    pub refused: usize,
}

/// `n` clients that each create a session asking for `slots` slots of `cached` cached-reply
/// bytes, fill every slot granted with a cached READ reply as large as the session lets it
/// cache (of the file `fh`, at least `cached` bytes long), then go without DESTROY_SESSION
/// or DESTROY_CLIENTID: their connections close, their state stays on the server until it
/// expires it.
pub async fn walk_away_clients(
    addr: SocketAddr,
    n: usize,
    slots: u32,
    cached: u32,
    fh: &[u8],
) -> Result<WalkAway> {
    let mut out = WalkAway::default();
    for i in 0..n {
        let mut o = crate::session::SessionOptions::new(&format!("walkaway{i}"));
        o.fore.maxrequests = slots;
        o.fore.maxresponsesize_cached = cached;
        let s = match Session::connect_with(addr, o).await {
            Ok(s) => s,
            Err(ClientError::Nfs {
                status: crate::NfsStat::RESOURCE | crate::NfsStat::DELAY,
                ..
            }) => {
                out.refused += 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        let granted = s.created.fore.maxrequests.min(s.slot_count());
        // READ4resok and the COMPOUND around it take ~150 bytes of the cached reply.
        let count = s.created.fore.maxresponsesize_cached.saturating_sub(256);
        let read = Compound::new()
            .putfh(fh)
            .read(pnfsd::nfs4::types::Stateid::ANONYMOUS, 0, count);
        let mut held = Vec::with_capacity(granted as usize);
        for _ in 0..granted {
            let mut slot = s.take_slot().await?;
            let rep = s.send_on(&slot, &read, true).await?;
            slot.settle(&rep);
            if rep.status == crate::NfsStat::OK {
                out.cached_bytes += u64::from(count);
            }
            held.push(slot);
        }
        out.sessions += 1;
        out.slots += u64::from(granted);
        drop(held);
        drop(s);
    }
    Ok(out)
}
