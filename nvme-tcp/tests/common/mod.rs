#![allow(dead_code)]
use bytes::Bytes;
use nvme_tcp::pdu::{
    sgl_id, ConnectData, Digests, FcType, IcReq, Pdu, Rules, Sgl, Side, Sqe, Stage,
};
use nvme_tcp::{FileBackend, InitiatorConfig, NamespaceConfig, Target, TargetConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const NQN: &str = "nqn.2026-11.org.pnfsd:test";
pub const UUID: [u8; 16] = *b"0123456789abcdef";
pub const BS: u32 = 4096;

pub struct Rig {
    pub target: Target,
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

pub async fn rig(blocks: u64, allowed: Option<Vec<String>>) -> Rig {
    rig_with(blocks, |cfg| cfg.allowed_hosts = allowed).await
}

/// A target on a fresh volume file of `blocks` blocks, its config changed by `set` first.
pub async fn rig_with(blocks: u64, set: impl FnOnce(&mut TargetConfig)) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vol.img");
    let backend = Arc::new(FileBackend::create(&path, blocks * BS as u64, BS).unwrap());
    let mut cfg = TargetConfig::new(
        NQN,
        vec![NamespaceConfig {
            nsid: 1,
            backend,
            volume_uuid: UUID,
        }],
    );
    set(&mut cfg);
    let target = Target::bind("127.0.0.1:0", cfg).await.unwrap();
    target.spawn();
    Rig {
        target,
        path,
        _dir: dir,
    }
}

pub fn host(name: &str, queues: u16) -> InitiatorConfig {
    let mut c = InitiatorConfig::new(NQN, format!("nqn.2014-08.org.nvmexpress:uuid:{name}"));
    c.io_queues = queues;
    c
}

// Raw host side, for tests that must misbehave as the initiator never does.

pub fn enc(p: &Pdu) -> Vec<u8> {
    let mut v = Vec::new();
    p.encode(Digests::default(), &mut v);
    v
}

/// Reads one whole PDU as the host sees it.
pub async fn read_pdu(s: &mut TcpStream) -> Pdu {
    let mut h = [0u8; 8];
    s.read_exact(&mut h).await.unwrap();
    let plen = u32::from_le_bytes(h[4..8].try_into().unwrap()) as usize;
    let mut all = h.to_vec();
    all.resize(plen, 0);
    s.read_exact(&mut all[8..]).await.unwrap();
    let rules = Rules {
        receiver: Side::Host,
        stage: Stage::Ready,
        digests: Digests::default(),
        max_capsule_data: 0,
        max_data_pdu: 8 << 20,
    };
    Pdu::decode(&all, &rules).unwrap()
}

/// TCP connect and ICReq/ICResp.
pub async fn raw(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let ic = IcReq {
        pfv: 0,
        hpda: 0,
        digests: Digests::default(),
        maxr2t: 0,
    };
    s.write_all(&enc(&Pdu::IcReq(ic))).await.unwrap();
    let mut resp = [0u8; 128];
    s.read_exact(&mut resp).await.unwrap();
    s
}

/// A Fabrics Connect for `qid` of controller `cntlid` (0xFFFF: a new one) with `kato_ms`.
pub fn connect_pdu(
    qid: u16,
    cntlid: u16,
    kato_ms: u32,
    hostnqn: &str,
    hostid: [u8; 16],
) -> Vec<u8> {
    connect_pdu_sq(qid, cntlid, kato_ms, hostnqn, hostid, 31)
}

/// `connect_pdu` with SQSIZE (0's based) `sqsize`.
pub fn connect_pdu_sq(
    qid: u16,
    cntlid: u16,
    kato_ms: u32,
    hostnqn: &str,
    hostid: [u8; 16],
    sqsize: u16,
) -> Vec<u8> {
    let mut sqe = Sqe::fabrics(FcType::CONNECT);
    sqe.set_cid(1);
    sqe.0[42..44].copy_from_slice(&qid.to_le_bytes());
    sqe.0[44..46].copy_from_slice(&sqsize.to_le_bytes());
    sqe.0[48..52].copy_from_slice(&kato_ms.to_le_bytes());
    let d = ConnectData {
        hostid,
        cntlid,
        subnqn: NQN.into(),
        hostnqn: hostnqn.into(),
    }
    .encode();
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 1024,
        id: sgl_id::DATA_OFFSET,
    });
    enc(&Pdu::CapsuleCmd(sqe, Bytes::from(d)))
}

/// Waits (at most 10 s) until `cond` holds: what the target does on its own tasks or
/// threads after the host acted.
pub async fn eventually(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..1000 {
        if cond() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("{what}: not reached in 10 s");
}
