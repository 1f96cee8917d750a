//! Small helpers the session and state operations share: the caller's principal and client,
//! the current stateid (RFC 8881 §16.2.3.1.2), owners, callback security parameters, and the
//! file-type rules of OPEN/LOCK. No policy: that is in `nfs4::state`.

use crate::nfs4::compound::Ctx;
use crate::nfs4::state::Principal;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Stateid, NFS4_OPAQUE_LIMIT};
use crate::rpc::CbCred;
use crate::rpc::Cred;
use crate::store::{Attr, FileType, Ino};
use crate::xdr::{XdrReader, XdrResult};

/// The principal of the request: who owns client records (RFC 8881 §2.4).
pub fn principal(ctx: &Ctx<'_>) -> Principal {
    Principal {
        flavor: ctx.cred.flavor,
        uid: ctx.cred.uid,
    }
}

/// The client of the COMPOUND's session (the dispatcher put SEQUENCE first).
pub fn clientid(ctx: &Ctx<'_>) -> Result<u64, NfsStat> {
    ctx.session
        .as_ref()
        .map(|s| s.clientid)
        .ok_or(NfsStat::OP_NOT_IN_SESSION)
}

/// RFC 8881 §16.2.3.1.2: the special "current stateid" stands for the one the previous
/// operation produced; without one it is BAD_STATEID.
pub fn resolve_stateid(ctx: &Ctx<'_>, sid: Stateid) -> Result<Stateid, NfsStat> {
    if sid == Stateid::CURRENT {
        ctx.current_stateid.ok_or(NfsStat::BAD_STATEID)
    } else {
        Ok(sid)
    }
}

/// The current filehandle's inode and attributes.
pub fn current_attr(ctx: &Ctx<'_>) -> Result<Attr, NfsStat> {
    let fh = ctx.current_fh.ok_or(NfsStat::NOFILEHANDLE)?;
    Ok(ctx.srv.store.getattr_gen(fh.ino, fh.generation)?)
}

/// OPEN and the lock operations work on regular files only: a directory is ISDIR, a
/// symlink SYMLINK, anything else `other` (RFC 8881 §18.16.3: WRONG_TYPE for OPEN;
/// knfsd answers INVAL for locks).
pub fn regular(a: &Attr, other: NfsStat) -> Result<Ino, NfsStat> {
    match a.ftype {
        FileType::Regular => Ok(a.ino),
        FileType::Directory => Err(NfsStat::ISDIR),
        FileType::Symlink => Err(NfsStat::SYMLINK),
        _ => Err(other),
    }
}

/// `open_owner4` / `lock_owner4`: the clientid and the opaque owner.
pub fn decode_owner(r: &mut XdrReader<'_>) -> XdrResult<(u64, Vec<u8>)> {
    let clientid = r.u64()?;
    let owner = r.opaque_vec(NFS4_OPAQUE_LIMIT)?;
    Ok((clientid, owner))
}

/// `callback_sec_parms4<>` with the credential callbacks use: the first AUTH_NONE or
/// AUTH_SYS entry (no RPCSEC_GSS on the backchannel).
pub fn decode_cb_sec(r: &mut XdrReader<'_>) -> XdrResult<(Vec<u32>, Option<CbCred>)> {
    let n = r.array_len(16, 4)?;
    let mut flavors = Vec::with_capacity(n);
    let mut cred = None;
    for _ in 0..n {
        let flavor = r.u32()?;
        match flavor {
            0 => {
                cred.get_or_insert(CbCred::None);
            }
            1 => {
                let _stamp = r.u32()?;
                let machine = r.opaque(255)?.to_vec();
                let uid = r.u32()?;
                let gid = r.u32()?;
                let g = r.array_len(16, 4)?;
                let mut gids = Vec::with_capacity(g);
                for _ in 0..g {
                    gids.push(r.u32()?);
                }
                cred.get_or_insert(CbCred::Sys(Cred {
                    flavor: 1,
                    uid,
                    gid,
                    gids,
                    machine,
                }));
            }
            6 => {
                let _service = r.u32()?;
                let _from_server = r.opaque(NFS4_OPAQUE_LIMIT)?;
                let _from_client = r.opaque(NFS4_OPAQUE_LIMIT)?;
            }
            _ => return Err(crate::xdr::XdrError::BadValue),
        }
        flavors.push(flavor);
    }
    Ok((flavors, cred))
}

