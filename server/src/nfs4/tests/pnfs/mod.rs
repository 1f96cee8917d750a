//! The pNFS operations over a real store on a simulated volume, called through their handlers
//! in a real session: layout bodies and rules, the LAYOUTCOMMIT durability counters of
//! docs/design.md §4, returns, recalls and fencing.

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use super::fixture::{call, cred, seq_args, session_args, Fx, VOL};
use crate::nfs4::callback;
use crate::nfs4::compound::OpEnv;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::layouts::{self, recall};
use crate::nfs4::opcode::NfsOp;
use crate::nfs4::ops::{
    create_session, exchange_id, getdeviceinfo, getdevicelist, layoutcommit, layoutget,
    layoutreturn, open, reclaim_complete, sequence,
};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, Fh, Stateid};
use crate::rpc::{ConnInfo, RpcSizes};
use crate::server::{NfsOptions, Server};
use crate::store::{Ino, SetAttrs, Store, StoreOptions, ROOT_INO};
use crate::xdr::{Xdr, XdrReader, XdrWriter};
use layout::block::{BlockExtent, ExtentState, IoMode, LayoutType};
use metalog::CrashDev;

const B: u64 = 4096;
const BLOCK: u32 = 3;

/// A backchannel that records every CB_COMPOUND and answers NFS4_OK.
#[derive(Debug, Default)]
struct Recorder(Mutex<Vec<Vec<u8>>>);

impl crate::rpc::Backchannel for Recorder {
    fn call(&self, _: u32, _: u32, args: XdrWriter) -> std::io::Result<Vec<u8>> {
        self.0.lock().unwrap().push(args.into_inner());
        Ok(vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    }
}

impl Fx {
    /// A context on `conn`, as client 1 before it mounts.
    fn client(&self) -> Ctx<'_> {
        ctx(&self.srv, &self.conn)
    }
}

fn fixture(opts: NfsOptions) -> Fx {
    Fx::new(opts)
}

/// `seed` picks which unflushed writes a simulated crash keeps.
fn fixture_seeded(opts: NfsOptions, seed: u64) -> Fx {
    Fx::on(opts, VOL, seed, StoreOptions::default(), 1)
}

/// A fixture over a volume of `size` bytes.
fn fixture_of(opts: NfsOptions, size: u64) -> Fx {
    Fx::on(opts, size, 1, StoreOptions::default(), 1)
}

/// Connection `id`, with the recording backchannel if given.
fn conn(id: u64, bc: Option<Arc<Recorder>>) -> ConnInfo {
    super::fixture::conn(id, bc.map(|b| b as Arc<dyn crate::rpc::Backchannel>))
}

/// A context at minor version 1 for the operation after SEQUENCE of a COMPOUND.
fn ctx<'a>(srv: &'a Server, c: &'a ConnInfo) -> Ctx<'a> {
    let mut x = super::fixture::ctx(srv, c, 1);
    x.op_count = 2;
    x
}

/// EXCHANGE_ID, CREATE_SESSION (with the backchannel on this connection), SEQUENCE,
/// RECLAIM_COMPLETE.
fn mount(ctx: &mut Ctx<'_>, owner: &[u8]) -> u64 {
    mount_v(ctx, owner, [7; 8])
}

