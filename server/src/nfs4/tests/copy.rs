//! COPY (RFC 7862 §15.2) through its handler over a real store on a simulated volume: the
//! bytes and the reply, the errors of §15.2.3, the destination's layouts recalled first,
//! and what a stable COPY acknowledged still there after a crash.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::fixture::{call, Fx, VOL};
use super::pnfs::mount_v;
use crate::nfs4::callback;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::ops::{copy, layoutget, layoutreturn, open, write};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, Fh, Stateid};
use crate::rpc::ConnInfo;
use crate::server::{NfsOptions, Server};
use crate::store::{Stable, Store, StoreOptions, ROOT_INO};
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// A backchannel that records every CB_COMPOUND and answers NFS4_OK.
#[derive(Debug, Default)]
pub(super) struct Recorder(pub(super) Mutex<Vec<Vec<u8>>>);

impl crate::rpc::Backchannel for Recorder {
    fn call(&self, _: u32, _: u32, args: XdrWriter) -> std::io::Result<Vec<u8>> {
        self.0.lock().unwrap().push(args.into_inner());
        Ok(vec![0; 12])
    }
}

pub(super) fn conn(id: u64, bc: Option<Arc<Recorder>>) -> ConnInfo {
    super::fixture::conn(id, bc.map(|b| b as Arc<dyn crate::rpc::Backchannel>))
}

pub(super) fn ctx<'a>(srv: &'a Server, c: &'a ConnInfo) -> Ctx<'a> {
    let mut x = super::fixture::ctx(srv, c, 2);
    x.op_count = 2;
    x
}

pub(super) fn root_fh(srv: &Server) -> Fh {
    let root = srv.store.getattr(ROOT_INO).unwrap();
    Fh {
        ino: root.ino,
        generation: root.generation,
    }
}

