//! pnfsd on an external NVMe/TCP namespace (docs/nvme-tcp.md "External
//! volume"): the test runs an `nvme_tcp::Target` over a temp file in-process, formats the
//! namespace with `pnfsd mkfs nvme-tcp://...`, and serves it with `volume = "nvme-tcp://..."`.
//! The client writes its blocks through its own NVMe/TCP initiator, as a pNFS client does;
//! the MDS reads and writes the volume only through pnfsd's initiator.

use std::time::Duration;

use bytes::Bytes;
use client_tests::harness::pattern;
use client_tests::layout_io::{reread_after_restart, BlockLayout};
use client_tests::ops::Op;
use client_tests::pnfs::{extent_state, iomode, layout_type, BlockVolume, GetDeviceInfoArgs};
use client_tests::{Bitmap, ClientError, Compound, NfsStat, PnfsdProcess, ServerOptions, Session};
use nvme_tcp::{Initiator, InitiatorConfig, NamespaceIds, RType};

use client_tests::external::{ExternalTarget as External, NQN, TARGET_UUID};

const BLOCK: u64 = 4096;
const LEN: u64 = 1 << 20;

/// The volume UUID `pnfsd mkfs` wrote on the namespace (superblock bytes 32..48, the block
/// layout's signature).
fn ext_volume_uuid(ext: &External) -> [u8; 16] {
    let b = std::fs::read(&ext.path).unwrap();
    b[32..48].try_into().unwrap()
}

