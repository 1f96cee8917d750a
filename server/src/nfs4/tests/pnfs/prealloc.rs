//! Speculative preallocation and whole-run layouts (layout::reach, store/layout_map.rs,
//! docs/pnfs.md "Preallocation"), through the op handlers as the Linux block client drives
//! them: fewer allocating LAYOUTGETs and log forces for a file written in 64 KiB steps,
//! contiguous layouts covering the request, zeros for preallocated blocks never committed,
//! and the trim past EOF when the last RW layout goes (and after a crash, after grace).

use super::*;
use metalog::BlockDev;

/// LAYOUTGET as Linux asks for a write: `len` bytes at `off`, minlength one page.
fn get_min(x: &mut Ctx<'_>, mode: u32, off: u64, len: u64, sid: Stateid) -> Got {
    let (s, body) = call(
        x,
        layoutget::run,
        &layoutget_args(BLOCK, mode, off, len, B, sid, 0xffff),
    );
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert!(r.bool().unwrap());
    let stateid = Stateid::decode(&mut r).unwrap();
    assert_eq!(r.u32().unwrap(), 1);
    let offset = r.u64().unwrap();
    let length = r.u64().unwrap();
    r.u32().unwrap();
    r.u32().unwrap();
    let extents = BlockExtent::decode_list(r.opaque(1 << 20).unwrap()).unwrap();
    // What the Linux client checks (bl_alloc_lseg): contiguous extents from the range's
    // offset to its end, 512-byte aligned; and the range holds the asked first byte.
    let mut pos = offset;
    for e in &extents {
        assert_eq!(e.file_offset, pos);
        assert_eq!(
            e.file_offset % 512 + e.length % 512 + e.storage_offset % 512,
            0
        );
        pos += e.length;
    }
    assert_eq!(pos, offset + length);
    assert!(offset <= off && offset + length >= off + B);
    Got {
        stateid,
        offset,
        length,
        extents,
    }
}

/// LAYOUTCOMMIT of `[off, off + len)` as written (storage offset 0, as Linux sends).
fn commit_range(x: &mut Ctx<'_>, sid: Stateid, off: u64, len: u64) -> NfsStat {
    let dev = layout::block::device_id(x.srv.store.volume_uuid());
    let e = BlockExtent {
        deviceid: dev,
        file_offset: off,
        length: len,
        storage_offset: 0,
        state: ExtentState::READ_WRITE_DATA,
    };
    call(
        x,
        layoutcommit::run,
        &commit_args(off, len, sid, Some(off + len - 1), &[e]),
    )
    .0
}

/// The storage offset of file byte `off` in `g`.
fn storage_of(g: &Got, off: u64) -> u64 {
    let e = g
        .extents
        .iter()
        .find(|e| e.file_offset <= off && off < e.file_offset + e.length)
        .unwrap();
    e.storage_offset + (off - e.file_offset)
}

