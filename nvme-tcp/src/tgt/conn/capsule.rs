//! What the host sends on a queue: command capsules, Connect, and the H2CData of the
//! transfers solicited by R2T (with the per-queue bound on solicited bytes).

use super::reply::Tag;
use super::{Flow, Queue, Transfer};
use crate::controller::{self, Cmd, Reply, MAX_TRANSFER};
use crate::pdu::{sgl_id, DataDir, DataPdu, Digests, Fatal, FcType, Fes, Pdu, PduType, R2t, Sqe};
use crate::stats::Op;
use crate::status::Status;
use crate::tgt::ring::Ring;
use crate::transport::{frame, terminate};
use bytes::Bytes;
use std::sync::atomic::Ordering;

impl Queue {
    fn advance_sqhd(&self) {
        let n = self.sqsize as u32 + 1;
        let h = self.sqhd.load(Ordering::Relaxed) as u32;
        self.sqhd.store(((h + 1) % n) as u16, Ordering::Relaxed);
    }

    pub(super) fn on_capsule(&mut self, sqe: Sqe, data: Bytes) -> Flow {
        self.advance_sqhd();
        let cid = Tag::of(self.qid, &sqe);
        // SQ flow control, on every queue (admin too: its pending AERs count): a host may
        // have at most SQSIZE+1 commands outstanding. One that ignores it would make us
        // buffer without bound, so it is a fatal protocol error.
        let n = self.inflight.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.sqsize as usize + 1 {
            if self.subsys.refused_log.allow().is_some() {
                tracing::warn!(qid = self.qid, peer = %self.peer, "host overran its submission queue");
            }
            let mut h = Vec::new();
            Pdu::CapsuleCmd(sqe, Bytes::new()).encode(Digests::default(), &mut h);
            h.truncate(crate::pdu::CAPSULE_CMD_HLEN);
            terminate(
                &self.tx,
                true,
                Fatal {
                    fes: Fes::PDU_SEQUENCE,
                    fei: 0,
                },
                h,
            );
            return Flow::Close;
        }
        if self.ctrl.is_none() {
            if sqe.is_fabrics() && sqe.fctype() == FcType::CONNECT {
                return self.on_connect(sqe, data);
            }
            self.respond(cid, 0, Reply::err(Status::CMD_SEQ_ERROR));
            return Flow::Continue;
        }
        // Fused operations are not supported (FUSE, flags bits 1:0).
        if sqe.flags() & 3 != 0 {
            self.respond(cid, 0, Reply::err(Status::INVALID_FIELD));
            return Flow::Continue;
        }
        let dir = sqe.data_dir();
        let sgl = sqe.sgl();
        // Fabrics transfers are described by SGLs only (PSDT 01b or 10b), never PRPs.
        if dir != DataDir::None && sqe.flags() >> 6 == 0 {
            self.respond(cid, 0, Reply::err(Status::INVALID_FIELD));
            return Flow::Continue;
        }
        match dir {
            DataDir::HostToCtrl => match sgl.id {
                sgl_id::DATA_OFFSET => {
                    let end = sgl.addr.checked_add(sgl.len as u64);
                    match end {
                        Some(e) if e <= data.len() as u64 => {
                            let d = data.slice(sgl.addr as usize..e as usize);
                            self.exec(Cmd {
                                sqe,
                                data: d,
                                xfer_len: 0,
                            })
                        }
                        _ => {
                            self.respond(cid, 0, Reply::err(Status::SGL_DATA_LEN_INVALID));
                            Flow::Continue
                        }
                    }
                }
                sgl_id::TRANSPORT if sgl.len == 0 => self.exec(Cmd {
                    sqe,
                    data: Bytes::new(),
                    xfer_len: 0,
                }),
                sgl_id::TRANSPORT => {
                    if sgl.len > MAX_TRANSFER {
                        self.respond(cid, 0, Reply::err(Status::SGL_DATA_LEN_INVALID));
                        return Flow::Continue;
                    }
                    self.solicit(sqe, sgl.len as usize);
                    Flow::Continue
                }
                _ => {
                    self.respond(cid, 0, Reply::err(Status::SGL_TYPE_INVALID));
                    Flow::Continue
                }
            },
            DataDir::CtrlToHost => {
                if sgl.id != sgl_id::TRANSPORT && sgl.len != 0 {
                    self.respond(cid, 0, Reply::err(Status::SGL_TYPE_INVALID));
                    return Flow::Continue;
                }
                if sgl.len > MAX_TRANSFER {
                    self.respond(cid, 0, Reply::err(Status::SGL_DATA_LEN_INVALID));
                    return Flow::Continue;
                }
                self.exec(Cmd {
                    sqe,
                    data: Bytes::new(),
                    xfer_len: sgl.len,
                })
            }
            DataDir::None => self.exec(Cmd {
                sqe,
                data: Bytes::new(),
                xfer_len: 0,
            }),
            DataDir::Both => {
                self.respond(cid, 0, Reply::err(Status::INVALID_OPCODE));
                Flow::Continue
            }
        }
    }

