//! Return-on-close layouts under a delegation (layouts `on_close`): what the Linux client
//! keeps past its last CLOSE while it holds a delegation of the file (fs/nfs/pnfs.c
//! `pnfs_roc`) the server keeps recorded — so the enforcing target still lets its hosts read
//! those blocks — until DELEGRETURN.

use layout::block::{BlockExtent, ExtentState, IoMode};

use super::*;
use crate::nfs4::ops::{close, layoutget, write};

const LAYOUT4_BLOCK_VOLUME: u32 = 3;
const LEN: u64 = 8192;

/// WRITE of `LEN` bytes at 0 through the server, FILE_SYNC, with the open stateid `sid`.
fn write_through_mds(x: &mut Ctx<'_>, fh: Fh, sid: Stateid) {
    x.current_fh = Some(fh);
    let mut w = XdrWriter::new();
    sid.encode(&mut w);
    w.u64(0);
    w.u32(2);
    w.opaque(&[7; LEN as usize]);
    assert_eq!(call(x, write::run, &w.buf).0, NfsStat::OK);
}

fn close_open(x: &mut Ctx<'_>, fh: Fh, sid: Stateid) {
    x.current_fh = Some(fh);
    let mut w = XdrWriter::new();
    w.u32(0);
    sid.encode(&mut w);
    assert_eq!(call(x, close::run, &w.buf).0, NfsStat::OK);
}

/// LAYOUTGET of `[0, LEN)` of `fh` in `mode` with `sid`: its status and result body.
fn layoutget_call(x: &mut Ctx<'_>, fh: Fh, mode: IoMode, sid: Stateid) -> (NfsStat, Vec<u8>) {
    x.current_fh = Some(fh);
    let mut w = XdrWriter::new();
    w.bool(false);
    w.u32(LAYOUT4_BLOCK_VOLUME);
    w.u32(mode.0);
    w.u64(0);
    w.u64(LEN);
    w.u64(LEN);
    sid.encode(&mut w);
    w.u32(0xffff);
    call(x, layoutget::run, &w.buf)
}

/// LAYOUTGET of `[0, LEN)` in `mode` with `sid`: the extents that name data (their volume
/// bytes), which the target lets the client's hosts reach.
fn layoutget(x: &mut Ctx<'_>, fh: Fh, mode: IoMode, sid: Stateid) -> Vec<(u64, u64)> {
    let (s, body) = layoutget_call(x, fh, mode, sid);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert!(r.bool().unwrap(), "return_on_close");
    Stateid::decode(&mut r).unwrap();
    assert_eq!(r.u32().unwrap(), 1);
    r.u64().unwrap();
    r.u64().unwrap();
    r.u32().unwrap();
    r.u32().unwrap();
    let ext = BlockExtent::decode_list(r.opaque(1 << 20).unwrap()).unwrap();
    let data: Vec<(u64, u64)> = ext
        .iter()
        .filter(|e| e.state != ExtentState::NONE_DATA)
        .map(|e| (e.storage_offset, e.length))
        .collect();
    assert!(!data.is_empty(), "the layout names the file's data");
    data
}

/// Whether the target lets client `cid` read (`write` false) or write all of `data`.
fn allowed(srv: &Server, cid: u64, write: bool, data: &[(u64, u64)]) -> bool {
    data.iter()
        .all(|&(off, len)| srv.layouts.target_allows(cid, write, off, len))
}

/// Client "a" mounted with a working backchannel, and file "f" holding `LEN` bytes written
/// through the server (the write open asks for no delegation), closed again: a's context,
/// clientid and the file's handle.
fn written_file(fx: &Two) -> (Ctx<'_>, u64, Fh) {
    let (mut a, cid, _) = fx.mount_a();
    let (sid, dtype, _) = open_name(&mut a, b"f", 3 | 0x400, true).unwrap();
    assert_eq!(dtype, OPEN_DELEGATE_NONE_EXT);
    let fh = a.current_fh.unwrap();
    write_through_mds(&mut a, fh, sid);
    close_open(&mut a, fh, sid);
    (a, cid, fh)
}

/// The guest suite's failure (docs/delegations.md "Read delegations for the Linux client"):
/// OPEN for read gets a read delegation, LAYOUTGET READ, CLOSE — the layout stays recorded
/// and the target still lets the client read its blocks, as the client (holding the
/// delegation) goes on reading through it; DELEGRETURN takes it, stateid and blocks.
#[test]
fn a_read_delegation_keeps_the_read_layout_past_close_until_delegreturn() {
    let fx = Two::new(read_delegations());
    let (mut a, cid, fh) = written_file(&fx);
    let (sid, _, d) = open_deleg(&mut a, b"f", 1, false, OPEN_DELEGATE_READ);
    let data = layoutget(&mut a, fh, IoMode::READ, sid);
    assert!(allowed(&fx.srv, cid, false, &data));
    close_open(&mut a, fh, sid);
    assert!(!fx.srv.layouts.grants_of(cid, fh.ino).is_empty());
    assert!(
        allowed(&fx.srv, cid, false, &data),
        "blocks refused after CLOSE"
    );
    assert_eq!(fx.srv.state.layouts_of_file(fh.ino).len(), 1);
    assert_eq!(delegreturn(&mut a, fh, &d), NfsStat::OK);
    assert!(fx.srv.layouts.grants_of(cid, fh.ino).is_empty());
    assert!(!allowed(&fx.srv, cid, false, &data));
    assert!(fx.srv.state.layouts_of_file(fh.ino).is_empty());
}

