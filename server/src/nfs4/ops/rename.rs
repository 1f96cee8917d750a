//! RENAME (RFC 8881 §18.26): `oldname` in the saved directory becomes `newname` in the
//! current directory. pnfsd has one file system, so XDEV never happens.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::delegs;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::{cur_attr, fh_of, require_dir, saved_attr};
use crate::nfs4::helpers::name::{check_new_name, decode_component};
use crate::nfs4::helpers::perm::{check_sticky, require_dir_write};
use crate::nfs4::layouts::{self, Break};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::encode_change_info;
use crate::store::{DirChange, FileType, StoreError};
use crate::xdr::{XdrReader, XdrWriter};

/// `RENAME4args`.
pub fn decode(r: &mut XdrReader<'_>) -> Result<(Vec<u8>, Vec<u8>), NfsStat> {
    let old = decode_component(r)?;
    let new = decode_component(r)?;
    Ok((old, new))
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let (old, new) = decode(r)?;
    let src = saved_attr(ctx)?;
    let dst = cur_attr(ctx)?;
    require_dir(&src)?;
    require_dir(&dst)?;
    check_new_name(&old)?;
    check_new_name(&new)?;
    require_dir_write(&ctx.cred, &src)?;
    require_dir_write(&ctx.cred, &dst)?;
    if ctx.srv.state.in_grace() {
        return Err(NfsStat::GRACE);
    }
    let store = &ctx.srv.store;
    let from = store.lookup(src.ino, &old)?;
    let target = match store.lookup(dst.ino, &new) {
        Ok(t) => Some(t),
        Err(StoreError::NoEnt) => None,
        Err(e) => return Err(e.into()),
    };
    check_sticky(&ctx.cred, &src, &from)?;
    if let Some(t) = &target {
        check_sticky(&ctx.cred, &dst, t)?;
    }
    if let Some(t) = &target {
        // §18.26.3: two names of the same file: nothing to do, and OK.
        if t.ino == from.ino {
            let s = DirChange {
                before: src.change,
                after: src.change,
            };
            let d = DirChange {
                before: dst.change,
                after: dst.change,
            };
            encode_change_info(w, &s);
            encode_change_info(w, &d);
            return Ok(());
        }
        // §18.26.3: the target must be compatible (both directories or neither), and an
        // existing directory must be empty; otherwise EXIST.
        let is_dir = |t: FileType| t == FileType::Directory;
        if is_dir(t.ftype) != is_dir(from.ftype) {
            return Err(NfsStat::EXIST);
        }
    }
    // The renamed file and a file the rename replaces change: delegations of other clients
    // on either are recalled first (RFC 8881 §10.4.4; Linux's vfs_rename breaks both).
    // Both recalls are queued before the DELAY, so that neither waits for the other.
    let from_held = delegs::break_for_change(&ctx.srv.delegs_env(), clientid(ctx).ok(), &from);
    let target_held = target.as_ref().map_or(Ok(()), |t| {
        delegs::break_for_change(&ctx.srv.delegs_env(), clientid(ctx).ok(), t)
    });
    from_held.and(target_held)?;
    // A rename over a file drops the target's link: recall its layouts if it was the last.
    let victim = target
        .as_ref()
        .filter(|t| t.nlink <= 1 && t.ftype == FileType::Regular)
        .map(fh_of);
    if let Some(v) = victim {
        layouts::break_for(&ctx.srv.layouts_env(), v, Break::Unlink)?;
    }
    let (s, d, _unlinked) = store
        .rename(src.ino, &old, dst.ino, &new)
        .map_err(|e| match e {
            StoreError::NotEmpty | StoreError::IsDir | StoreError::NotDir if target.is_some() => {
                NfsStat::EXIST
            }
            e => e.into(),
        })?;
    encode_change_info(w, &s);
    encode_change_info(w, &d);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_args() {
        let mut w = XdrWriter::new();
        w.string(b"a");
        w.string(b"bb");
        assert_eq!(
            decode(&mut XdrReader::new(&w.buf)),
            Ok((b"a".to_vec(), b"bb".to_vec()))
        );
        for n in 0..w.buf.len() {
            assert_eq!(
                decode(&mut XdrReader::new(&w.buf[..n])),
                Err(NfsStat::BADXDR)
            );
        }
    }
}
