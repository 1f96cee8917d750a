//! A split volume served (docs/store.md "Split volume"): the layouts' storage offsets are
//! on the data member, GETDEVICEINFO's signature is its label's, and the metadata never
//! lands on it — checked from the two member files.

use std::sync::Arc;

use metalog::{BlockDev, FileDev};

use super::*;
use crate::nfs4::ops::read;
use crate::store::{NewNode, SplitDev};

const NODE_MAGIC: &[u8; 4] = b"PNBT";

/// Every block of a member file that starts with the B+tree node magic.
fn node_blocks(dev: &FileDev) -> Vec<u64> {
    let mut buf = vec![0u8; B as usize];
    (0..dev.size() / B)
        .filter(|&b| {
            dev.read_at(&mut buf, b * B).unwrap();
            &buf[..4] == NODE_MAGIC
        })
        .collect()
}

#[test]
fn layouts_of_a_split_volume_are_on_its_data_member() {
    let dir = tempfile::tempdir().unwrap();
    let (mp, dp) = (dir.path().join("meta.img"), dir.path().join("data.img"));
    let m = Arc::new(FileDev::create(&mp, 16 << 20).unwrap());
    let d = Arc::new(FileDev::create(&dp, 32 << 20).unwrap());
    Store::mkfs_split(m.clone(), d.clone(), false).unwrap();
    let dev = Arc::new(SplitDev::open(m.clone(), d.clone()).unwrap());
    let store = Arc::new(Store::open_dev(dev, StoreOptions::default()).unwrap());
    let srv = super::super::fixture::server(store, NfsOptions::default(), 1);
    let c = conn(1, None);
    let mut x = ctx(&srv, &c);
    let (fh, sid) = open_f(&mut x);
    let geo = srv.store.superblock().geometry;
    assert!(geo.is_split());

    // LAYOUTGET: the extents lie on the data member past its label; the client writes the
    // data member file there.
    let g = get(&mut x, IoMode::RW.0, 0, 3 * B, sid).unwrap();
    let mut want = Vec::new();
    for (i, e) in g.extents.iter().enumerate() {
        assert!(e.storage_offset >= geo.data_base * B, "{e:?}");
        assert!(
            e.storage_offset + e.length <= geo.data_member_blocks * B,
            "{e:?}"
        );
        let bytes = vec![0xa0 + i as u8; e.length as usize];
        d.write_at(&bytes, e.storage_offset).unwrap();
        want.extend(bytes);
    }
    want.truncate(3 * B as usize);
    assert_eq!(commit(&mut x, &g, Some(3 * B - 1)).unwrap(), Some(3 * B));
    // NFS READ reads them back through the store's mapping.
    x.current_fh = Some(fh);
    let mut w = XdrWriter::new();
    Stateid::BYPASS.encode(&mut w);
    w.u64(0);
    w.u32(4 * B as u32);
    let (s, body) = call(&mut x, read::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert!(r.bool().unwrap(), "eof");
    assert!(
        r.opaque(1 << 20).unwrap() == &want[..],
        "READ gave other bytes"
    );
    // A commit naming a label block of the data member is no file's block.
    let mut bad = g.extents[0];
    bad.state = ExtentState::READ_WRITE_DATA;
    bad.storage_offset = B;
    let args = commit_args(g.offset, B, g.stateid, None, &[bad]);
    assert_eq!(call(&mut x, layoutcommit::run, &args).0, NfsStat::BADLAYOUT);

    // GETDEVICEINFO: the signature is the data member's label bytes, which the metadata
    // member does not hold.
    let uuid = srv.store.volume_uuid();
    let mut w = XdrWriter::new();
    w.opaque_fixed(&uuid);
    w.u32(BLOCK);
    w.u32(4096);
    Bitmap::default().encode(&mut w);
    let (s, body) = call(&mut x, getdeviceinfo::run, &w.buf);
    assert_eq!(s, NfsStat::OK);
    let mut r = XdrReader::new(&body);
    assert_eq!(r.u32().unwrap(), BLOCK);
    let label = {
        let mut b = vec![0u8; 512];
        d.read_at(&mut b, 0).unwrap();
        b
    };
    let sig = &label[8..28];
    assert_eq!(&sig[..16], &uuid);
    assert_eq!(
        r.opaque(4096).unwrap(),
        &layout::block::simple_deviceaddr(8, sig)[..]
    );
    let mut sb = vec![0u8; 512];
    m.read_at(&mut sb, 0).unwrap();
    assert_ne!(&sb[8..28], sig);

    // Enough files for a tree of several nodes, written back: every node is in the
    // metadata member's node area, none on the data member, and no file data on the
    // metadata member.
    for i in 0..400 {
        let name = format!("file-with-a-longish-name-{i:04}");
        srv.store
            .create(
                ROOT_INO,
                name.as_bytes(),
                NewNode::Regular,
                &SetAttrs::default(),
                (0, 0),
            )
            .unwrap();
    }
    srv.store.write_back().unwrap();
    srv.store.unmount().unwrap();
    let on_meta = node_blocks(&m);
    assert!(on_meta.len() > 1, "{on_meta:?}");
    let (lo, hi) = geo.node_area();
    assert!(on_meta.iter().all(|b| (lo..hi).contains(b)), "{on_meta:?}");
    assert_eq!(node_blocks(&d), Vec::<u64>::new());
    let image = std::fs::read(&mp).unwrap();
    assert!(!image.windows(64).any(|w| w.iter().all(|&b| b == 0xa0)));
}
