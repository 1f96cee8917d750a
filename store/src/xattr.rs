//! Extended attributes (RFC 8276): per-inode name → value pairs, changed through one logged
//! `Opaque` item each (`OPAQUE_XATTR`, see inode.rs) together with the inode core carrying the
//! new ctime and change attribute, and written back inside the inode object (format.rs).

use metalog::Item;

use super::inode::{xattr_key, OPAQUE_XATTR};
use super::ns::{meta, Tx};
use super::types::{DirChange, Ino, Result, StoreError, Timespec};
use super::Store;

/// Longest xattr name in bytes (as a file name; Linux XATTR_NAME_MAX).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest xattr value in bytes (Linux XATTR_SIZE_MAX); larger is XATTR2BIG.
pub const XATTR_SIZE_MAX: usize = 65536;

/// SETXATTR's `setxattr_option4` (RFC 8276 §8.4.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrSet {
    /// The name must not exist yet (else `Exist`).
    Create,
    /// The name must exist (else `NoXattr`).
    Replace,
    /// Either way.
    Either,
}

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.contains(&0) {
        return Err(StoreError::Inval);
    }
    if name.len() > XATTR_NAME_MAX {
        return Err(StoreError::NameTooLong);
    }
    Ok(())
}

/// Extended attributes (RFC 8276; `xattr.rs`). Changes are durable before return on a sync
/// export and bump the file's change attribute; the `DirChange` is the file's before/after.
impl Store {
    /// `Exist` for `Create` of a set name, `NoXattr` for `Replace` of a missing one,
    /// `XattrTooBig` past `XATTR_SIZE_MAX`.
    pub fn setxattr(
        &self,
        ino: Ino,
        name: &[u8],
        value: &[u8],
        how: XattrSet,
    ) -> Result<DirChange> {
        self.put_xattr(ino, name, Some((value, how)))
    }

    /// `NoXattr` if the name is not set.
    pub fn removexattr(&self, ino: Ino, name: &[u8]) -> Result<DirChange> {
        self.put_xattr(ino, name, None)
    }

    /// `NoXattr` if the name is not set.
    pub fn getxattr(&self, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        check_name(name)?;
        let g = self.rd();
        g.meta(ino.0)?;
        g.blob_get(ino.0, name)?.ok_or(StoreError::NoXattr)
    }

    /// Names in byte order (the order LISTXATTRS cookies index).
    pub fn listxattrs(&self, ino: Ino) -> Result<Vec<Vec<u8>>> {
        let g = self.rd();
        g.meta(ino.0)?;
        g.xattr_names(ino.0)
    }

    /// Set (`Some`) or remove (`None`) one xattr; the change attribute of the file before and
    /// after (RFC 8276 §8.4.2.2 `change_info4`). Durable before return on a sync export.
    pub(super) fn put_xattr(
        &self,
        ino: Ino,
        name: &[u8],
        value: Option<(&[u8], XattrSet)>,
    ) -> Result<DirChange> {
        check_name(name)?;
        if value.is_some_and(|(v, _)| v.len() > XATTR_SIZE_MAX) {
            return Err(StoreError::XattrTooBig);
        }
        let extra = (name.len() + value.map_or(0, |(v, _)| v.len())) as u64;
        let res = self.reserve(extra)?;
        let (change, csn) = {
            let mut g = self.wr();
            g.meta(ino.0)?;
            let exists = g.blob_get(ino.0, name)?.is_some();
            match value {
                Some((_, XattrSet::Create)) if exists => return Err(StoreError::Exist),
                Some((_, XattrSet::Replace)) | None if !exists => return Err(StoreError::NoXattr),
                _ => {}
            }
            let mut m = meta(&g, ino.0)?;
            let before = m.change;
            m.touch_c(Timespec::now());
            let mut tx = Tx::default();
            tx.items.push(Item::Opaque {
                kind: OPAQUE_XATTR,
                key: xattr_key(ino.0, m.gen, name),
                value: value.map(|(v, _)| v.to_vec()),
            });
            tx.core(ino.0, &m);
            let csn = self.commit_locked(&mut g, res, tx.items, tx.objs)?;
            (
                DirChange {
                    before,
                    after: m.change,
                },
                csn,
            )
        };
        self.force_if_sync(csn)?;
        Ok(change)
    }
}

