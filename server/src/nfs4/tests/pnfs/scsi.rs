//! The SCSI layout (type 5, RFC 8154) through the op handlers, reusing the block-layout
//! fixture of `pnfs_tests`: GETDEVICEINFO names the namespace's NGUID with a per-client key,
//! LAYOUTCOMMIT takes byte ranges, and fencing preempts the client's key.

use super::*;
use crate::nfs4::layouts::check::device_id_for;
use crate::nfs4::layouts::scsi::PrFencer;
use layout::extent_map::{ExtState, Segment};
use layout::scsi::{self, ScsiRange};

const SCSI: u32 = 5;

fn opts() -> NfsOptions {
    NfsOptions {
        layout_types: vec![LayoutType::BLOCK_VOLUME, LayoutType::SCSI],
        ..NfsOptions::default()
    }
}

fn devinfo(x: &mut Ctx<'_>, ty: u32) -> (NfsStat, Vec<u8>) {
    let mut w = XdrWriter::new();
    w.opaque_fixed(&device_id_for(
        &x.srv.store,
        x.srv.boot_verifier,
        LayoutType(ty),
    ));
    w.u32(ty);
    w.u32(4096);
    Bitmap::default().encode(&mut w);
    call(x, getdeviceinfo::run, &w.buf)
}

fn scsi_volume(x: &mut Ctx<'_>) -> scsi::BaseVolume {
    let (s, body) = devinfo(x, SCSI);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert_eq!(r.u32().unwrap(), SCSI);
    let mut v = scsi::decode_deviceaddr(r.opaque(4096).unwrap()).unwrap();
    assert_eq!(Bitmap::decode(&mut r).unwrap(), Bitmap::default());
    r.finish().unwrap();
    assert_eq!(v.len(), 1);
    v.remove(0)
}

#[test]
fn getdeviceinfo_scsi_names_the_nguid_and_a_key_per_client() {
    let fx = fixture(opts());
    let (ca, cb) = (conn(1, None), conn(2, None));
    let mut a = ctx(&fx.srv, &ca);
    let mut b = ctx(&fx.srv, &cb);
    let ida = mount(&mut a, b"a");
    let idb = mount(&mut b, b"b");
    let va = scsi_volume(&mut a);
    let vb = scsi_volume(&mut b);
    // The NGUID the embedded target reports for the volume (Identify Namespace bytes
    // 104..120 and descriptor type 2; checked over the wire in nvme.rs tests): a Linux
    // host's wwid is eui.<NGUID>, the udev link the client opens.
    let ids = nvme_tcp::NamespaceIds::from_volume_uuid(fx.srv.store.volume_uuid());
    assert_eq!(va.designator, ids.nguid.to_vec());
    assert_ne!(va.designator, ids.eui64.to_vec());
    assert_eq!(va.code_set, scsi::code_set::BINARY);
    assert_eq!(va.designator_type, scsi::designator_type::EUI64);
    assert_eq!(va.pr_key, scsi::client_pr_key(ida));
    assert_eq!(vb.pr_key, scsi::client_pr_key(idb));
    assert_ne!(va.pr_key, vb.pr_key);
    assert_eq!(vb.designator, va.designator);
    // The block layout still answers its SIMPLE volume.
    let (s, body) = devinfo(&mut a, BLOCK);
    assert_eq!(s, NfsStat::OK);
    assert_eq!(&body[4..8], &40u32.to_be_bytes());
    // Not offered: refused.
    let fx2 = fixture(NfsOptions::default());
    let mut x = fx2.client();
    mount(&mut x, b"a");
    assert_eq!(devinfo(&mut x, SCSI).0, NfsStat::UNKNOWN_LAYOUTTYPE);
}

/// After a restart (a new boot verifier) SCSI layouts name a new device id, so the Linux
/// client sets the device up again and registers its key with the new target instance; the
/// previous id is unknown (NOENT). The block layout's id stays the volume's (docs/pnfs.md
/// "After a restart").
#[test]
fn scsi_device_id_is_new_at_every_start_and_the_block_id_stays() {
    let fx = fixture(opts());
    let c = conn(1, None);
    let x = ctx(&fx.srv, &c);
    let (block, old) = (
        device_id_for(&x.srv.store, x.srv.boot_verifier, LayoutType::BLOCK_VOLUME),
        device_id_for(&x.srv.store, x.srv.boot_verifier, LayoutType::SCSI),
    );
    assert_eq!(block, fx.srv.store.volume_uuid());
    assert_ne!(old, block);
    let srv =
        crate::nfs4::tests::fixture::server(fx.srv.store.clone(), opts(), fx.srv.boot_verifier ^ 1);
    let mut y = ctx(&srv, &c);
    mount(&mut y, b"a");
    assert_eq!(
        device_id_for(&y.srv.store, y.srv.boot_verifier, LayoutType::BLOCK_VOLUME),
        block
    );
    assert_ne!(
        device_id_for(&y.srv.store, y.srv.boot_verifier, LayoutType::SCSI),
        old
    );
    assert_eq!(devinfo(&mut y, SCSI).0, NfsStat::OK);
    let mut w = XdrWriter::new();
    w.opaque_fixed(&old);
    w.u32(SCSI);
    w.u32(4096);
    Bitmap::default().encode(&mut w);
    assert_eq!(call(&mut y, getdeviceinfo::run, &w.buf).0, NfsStat::NOENT);
}

