//! The backchannel (RFC 8881 §2.10.3.1, §20): decodes CB_COMPOUNDs the server sends on the fore
//! connection, records what it asked in a queue the tests read, and answers NFS4_OK (the
//! layout tests then do the LAYOUTRETURN themselves). Pure codec plus the queue; the connection
//! task calls `answer`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pnfsd::nfs4::status::NfsStat;
use pnfsd::nfs4::types::{Bitmap, Stateid};
use pnfsd::xdr::{Xdr, XdrReader, XdrResult, XdrWriter};
use tokio::sync::Notify;

/// Callback operation numbers (RFC 8881 §20).
pub mod cbop {
    pub const CB_GETATTR: u32 = 3;
    pub const CB_RECALL: u32 = 4;
    pub const CB_LAYOUTRECALL: u32 = 5;
    pub const CB_RECALL_ANY: u32 = 8;
    pub const CB_SEQUENCE: u32 = 11;
    pub const CB_ILLEGAL: u32 = 10044;
}

/// What a `layoutrecall4` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecallWhat {
    File {
        fh: Vec<u8>,
        offset: u64,
        length: u64,
        stateid: Stateid,
    },
    Fsid(u64, u64),
    All,
}

/// One thing the server asked for on the backchannel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CbEvent {
    Null,
    Sequence {
        sessionid: [u8; 16],
        sequenceid: u32,
        slotid: u32,
        highest_slotid: u32,
    },
    LayoutRecall {
        layout_type: u32,
        iomode: u32,
        changed: bool,
        what: RecallWhat,
    },
    Recall {
        stateid: Stateid,
        truncate: bool,
        fh: Vec<u8>,
    },
    RecallAny {
        keep: u32,
        mask: Bitmap,
    },
    /// An operation the client does not decode; it was answered NFS4ERR_NOTSUPP.
    Unsupported(u32),
}

/// The queue of callbacks received, shared by the connection task and the test.
#[derive(Debug, Default, Clone)]
pub struct CbQueue {
    inner: Arc<(Mutex<VecDeque<CbEvent>>, Notify)>,
}

impl CbQueue {
    pub fn push(&self, e: CbEvent) {
        if let Ok(mut q) = self.inner.0.lock() {
            q.push_back(e);
        }
        self.inner.1.notify_waiters();
        self.inner.1.notify_one();
    }

    /// Takes everything received so far.
    pub fn drain(&self) -> Vec<CbEvent> {
        self.inner
            .0
            .lock()
            .map(|mut q| q.drain(..).collect())
            .unwrap_or_default()
    }

    /// Waits until an event matching `f` arrives (earlier non-matching events stay queued),
    /// or `timeout` passes.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        f: impl Fn(&CbEvent) -> bool,
    ) -> Option<CbEvent> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.inner.1.notified();
            if let Ok(mut q) = self.inner.0.lock() {
                if let Some(i) = q.iter().position(&f) {
                    return q.remove(i);
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }
}

fn layoutrecall(r: &mut XdrReader<'_>) -> XdrResult<CbEvent> {
    let layout_type = r.u32()?;
    let iomode = r.u32()?;
    let changed = r.bool()?;
    let what = match r.u32()? {
        1 => RecallWhat::File {
            fh: r.opaque_vec(128)?,
            offset: r.u64()?,
            length: r.u64()?,
            stateid: Stateid::decode(r)?,
        },
        2 => RecallWhat::Fsid(r.u64()?, r.u64()?),
        3 => RecallWhat::All,
        _ => return Err(pnfsd::xdr::XdrError::BadValue),
    };
    Ok(CbEvent::LayoutRecall {
        layout_type,
        iomode,
        changed,
        what,
    })
}

