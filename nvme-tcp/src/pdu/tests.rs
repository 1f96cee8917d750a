use super::*;
use crate::status::Status;

fn rules(receiver: Side, dg: Digests) -> Rules {
    Rules {
        receiver,
        stage: Stage::Ready,
        digests: dg,
        max_capsule_data: 8192,
        max_data_pdu: 131072,
    }
}

fn round_trip(p: Pdu, receiver: Side, dg: Digests) -> Pdu {
    let mut v = Vec::new();
    p.encode(dg, &mut v);
    Pdu::decode(&v, &rules(receiver, dg)).unwrap()
}

/// Every combination of header and data digests.
const DIGESTS: [Digests; 4] = [
    Digests {
        header: false,
        data: false,
    },
    Digests {
        header: true,
        data: true,
    },
    Digests {
        header: true,
        data: false,
    },
    Digests {
        header: false,
        data: true,
    },
];

#[test]
fn every_pdu_round_trips_with_and_without_digests() {
    for dg in DIGESTS {
        let mut sqe = Sqe::new(0x01);
        sqe.set_cid(5);
        let cases = vec![
            (
                Pdu::CapsuleCmd(sqe, Bytes::from_static(b"abcdefgh")),
                Side::Controller,
            ),
            (Pdu::CapsuleCmd(sqe, Bytes::new()), Side::Controller),
            (
                Pdu::CapsuleResp(Cqe {
                    dw0: 7,
                    dw1: 0,
                    sqhd: 1,
                    sqid: 2,
                    cid: 5,
                    status: Status::SUCCESS,
                }),
                Side::Host,
            ),
            (
                Pdu::H2cData(DataPdu {
                    cccid: 5,
                    ttag: 9,
                    datao: 4096,
                    last: true,
                    success: false,
                    data: Bytes::from(vec![3u8; 4096]),
                }),
                Side::Controller,
            ),
            (
                Pdu::C2hData(DataPdu::c2h_whole(5, Bytes::from(vec![4u8; 100]))),
                Side::Host,
            ),
            (
                Pdu::R2t(R2t {
                    cccid: 5,
                    ttag: 1,
                    r2to: 0,
                    r2tl: 8192,
                }),
                Side::Host,
            ),
            (
                Pdu::C2hTermReq(TermReq {
                    fes: Fes::PDU_SEQUENCE,
                    fei: 0,
                    data: vec![1, 2, 3],
                }),
                Side::Host,
            ),
        ];
        for (p, side) in cases {
            assert_eq!(round_trip(p.clone(), side, dg), p);
        }
    }
}

#[test]
fn ic_pdus_round_trip_before_ready() {
    let req = Pdu::IcReq(IcReq {
        pfv: 0,
        hpda: 0,
        digests: Digests {
            header: true,
            data: false,
        },
        maxr2t: 0,
    });
    let mut v = Vec::new();
    req.encode(
        Digests {
            header: true,
            data: true,
        },
        &mut v,
    );
    assert_eq!(v.len(), 128);
    let mut r = rules(Side::Controller, Digests::default());
    r.stage = Stage::AwaitIc;
    assert_eq!(Pdu::decode(&v, &r).unwrap(), req);
    // An ICReq once the connection is up is out of sequence.
    r.stage = Stage::Ready;
    assert_eq!(
        Pdu::decode(&v, &r),
        Err(DecodeError::Fatal(Fatal {
            fes: Fes::PDU_SEQUENCE,
            fei: 0
        }))
    );
}

fn fatal_of(bytes: &[u8], r: &Rules) -> Fatal {
    match Pdu::decode(bytes, r) {
        Err(DecodeError::Fatal(f)) => f,
        other => panic!("expected fatal, got {other:?}"),
    }
}

