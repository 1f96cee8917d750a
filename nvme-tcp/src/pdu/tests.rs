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