/// `mount` with the client's boot verifier: a new one is a new instance of the client.
pub(super) fn mount_v(ctx: &mut Ctx<'_>, owner: &[u8], verifier: [u8; 8]) -> u64 {
    let mut w = XdrWriter::new();
    w.opaque_fixed(&verifier);
    w.opaque(owner);
    w.u32(0);
    w.u32(0);
    w.u32(0);
    let (s, body) = call(ctx, exchange_id::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    let clientid = r.u64().unwrap();
    let seq = r.u32().unwrap();
    let (s, body) = call(ctx, create_session::run, &session_args(clientid, seq));
    assert_eq!(s, NfsStat::OK);
    let sid: [u8; 16] = XdrReader::new(&body).array().unwrap();
    assert_eq!(
        call(ctx, sequence::run, &seq_args(sid, 1, 0, false)).0,
        NfsStat::OK
    );
    // COMPLETE_ALREADY: the same owner mounted again (a new instance after a restart).
    let rc = call(ctx, reclaim_complete::run, &[0; 4]).0;
    assert!(
        rc == NfsStat::OK || rc == NfsStat::COMPLETE_ALREADY,
        "{rc:?}"
    );
    clientid
}

/// OPEN(CREATE, UNCHECKED) of `name` in the root for read and write: the file and its stateid.
/// It asks for no delegation (WANT_NO_DELEG): these suites are about layouts, and a write
/// delegation (the default for a lone writer) would make another client's OPEN a recall.
fn create(ctx: &mut Ctx<'_>, name: &[u8]) -> (Fh, Stateid) {
    ctx.current_fh = Some(root_fh(ctx.srv));
    let mut w = XdrWriter::new();
    w.u32(0);
    w.u32(3 | 0x400);
    w.u32(0);
    w.u64(0);
    w.opaque(b"owner");
    w.u32(1);
    w.u32(0);
    Bitmap::default().encode(&mut w);
    w.opaque(b"");
    w.u32(0);
    w.string(name);
    let (s, body) = call(ctx, open::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let sid = Stateid::decode(&mut XdrReader::new(&body)).unwrap();
    let fh = ctx.current_fh.unwrap();
    (fh, sid)
}

/// The root directory's filehandle.
fn root_fh(srv: &Server) -> Fh {
    let root = srv.store.getattr(ROOT_INO).unwrap();
    Fh {
        ino: root.ino,
        generation: root.generation,
    }
}

/// Client "a" mounted, file "f" created: its filehandle and open stateid.
fn open_f(x: &mut Ctx<'_>) -> (Fh, Stateid) {
    mount(x, b"a");
    create(x, b"f")
}

/// `open_f`, then an RW layout of `[0, len)`.
fn open_f_rw(x: &mut Ctx<'_>, len: u64) -> (Fh, Stateid, Got) {
    let (fh, sid) = open_f(x);
    let g = get(x, IoMode::RW.0, 0, len, sid).unwrap();
    (fh, sid, g)
}

/// Writes `byte` over all of `g`'s blocks on the volume, as a client writing all it was given.
fn fill(fx: &Fx, g: &Got, byte: u8) {
    use metalog::BlockDev;
    for e in &g.extents {
        fx.dev
            .write_at(&vec![byte; e.length as usize], e.storage_offset)
            .unwrap();
    }
}

/// Sets the file's size to `size` bytes, as another client's SETATTR would.
fn grow(store: &Store, ino: Ino, size: u64) {
    let attrs = SetAttrs {
        size: Some(size),
        ..SetAttrs::default()
    };
    store.setattr(ino, &attrs).unwrap();
}

/// SETATTR(size) of `fh` with `sid`.
fn truncate(x: &mut Ctx<'_>, fh: Fh, sid: Stateid, size: u64) -> NfsStat {
    let mut w = XdrWriter::new();
    sid.encode(&mut w);
    let mut attrs = Bitmap::default();
    attrs.set(crate::nfs4::attr::num::SIZE);
    attrs.encode(&mut w);
    let mut v = XdrWriter::new();
    v.u64(size);
    w.opaque(&v.buf);
    x.current_fh = Some(fh);
    call(x, crate::nfs4::ops::setattr::run, &w.buf).0
}

/// REMOVE `name` from the root.
fn remove(x: &mut Ctx<'_>, name: &[u8]) -> NfsStat {
    x.current_fh = Some(root_fh(x.srv));
    let mut w = XdrWriter::new();
    w.string(name);
    call(x, crate::nfs4::ops::remove::run, &w.buf).0
}

struct Got {
    stateid: Stateid,
    offset: u64,
    length: u64,
    extents: Vec<BlockExtent>,
}

#[allow(clippy::too_many_arguments)]
fn layoutget_args(
    ty: u32,
    mode: u32,
    off: u64,
    len: u64,
    min: u64,
    sid: Stateid,
    max: u32,
) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.bool(false);
    w.u32(ty);
    w.u32(mode);
    w.u64(off);
    w.u64(len);
    w.u64(min);
    sid.encode(&mut w);
    w.u32(max);
    w.buf
}

/// Runs `op`'s handler as `call` does, then records its result in the server's operation
/// ledger as the dispatcher records each one (`OpEnv::record`): the layout op counters are
/// read from there.
fn dispatched(ctx: &mut Ctx<'_>, op: NfsOp, args: &[u8]) -> (NfsStat, Vec<u8>) {
    let Some(d) = crate::nfs4::ops::lookup(op) else {
        panic!("{} is no operation", op.name());
    };
    let t0 = Instant::now();
    let (s, body) = call(ctx, d.handler, args);
    OpEnv::record(ctx, op, s, Some(t0.elapsed()));
    (s, body)
}

fn get(ctx: &mut Ctx<'_>, mode: u32, off: u64, len: u64, sid: Stateid) -> Result<Got, NfsStat> {
    let (s, body) = dispatched(
        ctx,
        NfsOp::LAYOUTGET,
        &layoutget_args(BLOCK, mode, off, len, len, sid, 0xffff),
    );
    if s != NfsStat::OK {
        return Err(s);
    }
    let mut r = XdrReader::new(&body);
    assert!(r.bool().unwrap(), "return_on_close");
    let stateid = Stateid::decode(&mut r).unwrap();
    assert_eq!(r.u32().unwrap(), 1);
    let offset = r.u64().unwrap();
    let length = r.u64().unwrap();
    assert_eq!(r.u32().unwrap(), mode);
    assert_eq!(r.u32().unwrap(), BLOCK);
    let extents = BlockExtent::decode_list(r.opaque(1 << 20).unwrap()).unwrap();
    r.finish().unwrap();
    // Contiguous, block-aligned, covering exactly the returned range.
    let mut pos = offset;
    for e in &extents {
        assert_eq!(e.file_offset, pos);
        assert_eq!(e.file_offset % B + e.length % B + e.storage_offset % B, 0);
        pos += e.length;
    }
    assert_eq!(pos, offset + length);
    assert!(offset <= off && offset + length >= off + len);
    Ok(Got {
        stateid,
        offset,
        length,
        extents,
    })
}

fn commit_args(
    off: u64,
    len: u64,
    sid: Stateid,
    last: Option<u64>,
    ext: &[BlockExtent],
) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.u64(off);
    w.u64(len);
    w.bool(false);
    sid.encode(&mut w);
    match last {
        Some(l) => {
            w.bool(true);
            w.u64(l);
        }
        None => w.bool(false),
    }
    w.bool(false);
    w.u32(BLOCK);
    w.opaque(&BlockExtent::encode_list(ext));
    w.buf
}

/// LAYOUTCOMMIT of everything `g` gave, as written: the new size if it changed.
fn commit(ctx: &mut Ctx<'_>, g: &Got, last: Option<u64>) -> Result<Option<u64>, NfsStat> {
    let ext: Vec<BlockExtent> = g
        .extents
        .iter()
        .map(|e| BlockExtent {
            state: ExtentState::READ_WRITE_DATA,
            ..*e
        })
        .collect();
    let (s, body) = dispatched(
        ctx,
        NfsOp::LAYOUTCOMMIT,
        &commit_args(g.offset, g.length, g.stateid, last, &ext),
    );
    if s != NfsStat::OK {
        return Err(s);
    }
    let mut r = XdrReader::new(&body);
    Ok(if r.bool().unwrap() {
        Some(r.u64().unwrap())
    } else {
        None
    })
}

