//! What encoding and decoding one PDU costs, per PDU kind the I/O path sends: CapsuleCmd
//! (header only, as a read or a transport-SGL write), CapsuleResp, H2CData and C2HData of
//! 4 KiB (the vectored encode the senders use, so the data is not copied; decode of a shared
//! buffer, as the receive loops do) and R2T. No digests: CRC32C would dominate and is not
//! the codec. Prints nanoseconds per operation, the median of `rounds` rounds.
//!
//! `cargo run --release -p nvme-tcp --example pdu_codec [-- <rounds> [iterations]]`
//! `PDU_ONLY=R2T` (a substring of the names) and `PDU_OP=encode` (or `decode`) narrow it
//! down, e.g. to count one case's instructions with `perf stat -e instructions:u`, which a
//! loaded machine does not blur as it does the times.

use bytes::Bytes;
use nvme_tcp::pdu::{sgl_id, Cqe, DataPdu, Digests, IoOpc, Pdu, R2t, Rules, Sgl, Side, Sqe, Stage};
use nvme_tcp::Status;
use std::hint::black_box;
use std::time::Instant;

fn rules(receiver: Side) -> Rules {
    Rules {
        receiver,
        stage: Stage::Ready,
        digests: Digests::default(),
        max_capsule_data: 8192,
        max_data_pdu: 131072,
    }
}

fn cases() -> Vec<(&'static str, Pdu, Side)> {
    let mut sqe = Sqe::new(IoOpc::WRITE.0);
    sqe.set_cid(17);
    sqe.set_nsid(1);
    sqe.set_cdw(10, 4096);
    sqe.set_cdw(12, 7);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 4096,
        id: sgl_id::TRANSPORT,
    });
    let data = Bytes::from(vec![0x5au8; 4096]);
    vec![
        (
            "CapsuleCmd",
            Pdu::CapsuleCmd(sqe, Bytes::new()),
            Side::Controller,
        ),
        (
            "CapsuleResp",
            Pdu::CapsuleResp(Cqe {
                dw0: 0,
                dw1: 0,
                sqhd: 12,
                sqid: 1,
                cid: 17,
                status: Status::SUCCESS,
            }),
            Side::Host,
        ),
        (
            "H2CData 4K",
            Pdu::H2cData(DataPdu {
                cccid: 17,
                ttag: 3,
                datao: 0,
                last: true,
                success: false,
                data: data.clone(),
            }),
            Side::Controller,
        ),
        (
            "C2HData 4K",
            Pdu::C2hData(DataPdu::c2h_whole(17, data)),
            Side::Host,
        ),
        (
            "R2T",
            Pdu::R2t(R2t {
                cccid: 17,
                ttag: 3,
                r2to: 0,
                r2tl: 4096,
            }),
            Side::Host,
        ),
    ]
}

/// Nanoseconds per encode (into a reused vector, as the send paths do).
fn encode_ns(p: &Pdu, iters: u32) -> f64 {
    let mut out = Vec::with_capacity(256);
    let t = Instant::now();
    for _ in 0..iters {
        out.clear();
        let v = black_box(p).encode_vectored(Digests::default(), &mut out);
        black_box((&out, v));
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

/// Nanoseconds per decode of the whole PDU held in `Bytes`.
fn decode_ns(wire: &Bytes, r: &Rules, iters: u32) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        let p = Pdu::decode_shared(black_box(wire), r);
        black_box(&p);
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(7);
    let iters: u32 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let only = std::env::var("PDU_ONLY").unwrap_or_default();
    let op = std::env::var("PDU_OP").unwrap_or_default();
    println!("{:<12} {:>10} {:>10}", "PDU", "encode ns", "decode ns");
    for (name, p, side) in cases().into_iter().filter(|c| c.0.contains(&only)) {
        let mut wire = Vec::new();
        p.encode(Digests::default(), &mut wire);
        let wire = Bytes::from(wire);
        let r = rules(side);
        assert_eq!(Pdu::decode_shared(&wire, &r).as_ref(), Ok(&p));
        let (mut enc, mut dec) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            if op != "decode" {
                enc.push(encode_ns(&p, iters));
            }
            if op != "encode" {
                dec.push(decode_ns(&wire, &r, iters));
            }
        }
        println!("{name:<12} {:>10.1} {:>10.1}", median(enc), median(dec));
    }
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!("load {}", l.trim());
    }
}