#[test]
fn lowest_bad_field_is_reported_first() {
    let r = rules(Side::Controller, Digests::default());
    let mut v = Vec::new();
    Pdu::CapsuleCmd(Sqe::new(0), Bytes::from_static(b"data")).encode(Digests::default(), &mut v);
    // Wrong direction type.
    let mut b = v.clone();
    b[0] = PduType::CAPSULE_RESP.0;
    assert_eq!(fatal_of(&b, &r), Fatal::field(0));
    // Bad flags and bad hlen: flags (offset 1) wins.
    let mut b = v.clone();
    b[1] = flags::LAST_PDU;
    b[2] = 10;
    assert_eq!(fatal_of(&b, &r), Fatal::field(1));
    let mut b = v.clone();
    b[2] = 10;
    assert_eq!(fatal_of(&b, &r), Fatal::field(2));
    let mut b = v.clone();
    b[3] = 3;
    assert_eq!(fatal_of(&b, &r), Fatal::field(3));
    // Header digest flag without negotiation.
    let mut b = v.clone();
    b[1] = flags::HDGSTF;
    assert_eq!(fatal_of(&b, &r), Fatal::field(1));
    // In-capsule data beyond the limit.
    let mut big = Vec::new();
    Pdu::CapsuleCmd(Sqe::new(1), Bytes::from(vec![0u8; 9000])).encode(Digests::default(), &mut big);
    assert_eq!(fatal_of(&big, &r).fes, Fes::DATA_LIMIT_EXCEEDED);
}

#[test]
fn digest_errors() {
    let dg = Digests {
        header: true,
        data: true,
    };
    let r = rules(Side::Controller, dg);
    let mut v = Vec::new();
    let mut sqe = Sqe::new(1);
    sqe.set_cid(77);
    Pdu::CapsuleCmd(sqe, Bytes::from_static(b"12345678")).encode(dg, &mut v);
    let mut b = v.clone();
    b[20] ^= 1; // inside the SQE: header digest fails
    assert_eq!(fatal_of(&b, &r).fes, Fes::HEADER_DIGEST);
    let mut b = v.clone();
    let n = b.len();
    b[n - 6] ^= 1; // inside the data: data digest fails, not fatal
    assert_eq!(
        Pdu::decode(&b, &r),
        Err(DecodeError::DataDigest {
            pdu_type: PduType::CAPSULE_CMD,
            cccid: 77,
            ttag: 0,
            datal: 8
        })
    );
}

#[test]
fn icresp_checks_the_fields_linux_checks() {
    let mut r = rules(Side::Host, Digests::default());
    r.stage = Stage::AwaitIc;
    let mut v = Vec::new();
    Pdu::IcResp(IcResp {
        pfv: 0,
        cpda: 0,
        digests: Digests::default(),
        maxh2cdata: 1000,
    })
    .encode(Digests::default(), &mut v);
    assert_eq!(fatal_of(&v, &r), Fatal::field(12));
    let mut v = Vec::new();
    Pdu::IcResp(IcResp {
        pfv: 1,
        cpda: 0,
        digests: Digests::default(),
        maxh2cdata: 4096,
    })
    .encode(Digests::default(), &mut v);
    assert_eq!(
        fatal_of(&v, &r),
        Fatal {
            fes: Fes::UNSUPPORTED_PARAMETER,
            fei: 8
        }
    );
}

#[test]
fn data_pdu_length_must_match_datal() {
    let r = rules(Side::Controller, Digests::default());
    let mut v = Vec::new();
    Pdu::H2cData(DataPdu {
        cccid: 1,
        ttag: 1,
        datao: 0,
        last: true,
        success: false,
        data: Bytes::from_static(b"abcd"),
    })
    .encode(Digests::default(), &mut v);
    v[16] = 5;
    assert_eq!(fatal_of(&v, &r), Fatal::field(16));
}