#[test]
fn getdeviceinfo_gives_the_uuid_signature_and_a_stable_id() {
    let fx = fixture(NfsOptions::default());
    let mut x = fx.client();
    mount(&mut x, b"a");
    let uuid = fx.srv.store.volume_uuid();
    let args = |dev: [u8; 16], ty: u32, max: u32| {
        let mut w = XdrWriter::new();
        w.opaque_fixed(&dev);
        w.u32(ty);
        w.u32(max);
        Bitmap(vec![0b110]).encode(&mut w);
        w.buf
    };
    let (s, body) = call(&mut x, getdeviceinfo::run, &args(uuid, BLOCK, 4096));
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert_eq!(r.u32().unwrap(), BLOCK);
    let addr = r.opaque(4096).unwrap();
    assert_eq!(addr, &layout::block::simple_deviceaddr(32, &uuid)[..]);
    // The signature is what the volume holds at byte 32.
    assert_eq!(&fx.dev.image()[32..48], &uuid);
    // CHANGE + DELETE asked (as Linux does): both agreed, else the client drops the device.
    assert_eq!(Bitmap::decode(&mut r).unwrap(), Bitmap(vec![0b110]));
    r.finish().unwrap();
    let (s, body) = call(&mut x, getdeviceinfo::run, &args(uuid, BLOCK, 20));
    assert_eq!((s, body), (NfsStat::TOOSMALL, 48u32.to_be_bytes().to_vec()));
    assert_eq!(
        call(&mut x, getdeviceinfo::run, &args([1; 16], BLOCK, 4096)).0,
        NfsStat::NOENT
    );
    assert_eq!(
        call(&mut x, getdeviceinfo::run, &args(uuid, 1, 4096)).0,
        NfsStat::UNKNOWN_LAYOUTTYPE
    );

    let mut w = XdrWriter::new();
    w.u32(BLOCK);
    w.u32(8);
    w.u64(0);
    w.opaque_fixed(&[0; 8]);
    x.current_fh = Some(root_fh(&fx.srv));
    let (s, body) = call(&mut x, getdevicelist::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    r.u64().unwrap();
    r.array::<8>().unwrap();
    assert_eq!(r.u32().unwrap(), 1);
    assert_eq!(r.array::<16>().unwrap(), uuid);
    assert!(r.bool().unwrap());

    // After a restart the same id, before any LAYOUTGET.
    fx.srv.store.unmount().unwrap();
    let dev2 = Arc::new(CrashDev::from_image(fx.dev.image(), 2));
    let store2 = Store::open_dev(dev2, StoreOptions::default()).unwrap();
    assert_eq!(layout::block::device_id(store2.volume_uuid()), uuid);
}

#[test]
fn layoutget_rw_allocates_durably_and_read_sees_none_data() {
    let fx = fixture(NfsOptions::default());
    let mut x = fx.client();
    let (fh, _, g) = open_f_rw(&mut x, 8192);
    assert_eq!(g.stateid.seqid, 1);
    assert!(g
        .extents
        .iter()
        .all(|e| e.state == ExtentState::INVALID_DATA));
    assert!(g.extents.iter().all(|e| e.storage_offset >= B));
    // Durable before the reply: nothing of the inode is waiting in the log.
    assert_eq!(fx.srv.store.log().object_seqs(fh.ino.0).1, None);
    // The next LAYOUTGET presents the layout stateid and gets it bumped.
    let g2 = get(&mut x, IoMode::RW.0, 8192, 8192, g.stateid).unwrap();
    assert_eq!(g2.stateid.seqid, 2);
    // READ over unwritten blocks and past EOF: NONE_DATA at storage offset 0.
    let r = get(&mut x, IoMode::READ.0, 0, 32768, g2.stateid).unwrap();
    assert_eq!(r.stateid.seqid, 3);
    assert!(r
        .extents
        .iter()
        .all(|e| e.state == ExtentState::NONE_DATA && e.storage_offset == 0));
    // Overwriting committed blocks: READ_WRITE_DATA, READ_DATA.
    commit(&mut x, &g, Some(8191)).unwrap();
    let g3 = get(&mut x, IoMode::RW.0, 0, 8192, r.stateid).unwrap();
    assert_eq!(g3.extents[0].state, ExtentState::READ_WRITE_DATA);
    assert_eq!(g3.extents[0].storage_offset, g.extents[0].storage_offset);
    let r2 = get(&mut x, IoMode::READ.0, 0, 8192, g3.stateid).unwrap();
    assert_eq!(r2.extents[0].state, ExtentState::READ_DATA);
    assert_eq!(fx.srv.ops.totals(NfsOp::LAYOUTGET).results, 5);
    assert_eq!(
        crate::metrics::Snapshot::of(&fx.srv).layout_ops.get.results,
        5
    );
}

/// The layout op counters are this server's operation ledger, filled by the dispatcher: a
/// LAYOUTGET that ran and one refused before its handler (no current filehandle, RFC 8881
/// §15.2) both count, the refused one as an error and not timed; another server in the same
/// process counts none of them.
#[test]
fn layout_op_counters_are_the_servers_ledger_refused_ones_included() {
    let fx = fixture(NfsOptions::default());
    let other = fixture(NfsOptions::default());
    let mut x = fx.client();
    let (fh, sid) = open_f(&mut x);
    let session = x.session.clone().unwrap();
    fx.srv.state.slot_done(&session, &[]);
    let compound = |seqid: u32, putfh: bool| {
        let mut w = XdrWriter::new();
        w.opaque(b"");
        w.u32(1);
        w.u32(if putfh { 3 } else { 2 });
        w.u32(NfsOp::SEQUENCE.0);
        w.opaque_fixed(&seq_args(session.sessionid, seqid, 0, false));
        if putfh {
            w.u32(NfsOp::PUTFH.0);
            w.opaque(&fh.to_bytes());
        }
        w.u32(NfsOp::LAYOUTGET.0);
        w.opaque_fixed(&layoutget_args(
            BLOCK,
            IoMode::RW.0,
            0,
            8192,
            8192,
            sid,
            0xffff,
        ));
        w.into_inner()
    };
    let run = |args: Vec<u8>| {
        let sizes = RpcSizes {
            request_len: args.len() + 40,
            reply_header_len: 24,
        };
        crate::nfs4::compound::process(&fx.srv, &fx.conn, cred(0, 0), &args, sizes).unwrap()
    };
    let status = |reply: &[u8]| NfsStat(XdrReader::new(reply).u32().unwrap());
    assert_eq!(status(&run(compound(2, true))), NfsStat::OK);
    assert_eq!(status(&run(compound(3, false))), NfsStat::NOFILEHANDLE);
    let t = fx.srv.ops.totals(NfsOp::LAYOUTGET);
    assert_eq!((t.results, t.errors), (2, 1));
    assert_eq!(fx.srv.ops.timed(NfsOp::LAYOUTGET), 1);
    assert!(t.ns > 0);
    assert_eq!(crate::metrics::Snapshot::of(&fx.srv).layout_ops.get, t);
    assert_eq!(other.srv.ops.totals(NfsOp::LAYOUTGET), Default::default());
}

#[test]
fn layoutget_refusals() {
    let fx = fixture(NfsOptions::default());
    let mut x = fx.client();
    let (fh, sid) = open_f(&mut x);
    let try_get = |x: &mut Ctx<'_>, ty, mode, len, min, max| {
        call(
            x,
            layoutget::run,
            &layoutget_args(ty, mode, 0, len, min, sid, max),
        )
        .0
    };
    assert_eq!(
        try_get(&mut x, 1, IoMode::RW.0, B, B, 4096),
        NfsStat::UNKNOWN_LAYOUTTYPE
    );
    assert_eq!(
        try_get(&mut x, BLOCK, IoMode::ANY.0, B, B, 4096),
        NfsStat::BADIOMODE
    );
    assert_eq!(
        try_get(&mut x, BLOCK, IoMode::RW.0, B, 2 * B, 4096),
        NfsStat::INVAL
    );
    assert_eq!(
        try_get(&mut x, BLOCK, IoMode::RW.0, B, B, 60),
        NfsStat::TOOSMALL
    );
    let bad = Stateid {
        seqid: 1,
        other: [9; 12],
    };
    let st = call(
        &mut x,
        layoutget::run,
        &layoutget_args(BLOCK, IoMode::RW.0, 0, B, B, bad, 4096),
    )
    .0;
    assert!(st == NfsStat::BAD_STATEID || st == NfsStat::STALE_STATEID);
    x.current_fh = Some(root_fh(&fx.srv));
    assert_eq!(
        try_get(&mut x, BLOCK, IoMode::RW.0, B, B, 4096),
        NfsStat::LAYOUTUNAVAILABLE
    );
    x.current_fh = Some(fh);
    // Nothing was allocated by the refused calls.
    assert_eq!(fx.srv.store.extents(fh.ino, 0, 1).unwrap().len(), 1);
    assert!(matches!(
        fx.srv.store.extents(fh.ino, 0, 1).unwrap()[0],
        layout::Segment::Hole { .. }
    ));
}

