//! Entry points for cargo-fuzz targets (docs/design.md, house rule 11; `fuzz/`,
//! docs/fuzzing.md): a byte stream as the target's connection reads it. Each takes
//! arbitrary bytes and must never panic.

use std::sync::OnceLock;

use crate::controller::{IN_CAPSULE_DATA, MAXH2CDATA};
use crate::pdu::ConnectData;
use crate::pdu::{validate_header, Rules, Side, Stage};
use crate::pdu::{Digests, Pdu};
use crate::transport::PduReader;

fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RT: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().ok())
        .as_ref()
}

/// The controller side of a connection: the same reader and rules as the target's
/// (`tgt::conn`), ICReq first, then — with the digests the ICReq asked for, as the
/// target echoes them — every PDU until the stream ends or breaks a rule; each command
/// capsule's SQE and, for a Fabrics Connect, its data are decoded as the controller does.
pub fn pdu_stream(data: &[u8]) {
    let Some(rt) = runtime() else {
        return;
    };
    let rules = Rules {
        receiver: Side::Controller,
        stage: Stage::AwaitIc,
        digests: Digests::default(),
        max_capsule_data: IN_CAPSULE_DATA,
        max_data_pdu: MAXH2CDATA,
    };
    let _ = validate_header(data, &rules);
    rt.block_on(async {
        let mut reader = PduReader::new(data, rules);
        match reader.read().await {
            Ok(Pdu::IcReq(req)) => {
                reader.b.rules.stage = Stage::Ready;
                reader.b.rules.digests = req.digests;
            }
            _ => return,
        }
        // Bounded by the input: every read consumes at least a common header.
        while let Ok(pdu) = reader.read().await {
            if let Pdu::CapsuleCmd(sqe, body) = pdu {
                let _ = sqe.data_dir();
                if sqe.is_fabrics() {
                    let _ = ConnectData::decode(&body);
                }
            }
        }
    });
}

/// Seeds: an ICReq, then a Fabrics Connect with its data in the capsule, with and without
/// digests (what the Linux host sends first on every queue).
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    use crate::pdu::IcReq;
    use crate::pdu::{FcType, Sqe};
    let mut v = Vec::new();
    for (name, dg) in [
        ("plain", Digests::default()),
        (
            "digests",
            Digests {
                header: true,
                data: true,
            },
        ),
    ] {
        let mut out = Vec::new();
        Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: 0,
            digests: dg,
            maxr2t: 0,
        })
        .encode(Digests::default(), &mut out);
        let mut ic_only = out.clone();
        v.push((format!("icreq-{name}"), ic_only.split_off(0)));
        let connect = ConnectData {
            hostid: [1; 16],
            cntlid: 0xffff,
            subnqn: "nqn.2026-11.org.pnfsd:volume".into(),
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:fuzz".into(),
        };
        let mut sqe = Sqe::fabrics(FcType::CONNECT);
        sqe.set_cid(1);
        Pdu::CapsuleCmd(sqe, bytes::Bytes::from(connect.encode())).encode(dg, &mut out);
        v.push((format!("connect-{name}"), out));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_and_random_streams_never_panic() {
        use rand::{Rng, SeedableRng};
        for (_, s) in seeds() {
            pdu_stream(&s);
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let (_, connect) = seeds().pop().unwrap();
        for _ in 0..5000 {
            let mut d = connect.clone();
            for _ in 0..rng.gen_range(1..8) {
                let i = rng.gen_range(0..d.len());
                d[i] = rng.gen();
            }
            d.truncate(rng.gen_range(0..=d.len()));
            pdu_stream(&d);
        }
    }
}