#[cfg(test)]
mod tests {
    use super::XattrSet::*;
    use super::*;
    use crate::crash_tests::{crash_vol, kill};
    use crate::{NewNode, SetAttrs, Store, StoreOptions, ROOT_INO};

    fn file(s: &Store, name: &[u8]) -> Ino {
        let (a, _) = s
            .create(
                ROOT_INO,
                name,
                NewNode::Regular,
                &SetAttrs::default(),
                (0, 0),
            )
            .unwrap();
        a.ino
    }

    #[test]
    fn set_get_list_remove_semantics() {
        let (_d, _p, s) = crate::tests::fresh();
        let f = file(&s, b"f");
        assert_eq!(s.getxattr(f, b"user.a"), Err(StoreError::NoXattr));
        assert_eq!(
            s.setxattr(f, b"user.a", b"1", Replace),
            Err(StoreError::NoXattr)
        );
        let c0 = s.getattr(f).unwrap().change;
        let ch = s.setxattr(f, b"user.a", b"1", Create).unwrap();
        assert_eq!(ch.before, c0);
        assert!(ch.after > ch.before);
        assert_eq!(s.getattr(f).unwrap().change, ch.after);
        assert_eq!(
            s.setxattr(f, b"user.a", b"2", Create),
            Err(StoreError::Exist)
        );
        s.setxattr(f, b"user.a", b"2", Replace).unwrap();
        s.setxattr(f, b"user.b", b"3", Either).unwrap();
        s.setxattr(f, b"user.b", b"4", Either).unwrap();
        assert_eq!(s.getxattr(f, b"user.a").unwrap(), b"2");
        assert_eq!(s.getxattr(f, b"user.b").unwrap(), b"4");
        assert_eq!(
            s.listxattrs(f).unwrap(),
            vec![b"user.a".to_vec(), b"user.b".to_vec()]
        );
        s.removexattr(f, b"user.a").unwrap();
        assert_eq!(s.removexattr(f, b"user.a"), Err(StoreError::NoXattr));
        assert_eq!(s.listxattrs(f).unwrap(), vec![b"user.b".to_vec()]);
        let big = vec![7u8; XATTR_SIZE_MAX + 1];
        assert_eq!(
            s.setxattr(f, b"user.c", &big, Either),
            Err(StoreError::XattrTooBig)
        );
        assert_eq!(s.setxattr(f, b"", b"x", Either), Err(StoreError::Inval));
        assert_eq!(s.getxattr(Ino(999), b"user.a"), Err(StoreError::Stale));
    }

    #[test]
    fn xattrs_survive_crash_write_back_and_remount() {
        let dev = crash_vol(7);
        let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
        let f = file(&s, b"f");
        let g = file(&s, b"g");
        s.setxattr(f, b"user.old", b"wb", Create).unwrap();
        // Part reaches the metadata area, the rest is only in the log at the crash.
        s.write_back().unwrap();
        s.setxattr(f, b"user.new", &[9u8; 5000], Create).unwrap();
        s.setxattr(g, b"user.gone", b"x", Create).unwrap();
        s.removexattr(g, b"user.gone").unwrap();
        let dev = kill(&dev);
        drop(s);
        let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
        assert_eq!(s.getxattr(f, b"user.old").unwrap(), b"wb");
        assert_eq!(s.getxattr(f, b"user.new").unwrap(), vec![9u8; 5000]);
        assert_eq!(s.listxattrs(g).unwrap(), Vec::<Vec<u8>>::new());
        // A clean unmount writes them back into the inode objects.
        s.unmount().unwrap();
        drop(s);
        let s = Store::open_dev(dev.clone(), StoreOptions::default()).unwrap();
        assert_eq!(s.mount_stats().items_replayed, 0);
        assert_eq!(s.listxattrs(f).unwrap().len(), 2);
        assert_eq!(s.getxattr(f, b"user.new").unwrap(), vec![9u8; 5000]);
        // A freed and reused inode slot starts without the old xattrs.
        s.setxattr(g, b"user.z", b"z", Create).unwrap();
        s.remove(ROOT_INO, b"g").unwrap();
        let h = file(&s, b"h");
        assert_eq!(s.listxattrs(h).unwrap(), Vec::<Vec<u8>>::new());
    }
}