    /// Solicits a command's data: at once if the queue's solicited bytes stay within
    /// `max_h2c_buffered_per_queue`, else once earlier transfers complete (NVMe/TCP lets the
    /// controller choose when to send an R2T). `len` ≤ MAX_TRANSFER ≤ the bound, so a
    /// command alone always goes.
    fn solicit(&mut self, sqe: Sqe, len: usize) {
        let budget = self.subsys.limits.max_h2c_buffered_per_queue;
        if !self.r2t_waiting.is_empty() || self.h2c_solicited + len > budget {
            self.r2t_waiting.push_back((sqe, len));
            return;
        }
        self.send_r2t(sqe, len);
    }

    /// A transfer ended: its bytes leave the queue's bound, and the waiting R2Ts that now
    /// fit go out.
    fn transfer_done(&mut self, len: usize) {
        self.h2c_solicited -= len;
        let budget = self.subsys.limits.max_h2c_buffered_per_queue;
        while let Some(&(sqe, len)) = self.r2t_waiting.front() {
            if self.h2c_solicited + len > budget {
                break;
            }
            self.r2t_waiting.pop_front();
            self.send_r2t(sqe, len);
        }
    }

    /// Sends one R2T for the whole transfer; the host splits it into MAXH2CDATA-sized
    /// H2CData PDUs (ICReq MAXR2T is 0's based: one outstanding R2T per command is always
    /// allowed).
    fn send_r2t(&mut self, sqe: Sqe, len: usize) {
        self.h2c_solicited += len;
        let mut ttag = self.next_ttag;
        while self.transfers.contains_key(&ttag) {
            ttag = ttag.wrapping_add(1);
        }
        self.next_ttag = ttag.wrapping_add(1);
        self.transfers.insert(
            ttag,
            Transfer {
                sqe,
                buf: Vec::new(),
                whole: None,
                len,
                failed: false,
            },
        );
        let r2t = R2t {
            cccid: sqe.cid(),
            ttag,
            r2to: 0,
            r2tl: len as u32,
        };
        let _ = self.tx.send(frame(&Pdu::R2t(r2t), self.dg));
    }

    pub(super) fn on_h2c(&mut self, d: DataPdu) -> Flow {
        let hdr = || {
            let mut v = Vec::new();
            Pdu::H2cData(DataPdu {
                data: Bytes::from_static(&[0]),
                ..d.clone()
            })
            .encode(Digests::default(), &mut v);
            v.truncate(crate::pdu::DATA_HLEN);
            v
        };
        let Some(t) = self.transfers.get_mut(&d.ttag) else {
            terminate(&self.tx, true, Fatal::field(10), hdr());
            return Flow::Close;
        };
        if t.sqe.cid() != d.cccid {
            terminate(&self.tx, true, Fatal::field(8), hdr());
            return Flow::Close;
        }
        let got = t.whole.as_ref().map_or(t.buf.len(), |w| w.len());
        if d.datao as usize != got || got + d.data.len() > t.len {
            terminate(
                &self.tx,
                true,
                Fatal {
                    fes: Fes::DATA_OUT_OF_RANGE,
                    fei: 0,
                },
                hdr(),
            );
            return Flow::Close;
        }
        // One H2CData with the whole transfer (the usual case up to MAXH2CDATA): its bytes
        // are used as they are, a slice of the receive buffer; else they are gathered.
        let whole = t.buf.is_empty() && t.whole.is_none() && d.data.len() == t.len;
        if whole {
            t.whole = Some(d.data.clone());
        } else {
            t.buf.reserve(t.len - t.buf.len());
            if let Some(w) = t.whole.take() {
                t.buf.extend_from_slice(&w);
            }
            t.buf.extend_from_slice(&d.data);
        }
        let got = t.whole.as_ref().map_or(t.buf.len(), |w| w.len());
        let done = got == t.len;
        // LAST_PDU marks the final PDU of the transfer an R2T solicited: exactly the end.
        if done != d.last {
            terminate(&self.tx, true, Fatal::field(1), hdr());
            return Flow::Close;
        }
        if !done {
            return Flow::Continue;
        }
        let Some(t) = self.transfers.remove(&d.ttag) else {
            return Flow::Continue;
        };
        self.transfer_done(t.len);
        if t.failed {
            self.respond(
                Tag::of(self.qid, &t.sqe),
                0,
                Reply::err(Status::TRANSIENT_TRANSPORT),
            );
            return Flow::Continue;
        }
        let data = t.whole.unwrap_or_else(|| Bytes::from(t.buf));
        self.exec(Cmd {
            sqe: t.sqe,
            data,
            xfer_len: 0,
        })
    }

