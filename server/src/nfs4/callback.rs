//! Layout recalls over the backchannel (RFC 8881 §12.5.5, §20.3) and fencing (design.md §5).
//!
//! ```text
//! CB_COMPOUND4args (procedure 1 of the client's callback program):
//!   tag opaque<> | minorversion u32 (the session's) | callback_ident u32 = 0 | op count u32 = 2
//!   CB_SEQUENCE (11):     sessionid[16] | sequenceid u32 | slotid u32 | highest_slotid u32
//!                         | cachethis bool | referring_call_lists count u32 = 0
//!   CB_LAYOUTRECALL (5):  layout_type u32 | iomode u32 (ANY) | changed bool
//!                         | recall type u32 = FILE (1) | fh opaque<> | offset u64 = 0
//!                         | length u64 = all ones | stateid4
//!   CB_RECALL (4):        stateid4 | truncate bool = false | fh opaque<>
//! CB_COMPOUND4res: status u32 | tag opaque<> | results …  (only the status is read)
//! ```
//! Delegation recalls (RFC 8881 §20.2) use the same CB_SEQUENCE header (`recall_delegs`);
//! their conflict and revocation rules are in nfs4/state/delegs.rs.
//! Who gets recalled: every other client whose grants conflict with a LAYOUTGET (which
//! answers RECALLCONFLICT meanwhile), and every holder of a file that SETATTR truncates or
//! that REMOVE/RENAME unlinks for the last time. A recall stays pending until the client's
//! grants of the file are gone (LAYOUTRETURN, return-on-close); after two lease periods the
//! server fences the client — runs `fence_command <client address> <device id hex>` — and
//! revokes its layout stateid (`tick_at`). Layouts dropped without a return (lease expiry,
//! client gone) fence their client the same way first (`drop_layouts`); a failed fence keeps
//! the blocks of those files (docs/pnfs.md "Fencing").

use std::time::{Duration, Instant};

use layout::block::{IoMode, LayoutType};

use crate::nfs4::pnfs::add;
use crate::nfs4::state::CbSlot;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Fh, Stateid};
use crate::server::Server;
use crate::store::Ino;
use crate::xdr::{Xdr, XdrError, XdrReader, XdrWriter};

/// `CB_COMPOUND` is procedure 1 of the callback program (RFC 8881 §20.1).
pub const CB_COMPOUND: u32 = 1;
const OP_CB_RECALL: u32 = 4;
const OP_CB_LAYOUTRECALL: u32 = 5;
const OP_CB_SEQUENCE: u32 = 11;
const LAYOUTRECALL4_FILE: u32 = 1;

/// The CB_COMPOUND header and its CB_SEQUENCE, for one more operation.
fn cb_sequence(slot: &CbSlot) -> XdrWriter {
    let mut w = XdrWriter::with_capacity(160);
    w.opaque(b"");
    w.u32(slot.minor);
    w.u32(0);
    w.u32(2);
    w.u32(OP_CB_SEQUENCE);
    w.opaque_fixed(&slot.sessionid);
    w.u32(slot.seqid);
    w.u32(slot.slot);
    w.u32(slot.slot);
    w.bool(false);
    w.u32(0);
    w
}

/// Encodes CB_COMPOUND { CB_SEQUENCE, CB_RECALL(stateid, no truncate, fh) }.
pub fn encode_recall(slot: &CbSlot, fh: &Fh, stateid: &Stateid) -> XdrWriter {
    let mut w = cb_sequence(slot);
    w.u32(OP_CB_RECALL);
    stateid.encode(&mut w);
    w.bool(false);
    w.opaque(&fh.to_bytes());
    w
}