/// Writes `total` bytes in 64 KiB steps as the Linux client does with fsync after each: a
/// LAYOUTGET only when no cached layout holds the first byte, the data to the volume, a
/// LAYOUTCOMMIT. Returns (LAYOUTGETs, log writes) and checks the bytes read back.
fn write_sequentially(prealloc: u64, total: u64) -> (u64, u64, u64) {
    let fx = fixture_of(
        NfsOptions {
            layout_prealloc_max: prealloc,
            ..NfsOptions::default()
        },
        64 << 20,
    );
    let mut x = fx.client();
    let (fh, mut sid) = open_f(&mut x);
    let log0 = fx.srv.store.log().counters().log_writes;
    let step = 64 << 10;
    let mut cached: Vec<Got> = Vec::new();
    let mut gets = 0;
    let mut off = 0;
    while off < total {
        // A write the cached layouts cover only in part is split at their end, as
        // `pnfs_generic_pg_test` does, and the rest gets its own LAYOUTGET.
        let mut pos = off;
        while pos < off + step {
            let g = match cached
                .iter()
                .position(|g| g.offset <= pos && pos < g.offset + g.length)
            {
                Some(i) => i,
                None => {
                    let g = get_min(&mut x, IoMode::RW.0, pos, off + step - pos, sid);
                    sid = g.stateid;
                    gets += 1;
                    cached.push(g);
                    cached.len() - 1
                }
            };
            let end = (off + step).min(cached[g].offset + cached[g].length);
            let buf = vec![(off / step) as u8 + 1; (end - pos) as usize];
            fx.dev.write_at(&buf, storage_of(&cached[g], pos)).unwrap();
            pos = end;
        }
        let st = commit_range(&mut x, sid, off, step);
        assert_eq!(st, NfsStat::OK, "prealloc {prealloc} off {off}");
        off += step;
    }
    let logs = fx.srv.store.log().counters().log_writes - log0;
    assert_eq!(fx.srv.store.getattr(fh.ino).unwrap().size, total);
    let (data, _) = fx
        .srv
        .store
        .read(fh.ino, total - step, step as u32)
        .unwrap();
    assert!(data.iter().all(|b| *b == ((total - step) / step) as u8 + 1));
    let allocs = fx.srv.layouts.metrics.snapshot().layoutget_allocations;
    (gets, logs, allocs)
}

#[test]
fn sequential_64k_writes_need_few_layoutgets_and_log_forces() {
    let total = 8 << 20;
    let (gets_off, logs_off, allocs_off) = write_sequentially(0, total);
    let (gets_on, logs_on, allocs_on) =
        write_sequentially(layout::reach::DEFAULT_PREALLOC_MAX_BYTES, total);
    // Without speculation every 64 KiB step asks and allocates (and forces the log).
    assert_eq!((gets_off, allocs_off), (128, 128));
    // With it, the layout doubles: 1 MiB + 64 KiB, then the file's size again, ... (capped
    // at a sixteenth of the free space of this 64 MiB volume).
    assert!(gets_on <= 8, "{gets_on} LAYOUTGETs");
    assert_eq!(allocs_on, gets_on);
    // Each commit grows the size (one log write each); the LAYOUTGETs' forces are gone.
    assert!(logs_off >= 128 + 120, "{logs_off}");
    assert!(logs_on + 100 < logs_off, "{logs_on} vs {logs_off}");
    println!("8 MiB in 64 KiB steps: {gets_off} → {gets_on} LAYOUTGETs, {logs_off} → {logs_on} log writes");
}

#[test]
fn a_layoutget_inside_allocated_blocks_returns_the_whole_run() {
    let fx = fixture_of(NfsOptions::default(), 64 << 20);
    let mut x = fx.client();
    let (fh, sid) = open_f(&mut x);
    // ALLOCATE-like: a 2 MiB file of unwritten blocks, asked in the middle for one page.
    fx.srv.store.allocate(fh.ino, 0, 2 << 20).unwrap();
    let g = get_min(&mut x, IoMode::RW.0, 1 << 20, B, sid);
    assert_eq!((g.offset, g.length), (0, 2 << 20));
    assert!(g
        .extents
        .iter()
        .all(|e| e.state == ExtentState::INVALID_DATA));
    // Nothing was allocated for it.
    assert_eq!(fx.srv.layouts.metrics.snapshot().layoutget_allocations, 0);
    // READ over the same: the whole run, NONE_DATA (unwritten), up to EOF only.
    let r = get_min(&mut x, IoMode::READ.0, 1 << 20, B, g.stateid);
    assert_eq!((r.offset, r.length), (0, 2 << 20));
    assert!(r.extents.iter().all(|e| e.state == ExtentState::NONE_DATA));
}

