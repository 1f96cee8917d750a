//! Controllers (docs/design.md, house rule 9): the subsystem and its controllers' state,
//! properties (CAP/VS/CC/CSTS) and Fabrics Connect here; admin commands in `admin.rs`, the
//! discovery log in `discovery.rs`, NVM I/O in `io.rs`, Identify data in `identify.rs`.

pub(crate) mod admin;
pub(crate) mod discovery;
pub(crate) mod identify;
pub(crate) mod io;

use crate::limits::{Counters, Limits, RateLimit, LOG_EVERY};
use crate::namespace::{lock, Namespace};
use crate::pdu::{connect_off, ConnectData, Sqe};
use crate::policy::{HostPolicy, HostRef};
use crate::quiesce::Gate;
use crate::status::Status;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The well-known discovery subsystem NQN (NVMe-oF 1.1 §7.1).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// CAP.MQES (0's based): 128 entries per queue.
pub(crate) const MQES: u16 = 127;
/// Identify MDTS: 2^7 pages of 4 KiB = 512 KiB per command.
pub(crate) const MDTS: u8 = 7;
pub(crate) const MAX_TRANSFER: u32 = 4096 << MDTS;
/// In-capsule data we accept on every queue: 8 KiB, what Linux uses for the admin queue
/// (NVME_TCP_ADMIN_CCSZ), so Connect data always fits in the capsule (docs/design.md §6).
pub(crate) const IN_CAPSULE_DATA: u32 = 8192;
/// ICResp MAXH2CDATA: ≥ 4096 and a multiple of 4 (Linux rejects anything else).
pub(crate) const MAXH2CDATA: u32 = 128 * 1024;
/// NVMe version we claim: 1.3 (namespace identification descriptors exist since 1.3).
pub(crate) const VERSION: u32 = 0x0001_0300;

/// Property offsets (NVMe-oF 1.1 §3.4).
pub(crate) mod prop {
    pub const CAP: u32 = 0x00;
    pub const VS: u32 = 0x08;
    pub const CC: u32 = 0x14;
    pub const CSTS: u32 = 0x1C;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum CtrlKind {
    Discovery,
    Io,
}

/// What the target serves: one NVM subsystem plus the discovery subsystem.
pub(crate) struct Subsystem {
    pub nqn: String,
    pub serial: String,
    pub model: String,
    pub namespaces: BTreeMap<u32, Arc<Namespace>>,
    pub allowed_hosts: Option<Vec<String>>,
    pub max_io_queues: u16,
    /// Address for the Discovery Log (else the one the host connected to).
    pub advertise: Option<std::net::SocketAddr>,
    pub controllers: Mutex<HashMap<u16, Arc<Controller>>>,
    /// The embedder's admission and per-command rules (`TargetConfig::host_policy`).
    pub policy: Option<Arc<dyn HostPolicy>>,
    /// `TargetConfig::limits`.
    pub limits: Limits,
    pub counters: Counters,
    /// Commands and bytes, per queue (`stats.rs`).
    pub stats: crate::stats::Registry,
    /// Refused Connects are logged through this: any peer can send them at connection rate.
    pub refused_log: RateLimit,
    /// Connections closed for want of a Connect (`Limits::connect_timeout_ms`).
    pub idle_log: RateLimit,
    next_cntlid: Mutex<u16>,
    /// Controllers ended (`Controller::kill`: a fence, keep-alive expiry, the admin queue
    /// gone) while I/O of theirs was still at the media, until it is done: a fence waits for
    /// them as for live ones (`wait_io`).
    retired: Mutex<Vec<Arc<Controller>>>,
    /// Hosts a Preempt and Abort removed whose I/O was still at the media when its wait ran
    /// out: the next Preempt and Abort waits for them first (`drain_hosts_io`).
    aborting: Mutex<Vec<[u8; 16]>>,
}

impl Subsystem {
    pub fn new(
        nqn: String,
        serial: String,
        namespaces: BTreeMap<u32, Arc<Namespace>>,
        allowed_hosts: Option<Vec<String>>,
        max_io_queues: u16,
    ) -> Self {
        Subsystem {
            nqn,
            serial,
            model: "pnfsd nvme-tcp".into(),
            namespaces,
            allowed_hosts,
            max_io_queues,
            advertise: None,
            controllers: Mutex::new(HashMap::new()),
            policy: None,
            limits: Limits::default(),
            counters: Counters::default(),
            stats: Default::default(),
            refused_log: RateLimit::new(LOG_EVERY),
            idle_log: RateLimit::new(LOG_EVERY),
            next_cntlid: Mutex::new(1),
            retired: Mutex::default(),
            aborting: Mutex::default(),
        }
    }