/// Sends CB_RECALL for the delegations whose recall was just decided. Blocking: one
/// backchannel round trip each; the holder answers at once and DELEGRETURNs later. A recall
/// that cannot be sent is not retried: the delegation is revoked a lease after the
/// conflict was found either way (state/delegs.rs).
pub fn recall_delegs(srv: &Server, fh: Fh, recalls: &[crate::nfs4::state::Recall]) {
    for r in recalls.iter().filter(|r| r.send) {
        let slot = match srv.state.cb_begin(r.client) {
            Ok(s) => s,
            Err(e) => {
                tracing::info!(client = r.client, status = e.name(), "CB_RECALL not sent");
                continue;
            }
        };
        let args = encode_recall(&slot, &fh, &r.stateid);
        // With the credential the client gave for callbacks (RFC 8881 §18.36.3).
        let res = slot
            .channel
            .call_as(slot.program, CB_COMPOUND, &slot.cred, args);
        srv.state.cb_done(&slot, res.is_ok());
        match res.as_deref().map(decode_status) {
            Ok(Ok(st)) => tracing::debug!(client = r.client, status = st.name(), "recalled"),
            Ok(Err(_)) | Err(_) => tracing::info!(client = r.client, "CB_RECALL failed"),
        }
    }
}

/// Encodes CB_COMPOUND { CB_SEQUENCE, CB_LAYOUTRECALL(FILE, whole file) }.
pub fn encode_layoutrecall(
    slot: &CbSlot,
    fh: &Fh,
    stateid: &Stateid,
    ltype: LayoutType,
) -> XdrWriter {
    let mut w = cb_sequence(slot);
    w.u32(OP_CB_LAYOUTRECALL);
    w.u32(ltype.0);
    w.u32(IoMode::ANY.0);
    w.bool(true);
    w.u32(LAYOUTRECALL4_FILE);
    w.opaque(&fh.to_bytes());
    w.u64(0);
    w.u64(u64::MAX);
    stateid.encode(&mut w);
    w
}

/// The status of a CB_COMPOUND4res.
pub fn decode_status(reply: &[u8]) -> Result<NfsStat, XdrError> {
    Ok(NfsStat(XdrReader::new(reply).u32()?))
}

/// Recalls the layouts `clients` hold of `ino` (those not already being recalled). Blocking:
/// one backchannel round trip per client; the client answers at once and returns the
/// layout with LAYOUTRETURN later.
pub fn recall_file(srv: &Server, fh: Fh, clients: &[u64]) {
    for &c in clients {
        if srv.pnfs.start_recall(c, fh.ino, Instant::now()) {
            send_recall(srv, c, fh);
        }
    }
}

/// Sends one CB_LAYOUTRECALL. When the backchannel is down or busy (CB_PATH_DOWN, DELAY) the
/// recall stays pending and `tick_at` tries again; the client is fenced two leases after
/// the first attempt unless it returns the layout.
fn send_recall(srv: &Server, c: u64, fh: Fh) {
    let ino = fh.ino;
    let sid = srv
        .state
        .layouts_of_file(ino)
        .into_iter()
        .find(|(cl, _)| *cl == c)
        .map(|(_, s)| s);
    let Some(sid) = sid else {
        // No layout stateid left (the state dropped it, the tick has not seen it yet): only
        // grants, which go as dropped ones do — after a fence.
        drop_layouts(srv, &[(c, ino)], Instant::now());
        return;
    };
    let slot = match srv.state.cb_begin(c) {
        Ok(s) => s,
        Err(e) => {
            tracing::info!(client = c, status = e.name(), "layout recall not sent yet");
            srv.pnfs.retry_recall(c, fh);
            return;
        }
    };
    let args = encode_layoutrecall(&slot, &fh, &sid, LayoutType::BLOCK_VOLUME);
    let res = slot.channel.call(slot.program, CB_COMPOUND, args);
    srv.state.cb_done(&slot, res.is_ok());
    add(&srv.pnfs.metrics.recalls_sent, 1);
    match res.as_deref().map(decode_status) {
        Ok(Ok(NfsStat::NOMATCHING_LAYOUT)) => {
            // RFC 8881 §20.3.3: the client has nothing; its layouts are gone.
            let _ = srv.state.layout_return(c, ino, &sid, true);
            srv.pnfs.release_file(c, ino);
        }
        Ok(Ok(st)) => tracing::debug!(client = c, status = st.name(), "layout recalled"),
        Ok(Err(_)) | Err(_) => tracing::info!(client = c, "layout recall failed"),
    }
}

/// Recalls every layout of the file held by any client (truncate, last unlink).
pub fn recall_all(srv: &Server, fh: Fh) {
    let holders = srv.pnfs.holders(fh.ino);
    if !holders.is_empty() {
        recall_file(srv, fh, &holders);
    }
}

