//! The async NVMe/TCP initiator (host): connects an admin queue and I/O queues to a
//! controller the way the Linux host does (Connect, CAP, CC.EN, CSTS.RDY, Identify, Set
//! Features Number of Queues, I/O queue Connects), sends Keep Alives (none while I/O completes
//! if the controller has Traffic Based Keep Alive), and offers read, write (FUA), flush, write
//! zeroes, deallocate and the reservation commands.

mod discovery;
mod nvm;
mod queue;

pub use discovery::discover;

pub use queue::Completion;

use crate::controller::identify::CTRATT_TBKAS;
use crate::error::Error;
use crate::pdu::{connect_off, AdminOpc, ConnectData, Digests, FcType, Sqe};
use crate::status::Status;
use bytes::Bytes;
use queue::{HostQueue, KeepAliveTraffic};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Largest C2HData we accept in one PDU (bounds allocation before the data is read).
pub(crate) const MAX_C2H: u32 = 8 << 20;
const ADMIN_DEPTH: u16 = 32;

#[derive(Clone, Debug)]
pub struct InitiatorConfig {
    pub subnqn: String,
    pub hostnqn: String,
    /// Host Identifier sent in Connect (reservations key on it).
    pub hostid: [u8; 16],
    pub io_queues: u16,
    pub queue_depth: u16,
    /// Keep Alive Timeout asked for in Connect (ms); 0 disables it.
    pub kato_ms: u32,
    /// Send Keep Alive every KATO/2, skipped while I/O completes if the controller has
    /// Traffic Based Keep Alive (tests turn this off to watch the timeout fire).
    pub send_keep_alive: bool,
    pub header_digest: bool,
    pub data_digest: bool,
    /// Local address every queue's socket binds to before connecting (a test playing two
    /// hosts from 127.0.0.1 and 127.0.0.2); `None`: the kernel's choice.
    pub source: Option<std::net::IpAddr>,
}

impl InitiatorConfig {
    /// Defaults: 1 I/O queue of depth 32, KATO 5 s, no digests, a Host ID derived from the
    /// host NQN.
    pub fn new(subnqn: impl Into<String>, hostnqn: impl Into<String>) -> Self {
        let hostnqn = hostnqn.into();
        let a = crc32c::crc32c(hostnqn.as_bytes());
        let b = crc32c::crc32c_append(a, b"hostid");
        let c = crc32c::crc32c_append(b, b"hostid");
        let d = crc32c::crc32c_append(c, b"hostid");
        let mut hostid = [0u8; 16];
        for (i, w) in [a, b, c, d].iter().enumerate() {
            hostid[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
        }
        InitiatorConfig {
            subnqn: subnqn.into(),
            hostnqn,
            hostid,
            io_queues: 1,
            queue_depth: 32,
            kato_ms: 5000,
            send_keep_alive: true,
            header_digest: false,
            data_digest: false,
            source: None,
        }
    }
}

/// What Identify Namespace told us.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub nsid: u32,
    pub blocks: u64,
    pub block_size: u32,
    pub nmic: u8,
    pub rescap: u8,
    pub nguid: [u8; 16],
    pub eui64: [u8; 8],
}

/// One registrant in a Reservation Report (extended format).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registrant {
    pub cntlid: u16,
    pub holds: bool,
    pub key: u64,
    pub hostid: [u8; 16],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationReport {
    pub generation: u32,
    /// 0 when no reservation is held.
    pub rtype: u8,
    /// PTPLS: the reservation state persists through power loss.
    pub ptpl: bool,
    pub registrants: Vec<Registrant>,
}

/// One Discovery Log entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoveryEntry {
    pub trtype: u8,
    pub adrfam: u8,
    pub subtype: u8,
    pub portid: u16,
    pub cntlid: u16,
    pub trsvcid: String,
    pub traddr: String,
    pub subnqn: String,
}

pub struct Initiator {
    admin: Arc<HostQueue>,
    io: Vec<HostQueue>,
    cntlid: u16,
    rr: AtomicUsize,
    ka: Option<tokio::task::JoinHandle<()>>,
    identify: Vec<u8>,
}

/// A field of the data a target returned (Identify, a log page, a Reservation Report): a short
/// buffer is the target's protocol error, never a panic of ours.
fn identified<T>(r: Result<T, bytecodec::Error>) -> Result<T, Error> {
    r.map_err(|e| Error::Protocol(format!("data from the target: {e:?}")))
}
fn le16(b: &[u8], o: usize) -> Result<u16, Error> {
    identified(bytecodec::get_u16_le(b, o))
}
fn le32(b: &[u8], o: usize) -> Result<u32, Error> {
    identified(bytecodec::get_u32_le(b, o))
}
fn le64(b: &[u8], o: usize) -> Result<u64, Error> {
    identified(bytecodec::get_u64_le(b, o))
}
fn text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).trim_end().to_string()
}

