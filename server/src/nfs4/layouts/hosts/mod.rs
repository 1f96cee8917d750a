//! The NVMe hosts of the NFS clients (docs/pnfs.md "Fencing at the
//! embedded target"): which target connections belong to which NFS client, and the fences
//! the embedded target enforces — a fenced client's hosts are disconnected and their
//! reconnects refused (`nvme_tcp::HostPolicy::admit`) until the fence is lifted.
//!
//! A host (its TCP peer address and host NQN, known at Connect) belongs to the NFS clients
//! whose LAYOUTGETs came from the same IP address, unless `[nvme_hosts]` in the
//! configuration maps its NQN to a client address or `co_ownerid` (NAT'd clients, or several
//! clients behind one address). Several clients at one address without such a mapping cannot
//! be told apart at the target: fencing one of them by disconnect would cut the others off,
//! so that fence fails (WARN, `fences_shared_host`), the blocks of its layouts are kept and
//! it is retried each lease, as any failed fence (fence.rs).
//!
//! Fences are lifted when the fenced client's state is gone — lease expired and purged,
//! DESTROY_CLIENTID, or replaced by a new instance (a new verifier) — and [`READMIT_AFTER`]
//! (11 minutes, past Linux's `ctrl_loss_tmo`, or a lease if longer) has passed since the
//! fence. They persist in `<data_dir>/nvme-fences` (written whole and renamed into place), and
//! a restarted server refuses the same hosts until its grace period is over and
//! `READMIT_AFTER` has passed since it started, or the fenced owner comes back with a new
//! verifier.
//!
//! While `nvme_enforce_layouts` is on (the default), the gate also decides each Read- and
//! Write-class command (`HostPolicy::access`; docs/pnfs.md "The target enforces the
//! layouts"): a host attached to NFS clients writes only the blocks of their RW layouts and
//! reads only those of their layouts, the signature block and the probe window
//! ([`PROBE_LBAS`]); an `nvme_admin_hosts` host reads everything and writes outside the MDS
//! blocks; any other host reads and never writes; while a previous instance's layouts may
//! still be reclaimed, hosts no client of this instance has claimed write as before
//! enforcement (their layouts are the previous instance's, which this one cannot see).

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use nvme_tcp::{HostRef, Target};

use super::enforce::BlockSets;

mod policy;

/// The LBAs at each end of the namespace every host may read, attached or not: a Linux host
/// reads there whenever the namespace appears, a reconnect too (the kernel's partition scan:
/// LBA 0, 1 and the last; udev's blkid: superblock magics in the first and the last few
/// hundred KiB). Refused, each shows as an I/O error in the host's log and fails nothing;
/// allowed, a host may read up to 1 MiB of some file's data at the volume's end (the start
/// is the superblock and the log). Counted in `probe_reads`.
pub const PROBE_LBAS: u64 = (1 << 20) / layout::LBA_SIZE as u64;

/// What `[nvme_hosts]` maps a host NQN to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostOwner {
    /// The NFS clients coming from this address.
    Addr(IpAddr),
    /// The NFS client with this `co_ownerid` (RFC 8881 §18.35: the Linux client's is
    /// `Linux NFSv4.1 <hostname>` unless set by `nfs4_unique_id`).
    Owner(Vec<u8>),
}

impl HostOwner {
    /// An address if the text is one, else an owner string.
    pub fn parse(s: &str) -> HostOwner {
        match s.parse::<IpAddr>() {
            Ok(a) => HostOwner::Addr(a),
            Err(_) => HostOwner::Owner(s.as_bytes().to_vec()),
        }
    }
}

/// How long a fenced host stays refused at the least, whatever became of its client: past the
/// Linux nvme-tcp default `ctrl_loss_tmo` (600 s) a host cut off from its controller has failed
/// the writes it queued, so its reconnect cannot replay them into blocks that were freed and
/// handed to another file meanwhile (the layouts it wrote through are gone by then). A new
/// instance of the client (another verifier) rebooted and is admitted at once.
pub const READMIT_AFTER: Duration = Duration::from_secs(660);

