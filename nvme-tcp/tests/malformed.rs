//! Malformed PDUs from a host are answered with a C2HTermReq and a closed connection, never
//! a panic; the target keeps serving other hosts.

mod common;
use bytes::Bytes;
use common::*;
use nvme_tcp::pdu::{sgl_id, ConnectData, DataPdu, Digests, FcType, Fes, IcReq, Pdu, Sgl, Sqe};
use nvme_tcp::Initiator;
use rand::{Rng, SeedableRng};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn enc(p: &Pdu, dg: Digests) -> Vec<u8> {
    let mut v = Vec::new();
    p.encode(dg, &mut v);
    v
}

/// Connects and completes ICReq/ICResp.
async fn raw(addr: SocketAddr, dg: Digests) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&enc(
        &Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests: dg,
            maxr2t: 0,
        }),
        dg,
    ))
    .await
    .unwrap();
    let mut resp = [0u8; 128];
    s.read_exact(&mut resp).await.unwrap();
    assert_eq!(resp[0], 1, "ICResp");
    assert_eq!(resp[11], dg.bits(), "digests echoed");
    assert_eq!(resp[10], 0, "CPDA");
    s
}

/// Reads everything until EOF; returns the first PDU's bytes if it is a C2HTermReq.
async fn read_to_eof(s: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut all))
        .await
        .expect("connection must close")
        .ok();
    all
}

/// Asserts the stream ends with exactly one C2HTermReq carrying (fes, fei).
async fn expect_term(s: &mut TcpStream, fes: Fes, fei: u32) {
    let all = read_to_eof(s).await;
    assert!(all.len() >= 24, "expected a TermReq, got {all:?}");
    assert_eq!(all[0], 0x03, "C2HTermReq");
    let plen = u32::from_le_bytes(all[4..8].try_into().unwrap()) as usize;
    assert!((24..=152).contains(&plen));
    assert_eq!(all.len(), plen, "nothing after the TermReq");
    assert_eq!(u16::from_le_bytes([all[8], all[9]]), fes.0);
    assert_eq!(u32::from_le_bytes(all[10..14].try_into().unwrap()), fei);
}

type Mutation = Box<dyn Fn(&mut Vec<u8>)>;

fn connect_pdu(qid: u16) -> Vec<u8> {
    let mut sqe = Sqe::fabrics(FcType::CONNECT);
    sqe.0[42..44].copy_from_slice(&qid.to_le_bytes());
    sqe.0[44..46].copy_from_slice(&31u16.to_le_bytes());
    let d = ConnectData {
        hostid: [5; 16],
        cntlid: 0xFFFF,
        subnqn: NQN.into(),
        hostnqn: "nqn.x:raw".into(),
    }
    .encode();
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 1024,
        id: sgl_id::DATA_OFFSET,
    });
    enc(&Pdu::CapsuleCmd(sqe, Bytes::from(d)), Digests::default())
}

#[tokio::test]
async fn bad_first_pdu_and_bad_icreq() {
    let r = rig(64, None).await;
    let addr = r.target.local_addr();
    // Not an ICReq type at all.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0x55, 0, 8, 0, 8, 0, 0, 0]).await.unwrap();
    expect_term(&mut s, Fes::INVALID_HEADER_FIELD, 0).await;
    // A CapsuleCmd before ICReq: PDU sequence error.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&connect_pdu(0)).await.unwrap();
    expect_term(&mut s, Fes::PDU_SEQUENCE, 0).await;
    // ICReq with an unsupported PFV.
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut ic = enc(
        &Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests: Digests::default(),
            maxr2t: 0,
        }),
        Digests::default(),
    );
    ic[8] = 1;
    s.write_all(&ic).await.unwrap();
    expect_term(&mut s, Fes::UNSUPPORTED_PARAMETER, 8).await;
    // ICReq with a wrong PLEN.
    let mut s = TcpStream::connect(addr).await.unwrap();
    ic[8] = 0;
    ic[4] = 64;
    s.write_all(&ic[..64]).await.unwrap();
    expect_term(&mut s, Fes::INVALID_HEADER_FIELD, 4).await;
}

