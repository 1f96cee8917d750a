//! Entry points for cargo-fuzz targets (docs/design.md, house rule 11; `fuzz/`, docs/fuzzing.md):
//! the on-disk log format and recovery from arbitrary log bytes. Each takes arbitrary bytes and
//! must never panic; the asserts are the properties a finding breaks.

use std::sync::Arc;

use crate::blockdev::{BlockDev, CrashDev};
use crate::format::{
    build_record, check_record, LogSuperblock, RecordHeader, BLOCK, F_END, F_START, F_TAIL,
    F_UNMOUNT,
};
use crate::geometry::Geometry;
use crate::items::{decode_all, encode_item, sample_items, Item};
use crate::{Csn, FlushSeq, Log, LogOptions, Lsn};

/// The UUID of the fuzzed logs.
pub const UUID: [u8; 16] = *b"pnfsd-fuzz-uuid!";

/// A record header, a whole record checked at the LSN its first 8 bytes give, and a log
/// superblock, from the same bytes.
pub fn record(data: &[u8]) {
    let _ = RecordHeader::parse(data);
    let lsn = bytecodec::get_u64_le(data, 0).unwrap_or(0);
    if let Ok((h, payload)) = check_record(data, &UUID, Lsn(lsn)) {
        assert!(payload.len() <= data.len() && h.lsn == lsn);
    }
    if let Some(sb) = LogSuperblock::from_block(data) {
        // Bytes the superblock does not use (reserved) are covered by the CRC read but not
        // written back: compare everything but the CRC.
        let again =
            LogSuperblock::from_block(&sb.to_block()).map(|a| LogSuperblock { crc: sb.crc, ..a });
        assert_eq!(again, Some(sb));
    }
}

/// A payload of items: whatever decodes re-encodes to bytes that decode the same.
pub fn items(data: &[u8]) {
    if let Ok(list) = decode_all(data) {
        let mut again = Vec::new();
        for it in &list {
            encode_item(it, &mut again);
        }
        assert_eq!(
            decode_all(&again).as_ref().ok(),
            Some(&list),
            "items round trip"
        );
    }
}

/// Blocks in the fuzzed log's area (small: the fuzzer reaches wrap-around and a full scan).
pub const AREA_BLOCKS: u64 = 16;

/// Recovery from a log the input describes, then recovery again from what the first left.
///
/// The input is a list of records, each `[slot, epoch, flags, csn, tail_back, tear, len_lo,
/// len_hi]` followed by `len` payload bytes: a record built with a valid CRC at LSN
/// `slot × BLOCK` (past the area's size means a later cycle), CSN `csn`, tail `tail_back`
/// blocks behind it, then torn (one byte flipped) when `tear` is odd. A record with a
/// valid CRC but arbitrary contents is what a fuzzer cannot make by itself. Byte 0 of the
/// input chooses the superblock: clean (naming slot `byte 1`) or in use.
///
/// Properties: mounting never panics; and when every record's payload is a list of items
/// (what the writer makes) and the first mount succeeds, a second mount of the device as the
/// first left it (a crash right after recovery) succeeds and replays the same checkpoints
/// (docs/design.md §3: recovery is re-runnable).
pub fn recovery(data: &[u8]) {
    let _ = recover_twice(data);
}