/// Log writes and device flushes around one LAYOUTCOMMIT.
fn counted<T>(srv: &Server, f: impl FnOnce() -> T) -> (T, u64, u64) {
    let log0 = srv.store.log().counters().log_writes;
    let fl0 = srv.store.data_flush_counts().0;
    let out = f();
    let log1 = srv.store.log().counters().log_writes;
    let fl1 = srv.store.data_flush_counts().0;
    (out, log1 - log0, fl1 - fl0)
}

#[test]
fn layoutcommit_durability_counters() {
    let fx = fixture(NfsOptions::default());
    let mut x = fx.client();
    let (fh, _, g) = open_f_rw(&mut x, 4 * B);
    let m0 = fx.srv.layouts.metrics.snapshot();
    // Converting + growing: one log force that wrote the log, so no separate data flush.
    let (size, logs, _) = counted(&fx.srv, || commit(&mut x, &g, Some(4 * B - 1)));
    assert_eq!(size.unwrap(), Some(4 * B));
    assert!(logs >= 1);
    let m1 = fx.srv.layouts.metrics.snapshot();
    assert_eq!(m1.commit_log_writes - m0.commit_log_writes, 1);
    assert_eq!(m1.commit_data_flushes - m0.commit_data_flushes, 0);
    // The whole layout was committed, but only what lies inside the new EOF is converted:
    // the speculative blocks past it stay unwritten.
    assert!(g.length > 4 * B, "a new file's RW layout preallocates");
    assert_eq!(m1.commit_converted_blocks, 4);
    assert_eq!(fx.srv.store.getattr(fh.ino).unwrap().size, 4 * B);
    // Overwrite, same size: no log write at all, one data flush.
    let (size, logs, flushes) = counted(&fx.srv, || commit(&mut x, &g, Some(4 * B - 1)));
    assert_eq!(size.unwrap(), None);
    assert_eq!((logs, flushes), (0, 1));
    let m2 = fx.srv.layouts.metrics.snapshot();
    assert_eq!(m2.commit_log_writes, m1.commit_log_writes);
    assert_eq!(m2.commit_data_flushes - m1.commit_data_flushes, 1);
    let commits = fx.srv.ops.totals(NfsOp::LAYOUTCOMMIT);
    assert_eq!((commits.results, commits.errors), (2, 0));
    assert!(commits.ns > 0);
}

#[test]
fn layoutcommit_sync_forces_the_log_every_time() {
    let fx = fixture(NfsOptions {
        layoutcommit_sync: true,
        ..NfsOptions::default()
    });
    let mut x = fx.client();
    let (_, _, g) = open_f_rw(&mut x, 2 * B);
    commit(&mut x, &g, Some(2 * B - 1)).unwrap();
    for _ in 0..3 {
        let (size, logs, _) = counted(&fx.srv, || commit(&mut x, &g, Some(2 * B - 1)));
        assert_eq!(size.unwrap(), None);
        assert!(
            logs >= 1,
            "an overwrite commit under layoutcommit=sync writes the log"
        );
    }
    assert_eq!(fx.srv.layouts.metrics.snapshot().commit_log_writes, 4);
}

#[test]
fn concurrent_overwrite_commits_share_flushes() {
    let fx = fixture(NfsOptions::default());
    let mut x = fx.client();
    let (fh, _, g) = open_f_rw(&mut x, 2 * B);
    commit(&mut x, &g, Some(2 * B - 1)).unwrap();
    // A slow device cache flush, as on real hardware, so that the commits overlap.
    fx.dev.set_flush_delay(Duration::from_millis(30));
    let n = 8;
    let bar = Barrier::new(n);
    let session = x.session.clone();
    let (_, logs, flushes) = counted(&fx.srv, || {
        std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(|| {
                    let mut y = fx.client();
                    y.session = session.clone();
                    y.current_fh = Some(fh);
                    bar.wait();
                    assert_eq!(commit(&mut y, &g, Some(2 * B - 1)), Ok(None));
                });
            }
        })
    });
    assert_eq!(logs, 0);
    assert!(flushes < n as u64, "{flushes} flushes for {n} commits");
    assert!(flushes >= 1);
}

