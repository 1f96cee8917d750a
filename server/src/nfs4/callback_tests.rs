use super::*;
use crate::store::Ino;
use std::sync::Arc;

#[derive(Debug)]
struct Nobody;
impl crate::rpc::Backchannel for Nobody {
    fn call(&self, _: u32, _: u32, _: XdrWriter) -> std::io::Result<Vec<u8>> {
        Err(std::io::ErrorKind::NotConnected.into())
    }
}

/// The CB_COMPOUND head every callback starts with: empty tag, minor version 1, two ops,
/// then CB_SEQUENCE on slot 0 with no referring calls.
fn expect_cb_sequence(r: &mut XdrReader<'_>, sessionid: [u8; 16], seqid: u32) {
    assert_eq!(r.opaque(16).unwrap(), b"");
    assert_eq!(
        (r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()),
        (1, 0, 2)
    );
    assert_eq!(r.u32().unwrap(), OP_CB_SEQUENCE);
    assert_eq!(r.array::<16>().unwrap(), sessionid);
    assert_eq!(
        (r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()),
        (seqid, 0, 0)
    );
    assert!(!r.bool().unwrap());
    assert_eq!(r.u32().unwrap(), 0);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The exact bytes of each callback, so that a change of how they are built cannot
/// change what goes on the wire: slot 2 of session 0x11…, seqid 9, minor version 2.
#[test]
fn callback_bytes_are_pinned() {
    let slot = CbSlot {
        clientid: 1,
        sessionid: [0x11; 16],
        program: 0x4000_0000,
        slot: 2,
        seqid: 9,
        channel: Arc::new(Nobody),
        cred: Default::default(),
        minor: 2,
    };
    let fh = Fh {
        ino: Ino(0x0102_0304),
        generation: 5,
    };
    let sid = Stateid {
        seqid: 3,
        other: [0xab; 12],
    };
    // tag "" | minor 2 | ident 0 | 2 ops | CB_SEQUENCE(11) sessionid seqid 9, slot 2,
    // highest 2, cachethis false, no referring calls.
    let head = concat!(
        "00000000",
        "00000002",
        "00000000",
        "00000002",
        "0000000b",
        "11111111111111111111111111111111",
        "00000009",
        "00000002",
        "00000002",
        "00000000",
        "00000000",
    );
    // fh opaque<16>: "PNF1", ino, generation.
    let fh_hex = "00000010504e4631000000000102030400000005";
    let sid_hex = format!("00000003{}", "ab".repeat(12));
    let cases = [
        (
            "CB_RECALL",
            encode_recall(&slot, &fh, &sid).into_inner(),
            format!("{head}00000004{sid_hex}00000000{fh_hex}"),
        ),
        (
            "CB_LAYOUTRECALL",
            encode_layoutrecall(&slot, &fh, &sid, LayoutType::BLOCK_VOLUME).into_inner(),
            format!(
                "{head}00000005000000030000000300000001{}{fh_hex}{}{}{sid_hex}",
                "00000001", "0000000000000000", "ffffffffffffffff",
            ),
        ),
        (
            "CB_GETATTR",
            encode_getattr(&slot, &fh).into_inner(),
            format!("{head}00000003{fh_hex}0000000100000018"),
        ),
        // coa_fh | coa_stateid | NFS4_OK | no callback id | wr_count 0x12345 |
        // FILE_SYNC4 (2) | verifier.
        (
            "CB_OFFLOAD done",
            encode_offload(
                &slot,
                &fh,
                &sid,
                &OffloadOutcome::Done {
                    count: 0x12345,
                    committed: Stable::FileSync,
                    verifier: [0xc0, 1, 2, 3, 4, 5, 6, 7],
                },
            )
            .into_inner(),
            format!(
                "{head}0000000f{fh_hex}{sid_hex}00000000{}{}{}{}",
                "00000000", "0000000000012345", "00000002", "c001020304050607",
            ),
        ),
        // coa_fh | coa_stateid | NFS4ERR_NOSPC (28) | coa_bytes_copied 4096.
        (
            "CB_OFFLOAD failed",
            encode_offload(
                &slot,
                &fh,
                &sid,
                &OffloadOutcome::Failed {
                    status: NfsStat::NOSPC,
                    copied: 4096,
                },
            )
            .into_inner(),
            format!("{head}0000000f{fh_hex}{sid_hex}0000001c0000000000001000"),
        ),
    ];
    for (name, got, want) in cases {
        assert_eq!(hex(&got), want, "{name}");
    }
}

#[test]
fn layoutrecall_encoding() {
    let slot = CbSlot {
        clientid: 1,
        sessionid: [3; 16],
        program: 0x4000_0000,
        slot: 0,
        seqid: 7,
        channel: Arc::new(Nobody),
        cred: Default::default(),
        minor: 1,
    };
    let fh = Fh {
        ino: Ino(42),
        generation: 9,
    };
    let sid = Stateid {
        seqid: 2,
        other: [1; 12],
    };
    let b = encode_layoutrecall(&slot, &fh, &sid, LayoutType::BLOCK_VOLUME).into_inner();
    let mut r = XdrReader::new(&b);
    expect_cb_sequence(&mut r, [3; 16], 7);
    assert_eq!(r.u32().unwrap(), OP_CB_LAYOUTRECALL);
    assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (3, IoMode::ANY.0));
    assert!(r.bool().unwrap());
    assert_eq!(r.u32().unwrap(), LAYOUTRECALL4_FILE);
    assert_eq!(r.opaque(128).unwrap(), &fh.to_bytes());
    assert_eq!((r.u64().unwrap(), r.u64().unwrap()), (0, u64::MAX));
    assert_eq!(Stateid::decode(&mut r).unwrap(), sid);
    assert!(r.finish().is_ok());
    assert_eq!(decode_status(&[0, 0, 0x27, 0x4c]).unwrap(), NfsStat(10060));
}