    pub fn max_nsid(&self) -> u32 {
        self.namespaces.keys().next_back().copied().unwrap_or(0)
    }

    /// Creates and registers a controller for `hostnqn` with the CNTLID it is given
    /// (1..=0xFFEF, 0xFFF0.. are reserved, never one in use), unless that would pass
    /// `max_controllers` or `max_controllers_per_host`: counted and inserted under one lock,
    /// so concurrent Connects cannot pass a limit together.
    fn add_controller(
        &self,
        hostnqn: &str,
        make: impl FnOnce(u16) -> Arc<Controller>,
    ) -> Result<Arc<Controller>, Refused> {
        let mut ctrls = lock(&self.controllers);
        if ctrls.len() >= self.limits.max_controllers {
            return Err(Refused::TooManyControllers);
        }
        let of_host = ctrls.values().filter(|c| c.hostnqn == hostnqn).count();
        if of_host >= self.limits.max_controllers_per_host {
            return Err(Refused::TooManyForHost);
        }
        let mut next = lock(&self.next_cntlid);
        for _ in 0..0xFFEF {
            let id = *next;
            *next = if id >= 0xFFEF { 1 } else { id + 1 };
            if let std::collections::hash_map::Entry::Vacant(e) = ctrls.entry(id) {
                return Ok(e.insert(make(id)).clone());
            }
        }
        Err(Refused::NoControllerId)
    }

    fn host_allowed(&self, hostnqn: &str) -> bool {
        self.allowed_hosts
            .as_ref()
            .is_none_or(|l| l.iter().any(|h| h == hostnqn))
    }

    /// How long a fence waits for its hosts' I/O at the media (`Limits::fence_drain_ms`).
    pub fn fence_drain(&self) -> Duration {
        Duration::from_millis(u64::from(self.limits.fence_drain_ms))
    }

    /// Waits, at most `fence_drain`, until no I/O command of the NVM controllers `pick`
    /// names, live or ended (`retired`), is still at the media. Blocks the calling thread:
    /// not for a worker of a current-thread runtime that serves the target (the guards of
    /// the task path's ring are dropped on it). `Err(n)`: `n` controllers were still busy.
    pub fn wait_io(&self, pick: &dyn Fn(&Controller) -> bool) -> Result<(), usize> {
        let mut of: Vec<_> = lock(&self.controllers)
            .values()
            .filter(|c| c.kind == CtrlKind::Io && pick(c))
            .cloned()
            .collect();
        of.extend(lock(&self.retired).iter().filter(|c| pick(c)).cloned());
        let deadline = Instant::now() + self.fence_drain();
        let busy = of
            .iter()
            .filter(|c| !c.drain_io(deadline.saturating_duration_since(Instant::now())))
            .count();
        lock(&self.retired).retain(|c| c.io.busy() != 0);
        if busy == 0 {
            Ok(())
        } else {
            Err(busy)
        }
    }

    /// Reservation Acquire, Preempt and Abort: waits (`wait_io`) until no I/O command of the
    /// hosts `hostids` is still at the media, nor of those an earlier one left waiting
    /// (`aborting`). A preempted host's commands let through before the preempt are waited
    /// for, as Linux nvmet waits for them; those after fail the reservation check, which a
    /// command makes holding its guard, and are not waited for once the wait has moved the
    /// gate's epoch (`Gate::drain_entered`), so a host that keeps sending cannot hold it up.
    /// False (logged, and the hosts remembered for the next call) when the time ran out.
    pub fn drain_hosts_io(&self, hostids: &[[u8; 16]]) -> bool {
        let mut hosts = lock(&self.aborting).clone();
        for h in hostids {
            if !hosts.contains(h) {
                hosts.push(*h);
            }
        }
        if hosts.is_empty() {
            return true;
        }
        let drained = self.wait_io(&|c| hosts.contains(&c.hostid)).is_ok();
        *lock(&self.aborting) = if drained { Vec::new() } else { hosts.clone() };
        if !drained {
            tracing::error!(
                hosts = hosts.len(),
                "preempt and abort: the preempted hosts' I/O was still at the media when the wait ran out"
            );
        }
        drained
    }