fn scsi_get(x: &mut Ctx<'_>, mode: u32, len: u64, sid: Stateid) -> (Stateid, Vec<BlockExtent>) {
    let (s, body) = call(
        x,
        layoutget::run,
        &layoutget_args(SCSI, mode, 0, len, len, sid, 0xffff),
    );
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert!(r.bool().unwrap());
    let st = Stateid::decode(&mut r).unwrap();
    assert_eq!(r.u32().unwrap(), 1);
    r.u64().unwrap();
    r.u64().unwrap();
    assert_eq!(r.u32().unwrap(), mode);
    assert_eq!(r.u32().unwrap(), SCSI);
    let ext = BlockExtent::decode_list(r.opaque(1 << 20).unwrap()).unwrap();
    (st, ext)
}

fn scsi_commit(x: &mut Ctx<'_>, sid: Stateid, len: u64, body: Vec<u8>) -> (NfsStat, Vec<u8>) {
    let mut w = XdrWriter::new();
    w.u64(0);
    w.u64(len);
    w.bool(false);
    sid.encode(&mut w);
    w.bool(true);
    w.u64(len - 1);
    w.bool(false);
    w.u32(SCSI);
    w.opaque(&body);
    call(x, layoutcommit::run, &w.buf)
}

#[test]
fn layoutcommit_scsi_ranges_convert_the_files_blocks() {
    let fx = fixture(opts());
    let mut x = fx.client();
    mount(&mut x, b"a");
    let (fh, sid) = create(&mut x, b"f");
    let (lsid, ext) = scsi_get(&mut x, IoMode::RW.0, 3 * B, sid);
    assert!(ext.iter().all(|e| e.state == ExtentState::INVALID_DATA));
    let unwritten = |srv: &Server| {
        srv.store
            .extents(fh.ino, 0, 3)
            .unwrap()
            .iter()
            .filter(|s| {
                matches!(
                    s,
                    Segment::Mapped {
                        state: ExtState::Unwritten,
                        ..
                    }
                )
            })
            .count()
    };
    assert!(unwritten(&fx.srv) > 0);
    // Refusals: misaligned range, a block-layout body, a range outside the RW grant.
    let bad = |offset, length| scsi::encode_update(&[ScsiRange { offset, length }]);
    for body in [
        bad(1, B),
        bad(0, B + 1),
        bad(1 << 30, B),
        BlockExtent::encode_list(&ext),
    ] {
        let (s, _) = scsi_commit(&mut x, lsid, 3 * B, body);
        assert_eq!(s, NfsStat::BADLAYOUT);
    }
    assert!(unwritten(&fx.srv) > 0);
    // The real commit: two ranges covering the three blocks.
    let body = scsi::encode_update(&[
        ScsiRange {
            offset: 0,
            length: B,
        },
        ScsiRange {
            offset: B,
            length: 2 * B,
        },
    ]);
    let (s, reply) = scsi_commit(&mut x, lsid, 3 * B, body);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&reply);
    assert!(r.bool().unwrap());
    assert_eq!(r.u64().unwrap(), 3 * B);
    assert_eq!(unwritten(&fx.srv), 0);
    assert_eq!(fx.srv.store.getattr(fh.ino).unwrap().size, 3 * B);
    // A READ layout now says the blocks hold data.
    let (_, ext) = scsi_get(&mut x, IoMode::READ.0, 3 * B, lsid);
    assert!(ext.iter().all(|e| e.state == ExtentState::READ_DATA));
}

/// Records the keys fencing preempted.
#[derive(Default)]
struct Keys(Mutex<Vec<u64>>);

impl PrFencer for Keys {
    fn preempt_and_abort(&self, key: u64) -> Result<(), crate::nfs4::layouts::scsi::PreemptError> {
        self.0.lock().unwrap().push(key);
        Ok(())
    }
    fn registered_keys(&self) -> Result<Vec<u64>, crate::nfs4::layouts::scsi::PreemptError> {
        Ok(Vec::new())
    }
}

#[test]
fn overdue_recall_preempts_the_scsi_clients_key() {
    let fx = fixture(opts());
    let keys = Arc::new(Keys::default());
    assert!(fx.srv.layouts.scsi.install(keys.clone()));
    let bc_a = Arc::new(Recorder::default());
    let (ca, cb) = (conn(1, Some(bc_a.clone())), conn(2, None));
    let mut a = ctx(&fx.srv, &ca);
    let mut b = ctx(&fx.srv, &cb);
    let ida = mount(&mut a, b"a");
    mount(&mut b, b"b");
    let (_, sa) = create(&mut a, b"f");
    scsi_get(&mut a, IoMode::RW.0, 2 * B, sa);
    let (_, sb) = create(&mut b, b"f");
    let (s, _) = call(
        &mut b,
        layoutget::run,
        &layoutget_args(SCSI, IoMode::READ.0, 0, B, B, sb, 0xffff),
    );
    assert_eq!(s, NfsStat::RECALLCONFLICT);
    recall::tick(&fx.srv.layouts_env(), Instant::now());
    assert!(keys.0.lock().unwrap().is_empty());
    let late = Instant::now() + Duration::from_secs(2 * u64::from(fx.srv.opts.lease_seconds) + 1);
    recall::tick(&fx.srv.layouts_env(), late);
    assert_eq!(*keys.0.lock().unwrap(), vec![scsi::client_pr_key(ida)]);
    assert_eq!(fx.srv.layouts.metrics.snapshot().fences, 1);
}

