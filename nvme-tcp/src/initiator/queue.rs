//! One host-side queue pair: a TCP connection, its writer task and a reader task that routes
//! C2HData, R2T and CapsuleResp PDUs to the command waiting on that CID.

use crate::error::Error;
use crate::namespace::lock;
use crate::pdu::{sgl_id, Cqe, DataPdu, Digests, IcReq, Pdu, Rules, Sgl, Side, Sqe, Stage};
use crate::status::Status;
use crate::transport::{frame, split, terminate, Out, OutTx, PduReader, RecvError};
use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Semaphore, SemaphorePermit};

/// A completed command: its CQE and the data the controller sent.
#[derive(Debug)]
pub struct Completion {
    pub cqe: Cqe,
    pub data: Vec<u8>,
}

impl Completion {
    /// The completion if it succeeded, else its status as an error.
    pub fn ok(self) -> Result<Completion, Error> {
        if self.cqe.status.is_success() {
            Ok(self)
        } else {
            Err(Error::Status(self.cqe.status))
        }
    }
}

struct Pending {
    done: oneshot::Sender<Result<Completion, Error>>,
    /// Controller-to-host data: `read_len` bytes, allocated when the first C2HData comes
    /// (taken whole from one PDU that covers it all, the usual case).
    read: Vec<u8>,
    read_len: usize,
    write: Option<Bytes>,
    /// The submitter went away: recycle the CID when the response arrives.
    abandoned: bool,
    digest_error: bool,
    /// `KeepAliveTraffic::checks` when the command was sent.
    ka_check: u32,
}

/// Traffic Based Keep Alive on the host side (NVMe Base 2.0 §3.9.5), as Linux's
/// `nvme_keep_alive_work`: the I/O queues note completions here, and the keep-alive task
/// skips a Keep Alive when the controller has TBKAS and an I/O command sent since its last
/// check has completed. Only commands sent since the last check count: a controller with
/// TBKAS restarts its timer when a command arrives, so a long-running command's completion
/// says nothing about recent traffic (Linux compares submission time with
/// `ka_last_check_time` for the same reason).
#[derive(Default)]
pub(crate) struct KeepAliveTraffic {
    /// Keep-alive checks so far: the current period's number. A command remembers the
    /// period it was sent in.
    checks: AtomicU32,
    /// 1 + the period of the last command whose completion was noted (0: none). A period
    /// number rather than a flag (Linux's `comp_seen`): a completion noted just after the
    /// check that ended its command's period must not count at the next check.
    seen: AtomicU32,
}

impl KeepAliveTraffic {
    /// A command completed that was sent in period `ka_check`. Loads first, so a queue at
    /// full speed writes the shared word about once per period, not per command.
    fn completed(&self, ka_check: u32) {
        let mark = ka_check.wrapping_add(1);
        if ka_check == self.checks.load(Ordering::Relaxed)
            && self.seen.load(Ordering::Relaxed) != mark
        {
            self.seen.store(mark, Ordering::Relaxed);
        }
    }

    /// The keep-alive task's check, once a period: whether to send the Keep Alive. It is
    /// skipped only for a completion of a command sent in the period this check ends.
    pub fn keep_alive_due(&self, tbkas: bool) -> bool {
        let ended = self.checks.fetch_add(1, Ordering::Relaxed);
        let seen = self.seen.load(Ordering::Relaxed) == ended.wrapping_add(1);
        !(tbkas && seen)
    }
}

/// The commands outstanding on the queue, by CID, and the CIDs free for new ones, under one
/// lock. The queue hands out the CIDs 0..depth itself, so a CID is an index; one the
/// controller names that is out of range or not outstanding finds nothing.
struct Cids {
    pending: Vec<Option<Pending>>,
    free: Vec<u16>,
}

impl Cids {
    fn new(depth: u16) -> Cids {
        Cids {
            pending: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
        }
    }

    fn get(&self, cid: u16) -> Option<&Pending> {
        self.pending.get(cid as usize)?.as_ref()
    }