/// Decodes a CB_COMPOUND4args, records its operations in `q` and returns the encoded
/// CB_COMPOUND4res. `None` if the arguments do not decode (the caller answers GARBAGE_ARGS).
pub fn answer(args: &[u8], q: &CbQueue) -> Option<Vec<u8>> {
    let mut r = XdrReader::new(args);
    let tag = r.string(1024).ok()?;
    let _minor = r.u32().ok()?;
    let _ident = r.u32().ok()?;
    let n = r.array_len(64, 4).ok()?;
    let mut res = XdrWriter::new();
    let mut count = 0u32;
    let mut status = NfsStat::OK;
    for _ in 0..n {
        let op = r.u32().ok()?;
        count += 1;
        res.u32(op);
        match op {
            cbop::CB_SEQUENCE => {
                let sessionid: [u8; 16] = r.array().ok()?;
                let sequenceid = r.u32().ok()?;
                let slotid = r.u32().ok()?;
                let highest_slotid = r.u32().ok()?;
                let _cachethis = r.bool().ok()?;
                let lists = r.array_len(64, 20).ok()?;
                for _ in 0..lists {
                    r.opaque_fixed(16).ok()?;
                    let calls = r.array_len(1024, 8).ok()?;
                    for _ in 0..calls {
                        r.u32().ok()?;
                        r.u32().ok()?;
                    }
                }
                q.push(CbEvent::Sequence {
                    sessionid,
                    sequenceid,
                    slotid,
                    highest_slotid,
                });
                res.u32(NfsStat::OK.0);
                res.opaque_fixed(&sessionid);
                res.u32(sequenceid);
                res.u32(slotid);
                res.u32(highest_slotid);
                res.u32(highest_slotid);
            }
            cbop::CB_LAYOUTRECALL => {
                q.push(layoutrecall(&mut r).ok()?);
                res.u32(NfsStat::OK.0);
            }
            cbop::CB_RECALL => {
                let stateid = Stateid::decode(&mut r).ok()?;
                let truncate = r.bool().ok()?;
                let fh = r.opaque_vec(128).ok()?;
                q.push(CbEvent::Recall {
                    stateid,
                    truncate,
                    fh,
                });
                res.u32(NfsStat::OK.0);
            }
            cbop::CB_RECALL_ANY => {
                let keep = r.u32().ok()?;
                let mask = Bitmap::decode(&mut r).ok()?;
                q.push(CbEvent::RecallAny { keep, mask });
                res.u32(NfsStat::OK.0);
            }
            other => {
                // Its arguments cannot be skipped: stop here (RFC 8881 §20: the results end
                // with the first failure).
                q.push(CbEvent::Unsupported(other));
                status = if other == cbop::CB_ILLEGAL {
                    NfsStat::OP_ILLEGAL
                } else {
                    NfsStat::NOTSUPP
                };
                res.u32(status.0);
                break;
            }
        }
    }
    let mut w = XdrWriter::new();
    w.u32(status.0);
    w.string(&tag);
    w.u32(count);
    w.buf.extend_from_slice(&res.buf);
    Some(w.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_and_layoutrecall_are_recorded_and_answered() {
        let mut w = XdrWriter::new();
        w.string(b"cb");
        w.u32(1);
        w.u32(0);
        w.u32(2);
        w.u32(cbop::CB_SEQUENCE);
        w.opaque_fixed(&[5; 16]);
        w.u32(1); // seqid
        w.u32(0); // slot
        w.u32(0); // highest
        w.bool(false);
        w.u32(0); // referring lists
        w.u32(cbop::CB_LAYOUTRECALL);
        w.u32(3); // block
        w.u32(2); // RW
        w.bool(true);
        w.u32(1); // FILE
        w.opaque(&[9; 16]);
        w.u64(0);
        w.u64(u64::MAX);
        Stateid {
            seqid: 2,
            other: [1; 12],
        }
        .encode(&mut w);
        let q = CbQueue::default();
        let reply = answer(&w.buf, &q).unwrap();
        let mut r = XdrReader::new(&reply);
        assert_eq!(r.u32().unwrap(), 0);
        assert_eq!(r.string(10).unwrap(), b"cb");
        assert_eq!(r.u32().unwrap(), 2);
        assert_eq!(r.u32().unwrap(), cbop::CB_SEQUENCE);
        assert_eq!(r.u32().unwrap(), 0);
        assert_eq!(r.opaque_fixed(16).unwrap(), &[5; 16]);
        let ev = q.drain();
        assert_eq!(ev.len(), 2);
        match &ev[1] {
            CbEvent::LayoutRecall {
                layout_type: 3,
                iomode: 2,
                changed: true,
                what: RecallWhat::File { length, .. },
            } => {
                assert_eq!(*length, u64::MAX)
            }
            e => panic!("{e:?}"),
        }
        assert!(answer(&w.buf[..w.buf.len() - 4], &q).is_none());
    }
}
