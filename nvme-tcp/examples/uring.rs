//! The file side's floor for a single-threaded asynchronous server: one thread keeps QD
//! random reads or writes in flight on the file through one io_uring, as the target's queue
//! threads do, and nothing else (no
//! network, no NVMe). `bench.rs` runs it next to pread/pwrite with QD threads, whose
//! blocking calls the device may serve differently (on this VM it serves 32 threads' O_DIRECT
//! writes up to 3× faster than 32 writes in flight from one thread, fio's io_uring engine
//! included).
//!
//! `cargo run --release -p nvme-tcp --example uring [-- <seconds per case> [file]]` runs it
//! alone against pread/pwrite with as many threads (4 KiB, O_DIRECT, QD 1/32/128).

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
    if qd == 0 {
        return f64::NAN;
    }
    let fd = types::Fd(file.as_raw_fd());
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    // One aligned buffer per slot, carved out of one allocation (declared before the ring,
    // so it is freed after it on every path).
    let mut backing = vec![0x5au8; qd * len + ALIGN];
    let base = backing.as_ptr().align_offset(ALIGN).min(ALIGN);
    let bufs: Vec<*mut u8> = (0..qd)
        // SAFETY: base + i * len + len <= backing.len() for every slot.
        .map(|i| unsafe { backing.as_mut_ptr().add(base + i * len) })
        .collect();
    let slots = size / len as u64;
    let Ok(mut ring) = IoUring::new(256) else {
        return f64::NAN;
    };
    // The buffers registered with the ring, as the target registers its pool (READ_FIXED /
    // WRITE_FIXED: pinned once, not per operation); the floor is the best such a thread does.
    let iov = libc::iovec {
        iov_base: bufs[0].cast(),
        iov_len: qd * len,
    };
    // SAFETY: the ring is dropped before `backing`, and no operation is in flight by then
    // (or the memory is leaked, below).
    let fixed = match unsafe { ring.submitter().register_buffers(&[iov]) } {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "uring: {} KiB of buffers not registered ({e}): plain reads and writes",
                (qd * len) >> 10
            );
            false
        }
    };
    let push = |ring: &mut IoUring, rng: &mut rand::rngs::StdRng, i: usize| {
        let off = rng.gen_range(0..slots) * len as u64;
        let n = len as u32;
        let e = match (write, fixed) {
            (true, true) => opcode::WriteFixed::new(fd, bufs[i], n, 0)
                .offset(off)
                .build(),
            (true, false) => opcode::Write::new(fd, bufs[i], n).offset(off).build(),
            (false, true) => opcode::ReadFixed::new(fd, bufs[i], n, 0)
                .offset(off)
                .build(),
            (false, false) => opcode::Read::new(fd, bufs[i], n).offset(off).build(),
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
        reaped.extend(
            ring.completion()
                .map(|c| (c.user_data() as usize, c.result())),
        );
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
    drop(ring);
    if inflight > 0 {
        // The ring failed with operations in flight: never free their buffers.
        std::mem::forget(backing);
    }
    rate
}

fn main() {
    use std::os::unix::fs::FileExt;
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let dir = std::env::temp_dir().join(format!("nvme-uring-{}", std::process::id()));
    let path = args
        .next()
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let _ = std::fs::create_dir_all(&dir);
            dir.join("uring.img")
        });
    let size = 256u64 << 20;
    if std::fs::metadata(&path).map_or(true, |m| m.len() < size) {
        let Ok(f) = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        else {
            eprintln!("cannot create {}", path.display());
            return;
        };
        let chunk = vec![0xa5u8; 1 << 20];
        for i in 0..size >> 20 {
            let _ = f.write_all_at(&chunk, i << 20);
        }
        let _ = f.sync_all();
    }
    println!(
        "{:<6} {:>4} {:>12} {:>12} {:>6}",
        "op", "qd", "pread/wr/s", "io_uring/s", "ratio"
    );
    for write in [false, true] {
        for qd in [1usize, 32, 128] {
            let p = threads(&path, write, qd, secs);
            let u = run(&path, true, write, 4096, qd, secs);
            let op = if write { "write" } else { "read" };
            println!("{op:<6} {qd:>4} {p:>12.0} {u:>12.0} {:>6.2}", u / p);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `qd` threads each doing O_DIRECT 4 KiB pread or pwrite at random offsets.
fn threads(path: &Path, write: bool, qd: usize, secs: f64) -> f64 {
    use std::os::unix::fs::FileExt;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let ts: Vec<_> = (0..qd)
        .map(|t| {
            let (stop, count, path) = (stop.clone(), count.clone(), path.to_path_buf());
            std::thread::spawn(move || {
                let Ok(f) = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&path)
                else {
                    return;
                };
                let slots = f.metadata().map_or(1, |m| m.len() / 4096).max(1);
                let mut rng = rand::rngs::StdRng::seed_from_u64(t as u64);
                let mut backing = vec![0u8; 2 * ALIGN];
                let o = backing.as_ptr().align_offset(ALIGN).min(ALIGN);
                let buf = &mut backing[o..o + 4096];
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let off = rng.gen_range(0..slots) * 4096;
                    let ok = if write {
                        f.write_all_at(buf, off).is_ok()
                    } else {
                        f.read_exact_at(buf, off).is_ok()
                    };
                    if !ok {
                        break;
                    }
                    n += 1;
                }
                count.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for t in ts {
        let _ = t.join();
    }
    count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}
