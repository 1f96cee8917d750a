//! Persist Through Power Loss (NVMe Base 2.0 §8.19, PTPL): the reservation state of a
//! namespace whose PTPL state is set, kept in one small file per namespace so that it is
//! back when the target starts again — before any host connects (`Target::bind` loads it).
//!
//! Why a file of our own and not the embedder's store or log: the target knows nothing of
//! its embedder (pnfsd's store is a layer above, and the block device under the namespace
//! is the clients' data, not ours to write); the state is a few hundred bytes, changed only
//! by the rare reservation commands, and must be durable before the command completes —
//! one `fsync` of a small file is that, with nothing to replay. The file carries the
//! namespace's volume UUID, so the state of another volume (a re-formatted one) is never
//! applied.
//!
//! Writing (`PtplFile::save`): the whole state goes to `<name>.tmp`, which is fsynced, renamed
//! over `<name>`, and the directory fsynced — a crash leaves the old file or the new one,
//! never a mix; only then does the command complete (`command`). Reading never trusts a
//! length and never panics: a missing, unreadable, corrupt or foreign file is logged and
//! gives an empty state, which fences every host until it registers again (the safe side).
//!
//! On-disk format, little-endian (version 1):
//! ```text
//!  0   8  magic "PNFSDRSV"
//!  8   4  version = 1
//! 12   4  nsid
//! 16  16  volume UUID of the namespace
//! 32   4  generation
//! 36   1  PTPL state (0 | 1)
//! 37   1  reservation type (0 = none, 1..=6 RTYPE)
//! 38   2  zero
//! 40  16  holder's Host Identifier (zero without a reservation)
//! 56   4  number of registrants n
//! 60  24n registrants: Host Identifier 16 | key 8
//! 60+24n  4  CRC32C of every byte before it
//! ```

use super::{Holder, RType, Registrant, Reservations};
use crate::namespace::lock;
use bytecodec::Writer;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub const MAGIC: [u8; 8] = *b"PNFSDRSV";
pub const VERSION: u32 = 1;
/// Bytes before the first registrant.
pub const HEADER_LEN: usize = 60;
/// Bytes of one registrant.
pub const ENTRY_LEN: usize = 24;
const CRC_LEN: usize = 4;
const _: () = assert!(HEADER_LEN == 8 + 4 + 4 + 16 + 4 + 1 + 1 + 2 + 16 + 4);
const _: () = assert!(ENTRY_LEN == 16 + 8);

/// Why a stored state was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("{0} bytes: shorter than the {HEADER_LEN}-byte header and checksum")]
    Short(usize),
    #[error("not a reservation state file (bad magic)")]
    Magic,
    #[error("format version {0}, this build reads {VERSION}")]
    Version(u32),
    #[error("checksum mismatch")]
    Checksum,
    #[error("{len} bytes do not hold the header, {count} registrants and the checksum")]
    Length { len: usize, count: u32 },
    #[error("state of namespace {0}")]
    OtherNamespace(u32),
    #[error("state of another volume")]
    OtherVolume,
    #[error("inconsistent: {0}")]
    Inconsistent(&'static str),
}

fn le32(b: &[u8], o: usize) -> Result<u32, FormatError> {
    bytecodec::get_u32_le(b, o).map_err(|_| FormatError::Short(b.len()))
}

fn le64(b: &[u8], o: usize) -> Result<u64, FormatError> {
    bytecodec::get_u64_le(b, o).map_err(|_| FormatError::Short(b.len()))
}

fn id16(b: &[u8], o: usize) -> Result<[u8; 16], FormatError> {
    bytecodec::get_array(b, o).map_err(|_| FormatError::Short(b.len()))
}