#[tokio::test]
async fn bad_headers_after_icreq() {
    let r = rig(64, None).await;
    let addr = r.target.local_addr();
    let good = connect_pdu(0);
    // Each case: (mutation, expected FES, FEI).
    let cases: Vec<(Mutation, Fes, u32)> = vec![
        (Box::new(|b| b[0] = 0x05), Fes::INVALID_HEADER_FIELD, 0), // CapsuleResp from a host
        (Box::new(|b| b[0] = 0x00), Fes::PDU_SEQUENCE, 0),         // second ICReq
        (Box::new(|b| b[1] = 0x04), Fes::INVALID_HEADER_FIELD, 1), // LAST_PDU on a capsule
        (Box::new(|b| b[1] = 0x01), Fes::INVALID_HEADER_FIELD, 1), // HDGSTF not negotiated
        (Box::new(|b| b[2] = 71), Fes::INVALID_HEADER_FIELD, 2),   // HLEN
        (Box::new(|b| b[3] = 70), Fes::INVALID_HEADER_FIELD, 3),   // PDO inside header
        (
            Box::new(|b| b[4..8].copy_from_slice(&70u32.to_le_bytes())),
            Fes::INVALID_HEADER_FIELD,
            4,
        ),
        (
            Box::new(|b| b[4..8].copy_from_slice(&(1u32 << 30).to_le_bytes())),
            Fes::DATA_LIMIT_EXCEEDED,
            4,
        ),
    ];
    for (i, (mutate, fes, fei)) in cases.into_iter().enumerate() {
        let mut s = raw(addr, Digests::default()).await;
        let mut b = good.clone();
        mutate(&mut b);
        s.write_all(&b).await.unwrap();
        let _ = s.shutdown().await;
        let all = read_to_eof(&mut s).await;
        assert_eq!(all.first(), Some(&0x03), "case {i}: {all:?}");
        assert_eq!(u16::from_le_bytes([all[8], all[9]]), fes.0, "case {i}");
        assert_eq!(
            u32::from_le_bytes(all[10..14].try_into().unwrap()),
            fei,
            "case {i}"
        );
    }
}

#[tokio::test]
async fn header_digest_error_and_stray_h2c_data() {
    let r = rig(64, None).await;
    let addr = r.target.local_addr();
    let dg = Digests {
        header: true,
        data: true,
    };
    let mut s = raw(addr, dg).await;
    let mut sqe = Sqe::new(0x06);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 4096,
        id: sgl_id::TRANSPORT,
    });
    let mut b = enc(&Pdu::CapsuleCmd(sqe, Bytes::new()), dg);
    b[30] ^= 0xFF;
    s.write_all(&b).await.unwrap();
    expect_term(&mut s, Fes::HEADER_DIGEST, 0).await;
    // H2CData for a transfer tag that was never sent in an R2T.
    let mut s = raw(addr, Digests::default()).await;
    s.write_all(&connect_pdu(0)).await.unwrap();
    let mut resp = [0u8; 24];
    s.read_exact(&mut resp).await.unwrap();
    assert_eq!(resp[0], 0x05, "Connect answered");
    let d = DataPdu {
        cccid: 1,
        ttag: 77,
        datao: 0,
        last: true,
        success: false,
        data: Bytes::from(vec![0u8; 512]),
    };
    s.write_all(&enc(&Pdu::H2cData(d), Digests::default()))
        .await
        .unwrap();
    expect_term(&mut s, Fes::INVALID_HEADER_FIELD, 10).await;
}