async fn fabrics_connect(
    q: &HostQueue,
    cfg: &InitiatorConfig,
    qid: u16,
    sqsize: u16,
    cntlid: u16,
) -> Result<u16, Error> {
    let mut sqe = Sqe::fabrics(FcType::CONNECT);
    sqe.0[connect_off::QID..connect_off::QID + 2].copy_from_slice(&qid.to_le_bytes());
    sqe.0[connect_off::SQSIZE..connect_off::SQSIZE + 2].copy_from_slice(&sqsize.to_le_bytes());
    sqe.0[connect_off::KATO..connect_off::KATO + 4]
        .copy_from_slice(&(if qid == 0 { cfg.kato_ms } else { 0 }).to_le_bytes());
    let data = ConnectData {
        hostid: cfg.hostid,
        cntlid,
        subnqn: cfg.subnqn.clone(),
        hostnqn: cfg.hostnqn.clone(),
    };
    let c = q.submit(sqe, Some(Bytes::from(data.encode())), 0).await?;
    if !c.cqe.status.is_success() {
        return Err(Error::ConnectRefused {
            status: c.cqe.status,
            iattr: (c.cqe.dw0 >> 16) as u8,
            ipo: c.cqe.dw0 as u16,
        });
    }
    Ok(c.cqe.dw0 as u16)
}

