//! XDR types shared by several operations (RFC 8881 §3, RFC 5662). Types used by one
//! operation only live in that operation's file.

use crate::nfs4::status::NfsStat;
use crate::store::{Attr, DirChange, Ino, Stable, Timespec};
use crate::xdr::{Xdr, XdrError, XdrReader, XdrResult, XdrWriter};
use bytecodec::{get_u32_be, get_u64_be, put_u32_be, put_u64_be};

pub const NFS4_FHSIZE: usize = 128;
pub const NFS4_VERIFIER_SIZE: usize = 8;
pub const NFS4_OTHER_SIZE: usize = 12;
pub const NFS4_SESSIONID_SIZE: usize = 16;
/// Bound on opaque owner/ids a client sends (RFC 8881 NFS4_OPAQUE_LIMIT).
pub const NFS4_OPAQUE_LIMIT: usize = 1024;

/// `stateid4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Stateid {
    pub seqid: u32,
    pub other: [u8; NFS4_OTHER_SIZE],
}

impl Stateid {
    /// The anonymous stateid (all zeros) and READ bypass (all ones), RFC 8881 §8.2.3.
    pub const ANONYMOUS: Stateid = Stateid {
        seqid: 0,
        other: [0; 12],
    };
    pub const BYPASS: Stateid = Stateid {
        seqid: u32::MAX,
        other: [0xff; 12],
    };
    /// The current stateid (seqid 1, other zero), RFC 8881 §16.2.3.1.2.
    pub const CURRENT: Stateid = Stateid {
        seqid: 1,
        other: [0; 12],
    };
    /// Invalid stateid (seqid u32::MAX, other zero).
    pub const INVALID: Stateid = Stateid {
        seqid: u32::MAX,
        other: [0; 12],
    };

    /// The anonymous or the READ bypass stateid: I/O without an open (RFC 8881 §8.2.3).
    pub fn is_anonymous_or_bypass(&self) -> bool {
        *self == Stateid::ANONYMOUS || *self == Stateid::BYPASS
    }
}

impl Xdr for Stateid {
    fn encode(&self, w: &mut XdrWriter) {
        w.u32(self.seqid);
        w.opaque_fixed(&self.other);
    }
    fn decode(r: &mut XdrReader<'_>) -> XdrResult<Self> {
        Ok(Stateid {
            seqid: r.u32()?,
            other: r.array()?,
        })
    }
}

/// `bitmap4`: at most 8 words are accepted from a client (we know attributes < 96).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bitmap(pub Vec<u32>);

impl Bitmap {
    pub fn is_set(&self, bit: u32) -> bool {
        let w = (bit / 32) as usize;
        w < self.0.len() && self.0[w] & (1 << (bit % 32)) != 0
    }
    pub fn set(&mut self, bit: u32) {
        let w = (bit / 32) as usize;
        if self.0.len() <= w {
            self.0.resize(w + 1, 0);
        }
        self.0[w] |= 1 << (bit % 32);
    }
    /// The set bits in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.0.len() as u32 * 32).filter(move |b| self.is_set(*b))
    }
}

impl Xdr for Bitmap {
    fn encode(&self, w: &mut XdrWriter) {
        // Trailing zero words are dropped: a shorter bitmap means the same.
        let mut n = self.0.len();
        while n > 0 && self.0[n - 1] == 0 {
            n -= 1;
        }
        w.u32(n as u32);
        for x in &self.0[..n] {
            w.u32(*x);
        }
    }
    fn decode(r: &mut XdrReader<'_>) -> XdrResult<Self> {
        let n = r.array_len(8, 4)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(r.u32()?);
        }
        Ok(Bitmap(v))
    }
}

/// `nfstime4`.
impl Xdr for Timespec {
    fn encode(&self, w: &mut XdrWriter) {
        w.i64(self.sec);
        w.u32(self.nsec);
    }
    fn decode(r: &mut XdrReader<'_>) -> XdrResult<Self> {
        let sec = r.i64()?;
        let nsec = r.u32()?;
        if nsec >= 1_000_000_000 {
            return Err(XdrError::BadValue);
        }
        Ok(Timespec { sec, nsec })
    }
}

/// `change_info4`: the store changes a directory under its lock, so `atomic` is true.
pub fn encode_change_info(w: &mut XdrWriter, c: &DirChange) {
    w.bool(true);
    w.u64(c.before);
    w.u64(c.after);
}

/// The filehandle of an object.
pub fn fh_of(a: &Attr) -> Fh {
    Fh {
        ino: a.ino,
        generation: a.generation,
    }
}

/// Our filehandle (`nfs_fh4` contents): magic, inode number and generation.
/// Fixed 16 bytes; anything else a client sends is BADHANDLE, a freed inode is STALE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fh {
    pub ino: Ino,
    pub generation: u32,
}

impl Fh {
    const MAGIC: u32 = 0x504e_4631; // "PNF1"
    pub const LEN: usize = 16;

    pub fn to_bytes(&self) -> [u8; Fh::LEN] {
        let mut b = [0u8; Fh::LEN];
        put_u32_be(&mut b, 0, Fh::MAGIC);
        put_u64_be(&mut b, 4, self.ino.0);
        put_u32_be(&mut b, 12, self.generation);
        b
    }

    /// `None` for anything that is not one of ours (the caller answers BADHANDLE).
    pub fn from_bytes(b: &[u8]) -> Option<Fh> {
        if b.len() != Fh::LEN || get_u32_be(b, 0).ok()? != Fh::MAGIC {
            return None;
        }
        let ino = get_u64_be(b, 4).ok()?;
        let generation = get_u32_be(b, 12).ok()?;
        Some(Fh {
            ino: Ino(ino),
            generation,
        })
    }
}

/// `stable_how4`.
pub const UNSTABLE4: u32 = 0;
pub const DATA_SYNC4: u32 = 1;
pub const FILE_SYNC4: u32 = 2;

pub fn stable_from_wire(v: u32) -> Result<Stable, NfsStat> {
    match v {
        UNSTABLE4 => Ok(Stable::Unstable),
        DATA_SYNC4 => Ok(Stable::DataSync),
        FILE_SYNC4 => Ok(Stable::FileSync),
        _ => Err(XdrError::BadValue.into()),
    }
}

pub fn stable_to_wire(s: Stable) -> u32 {
    match s {
        Stable::Unstable => UNSTABLE4,
        Stable::DataSync => DATA_SYNC4,
        Stable::FileSync => FILE_SYNC4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fh_round_trip_and_rejects_foreign_handles() {
        let fh = Fh {
            ino: Ino(42),
            generation: 7,
        };
        assert_eq!(Fh::from_bytes(&fh.to_bytes()), Some(fh));
        assert_eq!(Fh::from_bytes(&[0u8; 16]), None);
        assert_eq!(Fh::from_bytes(&fh.to_bytes()[..15]), None);
    }

    #[test]
    fn bitmap_drops_trailing_zero_words() {
        let mut b = Bitmap(vec![0, 0, 0]);
        b.set(33);
        let mut w = XdrWriter::new();
        b.encode(&mut w);
        assert_eq!(w.buf, vec![0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2]);
        assert!(Bitmap::decode(&mut XdrReader::new(&w.buf))
            .unwrap()
            .is_set(33));
    }
}
