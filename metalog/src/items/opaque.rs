//! Store-specific key/value records (e.g. NFS client records); `value: None` deletes the key.

use super::codec::{DecodeError, Put, Reader};
use super::{Item, ItemOps};

pub(crate) struct OpaqueItems;

const OPAQUE: u8 = 50;

impl ItemOps for OpaqueItems {
    const TAGS: &'static [u8] = &[OPAQUE];

    fn encode_body(item: &Item, w: &mut Vec<u8>) -> Option<u8> {
        let Item::Opaque { kind, key, value } = item else {
            return None;
        };
        w.u16(*kind);
        w.bytes(key);
        match value {
            None => w.u8(0),
            Some(v) => {
                w.u8(1);
                w.bytes(v);
            }
        }
        Some(OPAQUE)
    }

    fn decode_body(tag: u8, r: &mut Reader) -> Result<Item, DecodeError> {
        if tag != OPAQUE {
            return Err(DecodeError("not an opaque item"));
        }
        let kind = r.u16()?;
        let key = r.bytes()?;
        let value = if r.bool()? { Some(r.bytes()?) } else { None };
        Ok(Item::Opaque { kind, key, value })
    }
}