/// Without a delegation the last CLOSE returns everything; under a read delegation it
/// returns the RW layouts (the client writes only under an open) and keeps the READ ones.
#[test]
fn close_returns_rw_layouts_under_a_read_delegation_and_all_without_one() {
    let fx = Two::new(read_delegations());
    let (mut a, cid, fh) = written_file(&fx);
    // No delegation (WANT_NO_DELEG): CLOSE takes the layout.
    let (sid, dtype, _, _) = open_why(&mut a, b"f", 1 | 0x400, false).unwrap();
    assert_eq!(dtype, OPEN_DELEGATE_NONE_EXT);
    let data = layoutget(&mut a, fh, IoMode::READ, sid);
    close_open(&mut a, fh, sid);
    assert!(fx.srv.layouts.grants_of(cid, fh.ino).is_empty());
    assert!(!allowed(&fx.srv, cid, false, &data));
    assert!(fx.srv.state.layouts_of_file(fh.ino).is_empty());
    // A read delegation, then the same owner opens for write too: RW and READ layouts.
    let (sid, _, d) = open_deleg(&mut a, b"f", 1, false, OPEN_DELEGATE_READ);
    let (sid2, _, _) = open_name(&mut a, b"f", 3, false).unwrap();
    assert_eq!(sid2.other, sid.other);
    let ro = layoutget(&mut a, fh, IoMode::READ, sid2);
    let rw = layoutget(&mut a, fh, IoMode::RW, sid2);
    assert!(allowed(&fx.srv, cid, true, &rw));
    close_open(&mut a, fh, sid2);
    let g = fx.srv.layouts.grants_of(cid, fh.ino);
    assert!(!g.has_rw() && !g.is_empty(), "{:?}", g.ranges());
    assert!(
        !allowed(&fx.srv, cid, true, &rw),
        "writes allowed after CLOSE"
    );
    assert!(allowed(&fx.srv, cid, false, &ro));
    assert_eq!(delegreturn(&mut a, fh, &d), NfsStat::OK);
    assert!(fx.srv.layouts.grants_of(cid, fh.ino).is_empty());
    assert!(!allowed(&fx.srv, cid, false, &ro));
}

/// A DELEGRETURN while the client still has the file open keeps the layouts: its last
/// CLOSE returns them.
#[test]
fn delegreturn_under_an_open_keeps_the_layouts_for_the_close() {
    let fx = Two::new(read_delegations());
    let (mut a, cid, fh) = written_file(&fx);
    let (sid, _, d) = open_deleg(&mut a, b"f", 1, false, OPEN_DELEGATE_READ);
    let data = layoutget(&mut a, fh, IoMode::READ, sid);
    assert_eq!(delegreturn(&mut a, fh, &d), NfsStat::OK);
    assert!(allowed(&fx.srv, cid, false, &data));
    close_open(&mut a, fh, sid);
    assert!(!allowed(&fx.srv, cid, false, &data));
    assert!(fx.srv.state.layouts_of_file(fh.ino).is_empty());
}

/// A write delegation keeps every layout of its holder past the last CLOSE (the Linux
/// client keeps writing through them under the delegation), until DELEGRETURN.
#[test]
fn a_write_delegation_keeps_every_layout_past_close_until_delegreturn() {
    let fx = Two::new(write_delegations());
    let (mut a, cid, fh) = written_file(&fx);
    // A plain write open by a lone client.
    let (sid, _, d) = open_deleg(&mut a, b"f", 3, false, 2);
    let data = layoutget(&mut a, fh, IoMode::RW, sid);
    close_open(&mut a, fh, sid);
    assert!(
        allowed(&fx.srv, cid, true, &data),
        "RW blocks refused after CLOSE"
    );
    assert_eq!(fx.srv.state.layouts_of_file(fh.ino).len(), 1);
    assert_eq!(delegreturn(&mut a, fh, &d), NfsStat::OK);
    assert!(!allowed(&fx.srv, cid, true, &data));
    assert!(fx.srv.state.layouts_of_file(fh.ino).is_empty());
}

/// A LAYOUTGET by another client of a file under a write delegation (here one a reclaim
/// in grace gave back while the other client's reclaimed open conflicts, so it comes
/// recalled) answers LAYOUTTRYLATER, with `will_signal_layout_avail` false, while the
/// delegation is out; after DELEGRETURN the layout is granted.
#[test]
fn a_layoutget_against_another_clients_delegation_recalls_it() {
    let fx = Two::new(NfsOptions::default());
    let (mut a, acid, fh) = written_file(&fx);
    let (mut b, _, _) = fx.mount_b();
    let (sb, _, _) = open_name(&mut b, b"f", 1, false).unwrap();
    let (d, recalled) = fx.srv.state.reclaim_deleg(acid, fh.ino, true, false);
    assert!(recalled, "b's open is in the way");
    assert_eq!(
        layoutget_call(&mut b, fh, IoMode::READ, sb),
        (NfsStat::LAYOUTTRYLATER, vec![0; 4])
    );
    assert_eq!(delegreturn(&mut a, fh, &d), NfsStat::OK);
    layoutget(&mut b, fh, IoMode::READ, sb);
}