    /// Tears down every controller (target shutdown).
    pub fn kill_all(&self) {
        let all: Vec<_> = lock(&self.controllers).values().cloned().collect();
        for c in all {
            c.kill();
        }
    }
}

pub(crate) struct CtrlState {
    pub cc: u32,
    pub csts: u32,
    pub kato_ms: u32,
    pub last_keep_alive: Instant,
    /// A keep-alive timer task runs (it ends when KATO becomes 0, or with the controller).
    pub timer: bool,
    /// I/O queues granted by Set Features (Number of Queues); `max_io_queues` until then.
    pub io_queues: u16,
    pub connected_qids: Vec<u16>,
    /// Command identifiers of Asynchronous Event Requests left pending.
    pub aers: Vec<u16>,
    /// Volatile write cache enabled (Set Features 06h); when off, writes are write-through.
    pub wce: bool,
    /// Other features the host set, by FID (returned by Get Features).
    pub features: HashMap<u8, u32>,
}

pub(crate) struct Controller {
    pub cntlid: u16,
    pub kind: CtrlKind,
    pub subsys: Arc<Subsystem>,
    pub hostnqn: String,
    pub hostid: [u8; 16],
    /// The TCP peer address of the connection that created the controller.
    pub peer: std::net::IpAddr,
    pub state: Mutex<CtrlState>,
    dead: watch::Sender<bool>,
    /// Held by each of its I/O commands from the moment it is let through to the media until
    /// it is done; closed by `kill`, so nothing starts after it (`Target::disconnect_host`
    /// then waits for the rest: `drain_io`).
    pub io: Arc<Gate>,
    /// Itself, for the keep-alive timer a Set Features starts.
    me: std::sync::Weak<Controller>,
    /// Set Features changed KATO: the timer computes its deadline again.
    kato_changed: Arc<tokio::sync::Notify>,
    /// An I/O command arrived since the keep-alive timer last looked (Traffic Based Keep
    /// Alive, NVMe Base 2.0 §3.9.5; CTRATT bit 6 in Identify): a host whose I/O flows need
    /// not send Keep Alive, and one whose admin queue is slow is not torn down while its
    /// I/O queues work.
    traffic: std::sync::atomic::AtomicBool,
}

impl Controller {
    /// The host, as the embedder's policy sees it.
    pub fn host(&self) -> HostRef<'_> {
        HostRef {
            nqn: &self.hostnqn,
            hostid: &self.hostid,
            ip: self.peer,
        }
    }

    pub fn ready(&self) -> bool {
        lock(&self.state).csts & 1 != 0
    }

    pub fn dead_rx(&self) -> watch::Receiver<bool> {
        self.dead.subscribe()
    }

    /// Ends the association: no further I/O command of it reaches the media, every queue
    /// connection of this controller closes, and its keep-alive timer ends.
    pub fn kill(&self) {
        self.io.close();
        let was_dead = self.dead.send_replace(true);
        let mut ctrls = lock(&self.subsys.controllers);
        if ctrls
            .get(&self.cntlid)
            .is_some_and(|c| std::ptr::eq(c.as_ref(), self))
        {
            ctrls.remove(&self.cntlid);
        }
        drop(ctrls);
        // Closed before this load (both SeqCst): a command that got in is counted here, and
        // none can get in after. Whatever is still at the media, a fence must wait for.
        if self.io.busy() != 0 {
            if let Some(me) = self.me.upgrade() {
                let mut r = lock(&self.subsys.retired);
                r.retain(|c| c.io.busy() != 0 && !std::ptr::eq(c.as_ref(), self));
                r.push(me);
            }
        }
        if !was_dead {
            self.log_event("nvme-tcp host disconnected");
        }
    }

