//! File-level helpers on a session, for tests that want "create this file" rather than the
//! COMPOUND it takes. Each helper is one COMPOUND (sync export: acknowledged = durable).

use pnfsd::nfs4::types::{Bitmap, Stateid};

use crate::attrs::{basic, Attrs, SetAttrs};
use crate::compound::Compound;
use crate::error::{ClientError, Result};
use crate::harness::PnfsdProcess;
use crate::ops::{share, CreateHow, OpenArgs, OpenClaim, Stable};
use crate::results::DirEntry;
use crate::session::Session;

/// An open file: its filehandle and open stateid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFile {
    pub fh: Vec<u8>,
    pub stateid: Stateid,
}

/// A fresh server, a session on it, and the root directory's filehandle: the opening of most
/// tests. Keep the process alive (bind it) for as long as the session is used.
pub async fn server_and_root() -> Result<(PnfsdProcess, Session, Vec<u8>)> {
    let (srv, s) = server_and_session().await?;
    let root = s.lookup_path("").await?;
    Ok((srv, s, root))
}

/// A fresh server and a session on it (keep the process bound while the session is used).
pub async fn server_and_session() -> Result<(PnfsdProcess, Session)> {
    let srv = PnfsdProcess::start()?;
    let s = Session::connect(srv.addr()).await?;
    Ok((srv, s))
}

impl Session {
    /// OPEN arguments to create `name` (UNCHECKED4, no attributes) for reading and writing.
    pub fn create_args(&self, name: &str) -> OpenArgs {
        self.open_args(
            share::ACCESS_BOTH,
            Some(CreateHow::Unchecked(Default::default())),
            OpenClaim::Null(name.as_bytes().to_vec()),
        )
    }

    /// OPEN arguments for this session's client with a fixed owner.
    pub fn open_args(&self, access: u32, create: Option<CreateHow>, claim: OpenClaim) -> OpenArgs {
        OpenArgs {
            seqid: 0,
            share_access: access | share::WANT_NO_DELEG,
            share_deny: share::DENY_NONE,
            clientid: self.clientid,
            owner: b"client-tests-owner".to_vec(),
            create,
            claim,
        }
    }

    /// The filehandle of `path` (relative to the root; "" is the root).
    pub async fn lookup_path(&self, path: &str) -> Result<Vec<u8>> {
        self.run_ok(Compound::new().walk(path).getfh()).await?.fh()
    }

    /// The filehandle of `dir`'s parent: LOOKUPP (RFC 8881 §18.14), sent raw as it has no
    /// arguments.
    pub async fn parent_of(&self, dir: &[u8]) -> Result<Vec<u8>> {
        let lookupp = crate::ops::Op::Raw {
            opnum: pnfsd::nfs4::opcode::NfsOp::LOOKUPP,
            body: vec![],
        };
        self.run_ok(Compound::new().putfh(dir).op(lookupp).getfh())
            .await?
            .fh()
    }

    pub async fn getattr_fh(&self, fh: &[u8], mask: Bitmap) -> Result<Attrs> {
        Ok(self
            .run_ok(Compound::new().putfh(fh).getattr(mask))
            .await?
            .attrs()?
            .clone())
    }

    /// Basic attributes of `path`.
    pub async fn stat(&self, path: &str) -> Result<Attrs> {
        Ok(self
            .run_ok(Compound::new().walk(path).getattr(basic()))
            .await?
            .attrs()?
            .clone())
    }

    /// OPEN(CLAIM_NULL, create UNCHECKED) of `name` in directory `dir`, for read and write.
    pub async fn create_file(&self, dir: &[u8], name: &str, mode: u32) -> Result<OpenFile> {
        let args = self.open_args(
            share::ACCESS_BOTH,
            Some(CreateHow::Unchecked(SetAttrs::mode(mode))),
            OpenClaim::Null(name.as_bytes().to_vec()),
        );
        let rep = self
            .run_ok(Compound::new().putfh(dir).open(args).getfh())
            .await?;
        Ok(OpenFile {
            fh: rep.fh()?,
            stateid: rep.open()?.stateid,
        })
    }

