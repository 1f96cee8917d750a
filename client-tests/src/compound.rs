//! COMPOUND4args building (RFC 8881 §16.2) and COMPOUND4res decoding with accessors that turn
//! a failed operation into a `ClientError::Nfs` naming the operation and its status.

use pnfsd::nfs4::opcode::NfsOp;
use pnfsd::nfs4::status::NfsStat;
use pnfsd::nfs4::types::{Bitmap, Stateid};
use pnfsd::xdr::{XdrReader, XdrWriter};

use crate::attrs::{Attrs, SetAttrs};
use crate::error::{ClientError, Result, XdrContext};
use crate::ops::{CreateKind, Op, OpenArgs, Stable};
use crate::results::{decode_body, OpRes, ReadDirRes, ReadRes, SequenceRes, WriteRes};

/// A list of operations; `Session::run` puts SEQUENCE in front.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compound {
    pub tag: Vec<u8>,
    pub ops: Vec<Op>,
}

impl Compound {
    pub fn new() -> Compound {
        Compound::default()
    }

    pub fn op(mut self, op: Op) -> Self {
        self.ops.push(op);
        self
    }

    pub fn tag(mut self, tag: &str) -> Self {
        self.tag = tag.as_bytes().to_vec();
        self
    }

    pub fn putrootfh(self) -> Self {
        self.op(Op::PutRootFh)
    }
    pub fn putfh(self, fh: &[u8]) -> Self {
        self.op(Op::PutFh(fh.to_vec()))
    }
    pub fn getfh(self) -> Self {
        self.op(Op::GetFh)
    }
    pub fn savefh(self) -> Self {
        self.op(Op::SaveFh)
    }
    pub fn restorefh(self) -> Self {
        self.op(Op::RestoreFh)
    }
    pub fn lookup(self, name: &str) -> Self {
        self.op(Op::Lookup(name.as_bytes().to_vec()))
    }
    /// PUTROOTFH then one LOOKUP per `/`-separated component.
    pub fn walk(self, path: &str) -> Self {
        path.split('/')
            .filter(|c| !c.is_empty())
            .fold(self.putrootfh(), |c, n| c.lookup(n))
    }
    pub fn getattr(self, mask: Bitmap) -> Self {
        self.op(Op::GetAttr(mask))
    }
    pub fn setattr(self, stateid: Stateid, attrs: SetAttrs) -> Self {
        self.op(Op::SetAttr { stateid, attrs })
    }
    pub fn mkdir(self, name: &str, mode: u32) -> Self {
        self.op(Op::Create {
            kind: CreateKind::Dir,
            name: name.as_bytes().to_vec(),
            attrs: SetAttrs::mode(mode),
        })
    }
    pub fn symlink(self, name: &str, target: &str) -> Self {
        self.op(Op::Create {
            kind: CreateKind::Symlink(target.as_bytes().to_vec()),
            name: name.as_bytes().to_vec(),
            attrs: SetAttrs::mode(0o777),
        })
    }
    pub fn open(self, args: OpenArgs) -> Self {
        self.op(Op::Open(args))
    }
    pub fn close(self, stateid: Stateid) -> Self {
        self.op(Op::Close { seqid: 0, stateid })
    }
    pub fn read(self, stateid: Stateid, offset: u64, count: u32) -> Self {
        self.op(Op::Read {
            stateid,
            offset,
            count,
        })
    }
    pub fn write(self, stateid: Stateid, offset: u64, stable: Stable, data: &[u8]) -> Self {
        self.op(Op::Write {
            stateid,
            offset,
            stable,
            data: data.to_vec(),
        })
    }
    pub fn commit(self, offset: u64, count: u32) -> Self {
        self.op(Op::Commit { offset, count })
    }
    pub fn remove(self, name: &str) -> Self {
        self.op(Op::Remove(name.as_bytes().to_vec()))
    }
    pub fn rename(self, old: &str, new: &str) -> Self {
        self.op(Op::Rename {
            old: old.as_bytes().to_vec(),
            new: new.as_bytes().to_vec(),
        })
    }
    pub fn link(self, name: &str) -> Self {
        self.op(Op::Link(name.as_bytes().to_vec()))
    }
    pub fn readdir(self, cookie: u64, verf: [u8; 8], maxcount: u32, attrs: Bitmap) -> Self {
        self.op(Op::ReadDir {
            cookie,
            verf,
            dircount: maxcount,
            maxcount,
            attrs,
        })
    }
    pub fn readlink(self) -> Self {
        self.op(Op::ReadLink)
    }

    /// Encodes COMPOUND4args for `minor`.
    pub fn encode(&self, minor: u32) -> Vec<u8> {
        let mut w = XdrWriter::with_capacity(256);
        w.string(&self.tag);
        w.u32(minor);
        w.u32(self.ops.len() as u32);
        for op in &self.ops {
            op.encode(&mut w);
        }
        w.into_inner()
    }
}

/// One decoded `nfs_resop4`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResOp {
    pub op: NfsOp,
    pub status: NfsStat,
    pub res: OpRes,
}

