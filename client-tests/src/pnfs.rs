//! pNFS operations of RFC 8881 §18.40–18.44 (LAYOUTGET, LAYOUTCOMMIT, LAYOUTRETURN,
//! GETDEVICEINFO, GETDEVICELIST) and the block layout bodies of RFC 5663 §2 (extents, volume
//! topology) and the SCSI volume of RFC 8154, as the client sends and reads them.

use pnfsd::nfs4::types::{Bitmap, Stateid};
use pnfsd::xdr::{Xdr, XdrError, XdrReader, XdrResult, XdrWriter};

use crate::attrs::Time;

/// `layouttype4` values (docs/design.md §5).
pub mod layout_type {
    pub const NFSV4_1_FILES: u32 = 1;
    pub const BLOCK_VOLUME: u32 = 3;
    pub const SCSI: u32 = 5;
}

/// `layoutiomode4`.
pub mod iomode {
    pub const READ: u32 = 1;
    pub const RW: u32 = 2;
    pub const ANY: u32 = 3;
}

/// `pnfs_block_extent_state4`.
pub mod extent_state {
    pub const READ_WRITE_DATA: u32 = 0;
    pub const READ_DATA: u32 = 1;
    pub const INVALID_DATA: u32 = 2;
    pub const NONE_DATA: u32 = 3;
}

/// `LAYOUTGET4args` (the current filehandle is the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutGetArgs {
    pub signal_avail: bool,
    pub layout_type: u32,
    pub iomode: u32,
    pub offset: u64,
    pub length: u64,
    pub minlength: u64,
    pub stateid: Stateid,
    pub maxcount: u32,
}

/// `LAYOUTCOMMIT4args`; `body` is the type-specific `lou_body` (see `BlockExtent::encode_list`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutCommitArgs {
    pub offset: u64,
    pub length: u64,
    pub reclaim: bool,
    pub stateid: Stateid,
    pub last_write_offset: Option<u64>,
    pub time_modify: Option<Time>,
    pub layout_type: u32,
    pub body: Vec<u8>,
}

/// `layoutreturn4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutReturnWhat {
    File {
        offset: u64,
        length: u64,
        stateid: Stateid,
        body: Vec<u8>,
    },
    Fsid,
    All,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutReturnArgs {
    pub reclaim: bool,
    pub layout_type: u32,
    pub iomode: u32,
    pub what: LayoutReturnWhat,
}

/// `GETDEVICEINFO4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetDeviceInfoArgs {
    pub deviceid: [u8; 16],
    pub layout_type: u32,
    pub maxcount: u32,
    pub notify: Bitmap,
}

/// `GETDEVICELIST4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetDeviceListArgs {
    pub layout_type: u32,
    pub maxdevices: u32,
    pub cookie: u64,
    pub verf: [u8; 8],
}

pub fn encode_layoutget(a: &LayoutGetArgs, w: &mut XdrWriter) {
    w.bool(a.signal_avail);
    w.u32(a.layout_type);
    w.u32(a.iomode);
    w.u64(a.offset);
    w.u64(a.length);
    w.u64(a.minlength);
    a.stateid.encode(w);
    w.u32(a.maxcount);
}

pub fn encode_layoutcommit(a: &LayoutCommitArgs, w: &mut XdrWriter) {
    w.u64(a.offset);
    w.u64(a.length);
    w.bool(a.reclaim);
    a.stateid.encode(w);
    match a.last_write_offset {
        Some(o) => {
            w.bool(true);
            w.u64(o);
        }
        None => w.bool(false),
    }
    match a.time_modify {
        Some(t) => {
            w.bool(true);
            w.i64(t.sec);
            w.u32(t.nsec);
        }
        None => w.bool(false),
    }
    w.u32(a.layout_type);
    w.opaque(&a.body);
}

pub fn encode_layoutreturn(a: &LayoutReturnArgs, w: &mut XdrWriter) {
    w.bool(a.reclaim);
    w.u32(a.layout_type);
    w.u32(a.iomode);
    match &a.what {
        LayoutReturnWhat::File {
            offset,
            length,
            stateid,
            body,
        } => {
            w.u32(1);
            w.u64(*offset);
            w.u64(*length);
            stateid.encode(w);
            w.opaque(body);
        }
        LayoutReturnWhat::Fsid => w.u32(2),
        LayoutReturnWhat::All => w.u32(3),
    }
}