    /// OPEN(CLAIM_FH) of an existing file for read and write.
    pub async fn open_fh(&self, fh: &[u8]) -> Result<OpenFile> {
        let args = self.open_args(share::ACCESS_BOTH, None, OpenClaim::Fh);
        let rep = self.run_ok(Compound::new().putfh(fh).open(args)).await?;
        Ok(OpenFile {
            fh: fh.to_vec(),
            stateid: rep.open()?.stateid,
        })
    }

    pub async fn close_file(&self, f: &OpenFile) -> Result<()> {
        self.run_ok(Compound::new().putfh(&f.fh).close(f.stateid))
            .await?;
        Ok(())
    }

    /// WRITE all of `data` at `offset` (in pieces of at most `max_io`); returns the verifier.
    pub async fn write_all(
        &self,
        f: &OpenFile,
        offset: u64,
        data: &[u8],
        stable: Stable,
    ) -> Result<[u8; 8]> {
        let mut verf = [0u8; 8];
        let mut done = 0usize;
        while done < data.len() {
            let end = (done + self.max_io()).min(data.len());
            let rep = self
                .run_ok(Compound::new().putfh(&f.fh).write(
                    f.stateid,
                    offset + done as u64,
                    stable,
                    &data[done..end],
                ))
                .await?;
            let w = rep.write()?;
            if w.count == 0 {
                return Err(ClientError::Protocol("WRITE wrote 0 bytes".into()));
            }
            if (stable as u32) > w.committed {
                return Err(ClientError::Protocol(format!(
                    "WRITE asked stable {} and got {}",
                    stable as u32, w.committed
                )));
            }
            verf = w.verf;
            done += w.count as usize;
        }
        Ok(verf)
    }

    /// READ `len` bytes at `offset` (fewer at end of file).
    pub async fn read_all(&self, f: &OpenFile, offset: u64, len: usize) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let want = (len - out.len()).min(self.max_io()) as u32;
            let rep = self
                .run_ok(Compound::new().putfh(&f.fh).read(
                    f.stateid,
                    offset + out.len() as u64,
                    want,
                ))
                .await?;
            let r = rep.read()?;
            out.extend_from_slice(&r.data);
            if r.eof || r.data.is_empty() {
                break;
            }
        }
        Ok(out)
    }

    /// CREATE a directory; returns its filehandle.
    pub async fn mkdir(&self, dir: &[u8], name: &str, mode: u32) -> Result<Vec<u8>> {
        self.run_ok(Compound::new().putfh(dir).mkdir(name, mode).getfh())
            .await?
            .fh()
    }

    /// All entries of a directory, following cookies until eof.
    pub async fn readdir_all(&self, dir: &[u8], mask: Bitmap) -> Result<Vec<DirEntry>> {
        let mut out = Vec::new();
        let mut cookie = 0u64;
        let mut verf = [0u8; 8];
        for _ in 0..100_000 {
            let rep = self
                .run_ok(
                    Compound::new()
                        .putfh(dir)
                        .readdir(cookie, verf, 8192, mask.clone()),
                )
                .await?;
            let rd = rep.readdir()?;
            verf = rd.cookieverf;
            if let Some(last) = rd.entries.last() {
                cookie = last.cookie;
            }
            let empty = rd.entries.is_empty();
            out.extend(rd.entries.iter().cloned());
            if rd.eof {
                return Ok(out);
            }
            if empty {
                return Err(ClientError::Protocol(
                    "READDIR returned no entries and no eof".into(),
                ));
            }
        }
        Err(ClientError::Protocol("READDIR never reached eof".into()))
    }

    /// The names in a directory, sorted.
    pub async fn list(&self, dir: &[u8]) -> Result<Vec<String>> {
        let mut v: Vec<String> = self
            .readdir_all(dir, Bitmap::default())
            .await?
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e.name).into_owned())
            .collect();
        v.sort();
        Ok(v)
    }
}
