//! The store's on-disk format in the metadata area (style.md rule 4): the object table and the
//! object records. Little-endian, explicit widths.
//!
//! ```text
//! metadata area: [ object table: TABLE_ENTRY bytes per slot ][ object blocks ............ ]
//! slot = inode number (slot 0 = client records); entry → whole blocks holding one object
//! ```
//! An entry is 32 bytes and never straddles a 512-byte sector, so a torn table write leaves each
//! entry either old or new; its own CRC (seeded with the slot) rejects anything else.

use layout::ExtState;

use super::inode::{ftype_from_u8, ftype_to_u8, Dir, Inode, Meta};
use super::{Timespec, BLOCK};

pub const TABLE_ENTRY: usize = 32;
pub const ENTRIES_PER_BLOCK: u64 = BLOCK / TABLE_ENTRY as u64;
const _: () = assert!(512 % TABLE_ENTRY == 0);
const OBJ_MAGIC: u32 = 0x504e_4f42; // "PNOB"

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableEntry {
    /// First block of the object (absolute); 0 = no object in this slot.
    pub start: u64,
    pub nblocks: u32,
    /// Generation of the slot (kept when the inode is freed, so reuse gets gen + 1).
    pub gen: u32,
    pub obj_len: u32,
    pub obj_crc: u32,
}

impl TableEntry {
    pub fn encode(&self, slot: u64, out: &mut [u8]) {
        out[..TABLE_ENTRY].fill(0);
        out[0..8].copy_from_slice(&self.start.to_le_bytes());
        out[8..12].copy_from_slice(&self.nblocks.to_le_bytes());
        out[12..16].copy_from_slice(&self.gen.to_le_bytes());
        out[16..20].copy_from_slice(&self.obj_len.to_le_bytes());
        out[20..24].copy_from_slice(&self.obj_crc.to_le_bytes());
        let crc = entry_crc(slot, &out[..28]);
        out[28..32].copy_from_slice(&crc.to_le_bytes());
    }

    /// `Ok(None)` for a never-used (all-zero) entry.
    pub fn decode(slot: u64, b: &[u8]) -> Result<Option<TableEntry>, String> {
        if b[..TABLE_ENTRY].iter().all(|&x| x == 0) {
            return Ok(None);
        }
        if entry_crc(slot, &b[..28]) != u32le(b, 28) {
            return Err(format!("object table entry {slot}: bad checksum"));
        }
        Ok(Some(TableEntry {
            start: u64le(b, 0),
            nblocks: u32le(b, 8),
            gen: u32le(b, 12),
            obj_len: u32le(b, 16),
            obj_crc: u32le(b, 20),
        }))
    }
}

fn entry_crc(slot: u64, b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&slot.to_le_bytes()), b)
}

fn u32le(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}
fn u64le(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

struct W(Vec<u8>);
impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn ts(&mut self, t: Timespec) {
        self.u64(t.sec as u64);
        self.u32(t.nsec);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
    }
}

struct R<'a>(&'a [u8]);
impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("object record truncated".into());
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32le(self.take(4)?, 0))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64le(self.take(8)?, 0))
    }
    fn ts(&mut self) -> Result<Timespec, String> {
        Ok(Timespec {
            sec: self.u64()? as i64,
            nsec: self.u32()?,
        })
    }
    fn bytes(&mut self) -> Result<Vec<u8>, String> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

/// Encode an inode object (core, extents, directory entries, symlink target).
pub fn encode_inode(ino: u64, i: &Inode) -> Vec<u8> {
    let mut w = W(Vec::with_capacity(256));
    w.u32(OBJ_MAGIC);
    w.u64(ino);
    let m = &i.m;
    w.u32(m.gen);
    w.u8(ftype_to_u8(m.ftype));
    w.u32(m.mode);
    w.u32(m.uid);
    w.u32(m.gid);
    w.u32(m.nlink);
    w.u32(m.rdev.0);
    w.u32(m.rdev.1);
    w.u64(m.size);
    for t in [m.atime, m.mtime, m.ctime, m.crtime] {
        w.ts(t);
    }
    w.u64(m.change);
    w.u64(m.parent);
    w.bytes(&i.symlink);
    let exts: Vec<_> = i.ext.iter().collect();
    w.u64(exts.len() as u64);
    for (f, p, l, s) in exts {
        w.u64(f);
        w.u64(p);
        w.u64(l);
        w.u8(matches!(s, ExtState::Unwritten) as u8);
    }
    match &i.dir {
        Some(d) => {
            w.u8(1);
            w.u64(d.next_cookie);
            w.u64(d.by_cookie.len() as u64);
            for (&cookie, name) in &d.by_cookie {
                let ino = d.by_name.get(name).map_or(0, |e| e.0);
                w.u64(cookie);
                w.u64(ino);
                w.bytes(name);
            }
        }
        None => w.u8(0),
    }
    // Extended attributes last: an object written before they existed simply ends here.
    w.u64(i.xattrs.len() as u64);
    for (name, value) in &i.xattrs {
        w.bytes(name);
        w.bytes(value);
    }
    w.0
}

