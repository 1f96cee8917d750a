//! Recovery (docs/design.md §3): find head and tail, verify CRCs, replay complete
//! checkpoints in CSN order, stop at a torn record, and leave the log so that recovering again
//! replays the same thing.
//!
//! Clean mount: the superblock names the clean-unmount record; one read finds head and tail.
//! Otherwise the whole area is scanned for valid records, through a window of [`SCAN_WINDOW`]
//! bytes (records straddling its edge are read on their own), keeping headers only: the
//! chain is read again record by record as it replays, so memory does not follow the log
//! size. `R` = the valid record with the highest (epoch, LSN); its tail cannot point into
//! overwritten space (a record is only written over space that the tail of a *durable* record
//! released). A chain never steps back to a lower epoch. Walking record by record from that
//! tail gives the head `H`: the first missing, torn or stale record. Replay then starts at the
//! tail carried by the last record before `H` — a function of the durable chain only, so a
//! second recovery picks the same start — and the free area `[H, tail + size)` is zeroed, so
//! records written after a hole can never be mistaken for a continuation later. Before that,
//! a tail record at `H` in a new epoch (carrying that tail) is made durable: it marks head and
//! tail for the next recovery even if the zeroing is cut short.

use std::collections::BTreeMap;

use crate::format::{build_record, check_record, RecordHeader, BLOCK, F_END, F_START, F_TAIL};
use crate::geometry::Geometry;
use crate::items::{decode_all, Item};
use crate::{Csn, LogError, Lsn};

/// What recovery found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Recovered {
    pub head: u64,
    pub tail: u64,
    pub next_csn: u64,
    /// Checkpoints replayed.
    pub replayed: u64,
    /// Whether the whole area was scanned (false: clean mount).
    pub scanned: bool,
    /// Epoch for the records of this mount.
    pub epoch: u32,
}

/// A validated record.
struct Rec {
    h: RecordHeader,
    payload: Vec<u8>,
}

pub(crate) type ReplayFn<'a> = dyn FnMut(Csn, &Item) -> Result<(), String> + 'a;

/// The crash-mount scan reads the area through a buffer of this size, never whole: a 64 GiB
/// volume has a 256 MiB log and mount must stay within the store's memory bound.
/// A record straddling the window's end (or the area's) is read on its own, at most
/// `max_rec` bytes more.
pub(crate) const SCAN_WINDOW: u64 = 4 << 20;

/// Read and validate the record at `lsn` from the device (None if absent or torn).
fn read_record(g: &Geometry, lsn: u64) -> Result<Option<Rec>, LogError> {
    let mut hdr = vec![0u8; BLOCK as usize];
    g.read_area(lsn, &mut hdr)?;
    let Some(h) = RecordHeader::parse(&hdr) else {
        return Ok(None);
    };
    let len = h.rec_len as u64;
    if len < BLOCK || len > g.max_rec() || !len.is_multiple_of(BLOCK) {
        return Ok(None);
    }
    let mut rec = vec![0u8; len as usize];
    rec[..BLOCK as usize].copy_from_slice(&hdr);
    if len > BLOCK {
        g.read_area(lsn + BLOCK, &mut rec[BLOCK as usize..])?;
    }
    Ok(check_record(&rec, &g.uuid, Lsn(lsn))
        .ok()
        .map(|(h, p)| Rec {
            h,
            payload: p.to_vec(),
        }))
}

/// Clean mount: `Some` if the superblock's hint names a valid clean-unmount record.
pub(crate) fn recover_clean(
    g: &Geometry,
    clean_lsn: u64,
    replay: &mut ReplayFn<'_>,
) -> Result<Option<Recovered>, LogError> {
    let Some(r) = read_record(g, clean_lsn)? else {
        return Ok(None);
    };
    if r.h.flags & crate::format::F_UNMOUNT == 0 {
        return Ok(None);
    }
    let tail = r.h.tail_lsn;
    // Replay what write-back had not yet written when the log was unmounted. Headers only:
    // the payloads are read again one record at a time as they replay.
    let mut chain = Vec::new();
    let mut lsn = tail;
    while lsn < clean_lsn {
        match read_record(g, lsn)? {
            Some(rec) if rec.h.epoch <= r.h.epoch => {
                lsn += rec.h.rec_len as u64;
                chain.push(rec.h);
            }
            _ => return Ok(None),
        }
    }
    if lsn != clean_lsn {
        return Ok(None);
    }
    let replayed = replay_chain(g, &chain, replay)?;
    Ok(Some(Recovered {
        head: clean_lsn + BLOCK,
        tail,
        next_csn: r.h.csn + 1,
        replayed,
        scanned: false,
        epoch: r.h.epoch.saturating_add(1),
    }))
}

