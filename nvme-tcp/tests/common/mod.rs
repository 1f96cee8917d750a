#![allow(dead_code)]
use nvme_tcp::{FileBackend, InitiatorConfig, NamespaceConfig, Target, TargetConfig};
use std::path::PathBuf;
use std::sync::Arc;

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