/// The file image of `r` for namespace `nsid` of the volume `uuid`.
pub fn encode(r: &Reservations, nsid: u32, uuid: [u8; 16]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + ENTRY_LEN * r.registrants.len() + CRC_LEN);
    Writer::new(&mut v)
        .bytes(&MAGIC)
        .u32_le(VERSION)
        .u32_le(nsid)
        .bytes(&uuid)
        .u32_le(r.generation)
        .u8(r.ptpl as u8)
        .u8(r.holder.map_or(0, |h| h.rtype.0))
        .zeros(2)
        .bytes(&r.holder.map_or([0; 16], |h| h.hostid))
        .u32_le(r.registrants.len() as u32);
    debug_assert_eq!(v.len(), HEADER_LEN);
    for reg in &r.registrants {
        Writer::new(&mut v).bytes(&reg.hostid).u64_le(reg.key);
    }
    let crc = crc32c::crc32c(&v);
    Writer::new(&mut v).u32_le(crc);
    v
}

/// The state in `b`, if it is a whole, consistent image for namespace `nsid` of `uuid`.
pub fn decode(b: &[u8], nsid: u32, uuid: [u8; 16]) -> Result<Reservations, FormatError> {
    if b.len() < HEADER_LEN + CRC_LEN {
        return Err(FormatError::Short(b.len()));
    }
    if b[0..8] != MAGIC {
        return Err(FormatError::Magic);
    }
    let version = le32(b, 8)?;
    if version != VERSION {
        return Err(FormatError::Version(version));
    }
    let count = le32(b, 56)?;
    // The count is checked against the bytes before anything is read by it.
    let want = (count as usize)
        .checked_mul(ENTRY_LEN)
        .and_then(|n| n.checked_add(HEADER_LEN + CRC_LEN));
    if want != Some(b.len()) {
        return Err(FormatError::Length {
            len: b.len(),
            count,
        });
    }
    let body = b.len() - CRC_LEN;
    if crc32c::crc32c(&b[..body]) != le32(b, body)? {
        return Err(FormatError::Checksum);
    }
    let ns = le32(b, 12)?;
    if ns != nsid {
        return Err(FormatError::OtherNamespace(ns));
    }
    if id16(b, 16)? != uuid {
        return Err(FormatError::OtherVolume);
    }
    let ptpl = match b[36] {
        0 => false,
        1 => true,
        _ => return Err(FormatError::Inconsistent("PTPL state is not 0 or 1")),
    };
    let mut registrants: Vec<Registrant> = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let o = HEADER_LEN + i * ENTRY_LEN;
        let hostid = id16(b, o)?;
        if registrants.iter().any(|r| r.hostid == hostid) {
            return Err(FormatError::Inconsistent("a host registered twice"));
        }
        registrants.push(Registrant {
            hostid,
            key: le64(b, o + 16)?,
            // The controller is gone with the restart (reports say FFFFh anyway).
            cntlid: 0xFFFF,
        });
    }
    let holder = match RType(b[37]) {
        RType(0) => None,
        t if t.valid() => {
            let hostid = id16(b, 40)?;
            if !registrants.iter().any(|r| r.hostid == hostid) {
                return Err(FormatError::Inconsistent("the holder is not a registrant"));
            }
            Some(Holder { rtype: t, hostid })
        }
        _ => return Err(FormatError::Inconsistent("unknown reservation type")),
    };
    Ok(Reservations {
        generation: le32(b, 32)?,
        registrants,
        holder,
        ptpl,
    })
}

/// Of the hosts registered when the state was restored: how many have connected an I/O queue
/// since, and how many, still registered, have not (`Target::reservation_restored_hosts`).
/// A host's commands on the volume fail at once while its controller reconnects, so an
/// embedder may wait for them (pnfsd holds SCSI layouts back: docs/pnfs.md "After a
/// restart").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoredHosts {
    pub reconnected: usize,
    pub awaited: usize,
}

/// Where one namespace's state is kept, and the lock that orders its reservation commands
/// (`command::update`): a command builds its new state, saves it, and only then installs
/// it, so the state I/O commands check (`Namespace::resv`) is never one that is not on disk.
pub(crate) struct PtplFile {
    path: PathBuf,
    tmp: PathBuf,
    dir: PathBuf,
    nsid: u32,
    uuid: [u8; 16],
    pub(crate) writer: Mutex<()>,
    /// The hosts registered in the restored state → whether they connected since.
    restored: Mutex<HashMap<[u8; 16], bool>>,
}