#[test]
fn layoutcommit_refusals() {
    let fx = fixture(NfsOptions::default());
    let mut x = fx.client();
    let (fh, sid, g) = open_f_rw(&mut x, 2 * B);
    let e = BlockExtent {
        state: ExtentState::READ_WRITE_DATA,
        ..g.extents[0]
    };
    let try_commit = |x: &mut Ctx<'_>, sid, last, ext: &[BlockExtent]| {
        call(x, layoutcommit::run, &commit_args(0, 2 * B, sid, last, ext)).0
    };
    // The open stateid is not a layout stateid.
    assert_eq!(try_commit(&mut x, sid, None, &[e]), NfsStat::BADLAYOUT);
    assert_eq!(
        try_commit(&mut x, g.stateid, Some(2 * B), &[e]),
        NfsStat::INVAL
    );
    let outside = BlockExtent {
        file_offset: 8 * B,
        ..e
    };
    assert_eq!(
        try_commit(&mut x, g.stateid, None, &[outside]),
        NfsStat::BADLAYOUT
    );
    let misaligned = BlockExtent { length: 100, ..e };
    assert_eq!(
        try_commit(&mut x, g.stateid, None, &[misaligned]),
        NfsStat::BADLAYOUT
    );
    // A storage offset that is not the file's block: accepted, but nothing converts.
    let elsewhere = BlockExtent {
        storage_offset: e.storage_offset + 4096 * B,
        ..e
    };
    assert_eq!(
        try_commit(&mut x, g.stateid, Some(2 * B - 1), &[elsewhere]),
        NfsStat::OK
    );
    assert_eq!(fx.srv.layouts.metrics.snapshot().commit_converted_blocks, 0);
    // Storage offset 0, as the Linux client sends it: the file's own unwritten blocks of
    // the range convert, up to the new EOF (the extent also holds speculative blocks past
    // it, which stay unwritten).
    let linux = BlockExtent {
        storage_offset: 0,
        ..e
    };
    assert_eq!(
        try_commit(&mut x, g.stateid, Some(2 * B - 1), &[linux]),
        NfsStat::OK
    );
    assert_eq!(fx.srv.layouts.metrics.snapshot().commit_converted_blocks, 2);
    assert_eq!(
        try_commit(&mut x, g.stateid, Some(2 * B - 1), &[e]),
        NfsStat::OK
    );
    assert_eq!(fx.srv.store.getattr(fh.ino).unwrap().size, 2 * B);
    // A range without blocks (truncated away): refused.
    grow(&fx.srv.store, fh.ino, 0);
    assert_eq!(
        try_commit(&mut x, g.stateid, Some(B), &[e]),
        NfsStat::BADLAYOUT
    );
    assert_eq!(fx.srv.store.getattr(fh.ino).unwrap().size, 0);
}

fn return_args(mode: u32, what: u32, file: Option<(u64, u64, Stateid)>) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.bool(false);
    w.u32(BLOCK);
    w.u32(mode);
    w.u32(what);
    if let Some((o, l, s)) = file {
        w.u64(o);
        w.u64(l);
        s.encode(&mut w);
        w.opaque(b"");
    }
    w.buf
}

#[test]
fn layoutreturn_file_and_all() {
    let fx = fixture(NfsOptions::default());
    let mut x = fx.client();
    let (fh, sid, g) = open_f_rw(&mut x, 4 * B);
    // Half of it: the stateid comes back bumped.
    let (s, body) = call(
        &mut x,
        layoutreturn::run,
        &return_args(IoMode::RW.0, 1, Some((0, 2 * B, g.stateid))),
    );
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert!(r.bool().unwrap());
    let s2 = Stateid::decode(&mut r).unwrap();
    assert_eq!(s2.seqid, g.stateid.seqid + 1);
    // The returned half can no longer be committed; the rest can.
    let e = |i: usize| BlockExtent {
        state: ExtentState::READ_WRITE_DATA,
        ..g.extents[i]
    };
    let low = BlockExtent { length: B, ..e(0) };
    assert_eq!(
        call(
            &mut x,
            layoutcommit::run,
            &commit_args(0, B, s2, None, &[low])
        )
        .0,
        NfsStat::BADLAYOUT
    );
    // An older seqid than the server's is refused, a newer one too.
    let newer = Stateid {
        seqid: s2.seqid + 5,
        ..s2
    };
    let st = call(
        &mut x,
        layoutreturn::run,
        &return_args(IoMode::RW.0, 1, Some((0, 4 * B, newer))),
    )
    .0;
    assert_eq!(st, NfsStat::BAD_STATEID);
    // The rest: nothing left, no stateid.
    let (s, body) = call(
        &mut x,
        layoutreturn::run,
        &return_args(IoMode::ANY.0, 1, Some((0, u64::MAX, s2))),
    );
    assert_eq!((s, body), (NfsStat::OK, vec![0, 0, 0, 0]));
    // ALL needs no filehandle.
    get(&mut x, IoMode::READ.0, 0, B, sid).unwrap();
    x.current_fh = None;
    let (s, body) = call(
        &mut x,
        layoutreturn::run,
        &return_args(IoMode::ANY.0, 3, None),
    );
    assert_eq!((s, body), (NfsStat::OK, vec![0, 0, 0, 0]));
    assert!(fx
        .srv
        .layouts
        .grants_of(x.session.as_ref().unwrap().clientid, fh.ino)
        .is_empty());
    assert!(fx.srv.state.layouts_of_file(fh.ino).is_empty());
}

