//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use metalog::{
    BlockDev, CrashDev, Csn, FlushSeq, Item, Log, LogError, LogOptions, Transaction, TxObject,
};

pub const UUID: [u8; 16] = *b"pnfsd-test-uuid!";

pub fn kv(key: u64, val: u64) -> Item {
    Item::Opaque {
        kind: 1,
        key: key.to_le_bytes().to_vec(),
        value: Some(val.to_le_bytes().to_vec()),
    }
}

pub fn tx(items: Vec<Item>, objects: &[(u64, bool)]) -> Transaction {
    Transaction {
        items,
        objects: objects
            .iter()
            .map(|&(id, timestamps_only)| TxObject {
                id,
                timestamps_only,
            })
            .collect(),
    }
}

/// Replayed items in order.
pub type Replayed = Vec<(Csn, Item)>;

/// Mount collecting the replayed items.
pub fn mount_collect(
    dev: Arc<dyn BlockDev>,
    off: u64,
    len: u64,
) -> Result<(Arc<Log>, Replayed), LogError> {
    let mut got = Vec::new();
    let fs = Arc::new(FlushSeq::new(dev.clone()));
    let log = Log::mount(
        dev,
        off,
        len,
        UUID,
        fs,
        LogOptions::default(),
        &mut |c, it| {
            got.push((c, it.clone()));
            Ok(())
        },
    )?;
    Ok((log, got))
}

pub fn crash_dev(size: u64, seed: u64, off: u64, len: u64) -> Arc<CrashDev> {
    let d = Arc::new(CrashDev::new(size, seed));
    Log::format(d.clone(), off, len, UUID).unwrap();
    d
}
