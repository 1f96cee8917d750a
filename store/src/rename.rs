//! RENAME (RFC 8881 §18.26): the one namespace operation that touches up to four inodes.

use metalog::Item;

use super::ns::{check_name, dir_of, entry, live_dir_of, meta, next_cookie, Tx, LINK_MAX};
use super::types::{DirChange, FileType, Ino, Result, StoreError, Timespec, Unlinked, ROOT_INO};
use super::Store;

impl Store {
    /// Returns the change info of the source and target directories, and the file a rename
    /// over an existing name unlinked, if any.
    pub fn rename(
        &self,
        sd: Ino,
        sn: &[u8],
        dd: Ino,
        dn: &[u8],
    ) -> Result<(DirChange, DirChange, Option<Unlinked>)> {
        check_name(sn)?;
        check_name(dn)?;
        let now = Timespec::now();
        {
            // Warm the cache outside the state lock (ns.rs `create`).
            let g = self.rd();
            entry(&g, sd, sn)?;
            let _ = g.dir_lookup(dd.0, dn)?;
        }
        let res = self.reserve(2 * (sn.len() + dn.len()) as u64)?;
        let (a, b, un, csn) = {
            let mut g = self.wr();
            let mut sm = dir_of(&g, sd)?;
            let mut dm = live_dir_of(&g, dd)?;
            let (src, _) = entry(&g, sd, sn)?;
            let src_m = meta(&g, src)?;
            let src_is_dir = src_m.ftype == FileType::Directory;
            let existing = g.dir_lookup(dd.0, dn)?.map(|e| e.0);
            // Same name, or another name of the same file: nothing to do (POSIX rename).
            if (sd == dd && sn == dn) || existing == Some(src) {
                let s = DirChange {
                    before: sm.change,
                    after: sm.change,
                };
                let d = DirChange {
                    before: dm.change,
                    after: dm.change,
                };
                return Ok((s, d, None));
            }
            if src_is_dir {
                // Moving a directory into its own subtree would detach it: walk up from dd.
                let mut p = dd.0;
                loop {
                    if p == src {
                        return Err(StoreError::Inval);
                    }
                    if p == ROOT_INO.0 {
                        break;
                    }
                    p = meta(&g, p)?.parent;
                }
                if sd != dd && dm.nlink >= LINK_MAX {
                    return Err(StoreError::TooManyLinks);
                }
            }
            let mut tx = Tx::default();
            let mut un = None;
            if let Some(t) = existing {
                let ti = g.meta(t)?;
                let t_is_dir = ti.ftype == FileType::Directory;
                // RFC 8881 §18.26.4: source and target must both be directories or both not.
                if t_is_dir != src_is_dir {
                    return Err(StoreError::Exist);
                }
                if t_is_dir && g.dir_has_entries(t)? {
                    return Err(StoreError::NotEmpty);
                }
                if t_is_dir {
                    dm.nlink = dm.nlink.saturating_sub(1);
                }
                tx.items.push(Item::DirentRemove {
                    dir: dd.0,
                    name: dn.to_vec(),
                });
                un = Some(self.unlink_inode(&g, &mut tx, t, now)?);
            }
            tx.items.push(Item::DirentRemove {
                dir: sd.0,
                name: sn.to_vec(),
            });
            // Over an existing name the entry keeps its cookie (DirentAdd replaces by name).
            let cookie = match g.dir_lookup(dd.0, dn)? {
                Some((_, c)) => c,
                None => next_cookie(&g, dd, dn)?,
            };
            tx.items.push(Item::DirentAdd {
                dir: dd.0,
                name: dn.to_vec(),
                ino: src,
                cookie,
            });
            let mut m = src_m;
            m.touch_c(now);
            if src_is_dir {
                m.parent = dd.0;
                if sd != dd {
                    sm.nlink = sm.nlink.saturating_sub(1);
                    dm.nlink += 1;
                }
            }
            tx.core(src, &m);
            let (sb, db) = (sm.change, dm.change);
            if sd == dd {
                // One directory: the target-side link count changes are in dm.
                dm.touch_mc(now);
                tx.core(dd.0, &dm);
                sm = dm;
            } else {
                sm.touch_mc(now);
                dm.touch_mc(now);
                tx.core(sd.0, &sm);
                tx.core(dd.0, &dm);
            }
            let csn = self.commit_locked(&mut g, res, tx.items, tx.objs)?;
            (
                DirChange {
                    before: sb,
                    after: sm.change,
                },
                DirChange {
                    before: db,
                    after: dm.change,
                },
                un,
                csn,
            )
        };
        self.force_if_sync(csn)?;
        Ok((a, b, un))
    }
}
