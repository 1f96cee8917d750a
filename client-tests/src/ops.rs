//! COMPOUND operations as the client sends them (RFC 8881 §18 argument layouts), and their
//! encoders. `Op::Raw` sends any opcode with any body: tests of bad input use it. pNFS
//! operations (LAYOUTGET, LAYOUTCOMMIT, GETDEVICEINFO, ...) are added as new variants here and
//! new result bodies in `results.rs`, without touching the transport or the session.

use pnfsd::nfs4::opcode::NfsOp;
use pnfsd::nfs4::types::{Bitmap, Stateid};
use pnfsd::xdr::{Xdr, XdrWriter};

use crate::attrs::SetAttrs;
pub use crate::open_args::{encode_open, lock_type, share, CreateHow, Locker, OpenArgs, OpenClaim};
pub use crate::session_args::{
    exchgid_flag, session_flag, ChannelAttrs, CreateSessionArgs, SequenceArgs,
};

/// What CREATE makes (`createtype4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateKind {
    Dir,
    Symlink(Vec<u8>),
    Fifo,
    Socket,
    Block(u32, u32),
    Char(u32, u32),
}

/// `stable_how4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Stable {
    Unstable = 0,
    DataSync = 1,
    FileSync = 2,
}

/// One operation of a COMPOUND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Sequence(SequenceArgs),
    ExchangeId {
        verifier: [u8; 8],
        owner: Vec<u8>,
        flags: u32,
    },
    CreateSession(CreateSessionArgs),
    DestroySession([u8; 16]),
    /// BIND_CONN_TO_SESSION: session, `channel_dir_from_client4` (FORE 1, BACK 2,
    /// FORE_OR_BOTH 3, BACK_OR_BOTH 7), RDMA mode.
    BindConnToSession {
        sessionid: [u8; 16],
        dir: u32,
        rdma: bool,
    },
    /// ACCESS with the ACCESS4_* bits asked for.
    Access(u32),
    DestroyClientid(u64),
    ReclaimComplete {
        one_fs: bool,
    },
    PutRootFh,
    PutFh(Vec<u8>),
    GetFh,
    SaveFh,
    RestoreFh,
    Lookup(Vec<u8>),
    GetAttr(Bitmap),
    SetAttr {
        stateid: Stateid,
        attrs: SetAttrs,
    },
    Create {
        kind: CreateKind,
        name: Vec<u8>,
        attrs: SetAttrs,
    },
    Open(OpenArgs),
    Close {
        seqid: u32,
        stateid: Stateid,
    },
    Read {
        stateid: Stateid,
        offset: u64,
        count: u32,
    },
    Write {
        stateid: Stateid,
        offset: u64,
        stable: Stable,
        data: Vec<u8>,
    },
    Commit {
        offset: u64,
        count: u32,
    },
    Remove(Vec<u8>),
    Rename {
        old: Vec<u8>,
        new: Vec<u8>,
    },
    Link(Vec<u8>),
    ReadDir {
        cookie: u64,
        verf: [u8; 8],
        dircount: u32,
        maxcount: u32,
        attrs: Bitmap,
    },
    ReadLink,
    Lock {
        locktype: u32,
        reclaim: bool,
        offset: u64,
        length: u64,
        locker: Locker,
    },
    LockT {
        locktype: u32,
        offset: u64,
        length: u64,
        clientid: u64,
        owner: Vec<u8>,
    },
    LockU {
        locktype: u32,
        seqid: u32,
        stateid: Stateid,
        offset: u64,
        length: u64,
    },
    LayoutGet(crate::pnfs::LayoutGetArgs),
    LayoutCommit(crate::pnfs::LayoutCommitArgs),
    LayoutReturn(crate::pnfs::LayoutReturnArgs),
    GetDeviceInfo(crate::pnfs::GetDeviceInfoArgs),
    GetDeviceList(crate::pnfs::GetDeviceListArgs),
    /// Any opcode followed by `body` verbatim (which may be malformed on purpose).
    Raw {
        opnum: NfsOp,
        body: Vec<u8>,
    },
}

