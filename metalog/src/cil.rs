//! The committed item list (CIL): the open checkpoint that commits append to, and the
//! per-object sequence numbers of design §3. Commit never waits for I/O; it waits only for log
//! space when the log is full (issue 2 "Deliver" 3, 6).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use crate::format::{rec_len, BLOCK, HEADER_SIZE};
use crate::items::encode_item;
use crate::log::Inner;
use crate::{Csn, LogError, Transaction};

/// Sequence numbers of one object; 0 = none.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ObjSeq {
    pub commit: u64,
    pub datasync: u64,
}

/// The open checkpoint.
pub(crate) struct Cil {
    /// CSN that the next commit joins.
    pub csn: u64,
    /// Encoded items of this checkpoint.
    pub buf: Vec<u8>,
    /// Transactions in `buf`.
    pub ntx: u64,
    /// Some item converts extents (external-log flush rule).
    pub converts: bool,
    /// Objects with a commit not yet durable.
    pub objects: HashMap<u64, ObjSeq>,
    /// Intents without their done item: id → CSN. The tail may not pass them, so recovery
    /// always sees an unfinished intent (as XFS intents pin the log tail).
    pub open_intents: std::collections::BTreeMap<u64, u64>,
}

impl Cil {
    pub fn new(csn: u64) -> Cil {
        Cil {
            csn,
            buf: Vec::new(),
            ntx: 0,
            converts: false,
            objects: HashMap::new(),
            open_intents: std::collections::BTreeMap::new(),
        }
    }

    /// Bytes of log this checkpoint will take.
    pub fn space(&self, max_payload: usize) -> u64 {
        if self.ntx == 0 {
            0
        } else {
            ckpt_bytes(self.buf.len(), max_payload)
        }
    }
}

/// Log bytes of a checkpoint with `payload` bytes split into records of ≤ `max_payload`.
pub(crate) fn ckpt_bytes(payload: usize, max_payload: usize) -> u64 {
    let full = payload / max_payload;
    let rest = payload % max_payload;
    let mut b = full as u64 * rec_len(max_payload);
    if rest > 0 || full == 0 {
        b += rec_len(rest);
    }
    b
}

/// An upper bound of the log space a transaction with `encoded` bytes adds to any checkpoint.
pub(crate) fn tx_bound(encoded: usize, max_payload: usize) -> u64 {
    encoded as u64 + (encoded / max_payload + 2) as u64 * (BLOCK + HEADER_SIZE as u64)
}

impl Inner {
    /// Append `tx` to the CIL. `ticket` bytes were reserved by the caller beforehand
    /// ([`crate::Log::reserve`]); with `ticket == 0` this waits for space if the log is full.
    pub(crate) fn commit(&self, tx: Transaction, ticket: u64) -> Result<Csn, LogError> {
        let mut enc = Vec::new();
        for it in &tx.items {
            encode_item(it, &mut enc);
        }
        let converts = tx.items.iter().any(|i| i.converts());
        let mut ticket = ticket;
        loop {
            let mut cil = self.lock_cil();
            let before = cil.space(self.max_payload);
            let delta = ckpt_bytes(cil.buf.len() + enc.len(), self.max_payload) - before;
            let admitted = {
                let mut io = self.lock_io();
                if let Some(e) = &io.shutdown {
                    return Err(e.clone());
                }
                io.reserved = io.reserved.saturating_sub(ticket);
                // With a ticket, overdraw into the slack rather than block: the caller holds
                // its own locks now (that is why it reserved first).
                let limit = if ticket > 0 {
                    self.area_len - BLOCK
                } else {
                    self.usable()
                };
                if io.used() + io.reserved + delta <= limit {
                    io.reserved += delta;
                    true
                } else {
                    if ticket > 0 {
                        io.reserved += ticket;
                        return Err(LogError::NoSpace);
                    }
                    false
                }
            };
            if admitted {
                cil.buf.extend_from_slice(&enc);
                cil.ntx += 1;
                cil.converts |= converts;
                let csn = cil.csn;
                for it in &tx.items {
                    match it {
                        crate::Item::Intent { id, .. } => {
                            cil.open_intents.insert(*id, csn);
                        }
                        crate::Item::Done { id } => {
                            cil.open_intents.remove(id);
                        }
                        _ => {}
                    }
                }
                for o in &tx.objects {
                    let e = cil.objects.entry(o.id).or_default();
                    e.commit = csn;
                    if !o.timestamps_only {
                        e.datasync = csn;
                    }
                }
                let big = cil.buf.len() as u64 > self.cil_push_bytes;
                drop(cil);
                self.ctr.commits.fetch_add(1, Ordering::Relaxed);
                if big {
                    self.kick_worker(|w| w.push = true);
                }
                return Ok(Csn(csn));
            }
            drop(cil);
            ticket = 0;
            self.wait_space(delta)?;
        }
    }

    /// The CSN of the last commit.
    pub(crate) fn last_committed(&self) -> u64 {
        let cil = self.lock_cil();
        if cil.ntx > 0 {
            cil.csn
        } else {
            cil.csn - 1
        }
    }

    /// (commit_seq, datasync_seq), each `None` once durable.
    pub(crate) fn object_seqs(&self, id: u64) -> (Option<Csn>, Option<Csn>) {
        let durable = self.durable_csn.load(Ordering::Acquire);
        let cil = self.lock_cil();
        let Some(s) = cil.objects.get(&id) else {
            return (None, None);
        };
        let f = |v: u64| (v > durable).then_some(Csn(v));
        (f(s.commit), f(s.datasync))
    }

    /// Drop sequence numbers that are durable (design §3: "both clear once durable").
    pub(crate) fn clear_durable_objects(&self) {
        let durable = self.durable_csn.load(Ordering::Acquire);
        let mut cil = self.lock_cil();
        cil.objects.retain(|_, s| s.commit > durable);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_space_matches_record_split() {
        let mp = 8192 - HEADER_SIZE;
        assert_eq!(ckpt_bytes(0, mp), 4096);
        assert_eq!(ckpt_bytes(1, mp), 4096);
        assert_eq!(ckpt_bytes(mp, mp), 8192);
        assert_eq!(ckpt_bytes(mp + 1, mp), 8192 + 4096);
        for p in 0..40000usize {
            for add in [1usize, 100, 5000, 20000] {
                let d = ckpt_bytes(p + add, mp) - ckpt_bytes(p, mp);
                assert!(d <= tx_bound(add, mp), "{p} {add}");
            }
        }
    }
}