/// Every valid record of the area by LSN, headers only, read through a `window`-byte buffer
/// (rounded to whole blocks). The result does not depend on `window`.
fn scan_valid(g: &Geometry, window: u64) -> Result<BTreeMap<u64, RecordHeader>, LogError> {
    let size = g.area_len;
    let window = (window / BLOCK).max(1).saturating_mul(BLOCK).min(size);
    let mut buf = vec![0u8; window as usize];
    let mut spill = Vec::new();
    let mut valid = BTreeMap::new();
    let mut note = std::time::Instant::now();
    let mut start = 0u64;
    while start < size {
        if note.elapsed() >= PROGRESS_EVERY {
            note = std::time::Instant::now();
            tracing::info!(
                "log recovery: scanned {} of {} KiB, {} valid records",
                start >> 10,
                size >> 10,
                valid.len()
            );
        }
        let n = window.min(size - start) as usize;
        g.dev.read_at(&mut buf[..n], g.area_off + start)?;
        for off in (0..n).step_by(BLOCK as usize) {
            let pos = start + off as u64;
            let Some(h) = RecordHeader::parse(&buf[off..n]) else {
                continue;
            };
            let len = h.rec_len as u64;
            if h.lsn % size != pos || len < BLOCK || len > g.max_rec() || !len.is_multiple_of(BLOCK)
            {
                continue;
            }
            let len = len as usize;
            let rec: &[u8] = if off + len <= n {
                &buf[off..off + len]
            } else {
                // Straddles the window's end or wraps at the area's.
                spill.resize(len, 0);
                g.read_area(pos, &mut spill)?;
                &spill
            };
            if let Ok((h, _)) = check_record(rec, &g.uuid, Lsn(h.lsn)) {
                valid.insert(h.lsn, h);
            }
        }
        start += n as u64;
    }
    Ok(valid)
}

/// Crash mount: scan, replay, zero the free area (see the module doc).
pub(crate) fn recover_scan(
    g: &Geometry,
    min_lsn: u64,
    replay: &mut ReplayFn<'_>,
) -> Result<Recovered, LogError> {
    recover_scan_window(g, min_lsn, replay, SCAN_WINDOW)
}

/// [`recover_scan`] with the scan buffer's size as a parameter (tests try small ones).
fn recover_scan_window(
    g: &Geometry,
    min_lsn: u64,
    replay: &mut ReplayFn<'_>,
    window: u64,
) -> Result<Recovered, LogError> {
    let size = g.area_len;
    tracing::info!(
        "log recovery: the log was not unmounted cleanly, scanning {} KiB",
        size >> 10
    );
    let valid = scan_valid(g, window)?;
    // R: highest epoch first, then highest LSN (see the module doc).
    let Some(rmax) = valid.values().max_by_key(|h| (h.epoch, h.lsn)) else {
        return Err(LogError::Corrupt("no valid log record".into()));
    };
    let max_csn = valid.values().map(|h| h.csn).max().unwrap_or(0);
    let max_epoch = rmax.epoch;
    let walk = |from: u64| -> (u64, Vec<u64>) {
        let mut lsn = from;
        let mut chain = Vec::new();
        let mut epoch = 0;
        while let Some(h) = valid.get(&lsn) {
            if h.epoch < epoch {
                break;
            }
            epoch = h.epoch;
            chain.push(lsn);
            lsn += h.rec_len as u64;
        }
        (lsn, chain)
    };
    let (head, chain) = walk(rmax.tail_lsn);
    // Replay from the tail of the last durable record (see module doc); it is never later
    // than R's tail, and the chain from it reaches the same head.
    let mut tail = rmax.tail_lsn;
    let mut chain = chain;
    if let Some(last) = chain.last().and_then(|l| valid.get(l)) {
        let t = last.tail_lsn;
        let (h2, c2) = walk(t);
        if h2 == head {
            tail = t;
            chain = c2;
        }
    }
    if head < min_lsn {
        return Err(LogError::Corrupt(format!(
            "log head {head} before the last mount's head {min_lsn}"
        )));
    }
    let recs: Vec<RecordHeader> = chain.iter().filter_map(|l| valid.get(l)).copied().collect();
    drop(valid);
    let replayed = replay_chain(g, &recs, replay)?;

    // First a tail record at the head, in a new epoch, made durable: from now on it is the
    // record recovery starts from (highest epoch), so crashing anywhere in what follows
    // recovers the same way. Then zero the rest of the free area so stale records after the
    // head are gone for good before any new record is written near them.
    if head - tail + BLOCK > size {
        // The log keeps a block free for this record (iclog.rs `usable`).
        return Err(LogError::Corrupt(format!(
            "log full at recovery: tail {tail} head {head}"
        )));
    }
    let epoch = max_epoch.saturating_add(1);
    let rec = build_record(
        g.uuid,
        epoch,
        F_TAIL,
        Lsn(head),
        Csn(max_csn),
        Lsn(tail),
        &[],
    );
    g.write_area(head, &rec)?;
    g.dev.flush()?;
    let free = size - (head + BLOCK - tail);
    let zero = vec![0u8; (1u64 << 20).min(free) as usize];
    let mut at = head + BLOCK;
    while at < head + BLOCK + free {
        let n = (head + BLOCK + free - at).min(zero.len() as u64) as usize;
        g.write_area(at, &zero[..n])?;
        at += n as u64;
    }
    g.dev.flush()?;
    Ok(Recovered {
        head: head + BLOCK,
        tail,
        next_csn: max_csn + 1,
        replayed,
        scanned: true,
        epoch,
    })
}

