//! Fixed-width integers and byte strings in and out of byte buffers: the one place the
//! workspace's on-disk and wire formats turn integers into bytes and back.
//!
//! It owns three things:
//! - [`Reader`], a bounds-checked cursor over a borrowed slice: every read returns a
//!   `Result`, short input is [`Error::Short`] (never a panic), [`Reader::finish`] refuses
//!   trailing bytes and [`Reader::sub`] bounds a nested structure to its length;
//! - [`Writer`], which appends to a caller's `Vec<u8>`;
//! - fixed-offset helpers ([`get_u32_le`], [`put_u32_le`], ...) for formats laid out at byte
//!   offsets (superblocks, record headers), where a field's place is a constant.
//!
//! Widths are named with their byte order (`u32_le`, `u32_be`), so a format's code says which
//! order it uses at every field. What it never does: I/O, allocation beyond the writer's
//! vector, checksums, or any knowledge of a format; each format lives in its own crate's file
//! with its own size asserts.
//!
//! Every function is `#[inline]`: each is a few instructions, called from other crates on hot
//! paths (NVMe/TCP PDUs, XDR), and a non-generic function is not inlined across crates without
//! it (decoding an R2T through them took 511 instructions without, 265 with).

#![forbid(unsafe_code)]

/// Why bytes did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A read wanted `need` bytes where only `have` were left.
    #[error("short input: need {need} bytes, have {have}")]
    Short { need: usize, have: usize },
    /// [`Reader::finish`] found bytes after the end of the structure.
    #[error("{left} trailing bytes")]
    Trailing { left: usize },
}

/// A cursor over a borrowed slice; reads consume from the front.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    b: &'a [u8],
}

macro_rules! reader_ints {
    ($($le:ident $be:ident $t:ty;)*) => {$(
        #[doc = concat!("A little-endian `", stringify!($t), "`.")]
        #[inline]
        pub fn $le(&mut self) -> Result<$t, Error> {
            self.array().map(<$t>::from_le_bytes)
        }
        #[doc = concat!("A big-endian `", stringify!($t), "`.")]
        #[inline]
        pub fn $be(&mut self) -> Result<$t, Error> {
            self.array().map(<$t>::from_be_bytes)
        }
    )*};
}

impl<'a> Reader<'a> {
    /// A reader over all of `b`.
    #[inline]
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b }
    }

    /// Bytes not yet read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.b.len()
    }

    /// Whether everything was read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.b.is_empty()
    }

    /// The bytes not yet read, without consuming them.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.b
    }

    /// The next `n` bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Error> {
        let (h, t) = self.b.split_at_checked(n).ok_or(Error::Short {
            need: n,
            have: self.b.len(),
        })?;
        self.b = t;
        Ok(h)
    }

    /// The next `N` bytes as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    /// Steps over `n` bytes.
    #[inline]
    pub fn skip(&mut self, n: usize) -> Result<(), Error> {
        self.bytes(n).map(|_| ())
    }

    /// A reader over exactly the next `len` bytes (a nested structure of known length); this
    /// reader continues after them.
    #[inline]
    pub fn sub(&mut self, len: usize) -> Result<Reader<'a>, Error> {
        self.bytes(len).map(Reader::new)
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, Error> {
        self.array::<1>().map(|[b]| b)
    }

    reader_ints! {
        u16_le u16_be u16;
        u32_le u32_be u32;
        u64_le u64_be u64;
        i32_le i32_be i32;
        i64_le i64_be i64;
    }

    /// `Ok` only if everything was read: a structure is never followed by stray bytes.
    #[inline]
    pub fn finish(&self) -> Result<(), Error> {
        match self.b.len() {
            0 => Ok(()),
            left => Err(Error::Trailing { left }),
        }
    }
}

/// Appends to a caller's vector; the methods chain (`w.u32_be(1).u64_be(2)`).
#[derive(Debug)]
pub struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

macro_rules! writer_ints {
    ($($le:ident $be:ident $t:ty;)*) => {$(
        #[doc = concat!("A little-endian `", stringify!($t), "`.")]
        #[inline]
        pub fn $le(&mut self, v: $t) -> &mut Self {
            self.bytes(&v.to_le_bytes())
        }
        #[doc = concat!("A big-endian `", stringify!($t), "`.")]
        #[inline]
        pub fn $be(&mut self, v: $t) -> &mut Self {
            self.bytes(&v.to_be_bytes())
        }
    )*};
}

impl<'a> Writer<'a> {
    /// A writer appending to `out` (what is already there stays).
    #[inline]
    pub fn new(out: &'a mut Vec<u8>) -> Writer<'a> {
        Writer { out }
    }

    /// Bytes in the vector, including those that were there before this writer.
    #[inline]
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// Whether the vector is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// Raw bytes, as they are.
    #[inline]
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.out.extend_from_slice(v);
        self
    }

