//! No host writes the store's metadata through the embedded target: the
//! superblock, log and checkpoints sit before the data area (`nvme::guard_mds_blocks`), but
//! the B+tree's nodes and the checkpoint's blobs come from free space among the data blocks
//! (docs/store.md). This policy wraps the target's host policy (the layouts' gate) and
//! refuses, before the gate is asked, any write-class command that touches a block in the
//! store's set of metadata blocks (`store::MetaBlocks`), for every host: attached to a client,
//! in `nvme_admin_hosts`, with `nvme_enforce_layouts = false`, or while a previous instance's
//! layouts may be reclaimed. Until the set is walked after a mount (a second or less, before
//! grace lets any layout out) every write is refused: no layout exists yet that could cover
//! one, and the Linux host retries its queued writes after it reconnects.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use nvme_tcp::policy::Access;
use nvme_tcp::{HostPolicy, HostRef, TargetConfig};

use crate::nvme::LBA_SIZE;
use crate::store::{MetaBlocks, MetaCheck};

/// The gate with the store's metadata blocks in front of it.
pub struct MetaGuard {
    meta: Arc<MetaBlocks>,
    inner: Option<Arc<dyn HostPolicy>>,
    /// Refused writes: into metadata blocks, and before the set was walked.
    pub refused_metadata: AtomicU64,
    pub refused_not_ready: AtomicU64,
}

/// Wrap the target's host policy (after `nvme::gate_hosts`) with the metadata guard.
pub fn guard_metadata(tc: &mut TargetConfig, meta: Arc<MetaBlocks>) -> Arc<MetaGuard> {
    let g = Arc::new(MetaGuard {
        meta,
        inner: tc.host_policy.take(),
        refused_metadata: AtomicU64::new(0),
        refused_not_ready: AtomicU64::new(0),
    });
    tc.host_policy = Some(g.clone());
    g
}

/// LBAs `[slba, slba + nlb)` as store blocks (rounded outward).
fn blocks_of(slba: u64, nlb: u64) -> (u64, u64) {
    let per = u64::from(layout::BLOCK_SIZE / LBA_SIZE).max(1);
    let first = slba / per;
    let end = slba.saturating_add(nlb).div_ceil(per);
    (first, end.saturating_sub(first))
}

impl MetaGuard {
    fn check(&self, a: Access, slba: u64, nlb: u64) -> MetaCheck {
        if a != Access::Write || nlb == 0 {
            return MetaCheck::Clear;
        }
        let (b, n) = blocks_of(slba, nlb);
        self.meta.check(b, n)
    }
}

impl HostPolicy for MetaGuard {
    fn admit(&self, host: &HostRef<'_>) -> bool {
        self.inner.as_ref().is_none_or(|p| p.admit(host))
    }

    fn access(&self, host: &HostRef<'_>, nsid: u32, a: Access, slba: u64, nlb: u64) -> bool {
        if self.check(a, slba, nlb) != MetaCheck::Clear {
            return false;
        }
        self.inner
            .as_ref()
            .is_none_or(|p| p.access(host, nsid, a, slba, nlb))
    }