pub fn encode_getdeviceinfo(a: &GetDeviceInfoArgs, w: &mut XdrWriter) {
    w.opaque_fixed(&a.deviceid);
    w.u32(a.layout_type);
    w.u32(a.maxcount);
    a.notify.encode(w);
}

pub fn encode_getdevicelist(a: &GetDeviceListArgs, w: &mut XdrWriter) {
    w.u32(a.layout_type);
    w.u32(a.maxdevices);
    w.u64(a.cookie);
    w.opaque_fixed(&a.verf);
}

/// One `layout4` of a LAYOUTGET reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub offset: u64,
    pub length: u64,
    pub iomode: u32,
    pub layout_type: u32,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutGetRes {
    pub return_on_close: bool,
    pub stateid: Stateid,
    pub layouts: Vec<Layout>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfoRes {
    pub layout_type: u32,
    pub addr_body: Vec<u8>,
    pub notification: Bitmap,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceListRes {
    pub cookie: u64,
    pub verf: [u8; 8],
    pub deviceids: Vec<[u8; 16]>,
    pub eof: bool,
}

pub fn decode_layoutget(r: &mut XdrReader<'_>) -> XdrResult<LayoutGetRes> {
    let return_on_close = r.bool()?;
    let stateid = Stateid::decode(r)?;
    let n = r.array_len(1024, 28)?;
    let mut layouts = Vec::with_capacity(n);
    for _ in 0..n {
        layouts.push(Layout {
            offset: r.u64()?,
            length: r.u64()?,
            iomode: r.u32()?,
            layout_type: r.u32()?,
            body: r.opaque_vec(usize::MAX)?,
        });
    }
    Ok(LayoutGetRes {
        return_on_close,
        stateid,
        layouts,
    })
}

/// LAYOUTCOMMIT's `newsize4`.
pub fn decode_layoutcommit(r: &mut XdrReader<'_>) -> XdrResult<Option<u64>> {
    if r.bool()? {
        Ok(Some(r.u64()?))
    } else {
        Ok(None)
    }
}

/// LAYOUTRETURN's `layoutreturn_stateid`.
pub fn decode_layoutreturn(r: &mut XdrReader<'_>) -> XdrResult<Option<Stateid>> {
    if r.bool()? {
        Ok(Some(Stateid::decode(r)?))
    } else {
        Ok(None)
    }
}

pub fn decode_getdeviceinfo(r: &mut XdrReader<'_>) -> XdrResult<DeviceInfoRes> {
    Ok(DeviceInfoRes {
        layout_type: r.u32()?,
        addr_body: r.opaque_vec(usize::MAX)?,
        notification: Bitmap::decode(r)?,
    })
}

pub fn decode_getdevicelist(r: &mut XdrReader<'_>) -> XdrResult<DeviceListRes> {
    let cookie = r.u64()?;
    let verf = r.array()?;
    let n = r.array_len(1 << 16, 16)?;
    let mut deviceids = Vec::with_capacity(n);
    for _ in 0..n {
        deviceids.push(r.array()?);
    }
    Ok(DeviceListRes {
        cookie,
        verf,
        deviceids,
        eof: r.bool()?,
    })
}

/// `pnfs_block_extent4` (RFC 5663 §2.3.2): 44 bytes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockExtent {
    pub deviceid: [u8; 16],
    pub file_offset: u64,
    pub length: u64,
    pub storage_offset: u64,
    pub state: u32,
}

impl BlockExtent {
    pub const WIRE_SIZE: usize = 44;

    pub fn encode(&self, w: &mut XdrWriter) {
        w.opaque_fixed(&self.deviceid);
        w.u64(self.file_offset);
        w.u64(self.length);
        w.u64(self.storage_offset);
        w.u32(self.state);
    }

    pub fn decode(r: &mut XdrReader<'_>) -> XdrResult<BlockExtent> {
        Ok(BlockExtent {
            deviceid: r.array()?,
            file_offset: r.u64()?,
            length: r.u64()?,
            storage_offset: r.u64()?,
            state: r.u32()?,
        })
    }

    /// A `pnfs_block_layout4` / `pnfs_block_layoutupdate4` body: the extent list.
    pub fn encode_list(list: &[BlockExtent]) -> Vec<u8> {
        let mut w = XdrWriter::new();
        w.u32(list.len() as u32);
        for e in list {
            e.encode(&mut w);
        }
        w.into_inner()
    }

    /// Decodes a whole block layout body; trailing bytes are an error.
    pub fn decode_list(body: &[u8]) -> XdrResult<Vec<BlockExtent>> {
        let mut r = XdrReader::new(body);
        let n = r.array_len(1 << 20, Self::WIRE_SIZE)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(BlockExtent::decode(&mut r)?);
        }
        r.finish()?;
        Ok(v)
    }
}

