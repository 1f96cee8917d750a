//! A split volume's device (docs/store.md "Split volume"): one block space over two members.
//! Blocks below the geometry's `data_split` are the metadata member's own blocks (superblock,
//! log, checkpoint slots, node area); the rest are the data member's from its block
//! `data_base` on (before it: the member label, `layout::member`). The store sees one
//! `BlockDev`; a request that crosses the boundary is split in two, a flush flushes both.

use std::sync::Arc;

use layout::{Geometry, LabelError, MemberLabel, Superblock, SuperblockError, BLOCK_SIZE};
use metalog::BlockDev;

/// Why a pair of devices is not a split volume.
#[derive(Debug, thiserror::Error)]
pub enum SplitError {
    #[error("the metadata member: {0}")]
    Superblock(SuperblockError),
    #[error("the metadata member holds a single volume (formatted without a metadata volume)")]
    NotSplit,
    #[error("the data member: {0}")]
    Label(LabelError),
    #[error(
        "the metadata member's superblock stripes the data over {0} data members: this pnfsd \
         mounts a split volume of one data member only"
    )]
    Striped(u32),
    #[error("the data member: {0}")]
    Mismatch(String),
    #[error("the {0} member is {1} bytes, its volume needs {2}")]
    TooSmall(&'static str, u64, u64),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A piece of a request on one member: (on the data member, offset on it, start in the
/// request's buffer, length).
type Piece = (bool, u64, usize, usize);

pub struct SplitDev {
    meta: Arc<dyn BlockDev>,
    data: Arc<dyn BlockDev>,
    /// Byte offset of the boundary in the block space, and where it lands on the data member.
    split: u64,
    data_base: u64,
    size: u64,
}

impl SplitDev {
    /// The device over two members laid out as `g` (a split geometry), without checks: mkfs.
    pub fn new(meta: Arc<dyn BlockDev>, data: Arc<dyn BlockDev>, g: &Geometry) -> SplitDev {
        let bs = BLOCK_SIZE as u64;
        SplitDev {
            meta,
            data,
            split: g.data_split() * bs,
            data_base: g.data_base * bs,
            size: g.total_blocks * bs,
        }
    }

    /// The device over two formatted members: the metadata member's superblock must say
    /// split, and the data member's label must be this volume's data member of its size.
    pub fn open(meta: Arc<dyn BlockDev>, data: Arc<dyn BlockDev>) -> Result<SplitDev, SplitError> {
        let bs = BLOCK_SIZE as u64;
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        if meta.size() < bs {
            return Err(SplitError::Superblock(SuperblockError::Short));
        }
        meta.read_at(&mut b, 0)?;
        let sb = Superblock::decode(&b).map_err(SplitError::Superblock)?;
        let g = sb.geometry;
        if !g.is_split() {
            return Err(SplitError::NotSplit);
        }
        // The routing below is for one data member (`Geometry::member_block` has the rest).
        if g.is_striped() {
            return Err(SplitError::Striped(g.data_members));
        }
        let need = g.meta_member_blocks() * bs;
        if meta.size() < need {
            return Err(SplitError::TooSmall("metadata", meta.size(), need));
        }
        if data.size() < bs {
            return Err(SplitError::Label(LabelError::Missing));
        }
        data.read_at(&mut b, 0)?;
        let label = MemberLabel::decode(&b).map_err(SplitError::Label)?;
        label
            .check(&sb.member_label(0))
            .map_err(SplitError::Mismatch)?;
        let need = g.data_member_blocks * bs;
        if data.size() < need {
            return Err(SplitError::TooSmall("data", data.size(), need));
        }
        Ok(SplitDev::new(meta, data, &g))
    }

    pub fn meta(&self) -> &Arc<dyn BlockDev> {
        &self.meta
    }

    pub fn data(&self) -> &Arc<dyn BlockDev> {
        &self.data
    }

    /// The pieces of `[off, off + len)`, the metadata member's first.
    fn pieces(&self, off: u64, len: usize) -> std::io::Result<[Option<Piece>; 2]> {
        let end = off
            .checked_add(len as u64)
            .filter(|&e| e <= self.size)
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("I/O [{off}, +{len}) beyond device size {}", self.size),
                )
            })?;
        let cut = self.split.clamp(off, end);
        let low = (cut > off).then_some((false, off, 0, (cut - off) as usize));
        let high = (end > cut).then_some((
            true,
            cut - self.split + self.data_base,
            (cut - off) as usize,
            (end - cut) as usize,
        ));
        Ok([low, high])
    }

    fn member(&self, data: bool) -> &dyn BlockDev {
        match data {
            true => &*self.data,
            false => &*self.meta,
        }
    }
}

