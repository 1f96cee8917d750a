//! The file side's floor for a single-threaded asynchronous server: one thread keeps QD
//! random reads or writes in flight on the file through one io_uring, set up as the target's
//! queue threads set up theirs (single issuer, deferred task work), and nothing else (no
//! network, no NVMe). `bench.rs` runs it next to pread/pwrite with QD threads, whose
//! blocking calls the device may serve differently (on this VM it serves 32 threads' O_DIRECT
//! writes up to 3× faster than 32 writes in flight from one thread, fio's io_uring engine
//! included).

#![allow(dead_code)] // bench.rs includes this file as a module
#![allow(unsafe_code)]

use io_uring::{opcode, types, IoUring};
use rand::{Rng, SeedableRng};
use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

const ALIGN: usize = 4096;

/// Runs for `secs`; returns operations per second (NaN if io_uring is refused).
pub fn run(path: &Path, odirect: bool, write: bool, len: usize, qd: usize, secs: f64) -> f64 {
    let path = path.to_path_buf();
    let t = std::thread::spawn(move || run_on_thread(&path, odirect, write, len, qd, secs));
    t.join().unwrap_or(f64::NAN)
}

fn run_on_thread(path: &Path, odirect: bool, write: bool, len: usize, qd: usize, secs: f64) -> f64 {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true);
    if odirect {
        opts.custom_flags(libc::O_DIRECT);
    }
    let Ok(file) = opts.open(path) else {
        return f64::NAN;
    };
    let Ok(size) = file.metadata().map(|m| m.len()) else {
        return f64::NAN;
    };
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(256)
        .or_else(|_| IoUring::new(256));
    let Ok(mut ring) = ring else {
        return f64::NAN;
    };
    let fd = types::Fd(file.as_raw_fd());
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    // One aligned buffer per slot, carved out of one allocation.
    let mut backing = vec![0x5au8; qd * len + ALIGN];
    let base = backing.as_ptr().align_offset(ALIGN).min(ALIGN);
    let bufs: Vec<*mut u8> = (0..qd)
        // SAFETY: base + i * len + len <= backing.len() for every slot.
        .map(|i| unsafe { backing.as_mut_ptr().add(base + i * len) })
        .collect();
    let slots = size / len as u64;
    let push = |ring: &mut IoUring, rng: &mut rand::rngs::StdRng, i: usize| {
        let off = rng.gen_range(0..slots) * len as u64;
        let e = if write {
            opcode::Write::new(fd, bufs[i], len as u32).offset(off).build()
        } else {
            opcode::Read::new(fd, bufs[i], len as u32).offset(off).build()
        }
        .user_data(i as u64);
        // SAFETY: slot i's buffer lives in `backing` until every operation is reaped (the
        // loop below drains all before returning), and only one operation uses it at a time.
        unsafe { ring.submission().push(&e) }.is_ok()
    };
    for i in 0..qd {
        if !push(&mut ring, &mut rng, i) {
            return f64::NAN;
        }
    }
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut done = 0u64;
    let mut inflight = qd;
    let mut reaped = Vec::with_capacity(qd);
    while inflight > 0 {
        if ring.submit_and_wait(1).is_err() {
            break;
        }
        reaped.extend(ring.completion().map(|c| (c.user_data() as usize, c.result())));
        let more = Instant::now() < end;
        for (i, res) in reaped.drain(..) {
            inflight -= 1;
            if res != len as i32 {
                eprintln!("uring: operation failed: {res}");
                continue;
            }
            done += 1;
            if more && push(&mut ring, &mut rng, i) {
                inflight += 1;
            }
        }
    }
    let rate = done as f64 / start.elapsed().as_secs_f64();
    if inflight > 0 {
        // The ring failed with operations in flight: never free their buffers.
        std::mem::forget(backing);
    }
    rate
}