#[test]
fn garbage_never_panics() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for side in [Side::Controller, Side::Host] {
        for stage in [Stage::AwaitIc, Stage::Ready] {
            let mut r = rules(
                side,
                Digests {
                    header: rng.gen(),
                    data: rng.gen(),
                },
            );
            r.stage = stage;
            for _ in 0..20000 {
                let n = rng.gen_range(0..200);
                let mut b: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                if n >= 8 {
                    b[0] = rng.gen_range(0..10);
                    b[4..8].copy_from_slice(&(n as u32).to_le_bytes());
                }
                let _ = Pdu::decode(&b, &r);
            }
        }
    }
}

/// A vectored encoding, spliced back together (the data put in at the offset it names), is
/// byte for byte the plain encoding, with and without digests; PDUs without data come out
/// whole.
#[test]
fn vectored_encoding_splices_into_the_plain_one() {
    let c2h = |n: usize| {
        Pdu::C2hData(DataPdu::c2h_whole(
            3,
            Bytes::from((0..n).map(|i| i as u8).collect::<Vec<u8>>()),
        ))
    };
    let resp = Pdu::CapsuleResp(Cqe {
        dw0: 1,
        dw1: 2,
        sqhd: 3,
        sqid: 1,
        cid: 3,
        status: Status::SUCCESS,
    });
    for dg in DIGESTS {
        for p in [c2h(4096), c2h(1), resp.clone()] {
            let mut plain = b"before".to_vec();
            p.encode(dg, &mut plain);
            let mut out = b"before".to_vec();
            let got = match p.encode_vectored(dg, &mut out) {
                Some((at, data)) => {
                    assert!(matches!(p, Pdu::C2hData(_)), "{p:?} split");
                    let mut v = out[..at].to_vec();
                    v.extend_from_slice(&data);
                    v.extend_from_slice(&out[at..]);
                    v
                }
                None => {
                    assert!(matches!(p, Pdu::CapsuleResp(_)), "{p:?} not split");
                    out
                }
            };
            assert_eq!(got, plain, "{p:?} {dg:?}");
        }
    }
}

