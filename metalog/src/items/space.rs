//! Free-space items: a block range became allocated or free (set semantics per block).

use super::codec::{DecodeError, Put, Reader};
use super::{Item, ItemOps};

pub(crate) struct SpaceItems;

const ALLOC: u8 = 30;
const FREE: u8 = 31;

impl ItemOps for SpaceItems {
    const TAGS: &'static [u8] = &[ALLOC, FREE];

    fn encode_body(item: &Item, w: &mut Vec<u8>) -> Option<u8> {
        let (tag, s, l) = match item {
            Item::SpaceAlloc {
                start_block,
                len_blocks,
            } => (ALLOC, start_block, len_blocks),
            Item::SpaceFree {
                start_block,
                len_blocks,
            } => (FREE, start_block, len_blocks),
            _ => return None,
        };
        w.u64(*s);
        w.u64(*l);
        Some(tag)
    }

    fn decode_body(tag: u8, r: &mut Reader) -> Result<Item, DecodeError> {
        let (start_block, len_blocks) = (r.u64()?, r.u64()?);
        Ok(match tag {
            ALLOC => Item::SpaceAlloc {
                start_block,
                len_blocks,
            },
            FREE => Item::SpaceFree {
                start_block,
                len_blocks,
            },
            _ => return Err(DecodeError("not a space item")),
        })
    }
}
