//! XDR (RFC 4506) codec: a bounded reader over a borrowed slice and a writer appending to a
//! `Vec<u8>`. No I/O here (docs/design.md, house rule 1). Decoding never trusts a length: every
//! variable-length item is checked against the bytes that remain and against a caller's bound.
//!
//! XDR is big-endian 4-byte units (RFC 4506 §3); the units themselves go through bytecodec's
//! `Reader` (which bounds every read) and `Writer`, and this file adds what is XDR's own:
//! padding to 4 bytes, lengths checked against a bound, booleans, optional data.

use bytecodec::{put_u32_be, Reader, Writer};
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum XdrError {
    #[error("XDR input ends early")]
    Short,
    #[error("XDR length {0} exceeds its bound")]
    TooLong(u32),
    #[error("XDR value out of range")]
    BadValue,
    #[error("trailing bytes after XDR item")]
    Trailing,
}

pub type XdrResult<T> = Result<T, XdrError>;

/// Something that can be written as XDR and read back.
pub trait Xdr: Sized {
    fn encode(&self, w: &mut XdrWriter);
    fn decode(r: &mut XdrReader<'_>) -> XdrResult<Self>;
}

/// A cursor over XDR bytes.
#[derive(Debug, Clone)]
pub struct XdrReader<'a> {
    r: Reader<'a>,
    /// The length of the whole input, for `position`.
    len: usize,
}

impl<'a> XdrReader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        XdrReader {
            r: Reader::new(buf),
            len: buf.len(),
        }
    }

    pub fn remaining(&self) -> usize {
        self.r.remaining()
    }

    pub fn position(&self) -> usize {
        self.len - self.r.remaining()
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.r.rest()
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> XdrResult<()> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(XdrError::Trailing)
        }
    }

    /// A short read consumes nothing (bytecodec's `Reader` promises it).
    #[inline]
    fn take(&mut self, n: usize) -> XdrResult<&'a [u8]> {
        self.r.bytes(n).map_err(|_| XdrError::Short)
    }

    #[inline]
    pub fn u32(&mut self) -> XdrResult<u32> {
        self.r.u32_be().map_err(|_| XdrError::Short)
    }

    pub fn i32(&mut self) -> XdrResult<i32> {
        Ok(self.u32()? as i32)
    }

    /// An XDR hyper: two units, the high one first, which is the big-endian u64.
    #[inline]
    pub fn u64(&mut self) -> XdrResult<u64> {
        self.r.u64_be().map_err(|_| XdrError::Short)
    }

    pub fn i64(&mut self) -> XdrResult<i64> {
        Ok(self.u64()? as i64)
    }

    pub fn bool(&mut self) -> XdrResult<bool> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(XdrError::BadValue),
        }
    }

    /// Fixed-length opaque (padded to 4 bytes).
    pub fn opaque_fixed(&mut self, n: usize) -> XdrResult<&'a [u8]> {
        let s = self.take(n)?;
        self.take(pad(n))?;
        Ok(s)
    }

    pub fn array<const N: usize>(&mut self) -> XdrResult<[u8; N]> {
        let s = self.opaque_fixed(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Variable-length opaque of at most `max` bytes.
    pub fn opaque(&mut self, max: usize) -> XdrResult<&'a [u8]> {
        let n = self.u32()?;
        if n as usize > max {
            return Err(XdrError::TooLong(n));
        }
        if n as usize > self.remaining() {
            return Err(XdrError::Short);
        }
        self.opaque_fixed(n as usize)
    }

    pub fn opaque_vec(&mut self, max: usize) -> XdrResult<Vec<u8>> {
        Ok(self.opaque(max)?.to_vec())
    }

    /// A string is an opaque here: NFS names are bytes (UTF-8 checks belong to the op).
    pub fn string(&mut self, max: usize) -> XdrResult<Vec<u8>> {
        self.opaque_vec(max)
    }

    /// The count of a variable-length array, checked against `max` and against the bytes left
    /// (each element takes at least `min_elem_size` bytes), so a forged count cannot make us
    /// allocate.
    pub fn array_len(&mut self, max: usize, min_elem_size: usize) -> XdrResult<usize> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(XdrError::TooLong(n as u32));
        }
        if n.saturating_mul(min_elem_size.max(1)) > self.remaining() {
            return Err(XdrError::Short);
        }
        Ok(n)
    }

    /// A variable-length array of `T`.
    pub fn vec<T: Xdr>(&mut self, max: usize, min_elem_size: usize) -> XdrResult<Vec<T>> {
        let n = self.array_len(max, min_elem_size)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(T::decode(self)?);
        }
        Ok(v)
    }

    /// XDR optional-data (`T *`).
    pub fn optional<T: Xdr>(&mut self) -> XdrResult<Option<T>> {
        if self.bool()? {
            Ok(Some(T::decode(self)?))
        } else {
            Ok(None)
        }
    }

    pub fn read<T: Xdr>(&mut self) -> XdrResult<T> {
        T::decode(self)
    }
}