/// Writes `data` (file offset 0) through the layout's extents over NVMe/TCP, then Flush. The
/// layout may reach past `data` (speculative preallocation, docs/pnfs.md): only the bytes of
/// `data` are written.
async fn write_extents(ini: &Initiator, l: &BlockLayout, data: &[u8]) {
    for e in &l.extents {
        assert_eq!(e.state, extent_state::INVALID_DATA);
        let len = e
            .length
            .min((data.len() as u64).saturating_sub(e.file_offset));
        let mut off = 0u64;
        while off < len {
            let n = (len - off).min(256 << 10);
            let src = (e.file_offset + off) as usize;
            let bytes = Bytes::copy_from_slice(&data[src..src + n as usize]);
            ini.write(
                1,
                (e.storage_offset + off) / BLOCK,
                bytes,
                BLOCK as u32,
                false,
            )
            .await
            .unwrap();
            off += n;
        }
    }
    ini.flush(1).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_io_on_an_external_namespace_survives_sigkill() {
    let ext = External::start();
    ext.mkfs();
    let mut srv = ext.serve("");
    assert!(
        srv.log_text().contains("nvme off (external volume)"),
        "the embedded target must be off:\n{}",
        srv.log_text()
    );
    let s = Session::connect(srv.addr()).await.unwrap();
    let opts = s.options.clone();
    let root = s.lookup_path("").await.unwrap();
    let dir = s.mkdir(&root, "d", 0o755).await.unwrap();
    let f = s.create_file(&dir, "f", 0o644).await.unwrap();
    let l = s.layoutget(&f, iomode::RW, 0, LEN).await.unwrap();
    assert!(!l.extents.is_empty());

    // GETDEVICEINFO: the block signature is on the external namespace (byte 32 = the
    // volume UUID mkfs wrote there through pnfsd's initiator).
    let vols = s.block_deviceinfo(l.extents[0].deviceid).await.unwrap();
    let file = std::fs::read(&ext.path).unwrap();
    match &vols[..] {
        [BlockVolume::Simple(sig)] => {
            for (off, bytes) in sig {
                let at = *off as usize;
                assert_eq!(
                    &file[at..at + bytes.len()],
                    &bytes[..],
                    "signature at {off}"
                );
            }
        }
        v => panic!("expected one SIMPLE volume: {v:?}"),
    }

    let ini = ext.client().await;
    let data = pattern(77, LEN as usize);
    write_extents(&ini, &l, &data).await;
    let newsize = s.layoutcommit_all(&f, &l, LEN - 1).await.unwrap();
    assert_eq!(newsize, Some(LEN));
    // READ through the MDS: pnfsd reads the blocks back over its own initiator.
    assert!(s.read_all(&f, 0, LEN as usize).await.unwrap() == data);

    // Crash, then recovery of the log over NVMe/TCP on the same namespace.
    let s = srv.sigkill_and_reconnect(&opts).await.unwrap();
    let l2 = reread_after_restart(&s, "d/f", &data).await;
    let back = ini
        .read(1, l2.extents[0].storage_offset / BLOCK, 4, 4096)
        .await;
    assert_eq!(back.unwrap(), &data[..4 * 4096]);
    // A clean stop after the restart unmounts over NVMe/TCP too.
    assert!(srv.terminate().unwrap().success(), "{}", srv.log_text());
    assert!(srv.log_text().contains("unmounted cleanly"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_target_is_nfs4err_io_not_a_panic_or_hang() {
    let ext = External::start();
    ext.mkfs();
    let mut srv = ext.serve("");
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    s.mkdir(&root, "before", 0o755).await.unwrap();
    ext.target.shutdown();
    // The sync export forces the log before answering: the write fails, the log shuts down.
    let r = tokio::time::timeout(Duration::from_secs(30), s.mkdir(&root, "after", 0o755))
        .await
        .expect("MKDIR hung after the target went away");
    match r {
        Err(ClientError::Nfs {
            status: NfsStat::IO,
            ..
        }) => {}
        r => panic!("expected NFS4ERR_IO, got {r:?}"),
    }
    // Still serving (in-memory state), still failing what needs the log.
    assert!(srv.is_running());
    assert!(s.lookup_path("before").await.is_ok());
    assert!(s.create_file(&root, "g", 0o644).await.is_err());
    // SIGTERM still ends it (the unmount fails: a non-zero exit, not a hang).
    let st = srv.terminate().unwrap();
    assert!(!st.success());
    assert!(!srv.log_text().contains("panicked"), "{}", srv.log_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scsi_layout_names_the_external_namespace_and_holds_its_reservation() {
    let ext = External::start();
    ext.mkfs();
    let srv = ext.serve("layout_types = [\"block\", \"scsi\"]\n");
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "f", 0o644).await.unwrap();
    let l = s.layoutget(&f, iomode::RW, 0, 8192).await.unwrap();
    // The SCSI layout's device id (new at every start: docs/pnfs.md "After a restart").
    let list = s
        .run_ok(Compound::new().putfh(&root).op(Op::GetDeviceList(
            client_tests::pnfs::GetDeviceListArgs {
                layout_type: layout_type::SCSI,
                maxdevices: 4,
                cookie: 0,
                verf: [0; 8],
            },
        )))
        .await
        .unwrap();
    let args = GetDeviceInfoArgs {
        deviceid: list.devicelist().unwrap().deviceids[0],
        layout_type: layout_type::SCSI,
        maxcount: 4096,
        notify: Bitmap::default(),
    };
    let rep = s
        .run_ok(Compound::new().op(Op::GetDeviceInfo(args)))
        .await
        .unwrap();
    let body = &rep.deviceinfo().unwrap().addr_body;
    let vols = client_tests::pnfs::decode_block_deviceaddr(body).unwrap();
    let ids = NamespaceIds::from_volume_uuid(TARGET_UUID);
    let ini = ext.client().await;
    assert_eq!(ini.identify_namespace(1).await.unwrap().nguid, ids.nguid);
    let key = match &vols[..] {
        [BlockVolume::Scsi {
            designator, pr_key, ..
        }] => {
            // The external namespace's NGUID, not one derived from the volume UUID.
            assert_eq!(designator, &ids.nguid.to_vec());
            assert_ne!(designator, &ext_volume_uuid(&ext).to_vec());
            *pr_key
        }
        v => panic!("expected one SCSI volume: {v:?}"),
    };
    // The MDS registered through its initiator and holds EXCLUSIVE_ACCESS_REG_ONLY.
    let (rtype, regs) = ext.target.reservation_state(1).unwrap();
    assert_eq!(rtype, Some(RType::EXCLUSIVE_ACCESS_REG_ONLY));
    assert_eq!(regs.len(), 1);
    let mds = InitiatorConfig::new(NQN, pnfsd::nvme::volume::DEFAULT_HOSTNQN);
    assert_eq!(regs[0].hostid, mds.hostid);
    // So a client writes only once it registered the key GETDEVICEINFO gave it.
    let block = || Bytes::from(vec![9u8; 4096]);
    let off = l.extents[0].storage_offset / BLOCK;
    assert!(ini.write(1, off, block(), 4096, false).await.is_err());
    ini.reservation_register(1, nvme_tcp::RegisterAction::Register, false, 0, key)
        .await
        .unwrap();
    ini.write(1, off, block(), 4096, false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nvme_reexport_serves_the_external_namespace_through_the_embedded_target() {
    let ext = External::start();
    ext.mkfs();
    // Our initiator is no NFS client: an admin host may write the data area (nvme_admin_hosts).
    let srv =
        ext.serve("nvme_reexport = true\nnvme_admin_hosts = [\"nqn.2014-08.org.example:c\"]\n");
    assert!(
        srv.log_text()
            .contains(&format!("nvme {}", srv.nvme_addr())),
        "{}",
        srv.log_text()
    );
    // Block 0 through pnfsd's own target = block 0 of the external namespace's file.
    let ini = Initiator::connect(
        srv.nvme_addr(),
        InitiatorConfig::new("nqn.2026-11.org.pnfsd:volume", "nqn.2014-08.org.example:c"),
    )
    .await
    .unwrap();
    let b0 = ini.read(1, 0, 1, 4096).await.unwrap();
    let file = std::fs::read(&ext.path).unwrap();
    assert_eq!(&b0[..], &file[..4096]);
    // A write through the re-export reaches the external namespace once flushed.
    let at = 200 << 20;
    ini.write(1, at / BLOCK, Bytes::from(vec![0x5e; 4096]), 4096, false)
        .await
        .unwrap();
    ini.flush(1).await.unwrap();
    let file = std::fs::read(&ext.path).unwrap();
    assert!(file[at as usize..at as usize + 4096]
        .iter()
        .all(|&b| b == 0x5e));
}

#[test]
fn serve_refuses_an_unformatted_namespace_with_a_hint() {
    let ext = External::start();
    let r = PnfsdProcess::start_with(ServerOptions {
        config_toml: Some(format!("volume = \"{}\"\n", ext.url())),
        ..Default::default()
    });
    match r {
        Err(e) => assert!(e.to_string().contains("pnfsd mkfs nvme-tcp://"), "{e}"),
        Ok(_) => panic!("pnfsd served an unformatted namespace"),
    }
    // Nothing was written to it.
    assert!(std::fs::read(&ext.path).unwrap()[..8192]
        .iter()
        .all(|&b| b == 0));
}
