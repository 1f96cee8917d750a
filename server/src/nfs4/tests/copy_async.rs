//! Asynchronous COPY (RFC 7862 §15.2.3, §15.8, §15.9, §16.1) through the handlers: the
//! reply at once, the copy moved a step at a time (`offload::step`, what the workers
//! loop on), CB_OFFLOAD on a recording backchannel, OFFLOAD_STATUS and OFFLOAD_CANCEL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::copy::{conn, create, ctx, pattern, write_data, Recorder};
use super::fixture::{call, Fx, VOL};
use super::pnfs::mount_v;
use crate::nfs4::callback;
use crate::nfs4::copy::offload::{self, MAX_PER_CLIENT};
use crate::nfs4::ctx::Ctx;
use crate::nfs4::ops::{copy, destroy_clientid, destroy_session, offload_cancel, offload_status};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Fh, Stateid};
use crate::server::NfsOptions;
use crate::store::{Stable, Store, StoreOptions};
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// Bytes per step in these tests: a 70 000-byte copy takes five steps.
const STEP: u64 = 16 << 10;

/// COPY arguments with `ca_synchronous` false.
fn async_args(src: Stateid, dst: Stateid, src_off: u64, dst_off: u64, count: u64) -> Vec<u8> {
    let mut w = XdrWriter::new();
    src.encode(&mut w);
    dst.encode(&mut w);
    w.u64(src_off);
    w.u64(dst_off);
    w.u64(count);
    w.bool(true);
    w.bool(false);
    w.u32(0);
    w.buf
}

/// How COPY answered.
#[derive(Debug, PartialEq, Eq)]
enum Reply {
    /// wr_callback_id, with wr_count 0, UNSTABLE4 and cr_synchronous false checked.
    Async(Stateid),
    /// (wr_count, wr_committed), cr_synchronous true.
    Sync(u64, u32),
}

/// SAVEFH(src) PUTFH(dst) COPY(asynchronous asked).
fn copy_async(
    x: &mut Ctx<'_>,
    src: (Fh, Stateid),
    dst: (Fh, Stateid),
    dst_off: u64,
    count: u64,
) -> Result<Reply, NfsStat> {
    x.saved_fh = Some(src.0);
    x.current_fh = Some(dst.0);
    let (s, body) = call(x, copy::run, &async_args(src.1, dst.1, 0, dst_off, count));
    if s != NfsStat::OK {
        return Err(s);
    }
    let mut r = XdrReader::new(&body);
    let ids = r.u32().unwrap();
    let sid = (ids == 1).then(|| Stateid::decode(&mut r).unwrap());
    let count = r.u64().unwrap();
    let committed = r.u32().unwrap();
    let verf: [u8; 8] = r.array().unwrap();
    assert_eq!(verf, x.srv.boot_verifier.to_be_bytes());
    assert!(r.bool().unwrap(), "cr_consecutive");
    let synchronous = r.bool().unwrap();
    r.finish().unwrap();
    match sid {
        Some(sid) => {
            assert_eq!(
                (count, committed, synchronous),
                (0, crate::nfs4::types::UNSTABLE4, false)
            );
            Ok(Reply::Async(sid))
        }
        None => {
            assert!(synchronous);
            Ok(Reply::Sync(count, committed))
        }
    }
}

/// `copy_async` that must have been answered asynchronously: the copy stateid.
fn started(
    x: &mut Ctx<'_>,
    src: (Fh, Stateid),
    dst: (Fh, Stateid),
    dst_off: u64,
    count: u64,
) -> Stateid {
    let Reply::Async(sid) = copy_async(x, src, dst, dst_off, count).unwrap() else {
        panic!("copied synchronously");
    };
    sid
}

/// After a cancel: nothing goes out on the backchannel and the copy is freed.
fn assert_cancelled_quietly(fx: &Fx, s: &Setup) {
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    assert!(
        s.bc.0.lock().unwrap().is_empty(),
        "CB_OFFLOAD after a cancel"
    );
    assert!(fx.srv.copies.is_empty());
}

