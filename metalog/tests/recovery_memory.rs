//! A crash mount of a full 64 MiB log holds a few MiB of heap, not the log (a 64 GiB
//! volume's 256 MiB log read whole would break the RSS bound of a SIGKILL restart).
//! Its own test binary: the counting allocator sees every allocation of the process, so
//! nothing else may run beside the mount it measures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use metalog::format::{build_record, LogSuperblock, BLOCK, F_END, F_START, SB_MAGIC, VERSION};
use metalog::items::encode_item;
use metalog::{BlockDev, Csn, FileDev, FlushSeq, Item, Log, LogOptions, Lsn};

struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let n = NOW.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(n, Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        NOW.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: allocated above with this layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const UUID: [u8; 16] = *b"pnfsd-memory-ok!";

#[test]
fn crash_mount_of_a_full_log_holds_a_bounded_heap() {
    let area: u64 = 64 << 20;
    let dir = tempfile::tempdir().unwrap();
    let dev: Arc<dyn BlockDev> =
        Arc::new(FileDev::create(&dir.path().join("log"), area + BLOCK).unwrap());
    Log::format(dev.clone(), 0, area + BLOCK, UUID).unwrap();
    // Checkpoints of one ~250 KiB record each, from LSN 0 to 60 MiB, the tail at 0: the
    // crash mount replays all of them.
    let mut payload = Vec::new();
    let mut n = 0u64;
    while payload.len() < 250 * 1024 {
        encode_item(&Item::Size { ino: n, size: n }, &mut payload);
        n += 1;
    }
    let mut lsn = 0u64;
    let mut csn = 1;
    while lsn < 60 << 20 {
        let r = build_record(
            UUID,
            1,
            F_START | F_END,
            Lsn(lsn),
            Csn(csn),
            Lsn(0),
            &payload,
        );
        dev.write_at(&r, BLOCK + lsn).unwrap();
        lsn += r.len() as u64;
        csn += 1;
    }
    let sb = LogSuperblock {
        magic: SB_MAGIC,
        version: VERSION,
        flags: 0,
        uuid: UUID,
        area_len: area,
        clean_lsn: 0,
        mount_lsn: 0,
        crc: 0,
        reserved: [0; 12],
    };
    dev.write_at(&sb.to_block(), 0).unwrap();
    dev.flush().unwrap();
    let flush = Arc::new(FlushSeq::new(dev.clone()));
    let mut items = 0u64;
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let log = Log::mount(
        dev,
        0,
        area + BLOCK,
        UUID,
        flush,
        LogOptions::default(),
        &mut |_, _| {
            items += 1;
            Ok(())
        },
    )
    .unwrap();
    let held = PEAK.load(Ordering::Relaxed) - base;
    println!(
        "crash mount of a {} MiB log: peak heap {} KiB",
        area >> 20,
        held >> 10
    );
    drop(log);
    assert_eq!(items, n * (csn - 1), "every checkpoint replayed");
    assert!(
        held < 16 << 20,
        "the crash mount of a {} MiB log held {} MiB of heap at its peak",
        area >> 20,
        held >> 20
    );
}
