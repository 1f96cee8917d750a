//! Directory-entry items.

use super::codec::{DecodeError, Put, Reader};
use super::{Item, ItemOps};

pub(crate) struct DirentItems;

const ADD: u8 = 20;
const REMOVE: u8 = 21;

impl ItemOps for DirentItems {
    const TAGS: &'static [u8] = &[ADD, REMOVE];

    fn encode_body(item: &Item, w: &mut Vec<u8>) -> Option<u8> {
        match item {
            Item::DirentAdd {
                dir,
                name,
                ino,
                cookie,
            } => {
                w.u64(*dir);
                w.bytes(name);
                w.u64(*ino);
                w.u64(*cookie);
                Some(ADD)
            }
            Item::DirentRemove { dir, name } => {
                w.u64(*dir);
                w.bytes(name);
                Some(REMOVE)
            }
            _ => None,
        }
    }

    fn decode_body(tag: u8, r: &mut Reader) -> Result<Item, DecodeError> {
        Ok(match tag {
            ADD => Item::DirentAdd {
                dir: r.u64()?,
                name: r.bytes()?,
                ino: r.u64()?,
                cookie: r.u64()?,
            },
            REMOVE => Item::DirentRemove {
                dir: r.u64()?,
                name: r.bytes()?,
            },
            _ => return Err(DecodeError("not a dirent item")),
        })
    }
}