    /// One line per controller created or gone: info for the NVM subsystem, debug for
    /// discovery (hosts open and close those all the time).
    fn log_event(&self, what: &'static str) {
        let (cntlid, host, peer) = (self.cntlid, &self.hostnqn, self.peer);
        if self.kind == CtrlKind::Io {
            tracing::info!(cntlid, %host, %peer, "{what}");
        } else {
            tracing::debug!(cntlid, %host, %peer, discovery = true, "{what}");
        }
    }

    /// Waits, at most `timeout`, until none of its I/O commands let through before the call
    /// is still at the media (in the kernel's ring, on a blocking thread); false when the
    /// time ran out. After `kill` that is all of them; after a preempt, the commands that
    /// come later fail their reservation check, and are not waited for.
    pub fn drain_io(&self, timeout: Duration) -> bool {
        self.io.drain_entered(timeout)
    }

    pub fn is_dead(&self) -> bool {
        *self.dead.borrow()
    }

    /// Set Features Keep Alive Timer granted `kato_ms` (already capped): the timer runs with
    /// it from now on, started if KATO was 0, woken to take the new deadline if it runs.
    pub fn set_kato(&self, kato_ms: u32) {
        let mut st = lock(&self.state);
        st.kato_ms = kato_ms;
        st.last_keep_alive = Instant::now();
        let start = kato_ms != 0 && !st.timer;
        drop(st);
        if start {
            spawn_keep_alive_timer(self);
        } else {
            self.kato_changed.notify_one();
        }
    }

    /// Records a Keep Alive (or any admin command): restarts the keep-alive timer.
    pub fn touch(&self) {
        lock(&self.state).last_keep_alive = Instant::now();
    }

    /// Records an I/O command (Traffic Based Keep Alive): the timer, when it fires, counts it
    /// as a Keep Alive. A relaxed load first, so that a queue at full speed does not write
    /// the shared flag for every command.
    pub fn io_traffic(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.traffic.load(Relaxed) {
            self.traffic.store(true, Relaxed);
        }
    }

    pub fn property_get(&self, sqe: &Sqe) -> Result<u64, Status> {
        let size8 = sqe.0[40] & 7 == 1;
        let off = sqe.cdw(11);
        let st = lock(&self.state);
        match (off, size8) {
            (prop::CAP, true) => Ok(cap()),
            (prop::VS, false) => Ok(VERSION as u64),
            (prop::CC, false) => Ok(st.cc as u64),
            (prop::CSTS, false) => Ok(st.csts as u64),
            _ => Err(Status::INVALID_FIELD),
        }
    }

    /// Property Set: only CC is writable. EN 0→1 makes the controller ready at once; EN 1→0
    /// resets it; SHN reports shutdown complete (we hold no state needing a clean shutdown:
    /// completed writes are already in the backend, Flush makes them durable).
    pub fn property_set(&self, sqe: &Sqe) -> Result<(), Status> {
        let size8 = sqe.0[40] & 7 == 1;
        let off = sqe.cdw(11);
        if off != prop::CC || size8 {
            return Err(Status::INVALID_FIELD);
        }
        let new = sqe.cdw(12);
        let mut st = lock(&self.state);
        let old = st.cc;
        st.cc = new;
        let en = new & 1 != 0;
        if en && old & 1 == 0 {
            // IOSQES = 6 (64-byte SQE) and IOCQES = 4 (16-byte CQE) are the only sizes on
            // fabrics; a bad value is a fatal controller status (CSTS.CFS).
            let iosqes = (new >> 16) & 0xF;
            let iocqes = (new >> 20) & 0xF;
            if self.kind == CtrlKind::Io && (iosqes != 6 || iocqes != 4) {
                st.csts |= 2;
            } else {
                st.csts = 1;
            }
        } else if !en && old & 1 != 0 {
            st.csts = 0;
            st.aers.clear();
        }
        let shn = (new >> 14) & 3;
        if shn != 0 {
            st.csts = (st.csts & !0xC) | (2 << 2);
        } else {
            st.csts &= !0xC;
        }
        Ok(())
    }
}

