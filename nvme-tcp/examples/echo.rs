//! The transport's floor on this machine: a minimal loopback "echo" with the PDU sizes of
//! NVMe/TCP 4 KiB and 128 KiB reads and writes, and nothing else (no NVMe, no file, no
//! runtime). A client thread keeps QD requests outstanding on one TCP connection; a server
//! thread answers each with a response of the size our target sends. Both ends batch the
//! way a careful blocking program does: one `read` takes whatever has arrived, and all the
//! answers (or new requests) it makes possible leave in one `write`.
//!
//! `cargo run --release -p nvme-tcp --example echo [-- <seconds per case> [rounds]]`
//!
//! Sizes (no digests): a Read is a 72-byte CapsuleCmd answered by a 24-byte C2HData header,
//! the data and a 16-byte CapsuleResp; a Write of ≤ 8 KiB is a CapsuleCmd carrying the data
//! in-capsule, answered by a CapsuleResp. (A 128 KiB write really takes an R2T round trip;
//! the echo sends it in-capsule: the floor is a lower bound.) `bench.rs` runs the same
//! cells through this module (`#[path]`) in its own interleaved rounds.

#![allow(dead_code)] // bench.rs includes this file as a module and uses only part of it

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const CMD: usize = 72;
pub const C2H_HDR: usize = 24;
pub const RESP: usize = 16;

/// (request bytes, response bytes) of one I/O of `len` bytes.
pub fn sizes(write: bool, len: usize) -> (usize, usize) {
    if write {
        (CMD + len, RESP)
    } else {
        (CMD, C2H_HDR + len + RESP)
    }
}

/// Reads into `buf`, counting how many whole messages of `unit` bytes have now arrived
/// (`carry` keeps the partial one's bytes across reads).
fn arrived(s: &mut TcpStream, buf: &mut [u8], unit: usize, carry: &mut usize) -> Option<usize> {
    match s.read(buf) {
        Ok(0) | Err(_) => None,
        Ok(n) => {
            *carry += n;
            let whole = *carry / unit;
            *carry %= unit;
            Some(whole)
        }
    }
}

/// Runs `qd` outstanding request/response exchanges for `secs`; returns exchanges per second.
pub fn run(qd: usize, req: usize, resp: usize, secs: f64) -> f64 {
    let Ok(l) = TcpListener::bind("127.0.0.1:0") else {
        return f64::NAN;
    };
    let Ok(addr) = l.local_addr() else {
        return f64::NAN;
    };
    let server = std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        let _ = s.set_nodelay(true);
        let mut buf = vec![0u8; 1 << 20];
        let answer = vec![0x5au8; resp * qd.max(1)];
        let mut carry = 0;
        while let Some(n) = arrived(&mut s, &mut buf, req, &mut carry) {
            if n > 0 && s.write_all(&answer[..n * resp]).is_err() {
                return;
            }
        }
    });
    let Ok(mut c) = TcpStream::connect(addr) else {
        return f64::NAN;
    };
    let _ = c.set_nodelay(true);
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(secs));
            stop.store(true, Ordering::Relaxed);
        })
    };
    let request = vec![0xa5u8; req * qd];
    let mut buf = vec![0u8; 1 << 20];
    let start = Instant::now();
    let mut done = 0u64;
    let mut carry = 0;
    let mut outstanding = qd;
    if c.write_all(&request).is_err() {
        return f64::NAN;
    }
    while outstanding > 0 {
        let Some(n) = arrived(&mut c, &mut buf, resp, &mut carry) else {
            break;
        };
        done += n as u64;
        outstanding -= n;
        if !stop.load(Ordering::Relaxed) && n > 0 {
            if c.write_all(&request[..n * req]).is_err() {
                break;
            }
            outstanding += n;
        }
    }
    let rate = done as f64 / start.elapsed().as_secs_f64();
    drop(c);
    let _ = server.join();
    let _ = timer.join();
    rate
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let rounds: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3);
    println!("loopback echo, {secs} s per case, medians of {rounds} rounds");
    println!(
        "{:<6} {:>7} {:>4} {:>12} {:>10}",
        "op", "size", "qd", "exchanges/s", "µs/exch"
    );
    for write in [false, true] {
        for len in [4096usize, 128 * 1024] {
            for qd in [1usize, 32, 128] {
                let (req, resp) = sizes(write, len);
                let mut v: Vec<f64> = (0..rounds).map(|_| run(qd, req, resp, secs)).collect();
                v.sort_by(|a, b| a.total_cmp(b));
                let m = v[v.len() / 2];
                let op = if write { "write" } else { "read" };
                println!(
                    "{op:<6} {:>6}K {qd:>4} {m:>12.0} {:>10.1}",
                    len / 1024,
                    1e6 / m
                );
            }
        }
    }
}
