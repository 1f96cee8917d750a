//! Result bodies of COMPOUND operations (RFC 8881 §18 result layouts) and their decoders.
//! A result is decoded by the opcode the server put in front of it, so a reply the client did
//! not expect still decodes (and a wrong opcode shows up in the test, not as garbage).

use pnfsd::nfs4::opcode::NfsOp;
use pnfsd::nfs4::status::NfsStat;
use pnfsd::nfs4::types::{Bitmap, Stateid};
use pnfsd::xdr::{Xdr, XdrError, XdrReader, XdrResult};

use crate::attrs::Attrs;
use crate::ops::ChannelAttrs;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceRes {
    pub sessionid: [u8; 16],
    pub sequenceid: u32,
    pub slotid: u32,
    pub highest_slotid: u32,
    pub target_highest_slotid: u32,
    pub status_flags: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeIdRes {
    pub clientid: u64,
    pub sequenceid: u32,
    pub flags: u32,
    pub server_minor_id: u64,
    pub server_major_id: Vec<u8>,
    pub server_scope: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSessionRes {
    pub sessionid: [u8; 16],
    pub sequence: u32,
    pub flags: u32,
    pub fore: ChannelAttrs,
    pub back: ChannelAttrs,
}

/// `change_info4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeInfo {
    pub atomic: bool,
    pub before: u64,
    pub after: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRes {
    pub stateid: Stateid,
    pub cinfo: ChangeInfo,
    pub rflags: u32,
    pub attrset: Bitmap,
    /// `open_delegation_type4` of the answer (0 = none); the delegation body is skipped.
    pub delegation: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRes {
    pub eof: bool,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRes {
    pub count: u32,
    pub committed: u32,
    pub verf: [u8; 8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub cookie: u64,
    pub name: Vec<u8>,
    pub attrs: Attrs,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadDirRes {
    pub cookieverf: [u8; 8],
    pub entries: Vec<DirEntry>,
    pub eof: bool,
}

/// `LOCK4denied`: who holds the conflicting lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockDenied {
    pub offset: u64,
    pub length: u64,
    pub locktype: u32,
    pub clientid: u64,
    pub owner: Vec<u8>,
}

fn lock_denied(r: &mut XdrReader<'_>) -> XdrResult<LockDenied> {
    Ok(LockDenied {
        offset: r.u64()?,
        length: r.u64()?,
        locktype: r.u32()?,
        clientid: r.u64()?,
        owner: r.opaque_vec(1024)?,
    })
}

/// The body that follows an operation's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpRes {
    /// Nothing follows the status (or the status was an error without a body).
    None,
    Sequence(SequenceRes),
    ExchangeId(ExchangeIdRes),
    CreateSession(CreateSessionRes),
    BindConnToSession {
        sessionid: [u8; 16],
        dir: u32,
        rdma: bool,
    },
    /// ACCESS: (supported, granted).
    Access(u32, u32),
    GetFh(Vec<u8>),
    GetAttr(Box<Attrs>),
    /// SETATTR's `attrsset` (present whatever the status).
    SetAttr(Bitmap),
    Create {
        cinfo: ChangeInfo,
        attrset: Bitmap,
    },
    Open(OpenRes),
    Close(Stateid),
    Read(ReadRes),
    Write(WriteRes),
    Commit([u8; 8]),
    Remove(ChangeInfo),
    Rename {
        source: ChangeInfo,
        target: ChangeInfo,
    },
    Link(ChangeInfo),
    ReadDir(ReadDirRes),
    ReadLink(Vec<u8>),
    /// LOCK / LOCKU: the lock stateid.
    Lock(Stateid),
    /// LOCK / LOCKT: NFS4ERR_DENIED with the conflicting lock.
    Denied(LockDenied),
    LayoutGet(crate::pnfs::LayoutGetRes),
    /// LAYOUTCOMMIT's new size, if the server changed it.
    LayoutCommit(Option<u64>),
    LayoutReturn(Option<Stateid>),
    GetDeviceInfo(crate::pnfs::DeviceInfoRes),
    GetDeviceList(crate::pnfs::DeviceListRes),
    /// LAYOUTGET's LAYOUTTRYLATER body: whether the server will signal availability.
    LayoutTryLater(bool),
    /// GETDEVICEINFO's TOOSMALL body: the size that would have fit.
    TooSmall(u32),
    /// An OK result of an operation this decoder has no layout for: the rest of the reply
    /// (it cannot be split further).
    Undecoded(Vec<u8>),
}

fn change_info(r: &mut XdrReader<'_>) -> XdrResult<ChangeInfo> {
    Ok(ChangeInfo {
        atomic: r.bool()?,
        before: r.u64()?,
        after: r.u64()?,
    })
}

fn channel_attrs(r: &mut XdrReader<'_>) -> XdrResult<ChannelAttrs> {
    let a = ChannelAttrs {
        headerpadsize: r.u32()?,
        maxrequestsize: r.u32()?,
        maxresponsesize: r.u32()?,
        maxresponsesize_cached: r.u32()?,
        maxoperations: r.u32()?,
        maxrequests: r.u32()?,
    };
    let n = r.array_len(1, 4)?;
    for _ in 0..n {
        r.u32()?;
    }
    Ok(a)
}

/// Skips an `open_delegation4` body (RFC 8881 §18.16.4) and returns its type.
fn delegation(r: &mut XdrReader<'_>) -> XdrResult<u32> {
    let t = r.u32()?;
    let nfsace = |r: &mut XdrReader<'_>| -> XdrResult<()> {
        r.u32()?;
        r.u32()?;
        r.u32()?;
        r.string(1024)?;
        Ok(())
    };
    match t {
        0 => {}
        1 => {
            Stateid::decode(r)?;
            r.bool()?;
            nfsace(r)?;
        }
        2 => {
            Stateid::decode(r)?;
            r.bool()?;
            match r.u32()? {
                1 => {
                    r.u64()?;
                }
                2 => {
                    r.u32()?;
                    r.u32()?;
                }
                _ => return Err(XdrError::BadValue),
            }
            nfsace(r)?;
        }
        3 => {
            // WND4_CONTENTION (1) and WND4_RESOURCE (2) carry a bool; every other reason is void.
            if matches!(r.u32()?, 1 | 2) {
                r.bool()?;
            }
        }
        _ => return Err(XdrError::BadValue),
    }
    Ok(t)
}

fn readdir(r: &mut XdrReader<'_>) -> XdrResult<ReadDirRes> {
    let cookieverf = r.array()?;
    let mut entries = Vec::new();
    while r.bool()? {
        entries.push(DirEntry {
            cookie: r.u64()?,
            name: r.string(usize::MAX)?,
            attrs: Attrs::decode(r)?,
        });
    }
    Ok(ReadDirRes {
        cookieverf,
        entries,
        eof: r.bool()?,
    })
}

/// Decodes the body after `status` for operation `op`.
pub fn decode_body(op: NfsOp, status: NfsStat, r: &mut XdrReader<'_>) -> XdrResult<OpRes> {
    if status != NfsStat::OK {
        // Bodies on failure: NfsOp::SETATTR's attrsset, NfsOp::LOCK/NfsOp::LOCKT's DENIED, NfsOp::LAYOUTGET's
        // LAYOUTTRYLATER, NfsOp::GETDEVICEINFO's TOOSMALL.
        return Ok(match op {
            NfsOp::SETATTR => OpRes::SetAttr(Bitmap::decode(r)?),
            NfsOp::LOCK | NfsOp::LOCKT if status == NfsStat::DENIED => {
                OpRes::Denied(lock_denied(r)?)
            }
            NfsOp::LAYOUTGET if status == NfsStat::LAYOUTTRYLATER => {
                OpRes::LayoutTryLater(r.bool()?)
            }
            NfsOp::GETDEVICEINFO if status == NfsStat::TOOSMALL => OpRes::TooSmall(r.u32()?),
            _ => OpRes::None,
        });
    }
    Ok(match op {
        NfsOp::SEQUENCE => OpRes::Sequence(SequenceRes {
            sessionid: r.array()?,
            sequenceid: r.u32()?,
            slotid: r.u32()?,
            highest_slotid: r.u32()?,
            target_highest_slotid: r.u32()?,
            status_flags: r.u32()?,
        }),
        NfsOp::EXCHANGE_ID => {
            let clientid = r.u64()?;
            let sequenceid = r.u32()?;
            let flags = r.u32()?;
            match r.u32()? {
                0 => {}
                1 => {
                    Bitmap::decode(r)?;
                    Bitmap::decode(r)?;
                }
                _ => return Err(XdrError::BadValue), // SP4_SSV: never asked for
            }
            let server_minor_id = r.u64()?;
            let server_major_id = r.opaque_vec(1024)?;
            let server_scope = r.opaque_vec(1024)?;
            let n = r.array_len(1, 20)?;
            for _ in 0..n {
                r.string(1024)?;
                r.string(1024)?;
                r.i64()?;
                r.u32()?;
            }
            OpRes::ExchangeId(ExchangeIdRes {
                clientid,
                sequenceid,
                flags,
                server_minor_id,
                server_major_id,
                server_scope,
            })
        }
        NfsOp::CREATE_SESSION => OpRes::CreateSession(CreateSessionRes {
            sessionid: r.array()?,
            sequence: r.u32()?,
            flags: r.u32()?,
            fore: channel_attrs(r)?,
            back: channel_attrs(r)?,
        }),
        NfsOp::BIND_CONN_TO_SESSION => OpRes::BindConnToSession {
            sessionid: r.array()?,
            dir: r.u32()?,
            rdma: r.bool()?,
        },
        NfsOp::ACCESS => OpRes::Access(r.u32()?, r.u32()?),
        NfsOp::GETFH => OpRes::GetFh(r.opaque_vec(128)?),
        NfsOp::GETATTR => OpRes::GetAttr(Box::new(Attrs::decode(r)?)),
        NfsOp::SETATTR => OpRes::SetAttr(Bitmap::decode(r)?),
        NfsOp::CREATE => OpRes::Create {
            cinfo: change_info(r)?,
            attrset: Bitmap::decode(r)?,
        },
        NfsOp::OPEN => OpRes::Open(OpenRes {
            stateid: Stateid::decode(r)?,
            cinfo: change_info(r)?,
            rflags: r.u32()?,
            attrset: Bitmap::decode(r)?,
            delegation: delegation(r)?,
        }),
        NfsOp::CLOSE => OpRes::Close(Stateid::decode(r)?),
        NfsOp::READ => OpRes::Read(ReadRes {
            eof: r.bool()?,
            data: r.opaque_vec(usize::MAX)?,
        }),
        NfsOp::WRITE => OpRes::Write(WriteRes {
            count: r.u32()?,
            committed: r.u32()?,
            verf: r.array()?,
        }),
        NfsOp::COMMIT => OpRes::Commit(r.array()?),
        NfsOp::REMOVE => OpRes::Remove(change_info(r)?),
        NfsOp::RENAME => OpRes::Rename {
            source: change_info(r)?,
            target: change_info(r)?,
        },
        NfsOp::LINK => OpRes::Link(change_info(r)?),
        NfsOp::READDIR => OpRes::ReadDir(readdir(r)?),
        NfsOp::READLINK => OpRes::ReadLink(r.string(usize::MAX)?),
        NfsOp::LOCK | NfsOp::LOCKU => OpRes::Lock(Stateid::decode(r)?),
        NfsOp::LOCKT => OpRes::None,
        NfsOp::LAYOUTGET => OpRes::LayoutGet(crate::pnfs::decode_layoutget(r)?),
        NfsOp::LAYOUTCOMMIT => OpRes::LayoutCommit(crate::pnfs::decode_layoutcommit(r)?),
        NfsOp::LAYOUTRETURN => OpRes::LayoutReturn(crate::pnfs::decode_layoutreturn(r)?),
        NfsOp::GETDEVICEINFO => OpRes::GetDeviceInfo(crate::pnfs::decode_getdeviceinfo(r)?),
        NfsOp::GETDEVICELIST => OpRes::GetDeviceList(crate::pnfs::decode_getdevicelist(r)?),
        NfsOp::PUTROOTFH
        | NfsOp::PUTPUBFH
        | NfsOp::PUTFH
        | NfsOp::SAVEFH
        | NfsOp::RESTOREFH
        | NfsOp::LOOKUP
        | NfsOp::LOOKUPP
        | NfsOp::DESTROY_SESSION
        | NfsOp::DESTROY_CLIENTID
        | NfsOp::RECLAIM_COMPLETE
        | NfsOp::ILLEGAL
        | NfsOp::FREE_STATEID
        | NfsOp::DELEGRETURN
        | NfsOp::BACKCHANNEL_CTL
        | NfsOp::VERIFY
        | NfsOp::NVERIFY => OpRes::None,
        _ => OpRes::Undecoded(r.rest().to_vec()),
    })
}
