//! The embeddable NVMe/TCP target: one listener serving the discovery subsystem and one NVM
//! subsystem with the configured namespaces.

mod conn;
mod ring;

use crate::controller::Subsystem;
use crate::error::Error;
use crate::limits::{Limits, RateLimit, TargetStats, LOG_EVERY};
use crate::namespace::{lock, Namespace, NamespaceConfig};
use crate::quiesce;
use crate::reservation::persist::RestoredHosts;
use crate::reservation::{
    command, AcquireAction, Cptpl, RType, RegisterAction, Registrant, ReleaseAction, Requester,
};
use crate::status::Status;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::watch;

/// What the embedder exports.
#[derive(Clone)]
pub struct TargetConfig {
    /// NVM subsystem NQN, e.g. `nqn.2026-11.org.pnfsd:vol0` (at most 223 bytes).
    pub subsystem_nqn: String,
    pub namespaces: Vec<NamespaceConfig>,
    /// Host NQNs allowed to connect to the NVM subsystem; `None` admits any host.
    pub allowed_hosts: Option<Vec<String>>,
    /// Serial number reported in Identify Controller; derived from the NQN when `None`.
    pub serial: Option<String>,
    /// I/O queues one controller may create (Set Features Number of Queues is capped here).
    pub max_io_queues: u16,
    /// Address the Discovery Log advertises; `None` uses the address each host reached us on
    /// (wrong behind NAT, e.g. QEMU user networking, where the host sees another address).
    pub advertise: Option<SocketAddr>,
    /// Directory where namespaces keep their reservation state when a host sets Persist
    /// Through Power Loss (one `nvme-ns<nsid>.reservations` file each, restored by `bind`);
    /// `None`: PTPL is not supported (RESCAP bit 0 clear) and reservations die with the
    /// target.
    pub ptpl_dir: Option<std::path::PathBuf>,
    /// Per namespace id, how many leading LBAs hold the MDS's own blocks (superblock, log,
    /// checkpoints): no host may write or deallocate them (Access Denied). The MDS writes
    /// them through its own device, never through the target, so nothing legitimate is
    /// refused; a host's stray write there would corrupt the volume for everyone.
    pub mds_blocks: Vec<(u32, u64)>,
    /// The embedder's rules for hosts (`policy::HostPolicy`): asked at Connect and by every
    /// Read, Write, Write Zeroes and deallocate. `None`: the allow-list alone.
    pub host_policy: Option<Arc<dyn crate::policy::HostPolicy>>,
    /// Controllers, connections, KATO and buffered H2C data bounds (docs/nvme-tcp.md
    /// "Limits"); `Limits::default()` unless the embedder says otherwise.
    pub limits: Limits,
}

impl TargetConfig {
    pub fn new(subsystem_nqn: impl Into<String>, namespaces: Vec<NamespaceConfig>) -> Self {
        TargetConfig {
            subsystem_nqn: subsystem_nqn.into(),
            namespaces,
            allowed_hosts: None,
            serial: None,
            max_io_queues: 64,
            advertise: None,
            ptpl_dir: None,
            mds_blocks: Vec::new(),
            host_policy: None,
            limits: Limits::default(),
        }
    }
}

/// A bound target. Clones share the same target.
#[derive(Clone)]
pub struct Target {
    inner: Arc<Inner>,
}

struct Inner {
    listener: Mutex<Option<TcpListener>>,
    local: SocketAddr,
    subsys: Arc<Subsystem>,
    stop: watch::Sender<bool>,
    /// Held by every connection task and every backend call a command makes.
    gate: Arc<quiesce::Gate>,
    /// Connections closed at accept (`max_connections`) are logged through this.
    refused_log: RateLimit,
}

fn check_config(cfg: &TargetConfig) -> Result<(), Error> {
    let nqn = &cfg.subsystem_nqn;
    if !nqn.starts_with("nqn.") || nqn.len() > 223 || nqn == crate::controller::DISCOVERY_NQN {
        return Err(Error::Config(format!("bad subsystem NQN {nqn:?}")));
    }
    let mut seen = std::collections::HashSet::new();
    for ns in &cfg.namespaces {
        if ns.nsid == 0 || ns.nsid >= 0xFFFF_FFFE || !seen.insert(ns.nsid) {
            return Err(Error::Config(format!("bad or duplicate nsid {}", ns.nsid)));
        }
        if ns.volume_uuid == [0; 16] {
            return Err(Error::Config(
                "volume UUID must not be all zero (NGUID 0 means none)".into(),
            ));
        }
        let bs = ns.backend.block_size();
        if !(bs == 512 || bs == 4096) || ns.backend.num_blocks() == 0 {
            return Err(Error::Config(format!(
                "namespace {}: block size {bs} or empty backend",
                ns.nsid
            )));
        }
    }
    if cfg.max_io_queues == 0 {
        return Err(Error::Config("max_io_queues must be ≥ 1".into()));
    }
    cfg.limits.check().map_err(Error::Config)
}

