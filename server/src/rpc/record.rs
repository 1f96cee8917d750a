//! Record marking (RFC 5531 §11): on a byte stream each RPC message is a *record* made of
//! fragments, each preceded by a 4-byte big-endian header whose top bit says "last fragment"
//! and whose low 31 bits give the fragment length. No I/O here (docs/design.md, house rule 1): the
//! connection feeds bytes in and takes whole records out.
//!
//! Size limit. RFC 5531 defines no error for an oversize record. We do what knfsd does
//! (`svc_tcp_read_marker`: "fragment too large" → close the transport): the moment a fragment
//! header would take the record past `max_record`, decoding fails and the connection is
//! closed without a reply. Replying GARBAGE_ARGS would need the rest of the record drained
//! (a peer could keep us reading an unbounded record), and the NFSv4.1 way to refuse a big
//! request — NFS4ERR_REQ_TOO_BIG — is answered by the COMPOUND dispatcher for every record
//! that fits this transport limit but not the session's `ca_maxrequestsize`. CREATE_SESSION
//! must therefore never grant a `ca_maxrequestsize` above `max_record`.

use bytecodec::{get_u32_be, put_u32_be, Writer};
use bytes::{Buf, Bytes, BytesMut};
use thiserror::Error;

/// The "last fragment" bit of a fragment header.
pub const LAST_FRAGMENT: u32 = 1 << 31;

/// Default limit on a reassembled record: a 1 MiB WRITE plus headers fits with room to spare
/// (the Linux client's largest wsize is 1 MiB).
pub const DEFAULT_MAX_RECORD: usize = 4 << 20;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RecordError {
    #[error("RPC record of at least {0} bytes exceeds the limit")]
    TooLarge(usize),
}

/// Reassembles records from fragments.
#[derive(Debug)]
pub struct RecordReader {
    max_record: usize,
    /// Fragments of the record being assembled (all but the last).
    partial: BytesMut,
    /// Header of the fragment whose bytes have not all arrived: (length, last).
    pending: Option<(usize, bool)>,
}

impl RecordReader {
    pub fn new(max_record: usize) -> Self {
        RecordReader {
            max_record,
            partial: BytesMut::new(),
            pending: None,
        }
    }

    /// How many more bytes the current fragment needs (a read-size hint; 4 when a header is
    /// expected).
    pub fn wanted(&self, buffered: usize) -> usize {
        match self.pending {
            Some((len, _)) => len.saturating_sub(buffered).max(1),
            None => 4usize.saturating_sub(buffered).max(1),
        }
    }

    /// Takes whole fragments from the front of `src`. Returns a complete record when its last
    /// fragment is in, `None` when more bytes are needed.
    pub fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, RecordError> {
        loop {
            let (len, last) = match self.pending {
                Some(p) => p,
                None => {
                    // Fewer than 4 bytes: the header is not all in yet.
                    let Ok(h) = get_u32_be(src, 0) else {
                        return Ok(None);
                    };
                    src.advance(4);
                    let len = (h & !LAST_FRAGMENT) as usize;
                    let total = self.partial.len().saturating_add(len);
                    if total > self.max_record {
                        return Err(RecordError::TooLarge(total));
                    }
                    let p = (len, h & LAST_FRAGMENT != 0);
                    self.pending = Some(p);
                    p
                }
            };
            if src.len() < len {
                return Ok(None);
            }
            self.pending = None;
            let frag = src.split_to(len);
            if last {
                if self.partial.is_empty() {
                    return Ok(Some(frag.freeze()));
                }
                self.partial.extend_from_slice(&frag);
                return Ok(Some(std::mem::take(&mut self.partial).freeze()));
            }
            self.partial.extend_from_slice(&frag);
        }
    }
}

/// Starts a one-fragment record in `out`: reserves the header, to be finished by
/// [`finish_record`] once the message is appended. Returns the header's position.
pub fn begin_record(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    at
}

