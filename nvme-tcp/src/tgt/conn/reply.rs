//! Answers: C2HData and CapsuleResp, sent at once or held for the round's one write.

use super::Queue;
use crate::controller::{Reply, Subsystem};
use crate::pdu::{Cqe, DataPdu, Digests, Pdu, Sqe};
use crate::stats::{Op, QueueStats};
use crate::transport::OutTx;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;

impl Queue {
    /// What a command run off the connection task needs to answer it.
    pub(super) fn reply_to(&self) -> ReplyTo {
        ReplyTo {
            tx: self.tx.clone(),
            dg: self.dg,
            qid: self.qid,
            sqhd: self.sqhd.clone(),
            inflight: self.inflight.clone(),
            stats: self.stats.clone(),
            subsys: self.subsys.clone(),
        }
    }

    /// Like `respond`, but always held for the loop's write (completions reaped in a batch).
    pub(super) fn respond_held(&self, cid: Tag, xfer_len: u32, r: Reply) {
        self.held.set(true);
        send_reply(
            true,
            &self.tx,
            self.dg,
            self.qid,
            &self.sqhd,
            &self.inflight,
            (&self.stats, &self.subsys),
            cid,
            xfer_len,
            r,
        );
    }

    pub(super) fn respond(&self, cid: Tag, xfer_len: u32, r: Reply) {
        self.held.set(self.held.get() | self.more);
        send_reply(
            self.more,
            &self.tx,
            self.dg,
            self.qid,
            &self.sqhd,
            &self.inflight,
            (&self.stats, &self.subsys),
            cid,
            xfer_len,
            r,
        );
    }
}

/// What an answer needs of its command: the CID, and for the counters its opcode and the
/// bytes of data it brought.
#[derive(Clone, Copy)]
pub(super) struct Tag {
    pub(super) cid: u16,
    pub(super) op: Op,
    pub(super) data_in: u32,
}

impl Tag {
    pub(super) fn of(qid: u16, sqe: &Sqe) -> Tag {
        let op = Op::of(qid == 0, sqe);
        Tag {
            cid: sqe.cid(),
            op,
            // A Write's data is its SGL's length, whether in the capsule or solicited.
            data_in: if op == Op::WRITE { sqe.sgl().len } else { 0 },
        }
    }
}

/// The queue's reply path, owned by a command that runs on a blocking thread.
pub(super) struct ReplyTo {
    pub(super) tx: OutTx,
    dg: Digests,
    pub(super) qid: u16,
    sqhd: Arc<AtomicU16>,
    inflight: Arc<AtomicUsize>,
    stats: Arc<QueueStats>,
    subsys: Arc<Subsystem>,
}

impl ReplyTo {
    pub(super) fn send(&self, hold: bool, tag: Tag, xfer_len: u32, r: Reply) {
        let (tx, dg, qid) = (&self.tx, self.dg, self.qid);
        send_reply(
            hold,
            tx,
            dg,
            qid,
            &self.sqhd,
            &self.inflight,
            (&self.stats, &self.subsys),
            tag,
            xfer_len,
            r,
        );
    }
}

/// C2HData (if the command produced data) then the CapsuleResp. The SUCCESS flag is never
/// used, so every command gets a response capsule with SQHD (SQ flow control stays on).
/// `hold`: append only (the connection task flushes after its batch).
#[allow(clippy::too_many_arguments)]
fn send_reply(
    hold: bool,
    tx: &OutTx,
    dg: Digests,
    qid: u16,
    sqhd: &AtomicU16,
    inflight: &AtomicUsize,
    (stats, subsys): (&QueueStats, &Subsystem),
    tag: Tag,
    xfer_len: u32,
    r: Reply,
) {
    inflight.fetch_sub(1, Ordering::Relaxed);
    let cid = tag.cid;
    let data_out = if r.status.is_success() && xfer_len > 0 {
        r.data.len().min(xfer_len as usize)
    } else {
        0
    };
    stats.answered(&subsys.stats, tag.op, r.status, data_out, tag.data_in);
    let cqe = Pdu::CapsuleResp(Cqe {
        dw0: r.dw0,
        dw1: r.dw1,
        sqhd: sqhd.load(Ordering::Relaxed),
        sqid: qid,
        cid,
        status: r.status,
    });
    if r.status.is_success() && !r.data.is_empty() && xfer_len > 0 {
        let mut data = r.data;
        data.truncate(xfer_len as usize);
        let d = Pdu::C2hData(DataPdu::c2h_whole(cid, data));
        send_or_hold(tx, hold, &[&d, &cqe], dg);
    } else {
        send_or_hold(tx, hold, &[&cqe], dg);
    }
}

fn send_or_hold(tx: &OutTx, hold: bool, pdus: &[&Pdu], dg: Digests) {
    let _ = if hold {
        tx.hold_pdus(pdus, dg)
    } else {
        tx.send_pdus(pdus, dg)
    };
}
