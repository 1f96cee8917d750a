//! The namespace and I/O operations over a real store on a simulated volume, called through
//! their handlers as the dispatcher would (current / saved filehandle in the context).

pub(super) use super::fixture::{call, cred, st, Fx, VOL};
use crate::nfs4::attr::file::ftype;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::ops::{create, getattr, putrootfh};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, Fh};
use crate::rpc::Cred;
use crate::server::NfsOptions;
use crate::store::{Ino, NewNode, SetAttrs, StoreOptions};
use crate::xdr::{Xdr, XdrReader, XdrWriter};

pub(super) const BOOT: u64 = 0x1122_3344_5566_7788;

/// A fixture for the namespace suites: boot verifier `BOOT`, minor version 2 contexts.
pub(super) fn fixture_with(sopts: StoreOptions) -> Fx {
    Fx::on(NfsOptions::default(), VOL, 1, sopts, BOOT)
}

pub(super) fn fixture() -> Fx {
    fixture_with(StoreOptions::default())
}

pub(super) fn root_cred() -> Cred {
    cred(0, 0)
}

impl Fx {
    /// A regular file (CREATE does not make them; OPEN does) with some mode.
    pub(super) fn file(&self, dir: Ino, name: &str, mode: u32) -> Fh {
        let sa = SetAttrs {
            mode: Some(mode),
            ..SetAttrs::default()
        };
        let (a, _) = self
            .srv
            .store
            .create(dir, name.as_bytes(), NewNode::Regular, &sa, (0, 0))
            .unwrap();
        Fh {
            ino: a.ino,
            generation: a.generation,
        }
    }
}

pub(super) fn name(n: &[u8]) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.string(n);
    w.buf
}

pub(super) fn create_args(t: u32, extra: &[u8], n: &[u8]) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.u32(t);
    w.buf.extend_from_slice(extra);
    w.string(n);
    w.u32(0);
    w.u32(0);
    w.buf
}

pub(super) fn mkdir(ctx: &mut Ctx<'_>, dir: Fh, n: &str) -> Fh {
    ctx.current_fh = Some(dir);
    let (s, _) = call(
        ctx,
        create::run,
        &create_args(ftype::NF4DIR, &[], n.as_bytes()),
    );
    assert_eq!(s, NfsStat::OK);
    ctx.current_fh.unwrap()
}

pub(super) fn root(ctx: &mut Ctx<'_>) -> Fh {
    assert_eq!(st(ctx, putrootfh::run, &[]), NfsStat::OK);
    ctx.current_fh.unwrap()
}

pub(super) fn getattr_of(ctx: &mut Ctx<'_>, fh: Fh, bits: &[u32]) -> Vec<u8> {
    ctx.current_fh = Some(fh);
    let mut m = Bitmap::default();
    for b in bits {
        m.set(*b);
    }
    let mut w = XdrWriter::new();
    m.encode(&mut w);
    let (s, body) = call(ctx, getattr::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert_eq!(Bitmap::decode(&mut r).unwrap(), m);
    r.opaque(1 << 20).unwrap().to_vec()
}

mod io;
mod namespace;
