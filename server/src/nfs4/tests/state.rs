//! The session and state operations through their handlers, over a real store on a
//! simulated volume: the XDR of each argument and result, and the state they make.

use super::fixture::{call, seq_args, session_args, Fx};
use crate::nfs4::ctx::Ctx;
use crate::nfs4::ops::{
    close, create_session, delegreturn, destroy_clientid, destroy_session, exchange_id,
    free_stateid, lock, lockt, locku, open, open_downgrade, reclaim_complete, sequence,
    test_stateid,
};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, Fh, Stateid};
use crate::server::NfsOptions;
use crate::store::ROOT_INO;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// EXCHANGE_ID + CREATE_SESSION + SEQUENCE through the handlers; leaves `ctx` in the session.
fn mount(ctx: &mut Ctx<'_>, owner: &[u8]) -> (u64, [u8; 16]) {
    let mut w = XdrWriter::new();
    w.opaque_fixed(&[7; 8]);
    w.opaque(owner);
    w.u32(0);
    w.u32(0); // SP4_NONE
    w.u32(0); // no impl id
    let (s, body) = call(ctx, exchange_id::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    let clientid = r.u64().unwrap();
    let seq = r.u32().unwrap();
    let flags = r.u32().unwrap();
    assert_ne!(flags & 0x2_0000, 0, "USE_PNFS_MDS");
    assert_eq!(r.u32().unwrap(), 0);
    assert_eq!(r.u64().unwrap(), 0);
    assert_eq!(r.opaque(1024).unwrap(), b"pnfsd");
    assert_eq!(r.opaque(1024).unwrap(), b"pnfsd");
    assert_eq!(r.array_len(1, 4).unwrap(), 1);

    let args = session_args(clientid, seq);
    let (s, body) = call(ctx, create_session::run, &args);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    let sid: [u8; 16] = r.array().unwrap();
    assert_eq!(r.u32().unwrap(), seq);
    // No backchannel sender in this fixture: the flag is not granted.
    assert_eq!(r.u32().unwrap(), 0);
    assert_eq!(body.len(), 16 + 8 + 2 * 28);

    ctx.op_count = 2;
    let (s, body) = call(ctx, sequence::run, &seq_args(sid, 1, 0, true));
    assert_eq!(s, NfsStat::OK);
    assert_eq!(body.len(), 16 + 5 * 4);
    assert_eq!(ctx.session.as_ref().map(|s| s.clientid), Some(clientid));
    (clientid, sid)
}

fn reclaim_complete(ctx: &mut Ctx<'_>) -> NfsStat {
    call(ctx, reclaim_complete::run, &[0, 0, 0, 0]).0
}

/// OPEN4args: CLAIM_NULL `name`, with `how` = None (no create) or Some(createmode).
fn open_args(access: u32, deny: u32, owner: &[u8], how: Option<u32>, name: &[u8]) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.u32(0);
    w.u32(access);
    w.u32(deny);
    w.u64(0);
    w.opaque(owner);
    match how {
        None => w.u32(0),
        Some(h) => {
            w.u32(1);
            w.u32(h);
            if h >= 2 {
                w.opaque_fixed(&[1, 2, 3, 4, 5, 6, 7, 8]);
            }
            if h != 2 {
                Bitmap::default().encode(&mut w);
                w.opaque(b"");
            }
        }
    }
    w.u32(0);
    w.string(name);
    w.buf
}

fn root_fh(fx: &Fx) -> Fh {
    let a = fx.srv.store.getattr(ROOT_INO).unwrap();
    Fh {
        ino: a.ino,
        generation: a.generation,
    }
}

fn do_open(ctx: &mut Ctx<'_>, dir: Fh, args: &[u8]) -> Result<(Stateid, Vec<u8>), NfsStat> {
    ctx.current_fh = Some(dir);
    let (s, body) = call(ctx, open::run, args);
    if s != NfsStat::OK {
        return Err(s);
    }
    let mut r = XdrReader::new(&body);
    let sid = Stateid::decode(&mut r).unwrap();
    Ok((sid, body))
}

