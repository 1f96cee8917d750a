//! Block-layout I/O as a pNFS client does it (RFC 5663 §2.3): LAYOUTGET, write the bytes
//! straight into the data volume at the extents' storage offsets, flush, LAYOUTCOMMIT. The
//! layout tests and `pnfs-bench` build on these helpers.

use std::os::unix::fs::FileExt;

use pnfsd::nfs4::types::{Bitmap, Stateid};

use crate::compound::Compound;
use crate::error::{ClientError, Result};
use crate::fs::OpenFile;
use crate::harness::after_grace;
use crate::ops::Op;
use crate::pnfs::{
    extent_state, iomode, layout_type, BlockExtent, BlockVolume, GetDeviceInfoArgs,
    LayoutCommitArgs, LayoutGetArgs, LayoutGetRes, LayoutReturnArgs, LayoutReturnWhat,
};
use crate::session::Session;

/// A block layout: its stateid and the extents of all its `layout4`s, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockLayout {
    pub stateid: Stateid,
    pub return_on_close: bool,
    pub extents: Vec<BlockExtent>,
}

impl BlockLayout {
    pub fn from_res(res: &LayoutGetRes) -> Result<BlockLayout> {
        let mut extents = Vec::new();
        for l in &res.layouts {
            if l.layout_type != layout_type::BLOCK_VOLUME {
                return Err(ClientError::Protocol(format!(
                    "layout type {} is not block",
                    l.layout_type
                )));
            }
            extents.extend(
                BlockExtent::decode_list(&l.body).map_err(|err| ClientError::Xdr {
                    what: "pnfs_block_layout4",
                    err,
                })?,
            );
        }
        extents.sort_by_key(|e| e.file_offset);
        Ok(BlockLayout {
            stateid: res.stateid,
            return_on_close: res.return_on_close,
            extents,
        })
    }
}

impl Session {
    /// LAYOUTGET of the block layout on an open file.
    pub async fn layoutget(
        &self,
        f: &OpenFile,
        mode: u32,
        offset: u64,
        length: u64,
    ) -> Result<BlockLayout> {
        let args = LayoutGetArgs {
            signal_avail: false,
            layout_type: layout_type::BLOCK_VOLUME,
            iomode: mode,
            offset,
            length,
            minlength: if mode == iomode::RW {
                length.min(4096)
            } else {
                0
            },
            stateid: f.stateid,
            maxcount: 64 << 10,
        };
        let rep = self
            .run_ok(Compound::new().putfh(&f.fh).op(Op::LayoutGet(args)))
            .await?;
        BlockLayout::from_res(rep.layoutget()?)
    }

    /// GETDEVICEINFO of a block device id: its volume topology.
    pub async fn block_deviceinfo(&self, deviceid: [u8; 16]) -> Result<Vec<BlockVolume>> {
        let args = GetDeviceInfoArgs {
            deviceid,
            layout_type: layout_type::BLOCK_VOLUME,
            maxcount: 64 << 10,
            notify: Bitmap::default(),
        };
        let rep = self
            .run_ok(Compound::new().op(Op::GetDeviceInfo(args)))
            .await?;
        let d = rep.deviceinfo()?;
        crate::pnfs::decode_block_deviceaddr(&d.addr_body).map_err(|err| ClientError::Xdr {
            what: "pnfs_block_deviceaddr4",
            err,
        })
    }

    /// LAYOUTCOMMIT of `extents` (now written) covering `[offset, offset + length)`, with
    /// `last_write` the last byte written; returns the new size if the server changed it.
    pub async fn layoutcommit(
        &self,
        f: &OpenFile,
        layout_stateid: Stateid,
        offset: u64,
        length: u64,
        last_write: u64,
        extents: &[BlockExtent],
    ) -> Result<Option<u64>> {
        let committed: Vec<BlockExtent> = extents
            .iter()
            .map(|e| BlockExtent {
                state: extent_state::READ_WRITE_DATA,
                ..*e
            })
            .collect();
        let args = LayoutCommitArgs {
            offset,
            length,
            reclaim: false,
            stateid: layout_stateid,
            last_write_offset: Some(last_write),
            time_modify: None,
            layout_type: layout_type::BLOCK_VOLUME,
            body: BlockExtent::encode_list(&committed),
        };
        let rep = self
            .run_ok(Compound::new().putfh(&f.fh).op(Op::LayoutCommit(args)))
            .await?;
        rep.layoutcommit()
    }

    /// LAYOUTCOMMIT of all of `l` (a layout from file offset 0, every extent written), the
    /// last byte written at `last_write`: what a client sends after writing through it all.
    pub async fn layoutcommit_all(
        &self,
        f: &OpenFile,
        l: &BlockLayout,
        last_write: u64,
    ) -> Result<Option<u64>> {
        let covered: u64 = l.extents.iter().map(|e| e.length).sum();
        self.layoutcommit(f, l.stateid, 0, covered, last_write, &l.extents)
            .await
    }

    /// LAYOUTRETURN of the whole file's layout.
    pub async fn layoutreturn_file(
        &self,
        f: &OpenFile,
        layout_stateid: Stateid,
    ) -> Result<Option<Stateid>> {
        let args = LayoutReturnArgs {
            reclaim: false,
            layout_type: layout_type::BLOCK_VOLUME,
            iomode: iomode::ANY,
            what: LayoutReturnWhat::File {
                offset: 0,
                length: u64::MAX,
                stateid: layout_stateid,
                body: vec![],
            },
        };
        let rep = self
            .run_ok(Compound::new().putfh(&f.fh).op(Op::LayoutReturn(args)))
            .await?;
        rep.layoutreturn()
    }
}