#[test]
fn recall_encoding() {
    let slot = CbSlot {
        clientid: 1,
        sessionid: [5; 16],
        program: 0x4000_0000,
        slot: 0,
        seqid: 3,
        channel: Arc::new(Nobody),
        cred: Default::default(),
        minor: 1,
    };
    let fh = Fh {
        ino: Ino(7),
        generation: 1,
    };
    let sid = Stateid {
        seqid: 1,
        other: [2; 12],
    };
    let b = encode_recall(&slot, &fh, &sid).into_inner();
    let mut r = XdrReader::new(&b);
    expect_cb_sequence(&mut r, [5; 16], 3);
    assert_eq!(r.u32().unwrap(), OP_CB_RECALL);
    assert_eq!(Stateid::decode(&mut r).unwrap(), sid);
    assert!(!r.bool().unwrap());
    assert_eq!(r.opaque(128).unwrap(), &fh.to_bytes());
    assert!(r.finish().is_ok());
}

#[test]
fn getattr_encoding_and_reply() {
    let slot = CbSlot {
        clientid: 1,
        sessionid: [6; 16],
        program: 0x4000_0000,
        slot: 0,
        seqid: 4,
        channel: Arc::new(Nobody),
        cred: Default::default(),
        minor: 1,
    };
    let fh = Fh {
        ino: Ino(9),
        generation: 2,
    };
    let b = encode_getattr(&slot, &fh).into_inner();
    let mut r = XdrReader::new(&b);
    expect_cb_sequence(&mut r, [6; 16], 4);
    assert_eq!(r.u32().unwrap(), OP_CB_GETATTR);
    assert_eq!(r.opaque(128).unwrap(), &fh.to_bytes());
    assert_eq!(Bitmap::decode(&mut r).unwrap(), Bitmap(vec![0b11000]));
    assert!(r.finish().is_ok());

    // CB_COMPOUND4res { CB_SEQUENCE OK, CB_GETATTR OK {mask, attrs} }.
    let reply = |mask: Vec<u32>, vals: &[u64], extra: &[u8]| {
        let mut w = XdrWriter::new();
        w.u32(0);
        w.opaque(b"tag");
        w.u32(2);
        w.u32(OP_CB_SEQUENCE);
        w.u32(0);
        w.opaque_fixed(&[6; 16]);
        for _ in 0..4 {
            w.u32(1);
        }
        w.u32(OP_CB_GETATTR);
        w.u32(0);
        Bitmap(mask).encode(&mut w);
        w.u32((vals.len() * 8 + extra.len()) as u32);
        for v in vals {
            w.u64(*v);
        }
        w.opaque_fixed(extra);
        w.into_inner()
    };
    let ok = CbAttrs {
        change: 7,
        size: 4096,
    };
    assert_eq!(
        decode_getattr(&reply(vec![0b11000], &[7, 4096], &[])),
        Ok(ok)
    );
    // Delegated timestamps after them (pynfs sends them unasked): ignored.
    let ts = reply(vec![0b11000, 0, 0x30_0000], &[7, 4096], &[0; 24]);
    assert_eq!(decode_getattr(&ts), Ok(ok));
    // Size missing, an attribute before change, an error: refused.
    assert!(decode_getattr(&reply(vec![0b1000], &[7], &[])).is_err());
    assert!(decode_getattr(&reply(vec![0b11010], &[1, 7, 4096], &[])).is_err());
    assert!(decode_getattr(&[0, 0, 0x27, 0x11]).is_err());
    assert!(decode_getattr(&[]).is_err());
}
