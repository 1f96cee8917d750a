//! The windowed crash scan against the whole-buffer scan it replaced: the
//! same head, tail, replay and device image for every log, whatever the window; and the
//! window bound on what one read asks for.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::blockdev::{BlockDev, CrashDev};
use crate::format::{build_record, F_END, F_START, F_TAIL};
use crate::items::{encode_item, sample_items};

const UUID: [u8; 16] = *b"pnfsd-scan-uuid!";

/// The crash scan as it was before the windowed one: the whole area in one buffer and every
/// valid record's payload held until replay. Kept as the oracle of the windowed scan.
mod whole {
    use super::*;

    pub(super) fn recover_scan(
        g: &Geometry,
        min_lsn: u64,
        replay: &mut ReplayFn<'_>,
    ) -> Result<Recovered, LogError> {
        let size = g.area_len;
        let mut area = vec![0u8; size as usize];
        g.dev.read_at(&mut area, g.area_off)?;
        let mut valid: BTreeMap<u64, Rec> = BTreeMap::new();
        let mut pos = 0u64;
        while pos < size {
            let b = &area[pos as usize..];
            if let Some(h) = RecordHeader::parse(b) {
                let len = h.rec_len as u64;
                if h.lsn % size == pos
                    && len >= BLOCK
                    && len <= g.max_rec()
                    && len.is_multiple_of(BLOCK)
                {
                    let mut rec = vec![0u8; len as usize];
                    let first = ((size - pos) as usize).min(rec.len());
                    rec[..first].copy_from_slice(&area[pos as usize..pos as usize + first]);
                    let rest = rec.len() - first;
                    rec[first..].copy_from_slice(&area[..rest]);
                    if let Ok((h, p)) = check_record(&rec, &g.uuid, Lsn(h.lsn)) {
                        valid.insert(
                            h.lsn,
                            Rec {
                                h,
                                payload: p.to_vec(),
                            },
                        );
                    }
                }
            }
            pos += BLOCK;
        }
        let Some(rmax) = valid.values().max_by_key(|r| (r.h.epoch, r.h.lsn)) else {
            return Err(LogError::Corrupt("no valid log record".into()));
        };
        let max_csn = valid.values().map(|r| r.h.csn).max().unwrap_or(0);
        let max_epoch = rmax.h.epoch;
        let walk = |from: u64| -> (u64, Vec<u64>) {
            let mut lsn = from;
            let mut chain = Vec::new();
            let mut epoch = 0;
            while let Some(r) = valid.get(&lsn) {
                if r.h.epoch < epoch {
                    break;
                }
                epoch = r.h.epoch;
                chain.push(lsn);
                lsn += r.h.rec_len as u64;
            }
            (lsn, chain)
        };
        let (head, chain) = walk(rmax.h.tail_lsn);
        let mut tail = rmax.h.tail_lsn;
        let mut chain = chain;
        if let Some(last) = chain.last().and_then(|l| valid.get(l)) {
            let t = last.h.tail_lsn;
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
        let recs: Vec<&Rec> = chain.iter().filter_map(|l| valid.get(l)).collect();
        let replayed = replay_refs(&recs, replay)?;
        if head - tail + BLOCK > size {
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

    fn replay_refs(chain: &[&Rec], replay: &mut ReplayFn<'_>) -> Result<u64, LogError> {
        let mut cur: Option<(u64, Vec<u8>)> = None;
        let mut intents: BTreeMap<u64, (u64, Vec<Item>)> = BTreeMap::new();
        let mut n = 0;
        for r in chain {
            let h = &r.h;
            if h.flags & F_START != 0 {
                cur = Some((h.csn, r.payload.clone()));
            } else if let Some((c, buf)) = cur.as_mut() {
                if *c == h.csn {
                    buf.extend_from_slice(&r.payload);
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
}

/// A device that remembers the largest read it was asked for.
struct MaxRead {
    inner: CrashDev,
    max: AtomicUsize,
}

impl BlockDev for MaxRead {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.max.fetch_max(buf.len(), Ordering::Relaxed);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn write_fua(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_fua(buf, offset)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
}

/// A payload of `n` items (what the writer puts in a checkpoint), about `n × 100` bytes.
fn items_payload(n: usize, salt: u64) -> Vec<u8> {
    let samples = sample_items();
    let mut p = Vec::new();
    for i in 0..n {
        match &samples[i % samples.len()] {
            Item::Intent { .. } | Item::Done { .. } => {}
            it => encode_item(it, &mut p),
        }
        encode_item(
            &Item::Size {
                ino: salt,
                size: i as u64,
            },
            &mut p,
        );
    }
    p
}

/// Blocks of the record `chain` makes of `items` items at `slot`.
fn blocks(items: usize, slot: u64) -> u64 {
    crate::format::rec_len(items_payload(items, slot).len()) / BLOCK
}

/// One record to put in the area: its slot (LSN in blocks; past the area = a later cycle),
/// epoch, flags, CSN, tail (blocks behind), payload items, and a torn byte.
#[derive(Debug, Clone)]
struct Spec {
    slot: u64,
    epoch: u32,
    flags: u16,
    csn: u64,
    back: u64,
    items: usize,
    tear: Option<usize>,
}

/// A formatted log of `area_blocks` blocks with `recs` written over it, as an image.
fn image(area_blocks: u64, recs: &[Spec]) -> Vec<u8> {
    let len = (area_blocks + 1) * BLOCK;
    let dev = Arc::new(CrashDev::new(len, 1));
    crate::Log::format(dev.clone(), 0, len, UUID).unwrap();
    let g = Geometry::new(dev.clone(), 0, len, UUID).unwrap();
    for s in recs {
        let lsn = s.slot * BLOCK;
        let mut rec = build_record(
            UUID,
            s.epoch,
            s.flags,
            Lsn(lsn),
            Csn(s.csn),
            Lsn(lsn.saturating_sub(s.back * BLOCK)),
            &items_payload(s.items, s.slot),
        );
        if rec.len() as u64 > g.max_rec() {
            continue;
        }
        if let Some(t) = s.tear {
            let at = t % rec.len();
            rec[at] ^= 0x5a;
        }
        g.write_area(lsn, &rec).unwrap();
    }
    dev.write_at(&g.superblock(None, 0), 0).unwrap();
    dev.image()
}

type Outcome = (Result<Recovered, String>, Vec<(Csn, Item)>, Vec<u8>);

fn run(img: &[u8], min_lsn: u64, window: Option<u64>) -> Outcome {
    let dev = Arc::new(CrashDev::from_image(img.to_vec(), 1));
    let g = Geometry::new(dev.clone(), 0, img.len() as u64, UUID).unwrap();
    let mut got = Vec::new();
    let mut f = |c: Csn, it: &Item| {
        got.push((c, it.clone()));
        Ok(())
    };
    let r = match window {
        Some(w) => recover_scan_window(&g, min_lsn, &mut f, w),
        None => whole::recover_scan(&g, min_lsn, &mut f),
    };
    (r.map_err(|e| e.to_string()), got, dev.image())
}

/// A chain as the writer leaves it: `n` records from `slot` in epoch `epoch`, checkpoints of
/// one to three records, each record's tail a little behind (never before the chain's start).
fn chain(slot: u64, epoch: u32, shapes: &[(u8, usize, u64)]) -> Vec<Spec> {
    let mut v = Vec::new();
    let mut at = slot;
    let mut csn = 1 + slot;
    let mut tail = slot;
    let mut i = 0;
    while i < shapes.len() {
        let parts = 1 + (shapes[i].0 % 3) as usize;
        for p in 0..parts {
            let Some(&(_, items, lag)) = shapes.get(i) else {
                break;
            };
            let mut flags = 0;
            if p == 0 {
                flags |= F_START;
            }
            if p + 1 == parts {
                flags |= F_END;
            }
            tail = tail.max(at.saturating_sub(lag)).max(slot);
            let blocks = blocks(items, at);
            v.push(Spec {
                slot: at,
                epoch,
                flags,
                csn,
                back: at - tail,
                items,
                tear: None,
            });
            at += blocks;
            i += 1;
        }
        csn += 1;
    }
    v
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        0u64..200,
        1u32..4,
        0u16..16,
        0u64..40,
        0u64..40,
        0usize..120,
        proptest::option::weighted(0.2, 0usize..20_000),
    )
        .prop_map(|(slot, epoch, flags, csn, back, items, tear)| Spec {
            slot,
            epoch,
            flags,
            csn,
            back,
            items,
            tear,
        })
}

fn log_case() -> impl Strategy<Value = (u64, Vec<Spec>, u64)> {
    (
        24u64..72,
        0u64..150,
        1u32..4,
        proptest::collection::vec((0u8..6, 0usize..150, 0u64..12), 0..40),
        proptest::collection::vec(spec(), 0..6),
        proptest::collection::vec(0usize..40, 0..2),
        0u64..3,
    )
        .prop_map(|(area, slot, epoch, shapes, noise, tears, min)| {
            let mut recs = chain(slot, epoch, &shapes);
            for t in tears {
                if let Some(r) = recs.get_mut(t) {
                    r.tear = Some(t * 977 + 70);
                }
            }
            // Stale or foreign records before or after the chain.
            recs.splice(0..0, noise);
            (area, recs, min * BLOCK)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every window size finds what the whole-buffer scan finds: same result, same replay,
    /// same device afterwards.
    #[test]
    fn windowed_scan_matches_whole_buffer((area, recs, min) in log_case()) {
        let img = image(area, &recs);
        let want = run(&img, min, None);
        for w in [1, 2, 3, 5, 8, area] {
            let got = run(&img, min, Some(w * BLOCK));
            prop_assert_eq!(&got.0, &want.0, "window {} blocks", w);
            prop_assert_eq!(&got.1, &want.1, "window {} blocks", w);
            prop_assert!(got.2 == want.2, "device differs after recovery, window {} blocks", w);
        }
    }
}

/// Records that straddle window edges and the area's end replay whole (and the property
/// test above is not vacuous: this shape replays every checkpoint).
#[test]
fn records_across_window_edges_and_the_wrap_replay() {
    let area = 40;
    // 2-block records from slot 31: they cross 3-block windows and wrap at block 40.
    let per = (0..).find(|&n| blocks(n, 31) == 2).unwrap();
    let shapes: Vec<(u8, usize, u64)> = (0..8).map(|i| (i as u8, per, 30)).collect();
    let recs = chain(31, 2, &shapes);
    assert!(recs
        .iter()
        .any(|r| r.slot < area && r.slot + blocks(r.items, r.slot) > area));
    assert!(recs.iter().any(|r| blocks(r.items, r.slot) >= 2));
    let img = image(area, &recs);
    let want = run(&img, 0, None);
    let got = run(&img, 0, Some(3 * BLOCK));
    let r = got.0.clone().unwrap();
    let ckpts = recs.iter().filter(|r| r.flags & F_END != 0).count() as u64;
    assert_eq!(r.replayed, ckpts);
    assert!(!got.1.is_empty());
    assert_eq!(got.0, want.0);
    assert_eq!(got.1, want.1);
    assert!(got.2 == want.2);
}

/// The scan never asks for more than its window (plus one record) in one read, however big
/// the log: the old scan read the whole area at once.
#[test]
fn crash_scan_reads_through_a_bounded_window() {
    let area_blocks = 4 * SCAN_WINDOW / BLOCK;
    // Records of ~40 KiB up to three windows into a log of four.
    let per = (0..).find(|&n| blocks(n, 0) == 10).unwrap();
    let n = (3 * SCAN_WINDOW / BLOCK / 10) as usize;
    let shapes: Vec<(u8, usize, u64)> = (0..n).map(|i| (i as u8, per, 1 << 40)).collect();
    let recs = chain(0, 1, &shapes);
    let img = image(area_blocks, &recs);
    let dev = Arc::new(MaxRead {
        inner: CrashDev::from_image(img.clone(), 1),
        max: AtomicUsize::new(0),
    });
    let g = Geometry::new(dev.clone(), 0, img.len() as u64, UUID).unwrap();
    assert!(recs.last().unwrap().slot * BLOCK > 2 * SCAN_WINDOW);
    let mut n = 0u64;
    let r = recover_scan(&g, 0, &mut |_, _| {
        n += 1;
        Ok(())
    })
    .unwrap();
    assert!(r.replayed > 100 && n > 0);
    let max = dev.max.load(Ordering::Relaxed) as u64;
    assert!(
        max <= SCAN_WINDOW.max(g.max_rec()),
        "a read of {max} bytes, window {SCAN_WINDOW}"
    );
}