/// CAP: MQES, CQR = 1 (fabrics queues are contiguous), TO = 15 (7.5 s), CSS bit 37 = NVM
/// command set, MPSMIN = MPSMAX = 0 (4 KiB).
pub(crate) fn cap() -> u64 {
    MQES as u64 | (1 << 16) | (15 << 24) | (1 << 37)
}

/// Result of a successful Connect.
pub(crate) struct Connected {
    pub ctrl: Arc<Controller>,
    pub qid: u16,
    pub sqsize: u16,
}

/// Why a Connect was refused, for the log (the host learns only the status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    Format,
    Param,
    HostNotAllowed,
    HostPolicy,
    TooManyControllers,
    TooManyForHost,
    NoControllerId,
    NotReady,
}

impl Refused {
    pub fn as_str(self) -> &'static str {
        match self {
            Refused::Format => "unsupported record format",
            Refused::Param => "invalid parameter",
            Refused::HostNotAllowed => "host not in the allowed list",
            Refused::HostPolicy => "refused by the host policy",
            Refused::TooManyControllers => "max_controllers reached",
            Refused::TooManyForHost => "max_controllers_per_host reached",
            Refused::NoControllerId => "no controller ID left",
            Refused::NotReady => "controller not enabled",
        }
    }
}

/// A refused Connect: status and, for Invalid Parameters, where (IATTR 1 = in the data).
pub(crate) struct ConnectError {
    pub status: Status,
    pub iattr: u8,
    pub ipo: u16,
    pub why: Refused,
}

impl ConnectError {
    fn param(iattr: u8, ipo: u16) -> Self {
        ConnectError {
            status: Status::CONNECT_INVALID_PARAM,
            iattr,
            ipo,
            why: Refused::Param,
        }
    }
    fn status(status: Status, why: Refused) -> Self {
        ConnectError {
            status,
            iattr: 0,
            ipo: 0,
            why,
        }
    }
    /// Completion dword 0 of a refused Connect: IPO in bits 15:0, IATTR in 23:16.
    pub fn dw0(&self) -> u32 {
        self.ipo as u32 | (self.iattr as u32) << 16
    }
}