    /// A data digest failed: the command fails with a transient transport error, the
    /// connection stays (NVMe/TCP 1.0 §3.6.2.x).
    pub(super) fn on_data_digest(
        &mut self,
        ty: PduType,
        cccid: u16,
        ttag: u16,
        datal: u32,
    ) -> Flow {
        if ty == PduType::CAPSULE_CMD {
            self.advance_sqhd();
            self.inflight.fetch_add(1, Ordering::Relaxed);
            let tag = Tag {
                cid: cccid,
                op: Op::other(self.qid == 0),
                data_in: 0,
            };
            self.respond(tag, 0, Reply::err(Status::TRANSIENT_TRANSPORT));
            return Flow::Continue;
        }
        // H2CData: account for the bytes so later PDUs of the transfer stay in range.
        let zeros = vec![0u8; datal as usize];
        let d = DataPdu {
            cccid,
            ttag,
            datao: 0,
            last: false,
            success: false,
            data: Bytes::from(zeros),
        };
        match self.transfers.get_mut(&ttag) {
            Some(t) if t.sqe.cid() == cccid && t.buf.len() + d.data.len() <= t.len => {
                t.failed = true;
                let datao = t.buf.len() as u32;
                let last = t.buf.len() + d.data.len() == t.len;
                self.on_h2c(DataPdu { datao, last, ..d })
            }
            _ => {
                terminate(&self.tx, true, Fatal::field(10), Vec::new());
                Flow::Close
            }
        }
    }

    fn on_connect(&mut self, sqe: Sqe, data: Bytes) -> Flow {
        let cid = Tag::of(self.qid, &sqe);
        let sgl = sqe.sgl();
        // Connect data always travels in the capsule (NVMe/TCP 1.0 §3.3.x: there is no
        // queue to solicit it on yet).
        let payload = match (sgl.id, sgl.addr.checked_add(sgl.len as u64)) {
            (sgl_id::DATA_OFFSET, Some(e)) if e <= data.len() as u64 => {
                data.slice(sgl.addr as usize..e as usize)
            }
            _ => {
                self.respond(cid, 0, Reply::err(Status::SGL_DATA_LEN_INVALID));
                return Flow::Continue;
            }
        };
        match controller::connect(&self.subsys, &sqe, &payload, self.peer.ip()) {
            Ok(c) => {
                tracing::debug!(cntlid = c.ctrl.cntlid, qid = c.qid, host = %c.ctrl.hostnqn, "connect");
                let cntlid = c.ctrl.cntlid;
                self.qid = c.qid;
                self.sqsize = c.sqsize;
                if c.qid != 0 {
                    let policy = self.subsys.policy.as_ref();
                    if let Some(w) = policy.and_then(|p| p.write_counter(&c.ctrl.host())) {
                        self.stats.count_host_writes(w);
                    }
                }
                self.ctrl = Some(c.ctrl);
                self.sqhd.store(1 % (self.sqsize + 1), Ordering::Relaxed);
                if self.qid != 0 && self.ring.is_none() && !self.threaded {
                    self.ring = Ring::new();
                }
                // Success: CNTLID in dw0 bits 15:0, AUTHREQ (bits 31:16) = 0.
                self.respond(cid, 0, Reply::dw0(cntlid as u32));
            }
            Err(e) => {
                self.subsys
                    .counters
                    .connects_refused
                    .fetch_add(1, Ordering::Relaxed);
                // Any peer can send Connects at connection rate: one line per LOG_EVERY.
                if let Some(left_out) = self.subsys.refused_log.allow() {
                    tracing::info!(
                        peer = %self.peer,
                        status = %e.status,
                        why = e.why.as_str(),
                        ipo = e.ipo,
                        refused_since_last_line = left_out,
                        "nvme-tcp connect refused"
                    );
                }
                let mut r = Reply::err(e.status);
                r.dw0 = e.dw0();
                self.respond(cid, 0, r);
            }
        }
        Flow::Continue
    }
}
