//! Inode items: full core (set semantics), timestamps, size, free.

use super::codec::{DecodeError, Put, Reader};
use super::{Item, ItemOps};

pub(crate) struct InodeItems;

const CORE: u8 = 1;
const TIMES: u8 = 2;
const SIZE: u8 = 3;
const FREE: u8 = 4;

impl ItemOps for InodeItems {
    const TAGS: &'static [u8] = &[CORE, TIMES, SIZE, FREE];

    fn encode_body(item: &Item, w: &mut Vec<u8>) -> Option<u8> {
        match item {
            Item::InodeCore {
                ino,
                gen,
                ftype,
                mode,
                uid,
                gid,
                nlink,
                rdev,
                size,
                atime,
                mtime,
                ctime,
                crtime,
                change,
                parent,
            } => {
                w.u64(*ino);
                w.u32(*gen);
                w.u8(*ftype);
                w.u32(*mode);
                w.u32(*uid);
                w.u32(*gid);
                w.u32(*nlink);
                w.u32(rdev.0);
                w.u32(rdev.1);
                w.u64(*size);
                for t in [atime, mtime, ctime, crtime] {
                    w.time(*t);
                }
                w.u64(*change);
                w.u64(*parent);
                Some(CORE)
            }
            Item::Timestamps {
                ino,
                atime,
                mtime,
                ctime,
                change,
            } => {
                w.u64(*ino);
                for t in [atime, mtime, ctime] {
                    w.time(*t);
                }
                w.u64(*change);
                Some(TIMES)
            }
            Item::Size { ino, size } => {
                w.u64(*ino);
                w.u64(*size);
                Some(SIZE)
            }
            Item::InodeFree { ino } => {
                w.u64(*ino);
                Some(FREE)
            }
            _ => None,
        }
    }

    fn decode_body(tag: u8, r: &mut Reader) -> Result<Item, DecodeError> {
        Ok(match tag {
            CORE => Item::InodeCore {
                ino: r.u64()?,
                gen: r.u32()?,
                ftype: r.u8()?,
                mode: r.u32()?,
                uid: r.u32()?,
                gid: r.u32()?,
                nlink: r.u32()?,
                rdev: (r.u32()?, r.u32()?),
                size: r.u64()?,
                atime: r.time()?,
                mtime: r.time()?,
                ctime: r.time()?,
                crtime: r.time()?,
                change: r.u64()?,
                parent: r.u64()?,
            },
            TIMES => Item::Timestamps {
                ino: r.u64()?,
                atime: r.time()?,
                mtime: r.time()?,
                ctime: r.time()?,
                change: r.u64()?,
            },
            SIZE => Item::Size {
                ino: r.u64()?,
                size: r.u64()?,
            },
            FREE => Item::InodeFree { ino: r.u64()? },
            _ => return Err(DecodeError("not an inode item")),
        })
    }
}