fn pad(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// Appends XDR to a buffer the caller owns.
#[derive(Debug, Default, Clone)]
pub struct XdrWriter {
    pub buf: Vec<u8>,
}

impl XdrWriter {
    pub fn new() -> Self {
        XdrWriter { buf: Vec::new() }
    }

    pub fn with_capacity(n: usize) -> Self {
        XdrWriter {
            buf: Vec::with_capacity(n),
        }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }

    #[inline]
    pub fn u32(&mut self, v: u32) {
        Writer::new(&mut self.buf).u32_be(v);
    }

    pub fn i32(&mut self, v: i32) {
        self.u32(v as u32)
    }

    #[inline]
    pub fn u64(&mut self, v: u64) {
        Writer::new(&mut self.buf).u64_be(v);
    }

    pub fn i64(&mut self, v: i64) {
        self.u64(v as u64)
    }

    pub fn bool(&mut self, v: bool) {
        self.u32(v as u32)
    }

    pub fn opaque_fixed(&mut self, b: &[u8]) {
        Writer::new(&mut self.buf).bytes(b).zeros(pad(b.len()));
    }

    pub fn opaque(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.opaque_fixed(b);
    }

    pub fn string(&mut self, s: &[u8]) {
        self.opaque(s)
    }

    pub fn vec<T: Xdr>(&mut self, v: &[T]) {
        self.u32(v.len() as u32);
        for x in v {
            x.encode(self);
        }
    }

    pub fn optional<T: Xdr>(&mut self, v: &Option<T>) {
        match v {
            Some(x) => {
                self.bool(true);
                x.encode(self);
            }
            None => self.bool(false),
        }
    }

    pub fn write<T: Xdr>(&mut self, v: &T) {
        v.encode(self)
    }

    /// Reserve a u32 to be filled in later (e.g. a count or a length); returns its position.
    pub fn reserve_u32(&mut self) -> usize {
        let at = self.buf.len();
        self.u32(0);
        at
    }

    /// Panics if `at` is not a position `reserve_u32` gave back (a bug in the encoder).
    pub fn patch_u32(&mut self, at: usize, v: u32) {
        put_u32_be(&mut self.buf, at, v);
    }
}

impl Xdr for u32 {
    fn encode(&self, w: &mut XdrWriter) {
        w.u32(*self)
    }
    fn decode(r: &mut XdrReader<'_>) -> XdrResult<Self> {
        r.u32()
    }
}

impl Xdr for u64 {
    fn encode(&self, w: &mut XdrWriter) {
        w.u64(*self)
    }
    fn decode(r: &mut XdrReader<'_>) -> XdrResult<Self> {
        r.u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_padding() {
        let mut w = XdrWriter::new();
        w.u32(7);
        w.u64(0x1122_3344_5566_7788);
        w.opaque(b"abcde");
        w.bool(true);
        assert_eq!(w.len(), 4 + 8 + 4 + 8 + 4);
        let mut r = XdrReader::new(&w.buf);
        assert_eq!(r.u32().unwrap(), 7);
        assert_eq!(r.u64().unwrap(), 0x1122_3344_5566_7788);
        assert_eq!(r.opaque(16).unwrap(), b"abcde");
        assert!(r.bool().unwrap());
        r.finish().unwrap();
    }

    #[test]
    fn forged_lengths_are_refused() {
        let mut w = XdrWriter::new();
        w.u32(1_000_000);
        let mut r = XdrReader::new(&w.buf);
        assert_eq!(r.clone().opaque(16), Err(XdrError::TooLong(1_000_000)));
        assert_eq!(r.opaque(usize::MAX), Err(XdrError::Short));
        let mut r = XdrReader::new(&w.buf);
        assert_eq!(r.array_len(usize::MAX, 4), Err(XdrError::Short));
        let mut r = XdrReader::new(&[0, 0, 0, 2]);
        assert_eq!(r.bool(), Err(XdrError::BadValue));
    }
}