/// CB_LAYOUTRECALL names the layout type the holder has (RFC 8881 §20.3): 5 for a SCSI
/// layout, 3 for a block one (main sent BLOCK_VOLUME to every holder).
#[test]
fn a_recall_names_the_holders_layout_type() {
    for (ty, want) in [(SCSI, 5u32), (BLOCK, 3)] {
        let fx = fixture(opts());
        let bc_a = Arc::new(Recorder::default());
        let (ca, cb) = (conn(1, Some(bc_a.clone())), conn(2, None));
        let mut a = ctx(&fx.srv, &ca);
        let mut b = ctx(&fx.srv, &cb);
        mount(&mut a, b"a");
        mount(&mut b, b"b");
        let (_, sa) = create(&mut a, b"f");
        let (s, _) = call(
            &mut a,
            layoutget::run,
            &layoutget_args(ty, IoMode::RW.0, 0, B, B, sa, 0xffff),
        );
        assert_eq!(s, NfsStat::OK);
        let (_, sb) = create(&mut b, b"f");
        let (s, _) = call(
            &mut b,
            layoutget::run,
            &layoutget_args(ty, IoMode::READ.0, 0, B, B, sb, 0xffff),
        );
        assert_eq!(s, NfsStat::RECALLCONFLICT);
        callback::send_due(&fx.srv.backchannel(), Instant::now());
        let calls = bc_a.0.lock().unwrap();
        assert_eq!(calls.len(), 1);
        // CB_COMPOUND head (16 bytes), CB_SEQUENCE (40), then CB_LAYOUTRECALL and its type.
        let c = &calls[0];
        assert_eq!(&c[56..60], &5u32.to_be_bytes(), "OP_CB_LAYOUTRECALL");
        assert_eq!(
            &c[60..64],
            &want.to_be_bytes(),
            "layout type of a type {ty} holder"
        );
    }
}

/// The volume of a restarted target, as the SCSI layout sees it: nothing to sweep, and
/// `back` of its one restored host reconnected.
#[derive(Default)]
struct Restored {
    back: std::sync::atomic::AtomicBool,
}

impl PrFencer for Restored {
    fn preempt_and_abort(&self, _key: u64) -> Result<(), crate::nfs4::layouts::scsi::PreemptError> {
        Ok(())
    }
    fn registered_keys(&self) -> Result<Vec<u64>, crate::nfs4::layouts::scsi::PreemptError> {
        Ok(Vec::new())
    }
    fn restored_hosts(&self) -> nvme_tcp::RestoredHosts {
        let back = self.back.load(std::sync::atomic::Ordering::SeqCst);
        nvme_tcp::RestoredHosts {
            reconnected: back as usize,
            awaited: !back as usize,
        }
    }
}

/// After a restart a client that came back gets no SCSI layout (NFS4ERR_DELAY: it waits and
/// asks again) while its NVMe host is still reconnecting: the key registration a new layout
/// leads to would fail and cost it the device for 120 s (docs/pnfs.md "After a restart").
/// Block layouts, and SCSI layouts once the host is back, are answered as usual.
#[test]
fn scsi_layoutget_waits_for_the_restored_hosts_after_a_restart() {
    let fx = fixture(opts());
    let c = conn(1, None);
    let mut x = ctx(&fx.srv, &c);
    mount(&mut x, b"a");
    let srv =
        crate::nfs4::tests::fixture::server(fx.srv.store.clone(), opts(), fx.srv.boot_verifier ^ 1);
    let vol = Arc::new(Restored::default());
    assert!(srv.layouts.scsi.install(vol.clone()));
    crate::nfs4::layouts::scsi_restart::begin(&srv.layouts, &srv.state);
    let mut y = ctx(&srv, &c);
    mount(&mut y, b"a");
    assert!(!srv.state.in_grace(), "the only previous client is back");
    let (_, sid) = create(&mut y, b"f");
    let args = |ty| layoutget_args(ty, IoMode::RW.0, 0, 1 << 20, 1 << 20, sid, 0xffff);
    assert_eq!(call(&mut y, layoutget::run, &args(SCSI)).0, NfsStat::DELAY);
    assert_eq!(call(&mut y, layoutget::run, &args(BLOCK)).0, NfsStat::OK);
    vol.back.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(call(&mut y, layoutget::run, &args(SCSI)).0, NfsStat::OK);
}