/// An NFS client as the target side needs it: where it comes from, who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHost {
    pub ip: IpAddr,
    pub owner: Vec<u8>,
    pub verifier: [u8; 8],
    /// It asked for a block layout (SCSI clients are fenced by their reservation key).
    pub block: bool,
}

/// One fence in force.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fence {
    /// The fenced client of this instance; `None`: restored from the state file.
    clientid: Option<u64>,
    ip: IpAddr,
    owner: Vec<u8>,
    verifier: [u8; 8],
    since: Instant,
}

/// Counters of the target-side fencing (metrics.rs).
#[derive(Debug, Default)]
pub struct HostMetrics {
    /// Fences done by disconnecting the client's hosts at the embedded target.
    pub fences_disconnect: AtomicU64,
    /// Fences refused because other live clients share the client's address.
    pub fences_shared_host: AtomicU64,
    /// Controllers the fences disconnected.
    pub hosts_disconnected: AtomicU64,
    /// Connects refused because the host belongs to a fenced client.
    pub connects_refused: AtomicU64,
    /// Write-class commands (Write, Write Zeroes, DSM) refused Access Denied by the layout
    /// check.
    pub writes_refused: AtomicU64,
    /// Reads refused Access Denied by the layout check.
    pub reads_refused: AtomicU64,
    /// Reads of an attached host outside its layouts let through in the probe window.
    pub probe_reads: AtomicU64,
}

/// A copy of [`HostMetrics`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCounters {
    pub fences_disconnect: u64,
    pub fences_shared_host: u64,
    pub hosts_disconnected: u64,
    pub connects_refused: u64,
    pub writes_refused: u64,
    pub reads_refused: u64,
    pub probe_reads: u64,
}

impl HostMetrics {
    pub fn snapshot(&self) -> HostCounters {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        HostCounters {
            fences_disconnect: g(&self.fences_disconnect),
            fences_shared_host: g(&self.fences_shared_host),
            hosts_disconnected: g(&self.hosts_disconnected),
            connects_refused: g(&self.connects_refused),
            writes_refused: g(&self.writes_refused),
            reads_refused: g(&self.reads_refused),
            probe_reads: g(&self.probe_reads),
        }
    }
}

/// The host ↔ client map and the target's fences (`Layouts::hosts`; shared with the target
/// as its `HostPolicy`).
#[derive(Debug, Default)]
pub struct HostGate {
    overrides: RwLock<HashMap<String, HostOwner>>,
    /// `overrides` is not empty: the per-command check looks the host's NQN up only then.
    any_override: AtomicBool,
    /// clientid → where it comes from (recorded at LAYOUTGET).
    clients: Mutex<HashMap<u64, ClientHost>>,
    fences: RwLock<Vec<Fence>>,
    /// Set once a fence is in force: `admit` reads nothing else while none is.
    any_fence: AtomicBool,
    target: OnceLock<TargetHandle>,
    state_file: OnceLock<PathBuf>,
    pub metrics: HostMetrics,
    /// The volume blocks of each client's layouts (enforce.rs), kept by the ledger.
    pub(super) blocks: RwLock<BlockSets>,
    /// The host NQNs seen at Connect from each address (a few each), for the log lines that
    /// name a client's hosts.
    seen: Mutex<HashMap<IpAddr, Vec<String>>>,
    /// What the per-command check needs besides the sets.
    rules: Rules,
}

/// The per-command check's settings (`HostGate::enforce`).
#[derive(Debug, Default)]
struct Rules {
    /// `nvme_enforce_layouts`; off: `access` allows all (admission and the MDS guard stay).
    on: AtomicBool,
    /// A previous instance's layouts may still be reclaimed (fence.rs `lift_fences` keeps it).
    reclaim: AtomicBool,
    /// LBAs `[0, signature_end)` hold the block-layout signature (GETDEVICEINFO's).
    signature_end: AtomicU64,
    /// The namespace's size in LBAs (the probe window's far end).
    lbas: AtomicU64,
    /// `nvme_admin_hosts`.
    admins: RwLock<HashSet<String>>,
    /// `admins` is not empty: the per-command check hashes the host's NQN only then.
    any_admin: AtomicBool,
}