/// The periodic part: fences the clients whose layouts the state dropped (expiry, courtesy
/// purge, client gone) and forgets those layouts, ends recalls whose layouts came back,
/// fences clients that kept a recalled layout for two lease periods, retries failed fences,
/// and trims what no layout holds past EOF any more.
pub fn tick_at(srv: &Server, now: Instant) {
    let lease = Duration::from_secs(u64::from(srv.state.lease_seconds()));
    drop_layouts(srv, &srv.state.take_dropped_layouts(), now);
    for (client, ino) in srv.pnfs.overdue_recalls(now, 2 * lease) {
        fence(srv, client, ino, now);
    }
    for (client, fh) in srv.pnfs.take_unsent_recalls() {
        send_recall(srv, client, fh);
    }
    for client in srv.pnfs.fences_to_retry(now, lease) {
        if fence_client(srv, client, "retry of a failed fence").is_err() {
            srv.pnfs.keep_unfenced(client, [], now);
        }
    }
    // The previous instance's SCSI clients are cut off before anything they held is freed.
    crate::nfs4::scsi_restart::run_if_due(srv);
    // Layouts dropped above (expiry, fencing) and the after-grace sweep of a restart.
    crate::nfs4::pnfs::trim_released(srv);
}

/// Layouts that went without a LAYOUTRETURN (lease expiry, courtesy purge, DESTROY_CLIENTID,
/// a replaced client record, a recall that found no layout stateid): the client may be
/// partitioned, not dead, and still write through them, so it is fenced — once — before
/// its grants go and the blocks they named can be trimmed or truncated away (RFC 8881
/// §12.5.5, §12.7.3; RFC 5663 §2.3.6; RFC 8154 §2.4.5). If the fence fails, those files
/// keep their blocks (`Pnfs::kept`) until a retry succeeds.
pub fn drop_layouts(srv: &Server, dropped: &[(u64, Ino)], now: Instant) {
    for (client, inos) in srv.pnfs.to_fence(dropped) {
        if fence_client(srv, client, "layouts dropped without a return").is_err() {
            srv.pnfs.keep_unfenced(client, inos, now);
        }
    }
    srv.pnfs.forget(dropped);
}

/// Fences `client` from the volume and revokes its layouts of `ino` (design.md §5).
fn fence(srv: &Server, client: u64, ino: Ino, now: Instant) {
    let ok = srv.pnfs.is_fenced(client)
        || fence_client(srv, client, "layout not returned after two leases").is_ok();
    if !ok {
        srv.pnfs.keep_unfenced(client, [ino], now);
    }
    for (c, sid) in srv.state.layouts_of_file(ino) {
        if c == client {
            srv.state.revoke(&sid);
        }
    }
    srv.pnfs.release_file(client, ino);
}

/// Why a fence failed (logged; the client may still reach the volume).
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("fence command: {0}")]
    Command(String),
    #[error("SCSI preempt: {0}")]
    Scsi(#[from] crate::nfs4::scsi::PreemptError),
}

/// Cuts `client` off the volume: runs `fence_command <client address> <device id hex>` when
/// one is configured, and preempts its SCSI reservation key when the SCSI hook is installed
/// (RFC 8154 §2.4.2). Counted in `fences` and remembered (`Pnfs::is_fenced`) when it
/// succeeded. With neither configured nothing can be done: the server trusts its clients.
pub fn fence_client(srv: &Server, client: u64, why: &str) -> Result<(), FenceError> {
    let addr = srv.pnfs.peer_of(client);
    tracing::warn!(client, ?addr, why, "fencing");
    let r = run_fence_command(srv, client).and_then(|()| {
        crate::nfs4::scsi::fence(srv, client)?;
        Ok(())
    });
    match &r {
        Ok(()) => {
            srv.pnfs.mark_fenced(client);
            add(&srv.pnfs.metrics.fences, 1);
        }
        Err(e) => tracing::error!(
            client,
            %e,
            "fencing failed: the blocks of its layouts are kept, not trimmed nor freed"
        ),
    }
    r
}