/// Fabrics Connect (NVMe-oF 1.1 §3.3): QID 0 creates a controller (dynamic model: CNTLID
/// 0xFFFF or 0xFFFE in the data); QID > 0 joins the controller named by CNTLID, which must
/// belong to the same host and subsystem and be enabled.
pub(crate) fn connect(
    subsys: &Arc<Subsystem>,
    sqe: &Sqe,
    data: &Bytes,
    peer: std::net::IpAddr,
) -> Result<Connected, ConnectError> {
    let recfmt = u16::from_le_bytes([sqe.0[connect_off::RECFMT], sqe.0[connect_off::RECFMT + 1]]);
    if recfmt != 0 {
        return Err(ConnectError::status(
            Status::CONNECT_INCOMPATIBLE_FORMAT,
            Refused::Format,
        ));
    }
    let qid = u16::from_le_bytes([sqe.0[connect_off::QID], sqe.0[connect_off::QID + 1]]);
    let sqsize = u16::from_le_bytes([sqe.0[connect_off::SQSIZE], sqe.0[connect_off::SQSIZE + 1]]);
    let kato = u32::from_le_bytes([sqe.0[48], sqe.0[49], sqe.0[50], sqe.0[51]]);
    // SQSIZE is 0's based: 0 is invalid, and it may not exceed CAP.MQES.
    if sqsize == 0 || sqsize > MQES {
        return Err(ConnectError::param(0, connect_off::SQSIZE as u16));
    }
    let d = ConnectData::decode(data).map_err(|off| ConnectError::param(1, off))?;
    let kind = if d.subnqn == DISCOVERY_NQN {
        CtrlKind::Discovery
    } else if d.subnqn == subsys.nqn {
        CtrlKind::Io
    } else {
        return Err(ConnectError::param(1, ConnectData::OFF_SUBNQN));
    };
    if kind == CtrlKind::Io && !subsys.host_allowed(&d.hostnqn) {
        return Err(ConnectError::status(
            Status::CONNECT_INVALID_HOST,
            Refused::HostNotAllowed,
        ));
    }
    if kind == CtrlKind::Io {
        let host = HostRef {
            nqn: &d.hostnqn,
            hostid: &d.hostid,
            ip: peer,
        };
        if subsys.policy.as_ref().is_some_and(|p| !p.admit(&host)) {
            return Err(ConnectError::status(
                Status::CONNECT_INVALID_HOST,
                Refused::HostPolicy,
            ));
        }
    }
    if qid == 0 {
        if d.cntlid != 0xFFFF && d.cntlid != 0xFFFE {
            return Err(ConnectError::param(1, ConnectData::OFF_CNTLID));
        }
        let kato = grant_kato(kind, kato, subsys.limits.max_kato_ms);
        let hostnqn = d.hostnqn.clone();
        let ctrl = subsys
            .add_controller(&hostnqn, |cntlid| {
                let (dead, _) = watch::channel(false);
                Arc::new_cyclic(|me| Controller {
                    cntlid,
                    kind,
                    subsys: subsys.clone(),
                    hostnqn: d.hostnqn,
                    hostid: d.hostid,
                    peer,
                    state: Mutex::new(CtrlState {
                        cc: 0,
                        csts: 0,
                        kato_ms: kato,
                        last_keep_alive: Instant::now(),
                        timer: false,
                        io_queues: subsys.max_io_queues,
                        connected_qids: Vec::new(),
                        aers: Vec::new(),
                        wce: true,
                        features: HashMap::new(),
                    }),
                    dead,
                    io: Arc::default(),
                    me: me.clone(),
                    kato_changed: Arc::new(tokio::sync::Notify::new()),
                    traffic: std::sync::atomic::AtomicBool::new(false),
                })
            })
            .map_err(|why| ConnectError::status(Status::CONNECT_CTRL_BUSY, why))?;
        // A fence between `admit` above and the insertion would have listed the controllers
        // without this one: asked again now that it is listed, one of the two sees the other.
        let host = ctrl.host();
        if kind == CtrlKind::Io && subsys.policy.as_ref().is_some_and(|p| !p.admit(&host)) {
            ctrl.kill();
            return Err(ConnectError::status(
                Status::CONNECT_INVALID_HOST,
                Refused::HostPolicy,
            ));
        }
        ctrl.log_event("nvme-tcp host connected");
        if kato != 0 {
            spawn_keep_alive_timer(&ctrl);
        }
        return Ok(Connected { ctrl, qid, sqsize });
    }
    // I/O queue.
    if kind == CtrlKind::Discovery {
        return Err(ConnectError::param(0, connect_off::QID as u16));
    }
    let ctrl = lock(&subsys.controllers).get(&d.cntlid).cloned();
    let Some(ctrl) = ctrl else {
        return Err(ConnectError::param(1, ConnectData::OFF_CNTLID));
    };
    if ctrl.hostnqn != d.hostnqn || ctrl.hostid != d.hostid {
        return Err(ConnectError::param(1, ConnectData::OFF_HOSTNQN));
    }
    let mut st = lock(&ctrl.state);
    if st.csts & 1 == 0 {
        return Err(ConnectError::status(
            Status::CMD_SEQ_ERROR,
            Refused::NotReady,
        ));
    }
    if qid > st.io_queues || st.connected_qids.contains(&qid) {
        return Err(ConnectError::param(0, connect_off::QID as u16));
    }
    st.connected_qids.push(qid);
    drop(st);
    for ns in subsys.namespaces.values() {
        crate::reservation::command::host_connected(ns, &ctrl.hostid);
    }
    Ok(Connected { ctrl, qid, sqsize })
}

/// The KATO a controller gets for the `asked` of a Connect or Set Features (ms): at most
/// `max` (Limits::max_kato_ms). NVMe has no field to refuse or renegotiate KATO in Connect,
/// so the cap is silent there; Get Features Keep Alive Timer reports what was granted. A
/// discovery controller asking for none gets `max` (nvmet gives such one 120 s), since a
/// silent one would otherwise hold its connection for ever.
pub(crate) fn grant_kato(kind: CtrlKind, asked: u32, max: u32) -> u32 {
    match (kind, asked) {
        (CtrlKind::Discovery, 0) => max,
        _ => asked.min(max),
    }
}

