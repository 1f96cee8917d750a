//! The committed item list (CIL): the open checkpoint that commits append to, and the
//! per-object sequence numbers of docs/design.md §3. Commit never waits for I/O; it waits only for
//! log space when the log is full.

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

/// An intent without its done item.
pub(crate) struct OpenIntent {
    /// CSN of a durable (or the only) copy: the tail may not pass it.
    pub pin: u64,
    /// CSN of the newest copy.
    pub latest: u64,
    /// CSN of its done item, once committed. Until the tail may pass that CSN the intent
    /// stays pinned: write-back covers only up to its own CSN, which may predate the done.
    pub done: Option<u64>,
    pub item: crate::Item,
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
    /// Intents without their done item. The tail may not pass the pinned copy, so recovery
    /// always sees an unfinished intent; to keep the tail moving, `move_tail` relogs old ones
    /// into the open checkpoint (XFS relogs long-lived intents for the same reason,
    /// `xfs_defer_relog`), and the pin moves once the new copy is durable.
    pub open_intents: std::collections::BTreeMap<u64, OpenIntent>,
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
    /// ([`crate::Log::reserve`]); without a ticket this waits for space if the log is full.
    pub(crate) fn commit(&self, tx: Transaction, ticket: Option<u64>) -> Result<Csn, LogError> {
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
                let t = ticket.unwrap_or(0);
                io.reserved = io.reserved.saturating_sub(t);
                // With a ticket, overdraw into the slack rather than block: the caller holds
                // its own locks now (that is why it reserved first).
                let limit = if ticket.is_some() {
                    self.overdraw_limit()
                } else {
                    self.usable()
                };
                if io.used() + io.reserved + delta <= limit {
                    io.reserved += delta;
                    true
                } else {
                    if ticket.is_some() {
                        io.reserved += t;
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
                            let e = cil.open_intents.entry(*id).or_insert(OpenIntent {
                                pin: csn,
                                latest: csn,
                                done: None,
                                item: it.clone(),
                            });
                            e.latest = csn;
                            e.item = it.clone();
                        }
                        crate::Item::Done { id } => {
                            if let Some(oi) = cil.open_intents.get_mut(id) {
                                oi.done = Some(csn);
                            }
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
                self.cil_bytes
                    .store(cil.buf.len() as u64, Ordering::Relaxed);
                let big = cil.buf.len() as u64 > self.cil_push_bytes;
                drop(cil);
                self.ctr.commits.fetch_add(1, Ordering::Relaxed);
                if big {
                    self.kick_worker(|w| w.push = true);
                }
                return Ok(Csn(csn));
            }
            drop(cil);
            ticket = None;
            self.wait_space(delta)?;
        }
    }

    /// Relog the intents whose pinned copy is at or before `upto` into the open checkpoint,
    /// all under the CIL lock (a done item committed meanwhile must not be overtaken by a
    /// copy of its intent). Returns the oldest pin: the tail may not pass it.
    pub(crate) fn relog_intents(&self, upto: u64) -> Result<Option<u64>, LogError> {
        let durable = self.durable_csn.load(Ordering::Acquire);
        let mut cil = self.lock_cil();
        // Finished as of `upto`: the store's image has the result, the intent may go.
        cil.open_intents
            .retain(|_, oi| !matches!(oi.done, Some(d) if d <= upto));
        let mut enc = Vec::new();
        let mut ids = Vec::new();
        for (id, oi) in cil.open_intents.iter_mut() {
            if oi.latest <= durable {
                oi.pin = oi.latest;
            }
            // Never relog behind a done item: the copy would reopen the intent at replay.
            if oi.done.is_none() && oi.latest == oi.pin && oi.pin <= upto {
                encode_item(&oi.item, &mut enc);
                ids.push(*id);
            }
        }
        if !ids.is_empty() {
            let before = cil.space(self.max_payload);
            let delta = ckpt_bytes(cil.buf.len() + enc.len(), self.max_payload) - before;
            let mut io = self.lock_io();
            if let Some(e) = &io.shutdown {
                return Err(e.clone());
            }
            // Relogging frees space, so it may use the slack; without room the pin stays.
            if io.used() + io.reserved + delta <= self.overdraw_limit() {
                io.reserved += delta;
                drop(io);
                let csn = cil.csn;
                cil.buf.extend_from_slice(&enc);
                cil.ntx += 1;
                self.cil_bytes
                    .store(cil.buf.len() as u64, Ordering::Relaxed);
                for id in ids {
                    if let Some(oi) = cil.open_intents.get_mut(&id) {
                        oi.latest = csn;
                    }
                }
            }
        }
        Ok(cil.open_intents.values().map(|o| o.pin).min())
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

    /// Drop sequence numbers that are durable (docs/design.md §3: "both clear once durable").
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
