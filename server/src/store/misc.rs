//! Attributes, file-system statistics and the client records kept for grace-period reclaim.

use metalog::Item;

use super::inner::{inode, Inner};
use super::inode::{MISC_SLOT, OPAQUE_CLIENT};
use super::{Attr, FsStat, Ino, Result, StoreError, BLOCK};

impl Inner {
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        let g = self.rd();
        Ok(inode(&g, ino)?.attr(ino.0))
    }

    pub fn getattr_gen(&self, ino: Ino, generation: u32) -> Result<Attr> {
        let g = self.rd();
        let i = inode(&g, ino)?;
        if i.m.gen != generation {
            return Err(StoreError::Stale);
        }
        Ok(i.attr(ino.0))
    }

    pub fn fsstat(&self) -> FsStat {
        let g = self.rd();
        let busy: u64 = g.busy.iter().map(|b| b.len).sum();
        let files = g.s.inodes.len() as u64;
        FsStat {
            total_bytes: g.alloc.total_blocks() * BLOCK,
            free_bytes: (g.alloc.free_blocks() + busy) * BLOCK,
            total_files: self.max_ino,
            free_files: self.max_ino.saturating_sub(files),
        }
    }

    /// Durable before return, on `sync` and `async` exports alike (RFC 8881 §8.4.3: a client
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
        g.s.clients
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