/// OFFLOAD_STATUS: (osr_count, osr_complete).
fn status(x: &mut Ctx<'_>, sid: Stateid) -> Result<(u64, Option<NfsStat>), NfsStat> {
    let mut w = XdrWriter::new();
    sid.encode(&mut w);
    let (s, body) = call(x, offload_status::run, &w.buf);
    if s != NfsStat::OK {
        return Err(s);
    }
    let mut r = XdrReader::new(&body);
    let count = r.u64().unwrap();
    let complete = match r.u32().unwrap() {
        0 => None,
        1 => Some(NfsStat(r.u32().unwrap())),
        n => panic!("osr_complete<1> of {n}"),
    };
    r.finish().unwrap();
    Ok((count, complete))
}

fn cancel(x: &mut Ctx<'_>, sid: Stateid) -> NfsStat {
    let mut w = XdrWriter::new();
    sid.encode(&mut w);
    call(x, offload_cancel::run, &w.buf).0
}

/// Decodes a recorded CB_COMPOUND { CB_SEQUENCE, CB_OFFLOAD }: (fh, stateid, status, then
/// wr_count or coa_bytes_copied, and wr_committed on OK).
fn decode_cb_offload(b: &[u8]) -> (Vec<u8>, Stateid, NfsStat, u64, Option<u32>) {
    let mut r = XdrReader::new(b);
    r.opaque(16).unwrap();
    assert_eq!(
        (r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()),
        (2, 0, 2)
    );
    assert_eq!(r.u32().unwrap(), 11, "CB_SEQUENCE");
    let _: [u8; 16] = r.array().unwrap();
    for _ in 0..3 {
        r.u32().unwrap();
    }
    r.bool().unwrap();
    assert_eq!(r.u32().unwrap(), 0);
    assert_eq!(r.u32().unwrap(), 15, "CB_OFFLOAD");
    let fh = r.opaque(128).unwrap().to_vec();
    let sid = Stateid::decode(&mut r).unwrap();
    let st = NfsStat(r.u32().unwrap());
    let out = if st == NfsStat::OK {
        assert_eq!(r.u32().unwrap(), 0, "no callback id in coa_resok4");
        let count = r.u64().unwrap();
        let committed = r.u32().unwrap();
        let _: [u8; 8] = r.array().unwrap();
        (fh, sid, st, count, Some(committed))
    } else {
        (fh, sid, st, r.u64().unwrap(), None)
    };
    r.finish().unwrap();
    out
}

/// A client with a recording backchannel, a source with `n` bytes and an empty destination.
struct Setup {
    bc: Arc<Recorder>,
    src: (Fh, Stateid),
    dst: (Fh, Stateid),
    data: Vec<u8>,
}

fn setup(fx: &Fx, x: &mut Ctx<'_>, bc: Arc<Recorder>, n: usize) -> Setup {
    fx.srv.copies.set_step(STEP);
    mount_v(x, b"a", [7; 8]);
    let src = create(x, b"src", b"o");
    let dst = create(x, b"dst", b"o");
    let data = pattern(n);
    write_data(x, src.0, src.1, 0, &data);
    Setup { bc, src, dst, data }
}

/// The COPY answers before any byte moves; OFFLOAD_STATUS follows the steps; once over,
/// the destination holds the bytes, OFFLOAD_STATUS says OK, and one CB_OFFLOAD reports the
/// count as FILE_SYNC4; once answered, the copy is freed.
#[test]
fn an_async_copy_answers_at_once_and_cb_offload_reports_it() {
    let fx = Fx::new(NfsOptions::default());
    let bc = Arc::new(Recorder::default());
    let c = conn(1, Some(bc.clone()));
    let mut x = ctx(&fx.srv, &c);
    let s = setup(&fx, &mut x, bc, 70_000);
    let sid = started(&mut x, s.src, s.dst, 5, 0);
    assert_eq!(
        fx.srv.store.getattr(s.dst.0.ino).unwrap().size,
        0,
        "not at once"
    );
    assert_eq!(status(&mut x, sid), Ok((0, None)));
    assert!(offload::step(&fx.srv.copy_env()));
    assert_eq!(status(&mut x, sid), Ok((STEP, None)));
    while offload::step(&fx.srv.copy_env()) {}
    assert_eq!(status(&mut x, sid), Ok((70_000, Some(NfsStat::OK))));
    let (back, _) = fx.srv.store.read(s.dst.0.ino, 0, 80_000).unwrap();
    assert_eq!(back.len(), 70_005);
    assert!(back[5..] == s.data[..], "copied bytes differ");
    callback::send_due(&fx.srv.backchannel(), Instant::now());
    let sent = s.bc.0.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "one CB_OFFLOAD");
    let (fh, cb_sid, st, count, committed) = decode_cb_offload(&sent[0]);
    assert_eq!(fh, s.dst.0.to_bytes());
    assert_eq!((cb_sid, st, count), (sid, NfsStat::OK, 70_000));
    assert_eq!(committed, Some(crate::nfs4::types::FILE_SYNC4));
    assert!(
        fx.srv.copies.is_empty(),
        "freed once CB_OFFLOAD was answered"
    );
    assert_eq!(status(&mut x, sid), Err(NfsStat::BAD_STATEID));
}