/// The case of the guest suite's crash-scsi-4.2 scenario: a file written in 64 KiB steps,
/// each committed but the last, and a READ layout asked over the whole file (Linux reads it
/// back through READ layouts from offset 0). The READ layout must end where the written
/// blocks end: described as NONE_DATA, the last, uncommitted write hid the client's own RW
/// extent and it read zeros. A READ asked from inside the unwritten blocks still gets them.
#[test]
fn a_read_layout_stops_before_blocks_written_but_not_committed() {
    let fx = fixture_of(NfsOptions::default(), 64 << 20);
    let mut x = fx.client();
    let (_fh, sid) = open_f(&mut x);
    let step = 64 << 10;
    let g = get_min(&mut x, IoMode::RW.0, 0, 4 * step, sid);
    assert!(g.offset + g.length >= 4 * step);
    let mut sid = g.stateid;
    for i in 0..3 {
        assert_eq!(commit_range(&mut x, sid, i * step, step), NfsStat::OK);
    }
    // The fourth 64 KiB was written, not yet committed; the client reads the file back.
    let r = get_min(&mut x, IoMode::READ.0, 0, 4 * step, sid);
    assert_eq!(
        (r.offset, r.offset + r.length),
        (0, 3 * step),
        "{:?}",
        r.extents
    );
    assert!(r.extents.iter().all(|e| e.state == ExtentState::READ_DATA));
    sid = r.stateid;
    // Asked from inside them, the unwritten blocks come as NONE_DATA (the request's byte).
    let r = get_min(&mut x, IoMode::READ.0, 3 * step, step, sid);
    assert!(r.offset <= 3 * step && r.offset + r.length > 3 * step);
    assert!(r.extents.iter().all(|e| e.state == ExtentState::NONE_DATA));
    // Once committed, the whole file is READ_DATA.
    assert_eq!(commit_range(&mut x, r.stateid, 3 * step, step), NfsStat::OK);
    let r = get_min(&mut x, IoMode::READ.0, 0, 4 * step, r.stateid);
    assert_eq!((r.offset, r.offset + r.length), (0, 4 * step));
    assert!(r.extents.iter().all(|e| e.state == ExtentState::READ_DATA));
}

#[test]
fn widening_stops_where_another_client_holds_a_layout() {
    let fx = fixture_of(NfsOptions::default(), 64 << 20);
    let (c1, c2) = (conn(1, None), conn(2, None));
    let mut x1 = ctx(&fx.srv, &c1);
    mount(&mut x1, b"a");
    let (fh, sid1) = create(&mut x1, b"f");
    fx.srv.store.allocate(fh.ino, 0, 2 << 20).unwrap();
    let mut x2 = ctx(&fx.srv, &c2);
    mount(&mut x2, b"b");
    let (_, sid2) = create(&mut x2, b"f");
    // Client 2 reads past EOF (3 MiB); client 1 then writes the start: its layout would
    // reach over client 2's, so it is not widened, and nobody is recalled.
    let r = get_min(&mut x2, IoMode::READ.0, 3 << 20, B, sid2);
    assert_eq!((r.offset, r.length), (3 << 20, B));
    let g = get_min(&mut x1, IoMode::RW.0, 0, B, sid1);
    assert_eq!((g.offset, g.length), (0, B));
    assert_eq!(fx.srv.layouts.metrics.snapshot().recalls_sent, 0);
}