    /// `n` zero bytes (padding, reserved fields).
    #[inline]
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.out.resize(self.out.len() + n, 0);
        self
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.out.push(v);
        self
    }

    writer_ints! {
        u16_le u16_be u16;
        u32_le u32_be u32;
        u64_le u64_be u64;
        i32_le i32_be i32;
        i64_le i64_be i64;
    }
}

/// The `N` bytes of `b` at `off`.
#[inline]
pub fn get_array<const N: usize>(b: &[u8], off: usize) -> Result<[u8; N], Error> {
    let have = b.len().saturating_sub(off);
    let s = off
        .checked_add(N)
        .and_then(|end| b.get(off..end))
        .ok_or(Error::Short { need: N, have })?;
    let mut a = [0u8; N];
    a.copy_from_slice(s);
    Ok(a)
}

/// Writes `v` into `b` at `off`.
///
/// # Panics
/// If `b` is shorter than `off + v.len()`. The buffer is the format's own, of a size its
/// constants fix (and its const asserts check), so a miss is a bug in the format code, not
/// something input can cause.
#[track_caller]
#[inline]
pub fn put_bytes(b: &mut [u8], off: usize, v: &[u8]) {
    b[off..off + v.len()].copy_from_slice(v);
}

macro_rules! offset_ints {
    ($($get:ident $put:ident $t:ty, $from:ident $to:ident;)*) => {$(
        #[doc = concat!("The `", stringify!($t), "` at byte `off` of `b` (", stringify!($from), ").")]
        #[inline]
        pub fn $get(b: &[u8], off: usize) -> Result<$t, Error> {
            get_array(b, off).map(<$t>::$from)
        }
        #[doc = concat!("Writes `v` at byte `off` of `b` (", stringify!($to), "); panics as [`put_bytes`].")]
        #[track_caller]
        #[inline]
        pub fn $put(b: &mut [u8], off: usize, v: $t) {
            put_bytes(b, off, &v.$to());
        }
    )*};
}