impl Target {
    /// Binds the listener (port 4420 is the NVMe/TCP default). Nothing is served until
    /// `run()` or `spawn()`.
    pub async fn bind(addr: impl ToSocketAddrs, cfg: TargetConfig) -> Result<Target, Error> {
        check_config(&cfg)?;
        let listener = TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let serial = cfg.serial.clone().unwrap_or_else(|| {
            format!(
                "{:016x}",
                crc32c::crc32c(cfg.subsystem_nqn.as_bytes()) as u64 * 0x9E37_79B9
            )
        });
        // The stored reservations are back before the listener accepts anyone (PTPL).
        let mut namespaces: BTreeMap<u32, Arc<Namespace>> = BTreeMap::new();
        for n in &cfg.namespaces {
            let mut ns = Namespace::new(n, cfg.ptpl_dir.as_deref()).map_err(|e| {
                Error::Config(format!(
                    "namespace {}: reservation state directory {:?}: {e}",
                    n.nsid, cfg.ptpl_dir
                ))
            })?;
            ns.mds_blocks = cfg
                .mds_blocks
                .iter()
                .find(|(id, _)| *id == n.nsid)
                .map_or(0, |&(_, lbas)| lbas);
            namespaces.insert(n.nsid, Arc::new(ns));
        }
        let mut subsys = Subsystem::new(
            cfg.subsystem_nqn,
            serial,
            namespaces,
            cfg.allowed_hosts,
            cfg.max_io_queues,
        );
        subsys.advertise = cfg.advertise;
        subsys.policy = cfg.host_policy;
        subsys.limits = cfg.limits;
        let subsys = Arc::new(subsys);
        let (stop, _) = watch::channel(false);
        Ok(Target {
            inner: Arc::new(Inner {
                listener: Mutex::new(Some(listener)),
                local,
                subsys,
                stop,
                gate: Arc::default(),
                refused_log: RateLimit::new(LOG_EVERY),
            }),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    pub fn subsystem_nqn(&self) -> &str {
        &self.inner.subsys.nqn
    }

    /// Live controllers (discovery and I/O).
    pub fn controller_count(&self) -> usize {
        lock(&self.inner.subsys.controllers).len()
    }

    /// The target's gauges and counters (`TargetStats`), for the embedder's metrics.
    pub fn stats(&self) -> TargetStats {
        let c = &self.inner.subsys.counters;
        TargetStats {
            controllers: self.controller_count(),
            connections: c.connections.load(Ordering::Relaxed),
            keep_alive_timers: c.keep_alive_timers.load(Ordering::Relaxed),
            connects_refused: c.connects_refused.load(Ordering::Relaxed),
            connections_refused: c.connections_refused.load(Ordering::Relaxed),
            connect_timeouts: c.connect_timeouts.load(Ordering::Relaxed),
        }
    }

    /// Commands answered by queue, opcode and status, and bytes read and written, since
    /// the target started (per-queue counters, summed now).
    pub fn command_stats(&self) -> crate::stats::CommandStats {
        self.inner.subsys.stats.snapshot()
    }

    /// Each namespace's counters, by NSID.
    pub fn namespace_stats(&self) -> Vec<crate::stats::NamespaceStats> {
        self.inner
            .subsys
            .namespaces
            .values()
            .map(|ns| crate::stats::NamespaceStats {
                nsid: ns.nsid,
                reservation_conflicts: ns.conflicts.count(),
            })
            .collect()
    }

    /// The controllers connected now, by CNTLID.
    pub fn controllers(&self) -> Vec<crate::stats::ControllerInfo> {
        let all: Vec<_> = lock(&self.inner.subsys.controllers)
            .values()
            .cloned()
            .collect();
        let mut v: Vec<_> = all
            .iter()
            .map(|c| {
                let st = lock(&c.state);
                crate::stats::ControllerInfo {
                    cntlid: c.cntlid,
                    discovery: c.kind == crate::controller::CtrlKind::Discovery,
                    host_nqn: c.hostnqn.clone(),
                    host_addr: c.peer,
                    io_queues: st.connected_qids.len(),
                    kato_ms: st.kato_ms,
                }
            })
            .collect();
        v.sort_by_key(|c| c.cntlid);
        v
    }

    /// The limits the target was bound with.
    pub fn limits(&self) -> &Limits {
        &self.inner.subsys.limits
    }

    /// Ends every NVM-subsystem controller of the hosts `which` picks, and with it every
    /// queue connection of theirs (the embedder fences them; whether they may come back is
    /// its `HostPolicy::admit`). Returns how many controllers went, once none of their
    /// commands can still reach the media: none starts after this call began, and those
    /// already in the kernel or on a blocking thread are waited for (as Linux nvmet's
    /// preempt-and-abort waits for the preempted hosts' I/O). Controllers of theirs ended
    /// earlier (keep-alive expiry, a lost admin queue) with I/O still at the media are
    /// waited for too. Blocks the calling thread up to `Limits::fence_drain_ms` (not for a
    /// worker of a current-thread runtime serving the target: `Subsystem::wait_io`);
    /// `Error::StillInFlight` when that ran out (the hosts stay disconnected, and the next
    /// call that picks them waits again).
    pub fn disconnect_host(
        &self,
        which: &dyn Fn(&crate::policy::HostRef<'_>) -> bool,
    ) -> Result<usize, Error> {
        let gone: Vec<_> = lock(&self.inner.subsys.controllers)
            .values()
            .filter(|c| c.kind == crate::controller::CtrlKind::Io && which(&c.host()))
            .cloned()
            .collect();
        for c in &gone {
            tracing::warn!(cntlid = c.cntlid, host = %c.hostnqn, peer = %c.peer, "host disconnected by the embedder");
            c.kill();
        }
        match self
            .inner
            .subsys
            .wait_io(&|c: &crate::controller::Controller| which(&c.host()))
        {
            Ok(()) => Ok(gone.len()),
            Err(controllers) => Err(Error::StillInFlight { controllers }),
        }
    }

    /// Accepts connections until `shutdown()`. Call once.
    pub async fn run(&self) -> Result<(), Error> {
        let listener = lock(&self.inner.listener)
            .take()
            .ok_or_else(|| Error::Config("target already running".into()))?;
        let mut stop = self.inner.stop.subscribe();
        if *stop.borrow() {
            return Ok(());
        }
        loop {
            tokio::select! {
                r = listener.accept() => match r {
                    Ok((stream, peer)) => {
                        // After `shutdown` the gate is closed: the connection is dropped.
                        let Some(busy) = self.inner.gate.enter() else { return Ok(()) };
                        let Some(slot) = conn::ConnSlot::take(&self.inner.subsys) else {
                            self.refuse_connection(stream, peer);
                            continue;
                        };
                        tracing::debug!(%peer, "nvme-tcp connection");
                        let (subsys, gate) = (self.inner.subsys.clone(), self.inner.gate.clone());
                        tokio::spawn(conn::serve(stream, subsys, self.inner.stop.subscribe(), gate, (busy, slot)));
                    }
                    // Out of descriptors and the like: keep serving the connections we have.
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                },
                _ = stop.changed() => return Ok(()),
            }
        }
    }

    /// `max_connections` are open: the new one is closed before any PDU is read, counted,
    /// and logged at most once per `LOG_EVERY`.
    fn refuse_connection(&self, stream: tokio::net::TcpStream, peer: SocketAddr) {
        drop(stream);
        let c = &self.inner.subsys.counters;
        c.connections_refused.fetch_add(1, Ordering::Relaxed);
        if let Some(left_out) = self.inner.refused_log.allow() {
            tracing::info!(
                %peer,
                max_connections = self.inner.subsys.limits.max_connections,
                refused_since_last_line = left_out,
                "nvme-tcp connection refused: max_connections open"
            );
        }
    }

    /// Runs the target on a tokio task.
    pub fn spawn(&self) -> tokio::task::JoinHandle<Result<(), Error>> {
        let t = self.clone();
        tokio::spawn(async move { t.run().await })
    }

    /// `bind`, then `spawn` on `rt`, called from outside any runtime (a test, bench or tool
    /// that keeps the target on a runtime of its own); returns once the listener is bound.
    pub fn start_on(
        rt: &tokio::runtime::Runtime,
        addr: impl ToSocketAddrs,
        cfg: TargetConfig,
    ) -> Result<Target, Error> {
        let t = rt.block_on(Target::bind(addr, cfg))?;
        let _g = rt.enter();
        t.spawn();
        Ok(t)
    }

    /// Stops accepting, ends every controller and closes every connection. Commands not yet
    /// started are not executed; those running may still finish after this returns (see
    /// `shutdown_and_wait`).
    pub fn shutdown(&self) {
        // Gate first: from here no command starts a backend call.
        self.inner.gate.close();
        self.inner.stop.send_replace(true);
        self.inner.subsys.kill_all();
    }

    /// `shutdown`, then waits (at most `timeout`) until every connection task has ended and
    /// no backend call made for a command is in flight, so the backend may be closed (pnfsd
    /// unmounts its store after this). Returns false, and logs, if the time ran out.
    pub async fn shutdown_and_wait(&self, timeout: Duration) -> bool {
        self.shutdown();
        let quiet = self.inner.gate.idle(timeout).await;
        if !quiet {
            tracing::warn!(
                busy = self.inner.gate.busy(),
                ?timeout,
                "nvme-tcp target: connections or backend I/O still running after shutdown"
            );
        }
        quiet
    }
}

/// In-process reservation commands, for an embedder that is itself a host of the namespace
/// (pnfsd's MDS registers its key, holds EXCLUSIVE_ACCESS_REG_ONLY and preempts fenced
/// clients, docs/design.md §5) without a TCP connection to itself. `hostid` plays the role
/// of the Host Identifier a remote host sends in Connect; the semantics are those of the
/// commands.
impl Target {
    fn ns(&self, nsid: u32) -> Result<&Arc<Namespace>, Status> {
        self.inner
            .subsys
            .namespaces
            .get(&nsid)
            .ok_or(Status::INVALID_NS)
    }

    /// The namespace, for a command the embedder issues as `hostid`.
    fn ns_as(&self, nsid: u32, hostid: &[u8; 16]) -> Result<&Arc<Namespace>, Status> {
        let ns = self.ns(nsid)?;
        command::host_in_process(ns, hostid);
        Ok(ns)
    }

    pub fn reservation_register(
        &self,
        nsid: u32,
        hostid: [u8; 16],
        action: RegisterAction,
        iekey: bool,
        crkey: u64,
        nrkey: u64,
    ) -> Result<(), Status> {
        self.reservation_register_cptpl(nsid, hostid, action, iekey, Cptpl::NoChange, crkey, nrkey)
    }

    /// `reservation_register` with CPTPL (Persist Through Power Loss state change).
    #[allow(clippy::too_many_arguments)]
    pub fn reservation_register_cptpl(
        &self,
        nsid: u32,
        hostid: [u8; 16],
        action: RegisterAction,
        iekey: bool,
        cptpl: Cptpl,
        crkey: u64,
        nrkey: u64,
    ) -> Result<(), Status> {
        let who = Requester {
            hostid,
            cntlid: 0xFFFF,
        };
        command::register(
            self.ns_as(nsid, &hostid)?,
            &who,
            action,
            iekey,
            cptpl,
            crkey,
            nrkey,
        )
    }

    /// Returns the Host Identifiers whose registrations a preempt removed. With Preempt and
    /// Abort, once none of their I/O can still reach the media, nor that of the hosts an
    /// earlier Preempt and Abort left there (`Subsystem::drain_hosts_io`; blocks the calling
    /// thread meanwhile): `Status::INTERNAL` when that wait ran out (the preempt stands; the
    /// next Preempt and Abort waits for them first, and fails the same way until they are
    /// done).
    pub fn reservation_acquire(
        &self,
        nsid: u32,
        hostid: [u8; 16],
        action: AcquireAction,
        rtype: RType,
        crkey: u64,
        prkey: u64,
    ) -> Result<Vec<[u8; 16]>, Status> {
        let who = Requester {
            hostid,
            cntlid: 0xFFFF,
        };
        let abort = action == AcquireAction::PreemptAndAbort;
        // Hosts an earlier one left at the media first: its retry (pnfsd's, a lease later)
        // finds their keys gone, and must not succeed before their I/O is done.
        if abort && !self.inner.subsys.drain_hosts_io(&[]) {
            return Err(Status::INTERNAL);
        }
        let gone = command::acquire(
            self.ns_as(nsid, &hostid)?,
            &who,
            action,
            false,
            rtype,
            crkey,
            prkey,
        )?;
        if abort && !self.inner.subsys.drain_hosts_io(&gone) {
            return Err(Status::INTERNAL);
        }
        Ok(gone)
    }

    pub fn reservation_release(
        &self,
        nsid: u32,
        hostid: [u8; 16],
        action: ReleaseAction,
        rtype: RType,
        crkey: u64,
    ) -> Result<(), Status> {
        let who = Requester {
            hostid,
            cntlid: 0xFFFF,
        };
        command::release(
            self.ns_as(nsid, &hostid)?,
            &who,
            action,
            false,
            rtype,
            crkey,
        )
    }

    /// Current reservation type (None when no reservation) and registrants.
    pub fn reservation_state(&self, nsid: u32) -> Result<(Option<RType>, Vec<Registrant>), Status> {
        let r = lock(&self.ns(nsid)?.resv);
        Ok((r.rtype(), r.registrants().to_vec()))
    }

    /// The namespace's Persist Through Power Loss state.
    pub fn reservation_ptpl(&self, nsid: u32) -> Result<bool, Status> {
        Ok(command::ptpl(self.ns(nsid)?))
    }

    /// Of the hosts registered in the state restored at `bind`: those that connected an I/O
    /// queue since, and those still registered that have not (the in-process requester not
    /// counted).
    pub fn reservation_restored_hosts(&self, nsid: u32) -> Result<RestoredHosts, Status> {
        Ok(command::restored_hosts(self.ns(nsid)?))
    }
}
