//! Helpers shared by the namespace and I/O operations: the current / saved filehandle,
//! component names, `change_info4`, stateids of I/O operations and the file-type rules of
//! I/O (RFC 8881 §16.2.3, §18).

use crate::nfs4::attr::fs::MAX_NAME;
use crate::nfs4::compound::Ctx;
use crate::nfs4::state::IoAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Fh, Stateid};
use crate::store::{Attr, DirChange, FileType};
use crate::xdr::{XdrReader, XdrWriter};

/// The current filehandle (the dispatcher has checked it is set; NOFILEHANDLE otherwise).
pub fn cur_fh(ctx: &Ctx<'_>) -> Result<Fh, NfsStat> {
    ctx.current_fh.ok_or(NfsStat::NOFILEHANDLE)
}

/// The attributes behind a filehandle: STALE if the inode is gone or was reused.
pub fn fh_attr(ctx: &Ctx<'_>, fh: Fh) -> Result<Attr, NfsStat> {
    ctx.srv
        .store
        .getattr_gen(fh.ino, fh.generation)
        .map_err(|e| match NfsStat::from(e) {
            NfsStat::NOENT => NfsStat::STALE,
            s => s,
        })
}

pub fn cur_attr(ctx: &Ctx<'_>) -> Result<Attr, NfsStat> {
    fh_attr(ctx, cur_fh(ctx)?)
}

/// The saved filehandle's attributes (RENAME source directory, LINK source file).
pub fn saved_attr(ctx: &Ctx<'_>) -> Result<Attr, NfsStat> {
    fh_attr(ctx, ctx.saved_fh.ok_or(NfsStat::NOFILEHANDLE)?)
}

pub fn fh_of(a: &Attr) -> Fh {
    Fh {
        ino: a.ino,
        generation: a.generation,
    }
}

/// The current filehandle must be a directory (LOOKUP, CREATE, REMOVE, READDIR ...).
pub fn require_dir(a: &Attr) -> Result<(), NfsStat> {
    match a.ftype {
        FileType::Directory => Ok(()),
        _ => Err(NfsStat::NOTDIR),
    }
}

/// I/O (READ, WRITE, COMMIT, ALLOCATE, DEALLOCATE, SEEK) is for regular files: a directory
/// is ISDIR, anything else INVAL (RFC 8881 §18.22.3, §18.32.3).
pub fn require_regular(a: &Attr) -> Result<(), NfsStat> {
    match a.ftype {
        FileType::Regular => Ok(()),
        FileType::Directory => Err(NfsStat::ISDIR),
        _ => Err(NfsStat::INVAL),
    }
}

/// A `component4` read from the wire. Its length is checked by `check_name`, so the decode
/// bound is only what the request holds.
pub fn decode_component(r: &mut XdrReader<'_>) -> Result<Vec<u8>, NfsStat> {
    let n = r.remaining();
    Ok(r.string(n)?)
}

/// Rules for a name that is looked up or created (RFC 8881 §14.2, §18.4.3): empty → INVAL,
/// longer than `maxname` → NAMETOOLONG, not UTF-8 (or a noncharacter) → INVAL, a '/' or
/// NUL → BADCHAR.
pub fn check_name(name: &[u8]) -> Result<(), NfsStat> {
    if name.is_empty() {
        return Err(NfsStat::INVAL);
    }
    if name.len() > MAX_NAME as usize {
        return Err(NfsStat::NAMETOOLONG);
    }
    // U+FFFE and U+FFFF are not characters (ISO 10646): invalid in a utf8str too.
    match std::str::from_utf8(name) {
        Ok(s) if !s.contains(['\u{fffe}', '\u{ffff}']) => {}
        _ => return Err(NfsStat::INVAL),
    }
    if name.iter().any(|c| *c == b'/' || *c == 0) {
        return Err(NfsStat::BADCHAR);
    }
    Ok(())
}