impl Op {
    /// BIND_CONN_TO_SESSION of this connection to `sessionid` in direction `dir`
    /// (`channel_dir_from_client4`, RFC 8881 §18.34), without RDMA.
    pub fn bind_conn(sessionid: [u8; 16], dir: u32) -> Op {
        Op::BindConnToSession {
            sessionid,
            dir,
            rdma: false,
        }
    }

    pub fn opnum(&self) -> NfsOp {
        match self {
            Op::Sequence(_) => NfsOp::SEQUENCE,
            Op::ExchangeId { .. } => NfsOp::EXCHANGE_ID,
            Op::CreateSession(_) => NfsOp::CREATE_SESSION,
            Op::DestroySession(_) => NfsOp::DESTROY_SESSION,
            Op::BindConnToSession { .. } => NfsOp::BIND_CONN_TO_SESSION,
            Op::Access(_) => NfsOp::ACCESS,
            Op::DestroyClientid(_) => NfsOp::DESTROY_CLIENTID,
            Op::ReclaimComplete { .. } => NfsOp::RECLAIM_COMPLETE,
            Op::PutRootFh => NfsOp::PUTROOTFH,
            Op::PutFh(_) => NfsOp::PUTFH,
            Op::GetFh => NfsOp::GETFH,
            Op::SaveFh => NfsOp::SAVEFH,
            Op::RestoreFh => NfsOp::RESTOREFH,
            Op::Lookup(_) => NfsOp::LOOKUP,
            Op::GetAttr(_) => NfsOp::GETATTR,
            Op::SetAttr { .. } => NfsOp::SETATTR,
            Op::Create { .. } => NfsOp::CREATE,
            Op::Open(_) => NfsOp::OPEN,
            Op::Close { .. } => NfsOp::CLOSE,
            Op::Read { .. } => NfsOp::READ,
            Op::Write { .. } => NfsOp::WRITE,
            Op::Commit { .. } => NfsOp::COMMIT,
            Op::Remove(_) => NfsOp::REMOVE,
            Op::Rename { .. } => NfsOp::RENAME,
            Op::Link(_) => NfsOp::LINK,
            Op::ReadDir { .. } => NfsOp::READDIR,
            Op::ReadLink => NfsOp::READLINK,
            Op::Lock { .. } => NfsOp::LOCK,
            Op::LockT { .. } => NfsOp::LOCKT,
            Op::LockU { .. } => NfsOp::LOCKU,
            Op::LayoutGet(_) => NfsOp::LAYOUTGET,
            Op::LayoutCommit(_) => NfsOp::LAYOUTCOMMIT,
            Op::LayoutReturn(_) => NfsOp::LAYOUTRETURN,
            Op::GetDeviceInfo(_) => NfsOp::GETDEVICEINFO,
            Op::GetDeviceList(_) => NfsOp::GETDEVICELIST,
            Op::Raw { opnum, .. } => *opnum,
        }
    }

    /// Whether running the operation twice changes nothing (no need to cache its reply).
    pub fn is_read_only(&self) -> bool {
        matches!(
            self,
            Op::Sequence(_)
                | Op::PutRootFh
                | Op::PutFh(_)
                | Op::GetFh
                | Op::SaveFh
                | Op::RestoreFh
                | Op::Lookup(_)
                | Op::GetAttr(_)
                | Op::Read { .. }
                | Op::ReadDir { .. }
                | Op::ReadLink
                | Op::Access(_)
                | Op::LockT { .. }
                | Op::GetDeviceInfo(_)
                | Op::GetDeviceList(_)
        )
    }