impl PtplFile {
    /// The file of namespace `nsid` in `dir` (created if missing) and the state it holds.
    /// Only `dir` failing is an error; any trouble with the file is logged and gives the
    /// empty state.
    pub fn open(
        dir: &Path,
        nsid: u32,
        uuid: [u8; 16],
    ) -> std::io::Result<(PtplFile, Reservations)> {
        std::fs::create_dir_all(dir)?;
        let name = format!("nvme-ns{nsid}.reservations");
        let f = PtplFile {
            path: dir.join(&name),
            tmp: dir.join(format!("{name}.tmp")),
            dir: dir.to_path_buf(),
            nsid,
            uuid,
            writer: Mutex::new(()),
            restored: Mutex::new(HashMap::new()),
        };
        // A temporary file is what a crash in the middle of `save` left: never the state.
        let _ = std::fs::remove_file(&f.tmp);
        let state = f.load();
        *lock(&f.restored) = state
            .registrants
            .iter()
            .map(|r| (r.hostid, false))
            .collect();
        Ok((f, state))
    }

    /// `hostid` connected an I/O queue.
    pub fn host_connected(&self, hostid: &[u8; 16]) {
        if let Some(back) = lock(&self.restored).get_mut(hostid) {
            *back = true;
        }
    }

    /// `hostid` is the embedder itself (the in-process API): not a host to wait for.
    pub fn host_in_process(&self, hostid: &[u8; 16]) {
        lock(&self.restored).remove(hostid);
    }

    /// The restored hosts, against the registrations of `now` (a host no longer registered
    /// is not awaited).
    pub fn restored_hosts(&self, now: &Reservations) -> RestoredHosts {
        let r = lock(&self.restored);
        let reconnected = r.values().filter(|b| **b).count();
        let awaited = r
            .iter()
            .filter(|(h, b)| !**b && now.find(h).is_some())
            .count();
        RestoredHosts {
            reconnected,
            awaited,
        }
    }

    /// What a start finds: the stored state when PTPL was set, else nothing.
    fn load(&self) -> Reservations {
        let p = self.path.display();
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::info!(
                    nsid = self.nsid,
                    "no reservation state in {p}: none restored"
                );
                return Reservations::default();
            }
            Err(e) => {
                tracing::error!(
                    nsid = self.nsid,
                    "reservation state in {p} unreadable ({e}): starting with no registrants \
                     and no reservation"
                );
                return Reservations::default();
            }
        };
        match decode(&bytes, self.nsid, self.uuid) {
            Ok(r) if r.ptpl => {
                tracing::info!(
                    nsid = self.nsid,
                    registrants = r.registrants.len(),
                    rtype = r.holder.map_or(0, |h| h.rtype.0),
                    generation = r.generation,
                    "reservations restored from {p} (persist through power loss)"
                );
                r
            }
            Ok(_) => {
                tracing::info!(
                    nsid = self.nsid,
                    "PTPL was off in {p}: no reservation restored"
                );
                Reservations::default()
            }
            Err(e) => {
                tracing::error!(
                    nsid = self.nsid,
                    "reservation state in {p} not taken ({e}): starting with no registrants \
                     and no reservation"
                );
                Reservations::default()
            }
        }
    }

    /// Makes `r` the stored state, durably (temp + fsync + rename + directory fsync).
    pub fn save(&self, r: &Reservations) -> std::io::Result<()> {
        let image = encode(r, self.nsid, self.uuid);
        {
            let mut f = std::fs::File::create(&self.tmp)?;
            f.write_all(&image)?;
            f.sync_all()?;
        }
        std::fs::rename(&self.tmp, &self.path)?;
        std::fs::File::open(&self.dir)?.sync_all()
    }

    /// Whether `a` and `b` store the same bytes (no write is needed to go from one to the
    /// other).
    pub fn same(&self, a: &Reservations, b: &Reservations) -> bool {
        encode(a, self.nsid, self.uuid) == encode(b, self.nsid, self.uuid)
    }
}