/// `nfs_lock_type4`: READ_LT 1, WRITE_LT 2, READW_LT 3, WRITEW_LT 4 → is it a write lock.
/// We never block, so the W forms are the same as the others (the client polls).
pub fn lock_is_write(locktype: u32) -> Result<bool, NfsStat> {
    match locktype {
        1 | 3 => Ok(false),
        2 | 4 => Ok(true),
        _ => Err(NfsStat::INVAL),
    }
}

/// Whether `cred` may read / write a file by its mode bits (uid 0 may always).
pub fn may_access(ctx: &Ctx<'_>, a: &Attr, read: bool, write: bool) -> bool {
    let c = &ctx.cred;
    if c.uid == 0 {
        return true;
    }
    let bits = if c.uid == a.uid {
        a.mode >> 6
    } else if c.gid == a.gid || c.gids.contains(&a.gid) {
        a.mode >> 3
    } else {
        a.mode
    };
    (!read || bits & 4 != 0) && (!write || bits & 2 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdr::XdrWriter;

    #[test]
    fn cb_sec_parms_decode_and_refuse_unknown_flavors() {
        let mut w = XdrWriter::new();
        w.u32(2);
        w.u32(0);
        w.u32(1);
        w.u32(7);
        w.opaque(b"host");
        w.u32(0);
        w.u32(0);
        w.u32(1);
        w.u32(10);
        let mut r = XdrReader::new(&w.buf);
        // The first usable entry (AUTH_NONE) is what callbacks use.
        assert_eq!(
            decode_cb_sec(&mut r).unwrap(),
            (vec![0, 1], Some(CbCred::None))
        );
        r.finish().unwrap();
        // AUTH_SYS alone: its ids and machine name.
        let r = XdrReader::new(&w.buf[8..]);
        let mut sys = vec![0, 0, 0, 1];
        sys.extend_from_slice(r.rest());
        let (_, cred) = decode_cb_sec(&mut XdrReader::new(&sys)).unwrap();
        let Some(CbCred::Sys(c)) = cred else {
            panic!("{cred:?}")
        };
        assert_eq!(
            (c.uid, c.gid, c.gids, c.machine),
            (0, 0, vec![10], b"host".to_vec())
        );
        let mut w = XdrWriter::new();
        w.u32(1);
        w.u32(5);
        assert!(decode_cb_sec(&mut XdrReader::new(&w.buf)).is_err());
    }

    #[test]
    fn lock_types() {
        assert_eq!(lock_is_write(1), Ok(false));
        assert_eq!(lock_is_write(4), Ok(true));
        assert_eq!(lock_is_write(0), Err(NfsStat::INVAL));
        assert_eq!(lock_is_write(5), Err(NfsStat::INVAL));
    }
}

#[cfg(test)]
mod decode_fuzz {
    //! Whatever bytes a client sends, the argument decoders answer an error, never a panic,
    //! and never read past what they were given.
    use crate::nfs4::ops::open::OpenArgs;
    use crate::nfs4::ops::{create_session::CreateSessionArgs, exchange_id::ExchangeIdArgs};
    use crate::xdr::XdrReader;

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let mut r = XdrReader::new(&bytes);
            let _ = OpenArgs::decode(&mut r, 1);
            proptest::prop_assert!(r.remaining() <= bytes.len());
            let _ = ExchangeIdArgs::decode(&mut XdrReader::new(&bytes));
            let _ = CreateSessionArgs::decode(&mut XdrReader::new(&bytes));
            let _ = super::decode_cb_sec(&mut XdrReader::new(&bytes));
        }

        /// Small values in every word reach deep into the unions (real flags, claims).
        #[test]
        fn decoders_never_panic_on_small_words(words in proptest::collection::vec(0u32..8, 0..128)) {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
            let _ = OpenArgs::decode(&mut XdrReader::new(&bytes), 1);
            let _ = ExchangeIdArgs::decode(&mut XdrReader::new(&bytes));
            let _ = CreateSessionArgs::decode(&mut XdrReader::new(&bytes));
        }
    }
}