/// `recovery`; what the first mount replayed, `None` if it failed.
fn recover_twice(data: &[u8]) -> Option<Vec<(Csn, Item)>> {
    let (&mode, rest) = data.split_first()?;
    let len = (AREA_BLOCKS + 1) * BLOCK;
    let dev = Arc::new(CrashDev::new(len, 1));
    Log::format(dev.clone(), 0, len, UUID).ok()?;
    let g = Geometry::new(dev.clone(), 0, len, UUID).ok()?;
    let mut rest = rest;
    let clean_slot = rest.first().copied().unwrap_or(0);
    // Only a log the writer could have left is held to "recovery is re-runnable": every
    // payload a list of items, and epochs that never go down as LSNs go up (format writes
    // epoch 1 at LSN 0; each mount writes in a higher epoch). Anything else must only never
    // panic (recovery may refuse it: fuzzing found that a clean superblock naming an
    // epoch-0 record behind format's epoch-1 record mounts once, then is refused as
    // "head before the last mount's head" — a refusal, not data loss).
    let mut writable = true;
    let mut epochs = vec![(0u64, 1u32)];
    while rest.len() >= 8 {
        let (h, tail) = rest.split_at(8);
        let plen = (bytecodec::get_u16_le(h, 6).unwrap_or(0) as usize).min(tail.len());
        let (payload, next) = tail.split_at(plen);
        rest = next;
        writable &= decode_all(payload).is_ok();
        // The writer never lets a record's tail fall an area or more behind it, and its
        // unmount and tail records carry no items and are no checkpoint.
        writable &= u64::from(h[4]) < AREA_BLOCKS;
        if u16::from(h[2]) & (F_UNMOUNT | F_TAIL) != 0 {
            writable &= payload.is_empty() && u16::from(h[2]) & (F_START | F_END) == 0;
        }
        epochs.push((u64::from(h[0]), u32::from(h[1])));
        let lsn = u64::from(h[0]) * BLOCK;
        let back = u64::from(h[4]) * BLOCK;
        let mut rec = build_record(
            UUID,
            u32::from(h[1]),
            u16::from(h[2]) & 0xf,
            Lsn(lsn),
            Csn(u64::from(h[3])),
            Lsn(lsn.saturating_sub(back)),
            payload,
        );
        if rec.len() as u64 > g.area_len {
            continue;
        }
        if h[5] & 1 == 1 {
            let at = (usize::from(h[5]) * 31) % rec.len();
            rec[at] ^= 0x5a;
        }
        g.write_area(lsn, &rec).ok()?;
    }
    epochs.sort_unstable();
    writable &= epochs.windows(2).all(|w| w[0].1 <= w[1].1);
    // A clean superblock names the newest record: nothing is written after a clean unmount
    // before the next mount marks the superblock in use.
    if mode & 1 == 1 {
        writable &= epochs
            .last()
            .is_some_and(|&(slot, _)| slot == u64::from(clean_slot));
    }
    let clean = (mode & 1 == 1).then(|| u64::from(clean_slot) * BLOCK);
    let mount_lsn = u64::from(mode >> 1) * BLOCK;
    dev.write_at(&g.superblock(clean, mount_lsn), 0).ok()?;
    let first = mount_replay(dev.clone()).ok()?;
    if !writable {
        let _ = mount_replay(dev);
        return Some(first);
    }
    let second = match mount_replay(dev) {
        Ok(s) => s,
        Err(e) => panic!("the log recovery left cannot be mounted again: {e}"),
    };
    assert_eq!(first, second, "a second recovery replays something else");
    Some(first)
}

/// Mounts, collects what replay applies, and drops the log without unmounting (a crash
/// right after recovery).
fn mount_replay(dev: Arc<CrashDev>) -> Result<Vec<(Csn, Item)>, crate::LogError> {
    let len = dev.size();
    let flush = Arc::new(FlushSeq::new(dev.clone()));
    let mut got = Vec::new();
    let opts = LogOptions::default();
    let log = Log::mount(dev, 0, len, UUID, flush, opts, &mut |c, it| {
        got.push((c, it.clone()));
        Ok(())
    })?;
    drop(log);
    Ok(got)
}