#[tokio::test]
async fn commands_before_connect_are_sequence_errors() {
    let r = rig(64, None).await;
    let mut s = raw(r.target.local_addr(), Digests::default()).await;
    let mut sqe = Sqe::new(0x06);
    sqe.set_cid(9);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 4096,
        id: sgl_id::TRANSPORT,
    });
    s.write_all(&enc(
        &Pdu::CapsuleCmd(sqe, Bytes::new()),
        Digests::default(),
    ))
    .await
    .unwrap();
    let mut resp = [0u8; 24];
    s.read_exact(&mut resp).await.unwrap();
    assert_eq!(resp[0], 0x05);
    assert_eq!(u16::from_le_bytes([resp[20], resp[21]]), 9);
    let status = nvme_tcp::Status::from_wire(u16::from_le_bytes([resp[22], resp[23]]));
    assert_eq!(status, nvme_tcp::Status::CMD_SEQ_ERROR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_garbage_never_panics_and_target_keeps_serving() {
    let r = rig(64, None).await;
    let addr = r.target.local_addr();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    for i in 0..150 {
        let mut s = if i % 3 == 0 {
            TcpStream::connect(addr).await.unwrap()
        } else {
            raw(addr, Digests::default()).await
        };
        let n = rng.gen_range(1..400);
        let mut b: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
        if i % 2 == 0 && n > 8 {
            // Plausible type and length so deeper checks run too.
            b[0] = [0x00, 0x02, 0x04, 0x06][rng.gen_range(0..4)];
            b[2] = [24u8, 72, 128][rng.gen_range(0..3)];
            b[4..8].copy_from_slice(&(n as u32).to_le_bytes());
        }
        let _ = s.write_all(&b).await;
        let _ = s.shutdown().await;
        let all = read_to_eof(&mut s).await;
        if let Some(&t) = all.first() {
            // Whatever came back is well formed: an ICResp, responses, or a final TermReq.
            assert!(
                [0x01, 0x03, 0x05, 0x07, 0x09].contains(&t),
                "iteration {i}: {all:?}"
            );
        }
    }
    // A malformed PDU on an I/O queue of a live initiator ends only that connection.
    let ini = Initiator::connect(addr, host("after", 2)).await.unwrap();
    ini.write(1, 3, Bytes::from(vec![9u8; 4096]), BS, false)
        .await
        .unwrap();
    ini.send_raw(Some(1), vec![0x77; 16]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(ini.io_cmd_on(1, Sqe::new(0x00), None, 0).await.is_err());
    let mut flush = Sqe::new(0x00);
    flush.set_nsid(1);
    assert!(ini
        .io_cmd_on(0, flush, None, 0)
        .await
        .unwrap()
        .cqe
        .status
        .is_success());
    let c = ini.io_cmd_on(0, read_sqe(3), None, 4096).await.unwrap();
    assert_eq!(c.data, vec![9u8; 4096]);
}

fn read_sqe(lba: u32) -> Sqe {
    let mut s = Sqe::new(0x02);
    s.set_nsid(1);
    s.set_cdw(10, lba);
    s
}

#[tokio::test]
async fn host_overrunning_its_submission_queue_is_cut_off() {
    let r = rig(64, None).await;
    let mut cfg = host("greedy", 2);
    cfg.queue_depth = 2; // SQSIZE 1: two commands outstanding at most
    let ini = Initiator::connect(r.target.local_addr(), cfg)
        .await
        .unwrap();
    // A slow command keeps the window full while raw capsules pour in behind it.
    let mut burst = Vec::new();
    for cid in 100..140u16 {
        // Flushes: no data comes back (the initiator ignores answers to CIDs it never
        // used), and each costs an fdatasync, so they pile up.
        let mut s = Sqe::new(0x00);
        s.set_cid(cid);
        s.set_nsid(1);
        s.set_sgl(Sgl {
            addr: 0,
            len: 0,
            id: sgl_id::TRANSPORT,
        });
        burst.extend(enc(&Pdu::CapsuleCmd(s, Bytes::new()), Digests::default()));
    }
    ini.send_raw(Some(0), burst);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        ini.io_cmd_on(0, read_sqe(0), None, 4096).await.is_err(),
        "overrun queue closed"
    );
    // The other queue of the same controller still works.
    assert!(ini
        .io_cmd_on(1, read_sqe(0), None, 4096)
        .await
        .unwrap()
        .cqe
        .status
        .is_success());
}

#[tokio::test]
async fn data_digest_error_fails_the_command_not_the_connection() {
    let r = rig(64, None).await;
    let dg = Digests {
        header: true,
        data: true,
    };
    let mut s = raw(r.target.local_addr(), dg).await;
    let connect = |cid: u16| {
        let mut sqe = Sqe::fabrics(FcType::CONNECT);
        sqe.set_cid(cid);
        sqe.0[44..46].copy_from_slice(&31u16.to_le_bytes());
        let d = ConnectData {
            hostid: [6; 16],
            cntlid: 0xFFFF,
            subnqn: NQN.into(),
            hostnqn: "nqn.x:dd".into(),
        }
        .encode();
        sqe.set_sgl(Sgl {
            addr: 0,
            len: 1024,
            id: sgl_id::DATA_OFFSET,
        });
        enc(&Pdu::CapsuleCmd(sqe, Bytes::from(d)), dg)
    };
    let mut bad = connect(1);
    bad[200] ^= 0x40; // inside the Connect data: data digest fails
    s.write_all(&bad).await.unwrap();
    let mut resp = [0u8; 28]; // CapsuleResp + header digest
    s.read_exact(&mut resp).await.unwrap();
    assert_eq!(resp[0], 0x05);
    assert_eq!(u16::from_le_bytes([resp[20], resp[21]]), 1);
    let st = nvme_tcp::Status::from_wire(u16::from_le_bytes([resp[22], resp[23]]));
    assert_eq!(st, nvme_tcp::Status::TRANSIENT_TRANSPORT);
    // Same connection, good capsule: connected.
    s.write_all(&connect(2)).await.unwrap();
    s.read_exact(&mut resp).await.unwrap();
    assert_eq!(u16::from_le_bytes([resp[20], resp[21]]), 2);
    assert!(nvme_tcp::Status::from_wire(u16::from_le_bytes([resp[22], resp[23]])).is_success());
}