/// A decoded COMPOUND4res, with the bytes it came from (reply-cache tests compare them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: NfsStat,
    pub tag: Vec<u8>,
    pub results: Vec<ResOp>,
    pub raw: Vec<u8>,
}

/// A readable name for an opcode.
pub fn op_name(op: NfsOp) -> &'static str {
    op.name()
}

impl Reply {
    pub fn decode(raw: Vec<u8>) -> Result<Reply> {
        let mut r = XdrReader::new(&raw);
        let status = NfsStat(r.u32().ctx("COMPOUND4res status")?);
        let tag = r.string(usize::MAX).ctx("COMPOUND4res tag")?;
        let n = r
            .array_len(u32::MAX as usize, 8)
            .ctx("COMPOUND4res resarray")?;
        let mut results = Vec::with_capacity(n);
        for _ in 0..n {
            let op = NfsOp(r.u32().ctx("resop")?);
            let st = NfsStat(r.u32().ctx("op status")?);
            let res = decode_body(op, st, &mut r).map_err(|err| ClientError::Xdr {
                what: op_name(op),
                err,
            })?;
            let stop = matches!(res, OpRes::Undecoded(_));
            results.push(ResOp {
                op,
                status: st,
                res,
            });
            if stop {
                break;
            }
        }
        let complete = results.len() == n
            && !matches!(
                results.last(),
                Some(ResOp {
                    res: OpRes::Undecoded(_),
                    ..
                })
            );
        if complete {
            r.finish().ctx("end of COMPOUND4res")?;
        }
        // RFC 8881 §16.2.3: the COMPOUND status is the status of the last result (with no
        // result at all, e.g. MINOR_VERS_MISMATCH, it stands alone).
        let last = results.last().map(|x| x.status).unwrap_or(status);
        if complete && last != status {
            return Err(ClientError::Protocol(format!(
                "COMPOUND status {} differs from the last result's {}",
                status.name(),
                last.name()
            )));
        }
        Ok(Reply {
            status,
            tag,
            results,
            raw,
        })
    }

    /// Fails with the first failed operation, if any.
    pub fn ok(self) -> Result<Reply> {
        if let Some(f) = self.results.iter().find(|r| r.status != NfsStat::OK) {
            return Err(ClientError::Nfs {
                op: op_name(f.op),
                status: f.status,
            });
        }
        if self.status != NfsStat::OK {
            return Err(ClientError::Nfs {
                op: "COMPOUND",
                status: self.status,
            });
        }
        Ok(self)
    }

    /// The status of the first failed operation, or OK.
    pub fn first_error(&self) -> (NfsOp, NfsStat) {
        self.results
            .iter()
            .find(|r| r.status != NfsStat::OK)
            .map(|r| (r.op, r.status))
            .unwrap_or((NfsOp(0), NfsStat::OK))
    }

    fn nth_of(&self, op: NfsOp, nth_last: usize) -> Result<&OpRes> {
        let r = self
            .results
            .iter()
            .rev()
            .filter(|r| r.op == op)
            .nth(nth_last)
            .ok_or(ClientError::Missing(op_name(op)))?;
        if r.status != NfsStat::OK {
            return Err(ClientError::Nfs {
                op: op_name(op),
                status: r.status,
            });
        }
        Ok(&r.res)
    }

    fn last_of(&self, op: NfsOp) -> Result<&OpRes> {
        self.nth_of(op, 0)
    }