/// Seeds for the three targets, as (name, bytes): records and items the log itself writes.
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut v = Vec::new();
    let samples = sample_items();
    let mut payload = Vec::new();
    for it in &samples {
        encode_item(it, &mut payload);
    }
    v.push(("items", "all-kinds".to_string(), payload.clone()));
    for (i, it) in samples.iter().enumerate() {
        let mut one = Vec::new();
        encode_item(it, &mut one);
        v.push(("items", format!("item-{i}"), one));
    }
    let rec = build_record(UUID, 1, 3, Lsn(0), Csn(1), Lsn(0), &payload);
    v.push(("record", "checkpoint".to_string(), rec));
    let len = (AREA_BLOCKS + 1) * BLOCK;
    if let Ok(g) = Geometry::new(Arc::new(CrashDev::new(len, 1)), 0, len, UUID) {
        v.push(("record", "superblock".to_string(), g.superblock(None, 0)));
    }
    // Recovery: a clean unmount record only; a chain of three checkpoints; a chain that
    // wraps around the area in a second epoch; a torn last record.
    let spec = |slot: u8, epoch: u8, flags: u8, csn: u8, back: u8, tear: u8, p: &[u8]| {
        let mut b = vec![slot, epoch, flags, csn, back, tear];
        bytecodec::Writer::new(&mut b)
            .u16_le(p.len() as u16)
            .bytes(p);
        b
    };
    let small = &payload[..payload.len().min(600)];
    let mut chain = vec![0u8];
    for i in 0..3u8 {
        chain.extend(spec(i, 1, 3, i + 1, i, 0, small));
    }
    v.push(("recovery", "chain".to_string(), chain.clone()));
    v.push(("recovery", "clean".to_string(), {
        let mut c = vec![1u8];
        c.extend(spec(0, 1, 4, 0, 0, 0, &[]));
        c
    }));
    let mut wrap = vec![28u8];
    for i in 14..20u8 {
        wrap.extend(spec(i, 2, 3, i, 2, 0, small));
    }
    v.push(("recovery", "wrap".to_string(), wrap));
    let mut torn = chain;
    torn.extend(spec(3, 1, 3, 4, 1, 7, small));
    v.push(("recovery", "torn".to_string(), torn));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_run_and_recovery_replays_the_chain() {
        for (target, name, d) in seeds() {
            match target {
                "items" => {
                    assert!(decode_all(&d).is_ok(), "{name}");
                    items(&d)
                }
                "record" => record(&d),
                _ => recovery(&d),
            }
        }
        // The chain seeds are real logs: their checkpoints are replayed (twice, the same).
        for want in ["chain", "wrap", "torn"] {
            let (_, _, d) = seeds()
                .into_iter()
                .find(|(t, n, _)| *t == "recovery" && n == want)
                .unwrap();
            let got = recover_twice(&d).unwrap_or_default();
            assert!(!got.is_empty(), "{want}: nothing replayed");
        }
    }

    /// Found by `log_record` (docs/fuzzing.md): a superblock with non-zero reserved bytes
    /// is valid (its CRC covers them) but re-encodes with zeros, so only its CRC differs.
    #[test]
    fn superblock_with_reserved_bytes_round_trips() {
        let d: &[u8] = &[
            0x50, 0x4e, 0x4c, 0x53, 0x01, 0x00, 0x00, 0x00, 0x70, 0x6e, 0x73, 0x66, 0x64, 0x2d,
            0x66, 0x00, 0x00, 0x00, 0x75, 0x7a, 0x7a, 0x2d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x64, 0x44, 0x5e, 0x16, 0xff, 0xff, 0xff, 0xff,
            0xff, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0xcf, 0x00, 0x00, 0x00, 0x70,
            0x6e, 0x66, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00,
            0x00, 0x00, 0x70, 0x21, 0x00, 0x00, 0x7e, 0xbb, 0x01, 0x00, 0x00, 0xff, 0x00, 0x01,
            0xa4, 0x3c, 0x01, 0x00, 0x00,
        ];
        let sb = LogSuperblock::from_block(d).expect("a valid superblock");
        assert_ne!(sb.to_block()[..64], d[..64]);
        record(d);
    }

    /// Found by `log_recovery`: a clean superblock naming an epoch-0 unmount record behind
    /// format's epoch-1 record (no writer makes that) mounts once and is then refused
    /// ("head before the last mount's head"). Refusing is right; the target must not call
    /// it a broken re-run, and the refusal must be an error, never a panic.
    #[test]
    fn an_epoch_regression_is_refused_not_a_panic() {
        let d = [
            0x01, 0x01, 0x00, 0x15, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        recovery(&d);
    }

    /// Found by `log_recovery` after 496,000 runs: a clean superblock naming a record while
    /// a newer one (higher epoch and LSN, its tail 119 blocks behind) lies past it mounts
    /// cleanly once, then is refused at the scan. No writer leaves that; a refusal, not a
    /// panic.
    #[test]
    fn records_after_the_clean_one_are_refused_not_a_panic() {
        let d = [
            0x01, 0x02, 0x41, 0x06, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2b, 0xff, 0x07, 0x00, 0x77,
            0x00, 0x1f, 0x00,
        ];
        recovery(&d);
    }

    /// Found by `log_recovery` after 3.7 M runs: a clean superblock naming an unmount record
    /// that is also a whole checkpoint with items. The clean mount replays nothing; the scan
    /// after it replays the items. No writer makes such a record (unmount records are empty).
    #[test]
    fn an_unmount_record_with_items_is_not_held_to_rerun() {
        let d: &[u8] = &[
            0xff, 0xff, 0xff, 0x0f, 0x01, 0x00, 0x00, 0xd3, 0x01, 0x01, 0x6d, 0x00, 0x00, 0x00,
            0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x01, 0x00, 0x00,
            0x00, 0x01, 0xa4, 0xe8, 0x03, 0x00, 0x00, 0x64, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff,
            0xff, 0x01, 0x00, 0x00, 0x00, 0x2f, 0x00, 0x00, 0x00, 0x4d, 0x00, 0x02, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00,
            0x3f, 0x00, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x04, 0x00, 0x00, 0x00,
            0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x23, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x21, 0x00,
            0x00, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x64, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x0b, 0x18, 0x00, 0x00, 0x00, 0x05, 0x00,
            0x00, 0xcd, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf7, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x18, 0x00, 0x00, 0x00, 0x05,
            0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x0f, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x03, 0x7a, 0x02, 0x00, 0x00, 0x00, 0x00,
        ];
        recovery(d);
    }

    #[test]
    fn random_input_never_panics() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        for _ in 0..2000 {
            let n = rng.gen_range(0..600);
            let data: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            record(&data);
            items(&data);
            recovery(&data);
        }
    }
}