/// The volume facts and keys the per-command check needs (nvme.rs `gate_hosts`).
#[derive(Debug, Clone, Default)]
pub struct Enforce {
    pub on: bool,
    pub admin_hosts: Vec<String>,
    /// The byte range of the block-layout signature (`Superblock::signature`).
    pub signature: (u64, u64),
    /// The namespace's size in LBAs.
    pub lbas: u64,
    /// The server starts with layouts of a previous instance reclaimable.
    pub reclaim: bool,
}

/// The embedded target, once it serves the volume.
struct TargetHandle(Target);

impl std::fmt::Debug for TargetHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Target")
    }
}

/// Why disconnecting a client's hosts was not done.
#[derive(Debug, thiserror::Error)]
pub enum HostFenceError {
    #[error("the client's address is unknown")]
    NoAddress,
    #[error(
        "other NFS clients share {0} and no [nvme_hosts] entry names this one's hosts: \
         disconnecting them would cut those off too"
    )]
    Shared(IpAddr),
    #[error("fence state file: {0}")]
    Persist(std::io::Error),
    /// Disconnected and refused, but writes of its hosts may still land.
    #[error("{0}")]
    InFlight(nvme_tcp::Error),
}

impl HostGate {
    /// The configured NQN → client map (`[nvme_hosts]`).
    pub fn set_overrides(&self, m: HashMap<String, HostOwner>) {
        let mut o = self.overrides.write().unwrap_or_else(|e| e.into_inner());
        self.any_override.store(!m.is_empty(), Ordering::Relaxed);
        *o = m;
    }

    /// The embedded target serves the volume: fences disconnect its hosts. `state_file`
    /// keeps them across restarts; the fences found there are in force again at once.
    pub fn install(&self, target: Target, state_file: PathBuf) {
        let restored = read_fences(&state_file);
        if !restored.is_empty() {
            tracing::warn!(
                fences = restored.len(),
                "fences of the previous instance restored: their hosts stay refused until \
                 grace ends"
            );
            let mut f = self.fences.write().unwrap_or_else(|e| e.into_inner());
            f.extend(restored);
            self.any_fence.store(true, Ordering::Relaxed);
        }
        let _ = self.state_file.set(state_file);
        let _ = self.target.set(TargetHandle(target));
    }

    /// Turns the per-command layout check on or off, with the facts it needs.
    pub fn enforce(&self, e: Enforce) {
        let r = &self.rules;
        let lba = u64::from(layout::LBA_SIZE);
        r.signature_end
            .store(e.signature.1.div_ceil(lba), Ordering::Relaxed);
        r.lbas.store(e.lbas, Ordering::Relaxed);
        r.any_admin
            .store(!e.admin_hosts.is_empty(), Ordering::Relaxed);
        *r.admins.write().unwrap_or_else(|p| p.into_inner()) = e.admin_hosts.into_iter().collect();
        r.reclaim.store(e.reclaim, Ordering::Relaxed);
        r.on.store(e.on, Ordering::Relaxed);
    }

    /// Whether a previous instance's layouts may still be reclaimed (fence.rs).
    pub fn set_reclaim(&self, reclaimable: bool) {
        self.rules.reclaim.store(reclaimable, Ordering::Relaxed);
    }

    /// Brings the flat copies of the clients' runs up to date (enforce.rs `Flat`; recall.rs
    /// `tick`, once a second): each is built under the read lock, the checks going on
    /// meanwhile through the changed runs themselves, and installed if nothing changed since.
    /// A million runs take a few milliseconds, paid at most once a second and only after a
    /// change.
    pub fn refresh_lookups(&self) {
        let stale = self
            .blocks
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .stale();
        for c in stale {
            let built = self
                .blocks
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .build_flat(c);
            if let Some((gen, f)) = built {
                self.blocks
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .install_flat(c, gen, f);
            }
        }
    }