    pub fn sequence(&self) -> Result<&SequenceRes> {
        match self.last_of(NfsOp::SEQUENCE)? {
            OpRes::Sequence(s) => Ok(s),
            _ => Err(ClientError::Missing("SEQUENCE body")),
        }
    }
    /// The filehandle of the last GETFH.
    pub fn fh(&self) -> Result<Vec<u8>> {
        self.fh_nth_last(0)
    }
    /// The filehandle of the GETFH `n` places before the last one.
    pub fn fh_nth_last(&self, n: usize) -> Result<Vec<u8>> {
        match self.nth_of(NfsOp::GETFH, n)? {
            OpRes::GetFh(f) => Ok(f.clone()),
            _ => Err(ClientError::Missing("GETFH body")),
        }
    }
    pub fn attrs(&self) -> Result<&Attrs> {
        match self.last_of(NfsOp::GETATTR)? {
            OpRes::GetAttr(a) => Ok(a),
            _ => Err(ClientError::Missing("GETATTR body")),
        }
    }
    pub fn open(&self) -> Result<&crate::results::OpenRes> {
        match self.last_of(NfsOp::OPEN)? {
            OpRes::Open(o) => Ok(o),
            _ => Err(ClientError::Missing("OPEN body")),
        }
    }
    pub fn read(&self) -> Result<&ReadRes> {
        match self.last_of(NfsOp::READ)? {
            OpRes::Read(x) => Ok(x),
            _ => Err(ClientError::Missing("READ body")),
        }
    }
    pub fn write(&self) -> Result<&WriteRes> {
        match self.last_of(NfsOp::WRITE)? {
            OpRes::Write(x) => Ok(x),
            _ => Err(ClientError::Missing("WRITE body")),
        }
    }
    pub fn readdir(&self) -> Result<&ReadDirRes> {
        match self.last_of(NfsOp::READDIR)? {
            OpRes::ReadDir(x) => Ok(x),
            _ => Err(ClientError::Missing("READDIR body")),
        }
    }
    pub fn readlink(&self) -> Result<&[u8]> {
        match self.last_of(NfsOp::READLINK)? {
            OpRes::ReadLink(x) => Ok(x),
            _ => Err(ClientError::Missing("READLINK body")),
        }
    }
    pub fn commit_verf(&self) -> Result<[u8; 8]> {
        match self.last_of(NfsOp::COMMIT)? {
            OpRes::Commit(v) => Ok(*v),
            _ => Err(ClientError::Missing("COMMIT body")),
        }
    }
    pub fn close(&self) -> Result<Stateid> {
        match self.last_of(NfsOp::CLOSE)? {
            OpRes::Close(s) => Ok(*s),
            _ => Err(ClientError::Missing("CLOSE body")),
        }
    }
    pub fn layoutget(&self) -> Result<&crate::pnfs::LayoutGetRes> {
        match self.last_of(NfsOp::LAYOUTGET)? {
            OpRes::LayoutGet(x) => Ok(x),
            _ => Err(ClientError::Missing("LAYOUTGET body")),
        }
    }
    pub fn layoutcommit(&self) -> Result<Option<u64>> {
        match self.last_of(NfsOp::LAYOUTCOMMIT)? {
            OpRes::LayoutCommit(x) => Ok(*x),
            _ => Err(ClientError::Missing("LAYOUTCOMMIT body")),
        }
    }
    pub fn layoutreturn(&self) -> Result<Option<Stateid>> {
        match self.last_of(NfsOp::LAYOUTRETURN)? {
            OpRes::LayoutReturn(x) => Ok(*x),
            _ => Err(ClientError::Missing("LAYOUTRETURN body")),
        }
    }
    pub fn deviceinfo(&self) -> Result<&crate::pnfs::DeviceInfoRes> {
        match self.last_of(NfsOp::GETDEVICEINFO)? {
            OpRes::GetDeviceInfo(x) => Ok(x),
            _ => Err(ClientError::Missing("GETDEVICEINFO body")),
        }
    }
    pub fn devicelist(&self) -> Result<&crate::pnfs::DeviceListRes> {
        match self.last_of(NfsOp::GETDEVICELIST)? {
            OpRes::GetDeviceList(x) => Ok(x),
            _ => Err(ClientError::Missing("GETDEVICELIST body")),
        }
    }
    /// The body of the last result of `op`, whatever it is.
    pub fn body(&self, op: NfsOp) -> Result<&OpRes> {
        self.last_of(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply_bytes(status: u32, ops: &[(NfsOp, u32, &[u8])]) -> Vec<u8> {
        let mut w = XdrWriter::new();
        w.u32(status);
        w.string(b"t");
        w.u32(ops.len() as u32);
        for (op, st, body) in ops {
            w.u32(op.0);
            w.u32(*st);
            w.buf.extend_from_slice(body);
        }
        w.buf
    }

    #[test]
    fn decodes_and_reports_the_failed_op() {
        let mut fh = XdrWriter::new();
        fh.opaque(&[1; 16]);
        let raw = reply_bytes(
            2,
            &[
                (NfsOp::PUTROOTFH, 0, &[]),
                (NfsOp::GETFH, 0, &fh.buf),
                (NfsOp::LOOKUP, 2, &[]),
            ],
        );
        let rep = Reply::decode(raw).unwrap();
        assert_eq!(rep.fh().unwrap(), vec![1; 16]);
        assert_eq!(rep.first_error(), (NfsOp::LOOKUP, NfsStat::NOENT));
        match rep.ok() {
            Err(ClientError::Nfs {
                op: "LOOKUP",
                status,
            }) => assert_eq!(status, NfsStat::NOENT),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn status_mismatch_and_trailing_bytes_are_errors() {
        assert!(Reply::decode(reply_bytes(0, &[(NfsOp::LOOKUP, 2, &[])])).is_err());
        let mut raw = reply_bytes(0, &[(NfsOp::PUTROOTFH, 0, &[])]);
        raw.extend_from_slice(&[0, 0, 0, 0]);
        assert!(Reply::decode(raw).is_err());
    }

    #[test]
    fn walk_builds_lookups() {
        let c = Compound::new().walk("/a/b/").getfh();
        assert_eq!(
            c.ops,
            vec![
                Op::PutRootFh,
                Op::Lookup(b"a".to_vec()),
                Op::Lookup(b"b".to_vec()),
                Op::GetFh
            ]
        );
        let enc = c.encode(1);
        assert_eq!(&enc[..12], &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4]);
    }
}