#[test]
fn conflicting_layoutget_recalls_then_fences() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fenced");
    let script = dir.path().join("fence.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\necho \"$@\" > {}\n", out.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fx = fixture(NfsOptions {
        fence_command: Some(script.display().to_string()),
        ..NfsOptions::default()
    });
    let bc_a = Arc::new(Recorder::default());
    let ca = conn(1, Some(bc_a.clone()));
    let cb = conn(2, None);
    let mut a = ctx(&fx.srv, &ca);
    let mut b = ctx(&fx.srv, &cb);
    mount(&mut a, b"a");
    mount(&mut b, b"b");
    let (fh, sa) = create(&mut a, b"f");
    let ga = get(&mut a, IoMode::RW.0, 0, 2 * B, sa).unwrap();
    let (_, sb) = create(&mut b, b"f");
    assert_eq!(
        get(&mut b, IoMode::READ.0, 0, B, sb).err(),
        Some(NfsStat::RECALLCONFLICT)
    );
    // The COMPOUND only queued the recall; the sender delivers it.
    assert_eq!(bc_a.0.lock().unwrap().len(), 0);
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    {
        let calls = bc_a.0.lock().unwrap();
        assert_eq!(calls.len(), 1);
        // CB_SEQUENCE then CB_LAYOUTRECALL of this file.
        let c = &calls[0];
        assert_eq!(&c[12..20], &[0, 0, 0, 2, 0, 0, 0, 11]);
        assert!(c.windows(16).any(|w| w == fh.to_bytes()));
    }
    // While the recall is pending: RECALLCONFLICT again, and no second recall.
    assert_eq!(
        get(&mut b, IoMode::READ.0, 0, B, sb).err(),
        Some(NfsStat::RECALLCONFLICT)
    );
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    assert_eq!(bc_a.0.lock().unwrap().len(), 1);
    // Before two leases nothing happens; after, A is fenced and its layout revoked.
    recall::tick(&fx.srv.layouts_env(), Instant::now());
    assert_eq!(fx.srv.layouts.metrics.snapshot().fences, 0);
    let late = Instant::now() + Duration::from_secs(2 * u64::from(fx.srv.opts.lease_seconds) + 1);
    recall::tick(&fx.srv.layouts_env(), late);
    assert_eq!(fx.srv.layouts.metrics.snapshot().fences, 1);
    let dev_hex: String = fx
        .srv
        .store
        .volume_uuid()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        std::fs::read_to_string(&out).unwrap().trim(),
        format!("127.0.0.1 {dev_hex}")
    );
    assert_eq!(
        commit(&mut a, &ga, None).err(),
        Some(NfsStat::ADMIN_REVOKED)
    );
    assert!(get(&mut b, IoMode::READ.0, 0, B, sb).is_ok());
}

#[test]
fn truncate_and_last_unlink_recall() {
    let fx = fixture(NfsOptions::default());
    let bc = Arc::new(Recorder::default());
    let c = conn(1, Some(bc.clone()));
    let mut x = ctx(&fx.srv, &c);
    let (fh, sid, g0) = open_f_rw(&mut x, 2 * B);
    commit_size(&fx.srv, fh.ino);
    // The truncate waits (DELAY) until the layouts mapping the blocks it frees are back.
    assert_eq!(truncate(&mut x, fh, sid, 0), NfsStat::DELAY);
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    assert_eq!(bc.0.lock().unwrap().len(), 1);
    assert_eq!(truncate(&mut x, fh, sid, 0), NfsStat::DELAY);
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    assert_eq!(
        bc.0.lock().unwrap().len(),
        1,
        "one recall, not one per retry"
    );
    assert_eq!(fx.srv.store.getattr(fh.ino).unwrap().size, 2 * B);
    // Until it returns the layout the client gets no new one.
    assert_eq!(
        get(&mut x, IoMode::RW.0, 0, B, g0.stateid).err(),
        Some(NfsStat::RECALLCONFLICT)
    );
    // The client returns it: the truncate goes through; a new layout, then the last unlink
    // recalls again.
    let ret = return_args(IoMode::ANY.0, 1, Some((0, u64::MAX, g0.stateid)));
    assert_eq!(call(&mut x, layoutreturn::run, &ret).0, NfsStat::OK);
    assert_eq!(truncate(&mut x, fh, sid, 0), NfsStat::OK);
    assert_eq!(fx.srv.store.getattr(fh.ino).unwrap().size, 0);
    let g = get(&mut x, IoMode::RW.0, 0, B, sid).unwrap();
    assert_eq!(g.extents.len(), 1);
    assert_eq!(g.stateid.seqid, 1);
    assert_eq!(remove(&mut x, b"f"), NfsStat::OK);
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    assert_eq!(bc.0.lock().unwrap().len(), 2);
}

/// A backchannel whose client never answers: each call waits until the test lets it go.
struct Stuck {
    entered: Mutex<std::sync::mpsc::Sender<()>>,
    release: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl std::fmt::Debug for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stuck")
    }
}

impl crate::rpc::Backchannel for Stuck {
    fn call(&self, _: u32, _: u32, _: XdrWriter) -> std::io::Result<Vec<u8>> {
        let _ = self.entered.lock().unwrap().send(());
        let _ = self
            .release
            .lock()
            .unwrap()
            .recv_timeout(Duration::from_secs(30));
        Err(std::io::ErrorKind::TimedOut.into())
    }
}

/// Client B truncates a file whose layout client A holds and never gives back (its
/// backchannel swallows the recall): B gets DELAY at once — the COMPOUND only queues the
/// recall — and again while the sender is stuck in A's backchannel. On main, SETATTR sent
/// the CB_LAYOUTRECALL itself and waited up to `callback_timeout` (15 s) for A.
#[test]
fn a_truncate_while_the_holder_ignores_its_recall_is_delay_at_once() {
    let fx = fixture(NfsOptions::default());
    let (etx, erx) = std::sync::mpsc::channel();
    let (rtx, rrx) = std::sync::mpsc::channel();
    let stuck = Arc::new(Stuck {
        entered: Mutex::new(etx),
        release: Mutex::new(rrx),
    });
    let ca = super::fixture::conn(1, Some(stuck as Arc<dyn crate::rpc::Backchannel>));
    let cb = conn(2, None);
    let mut a = ctx(&fx.srv, &ca);
    let (fh, _sa, _) = open_f_rw(&mut a, 2 * B);
    let cid_a = fx.srv.layouts.holders(fh.ino)[0];
    commit_size(&fx.srv, fh.ino);
    let srv = &fx.srv;
    let mut b = ctx(srv, &cb);
    mount(&mut b, b"b");
    let (_, sb) = create(&mut b, b"f");
    // B's truncate, on a thread of its own: its answer must come long before A's
    // backchannel would let go (30 s).
    let mut truncate_b = || {
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let b = &mut b;
            s.spawn(move || {
                let _ = tx.send(truncate(b, fh, sb, 0));
            });
            rx.recv_timeout(Duration::from_secs(10))
        })
    };
    assert_eq!(truncate_b(), Ok(NfsStat::DELAY));
    assert!(
        erx.try_recv().is_err(),
        "the COMPOUND called the holder's backchannel"
    );
    assert!(srv.layouts.recall_pending(cid_a, fh.ino));
    std::thread::scope(|s| {
        // The sender delivers the recall and is stuck in A's backchannel meanwhile.
        s.spawn(|| callback::send_due(&srv.backchannel(), Instant::now()));
        erx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(truncate_b(), Ok(NfsStat::DELAY));
        rtx.send(()).unwrap();
    });
    assert_eq!(srv.store.getattr(fh.ino).unwrap().size, 2 * B);
}