/// Runs `f` on the state under `writer`'s order: on a copy, which is saved when PTPL is or
/// was set and differs from what is stored, then installed. An error from `f` changes
/// nothing; a failed save changes nothing and fails the command (Internal Error), so a
/// completed command is always on disk.
pub(crate) fn update<T>(
    file: &PtplFile,
    resv: &Mutex<Reservations>,
    f: impl FnOnce(&mut Reservations) -> Result<T, crate::status::Status>,
) -> Result<T, crate::status::Status> {
    let _order = lock(&file.writer);
    let before = lock(resv).clone();
    let mut next = before.clone();
    let out = f(&mut next)?;
    if (before.ptpl || next.ptpl) && !file.same(&before, &next) {
        if let Err(e) = file.save(&next) {
            tracing::error!(
                "reservation state not saved to {} ({e}): the command fails and changes nothing",
                file.path.display()
            );
            return Err(crate::status::Status::INTERNAL);
        }
    }
    *lock(resv) = next;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::{AcquireAction, RegisterAction, Requester};

    const UUID: [u8; 16] = [7; 16];

    fn host(n: u8) -> Requester {
        Requester {
            hostid: [n; 16],
            cntlid: n as u16,
        }
    }

    fn sample() -> Reservations {
        let mut r = Reservations::default();
        r.register(&host(1), RegisterAction::Register, false, 0, 0xA)
            .unwrap();
        r.register(&host(2), RegisterAction::Register, false, 0, 0xB)
            .unwrap();
        r.acquire(
            &host(1),
            AcquireAction::Acquire,
            false,
            RType::EXCLUSIVE_ACCESS_REG_ONLY,
            0xA,
            0,
        )
        .unwrap();
        r.set_ptpl(true);
        r
    }

    #[test]
    fn state_round_trips() {
        let r = sample();
        let b = encode(&r, 1, UUID);
        assert_eq!(b.len(), HEADER_LEN + 2 * ENTRY_LEN + CRC_LEN);
        let back = decode(&b, 1, UUID).unwrap();
        assert_eq!(back.generation(), r.generation());
        assert_eq!(back.rtype(), Some(RType::EXCLUSIVE_ACCESS_REG_ONLY));
        assert!(back.ptpl());
        let keys: Vec<_> = back
            .registrants()
            .iter()
            .map(|x| (x.hostid, x.key))
            .collect();
        assert_eq!(keys, vec![([1; 16], 0xA), ([2; 16], 0xB)]);
        // The holder came back: it may still write, a stranger may not.
        use crate::reservation::Access;
        assert!(back.check(&[1; 16], Access::Write).is_ok());
        assert!(back.check(&[2; 16], Access::Write).is_ok());
        assert!(back.check(&[3; 16], Access::Read).is_err());
        // The same image again: nothing else is stored.
        assert_eq!(encode(&back, 1, UUID), b);
    }

    #[test]
    fn damaged_or_foreign_images_are_refused() {
        let b = encode(&sample(), 1, UUID);
        assert_eq!(
            decode(&b[..10], 1, UUID).err(),
            Some(FormatError::Short(10))
        );
        assert_eq!(
            decode(&b, 2, UUID).err(),
            Some(FormatError::OtherNamespace(1))
        );
        assert_eq!(decode(&b, 1, [8; 16]).err(), Some(FormatError::OtherVolume));
        let mut bad = b.clone();
        bad[0] ^= 1;
        assert_eq!(decode(&bad, 1, UUID).err(), Some(FormatError::Magic));
        let mut bad = b.clone();
        bad[HEADER_LEN + 3] ^= 0x40; // a host id byte
        assert_eq!(decode(&bad, 1, UUID).err(), Some(FormatError::Checksum));
        // A count that lies, even a huge one, is caught before anything is read by it.
        for n in [3u32, 1, u32::MAX] {
            let mut bad = b.clone();
            bytecodec::put_u32_le(&mut bad, 56, n);
            assert!(matches!(
                decode(&bad, 1, UUID),
                Err(FormatError::Length { .. })
            ));
        }
        assert!(matches!(
            decode(&b[..b.len() - 1], 1, UUID),
            Err(FormatError::Length { .. })
        ));
        // Every truncation and every single-bit flip is refused, never a panic.
        for cut in 0..b.len() {
            assert!(decode(&b[..cut], 1, UUID).is_err(), "cut at {cut}");
        }
        for i in 0..b.len() * 8 {
            let mut bad = b.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(decode(&bad, 1, UUID).is_err(), "bit {i}");
        }
    }

    /// An image whose checksum is right but whose content is not a state the machine can
    /// reach (a holder that is not registered) is refused too.
    #[test]
    fn inconsistent_images_are_refused() {
        let mut b = encode(&sample(), 1, UUID);
        b[40..56].copy_from_slice(&[9; 16]);
        let body = b.len() - CRC_LEN;
        let crc = crc32c::crc32c(&b[..body]);
        bytecodec::put_u32_le(&mut b, body, crc);
        assert!(matches!(
            decode(&b, 1, UUID),
            Err(FormatError::Inconsistent(_))
        ));
    }

    #[test]
    fn files_survive_and_damage_gives_an_empty_state() {
        let dir = tempfile::tempdir().unwrap();
        let (f, r) = PtplFile::open(dir.path(), 1, UUID).unwrap();
        assert!(r.registrants().is_empty());
        f.save(&sample()).unwrap();
        assert!(!f.tmp.exists());
        let (f, r) = PtplFile::open(dir.path(), 1, UUID).unwrap();
        assert_eq!(r.registrants().len(), 2);
        // Another volume's file is not applied.
        let (_, other) = PtplFile::open(dir.path(), 1, [8; 16]).unwrap();
        assert!(other.registrants().is_empty() && other.rtype().is_none());
        // A torn file: an empty state, no panic.
        let full = std::fs::read(&f.path).unwrap();
        std::fs::write(&f.path, &full[..full.len() / 2]).unwrap();
        let (_, r) = PtplFile::open(dir.path(), 1, UUID).unwrap();
        assert!(r.registrants().is_empty());
        // PTPL off: the state is not restored.
        let mut off = sample();
        off.set_ptpl(false);
        f.save(&off).unwrap();
        let (_, r) = PtplFile::open(dir.path(), 1, UUID).unwrap();
        assert!(r.registrants().is_empty() && !r.ptpl());
    }

    /// A change that cannot be saved does not happen: the command fails (Internal Error) and
    /// the state hosts are checked against stays the stored one.
    #[test]
    fn an_unsaved_change_does_not_take_effect() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("resv");
        let (f, r) = PtplFile::open(&sub, 1, UUID).unwrap();
        let resv = Mutex::new(r);
        update(&f, &resv, |r| {
            r.register(&host(1), RegisterAction::Register, false, 0, 0xA)?;
            r.set_ptpl(true);
            Ok(())
        })
        .unwrap();
        std::fs::remove_dir_all(&sub).unwrap();
        let r = update(&f, &resv, |r| {
            r.register(&host(2), RegisterAction::Register, false, 0, 0xB)
        });
        assert_eq!(r, Err(crate::status::Status::INTERNAL));
        assert_eq!(lock(&resv).registrants().len(), 1);
        // An action refused by the state machine writes nothing either.
        let r = update(&f, &resv, |r| {
            r.register(&host(1), RegisterAction::Register, false, 0, 0xC)
        });
        assert_eq!(r, Err(crate::status::Status::RESERVATION_CONFLICT));
        // With PTPL off and staying off, nothing is written at all (the directory is gone).
        let (f2, r2) = PtplFile::open(&dir.path().join("other"), 1, UUID).unwrap();
        std::fs::remove_dir_all(dir.path().join("other")).unwrap();
        let resv2 = Mutex::new(r2);
        update(&f2, &resv2, |r| {
            r.register(&host(1), RegisterAction::Register, false, 0, 0xA)
        })
        .unwrap();
        assert_eq!(lock(&resv2).registrants().len(), 1);
    }
}