    /// `nfs_argop4`: the opcode then the arguments.
    pub fn encode(&self, w: &mut XdrWriter) {
        w.u32(self.opnum().0);
        match self {
            Op::Sequence(s) => {
                w.opaque_fixed(&s.sessionid);
                w.u32(s.sequenceid);
                w.u32(s.slotid);
                w.u32(s.highest_slotid);
                w.bool(s.cachethis);
            }
            Op::ExchangeId {
                verifier,
                owner,
                flags,
            } => {
                w.opaque_fixed(verifier);
                w.opaque(owner);
                w.u32(*flags);
                w.u32(0); // SP4_NONE
                w.u32(0); // eia_client_impl_id<1>: none
            }
            Op::CreateSession(c) => {
                w.u64(c.clientid);
                w.u32(c.sequence);
                w.u32(c.flags);
                c.fore.encode(w);
                c.back.encode(w);
                w.u32(c.cb_program);
                match &c.cb_sec {
                    None => {
                        w.u32(1);
                        w.u32(crate::rpc::AUTH_NONE);
                    }
                    Some(a) => {
                        w.u32(1);
                        w.u32(crate::rpc::AUTH_SYS);
                        a.encode(w);
                    }
                }
            }
            Op::DestroySession(s) => w.opaque_fixed(s),
            Op::BindConnToSession {
                sessionid,
                dir,
                rdma,
            } => {
                w.opaque_fixed(sessionid);
                w.u32(*dir);
                w.bool(*rdma);
            }
            Op::Access(bits) => w.u32(*bits),
            Op::DestroyClientid(c) => w.u64(*c),
            Op::ReclaimComplete { one_fs } => w.bool(*one_fs),
            Op::PutRootFh | Op::GetFh | Op::SaveFh | Op::RestoreFh | Op::ReadLink => {}
            Op::PutFh(fh) => w.opaque(fh),
            Op::Lookup(name) | Op::Remove(name) | Op::Link(name) => w.string(name),
            Op::GetAttr(mask) => mask.encode(w),
            Op::SetAttr { stateid, attrs } => {
                stateid.encode(w);
                attrs.encode(w);
            }
            Op::Create { kind, name, attrs } => {
                use crate::attrs::ftype;
                match kind {
                    CreateKind::Dir => w.u32(ftype::DIR),
                    CreateKind::Symlink(t) => {
                        w.u32(ftype::LNK);
                        w.string(t);
                    }
                    CreateKind::Fifo => w.u32(ftype::FIFO),
                    CreateKind::Socket => w.u32(ftype::SOCK),
                    CreateKind::Block(a, b) => {
                        w.u32(ftype::BLK);
                        w.u32(*a);
                        w.u32(*b);
                    }
                    CreateKind::Char(a, b) => {
                        w.u32(ftype::CHR);
                        w.u32(*a);
                        w.u32(*b);
                    }
                }
                w.string(name);
                attrs.encode(w);
            }
            Op::Open(o) => encode_open(o, w),
            Op::Close { seqid, stateid } => {
                w.u32(*seqid);
                stateid.encode(w);
            }
            Op::Read {
                stateid,
                offset,
                count,
            } => {
                stateid.encode(w);
                w.u64(*offset);
                w.u32(*count);
            }
            Op::Write {
                stateid,
                offset,
                stable,
                data,
            } => {
                stateid.encode(w);
                w.u64(*offset);
                w.u32(*stable as u32);
                w.opaque(data);
            }
            Op::Commit { offset, count } => {
                w.u64(*offset);
                w.u32(*count);
            }
            Op::Rename { old, new } => {
                w.string(old);
                w.string(new);
            }
            Op::ReadDir {
                cookie,
                verf,
                dircount,
                maxcount,
                attrs,
            } => {
                w.u64(*cookie);
                w.opaque_fixed(verf);
                w.u32(*dircount);
                w.u32(*maxcount);
                attrs.encode(w);
            }
            Op::Lock {
                locktype,
                reclaim,
                offset,
                length,
                locker,
            } => {
                w.u32(*locktype);
                w.bool(*reclaim);
                w.u64(*offset);
                w.u64(*length);
                match locker {
                    Locker::New {
                        open_seqid,
                        open_stateid,
                        lock_seqid,
                        clientid,
                        owner,
                    } => {
                        w.bool(true);
                        w.u32(*open_seqid);
                        open_stateid.encode(w);
                        w.u32(*lock_seqid);
                        w.u64(*clientid);
                        w.opaque(owner);
                    }
                    Locker::Existing {
                        lock_stateid,
                        lock_seqid,
                    } => {
                        w.bool(false);
                        lock_stateid.encode(w);
                        w.u32(*lock_seqid);
                    }
                }
            }
            Op::LockT {
                locktype,
                offset,
                length,
                clientid,
                owner,
            } => {
                w.u32(*locktype);
                w.u64(*offset);
                w.u64(*length);
                w.u64(*clientid);
                w.opaque(owner);
            }
            Op::LockU {
                locktype,
                seqid,
                stateid,
                offset,
                length,
            } => {
                w.u32(*locktype);
                w.u32(*seqid);
                stateid.encode(w);
                w.u64(*offset);
                w.u64(*length);
            }
            Op::LayoutGet(a) => crate::pnfs::encode_layoutget(a, w),
            Op::LayoutCommit(a) => crate::pnfs::encode_layoutcommit(a, w),
            Op::LayoutReturn(a) => crate::pnfs::encode_layoutreturn(a, w),
            Op::GetDeviceInfo(a) => crate::pnfs::encode_getdeviceinfo(a, w),
            Op::GetDeviceList(a) => crate::pnfs::encode_getdevicelist(a, w),
            Op::Raw { body, .. } => w.buf.extend_from_slice(body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(op: &Op) -> Vec<u8> {
        let mut w = XdrWriter::new();
        op.encode(&mut w);
        w.buf
    }

    #[test]
    fn fixed_layouts() {
        assert_eq!(enc(&Op::PutRootFh), vec![0, 0, 0, 24]);
        let seq = enc(&Op::Sequence(SequenceArgs {
            sessionid: [7; 16],
            sequenceid: 2,
            slotid: 1,
            highest_slotid: 3,
            cachethis: true,
        }));
        assert_eq!(seq.len(), 4 + 16 + 16);
        assert_eq!(&seq[..4], &[0, 0, 0, 53]);
        assert_eq!(&seq[32..], &[0, 0, 0, 1]);
        // READ: opcode + stateid (16) + offset (8) + count (4)
        let r = enc(&Op::Read {
            stateid: Stateid::ANONYMOUS,
            offset: 1,
            count: 2,
        });
        assert_eq!(r.len(), 4 + 16 + 8 + 4);
        // LOOKUP "abc" is padded to 4
        assert_eq!(
            enc(&Op::Lookup(b"abc".to_vec())),
            vec![0, 0, 0, 15, 0, 0, 0, 3, b'a', b'b', b'c', 0]
        );
    }

    #[test]
    fn open_create_exclusive_layout() {
        let o = enc(&Op::Open(OpenArgs {
            seqid: 0,
            share_access: share::ACCESS_BOTH,
            share_deny: 0,
            clientid: 5,
            owner: b"o".to_vec(),
            create: Some(CreateHow::Exclusive41 {
                verf: [1; 8],
                attrs: SetAttrs::default(),
            }),
            claim: OpenClaim::Null(b"f".to_vec()),
        }));
        // op, seqid, access, deny, clientid(8), owner(4+4), opentype, mode, verf(8),
        // fattr4 (empty bitmap 4 + empty opaque 4), claim type, name (4+4)
        assert_eq!(o.len(), 4 + 4 + 4 + 4 + 8 + 8 + 4 + 4 + 8 + 8 + 4 + 8);
        assert_eq!(&o[32..36], &[0, 0, 0, 1]); // OPEN4_CREATE
        assert_eq!(&o[36..40], &[0, 0, 0, 3]); // EXCLUSIVE4_1
    }
}