/// OPEN(CREATE, UNCHECKED) of `name` in the root for read and write by `owner`.
pub(super) fn create(x: &mut Ctx<'_>, name: &[u8], owner: &[u8]) -> (Fh, Stateid) {
    x.current_fh = Some(root_fh(x.srv));
    let mut w = XdrWriter::new();
    w.u32(0);
    w.u32(3); // SHARE_ACCESS_BOTH
    w.u32(0);
    w.u64(0);
    w.opaque(owner);
    w.u32(1); // OPEN4_CREATE
    w.u32(0); // UNCHECKED4
    Bitmap::default().encode(&mut w);
    w.opaque(b"");
    w.u32(0); // CLAIM_NULL
    w.string(name);
    let (s, body) = call(x, open::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let sid = Stateid::decode(&mut XdrReader::new(&body)).unwrap();
    (x.current_fh.unwrap(), sid)
}

pub(super) fn write_data(x: &mut Ctx<'_>, fh: Fh, sid: Stateid, off: u64, data: &[u8]) {
    let mut w = XdrWriter::new();
    sid.encode(&mut w);
    w.u64(off);
    w.u32(crate::nfs4::types::UNSTABLE4);
    w.opaque(data);
    x.current_fh = Some(fh);
    assert_eq!(call(x, write::run, &w.buf).0, NfsStat::OK);
}

pub(super) fn copy_args(
    src: Stateid,
    dst: Stateid,
    src_off: u64,
    dst_off: u64,
    count: u64,
) -> Vec<u8> {
    let mut w = XdrWriter::new();
    src.encode(&mut w);
    dst.encode(&mut w);
    w.u64(src_off);
    w.u64(dst_off);
    w.u64(count);
    w.bool(false);
    w.bool(true);
    w.u32(0);
    w.buf
}

/// SAVEFH(src) PUTFH(dst) COPY: the status, and on OK (wr_count, wr_committed).
fn do_copy(
    x: &mut Ctx<'_>,
    src: (Fh, Stateid),
    dst: (Fh, Stateid),
    src_off: u64,
    dst_off: u64,
    count: u64,
) -> Result<(u64, u32), NfsStat> {
    x.saved_fh = Some(src.0);
    x.current_fh = Some(dst.0);
    let (s, body) = call(
        x,
        copy::run,
        &copy_args(src.1, dst.1, src_off, dst_off, count),
    );
    if s != NfsStat::OK {
        return Err(s);
    }
    let mut r = XdrReader::new(&body);
    assert_eq!(r.u32().unwrap(), 0, "a callback id: not synchronous");
    let count = r.u64().unwrap();
    let committed = r.u32().unwrap();
    let verf: [u8; 8] = r.array().unwrap();
    assert_eq!(verf, x.srv.boot_verifier.to_be_bytes());
    assert!(r.bool().unwrap() && r.bool().unwrap());
    r.finish().unwrap();
    Ok((count, committed))
}

pub(super) fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

/// pynfs COPY5: count 0 copies to the end of the source; the reply is FILE_SYNC, and the
/// destination reads back the source's bytes at its offset.
#[test]
fn a_copy_to_the_end_is_stable_and_reads_back() {
    let fx = Fx::new(NfsOptions::default());
    let c = conn(1, None);
    let mut x = ctx(&fx.srv, &c);
    mount_v(&mut x, b"a", [7; 8]);
    let src = create(&mut x, b"src", b"o");
    let dst = create(&mut x, b"dst", b"o");
    let data = pattern(70_000);
    write_data(&mut x, src.0, src.1, 0, &data);
    let got = do_copy(&mut x, src, dst, 100, 5, 0).unwrap();
    assert_eq!(got, (70_000 - 100, crate::nfs4::types::FILE_SYNC4));
    let (back, eof) = fx.srv.store.read(dst.0.ino, 0, 80_000).unwrap();
    assert!(eof);
    assert_eq!(back.len(), 5 + 70_000 - 100);
    assert_eq!(&back[..5], &[0; 5]);
    assert!(back[5..] == data[100..], "copied bytes differ");
    // Within one file, to a disjoint range.
    let got = do_copy(&mut x, src, src, 0, 70_000, 1000).unwrap();
    assert_eq!(got.0, 1000);
    let (back, _) = fx.srv.store.read(src.0.ino, 70_000, 1000).unwrap();
    assert!(back == data[..1000]);
}

/// RFC 7862 §15.2.3's errors, and the checks COPY shares with READ and WRITE.
#[test]
fn copy_refusals() {
    let fx = Fx::new(NfsOptions::default());
    let c = conn(1, None);
    let mut x = ctx(&fx.srv, &c);
    mount_v(&mut x, b"a", [7; 8]);
    let src = create(&mut x, b"src", b"o");
    let dst = create(&mut x, b"dst", b"o");
    write_data(&mut x, src.0, src.1, 0, &[1; 100]);
    // Past the source's end.
    assert_eq!(do_copy(&mut x, src, dst, 101, 0, 0), Err(NfsStat::INVAL));
    assert_eq!(do_copy(&mut x, src, dst, 50, 0, 51), Err(NfsStat::INVAL));
    // Overlapping ranges of one file.
    assert_eq!(do_copy(&mut x, src, src, 0, 10, 50), Err(NfsStat::INVAL));
    // Offset at the end, count 0: nothing to copy.
    assert_eq!(
        do_copy(&mut x, src, dst, 100, 0, 0),
        Ok((0, crate::nfs4::types::FILE_SYNC4))
    );
    // A stateid of another file, a made-up one.
    assert_eq!(
        do_copy(&mut x, src, (dst.0, src.1), 0, 0, 0),
        Err(NfsStat::BAD_STATEID)
    );
    let mut bogus = dst.1;
    bogus.other[11] ^= 0x55;
    assert_eq!(
        do_copy(&mut x, src, (dst.0, bogus), 0, 0, 0),
        Err(NfsStat::BAD_STATEID)
    );
    // The source a directory.
    let root = (root_fh(&fx.srv), Stateid::ANONYMOUS);
    assert_eq!(do_copy(&mut x, root, dst, 0, 0, 0), Err(NfsStat::ISDIR));
    // No saved filehandle.
    x.saved_fh = None;
    x.current_fh = Some(dst.0);
    let args = copy_args(src.1, dst.1, 0, 0, 0);
    assert_eq!(call(&mut x, copy::run, &args).0, NfsStat::NOFILEHANDLE);
    // Inter-server: a source server named.
    let mut w = XdrWriter::new();
    w.opaque_fixed(&args[..args.len() - 4]);
    w.u32(1);
    w.u32(1);
    w.opaque(b"elsewhere");
    x.saved_fh = Some(src.0);
    assert_eq!(call(&mut x, copy::run, &w.buf).0, NfsStat::NOTSUPP);
    assert_eq!(fx.srv.store.getattr(dst.0.ino).unwrap().size, 0);
}

fn layoutget_args(mode: u32, off: u64, len: u64, sid: Stateid) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.bool(false);
    w.u32(3); // LAYOUT4_BLOCK_VOLUME
    w.u32(mode);
    w.u64(off);
    w.u64(len);
    w.u64(len);
    sid.encode(&mut w);
    w.u32(0xffff);
    w.buf
}

