//! Byte codec of the items: little-endian integers, u32-length-prefixed byte strings, bounded
//! reads (style.md rule 1: no I/O here, no trailing bytes accepted).

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
        self.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.extend_from_slice(v);
    }
}

/// A cursor over a borrowed slice.
pub struct Reader<'a> {
    b: &'a [u8],
    /// Intent nesting depth (an intent's body may not hold another intent).
    pub(crate) depth: u8,
}

impl<'a> Reader<'a> {
    /// A reader over `b`.
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, depth: 0 }
    }
    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.b.len()
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.b.len() < n {
            return Err(DecodeError("truncated"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    /// A sub-reader over the next `n` bytes.
    pub(crate) fn sub(&mut self, n: usize) -> Result<Reader<'a>, DecodeError> {
        Ok(Reader {
            b: self.take(n)?,
            depth: self.depth,
        })
    }
    pub(crate) fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    pub(crate) fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(self.u64()? as i64)
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
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(DecodeError("trailing bytes"))
        }
    }
}