/// After a restart of the server: `path` still holds `data` (its size, and its bytes read with
/// the anonymous stateid, which grace does not hold back: RFC 8881 §8.4.2); then, once grace
/// lets OPEN through, a READ layout of all of it. For tests: panics where that fails.
pub async fn reread_after_restart(s: &Session, path: &str, data: &[u8]) -> BlockLayout {
    let len = data.len() as u64;
    let fh = s.lookup_path(path).await.unwrap();
    let size = s.getattr_fh(&fh, crate::attrs::basic()).await.unwrap().size;
    assert_eq!(size, Some(len), "{path}: size after the restart");
    let anon = OpenFile {
        fh: fh.clone(),
        stateid: Stateid::ANONYMOUS,
    };
    assert!(
        s.read_all(&anon, 0, data.len()).await.unwrap() == data,
        "data lost across SIGKILL"
    );
    let of = after_grace(|| s.open_fh(&fh)).await;
    after_grace(|| s.layoutget(&of, iomode::READ, 0, len)).await
}

/// Writes `data` at file offset `offset` into the volume through `extents` (which must cover
/// the range), the way a block-layout client writes straight to the device. Does not flush:
/// the caller decides (`File::sync_data`, as a client's fsync before LAYOUTCOMMIT).
pub fn write_through_extents(
    vol: &std::fs::File,
    extents: &[BlockExtent],
    offset: u64,
    data: &[u8],
) -> Result<()> {
    for (at, r) in write_pieces(extents, offset, data.len())? {
        vol.write_all_at(&data[r], at)?;
    }
    Ok(())
}

/// `(volume byte offset, range of the data)` pieces of a write of `len` bytes at file offset
/// `offset` through `extents`, each within one writable extent; an error if an extent is
/// not writable or none covers a byte.
pub fn write_pieces(
    extents: &[BlockExtent],
    offset: u64,
    len: usize,
) -> Result<Vec<(u64, std::ops::Range<usize>)>> {
    let mut out = Vec::new();
    let mut done = 0usize;
    while done < len {
        let at = offset + done as u64;
        let e = extents
            .iter()
            .find(|e| e.file_offset <= at && at < e.file_offset + e.length)
            .ok_or_else(|| ClientError::Protocol(format!("no extent covers file offset {at}")))?;
        if e.state == extent_state::NONE_DATA || e.state == extent_state::READ_DATA {
            return Err(ClientError::Protocol(format!(
                "extent at {} is not writable (state {})",
                e.file_offset, e.state
            )));
        }
        let n = ((e.file_offset + e.length - at) as usize).min(len - done);
        out.push((e.storage_offset + (at - e.file_offset), done..done + n));
        done += n;
    }
    Ok(out)
}

/// Reads `len` bytes at file offset `offset` from the volume through `extents`; holes and
/// NONE_DATA / INVALID_DATA extents read as zeros (RFC 5663 §2.3.2).
pub fn read_through_extents(
    vol: &std::fs::File,
    extents: &[BlockExtent],
    offset: u64,
    len: usize,
) -> Result<Vec<u8>> {
    let mut out = vec![0u8; len];
    for e in extents {
        if e.state != extent_state::READ_WRITE_DATA && e.state != extent_state::READ_DATA {
            continue;
        }
        let lo = offset.max(e.file_offset);
        let hi = (offset + len as u64).min(e.file_offset + e.length);
        if lo < hi {
            let dst = &mut out[(lo - offset) as usize..(hi - offset) as usize];
            vol.read_exact_at(dst, e.storage_offset + (lo - e.file_offset))?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_land_at_storage_offsets_across_extents() {
        let dir = tempfile::tempdir().unwrap();
        let vol = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("v"))
            .unwrap();
        vol.set_len(1 << 20).unwrap();
        let ext = |fo: u64, so: u64| BlockExtent {
            deviceid: [0; 16],
            file_offset: fo,
            length: 4096,
            storage_offset: so,
            state: extent_state::INVALID_DATA,
        };
        // File blocks 0 and 1 live at volume blocks 10 and 3.
        let extents = [ext(0, 40960), ext(4096, 12288)];
        let data = crate::harness::pattern(5, 6000);
        write_through_extents(&vol, &extents, 1000, &data).unwrap();
        let mut b = vec![0u8; 3096];
        vol.read_exact_at(&mut b, 40960 + 1000).unwrap();
        assert_eq!(b, &data[..3096]);
        let mut b = vec![0u8; 6000 - 3096];
        vol.read_exact_at(&mut b, 12288).unwrap();
        assert_eq!(b, &data[3096..]);
        assert!(
            write_through_extents(&vol, &extents, 8000, &[1; 200]).is_err(),
            "past the layout"
        );
        let rw: Vec<BlockExtent> = extents
            .iter()
            .map(|e| BlockExtent {
                state: extent_state::READ_WRITE_DATA,
                ..*e
            })
            .collect();
        assert_eq!(read_through_extents(&vol, &rw, 1000, 6000).unwrap(), data);
        // INVALID_DATA reads as zeros.
        assert_eq!(
            read_through_extents(&vol, &extents, 1000, 10).unwrap(),
            vec![0; 10]
        );
    }

    #[test]
    fn pieces_follow_the_extents() {
        let e = |file_offset, length, storage_offset| BlockExtent {
            deviceid: [0; 16],
            file_offset,
            length,
            storage_offset,
            state: extent_state::READ_WRITE_DATA,
        };
        let ext = [e(0, 8192, 1 << 20), e(8192, 8192, 4 << 20)];
        let p = write_pieces(&ext, 4096, 8192).unwrap();
        assert_eq!(p, vec![((1 << 20) + 4096, 0..4096), (4 << 20, 4096..8192)]);
        assert!(write_pieces(&ext, 12288, 8192).is_err());
    }
}