/// The layout stateid of a LAYOUTGET's reply.
fn layout_stateid(body: &[u8]) -> Stateid {
    let mut r = XdrReader::new(body);
    r.bool().unwrap();
    Stateid::decode(&mut r).unwrap()
}

/// Another client holds an RW layout of the destination: COPY is DELAY at once with one
/// CB_LAYOUTRECALL queued (not one per retry), the destination unchanged; once the layout
/// is back, the COPY goes through. The copying client's own layout is recalled too.
#[test]
fn the_destinations_layouts_are_recalled_first() {
    let fx = Fx::new(NfsOptions::default());
    let bc_b = Arc::new(Recorder::default());
    let (ca, cb) = (conn(1, None), conn(2, Some(bc_b.clone())));
    let mut a = ctx(&fx.srv, &ca);
    let mut b = ctx(&fx.srv, &cb);
    let cid_a = mount_v(&mut a, b"a", [7; 8]);
    mount_v(&mut b, b"b", [7; 8]);
    let src = create(&mut a, b"src", b"oa");
    let dst = create(&mut a, b"dst", b"oa");
    write_data(&mut a, src.0, src.1, 0, &[0x5a; 8192]);
    let dst_b = create(&mut b, b"dst", b"ob");
    b.current_fh = Some(dst_b.0);
    let (s, body) = call(&mut b, layoutget::run, &layoutget_args(2, 0, 8192, dst_b.1));
    assert_eq!(s, NfsStat::OK);
    let lsid = layout_stateid(&body);
    for _ in 0..2 {
        assert_eq!(do_copy(&mut a, src, dst, 0, 0, 0), Err(NfsStat::DELAY));
        callback::send_due(&fx.srv.backchannel(), Instant::now());
    }
    assert_eq!(
        bc_b.0.lock().unwrap().len(),
        1,
        "one recall, not one per retry"
    );
    assert_eq!(fx.srv.store.getattr(dst.0.ino).unwrap().size, 0);
    // B returns its layout (LAYOUTRETURN FILE of everything).
    let mut w = XdrWriter::new();
    w.bool(false);
    w.u32(3);
    w.u32(3); // LAYOUTIOMODE4_ANY
    w.u32(1); // LAYOUTRETURN4_FILE
    w.u64(0);
    w.u64(u64::MAX);
    lsid.encode(&mut w);
    w.opaque(b"");
    b.current_fh = Some(dst_b.0);
    assert_eq!(call(&mut b, layoutreturn::run, &w.buf).0, NfsStat::OK);
    assert_eq!(
        do_copy(&mut a, src, dst, 0, 0, 0),
        Ok((8192, crate::nfs4::types::FILE_SYNC4))
    );
    // The copier's own layout of the destination is recalled as well.
    a.current_fh = Some(dst.0);
    let (s, _) = call(&mut a, layoutget::run, &layoutget_args(2, 0, 8192, dst.1));
    assert_eq!(s, NfsStat::OK);
    assert_eq!(do_copy(&mut a, src, dst, 0, 0, 0), Err(NfsStat::DELAY));
    assert!(fx.srv.layouts.recall_pending(cid_a, dst.0.ino));
}

/// What a COPY answered FILE_SYNC is on the volume after a crash right after the reply:
/// the size and the bytes, whichever unflushed writes the crash keeps.
#[test]
fn a_stable_copy_survives_a_crash_after_the_reply() {
    let data = pattern(3 * 4096 + 500);
    for seed in 1..=6 {
        let fx = Fx::on(NfsOptions::default(), VOL, seed, StoreOptions::default(), 1);
        let c = conn(1, None);
        let mut x = ctx(&fx.srv, &c);
        mount_v(&mut x, b"a", [7; 8]);
        let src = create(&mut x, b"src", b"o");
        let dst = create(&mut x, b"dst", b"o");
        // The source made durable first: only the copy is under test.
        fx.srv
            .store
            .write(src.0.ino, 0, &data, Stable::FileSync)
            .unwrap();
        let got = do_copy(&mut x, src, dst, 0, 4096, 0).unwrap();
        assert_eq!(got, (data.len() as u64, crate::nfs4::types::FILE_SYNC4));
        let after = Arc::new(fx.dev.crash());
        let store = Store::open_dev(after, StoreOptions::default()).unwrap();
        let size = store.getattr(dst.0.ino).unwrap().size;
        assert_eq!(size, 4096 + data.len() as u64, "seed {seed}");
        let (back, _) = store.read(dst.0.ino, 4096, data.len() as u32).unwrap();
        assert!(back == data, "seed {seed}: copied bytes lost");
    }
}