/// Writes the header reserved by [`begin_record`]. Messages larger than 2^31 - 1 bytes are
/// split into several fragments (never the case for our replies, but the framing stays valid).
pub fn finish_record(out: &mut Vec<u8>, at: usize) {
    const MAX_FRAG: usize = (LAST_FRAGMENT - 1) as usize;
    let len = out.len() - at - 4;
    if len <= MAX_FRAG {
        put_u32_be(out, at, len as u32 | LAST_FRAGMENT);
        return;
    }
    let body = out.split_off(at + 4);
    out.truncate(at);
    let mut chunks = body.chunks(MAX_FRAG).peekable();
    while let Some(c) = chunks.next() {
        let last = if chunks.peek().is_none() {
            LAST_FRAGMENT
        } else {
            0
        };
        Writer::new(out).u32_be(c.len() as u32 | last).bytes(c);
    }
}

/// One record holding `msg` in a single fragment.
pub fn frame(msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 4);
    let at = begin_record(&mut out);
    out.extend_from_slice(msg);
    finish_record(&mut out, at);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fragment(data: &[u8], last: bool) -> Vec<u8> {
        let mut v = (data.len() as u32 | if last { LAST_FRAGMENT } else { 0 })
            .to_be_bytes()
            .to_vec();
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn single_fragment_round_trip() {
        let mut r = RecordReader::new(1024);
        let mut buf = BytesMut::from(&frame(b"hello")[..]);
        assert_eq!(r.decode(&mut buf).unwrap().unwrap(), &b"hello"[..]);
        assert!(buf.is_empty());
        assert_eq!(r.decode(&mut buf).unwrap(), None);
    }

    #[test]
    fn fragments_are_reassembled_even_byte_by_byte() {
        let mut wire = fragment(b"ab", false);
        wire.extend(fragment(b"", false));
        wire.extend(fragment(b"cde", false));
        wire.extend(fragment(b"f", true));
        wire.extend(frame(b"next"));
        let mut r = RecordReader::new(1024);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in wire {
            buf.extend_from_slice(&[b]);
            while let Some(rec) = r.decode(&mut buf).unwrap() {
                got.push(rec.to_vec());
            }
        }
        assert_eq!(got, vec![b"abcdef".to_vec(), b"next".to_vec()]);
    }

    #[test]
    fn oversize_records_are_refused_at_the_header() {
        // One fragment over the limit: refused before its bytes arrive.
        let mut r = RecordReader::new(8);
        let mut buf = BytesMut::from(&(9u32 | LAST_FRAGMENT).to_be_bytes()[..]);
        assert_eq!(r.decode(&mut buf), Err(RecordError::TooLarge(9)));
        // Several fragments that add up past the limit.
        let mut r = RecordReader::new(8);
        let mut wire = fragment(b"12345", false);
        wire.extend(fragment(b"6789", true));
        let mut buf = BytesMut::from(&wire[..]);
        assert_eq!(r.decode(&mut buf), Err(RecordError::TooLarge(9)));
        // Exactly the limit is fine.
        let mut r = RecordReader::new(8);
        let mut buf = BytesMut::from(&frame(b"12345678")[..]);
        assert_eq!(r.decode(&mut buf).unwrap().unwrap().len(), 8);
    }

    #[test]
    fn framing_splits_nothing_below_2g() {
        let mut out = vec![9u8];
        let at = begin_record(&mut out);
        out.extend_from_slice(b"xyz");
        finish_record(&mut out, at);
        assert_eq!(out, vec![9, 0x80, 0, 0, 3, b'x', b'y', b'z']);
    }

    proptest::proptest! {
        #[test]
        fn any_split_into_fragments_reassembles(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            cuts in proptest::collection::vec(0usize..300, 0..6),
            chunk in 1usize..40,
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut wire = Vec::new();
            let mut start = 0;
            for c in cuts {
                wire.extend(fragment(&data[start..c], false));
                start = c;
            }
            wire.extend(fragment(&data[start..], true));
            let mut r = RecordReader::new(300);
            let mut buf = BytesMut::new();
            let mut got = None;
            for piece in wire.chunks(chunk) {
                buf.extend_from_slice(piece);
                if let Some(rec) = r.decode(&mut buf).unwrap() {
                    got = Some(rec.to_vec());
                }
            }
            proptest::prop_assert_eq!(got, Some(data));
        }

        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut r = RecordReader::new(64);
            let mut buf = BytesMut::from(&data[..]);
            while let Ok(Some(_)) = r.decode(&mut buf) {}
        }
    }
}