/// OFFLOAD_CANCEL in the middle: no byte more is copied, no CB_OFFLOAD goes out, and the
/// stateid names nothing any more.
#[test]
fn offload_cancel_stops_the_copy_without_cb_offload() {
    let fx = Fx::new(NfsOptions::default());
    let bc = Arc::new(Recorder::default());
    let c = conn(1, Some(bc.clone()));
    let mut x = ctx(&fx.srv, &c);
    let s = setup(&fx, &mut x, bc, 70_000);
    let sid = started(&mut x, s.src, s.dst, 0, 0);
    assert!(offload::step(&fx.srv.copy_env()));
    assert_eq!(cancel(&mut x, sid), NfsStat::OK);
    assert!(
        !offload::step(&fx.srv.copy_env()),
        "still copying after the cancel"
    );
    assert_eq!(fx.srv.store.getattr(s.dst.0.ino).unwrap().size, STEP);
    assert_cancelled_quietly(&fx, &s);
    assert_eq!(status(&mut x, sid), Err(NfsStat::BAD_STATEID));
    assert_eq!(cancel(&mut x, sid), NfsStat::BAD_STATEID);
}

/// A copy that is over has its CB_OFFLOAD queued; OFFLOAD_CANCEL before it went out frees
/// the copy and the CB_OFFLOAD is dropped unsent.
#[test]
fn a_cancel_after_the_end_drops_the_queued_cb_offload() {
    let fx = Fx::new(NfsOptions::default());
    let bc = Arc::new(Recorder::default());
    let c = conn(1, Some(bc.clone()));
    let mut x = ctx(&fx.srv, &c);
    let s = setup(&fx, &mut x, bc, 20_000);
    let sid = started(&mut x, s.src, s.dst, 0, 0);
    while offload::step(&fx.srv.copy_env()) {}
    assert_eq!(fx.srv.callbacks.len(), 1, "CB_OFFLOAD queued");
    assert_eq!(cancel(&mut x, sid), NfsStat::OK);
    assert_cancelled_quietly(&fx, &s);
}

/// A copy stateid is the copier's only: another client's OFFLOAD_STATUS and OFFLOAD_CANCEL
/// of it, and a made-up one, are BAD_STATEID, and the copy goes on.
#[test]
fn another_clients_offload_ops_get_bad_stateid() {
    let fx = Fx::new(NfsOptions::default());
    let bc = Arc::new(Recorder::default());
    let (ca, cb) = (conn(1, Some(bc.clone())), conn(2, None));
    let mut a = ctx(&fx.srv, &ca);
    let mut b = ctx(&fx.srv, &cb);
    let s = setup(&fx, &mut a, bc, 40_000);
    mount_v(&mut b, b"b", [7; 8]);
    let sid = started(&mut a, s.src, s.dst, 0, 0);
    b.current_fh = Some(s.dst.0);
    assert_eq!(status(&mut b, sid), Err(NfsStat::BAD_STATEID));
    assert_eq!(cancel(&mut b, sid), NfsStat::BAD_STATEID);
    let mut bogus = sid;
    bogus.other[11] ^= 1;
    assert_eq!(status(&mut a, bogus), Err(NfsStat::BAD_STATEID));
    assert_eq!(status(&mut a, s.src.1), Err(NfsStat::BAD_STATEID));
    while offload::step(&fx.srv.copy_env()) {}
    assert_eq!(status(&mut a, sid), Ok((40_000, Some(NfsStat::OK))));
}