impl Initiator {
    pub async fn connect(addr: SocketAddr, cfg: InitiatorConfig) -> Result<Initiator, Error> {
        let dg = Digests {
            header: cfg.header_digest,
            data: cfg.data_digest,
        };
        let admin = Arc::new(HostQueue::open(addr, cfg.source, ADMIN_DEPTH, dg, 8192, None).await?);
        let cntlid = fabrics_connect(&admin, &cfg, 0, ADMIN_DEPTH - 1, 0xFFFF).await?;
        let mut ini = Initiator {
            admin,
            io: Vec::new(),
            cntlid,
            rr: AtomicUsize::new(0),
            ka: None,
            identify: Vec::new(),
        };
        let cap = ini.property_get(0, true).await?;
        // Enable: IOSQES = 6, IOCQES = 4, MPS = 0 (4 KiB), CSS = NVM; then wait for RDY.
        ini.property_set(0x14, 1 | (6 << 16) | (4 << 20)).await?;
        let timeout = Duration::from_millis(500 * ((cap >> 24) & 0xFF).max(1));
        let start = std::time::Instant::now();
        loop {
            let csts = ini.property_get(0x1C, false).await?;
            if csts & 2 != 0 {
                return Err(Error::Protocol("controller fatal status (CSTS.CFS)".into()));
            }
            if csts & 1 != 0 {
                break;
            }
            if start.elapsed() > timeout {
                return Err(Error::Protocol("controller never became ready".into()));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        ini.identify = ini.identify_raw(1, 0).await?;
        if le16(&ini.identify, 78)? != cntlid {
            return Err(Error::Protocol(
                "Identify CNTLID differs from Connect's".into(),
            ));
        }
        let traffic = Arc::new(KeepAliveTraffic::default());
        if cfg.subnqn != crate::DISCOVERY_NQN && cfg.io_queues > 0 {
            let n = cfg.io_queues - 1;
            let c = ini
                .admin_cmd(set_features(0x07, n as u32 | (n as u32) << 16), None, 0)
                .await?;
            let granted = (c.cqe.dw0 & 0xFFFF).min(c.cqe.dw0 >> 16) as u16 + 1;
            let mqes = (cap & 0xFFFF) as u16;
            let depth = cfg.queue_depth.clamp(2, mqes.saturating_add(1));
            let ioccsz = le32(&ini.identify, 1792)? as usize;
            let inline_max = (ioccsz * 16).saturating_sub(64);
            for qid in 1..=cfg.io_queues.min(granted) {
                let q = HostQueue::open(
                    addr,
                    cfg.source,
                    depth,
                    dg,
                    inline_max,
                    Some(traffic.clone()),
                )
                .await?;
                fabrics_connect(&q, &cfg, qid, depth - 1, cntlid).await?;
                ini.io.push(q);
            }
        }
        if cfg.send_keep_alive && cfg.kato_ms > 0 {
            let admin = ini.admin.clone();
            // CTRATT is bytes 99:96 of Identify Controller.
            let tbkas = le32(&ini.identify, 96)? & CTRATT_TBKAS != 0;
            // Every KATO/2, and every KATO/4 with TBKAS, as Linux
            // (`nvme_keep_alive_work_period`): a skipped check postpones the next Keep Alive
            // by a whole period, so the checks run twice as often to keep the longest gap
            // without traffic or a Keep Alive near KATO/2.
            let div = if tbkas { 4 } else { 2 };
            let period = Duration::from_millis((cfg.kato_ms / div).max(1) as u64);
            ini.ka = Some(tokio::spawn(async move {
                loop {
                    tokio::time::sleep(period).await;
                    if !traffic.keep_alive_due(tbkas) {
                        continue;
                    }
                    if admin
                        .submit(Sqe::new(AdminOpc::KEEP_ALIVE.0), None, 0)
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }));
        }
        Ok(ini)
    }

    pub fn cntlid(&self) -> u16 {
        self.cntlid
    }

    pub fn io_queue_count(&self) -> usize {
        self.io.len()
    }

    /// Identify Controller data read at connect time.
    pub fn controller_data(&self) -> &[u8] {
        &self.identify
    }

    /// True once the admin connection is gone (e.g. the keep-alive timer fired).
    pub fn is_closed(&self) -> bool {
        self.admin.is_closed()
    }

    /// Raw admin command.
    pub async fn admin_cmd(
        &self,
        sqe: Sqe,
        out: Option<Bytes>,
        in_len: u32,
    ) -> Result<Completion, Error> {
        self.admin.submit(sqe, out, in_len).await?.ok()
    }

    /// Raw I/O command on queue `q` (0-based index into the I/O queues), any status.
    pub async fn io_cmd_on(
        &self,
        q: usize,
        sqe: Sqe,
        out: Option<Bytes>,
        in_len: u32,
    ) -> Result<Completion, Error> {
        let queue = self
            .io
            .get(q)
            .ok_or_else(|| Error::Config(format!("no I/O queue {q}")))?;
        queue.submit(sqe, out, in_len).await
    }

    fn next_queue(&self) -> Result<&HostQueue, Error> {
        if self.io.is_empty() {
            return Err(Error::Config("no I/O queues".into()));
        }
        Ok(&self.io[self.rr.fetch_add(1, Ordering::Relaxed) % self.io.len()])
    }

    async fn io_cmd(&self, sqe: Sqe, out: Option<Bytes>, in_len: u32) -> Result<Completion, Error> {
        self.next_queue()?.submit(sqe, out, in_len).await?.ok()
    }

    pub async fn property_get(&self, offset: u32, eight: bool) -> Result<u64, Error> {
        let mut s = Sqe::fabrics(FcType::PROPERTY_GET);
        s.0[40] = eight as u8;
        s.set_cdw(11, offset);
        let c = self.admin_cmd(s, None, 0).await?;
        Ok(c.cqe.dw0 as u64 | (c.cqe.dw1 as u64) << 32)
    }

    pub async fn property_set(&self, offset: u32, value: u32) -> Result<(), Error> {
        let mut s = Sqe::fabrics(FcType::PROPERTY_SET);
        s.set_cdw(11, offset);
        s.set_cdw(12, value);
        self.admin_cmd(s, None, 0).await.map(|_| ())
    }

    pub async fn identify_raw(&self, cns: u8, nsid: u32) -> Result<Vec<u8>, Error> {
        let mut s = Sqe::new(AdminOpc::IDENTIFY.0);
        s.set_nsid(nsid);
        s.set_cdw(10, cns as u32);
        Ok(self.admin_cmd(s, None, 4096).await?.data)
    }

    pub async fn identify_namespace(&self, nsid: u32) -> Result<NamespaceInfo, Error> {
        let b = self.identify_raw(0, nsid).await?;
        let flbas = identified(bytecodec::get_u8(&b, 26))?;
        let lbaf = le32(&b, 128 + 4 * (flbas & 0xF) as usize)?;
        let nguid: [u8; 16] = identified(bytecodec::get_array(&b, 104))?;
        let eui64: [u8; 8] = identified(bytecodec::get_array(&b, 120))?;
        let lbads = (lbaf >> 16) & 0xFF;
        if !(9..=16).contains(&lbads) {
            return Err(Error::Protocol(format!("namespace {nsid}: LBADS {lbads}")));
        }
        Ok(NamespaceInfo {
            nsid,
            blocks: le64(&b, 0)?,
            block_size: 1 << lbads,
            nmic: identified(bytecodec::get_u8(&b, 30))?,
            rescap: identified(bytecodec::get_u8(&b, 31))?,
            nguid,
            eui64,
        })
    }

    pub async fn active_namespaces(&self) -> Result<Vec<u32>, Error> {
        let b = self.identify_raw(2, 0).await?;
        // Whole entries only: a trailing partial one is not a namespace id.
        Ok(b.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .take_while(|&n| n != 0)
            .collect())
    }

    /// Namespace Identification Descriptors as (NIDT, NID).
    pub async fn ns_descriptors(&self, nsid: u32) -> Result<Vec<(u8, Vec<u8>)>, Error> {
        let b = self.identify_raw(3, nsid).await?;
        let mut out = Vec::new();
        let mut o = 0;
        while o + 4 <= b.len() && b[o] != 0 {
            let l = b[o + 1] as usize;
            if o + 4 + l > b.len() {
                break;
            }
            out.push((b[o], b[o + 4..o + 4 + l].to_vec()));
            o += 4 + l;
        }
        Ok(out)
    }

    pub async fn get_features(&self, fid: u8, cdw11: u32) -> Result<u32, Error> {
        let mut s = Sqe::new(AdminOpc::GET_FEATURES.0);
        s.set_cdw(10, fid as u32);
        s.set_cdw(11, cdw11);
        Ok(self.admin_cmd(s, None, 0).await?.cqe.dw0)
    }

    pub async fn set_features(&self, fid: u8, value: u32) -> Result<u32, Error> {
        Ok(self
            .admin_cmd(set_features(fid, value), None, 0)
            .await?
            .cqe
            .dw0)
    }

    pub async fn keep_alive(&self) -> Result<(), Error> {
        self.admin_cmd(Sqe::new(AdminOpc::KEEP_ALIVE.0), None, 0)
            .await
            .map(|_| ())
    }

    pub async fn get_log_page(
        &self,
        lid: u8,
        nsid: u32,
        offset: u64,
        len: u32,
    ) -> Result<Vec<u8>, Error> {
        if len == 0 || !len.is_multiple_of(4) {
            return Err(Error::Config(
                "log page length must be a non-zero multiple of 4".into(),
            ));
        }
        let numd = len / 4 - 1;
        let mut s = Sqe::new(AdminOpc::GET_LOG_PAGE.0);
        s.set_nsid(nsid);
        s.set_cdw(10, lid as u32 | (numd & 0xFFFF) << 16);
        s.set_cdw(11, numd >> 16);
        s.set_cdw(12, offset as u32);
        s.set_cdw(13, (offset >> 32) as u32);
        Ok(self.admin_cmd(s, None, len).await?.data)
    }

    /// Orderly shutdown: CC.SHN = normal, then close every queue.
    pub async fn disconnect(mut self) -> Result<(), Error> {
        if let Some(ka) = self.ka.take() {
            ka.abort();
        }
        // Disconnect each I/O queue (the controller answers, then closes it).
        let mut first_err = None;
        for q in &self.io {
            if let Err(e) = q
                .submit(Sqe::fabrics(FcType::DISCONNECT), None, 0)
                .await
                .and_then(|c| c.ok())
            {
                first_err.get_or_insert(e);
            }
        }
        // Normal shutdown notification, then wait for CSTS.SHST = complete.
        let r = self
            .property_set(0x14, 1 | (6 << 16) | (4 << 20) | (1 << 14))
            .await;
        let shst = match r {
            Ok(()) => self.property_get(0x1C, false).await.map(|v| (v >> 2) & 3),
            Err(e) => Err(e),
        };
        self.admin.close();
        match (first_err, shst) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(2)) => Ok(()),
            (None, Ok(s)) => Err(Error::Protocol(format!("shutdown not complete (SHST {s})"))),
        }
    }

    /// Test hook: sends raw bytes on I/O queue `q` (or the admin queue when `None`).
    #[doc(hidden)]
    pub fn send_raw(&self, q: Option<usize>, bytes: Vec<u8>) {
        match q.and_then(|i| self.io.get(i)) {
            Some(q) => q.send_raw(bytes),
            None => self.admin.send_raw(bytes),
        }
    }
}

impl Drop for Initiator {
    fn drop(&mut self) {
        if let Some(ka) = self.ka.take() {
            ka.abort();
        }
        for q in &self.io {
            q.close();
        }
        self.admin.close();
    }
}

fn set_features(fid: u8, value: u32) -> Sqe {
    let mut s = Sqe::new(AdminOpc::SET_FEATURES.0);
    s.set_cdw(10, fid as u32);
    s.set_cdw(11, value);
    s
}

impl From<Status> for Completion {
    fn from(status: Status) -> Self {
        Completion {
            cqe: crate::pdu::Cqe {
                dw0: 0,
                dw1: 0,
                sqhd: 0,
                sqid: 0,
                cid: 0,
                status,
            },
            data: Vec::new(),
        }
    }
}