/// Gives the file a size so that SETATTR(size 0) truncates.
fn commit_size(srv: &Server, ino: Ino) {
    let a = srv.store.extents(ino, 0, 2).unwrap();
    let written: Vec<_> = a
        .iter()
        .filter_map(|s| match *s {
            layout::Segment::Mapped {
                file_block,
                phys_block,
                len,
                ..
            } => Some(crate::store::WrittenExtent {
                file_block,
                len_blocks: len,
                phys_block: Some(phys_block),
            }),
            _ => None,
        })
        .collect();
    srv.store
        .commit_blocks(ino, &written, Some(2 * B - 1), None, false)
        .unwrap();
}

#[test]
fn close_returns_the_clients_layouts() {
    let fx = fixture(NfsOptions::default());
    let mut x = fx.client();
    let cid = mount(&mut x, b"a");
    let (fh, sid) = create(&mut x, b"f");
    get(&mut x, IoMode::RW.0, 0, B, sid).unwrap();
    assert_eq!(fx.srv.state.layouts_of_file(fh.ino).len(), 1);
    let mut w = XdrWriter::new();
    w.u32(0);
    sid.encode(&mut w);
    x.current_fh = Some(fh);
    assert_eq!(
        call(&mut x, crate::nfs4::ops::close::run, &w.buf).0,
        NfsStat::OK
    );
    assert!(fx.srv.state.layouts_of_file(fh.ino).is_empty());
    assert!(fx.srv.layouts.grants_of(cid, fh.ino).is_empty());
}

#[test]
fn bytes_written_through_the_layout_read_back_after_commit() {
    let fx = fixture(NfsOptions::default());
    let mut x = fx.client();
    let (fh, _, g) = open_f_rw(&mut x, 2 * B);
    fill(&fx, &g, 0x5a);
    // Before LAYOUTCOMMIT the blocks are unwritten: inside the file they read as zeros,
    // never as the bytes already on the volume.
    grow(&fx.srv.store, fh.ino, B + 10);
    let (before, _) = fx.srv.store.read(fh.ino, 0, 8192).unwrap();
    assert_eq!(before.len() as u64, B + 10);
    assert!(before.iter().all(|b| *b == 0));
    assert_eq!(
        commit(&mut x, &g, Some(2 * B - 100)).unwrap(),
        Some(2 * B - 99)
    );
    let (after, eof) = fx.srv.store.read(fh.ino, 0, 8192).unwrap();
    assert_eq!(after.len() as u64, 2 * B - 99);
    assert!(after.iter().all(|b| *b == 0x5a));
    assert!(eof);
}

#[test]
fn committed_layout_writes_survive_a_crash_after_the_reply() {
    for seed in 1..=4 {
        let fx = fixture_seeded(NfsOptions::default(), seed);
        let mut x = fx.client();
        let (fh, _, g) = open_f_rw(&mut x, 2 * B);
        // A converting commit, then an overwrite commit (data flush only): both replies
        // promise the bytes.
        fill(&fx, &g, 0x5a);
        assert_eq!(commit(&mut x, &g, Some(2 * B - 1)).unwrap(), Some(2 * B));
        fill(&fx, &g, 0x33);
        assert_eq!(commit(&mut x, &g, Some(2 * B - 1)).unwrap(), None);
        let after = Arc::new(fx.dev.crash());
        let store = Store::open_dev(after, StoreOptions::default()).unwrap();
        assert_eq!(store.getattr(fh.ino).unwrap().size, 2 * B, "seed {seed}");
        let (data, _) = store.read(fh.ino, 0, 2 * B as u32).unwrap();
        assert!(data.iter().all(|b| *b == 0x33), "seed {seed}");
        let segs = store.extents(fh.ino, 0, 2).unwrap();
        assert!(segs.iter().all(|s| matches!(
            s,
            layout::Segment::Mapped {
                state: layout::ExtState::Written,
                ..
            }
        )));
    }
}

#[test]
fn a_recall_that_could_not_be_sent_is_retried_by_the_tick() {
    let fx = fixture(NfsOptions::default());
    let mut x = fx.client();
    let cid = mount(&mut x, b"a");
    let (fh, sid) = create(&mut x, b"f");
    get(&mut x, IoMode::RW.0, 0, B, sid).unwrap();
    // No backchannel: nothing sent, the recall stays pending and queued for a retry.
    assert_eq!(
        layouts::break_for(&fx.srv.layouts_env(), fh, layouts::Break::Truncate),
        Err(NfsStat::DELAY)
    );
    assert!(fx.srv.layouts.recall_pending(cid, fh.ino));
    assert_eq!(fx.srv.callbacks.len(), 1);
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    assert_eq!(fx.srv.layouts.metrics.snapshot().recalls_sent, 0);
    assert_eq!(
        fx.srv.callbacks.len(),
        1,
        "queued again for RETRY_EVERY later"
    );
    // Not due before RETRY_EVERY; the tick tries again after (and queues it again while
    // the backchannel stays down).
    recall::tick(
        &fx.srv.layouts_env(),
        Instant::now() + callback::RETRY_EVERY,
    );
    assert_eq!(fx.srv.callbacks.len(), 1);
    // Past the deadline the queue gives up; the tick fences and revokes instead.
    let late =
        recall::recall_deadline(&fx.srv.layouts_env(), Instant::now()) + callback::RETRY_EVERY;
    recall::tick(&fx.srv.layouts_env(), late);
    assert!(fx.srv.callbacks.is_empty());
    assert!(!fx.srv.layouts.recall_pending(cid, fh.ino));
    assert_eq!(fx.srv.layouts.metrics.snapshot().fences, 1);
}

/// A backchannel that records every CB_COMPOUND and answers with the statuses it was
/// given, one per call (NFS4_OK once they run out).
#[derive(Debug, Default)]
struct Answers {
    calls: Mutex<Vec<Vec<u8>>>,
    statuses: Mutex<std::collections::VecDeque<NfsStat>>,
}