/// `pnfs_block_volume4` (RFC 5663 §2.2) and the SCSI base volume (RFC 8154 §2.3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockVolume {
    /// Signature components: (byte offset on the volume, expected bytes).
    Simple(Vec<(i64, Vec<u8>)>),
    Slice {
        start: u64,
        length: u64,
        volume: u32,
    },
    Concat(Vec<u32>),
    Stripe {
        unit: u64,
        volumes: Vec<u32>,
    },
    Scsi {
        code_set: u32,
        designator_type: u32,
        designator: Vec<u8>,
        pr_key: u64,
    },
}

/// Decodes a `pnfs_block_deviceaddr4` (or SCSI `pnfs_scsi_deviceaddr4`) body.
pub fn decode_block_deviceaddr(body: &[u8]) -> XdrResult<Vec<BlockVolume>> {
    let mut r = XdrReader::new(body);
    let n = r.array_len(1024, 4)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(match r.u32()? {
            0 => {
                let k = r.array_len(64, 12)?;
                let mut sig = Vec::with_capacity(k);
                for _ in 0..k {
                    sig.push((r.i64()?, r.opaque_vec(4096)?));
                }
                BlockVolume::Simple(sig)
            }
            1 => BlockVolume::Slice {
                start: r.u64()?,
                length: r.u64()?,
                volume: r.u32()?,
            },
            2 => BlockVolume::Concat(r.vec(1024, 4)?),
            3 => BlockVolume::Stripe {
                unit: r.u64()?,
                volumes: r.vec(1024, 4)?,
            },
            4 => BlockVolume::Scsi {
                code_set: r.u32()?,
                designator_type: r.u32()?,
                designator: r.opaque_vec(256)?,
                pr_key: r.u64()?,
            },
            _ => return Err(XdrError::BadValue),
        });
    }
    r.finish()?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extent_is_44_bytes_and_round_trips() {
        let e = BlockExtent {
            deviceid: [7; 16],
            file_offset: 4096,
            length: 8192,
            storage_offset: 1 << 30,
            state: extent_state::INVALID_DATA,
        };
        let body = BlockExtent::encode_list(&[e, e]);
        assert_eq!(body.len(), 4 + 2 * BlockExtent::WIRE_SIZE);
        assert_eq!(BlockExtent::decode_list(&body).unwrap(), vec![e, e]);
        assert!(BlockExtent::decode_list(&body[..body.len() - 1]).is_err());
    }

    #[test]
    fn simple_volume_signature_decodes() {
        let mut w = XdrWriter::new();
        w.u32(1);
        w.u32(0);
        w.u32(1);
        w.i64(32);
        w.opaque(&[0xaa; 16]);
        assert_eq!(
            decode_block_deviceaddr(&w.buf).unwrap(),
            vec![BlockVolume::Simple(vec![(32, vec![0xaa; 16])])]
        );
    }

    #[test]
    fn layoutcommit_layout() {
        let mut w = XdrWriter::new();
        encode_layoutcommit(
            &LayoutCommitArgs {
                offset: 0,
                length: 4096,
                reclaim: false,
                stateid: Stateid::ANONYMOUS,
                last_write_offset: Some(4095),
                time_modify: None,
                layout_type: layout_type::BLOCK_VOLUME,
                body: BlockExtent::encode_list(&[]),
            },
            &mut w,
        );
        // offset 8, length 8, reclaim 4, stateid 16, newoffset 4+8, newtime 4, type 4, body 4+4
        assert_eq!(w.len(), 8 + 8 + 4 + 16 + 12 + 4 + 4 + 8);
    }
}
