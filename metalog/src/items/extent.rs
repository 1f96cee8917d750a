//! Extent-map items: set a mapping, convert unwritten → written, punch from the map.

use super::codec::{DecodeError, Put, Reader};
use super::{Item, ItemOps};

pub(crate) struct ExtentItems;

const SET: u8 = 10;
const CONVERT: u8 = 11;
const FREE: u8 = 12;

impl ItemOps for ExtentItems {
    const TAGS: &'static [u8] = &[SET, CONVERT, FREE];

    fn encode_body(item: &Item, w: &mut Vec<u8>) -> Option<u8> {
        match item {
            Item::ExtentSet {
                ino,
                file_block,
                len_blocks,
                phys_block,
                unwritten,
            } => {
                w.u64(*ino);
                w.u64(*file_block);
                w.u64(*len_blocks);
                w.u64(*phys_block);
                w.u8(u8::from(*unwritten));
                Some(SET)
            }
            Item::ExtentConvert {
                ino,
                file_block,
                len_blocks,
            } => {
                w.u64(*ino);
                w.u64(*file_block);
                w.u64(*len_blocks);
                Some(CONVERT)
            }
            Item::ExtentFree {
                ino,
                file_block,
                len_blocks,
            } => {
                w.u64(*ino);
                w.u64(*file_block);
                w.u64(*len_blocks);
                Some(FREE)
            }
            _ => None,
        }
    }

    fn decode_body(tag: u8, r: &mut Reader) -> Result<Item, DecodeError> {
        Ok(match tag {
            SET => Item::ExtentSet {
                ino: r.u64()?,
                file_block: r.u64()?,
                len_blocks: r.u64()?,
                phys_block: r.u64()?,
                unwritten: r.bool()?,
            },
            CONVERT => Item::ExtentConvert {
                ino: r.u64()?,
                file_block: r.u64()?,
                len_blocks: r.u64()?,
            },
            FREE => Item::ExtentFree {
                ino: r.u64()?,
                file_block: r.u64()?,
                len_blocks: r.u64()?,
            },
            _ => return Err(DecodeError("not an extent item")),
        })
    }
}