impl crate::rpc::Backchannel for Answers {
    fn call(&self, _: u32, _: u32, args: XdrWriter) -> std::io::Result<Vec<u8>> {
        self.calls.lock().unwrap().push(args.into_inner());
        let st = self
            .statuses
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(NfsStat::OK);
        let mut w = XdrWriter::new();
        w.u32(st.0);
        w.opaque(b"");
        w.u32(0);
        Ok(w.into_inner())
    }
}

/// A layout given back (LAYOUTRETURN) after its recall was queued but before the sender got
/// to it: the CB_LAYOUTRECALL is dropped unsent (`Callback::wanted`), not sent for nothing.
#[test]
fn a_recall_whose_layout_came_back_before_it_went_is_not_sent() {
    let fx = fixture(NfsOptions::default());
    let bc = Arc::new(Answers::default());
    let c = super::fixture::conn(1, Some(bc.clone() as Arc<dyn crate::rpc::Backchannel>));
    let mut x = ctx(&fx.srv, &c);
    let (fh, _sid, g) = open_f_rw(&mut x, 2 * B);
    let cid = fx.srv.layouts.holders(fh.ino)[0];
    assert_eq!(
        layouts::break_for(&fx.srv.layouts_env(), fh, layouts::Break::Truncate),
        Err(NfsStat::DELAY)
    );
    assert_eq!(fx.srv.callbacks.len(), 1);
    let ret = return_args(IoMode::ANY.0, 1, Some((0, u64::MAX, g.stateid)));
    assert_eq!(call(&mut x, layoutreturn::run, &ret).0, NfsStat::OK);
    assert!(!fx.srv.layouts.recall_pending(cid, fh.ino));
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    assert!(
        bc.calls.lock().unwrap().is_empty(),
        "recall sent after the return"
    );
    assert!(fx.srv.callbacks.is_empty());
    assert_eq!(fx.srv.layouts.metrics.snapshot().recalls_sent, 0);
}

/// A holder that answers its CB_LAYOUTRECALL with NFS4ERR_DELAY (RFC 8881 §15.1.1.3) is asked
/// again `RETRY_EVERY` later; the answer it gives then is the one that counts.
#[test]
fn a_recall_answered_delay_is_sent_again() {
    let fx = fixture(NfsOptions::default());
    let bc = Arc::new(Answers::default());
    bc.statuses.lock().unwrap().push_back(NfsStat::DELAY);
    let c = super::fixture::conn(1, Some(bc.clone() as Arc<dyn crate::rpc::Backchannel>));
    let mut x = ctx(&fx.srv, &c);
    let (fh, _sid, _g) = open_f_rw(&mut x, 2 * B);
    let cid = fx.srv.layouts.holders(fh.ino)[0];
    assert_eq!(
        layouts::break_for(&fx.srv.layouts_env(), fh, layouts::Break::Truncate),
        Err(NfsStat::DELAY)
    );
    let t0 = Instant::now();
    callback::send_due(&fx.srv.backchannel(), t0);
    assert_eq!(bc.calls.lock().unwrap().len(), 1);
    assert_eq!(fx.srv.callbacks.len(), 1, "queued again after DELAY");
    assert_eq!(fx.srv.layouts.metrics.snapshot().recalls_sent, 0);
    // Not before RETRY_EVERY.
    callback::send_due(&fx.srv.backchannel(), t0);
    assert_eq!(bc.calls.lock().unwrap().len(), 1);
    callback::send_due(&fx.srv.backchannel(), t0 + callback::RETRY_EVERY);
    {
        let calls = bc.calls.lock().unwrap();
        assert_eq!(calls.len(), 2);
        // After the CB_SEQUENCE seqid (bytes 36..40): the same CB_LAYOUTRECALL.
        assert_eq!(calls[0][40..], calls[1][40..]);
    }
    assert!(fx.srv.callbacks.is_empty());
    assert_eq!(fx.srv.layouts.metrics.snapshot().recalls_sent, 1);
    // Answered OK: the recall stays pending until the layout comes back.
    assert!(fx.srv.layouts.recall_pending(cid, fh.ino));
}

/// Not a test: prints the cost ratio of overwrite LAYOUTCOMMITs with `layoutcommit = "sync"`
/// against the default (docs/design.md §7, seed 002) on a volume file under `PNFS_BENCH_DIR` (or
/// the target directory). Run with `cargo test -p pnfsd --lib overwrite_commit_ratio --
/// --ignored --nocapture`.
#[test]
#[ignore]
fn overwrite_commit_ratio() {
    let base = std::env::var_os("PNFS_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let mut per = Vec::new();
    for sync in [false, true] {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let path = dir.path().join("vol.img");
        Store::mkfs(&path, 64 << 20, false).unwrap();
        let store = Arc::new(Store::open(&path, StoreOptions::default()).unwrap());
        let opts = NfsOptions {
            layoutcommit_sync: sync,
            ..NfsOptions::default()
        };
        let srv = super::fixture::server(store, opts, 1);
        let c = conn(1, None);
        let mut x = ctx(&srv, &c);
        let (_, _, g) = open_f_rw(&mut x, 16 * B);
        commit(&mut x, &g, Some(16 * B - 1)).unwrap();
        let n = 200;
        let t0 = Instant::now();
        for _ in 0..n {
            commit(&mut x, &g, Some(16 * B - 1)).unwrap();
        }
        let each = t0.elapsed() / n;
        let m = srv.layouts.metrics.snapshot();
        println!(
            "layoutcommit sync={sync}: {each:?} per overwrite commit, {} log writes, {} data flushes",
            m.commit_log_writes, m.commit_data_flushes
        );
        per.push(each.as_secs_f64());
    }
    println!("sync / datasync time ratio: {:.2}", per[1] / per[0]);
}

/// Speculative preallocation, whole runs and the trim share it too.
mod prealloc;

/// The SCSI layout's tests share this fixture.
mod scsi;

/// Fencing of clients whose layouts went without a return shares it too.
mod fence;

/// Fencing at the embedded target without a fence command shares it too.
mod target;

/// The target's enforcement of the layouts shares it too.
mod enforce;

/// A split volume's layouts share it too.
mod split;
