//! Attributes, file-system statistics and the client records kept for grace-period reclaim.

use metalog::Item;

use super::inner::Inner;
use super::inode::{MISC_SLOT, OPAQUE_CLIENT};
use super::ns::INODE_BYTES;
use super::types::{Attr, FsStat, Ino, Result, StoreError, BLOCK};
use super::Store;

impl Store {
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        let g = self.rd();
        Ok(g.meta(ino.0)?.attr(ino.0))
    }

    /// Like `getattr` but also checks the generation from a filehandle (`Stale` on mismatch).
    pub fn getattr_gen(&self, ino: Ino, generation: u32) -> Result<Attr> {
        let g = self.rd();
        let i = g.meta(ino.0)?;
        if i.gen != generation {
            return Err(StoreError::Stale);
        }
        Ok(i.attr(ino.0))
    }

    pub fn fsstat(&self) -> FsStat {
        let g = self.rd();
        let (nodes_from, data_from) = (
            self.sb.geometry.node_area().0,
            self.sb.geometry.file_area().0,
        );
        let busy_in =
            |lo: u64| -> u64 { g.busy.iter().filter(|b| b.phys >= lo).map(|b| b.len).sum() };
        // What data and new inodes may still take: the write-back's reserve is not theirs.
        // A split volume's data has its own area, and its inodes the node area.
        let (free, free_meta) = match g.alloc.is_split() {
            false => {
                let f = (g.alloc.free_blocks() + busy_in(nodes_from))
                    .saturating_sub(self.base_reserve(&g));
                (f, f)
            }
            true => (
                g.alloc.free_data_blocks() + busy_in(data_from),
                g.alloc
                    .free_node_blocks()
                    .saturating_sub(self.base_reserve(&g)),
            ),
        };
        let free = free * BLOCK;
        // Files are limited by free space only: as many more as fit.
        let free_files = free_meta * BLOCK / INODE_BYTES;
        FsStat {
            total_bytes: g.alloc.data_region_blocks() * BLOCK,
            free_bytes: free,
            total_files: g.files + free_files,
            free_files,
        }
    }

    /// Client records must survive a restart so that clients can reclaim during the grace
    /// period (RFC 8881 §8.4.3): opaque key/value pairs in the log and metadata area; `None`
    /// removes a record. Durable before return, on `sync` and `async` exports alike (RFC 8881 §8.4.3: a client
    /// record that is lost makes the client's reclaims fail).
    pub fn put_client_record(&self, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        let extra = (key.len() + value.map_or(0, |v| v.len())) as u64;
        let res = self.reserve(extra)?;
        let csn = {
            let mut g = self.wr();
            let items = vec![Item::Opaque {
                kind: OPAQUE_CLIENT,
                key: key.to_vec(),
                value: value.map(|v| v.to_vec()),
            }];
            self.commit_locked(&mut g, res, items, vec![Inner::tx(MISC_SLOT, false)])?
        };
        self.force(csn)?;
        Ok(())
    }

    pub fn client_records(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let g = self.rd();
        g.clients
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