    fn get_mut(&mut self, cid: u16) -> Option<&mut Pending> {
        self.pending.get_mut(cid as usize)?.as_mut()
    }

    fn remove(&mut self, cid: u16) -> Option<Pending> {
        self.pending.get_mut(cid as usize)?.take()
    }
}

struct Shared {
    cids: Mutex<Cids>,
    slots: Semaphore,
    closed: AtomicBool,
    /// The initiator's, on I/O queues; `None` on the admin queue (its own Keep Alives and
    /// admin commands are not I/O traffic).
    traffic: Option<Arc<KeepAliveTraffic>>,
}

pub(crate) struct HostQueue {
    tx: OutTx,
    dg: Digests,
    /// Largest write sent in-capsule (from IOCCSZ; 8 KiB on the admin queue).
    pub inline_max: usize,
    sh: Arc<Shared>,
    depth: usize,
}

/// Holds a CID while a command is outstanding (see `Drop`).
struct Slot<'a> {
    sh: &'a Shared,
    cid: u16,
    permit: Option<SemaphorePermit<'a>>,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut c = lock(&self.sh.cids);
        match c.get_mut(self.cid) {
            // Still outstanding at the controller: the CID may not be reused until its
            // response arrives, so the reader recycles it then.
            Some(e) => {
                e.abandoned = true;
                if let Some(permit) = self.permit.take() {
                    permit.forget();
                }
            }
            None => c.free.push(self.cid),
        }
    }
}

impl HostQueue {
    /// Connects and exchanges ICReq/ICResp. `depth` commands may be outstanding; their
    /// completions count in `traffic` when given.
    pub async fn open(
        addr: SocketAddr,
        source: Option<std::net::IpAddr>,
        depth: u16,
        dg: Digests,
        inline_max: usize,
        traffic: Option<Arc<KeepAliveTraffic>>,
    ) -> Result<HostQueue, Error> {
        let stream = match source {
            None => TcpStream::connect(addr).await?,
            Some(ip) => {
                let sock = if ip.is_ipv4() {
                    tokio::net::TcpSocket::new_v4()?
                } else {
                    tokio::net::TcpSocket::new_v6()?
                };
                sock.bind(SocketAddr::new(ip, 0))?;
                sock.connect(addr).await?
            }
        };
        stream.set_nodelay(true)?;
        let (rd, tx) = split(stream)?;
        let rules = Rules {
            receiver: Side::Host,
            stage: Stage::AwaitIc,
            digests: Digests::default(),
            max_capsule_data: 0,
            max_data_pdu: super::MAX_C2H,
        };
        let mut reader = PduReader::new(rd, rules);
        // MAXR2T is 0's based: one outstanding R2T per command.
        let req = IcReq {
            pfv: 0,
            hpda: 0,
            digests: dg,
            maxr2t: 0,
        };
        tx.send(frame(&Pdu::IcReq(req), dg))
            .map_err(|_| Error::Closed)?;
        let resp = match reader.read().await {
            Ok(Pdu::IcResp(r)) => r,
            Ok(Pdu::C2hTermReq(t)) => {
                return Err(Error::Terminated {
                    fes: t.fes,
                    fei: t.fei,
                })
            }
            Err(RecvError::Fatal { fatal, header }) => {
                terminate(&tx, false, fatal, header);
                return Err(Error::Protocol(format!("bad ICResp: {fatal:?}")));
            }
            Err(RecvError::Io(e)) => return Err(Error::Io(e)),
            _ => return Err(Error::Closed),
        };
        // The same checks the Linux host makes: digests echoed, CPDA 0 (we never pad).
        if resp.digests != dg || resp.cpda != 0 {
            let _ = tx.send(Out::Close);
            return Err(Error::Protocol(format!(
                "ICResp digests {:?} cpda {}",
                resp.digests, resp.cpda
            )));
        }
        reader.b.rules.stage = Stage::Ready;
        reader.b.rules.digests = dg;
        let sh = Arc::new(Shared {
            cids: Mutex::new(Cids::new(depth)),
            slots: Semaphore::new(depth as usize),
            closed: AtomicBool::new(false),
            traffic,
        });
        tokio::spawn(reader_task(
            reader,
            sh.clone(),
            tx.clone(),
            dg,
            resp.maxh2cdata as usize,
        ));
        Ok(HostQueue {
            tx,
            dg,
            inline_max,
            sh,
            depth: depth as usize,
        })
    }