/// With the backchannel down, the result stays for OFFLOAD_STATUS; it is dropped once
/// kept two leases, never leaks.
#[test]
fn without_a_backchannel_the_result_waits_for_offload_status() {
    let fx = Fx::new(NfsOptions::default());
    let c = super::fixture::conn(1, None);
    let mut x = ctx(&fx.srv, &c);
    let s = setup(&fx, &mut x, Arc::default(), 20_000);
    let sid = started(&mut x, s.src, s.dst, 0, 0);
    while offload::step(&fx.srv.copy_env()) {}
    let now = Instant::now();
    callback::send_due(&fx.srv.backchannel(), now);
    offload::tick(&fx.srv.copy_env(), now);
    assert_eq!(status(&mut x, sid), Ok((20_000, Some(NfsStat::OK))));
    let lease = Duration::from_secs(u64::from(fx.srv.state.lease_seconds()));
    offload::tick(&fx.srv.copy_env(), now + lease);
    assert_eq!(fx.srv.copies.len(), 1, "dropped before two leases");
    offload::tick(&fx.srv.copy_env(), now + 2 * lease + Duration::from_secs(1));
    assert!(fx.srv.copies.is_empty(), "kept forever");
}

/// Past the per-client cap, a COPY that asks for asynchronous is done synchronously (no
/// callback id, the bytes in the reply); DESTROY_CLIENTID cancels and frees the rest.
#[test]
fn over_the_cap_copies_synchronously_and_destroy_clientid_frees() {
    let fx = Fx::new(NfsOptions::default());
    let bc = Arc::new(Recorder::default());
    let c = conn(1, Some(bc.clone()));
    let mut x = ctx(&fx.srv, &c);
    let s = setup(&fx, &mut x, bc, 40_000);
    for i in 0..MAX_PER_CLIENT as u64 {
        let r = copy_async(&mut x, s.src, s.dst, i * 40_000, 0).unwrap();
        assert!(matches!(r, Reply::Async(_)), "{r:?}");
    }
    let r = copy_async(&mut x, s.src, s.dst, 200_000, 0).unwrap();
    assert_eq!(r, Reply::Sync(40_000, crate::nfs4::types::FILE_SYNC4));
    let (back, _) = fx.srv.store.read(s.dst.0.ino, 200_000, 40_000).unwrap();
    assert!(back == s.data);
    assert!(offload::step(&fx.srv.copy_env()));
    let slot = x.session.clone().unwrap();
    let (cid, sessionid) = (slot.clientid, slot.sessionid);
    // The COMPOUND of the copies is over: its slot is free.
    fx.srv.state.slot_done(&slot, b"");
    let mut bare = fx.ctx(1);
    let mut w = XdrWriter::new();
    w.opaque_fixed(&sessionid);
    assert_eq!(call(&mut bare, destroy_session::run, &w.buf).0, NfsStat::OK);
    let mut w = XdrWriter::new();
    w.u64(cid);
    assert_eq!(
        call(&mut bare, destroy_clientid::run, &w.buf).0,
        NfsStat::OK
    );
    assert!(fx.srv.copies.is_empty(), "copies outlive their client");
    assert!(!offload::step(&fx.srv.copy_env()));
}