#[test]
fn session_setup_replay_and_teardown() {
    let fx = Fx::new(NfsOptions::default());
    let mut ctx = fx.ctx(1);
    let (clientid, sid) = mount(&mut ctx, b"client-a");
    let slot = ctx.session.clone().unwrap();
    fx.srv.state.slot_done(&slot, b"the reply");
    // A retry is answered from the cache.
    let mut c2 = fx.ctx(1);
    c2.op_count = 2;
    let (s, _) = call(&mut c2, sequence::run, &seq_args(sid, 1, 0, true));
    assert_eq!(s, NfsStat::OK);
    assert_eq!(c2.cached_reply.as_deref(), Some(&b"the reply"[..]));
    // ... unless it is another request.
    let (s, _) = call(&mut c2, sequence::run, &seq_args(sid, 1, 0, false));
    assert_eq!(s, NfsStat::SEQ_FALSE_RETRY);
    let (s, _) = call(&mut c2, sequence::run, &seq_args(sid, 5, 0, true));
    assert_eq!(s, NfsStat::SEQ_MISORDERED);
    let (s, _) = call(&mut c2, reclaim_complete::run, &[0, 0, 0, 0]);
    assert_eq!(s, NfsStat::OP_NOT_IN_SESSION);
    assert_eq!(reclaim_complete(&mut ctx), NfsStat::OK);
    assert_eq!(reclaim_complete(&mut ctx), NfsStat::COMPLETE_ALREADY);
    let mut w = XdrWriter::new();
    w.u64(clientid);
    let mut bare = fx.ctx(1);
    assert_eq!(
        call(&mut bare, destroy_clientid::run, &w.buf).0,
        NfsStat::CLIENTID_BUSY
    );
    let mut ds = XdrWriter::new();
    ds.opaque_fixed(&sid);
    assert_eq!(
        call(&mut bare, destroy_session::run, &ds.buf).0,
        NfsStat::OK
    );
    assert_eq!(
        call(&mut bare, destroy_clientid::run, &w.buf).0,
        NfsStat::OK
    );
    // Unsupported state protection and flags.
    let mut w = XdrWriter::new();
    w.opaque_fixed(&[7; 8]);
    w.opaque(b"x");
    w.u32(0x100_0000);
    w.u32(0);
    w.u32(0);
    assert_eq!(call(&mut bare, exchange_id::run, &w.buf).0, NfsStat::INVAL);
}