fn run_fence_command(srv: &Server, client: u64) -> Result<(), FenceError> {
    let Some(cmd) = &srv.opts.fence_command else {
        return Ok(());
    };
    let Some(prog) = cmd.split_whitespace().next() else {
        return Ok(());
    };
    let addr = srv
        .pnfs
        .peer_of(client)
        .ok_or_else(|| FenceError::Command("the client's address is unknown".into()))?;
    let dev: String = crate::nfs4::pnfs::device_id(&srv.store)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let out = std::process::Command::new(prog)
        .args(cmd.split_whitespace().skip(1))
        .arg(addr.ip().to_string())
        .arg(&dev)
        .status();
    match out {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(FenceError::Command(s.to_string())),
        Err(e) => Err(FenceError::Command(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Debug)]
    struct Nobody;
    impl crate::rpc::Backchannel for Nobody {
        fn call(&self, _: u32, _: u32, _: XdrWriter) -> std::io::Result<Vec<u8>> {
            Err(std::io::ErrorKind::NotConnected.into())
        }
    }

    /// The CB_COMPOUND head every callback starts with: empty tag, minor version 1, two ops,
    /// then CB_SEQUENCE on slot 0 with no referring calls.
    fn expect_cb_sequence(r: &mut XdrReader<'_>, sessionid: [u8; 16], seqid: u32) {
        assert_eq!(r.opaque(16).unwrap(), b"");
        assert_eq!(
            (r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()),
            (1, 0, 2)
        );
        assert_eq!(r.u32().unwrap(), OP_CB_SEQUENCE);
        assert_eq!(r.array::<16>().unwrap(), sessionid);
        assert_eq!(
            (r.u32().unwrap(), r.u32().unwrap(), r.u32().unwrap()),
            (seqid, 0, 0)
        );
        assert!(!r.bool().unwrap());
        assert_eq!(r.u32().unwrap(), 0);
    }

    #[test]
    fn layoutrecall_encoding() {
        let slot = CbSlot {
            clientid: 1,
            sessionid: [3; 16],
            program: 0x4000_0000,
            slot: 0,
            seqid: 7,
            channel: Arc::new(Nobody),
            cred: Default::default(),
            minor: 1,
        };
        let fh = Fh {
            ino: Ino(42),
            generation: 9,
        };
        let sid = Stateid {
            seqid: 2,
            other: [1; 12],
        };
        let b = encode_layoutrecall(&slot, &fh, &sid, LayoutType::BLOCK_VOLUME).into_inner();
        let mut r = XdrReader::new(&b);
        expect_cb_sequence(&mut r, [3; 16], 7);
        assert_eq!(r.u32().unwrap(), OP_CB_LAYOUTRECALL);
        assert_eq!((r.u32().unwrap(), r.u32().unwrap()), (3, IoMode::ANY.0));
        assert!(r.bool().unwrap());
        assert_eq!(r.u32().unwrap(), LAYOUTRECALL4_FILE);
        assert_eq!(r.opaque(128).unwrap(), &fh.to_bytes());
        assert_eq!((r.u64().unwrap(), r.u64().unwrap()), (0, u64::MAX));
        assert_eq!(Stateid::decode(&mut r).unwrap(), sid);
        assert!(r.finish().is_ok());
        assert_eq!(decode_status(&[0, 0, 0x27, 0x4c]).unwrap(), NfsStat(10060));
    }

    #[test]
    fn recall_encoding() {
        let slot = CbSlot {
            clientid: 1,
            sessionid: [5; 16],
            program: 0x4000_0000,
            slot: 0,
            seqid: 3,
            channel: Arc::new(Nobody),
            cred: Default::default(),
            minor: 1,
        };
        let fh = Fh {
            ino: Ino(7),
            generation: 1,
        };
        let sid = Stateid {
            seqid: 1,
            other: [2; 12],
        };
        let b = encode_recall(&slot, &fh, &sid).into_inner();
        let mut r = XdrReader::new(&b);
        expect_cb_sequence(&mut r, [5; 16], 3);
        assert_eq!(r.u32().unwrap(), OP_CB_RECALL);
        assert_eq!(Stateid::decode(&mut r).unwrap(), sid);
        assert!(!r.bool().unwrap());
        assert_eq!(r.opaque(128).unwrap(), &fh.to_bytes());
        assert!(r.finish().is_ok());
    }
}