/// Replay the chain of records `chain` names, reading each again as its turn comes, so
/// memory holds one record and the checkpoint being assembled, not the log.
fn replay_chain(
    g: &Geometry,
    chain: &[RecordHeader],
    replay: &mut ReplayFn<'_>,
) -> Result<u64, LogError> {
    replay_records(chain, replay, |h| match read_record(g, h.lsn)? {
        Some(r) if r.h == *h => Ok(r.payload),
        _ => Err(LogError::Corrupt(format!(
            "log record at LSN {} changed during recovery",
            h.lsn
        ))),
    })
}

/// How often a long replay says how far it got.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Replay complete checkpoints in order; intents without their done are applied at the end.
/// `payload` gives each record's payload.
fn replay_records(
    chain: &[RecordHeader],
    replay: &mut ReplayFn<'_>,
    mut payload: impl FnMut(&RecordHeader) -> Result<Vec<u8>, LogError>,
) -> Result<u64, LogError> {
    let mut cur: Option<(u64, Vec<u8>)> = None;
    let mut intents: BTreeMap<u64, (u64, Vec<Item>)> = BTreeMap::new();
    let mut n = 0;
    let total: u64 = chain.iter().map(|h| h.rec_len as u64).sum();
    let mut done = 0u64;
    let mut note = std::time::Instant::now();
    if !chain.is_empty() {
        tracing::info!(
            "log recovery: replaying {} records ({} KiB) from LSN {}",
            chain.len(),
            total >> 10,
            chain[0].lsn
        );
    }
    for (i, h) in chain.iter().enumerate() {
        done += h.rec_len as u64;
        if note.elapsed() >= PROGRESS_EVERY {
            note = std::time::Instant::now();
            tracing::info!(
                "log recovery: {i} of {} records replayed ({} of {} KiB), {n} checkpoints",
                chain.len(),
                done >> 10,
                total >> 10
            );
        }
        // Only records that can join a checkpoint are read again.
        if h.flags & F_START != 0 {
            cur = Some((h.csn, payload(h)?));
        } else if let Some((c, buf)) = cur.as_mut() {
            if *c == h.csn {
                buf.extend_from_slice(&payload(h)?);
            }
        }
        if h.flags & F_END == 0 {
            continue;
        }
        let Some((c, buf)) = cur.take() else {
            continue;
        };
        if c != h.csn {
            continue;
        }
        let items =
            decode_all(&buf).map_err(|e| LogError::Corrupt(format!("checkpoint {c}: {e}")))?;
        for it in &items {
            match it {
                Item::Intent { id, body } => {
                    intents.insert(*id, (c, body.clone()));
                }
                Item::Done { id } => {
                    intents.remove(id);
                }
                _ => replay(Csn(c), it).map_err(LogError::Replay)?,
            }
        }
        n += 1;
    }
    for (_, (c, body)) in intents {
        for it in &body {
            replay(Csn(c), it).map_err(LogError::Replay)?;
        }
    }
    Ok(n)
}

#[cfg(test)]
#[path = "recover_tests.rs"]
mod tests;