/// READ through the NFS READ op.
fn nfs_read(x: &mut Ctx<'_>, sid: Stateid, off: u64, count: u32) -> Vec<u8> {
    let mut w = XdrWriter::new();
    sid.encode(&mut w);
    w.u64(off);
    w.u32(count);
    let (s, body) = call(x, crate::nfs4::ops::read::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    r.bool().unwrap();
    r.opaque(1 << 20).unwrap().to_vec()
}

#[test]
fn preallocated_blocks_never_committed_read_as_zeros() {
    let fx = fixture_of(NfsOptions::default(), 64 << 20);
    let mut x = fx.client();
    let (fh, sid) = open_f(&mut x);
    let g = get_min(&mut x, IoMode::RW.0, 0, 16 * B, sid);
    assert!(g.length >= (1 << 20), "preallocated: {}", g.length);
    // The client writes everything it was given but commits only the first 64 KiB.
    fill(&fx, &g, 0xab);
    assert_eq!(commit_range(&mut x, g.stateid, 0, 16 * B), NfsStat::OK);
    // Another client's later SETATTR grows the file over the preallocated blocks.
    grow(&fx.srv.store, fh.ino, g.length);
    x.current_fh = Some(fh);
    let head = nfs_read(&mut x, sid, 0, 16 * B as u32);
    assert!(head.iter().all(|b| *b == 0xab));
    let mut off = 16 * B;
    while off < g.length {
        let tail = nfs_read(&mut x, sid, off, 64 * B as u32);
        assert_eq!(tail.len() as u64, (g.length - off).min(64 * B));
        assert!(
            tail.iter().all(|b| *b == 0),
            "uncommitted bytes exposed at {off}"
        );
        off += 64 * B;
    }
}

fn return_all_of(x: &mut Ctx<'_>, sid: Stateid, mode: u32) -> NfsStat {
    call(
        x,
        layoutreturn::run,
        &return_args(mode, 1, Some((0, u64::MAX, sid))),
    )
    .0
}

#[test]
fn blocks_past_eof_are_freed_after_the_last_rw_return() {
    let fx = fixture_of(NfsOptions::default(), 64 << 20);
    let mut x = fx.client();
    let (fh, sid) = open_f(&mut x);
    let free0 = fx.srv.store.fsstat().free_bytes;
    let g = get_min(&mut x, IoMode::RW.0, 0, 16 * B, sid);
    assert!(fx.srv.store.fsstat().free_bytes <= free0 - g.length);
    assert_eq!(commit_range(&mut x, g.stateid, 0, 16 * B), NfsStat::OK);
    // Returning READ only: the RW layout is still held, nothing is freed.
    assert_eq!(
        return_all_of(&mut x, g.stateid, IoMode::READ.0),
        NfsStat::OK
    );
    assert!(fx.srv.store.fsstat().free_bytes <= free0 - g.length);
    let mapped = |srv: &Server| {
        srv.store
            .extents(fh.ino, 0, g.length / B)
            .unwrap()
            .iter()
            .filter(|s| matches!(s, layout::Segment::Mapped { .. }))
            .map(|s| s.len())
            .sum::<u64>()
    };
    assert_eq!(mapped(&fx.srv), g.length / B);
    // The last RW layout goes: what was never committed past EOF is freed.
    let sid2 = Stateid {
        seqid: g.stateid.seqid + 1,
        ..g.stateid
    };
    assert_eq!(return_all_of(&mut x, sid2, IoMode::ANY.0), NfsStat::OK);
    assert_eq!(fx.srv.store.fsstat().free_bytes, free0 - 16 * B);
    assert_eq!(mapped(&fx.srv), 16);
    let m = fx.srv.layouts.metrics.snapshot();
    assert_eq!(m.trimmed_blocks, g.length / B - 16);
    // The committed data is intact.
    let (data, _) = fx.srv.store.read(fh.ino, 0, 16 * B as u32).unwrap();
    assert_eq!(data.len() as u64, 16 * B);
}

#[test]
fn close_trims_and_a_layoutget_in_progress_is_never_trimmed() {
    let fx = fixture_of(NfsOptions::default(), 64 << 20);
    let mut x = fx.client();
    let cid = mount(&mut x, b"a");
    let (fh, sid) = create(&mut x, b"f");
    let free0 = fx.srv.store.fsstat().free_bytes;
    let g = get_min(&mut x, IoMode::RW.0, 0, 4 * B, sid);
    assert!(g.length > 4 * B);
    // While a LAYOUTGET of the file is between its allocation and its grant, a trim
    // (any client's return) must not free anything.
    {
        let _getting = fx.srv.layouts.begin_get(fh.ino);
        fx.srv.layouts.release_file(cid, fh.ino);
        crate::nfs4::layouts::trim_released(&fx.srv.layouts_env());
        assert!(fx.srv.store.fsstat().free_bytes <= free0 - g.length);
    }
    // (The LAYOUTGET in progress ends with its grant.)
    let end = g.offset + g.length;
    fx.srv.layouts.grant(
        cid,
        fh.ino,
        LayoutType::BLOCK_VOLUME,
        (g.offset, end),
        IoMode::RW,
    );
    // CLOSE (return-on-close): nothing was committed, so every block goes.
    let mut w = XdrWriter::new();
    w.u32(0);
    sid.encode(&mut w);
    x.current_fh = Some(fh);
    assert_eq!(
        call(&mut x, crate::nfs4::ops::close::run, &w.buf).0,
        NfsStat::OK
    );
    assert_eq!(fx.srv.store.fsstat().free_bytes, free0);
}

#[test]
fn after_a_crash_uncommitted_preallocation_reads_zeros_and_is_trimmed_after_grace() {
    for seed in 1..=3 {
        let fx = fixture_seeded(NfsOptions::default(), seed);
        let mut x = fx.client();
        let (fh, sid) = open_f(&mut x);
        let free0 = fx.srv.store.fsstat().free_bytes;
        let g = get_min(&mut x, IoMode::RW.0, 0, 4 * B, sid);
        fill(&fx, &g, 0x77);
        assert_eq!(commit_range(&mut x, g.stateid, 0, 4 * B), NfsStat::OK);
        // SIGKILL: the layout is never returned.
        let after = Arc::new(fx.dev.crash());
        let store = Arc::new(Store::open_dev(after, StoreOptions::default()).unwrap());
        assert_eq!(store.getattr(fh.ino).unwrap().size, 4 * B, "seed {seed}");
        // The preallocation survived (it was durable before the LAYOUTGET reply), unwritten.
        let segs = store.extents(fh.ino, 4, g.length / B - 4).unwrap();
        assert!(segs.iter().all(|s| matches!(
            s,
            layout::Segment::Mapped {
                state: layout::ExtState::Unwritten,
                ..
            }
        )));
        // During grace nothing is trimmed (a reclaiming LAYOUTCOMMIT may need the blocks);
        // after it, the sweep frees them.
        for grace in [true, false] {
            let opts = NfsOptions {
                grace_seconds: if grace { 90 } else { 0 },
                ..NfsOptions::default()
            };
            let srv = crate::nfs4::tests::fixture::server(store.clone(), opts, 2);
            assert_eq!(srv.state.in_grace(), grace, "seed {seed}");
            recall::tick(&srv.layouts_env(), Instant::now());
            let free = store.fsstat().free_bytes;
            if grace {
                assert!(free <= free0 - g.length, "seed {seed}");
            } else {
                assert_eq!(free, free0 - 4 * B, "seed {seed}");
            }
        }
        // Growing the file never shows the bytes written into the trimmed blocks.
        grow(&store, fh.ino, g.length);
        let (data, _) = store.read(fh.ino, 0, g.length as u32).unwrap();
        assert!(data[..4 * B as usize].iter().all(|b| *b == 0x77));
        assert!(
            data[4 * B as usize..].iter().all(|b| *b == 0),
            "seed {seed}"
        );
    }
}

#[test]
fn committing_the_whole_layout_converts_nothing_past_the_new_eof() {
    let fx = fixture_of(NfsOptions::default(), 64 << 20);
    let mut x = fx.client();
    let (fh, sid) = open_f(&mut x);
    let g = get_min(&mut x, IoMode::RW.0, 0, 16 * B, sid);
    // Stale bytes on the volume where the speculation went.
    fill(&fx, &g, 0x99);
    // A client that commits everything it was given, having written 16 blocks.
    assert_eq!(commit(&mut x, &g, Some(16 * B - 1)).unwrap(), Some(16 * B));
    assert_eq!(
        fx.srv.layouts.metrics.snapshot().commit_converted_blocks,
        16
    );
    grow(&fx.srv.store, fh.ino, g.length);
    let (data, _) = fx.srv.store.read(fh.ino, 16 * B, 64 * B as u32).unwrap();
    assert!(
        data.iter().all(|b| *b == 0),
        "stale bytes past the committed EOF"
    );
}