impl BlockDev for SplitDev {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        for (d, at, from, n) in self.pieces(offset, buf.len())?.into_iter().flatten() {
            self.member(d).read_at(&mut buf[from..from + n], at)?;
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        for (d, at, from, n) in self.pieces(offset, buf.len())?.into_iter().flatten() {
            self.member(d).write_at(&buf[from..from + n], at)?;
        }
        Ok(())
    }

    fn write_fua(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        for (d, at, from, n) in self.pieces(offset, buf.len())?.into_iter().flatten() {
            self.member(d).write_fua(&buf[from..from + n], at)?;
        }
        Ok(())
    }

    /// Both: the log's force flushes through this, and it must cover the clients' data on
    /// the data member as on a single volume (docs/design.md §2).
    fn flush(&self) -> std::io::Result<()> {
        self.data.flush()?;
        self.meta.flush()
    }

    fn size(&self) -> u64 {
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metalog::CrashDev;

    /// A request across the boundary goes half to each member, the data half past the label.
    #[test]
    fn a_request_across_the_boundary_is_split() {
        let g = Geometry::for_split(16 << 20, 8 << 20).unwrap();
        let (m, d) = (
            Arc::new(CrashDev::new(16 << 20, 1)),
            Arc::new(CrashDev::new(8 << 20, 2)),
        );
        let dev = SplitDev::new(m.clone(), d.clone(), &g);
        let bs = BLOCK_SIZE as u64;
        let split = g.data_split() * bs;
        let buf: Vec<u8> = (0..2 * bs).map(|i| (i / bs) as u8 + 1).collect();
        dev.write_at(&buf, split - bs).unwrap();
        let mut b = vec![0u8; bs as usize];
        m.read_at(&mut b, split - bs).unwrap();
        assert!(b.iter().all(|&x| x == 1));
        d.read_at(&mut b, g.data_base * bs).unwrap();
        assert!(b.iter().all(|&x| x == 2));
        let mut back = vec![0u8; 2 * bs as usize];
        dev.read_at(&mut back, split - bs).unwrap();
        assert_eq!(back, buf);
        assert_eq!(dev.size(), g.total_blocks * bs);
        assert!(dev.read_at(&mut back, dev.size() - bs).is_err());
    }

    /// A striped set's metadata member is refused, not routed as one data member.
    #[test]
    fn a_striped_set_is_refused() {
        let g = Geometry::for_stripe(16 << 20, &[8 << 20, 8 << 20], 256).unwrap();
        let sb = Superblock {
            uuid: *b"0123456789abcdef",
            features: layout::superblock::FEATURE_SPLIT | layout::superblock::FEATURE_STRIPE,
            geometry: g,
            created: 1,
            mounted: None,
        };
        let (m, d) = (
            Arc::new(CrashDev::new(16 << 20, 1)),
            Arc::new(CrashDev::new(8 << 20, 2)),
        );
        m.write_at(&sb.encode(), 0).unwrap();
        let mut label = vec![0u8; BLOCK_SIZE as usize];
        label[..512].copy_from_slice(&sb.member_label(0).encode());
        d.write_at(&label, 0).unwrap();
        let e = SplitDev::open(m, d).err().expect("refused");
        assert!(matches!(e, SplitError::Striped(2)), "{e}");
    }
}