pub fn decode_inode(b: &[u8]) -> Result<(u64, Inode), String> {
    let mut r = R(b);
    if r.u32()? != OBJ_MAGIC {
        return Err("object record: bad magic".into());
    }
    let ino = r.u64()?;
    let gen = r.u32()?;
    let ft = r.u8()?;
    let ftype = ftype_from_u8(ft).ok_or_else(|| format!("object {ino}: bad type {ft}"))?;
    let m = Meta {
        gen,
        ftype,
        mode: r.u32()?,
        uid: r.u32()?,
        gid: r.u32()?,
        nlink: r.u32()?,
        rdev: (r.u32()?, r.u32()?),
        size: r.u64()?,
        atime: r.ts()?,
        mtime: r.ts()?,
        ctime: r.ts()?,
        crtime: r.ts()?,
        change: r.u64()?,
        parent: r.u64()?,
    };
    let mut i = Inode::new(m);
    i.dir = None;
    i.symlink = r.bytes()?;
    let n = r.u64()?;
    for _ in 0..n {
        let (f, p, l) = (r.u64()?, r.u64()?, r.u64()?);
        if !extent_ok(f, p, l) {
            return Err(format!("object {ino}: bad extent {f}+{l} at {p}"));
        }
        let st = if r.u8()? == 1 {
            ExtState::Unwritten
        } else {
            ExtState::Written
        };
        i.ext.set(f, p, l, st);
    }
    if r.u8()? == 1 {
        let mut d = Dir::new();
        let next = r.u64()?;
        let n = r.u64()?;
        for _ in 0..n {
            let cookie = r.u64()?;
            let child = r.u64()?;
            let name = r.bytes()?;
            d.add(&name, child, cookie);
        }
        d.next_cookie = d.next_cookie.max(next);
        i.dir = Some(d);
    }
    if !r.0.is_empty() {
        let n = r.u64()?;
        for _ in 0..n {
            let name = r.bytes()?;
            let value = r.bytes()?;
            i.xattrs.insert(name, value);
        }
    }
    Ok((ino, i))
}

/// An extent whose numbers cannot overflow block arithmetic (a disk may say anything).
pub fn extent_ok(file_block: u64, phys_block: u64, len: u64) -> bool {
    const LIMIT: u64 = 1 << 62;
    len > 0 && file_block < LIMIT && phys_block < LIMIT && len < LIMIT
}

/// Client records (slot 0).
pub fn encode_clients<'a>(recs: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>) -> Vec<u8> {
    let mut w = W(Vec::new());
    w.u32(OBJ_MAGIC ^ 1);
    let recs: Vec<_> = recs.collect();
    w.u64(recs.len() as u64);
    for (k, v) in recs {
        w.bytes(k);
        w.bytes(v);
    }
    w.0
}

/// (key, value) pairs of the client records.
pub type ClientRecords = Vec<(Vec<u8>, Vec<u8>)>;

pub fn decode_clients(b: &[u8]) -> Result<ClientRecords, String> {
    let mut r = R(b);
    if r.u32()? != OBJ_MAGIC ^ 1 {
        return Err("client records: bad magic".into());
    }
    let n = r.u64()?;
    let mut out = Vec::new();
    for _ in 0..n {
        out.push((r.bytes()?, r.bytes()?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FileType;
    use layout::ExtentMap;

    #[test]
    fn entry_round_trip_and_slot_binding() {
        let e = TableEntry {
            start: 77,
            nblocks: 2,
            gen: 3,
            obj_len: 5000,
            obj_crc: 9,
        };
        let mut b = [0u8; TABLE_ENTRY];
        e.encode(5, &mut b);
        assert_eq!(TableEntry::decode(5, &b).unwrap(), Some(e));
        assert!(
            TableEntry::decode(6, &b).is_err(),
            "an entry moved to another slot fails"
        );
        assert_eq!(TableEntry::decode(6, &[0u8; TABLE_ENTRY]).unwrap(), None);
    }

    #[test]
    fn inode_round_trip() {
        let mut d = Dir::new();
        d.add(b"a", 5, 3);
        d.add(b"bb", 6, 9);
        let mut ext = ExtentMap::new();
        ext.set(0, 100, 4, ExtState::Written);
        ext.set(10, 200, 1, ExtState::Unwritten);
        let i = Inode {
            m: Meta {
                gen: 2,
                ftype: FileType::Directory,
                mode: 0o755,
                uid: 1,
                gid: 2,
                nlink: 3,
                rdev: (0, 0),
                size: 4096,
                atime: Timespec { sec: 1, nsec: 2 },
                mtime: Timespec { sec: 3, nsec: 4 },
                ctime: Timespec { sec: 5, nsec: 6 },
                crtime: Timespec { sec: 7, nsec: 8 },
                change: 99,
                parent: 1,
            },
            ext,
            dir: Some(d),
            symlink: b"x".to_vec(),
            xattrs: [(b"user.a".to_vec(), b"v".to_vec())].into_iter().collect(),
        };
        let b = encode_inode(42, &i);
        let (ino, j) = decode_inode(&b).unwrap();
        assert_eq!(ino, 42);
        assert_eq!(j, i);
        assert!(decode_inode(&b[..b.len() - 3]).is_err());
    }
}