    /// Whether fences can disconnect hosts (the embedded target is installed).
    pub fn can_disconnect(&self) -> bool {
        self.target.get().is_some()
    }

    /// LAYOUTGET from `clientid`: where it comes from, who it is.
    pub fn note_client(&self, clientid: u64, c: ClientHost) {
        let mut m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let was = m.get(&clientid).map(|e| e.ip);
        self.blocks
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .note_client(clientid, was, c.ip, &c.owner);
        let e = m.entry(clientid).or_insert_with(|| c.clone());
        let block = e.block || c.block;
        *e = ClientHost { block, ..c };
    }

    /// Forgets the clients `gone` selects (fence.rs `forget_gone_clients`): the host ↔
    /// client map and the sets' address and owner indexes stop naming them, so their
    /// address's hosts are no longer attached to them. The fences keep what they need
    /// (address, owner, verifier) themselves. Returns how many went.
    pub fn forget_clients(&self, gone: &dyn Fn(u64) -> bool) -> usize {
        let mut m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        let ids: Vec<u64> = m.keys().copied().filter(|id| gone(*id)).collect();
        if ids.is_empty() {
            return 0;
        }
        let mut sets = self.blocks.write().unwrap_or_else(|e| e.into_inner());
        for id in &ids {
            if let Some(c) = m.remove(id) {
                sets.forget_client(*id, c.ip, &c.owner);
            }
        }
        ids.len()
    }

    /// The clients the map holds (fence.rs: which of them are gone).
    pub fn client_ids(&self) -> Vec<u64> {
        let m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        m.keys().copied().collect()
    }