#[test]
fn open_create_modes_lock_and_close() {
    let fx = Fx::new(NfsOptions::default());
    let mut ctx = fx.ctx(1);
    mount(&mut ctx, b"client-b");
    let root = root_fh(&fx);
    // Before the client's RECLAIM_COMPLETE a new open waits (RFC 8881 §18.51.3).
    assert_eq!(
        do_open(&mut ctx, root, &open_args(3, 0, b"o1", Some(1), b"f")).err(),
        Some(NfsStat::GRACE)
    );
    assert_eq!(reclaim_complete(&mut ctx), NfsStat::OK);
    // GUARDED create, then GUARDED again is EXIST, UNCHECKED opens it.
    let (s1, body) = do_open(&mut ctx, root, &open_args(3, 0, b"o1", Some(1), b"f")).unwrap();
    assert_eq!(s1.seqid, 1);
    let file = ctx.current_fh.unwrap();
    assert_ne!(file, root);
    assert_eq!(ctx.current_stateid, Some(s1));
    let mut r = XdrReader::new(&body[16..]);
    assert!(r.bool().unwrap());
    let (before, after) = (r.u64().unwrap(), r.u64().unwrap());
    assert!(after > before);
    assert_eq!(r.u32().unwrap(), 0x4);
    let _attrset = Bitmap::decode(&mut r).unwrap();
    assert_eq!(r.u32().unwrap(), 0, "OPEN_DELEGATE_NONE");
    r.finish().unwrap();
    assert_eq!(
        do_open(&mut ctx, root, &open_args(3, 0, b"o1", Some(1), b"f")).err(),
        Some(NfsStat::EXIST)
    );
    let (s2, _) = do_open(&mut ctx, root, &open_args(1, 0, b"o1", Some(0), b"f")).unwrap();
    assert_eq!(s2.other, s1.other);
    // Other owners: a reader is fine; denying readers is not while they read.
    let (s3, _) = do_open(&mut ctx, root, &open_args(1, 0, b"o2", None, b"f")).unwrap();
    assert_eq!(
        do_open(&mut ctx, root, &open_args(1, 1, b"o3", None, b"f")).err(),
        Some(NfsStat::SHARE_DENIED)
    );
    // EXCLUSIVE4_1: a retry with the same verifier opens; a different file name exists.
    do_open(&mut ctx, root, &open_args(3, 0, b"o1", Some(3), b"x")).unwrap();
    do_open(&mut ctx, root, &open_args(3, 0, b"o1", Some(3), b"x")).unwrap();
    assert_eq!(
        do_open(&mut ctx, root, &open_args(3, 0, b"o1", Some(3), b"f")).err(),
        Some(NfsStat::EXIST)
    );
    assert_eq!(
        do_open(&mut ctx, root, &open_args(3, 0, b"o1", None, b"nope")).err(),
        Some(NfsStat::NOENT)
    );
    assert_eq!(
        do_open(&mut ctx, root, &open_args(0, 0, b"o1", None, b"f")).err(),
        Some(NfsStat::INVAL)
    );

    // LOCK a range with a new lock-owner through the open, using the current stateid.
    ctx.current_fh = Some(file);
    ctx.current_stateid = Some(s2);
    let mut w = XdrWriter::new();
    w.u32(2);
    w.bool(false);
    w.u64(0);
    w.u64(100);
    w.bool(true);
    w.u32(0);
    Stateid::CURRENT.encode(&mut w);
    w.u32(0);
    w.u64(0);
    w.opaque(b"lo");
    let (s, body) = call(&mut ctx, lock::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let lsid = Stateid::decode(&mut XdrReader::new(&body)).unwrap();
    assert_eq!(lsid.seqid, 1);
    // LOCKT by another owner: DENIED with the holder.
    let mut w = XdrWriter::new();
    w.u32(1);
    w.u64(50);
    w.u64(1);
    w.u64(0);
    w.opaque(b"other");
    let (s, body) = call(&mut ctx, lockt::run, &w.buf);
    assert_eq!(s, NfsStat::DENIED);
    let mut r = XdrReader::new(&body);
    assert_eq!((r.u64().unwrap(), r.u64().unwrap()), (0, 100));
    assert_eq!(r.u32().unwrap(), 2);
    r.u64().unwrap();
    assert_eq!(r.opaque(64).unwrap(), b"lo");
    // CLOSE is refused while the lock is held; LOCKU, then CLOSE.
    let mut w = XdrWriter::new();
    w.u32(0);
    s1.encode(&mut w);
    let close_old = w.buf;
    assert_eq!(
        call(&mut ctx, close::run, &close_old).0,
        NfsStat::OLD_STATEID
    );
    let mut w = XdrWriter::new();
    w.u32(0);
    Stateid { seqid: 0, ..s2 }.encode(&mut w);
    let close_now = w.buf;
    assert_eq!(
        call(&mut ctx, close::run, &close_now).0,
        NfsStat::LOCKS_HELD
    );
    let mut w = XdrWriter::new();
    w.u32(2);
    w.u32(0);
    lsid.encode(&mut w);
    w.u64(0);
    w.u64(u64::MAX);
    let (s, body) = call(&mut ctx, locku::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    assert_eq!(
        Stateid::decode(&mut XdrReader::new(&body)).unwrap().seqid,
        2
    );
    // TEST_STATEID of the open, the lock and a made-up one.
    let mut w = XdrWriter::new();
    w.vec(&[s2, lsid, Stateid::BYPASS]);
    let (s, body) = call(&mut ctx, test_stateid::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert_eq!(r.u32().unwrap(), 3);
    assert_eq!(r.u32().unwrap(), NfsStat::OK.0);
    assert_eq!(r.u32().unwrap(), NfsStat::OLD_STATEID.0);
    assert_eq!(r.u32().unwrap(), NfsStat::BAD_STATEID.0);
    // OPEN_DOWNGRADE of the other owner's open, DELEGRETURN, FREE_STATEID, CLOSE.
    let downgrade = |deny: u32| {
        let mut w = XdrWriter::new();
        s3.encode(&mut w);
        w.u32(0);
        w.u32(1);
        w.u32(deny);
        w.buf
    };
    assert_eq!(
        call(&mut ctx, open_downgrade::run, &downgrade(1)).0,
        NfsStat::INVAL
    );
    let (s, body) = call(&mut ctx, open_downgrade::run, &downgrade(0));
    assert_eq!(s, NfsStat::OK);
    assert_eq!(
        Stateid::decode(&mut XdrReader::new(&body)).unwrap().seqid,
        2
    );
    let mut w = XdrWriter::new();
    s3.encode(&mut w);
    assert_eq!(
        call(&mut ctx, delegreturn::run, &w.buf).0,
        NfsStat::BAD_STATEID
    );
    let mut w = XdrWriter::new();
    Stateid { seqid: 0, ..lsid }.encode(&mut w);
    assert_eq!(call(&mut ctx, free_stateid::run, &w.buf).0, NfsStat::OK);
    let (s, body) = call(&mut ctx, close::run, &close_now);
    assert_eq!(s, NfsStat::OK);
    assert_eq!(
        Stateid::decode(&mut XdrReader::new(&body)).unwrap(),
        Stateid::INVALID
    );
    // Directories are not opened.
    ctx.current_fh = Some(root);
    let mut w = XdrWriter::new();
    w.u32(0);
    w.u32(1);
    w.u32(0);
    w.u64(0);
    w.opaque(b"o1");
    w.u32(0);
    w.u32(4); // CLAIM_FH
    assert_eq!(call(&mut ctx, open::run, &w.buf).0, NfsStat::ISDIR);
}

#[test]
fn remove_of_a_delegated_file_waits_for_its_return() {
    let fx = Fx::new(NfsOptions::default());
    let mut a = fx.ctx(1);
    let (ca, _) = mount(&mut a, b"deleg-a");
    let mut b = fx.ctx(1);
    mount(&mut b, b"deleg-b");
    let (f, _) = fx
        .srv
        .store
        .create(
            ROOT_INO,
            b"d",
            crate::store::NewNode::Regular,
            &Default::default(),
            (0, 0),
        )
        .unwrap();
    let d = fx.srv.state.grant_deleg(ca, f.ino, false).unwrap();
    let fh = Fh {
        ino: f.ino,
        generation: f.generation,
    };
    let mut w = XdrWriter::new();
    w.opaque(b"d");
    // Another client's REMOVE waits (the recall could not be sent: no backchannel here).
    for _ in 0..2 {
        b.current_fh = Some(Fh {
            ino: ROOT_INO,
            generation: fx.srv.store.getattr(ROOT_INO).unwrap().generation,
        });
        assert_eq!(
            call(&mut b, crate::nfs4::ops::remove::run, &w.buf).0,
            NfsStat::DELAY
        );
    }
    // The holder's own changes do not.
    assert!(crate::nfs4::delegs::break_for_change(
        &a.srv.delegs_env(),
        crate::nfs4::helpers::caller::clientid(&a).ok(),
        &f
    )
    .is_ok());
    a.current_fh = Some(fh);
    let mut r = XdrWriter::new();
    d.encode(&mut r);
    assert_eq!(call(&mut a, delegreturn::run, &r.buf).0, NfsStat::OK);
    assert_eq!(
        call(&mut b, crate::nfs4::ops::remove::run, &w.buf).0,
        NfsStat::OK
    );
}