/// Keep Alive timer (NVMe Base 2.0 §3.9): if no Keep Alive arrives within KATO the
/// controller is torn down. We allow KATO + half of it, because hosts send at KATO/2 and
/// older Linux kernels sent at KATO. The timer ends with the controller (`kill`), not at its
/// next deadline: a host that connects and goes leaves nothing behind. A Set Features that
/// changes KATO wakes it (`Controller::set_kato`); one that sets 0 ends it.
fn spawn_keep_alive_timer(ctrl: &Controller) {
    let weak = ctrl.me.clone();
    let mut dead = ctrl.dead_rx();
    let changed = ctrl.kato_changed.clone();
    lock(&ctrl.state).timer = true;
    let running = TimerRunning::new(&ctrl.subsys);
    tokio::spawn(async move {
        let _running = running;
        loop {
            let (deadline, limit) = {
                let Some(c) = weak.upgrade() else { return };
                if c.is_dead() {
                    return;
                }
                let mut st = lock(&c.state);
                if st.kato_ms == 0 {
                    st.timer = false;
                    return;
                }
                let limit = Duration::from_millis(st.kato_ms as u64 + st.kato_ms as u64 / 2);
                (st.last_keep_alive + limit, limit)
            };
            tokio::select! {
                _ = tokio::time::sleep_until(deadline.into()) => {}
                _ = dead.wait_for(|d| *d) => return,
                // A new KATO: its deadline, from the top.
                _ = changed.notified() => continue,
            }
            let Some(c) = weak.upgrade() else { return };
            let expired = {
                let mut st = lock(&c.state);
                if c.traffic.swap(false, std::sync::atomic::Ordering::Relaxed) {
                    // I/O since the last look: as good as a Keep Alive now.
                    st.last_keep_alive = Instant::now();
                }
                st.last_keep_alive.elapsed() >= limit
            };
            if expired {
                tracing::warn!(cntlid = c.cntlid, host = %c.hostnqn, "keep alive timeout: controller torn down");
                c.kill();
                return;
            }
        }
    });
}

/// Counts a keep-alive timer in `Counters::keep_alive_timers` from its spawn until its task
/// ends.
struct TimerRunning(Arc<Subsystem>);

impl TimerRunning {
    fn new(subsys: &Arc<Subsystem>) -> Self {
        subsys
            .counters
            .keep_alive_timers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        TimerRunning(subsys.clone())
    }
}

impl Drop for TimerRunning {
    fn drop(&mut self) {
        self.0
            .counters
            .keep_alive_timers
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A command ready to execute: its SQE, the host's data (if any), and how many bytes the host
/// will accept back (the SGL length, for controller-to-host transfers).
pub(crate) struct Cmd {
    pub sqe: Sqe,
    pub data: Bytes,
    pub xfer_len: u32,
}

/// What a command produced.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: Status,
    pub dw0: u32,
    pub dw1: u32,
    /// Controller-to-host data.
    pub data: Bytes,
}

impl Reply {
    pub fn ok() -> Self {
        Reply {
            status: Status::SUCCESS,
            dw0: 0,
            dw1: 0,
            data: Bytes::new(),
        }
    }
    pub fn err(status: Status) -> Self {
        Reply {
            status,
            dw0: 0,
            dw1: 0,
            data: Bytes::new(),
        }
    }
    pub fn data(data: impl Into<Bytes>) -> Self {
        Reply {
            status: Status::SUCCESS,
            dw0: 0,
            dw1: 0,
            data: data.into(),
        }
    }
    pub fn dw0(dw0: u32) -> Self {
        Reply {
            status: Status::SUCCESS,
            dw0,
            dw1: 0,
            data: Bytes::new(),
        }
    }
}

impl From<Result<Reply, Status>> for Reply {
    fn from(r: Result<Reply, Status>) -> Self {
        r.unwrap_or_else(Reply::err)
    }
}

pub(crate) enum Outcome {
    Reply(Reply),
    /// Completed later or never (an Asynchronous Event Request).
    Pending,
}
