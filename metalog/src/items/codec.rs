//! Byte codec of the items: little-endian integers, u32-length-prefixed byte strings, bounded
//! reads, on top of [`bytecodec`] (docs/design.md, house rule 1: no I/O here, no trailing
//! bytes accepted).

use bytecodec::Writer;

/// An item or payload that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("item decode: {0}")]
pub struct DecodeError(pub &'static str);

/// Append-side helpers.
pub(crate) trait Put {
    fn u8(&mut self, v: u8);
    fn u16(&mut self, v: u16);
    fn u32(&mut self, v: u32);
    fn u64(&mut self, v: u64);
    fn i64(&mut self, v: i64);
    fn bytes(&mut self, v: &[u8]);
    fn time(&mut self, t: (i64, u32)) {
        self.i64(t.0);
        self.u32(t.1);
    }
}

impl Put for Vec<u8> {
    fn u8(&mut self, v: u8) {
        Writer::new(self).u8(v);
    }
    fn u16(&mut self, v: u16) {
        Writer::new(self).u16_le(v);
    }
    fn u32(&mut self, v: u32) {
        Writer::new(self).u32_le(v);
    }
    fn u64(&mut self, v: u64) {
        Writer::new(self).u64_le(v);
    }
    fn i64(&mut self, v: i64) {
        Writer::new(self).i64_le(v);
    }
    fn bytes(&mut self, v: &[u8]) {
        Writer::new(self).u32_le(v.len() as u32).bytes(v);
    }
}

impl From<bytecodec::Error> for DecodeError {
    fn from(e: bytecodec::Error) -> DecodeError {
        match e {
            bytecodec::Error::Short { .. } => DecodeError("truncated"),
            bytecodec::Error::Trailing { .. } => DecodeError("trailing bytes"),
        }
    }
}

/// A cursor over a borrowed slice: [`bytecodec::Reader`] with the items' little-endian
/// widths and the intent nesting depth.
pub struct Reader<'a> {
    b: bytecodec::Reader<'a>,
    /// Intent nesting depth (an intent's body may not hold another intent).
    pub(crate) depth: u8,
}

impl<'a> Reader<'a> {
    /// A reader over `b`.
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader {
            b: bytecodec::Reader::new(b),
            depth: 0,
        }
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.b.remaining()
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        Ok(self.b.bytes(n)?)
    }
    /// A sub-reader over the next `n` bytes.
    pub(crate) fn sub(&mut self, n: usize) -> Result<Reader<'a>, DecodeError> {
        Ok(Reader {
            b: self.b.sub(n)?,
            depth: self.depth,
        })
    }
    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.b.u8()?)
    }
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(self.b.u16_le()?)
    }
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(self.b.u32_le()?)
    }
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(self.b.u64_le()?)
    }
    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(self.b.i64_le()?)
    }
    pub(crate) fn time(&mut self) -> Result<(i64, u32), DecodeError> {
        Ok((self.i64()?, self.u32()?))
    }
    pub(crate) fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    pub(crate) fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError("bad bool")),
        }
    }
    /// Fail unless everything was consumed.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        Ok(self.b.finish()?)
    }
}