/// A name that a new directory entry would get, or that is removed / renamed: "." and ".."
/// are never entries of an NFSv4 directory, so they are BADNAME.
pub fn check_new_name(name: &[u8]) -> Result<(), NfsStat> {
    check_name(name)?;
    if is_dot(name) {
        return Err(NfsStat::BADNAME);
    }
    Ok(())
}

pub fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// `change_info4`: the store changes a directory under its lock, so `atomic` is true.
pub fn encode_change_info(w: &mut XdrWriter, c: &DirChange) {
    w.bool(true);
    w.u64(c.before);
    w.u64(c.after);
}

/// The stateid an I/O operation names, with the special ones resolved (RFC 8881 §8.2.3,
/// §16.2.3.1.2): `Some(id)` to check against the state, `None` for anonymous / bypass I/O
/// (checked against the file's mode by the caller).
pub fn resolve_stateid(ctx: &Ctx<'_>, sid: &Stateid) -> Result<Option<Stateid>, NfsStat> {
    if *sid == Stateid::CURRENT {
        return match ctx.current_stateid {
            Some(s) if s != Stateid::INVALID => Ok(Some(s)),
            _ => Err(NfsStat::BAD_STATEID),
        };
    }
    if *sid == Stateid::ANONYMOUS || *sid == Stateid::BYPASS {
        return Ok(None);
    }
    Ok(Some(*sid))
}

/// Checks the stateid of READ / WRITE / SETATTR(size) / ALLOCATE / DEALLOCATE / SEEK.
/// Returns whether the I/O is anonymous (special stateid): such I/O is checked against the
/// mode bits, and is refused during the grace period (RFC 8881 §8.4.2: it could conflict
/// with a reclaimed share reservation).
pub fn check_stateid(
    ctx: &Ctx<'_>,
    sid: &Stateid,
    a: &Attr,
    access: IoAccess,
) -> Result<bool, NfsStat> {
    match resolve_stateid(ctx, sid)? {
        Some(s) => {
            let clientid = ctx.session.as_ref().map(|s| s.clientid);
            ctx.srv.state.check_io(clientid, &s, a.ino, access)?;
            Ok(false)
        }
        None => {
            if ctx.srv.state.in_grace() {
                return Err(NfsStat::GRACE);
            }
            let want = match access {
                IoAccess::Read => super::access::ACCESS4_READ,
                IoAccess::Write => super::access::ACCESS4_MODIFY,
            };
            super::access::require_owner_override(&ctx.cred, a, want)?;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(check_name(b""), Err(NfsStat::INVAL));
        assert_eq!(check_name(&[b'a'; 256]), Err(NfsStat::NAMETOOLONG));
        assert_eq!(check_name(&[b'a'; 255]), Ok(()));
        assert_eq!(check_name(b"\xff\xfe"), Err(NfsStat::INVAL));
        assert_eq!(check_name(b"\xef\xbf\xbe"), Err(NfsStat::INVAL));
        assert_eq!(check_name(b"\xed\xa0\x80"), Err(NfsStat::INVAL));
        assert_eq!(check_name(b"a/b"), Err(NfsStat::BADCHAR));
        assert_eq!(check_name(b"a\0b"), Err(NfsStat::BADCHAR));
        assert_eq!(check_name("é".as_bytes()), Ok(()));
        assert_eq!(check_name(b".."), Ok(()));
        assert_eq!(check_new_name(b".."), Err(NfsStat::BADNAME));
        assert_eq!(check_new_name(b"."), Err(NfsStat::BADNAME));
        assert_eq!(check_new_name(b"..."), Ok(()));
    }

    #[test]
    fn component_decoding() {
        let mut w = XdrWriter::new();
        w.string(b"hello");
        assert_eq!(
            decode_component(&mut XdrReader::new(&w.buf)),
            Ok(b"hello".to_vec())
        );
        // A length past the end of the request is BADXDR, not an allocation.
        assert_eq!(
            decode_component(&mut XdrReader::new(&[0xff, 0xff, 0xff, 0xff, b'a'])),
            Err(NfsStat::BADXDR)
        );
    }
}
