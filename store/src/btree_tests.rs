use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

/// Nodes in memory; counts what a merge wrote and replaced.
#[derive(Default)]
struct Mem {
    nodes: HashMap<u64, Arc<Page>>,
    next: u64,
    written: usize,
    replaced: Vec<u64>,
}

impl NodeRead for Mem {
    fn node(&self, block: u64, level: u8) -> Result<Arc<Page>, StoreError> {
        let p = self.nodes.get(&block).ok_or(StoreError::Stale)?;
        // Round-trip through parse: what a device read would check.
        Page::parse(p.bytes().to_vec(), block, Some(level)).map(Arc::new)
    }
}
impl NodeWrite for Mem {
    fn alloc(&mut self) -> Result<u64, StoreError> {
        self.next += 1;
        Ok(self.next)
    }
    fn write(&mut self, block: u64, page: Page) -> Result<(), StoreError> {
        self.written += 1;
        self.nodes.insert(block, Arc::new(page));
        Ok(())
    }
    fn replaced(&mut self, block: u64) {
        self.replaced.push(block);
    }
}

fn scan(m: &Mem, root: Option<Root>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut c = Cursor::seek(m, root, &[]).unwrap();
    let mut out = Vec::new();
    while let Some(e) = c.next(m).unwrap() {
        out.push(e);
    }
    out
}

fn key(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

#[test]
fn grows_shrinks_and_frees_every_replaced_node() {
    let mut m = Mem::default();
    let mut root = None;
    let mut model = BTreeMap::new();
    for round in 0..5u64 {
        let mut ch = Changes::new();
        for i in 0..3000u64 {
            let k = (i * 7919 + round) % 20000;
            ch.insert(key(k), Some(vec![round as u8; 40]));
            model.insert(key(k), vec![round as u8; 40]);
        }
        root = merge(&mut m, root, &ch, 0).unwrap().0;
    }
    assert!(root.unwrap().level >= 1, "{root:?}");
    assert_eq!(
        scan(&m, root),
        model.clone().into_iter().collect::<Vec<_>>()
    );
    // Every live node is reachable exactly once; every replaced one is not reachable.
    let live = all_blocks(&m, root).unwrap();
    let set: std::collections::HashSet<_> = live.iter().copied().collect();
    assert_eq!(set.len(), live.len());
    assert!(m.replaced.iter().all(|b| !set.contains(b)));
    assert_eq!(live.len() + m.replaced.len(), m.written);
    // Fill is reasonable: model bytes / live nodes.
    let bytes: usize = model.iter().map(|(k, v)| entry_cost(k, v)).sum();
    assert!(
        bytes / live.len() > PAGE / 3,
        "{} nodes for {bytes} bytes",
        live.len()
    );
    // Delete everything: the tree empties completely.
    let ch: Changes = model.keys().map(|k| (k.clone(), None)).collect();
    root = merge(&mut m, root, &ch, 0).unwrap().0;
    assert_eq!(root, None);
    assert!(scan(&m, root).is_empty());
}

#[test]
fn get_and_seek_between_keys() {
    let mut m = Mem::default();
    let ch: Changes = (0..2000u64).map(|i| (key(i * 2), Some(key(i)))).collect();
    let root = merge(&mut m, None, &ch, 0).unwrap().0;
    assert_eq!(get(&m, root, &key(10)).unwrap(), Some(key(5)));
    assert_eq!(get(&m, root, &key(11)).unwrap(), None);
    let mut c = Cursor::seek(&m, root, &key(1999)).unwrap();
    assert_eq!(c.next(&m).unwrap().unwrap().0, key(2000));
    let mut c = Cursor::seek(&m, root, &key(5000)).unwrap();
    assert_eq!(c.next(&m).unwrap(), None);
}

/// A node's bytes, pinned: header, slots, entries packed from the end, the CRC32C seeded with
/// the block number over the block with its crc field zero.
#[test]
fn node_bytes_are_pinned() {
    let entries = [(b"a".to_vec(), b"xy".to_vec()), (b"b".to_vec(), Vec::new())];
    let p = Page::build(0, &entries, 7);
    let b = p.bytes();
    assert_eq!(&b[..8], b"PNBT\0\0\x02\0");
    assert_eq!(&b[12..20], &[0, 0, 0, 0, 0xf9, 0x0f, 0xf4, 0x0f]);
    assert!(b[20..PAGE - 12].iter().all(|&x| x == 0));
    assert_eq!(
        &b[PAGE - 12..],
        &[1, 0, 0, 0, b'b', 1, 0, 2, 0, b'a', b'x', b'y']
    );
    let mut zeroed = b.to_vec();
    zeroed[8..12].fill(0);
    let c = crc32c::crc32c_append(crc32c::crc32c(&7u64.to_le_bytes()), &zeroed);
    assert_eq!(&b[8..12], &c.to_le_bytes());
    let q = Page::parse(b.to_vec(), 7, Some(0)).unwrap();
    assert_eq!((q.count(), q.key(1), q.val(0)), (2, &b"b"[..], &b"xy"[..]));
    // An internal node's values are child block numbers, u64.
    let inner = Page::build(1, &[(b"k".to_vec(), child_val(0x0102))], 9);
    assert_eq!(
        &inner.bytes()[PAGE - 13..],
        &[1, 0, 8, 0, b'k', 2, 1, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(inner.child(0), 0x0102);
}

#[test]
fn corrupt_nodes_are_refused() {
    let mut m = Mem::default();
    let ch: Changes = (0..10u64).map(|i| (key(i), Some(vec![1]))).collect();
    let root = merge(&mut m, None, &ch, 0).unwrap().0.unwrap();
    let good = m.nodes[&root.block].bytes().to_vec();
    assert!(Page::parse(good.clone(), root.block, Some(0)).is_ok());
    assert!(
        Page::parse(good.clone(), root.block + 1, Some(0)).is_err(),
        "moved"
    );
    assert!(
        Page::parse(good.clone(), root.block, Some(1)).is_err(),
        "level"
    );
    let mut bad = good.clone();
    bad[PAGE - 3] ^= 1;
    assert!(Page::parse(bad, root.block, Some(0)).is_err(), "bit flip");
}

proptest! {
    /// Random batches of puts and deletes over a small key space: after each merge the
    /// tree equals the model, and replaced + live = written (nothing leaks, nothing is
    /// freed twice).
    #[test]
    fn matches_a_model(batches in proptest::collection::vec(
        proptest::collection::vec((0u64..3000, proptest::option::of(0usize..200)), 1..400), 1..8)) {
        let mut m = Mem::default();
        let mut root = None;
        let mut count = 0i64;
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for b in batches {
            let mut ch = Changes::new();
            for (k, v) in b {
                let v = v.map(|n| vec![(k % 251) as u8; n]);
                match &v {
                    Some(v) => model.insert(key(k), v.clone()),
                    None => model.remove(&key(k)),
                };
                ch.insert(key(k), v);
            }
            let (r, d) = merge(&mut m, root, &ch, 0).unwrap();
            root = r;
            count += d;
            prop_assert_eq!(count, model.len() as i64, "keys counted");
            prop_assert_eq!(scan(&m, root), model.clone().into_iter().collect::<Vec<_>>());
            let live = all_blocks(&m, root).unwrap();
            prop_assert_eq!(live.len() + m.replaced.len(), m.written);
        }
    }
}