/// What CB_OFFLOAD reported FILE_SYNC4 is on the volume after a crash right after it was
/// sent: the commit the last step does is the synchronous COPY's.
#[test]
fn an_async_copy_reported_stable_survives_a_crash() {
    let data = pattern(3 * 4096 + 500);
    for seed in 1..=4 {
        let fx = Fx::on(NfsOptions::default(), VOL, seed, StoreOptions::default(), 1);
        fx.srv.copies.set_step(4096);
        let bc = Arc::new(Recorder::default());
        let c = conn(1, Some(bc.clone()));
        let mut x = ctx(&fx.srv, &c);
        mount_v(&mut x, b"a", [7; 8]);
        let src = create(&mut x, b"src", b"o");
        let dst = create(&mut x, b"dst", b"o");
        fx.srv
            .store
            .write(src.0.ino, 0, &data, Stable::FileSync)
            .unwrap();
        started(&mut x, src, dst, 4096, 0);
        while offload::step(&fx.srv.copy_env()) {}
        callback::send_due(&fx.srv.backchannel(), Instant::now());
        let sent = bc.0.lock().unwrap().clone();
        let (.., count, committed) = decode_cb_offload(&sent[0]);
        assert_eq!(
            (count, committed),
            (data.len() as u64, Some(crate::nfs4::types::FILE_SYNC4))
        );
        let after = Arc::new(fx.dev.crash());
        let store = Store::open_dev(after, StoreOptions::default()).unwrap();
        let size = store.getattr(dst.0.ino).unwrap().size;
        assert_eq!(size, 4096 + data.len() as u64, "seed {seed}");
        let (back, _) = store.read(dst.0.ino, 4096, data.len() as u32).unwrap();
        assert!(back == data, "seed {seed}: copied bytes lost");
    }
}

/// OFFLOAD_CANCEL while a worker is in the middle of a step waits the step out: once it
/// has answered, the destination does not change any more. A copy whose steps all ran
/// before the cancel came (a loaded machine can hold this thread back that long) proves
/// nothing, so such an attempt is made again on a fresh destination.
#[test]
fn a_cancel_waits_out_the_step_in_progress() {
    use std::sync::atomic::{AtomicBool, Ordering};
    const ATTEMPTS: usize = 20;
    const LEN: u64 = 4 << 20;
    let fx = Fx::new(NfsOptions::default());
    let bc = Arc::new(Recorder::default());
    let c = conn(1, Some(bc.clone()));
    let mut x = ctx(&fx.srv, &c);
    let s = setup(&fx, &mut x, bc, LEN as usize);
    fx.srv.copies.set_step(4096);
    let stop = AtomicBool::new(false);
    let landed = std::thread::scope(|sc| {
        let srv = &fx.srv;
        let stop = &stop;
        sc.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if !offload::step(&srv.copy_env()) {
                    std::thread::yield_now();
                }
            }
        });
        // Stops the stepping thread however this closure ends (a failed assertion too).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(stop);
        for attempt in 0..ATTEMPTS {
            let dst = match attempt {
                0 => s.dst,
                n => create(&mut x, format!("dst-{n}").as_bytes(), b"o"),
            };
            let sid = started(&mut x, s.src, dst, 0, 0);
            while status(&mut x, sid).unwrap().0 == 0 {
                std::thread::yield_now();
            }
            assert_eq!(cancel(&mut x, sid), NfsStat::OK);
            // The step the cancel came in is over and the copy freed before the answer.
            assert!(
                fx.srv.copies.is_empty(),
                "cancel answered with its step running"
            );
            let size = fx.srv.store.getattr(dst.0.ino).unwrap().size;
            if size == LEN {
                continue; // every step ran before the cancel: try again
            }
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(fx.srv.store.getattr(dst.0.ino).unwrap().size, size);
            return true;
        }
        false
    });
    assert!(
        landed,
        "in {ATTEMPTS} attempts every copy ended before its cancel"
    );
    assert_cancelled_quietly(&fx, &s);
}

/// The tick cancels and frees the copies of a client the state no longer knows (a lease
/// that expired, a purged courtesy client), and leaves a known client's alone.
#[test]
fn the_tick_frees_the_copies_of_clients_gone() {
    let fx = Fx::new(NfsOptions::default());
    let bc = Arc::new(Recorder::default());
    let c = conn(1, Some(bc.clone()));
    let mut x = ctx(&fx.srv, &c);
    let s = setup(&fx, &mut x, bc, 20_000);
    let sid = started(&mut x, s.src, s.dst, 0, 0);
    let job = offload::Job {
        src: s.src.0,
        src_off: 0,
        dst: s.dst.0,
        dst_off: 0,
        len: 20_000,
    };
    let gone = fx.srv.copies.start(fx.srv.boot_verifier, 0xdead, job);
    assert!(gone.is_some());
    offload::tick(&fx.srv.copy_env(), Instant::now());
    assert_eq!(fx.srv.copies.len(), 1, "the unknown client's copy kept");
    assert_eq!(status(&mut x, sid), Ok((0, None)));
}