    /// Submits a command: `out` is data for the controller (in-capsule when it fits, else
    /// sent when the controller asks with R2T); `in_len` bytes may come back.
    pub async fn submit(
        &self,
        mut sqe: Sqe,
        out: Option<Bytes>,
        in_len: u32,
    ) -> Result<Completion, Error> {
        let permit = self.sh.slots.acquire().await.map_err(|_| Error::Closed)?;
        let mut capsule = Bytes::new();
        let mut write = None;
        match out {
            Some(d) if !d.is_empty() => {
                if d.len() <= self.inline_max {
                    sqe.set_sgl(Sgl {
                        addr: 0,
                        len: d.len() as u32,
                        id: sgl_id::DATA_OFFSET,
                    });
                    capsule = d;
                } else {
                    sqe.set_sgl(Sgl {
                        addr: 0,
                        len: d.len() as u32,
                        id: sgl_id::TRANSPORT,
                    });
                    write = Some(d);
                }
            }
            _ => sqe.set_sgl(Sgl {
                addr: 0,
                len: in_len,
                id: sgl_id::TRANSPORT,
            }),
        }
        let (done, rx) = oneshot::channel();
        let ka_check = self
            .sh
            .traffic
            .as_ref()
            .map_or(0, |t| t.checks.load(Ordering::Relaxed));
        let cid = {
            let mut c = lock(&self.sh.cids);
            if self.sh.closed.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            // The permit guarantees a free CID.
            let cid = c.free.pop().ok_or(Error::Closed)?;
            c.pending[cid as usize] = Some(Pending {
                done,
                read: Vec::new(),
                read_len: in_len as usize,
                write,
                abandoned: false,
                digest_error: false,
                ka_check,
            });
            cid
        };
        let _slot = Slot {
            sh: &self.sh,
            cid,
            permit: Some(permit),
        };
        sqe.set_cid(cid);
        // Alone on the queue: straight to the socket. With others in flight: batched with
        // the commands submitted in the same burst.
        let pdu = [&Pdu::CapsuleCmd(sqe, capsule)];
        let sent = if self.sh.slots.available_permits() + 1 >= self.depth {
            self.tx.send_pdus(&pdu, self.dg)
        } else {
            self.tx.send_pdus_batched(&pdu, self.dg)
        };
        sent.map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    /// Closes the connection (the writer flushes, then shuts the socket down).
    pub fn close(&self) {
        let _ = self.tx.send(Out::Close);
    }

    /// Sends raw bytes (tests use this to inject malformed PDUs).
    pub fn send_raw(&self, bytes: Vec<u8>) {
        let _ = self.tx.send(Out::Frame(bytes));
    }

    pub fn is_closed(&self) -> bool {
        self.sh.closed.load(Ordering::Acquire)
    }
}

fn fail_all(sh: &Shared, err: impl Fn() -> Error) {
    let mut c = lock(&sh.cids);
    sh.closed.store(true, Ordering::Release);
    for e in c.pending.iter_mut().filter_map(Option::take) {
        let _ = e.done.send(Err(err()));
    }
    sh.slots.close();
}

async fn reader_task(
    mut reader: PduReader<tokio::net::tcp::OwnedReadHalf>,
    sh: Arc<Shared>,
    tx: OutTx,
    dg: Digests,
    maxh2cdata: usize,
) {
    loop {
        match reader.read().await {
            Ok(Pdu::CapsuleResp(cqe)) => complete(&sh, cqe),
            Ok(Pdu::C2hData(d)) => {
                let ok = {
                    let mut c = lock(&sh.cids);
                    match c.get_mut(d.cccid) {
                        Some(e) => {
                            let (o, n) = (d.datao as usize, d.data.len());
                            match o.checked_add(n) {
                                Some(end) if end <= e.read_len => {
                                    if o == 0 && n == e.read_len {
                                        e.read.clear();
                                        e.read.extend_from_slice(&d.data);
                                    } else {
                                        e.read.resize(e.read_len, 0);
                                        e.read[o..end].copy_from_slice(&d.data);
                                    }
                                    true
                                }
                                _ => false,
                            }
                        }
                        None => false,
                    }
                };
                if !ok {
                    terminate(
                        &tx,
                        false,
                        crate::pdu::Fatal {
                            fes: crate::pdu::Fes::DATA_OUT_OF_RANGE,
                            fei: 0,
                        },
                        Vec::new(),
                    );
                    fail_all(&sh, || {
                        Error::Protocol("C2HData out of range or for an unknown command".into())
                    });
                    return;
                }
                if d.success {
                    // SUCCESS: no CapsuleResp follows; synthesize a successful completion.
                    complete(
                        &sh,
                        Cqe {
                            dw0: 0,
                            dw1: 0,
                            sqhd: 0,
                            sqid: 0,
                            cid: d.cccid,
                            status: Status::SUCCESS,
                        },
                    );
                }
            }
            Ok(Pdu::R2t(r)) => {
                let data = {
                    let c = lock(&sh.cids);
                    c.get(r.cccid).and_then(|e| e.write.clone())
                };
                let (o, n) = (r.r2to as usize, r.r2tl as usize);
                let Some(data) =
                    data.filter(|d| o.checked_add(n).is_some_and(|end| end <= d.len()))
                else {
                    terminate(
                        &tx,
                        false,
                        crate::pdu::Fatal {
                            fes: crate::pdu::Fes::DATA_OUT_OF_RANGE,
                            fei: 0,
                        },
                        Vec::new(),
                    );
                    fail_all(&sh, || {
                        Error::Protocol("R2T out of range or for an unknown command".into())
                    });
                    return;
                };
                // H2CData PDUs of at most MAXH2CDATA bytes, LAST on the final one.
                let mut off = o;
                while off < o + n {
                    let len = maxh2cdata.min(o + n - off);
                    let d = DataPdu {
                        cccid: r.cccid,
                        ttag: r.ttag,
                        datao: off as u32,
                        last: off + len == o + n,
                        success: false,
                        data: data.slice(off..off + len),
                    };
                    let _ = tx.send_pdus(&[&Pdu::H2cData(d)], dg);
                    off += len;
                }
            }
            Ok(Pdu::C2hTermReq(t)) => {
                fail_all(&sh, || Error::Terminated {
                    fes: t.fes,
                    fei: t.fei,
                });
                let _ = tx.send(Out::Close);
                return;
            }
            Ok(_) => {}
            Err(RecvError::DataDigest { cccid, .. }) => {
                if let Some(e) = lock(&sh.cids).get_mut(cccid) {
                    e.digest_error = true;
                }
            }
            Err(RecvError::Fatal { fatal, header }) => {
                terminate(&tx, false, fatal, header);
                fail_all(&sh, || {
                    Error::Protocol(format!("bad PDU from controller: {fatal:?}"))
                });
                return;
            }
            Err(_) => {
                fail_all(&sh, || Error::Closed);
                let _ = tx.send(Out::Close);
                return;
            }
        }
    }
}

fn complete(sh: &Shared, mut cqe: Cqe) {
    let mut c = lock(&sh.cids);
    let Some(e) = c.remove(cqe.cid) else { return };
    if let Some(t) = &sh.traffic {
        t.completed(e.ka_check);
    }
    if e.abandoned {
        c.free.push(cqe.cid);
        sh.slots.add_permits(1);
        return;
    }
    drop(c);
    if e.digest_error && cqe.status.is_success() {
        cqe.status = Status::TRANSIENT_TRANSPORT;
    }
    let mut data = e.read;
    data.resize(e.read_len, 0);
    let _ = e.done.send(Ok(Completion { cqe, data }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending() -> (Pending, oneshot::Receiver<Result<Completion, Error>>) {
        let (done, rx) = oneshot::channel();
        let p = Pending {
            done,
            read: Vec::new(),
            read_len: 0,
            write: None,
            abandoned: false,
            digest_error: false,
            ka_check: 0,
        };
        (p, rx)
    }

    /// A CID the controller names finds its command only while that command is outstanding;
    /// one out of range (the controller's to choose, up to 65 535) or free finds nothing.
    #[test]
    fn cids_find_only_outstanding_commands() {
        let mut c = Cids::new(4);
        assert_eq!(c.free, vec![3, 2, 1, 0], "lowest CID first");
        let cid = c.free.pop().unwrap();
        let (p, _rx) = pending();
        c.pending[cid as usize] = Some(p);
        assert!(c.get(cid).is_some());
        assert!(c.get(1).is_none(), "free");
        assert!(
            c.get(4).is_none() && c.get_mut(u16::MAX).is_none(),
            "out of range"
        );
        assert!(c.remove(u16::MAX).is_none());
        assert!(c.remove(cid).is_some());
        assert!(c.remove(cid).is_none(), "removed twice");
    }

    /// A completion for an abandoned command gives its CID and its slot back; one for a
    /// command still waited on reaches the waiter, and the CID is the waiter's to free.
    #[test]
    fn completions_reach_the_waiter_or_recycle_the_cid() {
        let sh = Shared {
            cids: Mutex::new(Cids::new(2)),
            slots: Semaphore::new(0),
            closed: AtomicBool::new(false),
            traffic: None,
        };
        let cqe = |cid| Cqe {
            dw0: 0,
            dw1: 0,
            sqhd: 0,
            sqid: 1,
            cid,
            status: Status::SUCCESS,
        };
        let (mut p, _rx) = pending();
        p.abandoned = true;
        let a = lock(&sh.cids).free.pop().unwrap();
        lock(&sh.cids).pending[a as usize] = Some(p);
        complete(&sh, cqe(a));
        assert_eq!(sh.slots.available_permits(), 1);
        assert!(lock(&sh.cids).free.contains(&a));

        let (p, mut rx) = pending();
        let b = lock(&sh.cids).free.pop().unwrap();
        lock(&sh.cids).pending[b as usize] = Some(p);
        complete(&sh, cqe(b));
        assert!(rx.try_recv().unwrap().unwrap().cqe.status.is_success());
        assert!(lock(&sh.cids).get(b).is_none());
        assert!(
            !lock(&sh.cids).free.contains(&b),
            "the waiter's Slot frees it"
        );
        complete(&sh, cqe(b));
        assert_eq!(
            sh.slots.available_permits(),
            1,
            "a stray completion changes nothing"
        );
    }

    /// Without TBKAS every check sends the Keep Alive whatever completed. With it, a check
    /// after a completion skips it, the next with none sends it, and a completion of a
    /// command sent before the last check does not count.
    #[test]
    fn keep_alive_is_skipped_only_for_tbkas_and_fresh_completions() {
        let t = KeepAliveTraffic::default();
        let sent = t.checks.load(Ordering::Relaxed);
        t.completed(sent);
        assert!(t.keep_alive_due(false), "no TBKAS: always sent");
        let sent = t.checks.load(Ordering::Relaxed);
        t.completed(sent);
        assert!(!t.keep_alive_due(true), "TBKAS and a completion: skipped");
        assert!(t.keep_alive_due(true), "TBKAS and no completion: sent");
        let old = t.checks.load(Ordering::Relaxed);
        assert!(t.keep_alive_due(true));
        t.completed(old);
        assert!(t.keep_alive_due(true), "sent before the last check: sent");
        // A completion that read the period just before a check ended it, and noted itself
        // just after: it must not skip the next check's Keep Alive.
        let sent = t.checks.load(Ordering::Relaxed);
        assert!(t.keep_alive_due(true));
        t.seen.store(sent.wrapping_add(1), Ordering::Relaxed);
        assert!(t.keep_alive_due(true), "noted after its period ended: sent");
    }
}