    pub fn client(&self, clientid: u64) -> Option<ClientHost> {
        let m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&clientid).cloned()
    }

    fn override_of(&self, nqn: &str) -> Option<HostOwner> {
        let o = self.overrides.read().unwrap_or_else(|e| e.into_inner());
        o.get(nqn).cloned()
    }

    /// Whether the host belongs to the client at `ip` with `owner`.
    fn host_is(&self, h: &HostRef<'_>, ip: IpAddr, owner: &[u8]) -> bool {
        match self.override_of(h.nqn) {
            Some(HostOwner::Owner(o)) => o == owner,
            Some(HostOwner::Addr(a)) => a == ip,
            None => h.ip == ip,
        }
    }

    /// Whether some `[nvme_hosts]` entry names the client by its owner.
    fn named_by_owner(&self, owner: &[u8]) -> bool {
        let o = self.overrides.read().unwrap_or_else(|e| e.into_inner());
        o.values()
            .any(|v| matches!(v, HostOwner::Owner(x) if x.as_slice() == owner))
    }

    /// Fences `clientid` at the target: records the fence (and persists it), then
    /// disconnects its hosts and waits until none of their writes can still land
    /// (`Target::disconnect_host`; this thread blocks meanwhile: the daemon's tick runs on a
    /// blocking thread). `live(id)`: whether the state layer still knows client `id`.
    pub fn fence(
        &self,
        clientid: u64,
        live: &dyn Fn(u64) -> bool,
        now: Instant,
    ) -> Result<usize, HostFenceError> {
        let Some(target) = self.target.get() else {
            return Ok(0);
        };
        let c = self.client(clientid).ok_or(HostFenceError::NoAddress)?;
        if !self.named_by_owner(&c.owner) {
            let shared = {
                let m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
                m.iter()
                    .filter(|(id, o)| **id != clientid && o.ip == c.ip && o.owner != c.owner)
                    .map(|(id, _)| *id)
                    .collect::<Vec<_>>()
            };
            if shared.iter().any(|id| live(*id) && !self.is_fenced(*id)) {
                self.metrics
                    .fences_shared_host
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    clientid,
                    ip = %c.ip,
                    "not fenced at the target: other clients share its address; map its \
                     host NQN in [nvme_hosts]"
                );
                return Err(HostFenceError::Shared(c.ip));
            }
        }
        {
            let mut f = self.fences.write().unwrap_or_else(|e| e.into_inner());
            if !f.iter().any(|x| x.clientid == Some(clientid)) {
                f.push(Fence {
                    clientid: Some(clientid),
                    ip: c.ip,
                    owner: c.owner.clone(),
                    verifier: c.verifier,
                    since: now,
                });
            }
            self.any_fence.store(true, Ordering::Relaxed);
        }
        self.persist().map_err(HostFenceError::Persist)?;
        let n = target
            .0
            .disconnect_host(&|h| self.host_is(h, c.ip, &c.owner))
            .map_err(HostFenceError::InFlight)?;
        self.metrics
            .fences_disconnect
            .fetch_add(1, Ordering::Relaxed);
        self.metrics
            .hosts_disconnected
            .fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    /// Whether a fence of this instance names `clientid`.
    pub fn is_fenced(&self, clientid: u64) -> bool {
        let f = self.fences.read().unwrap_or_else(|e| e.into_inner());
        f.iter().any(|x| x.clientid == Some(clientid))
    }

    /// How many fences are in force.
    pub fn fence_count(&self) -> usize {
        self.fences.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Lifts the fences whose client is gone (`live` false) for [`READMIT_AFTER`] (or a lease,
    /// if longer) since the fence, and, once that has passed and
    /// `previous_gone` (the grace period is over), those restored from the state file; a
    /// restored fence also goes as soon as its owner is back with another verifier
    /// (`instances`: the live clients' owners and verifiers).
    pub fn lift(
        &self,
        live: &dyn Fn(u64) -> bool,
        instances: &[(Vec<u8>, [u8; 8])],
        previous_gone: bool,
        lease: Duration,
        now: Instant,
    ) {
        if !self.any_fence.load(Ordering::Relaxed) {
            return;
        }
        let lifted = {
            let mut f = self.fences.write().unwrap_or_else(|e| e.into_inner());
            let before = f.len();
            let hold = lease.max(READMIT_AFTER);
            f.retain(|x| {
                let held = now.saturating_duration_since(x.since) < hold;
                // A new instance (another verifier) rebooted: nothing it queued survives.
                let rebooted = instances
                    .iter()
                    .any(|(o, v)| *o == x.owner && *v != x.verifier);
                let keep = match x.clientid {
                    Some(id) => live(id) || (held && !rebooted),
                    None => (!previous_gone || held) && !rebooted,
                };
                if !keep {
                    tracing::info!(
                        client = ?x.clientid,
                        ip = %x.ip,
                        owner = %String::from_utf8_lossy(&x.owner),
                        "fence lifted"
                    );
                }
                keep
            });
            self.any_fence.store(!f.is_empty(), Ordering::Relaxed);
            f.len() != before
        };
        if lifted {
            if let Err(e) = self.persist() {
                tracing::warn!(%e, "fence state file not updated (lifted fences come back at restart)");
            }
        }
    }

    /// Writes the fences to the state file, whole, then renames it into place.
    fn persist(&self) -> std::io::Result<()> {
        let Some(path) = self.state_file.get() else {
            return Ok(());
        };
        let mut text = String::new();
        for x in self.fences.read().unwrap_or_else(|e| e.into_inner()).iter() {
            text.push_str(&format!(
                "{} {} {}\n",
                x.ip,
                hex(&x.owner),
                hex(&x.verifier)
            ));
        }
        let tmp = path.with_extension("tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// The fences in the state file (none if it is absent; a bad line is logged and skipped).
fn read_fences(path: &std::path::Path) -> Vec<Fence> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let now = Instant::now();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut w = line.split_whitespace();
        let parsed = (|| {
            let ip = w.next()?.parse().ok()?;
            let owner = unhex(w.next()?)?;
            let verifier: [u8; 8] = unhex(w.next()?)?.try_into().ok()?;
            Some(Fence {
                clientid: None,
                ip,
                owner,
                verifier,
                since: now,
            })
        })();
        match parsed {
            Some(f) => out.push(f),
            None => tracing::warn!(?path, line, "bad line in the fence state file, skipped"),
        }
    }
    out
}

#[cfg(test)]
mod tests;