offset_ints! {
    get_u8 put_u8 u8, from_le_bytes to_le_bytes;
    get_u16_le put_u16_le u16, from_le_bytes to_le_bytes;
    get_u16_be put_u16_be u16, from_be_bytes to_be_bytes;
    get_u32_le put_u32_le u32, from_le_bytes to_le_bytes;
    get_u32_be put_u32_be u32, from_be_bytes to_be_bytes;
    get_u64_le put_u64_le u64, from_le_bytes to_le_bytes;
    get_u64_be put_u64_be u64, from_be_bytes to_be_bytes;
    get_i64_le put_i64_le i64, from_le_bytes to_le_bytes;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_both_orders() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8];
        let mut r = Reader::new(&b);
        assert_eq!(r.u16_le(), Ok(0x0201));
        assert_eq!(r.u16_be(), Ok(0x0304));
        assert_eq!(r.u32_le(), Ok(0x0807_0605));
        r.finish().unwrap();
        assert_eq!(Reader::new(&b).u64_be(), Ok(0x0102_0304_0506_0708));
        assert_eq!(Reader::new(&b).u64_le(), Ok(0x0807_0605_0403_0201));
    }

    #[test]
    fn short_input_is_an_error_and_consumes_nothing() {
        let b = [1u8, 2, 3];
        let mut r = Reader::new(&b);
        assert_eq!(r.u32_le(), Err(Error::Short { need: 4, have: 3 }));
        assert_eq!(r.remaining(), 3);
        assert_eq!(
            r.bytes(usize::MAX),
            Err(Error::Short {
                need: usize::MAX,
                have: 3
            })
        );
        assert_eq!(r.skip(4), Err(Error::Short { need: 4, have: 3 }));
        assert!(r.sub(4).is_err());
        assert_eq!(r.u16_be(), Ok(0x0102));
        assert_eq!(r.u16_be(), Err(Error::Short { need: 2, have: 1 }));
        assert_eq!(r.u8(), Ok(3));
        assert_eq!(r.u8(), Err(Error::Short { need: 1, have: 0 }));
        assert_eq!(
            Reader::new(&[]).u64_be(),
            Err(Error::Short { need: 8, have: 0 })
        );
    }

    #[test]
    fn finish_refuses_trailing_bytes() {
        let mut r = Reader::new(&[0u8; 5]);
        r.u32_le().unwrap();
        assert_eq!(r.finish(), Err(Error::Trailing { left: 1 }));
        r.skip(1).unwrap();
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn sub_is_bounded_and_the_parent_continues_after_it() {
        let b = [0u8, 0, 0, 7, 9, 9];
        let mut r = Reader::new(&b);
        let mut s = r.sub(4).unwrap();
        assert_eq!(s.u16_be(), Ok(0));
        assert_eq!(s.u32_be(), Err(Error::Short { need: 4, have: 2 }));
        assert_eq!(s.u16_be(), Ok(7));
        s.finish().unwrap();
        assert_eq!(r.rest(), &[9, 9]);
    }

    #[test]
    fn offsets_out_of_range_are_errors() {
        let b = [0xffu8; 8];
        assert_eq!(get_u32_le(&b, 4), Ok(u32::MAX));
        assert_eq!(get_u32_le(&b, 5), Err(Error::Short { need: 4, have: 3 }));
        assert_eq!(get_u64_be(&b, 9), Err(Error::Short { need: 8, have: 0 }));
        assert_eq!(
            get_u16_le(&b, usize::MAX),
            Err(Error::Short { need: 2, have: 0 })
        );
        assert_eq!(get_array::<0>(&b, 8), Ok([]));
    }

    #[test]
    fn offsets_write_where_they_read() {
        let mut b = [0u8; 16];
        put_u16_le(&mut b, 0, 0x0102);
        put_u32_be(&mut b, 2, 0x0304_0506);
        put_u64_le(&mut b, 8, 0x1112_1314_1516_1718);
        assert_eq!(&b[..6], &[2, 1, 3, 4, 5, 6]);
        assert_eq!(get_u16_le(&b, 0), Ok(0x0102));
        assert_eq!(get_u32_be(&b, 2), Ok(0x0304_0506));
        assert_eq!(get_u64_le(&b, 8), Ok(0x1112_1314_1516_1718));
        put_i64_le(&mut b, 8, -2);
        assert_eq!(get_i64_le(&b, 8), Ok(-2));
        put_u8(&mut b, 6, 0xa5);
        assert_eq!(get_u8(&b, 6), Ok(0xa5));
        assert_eq!(get_u8(&b, 16), Err(Error::Short { need: 1, have: 0 }));
    }

    #[test]
    fn the_writer_appends_and_chains() {
        let mut v = vec![0xaa];
        let mut w = Writer::new(&mut v);
        w.u8(1).u16_be(2).u32_le(3).u64_be(4).bytes(b"xy").zeros(2);
        assert_eq!(w.len(), 1 + 1 + 2 + 4 + 8 + 2 + 2);
        assert_eq!(
            v,
            [0xaa, 1, 0, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, b'x', b'y', 0, 0]
        );
    }

    proptest! {
        #[test]
        fn writer_and_reader_round_trip(
            a in any::<u8>(), b in any::<u16>(), c in any::<u32>(), d in any::<u64>(),
            e in any::<i64>(), f in any::<i32>(), tail in proptest::collection::vec(any::<u8>(), 0..32),
        ) {
            let mut v = Vec::new();
            Writer::new(&mut v)
                .u8(a).u16_le(b).u16_be(b).u32_le(c).u32_be(c).u64_le(d).u64_be(d)
                .i64_le(e).i64_be(e).i32_le(f).i32_be(f).bytes(&tail);
            let mut r = Reader::new(&v);
            prop_assert_eq!(r.u8(), Ok(a));
            prop_assert_eq!(r.u16_le(), Ok(b));
            prop_assert_eq!(r.u16_be(), Ok(b));
            prop_assert_eq!(r.u32_le(), Ok(c));
            prop_assert_eq!(r.u32_be(), Ok(c));
            prop_assert_eq!(r.u64_le(), Ok(d));
            prop_assert_eq!(r.u64_be(), Ok(d));
            prop_assert_eq!(r.i64_le(), Ok(e));
            prop_assert_eq!(r.i64_be(), Ok(e));
            prop_assert_eq!(r.i32_le(), Ok(f));
            prop_assert_eq!(r.i32_be(), Ok(f));
            prop_assert_eq!(r.bytes(tail.len()), Ok(&tail[..]));
            prop_assert_eq!(r.finish(), Ok(()));
        }

        #[test]
        fn any_input_reads_without_panicking(
            b in proptest::collection::vec(any::<u8>(), 0..24), ops in proptest::collection::vec(0u8..6, 0..16),
        ) {
            let mut r = Reader::new(&b);
            for op in ops {
                let before = r.remaining();
                let ok = match op {
                    0 => r.u8().is_ok(),
                    1 => r.u16_be().is_ok(),
                    2 => r.u32_le().is_ok(),
                    3 => r.u64_be().is_ok(),
                    4 => r.sub(3).is_ok(),
                    _ => r.skip(5).is_ok(),
                };
                prop_assert!(ok || r.remaining() == before);
            }
        }
    }
}