/// One encoding of every PDU kind, byte for byte as NVMe/TCP 1.0 §3.6.2 lays it out (common
/// header, then the type's fields little-endian at their offsets), so a change to the codec
/// cannot move a field while still round-tripping.
#[test]
fn each_pdu_kind_has_its_wire_bytes() {
    let none = Digests::default();
    let enc = |p: &Pdu, dg: Digests| {
        let mut v = Vec::new();
        p.encode(dg, &mut v);
        v
    };
    let pad = |mut v: Vec<u8>, to: usize| {
        v.resize(to, 0);
        v
    };

    let ic_req = Pdu::IcReq(IcReq {
        pfv: 0,
        hpda: 0,
        digests: Digests {
            header: true,
            data: false,
        },
        maxr2t: 3,
    });
    let want = pad(
        vec![0, 0, 128, 0, 128, 0, 0, 0, 0, 0, 0, 1, 3, 0, 0, 0],
        128,
    );
    assert_eq!(enc(&ic_req, none), want);

    let ic_resp = Pdu::IcResp(IcResp {
        pfv: 0,
        cpda: 0,
        digests: Digests {
            header: true,
            data: true,
        },
        maxh2cdata: 0x0002_0000,
    });
    let want = pad(
        vec![1, 0, 128, 0, 128, 0, 0, 0, 0, 0, 0, 3, 0, 0, 2, 0],
        128,
    );
    assert_eq!(enc(&ic_resp, none), want);

    // TermReq: never digested, its data right after the 24-byte header with PDO 0.
    let term = Pdu::C2hTermReq(TermReq {
        fes: Fes::PDU_SEQUENCE,
        fei: 0x0102_0304,
        data: vec![0xa, 0xb, 0xc],
    });
    let mut want = pad(vec![3, 0, 24, 0, 27, 0, 0, 0, 2, 0, 4, 3, 2, 1], 24);
    want.extend_from_slice(&[0xa, 0xb, 0xc]);
    assert_eq!(enc(&term, DIGESTS[1]), want);

    let mut sqe = Sqe::new(IoOpc::WRITE.0);
    sqe.set_cid(0x1234);
    sqe.set_nsid(1);
    let cmd = Pdu::CapsuleCmd(sqe, Bytes::from_static(b"ab"));
    let mut want = vec![4, 0, 72, 72, 74, 0, 0, 0];
    want.extend_from_slice(&sqe.0);
    want.extend_from_slice(b"ab");
    assert_eq!(&sqe.0[..8], &[1, 0, 0x34, 0x12, 1, 0, 0, 0]);
    assert_eq!(enc(&cmd, none), want);
    // Both digests: HDGSTF|DDGSTF, PDO after the header digest, the data digest last.
    let mut want = vec![4, 3, 72, 76, 82, 0, 0, 0];
    want.extend_from_slice(&sqe.0);
    want.extend_from_slice(&crc32c::crc32c(&want).to_le_bytes());
    want.extend_from_slice(b"ab");
    want.extend_from_slice(&crc32c::crc32c(b"ab").to_le_bytes());
    assert_eq!(enc(&cmd, DIGESTS[1]), want);

    let resp = Pdu::CapsuleResp(Cqe {
        dw0: 0x1122_3344,
        dw1: 0x5566_7788,
        sqhd: 5,
        sqid: 1,
        cid: 0x1234,
        status: Status::INVALID_FIELD,
    });
    let want = vec![
        5, 0, 24, 0, 24, 0, 0, 0, 0x44, 0x33, 0x22, 0x11, 0x88, 0x77, 0x66, 0x55, 5, 0, 1, 0, 0x34,
        0x12, 0x04, 0x80,
    ];
    assert_eq!(enc(&resp, none), want);

    let h2c = Pdu::H2cData(DataPdu {
        cccid: 0x1234,
        ttag: 7,
        datao: 0x1000,
        last: true,
        success: false,
        data: Bytes::from_static(&[9, 9, 9, 9]),
    });
    let want = vec![
        6, 4, 24, 24, 28, 0, 0, 0, 0x34, 0x12, 7, 0, 0, 0x10, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 9, 9,
        9, 9,
    ];
    assert_eq!(enc(&h2c, none), want);

    let c2h = Pdu::C2hData(DataPdu {
        success: true,
        ..DataPdu::c2h_whole(0x1234, Bytes::from_static(&[8, 8]))
    });
    let want = vec![
        7, 0x0c, 24, 24, 26, 0, 0, 0, 0x34, 0x12, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 8, 8,
    ];
    assert_eq!(enc(&c2h, none), want);

    let r2t = Pdu::R2t(R2t {
        cccid: 0x1234,
        ttag: 7,
        r2to: 0x1000,
        r2tl: 0x2000,
    });
    let want = vec![
        9, 0, 24, 0, 24, 0, 0, 0, 0x34, 0x12, 7, 0, 0, 0x10, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0,
    ];
    assert_eq!(enc(&r2t, none), want);
    // Header digest only: HDGSTF, PLEN grows by the digest, PDO stays 0 (no data).
    let mut want_hd = want.clone();
    want_hd[1] = 1;
    want_hd[4] = 28;
    want_hd.extend_from_slice(&crc32c::crc32c(&want_hd).to_le_bytes());
    assert_eq!(enc(&r2t, DIGESTS[2]), want_hd);

    for (p, side) in [
        (ic_req, Side::Controller),
        (cmd, Side::Controller),
        (h2c, Side::Controller),
        (resp, Side::Host),
        (c2h, Side::Host),
        (r2t, Side::Host),
        (term, Side::Host),
    ] {
        let wire = enc(&p, none);
        let r = Rules {
            stage: if matches!(p, Pdu::IcReq(_)) {
                Stage::AwaitIc
            } else {
                Stage::Ready
            },
            ..rules(side, none)
        };
        assert_eq!(Pdu::decode(&wire, &r), Ok(p));
    }
}