    fn refused(&self, host: &HostRef<'_>, nsid: u32, a: Access, slba: u64, nlb: u64) {
        let c = match self.check(a, slba, nlb) {
            MetaCheck::Metadata => &self.refused_metadata,
            MetaCheck::NotReady => &self.refused_not_ready,
            MetaCheck::Clear => {
                if let Some(p) = &self.inner {
                    p.refused(host, nsid, a, slba, nlb);
                }
                return;
            }
        };
        let n = c.fetch_add(1, Ordering::Relaxed) + 1;
        // Thinned as the gate's own line: the 16 first, then at each power of two.
        if n <= 16 || n.is_power_of_two() {
            let why = if self.meta.is_ready() {
                "a block of the store's metadata"
            } else {
                "the metadata blocks are not walked yet after the mount"
            };
            tracing::warn!(
                host = %host.nqn,
                ip = %host.ip,
                slba,
                nlb,
                refusals = n,
                "target host refused by the gate: write into {why}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::nvme::target_config;
    use crate::nvme::{guard_mds_blocks, NSID};
    use crate::store::{NewNode, SetAttrs, Store, StoreOptions, ROOT_INO};
    use bytes::Bytes;
    use metalog::{BlockDev, FileDev};
    use nvme_tcp::{Initiator, InitiatorConfig, Status};

    fn denied(r: Result<(), nvme_tcp::Error>) -> bool {
        matches!(r, Err(nvme_tcp::Error::Status(s)) if s == Status::ACCESS_DENIED)
    }

    /// The embedded target over `volume` with the MDS guard and the metadata guard (no gate
    /// behind it), and an initiator connected to it.
    async fn guarded_target(
        cfg: &crate::config::Config,
        volume: &std::path::Path,
        uuid: [u8; 16],
        meta: Arc<MetaBlocks>,
    ) -> (nvme_tcp::Target, Arc<MetaGuard>, Initiator) {
        let dev: Arc<dyn BlockDev> = Arc::new(FileDev::open(volume).unwrap());
        let g = layout::Superblock::decode(&{
            let mut b0 = vec![0u8; layout::BLOCK_SIZE as usize];
            dev.read_at(&mut b0, 0).unwrap();
            b0
        })
        .unwrap()
        .geometry;
        let mut tc = target_config(cfg, dev, uuid);
        guard_mds_blocks(&mut tc, &g);
        let guard = guard_metadata(&mut tc, meta);
        let target = crate::nvme::bind("127.0.0.1:0".parse().unwrap(), tc)
            .await
            .unwrap();
        drop(target.spawn());
        let mut c = InitiatorConfig::new(cfg.nvme_nqn.clone(), "nqn.2014-08.org.example:admin");
        c.kato_ms = 0;
        let ini = Initiator::connect(target.local_addr(), c).await.unwrap();
        (target, guard, ini)
    }

    /// For the blocks a write-back put among the data blocks: with no gate
    /// behind the guard (as an `nvme_admin_hosts` host, or `nvme_enforce_layouts = false`,
    /// sees the target), no host writes a tree node or a checkpoint blob, while it writes a
    /// free data block; every file is still there afterwards. Before the walk after a mount,
    /// no write passes at all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_host_writes_a_tree_node_or_a_blob() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume.img");
        Store::mkfs(&volume, 64 << 20, false).unwrap();
        let store = Store::open(&volume, StoreOptions::default()).unwrap();
        let n = 3000u32;
        for i in 0..n {
            let name = format!("file-with-a-longish-name-{i:05}");
            store
                .create(
                    ROOT_INO,
                    name.as_bytes(),
                    NewNode::Regular,
                    &SetAttrs::default(),
                    (0, 0),
                )
                .unwrap();
        }
        store.write_back().unwrap();
        let meta = store.meta_blocks();
        let t0 = std::time::Instant::now();
        while !meta.is_ready() && t0.elapsed().as_secs() < 20 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let g = store.superblock().geometry;
        let uuid = store.volume_uuid();
        store.unmount().unwrap();
        drop(store);
        // The guarded blocks after the unmount's last write-back (crash_tests.rs `fsck` checks
        // that the set is exactly the live tree's nodes and the blobs); the live nodes carry
        // the node magic. Replaced nodes keep it on disk too, in free blocks: not guarded.
        let guarded: Vec<u64> = meta.runs().iter().flat_map(|&(b, l)| b..b + l).collect();
        let dev = FileDev::open(&volume).unwrap();
        let bs = u64::from(layout::BLOCK_SIZE);
        let mut buf = vec![0u8; bs as usize];
        let mut nodes = Vec::new();
        for &b in &guarded {
            dev.read_at(&mut buf, b * bs).unwrap();
            if &buf[..4] == b"PNBT" {
                nodes.push(b);
            }
        }
        let mut free = Vec::new();
        for b in g.data_start..g.total_blocks {
            dev.read_at(&mut buf, b * bs).unwrap();
            if !guarded.contains(&b) && (buf.iter().all(|&x| x == 0) || &buf[..4] == b"PNBT") {
                free.push(b);
            }
            if free.len() >= 8 {
                break;
            }
        }
        assert!(nodes.len() > 10, "{} nodes", nodes.len());
        assert!(!free.is_empty());
        let cfg = crate::config::Config {
            data_dir: dir.path().to_path_buf(),
            ..crate::config::Config::default()
        };
        drop(dev);
        let (target, guard, ini) = guarded_target(&cfg, &volume, uuid, meta.clone()).await;
        let lba = |b: u64| b * bs / u64::from(LBA_SIZE);
        let junk = || Bytes::from(vec![0xeeu8; LBA_SIZE as usize]);
        for &b in &nodes {
            assert!(
                denied(ini.write(NSID, lba(b), junk(), LBA_SIZE, false).await),
                "node {b}"
            );
            ini.read(NSID, lba(b), 1, LBA_SIZE).await.unwrap();
        }
        // A write that only ends in a node is refused too.
        let edge = *nodes
            .iter()
            .find(|&&b| b > g.data_start && !nodes.contains(&(b - 1)))
            .unwrap();
        let before = lba(edge) - 1;
        let two = Bytes::from(vec![0xeeu8; 2 * LBA_SIZE as usize]);
        assert!(denied(ini.write(NSID, before, two, LBA_SIZE, false).await));
        for &b in &free {
            ini.write(NSID, lba(b), junk(), LBA_SIZE, false)
                .await
                .unwrap();
        }
        assert!(guard.refused_metadata.load(Ordering::Relaxed) > nodes.len() as u64);
        target.shutdown();
        // The tree is intact.
        let store = Store::open(&volume, StoreOptions::default()).unwrap();
        for i in (0..n).step_by(97) {
            let name = format!("file-with-a-longish-name-{i:05}");
            store.lookup(ROOT_INO, name.as_bytes()).unwrap();
        }
        store.unmount().unwrap();
        // Not walked yet: nothing is written.
        let fresh = Arc::new(MetaBlocks::new());
        let (target, guard, ini) = guarded_target(&cfg, &volume, uuid, fresh).await;
        assert!(denied(
            ini.write(NSID, lba(free[0]), junk(), LBA_SIZE, false).await
        ));
        assert_eq!(guard.refused_not_ready.load(Ordering::Relaxed), 1);
        target.shutdown();
    }

    #[test]
    fn lbas_round_out_to_store_blocks() {
        let per = u64::from(layout::BLOCK_SIZE / LBA_SIZE);
        assert_eq!(blocks_of(0, 1), (0, 1));
        assert_eq!(blocks_of(per, per), (1, 1));
        assert_eq!(blocks_of(per - 1, 2), (0, 2));
        assert_eq!(blocks_of(3 * per, 0), (3, 0));
    }
}
