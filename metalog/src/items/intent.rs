//! Intent / done pairs for multi-step operations (XFS EFI/EFD style): recovery applies the body
//! of every intent whose done item never reached the log (docs/design.md §3 "intents").

use super::codec::{DecodeError, Put, Reader};
use super::{decode_item, encode_item, Item, ItemOps};

pub(crate) struct IntentItems;

const INTENT: u8 = 40;
const DONE: u8 = 41;

impl ItemOps for IntentItems {
    const TAGS: &'static [u8] = &[INTENT, DONE];

    fn encode_body(item: &Item, w: &mut Vec<u8>) -> Option<u8> {
        match item {
            Item::Intent { id, body } => {
                w.u64(*id);
                w.u32(body.len() as u32);
                for it in body {
                    encode_item(it, w);
                }
                Some(INTENT)
            }
            Item::Done { id } => {
                w.u64(*id);
                Some(DONE)
            }
            _ => None,
        }
    }

    fn decode_body(tag: u8, r: &mut Reader) -> Result<Item, DecodeError> {
        Ok(match tag {
            INTENT => {
                if r.depth > 0 {
                    return Err(DecodeError("nested intent"));
                }
                let id = r.u64()?;
                let n = r.u32()? as usize;
                r.depth += 1;
                // Each item takes at least 5 bytes: bound the allocation by the input.
                let mut body = Vec::with_capacity(n.min(r.remaining() / 5));
                for _ in 0..n {
                    body.push(decode_item(r)?);
                }
                r.depth -= 1;
                Item::Intent { id, body }
            }
            DONE => Item::Done { id: r.u64()? },
            _ => return Err(DecodeError("not an intent item")),
        })
    }
}
