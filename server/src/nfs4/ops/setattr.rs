//! SETATTR (RFC 8881 §18.30). The result always carries `attrsset`: the attributes set on
//! success, none on failure (the store applies all of them or none).

use crate::nfs4::attr::decode_fattr_minor;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::delegs;
use crate::nfs4::helpers::caller::clientid;
use crate::nfs4::helpers::fh::{cur_attr, fh_of, require_regular, NotRegular};
use crate::nfs4::helpers::perm::{require, ACCESS4_MODIFY};
use crate::nfs4::helpers::stateid::check_io_stateid;
use crate::nfs4::layouts::{self, Break};
use crate::nfs4::state::IoAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, Stateid};
use crate::rpc::Cred;
use crate::store::{Attr, SetAttrs, SetTime, MAX_FILE_SIZE};
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// `SETATTR4args`.
#[derive(Debug)]
pub struct SetattrArgs {
    pub stateid: Stateid,
    pub mask: Bitmap,
    pub attrs: SetAttrs,
}

pub fn decode(r: &mut XdrReader<'_>, minor: u32) -> Result<SetattrArgs, NfsStat> {
    let stateid = Stateid::decode(r)?;
    let (mask, attrs) = decode_fattr_minor(r, minor)?;
    Ok(SetattrArgs {
        stateid,
        mask,
        attrs,
    })
}

/// Who may change what (POSIX rules, chown_restricted): the owner or root changes mode and
/// times and the group (to one of the owner's groups); only root gives a file away; setting
/// times to "now" needs write permission only.
pub fn check_perms(cred: &Cred, a: &Attr, sa: &SetAttrs) -> Result<(), NfsStat> {
    if cred.uid == 0 {
        return Ok(());
    }
    let owner = cred.uid == a.uid;
    if sa.uid.is_some_and(|u| u != a.uid) {
        return Err(NfsStat::PERM);
    }
    if let Some(g) = sa.gid {
        let member = cred.gid == g || cred.gids.contains(&g);
        if g != a.gid && !(owner && member) {
            return Err(NfsStat::PERM);
        }
    }
    if sa.mode.is_some() && !owner {
        return Err(NfsStat::PERM);
    }
    for t in [sa.atime, sa.mtime].into_iter().flatten() {
        match t {
            SetTime::Client(_) if !owner => return Err(NfsStat::PERM),
            SetTime::ServerNow if !owner => require(cred, a, ACCESS4_MODIFY)?,
            _ => {}
        }
    }
    Ok(())
}

fn go(ctx: &mut Ctx<'_>, args: &SetattrArgs) -> Result<(), NfsStat> {
    let a = cur_attr(ctx)?;
    let sa = &args.attrs;
    if let Some(size) = sa.size {
        require_regular(&a, NotRegular::IO)?;
        if size > MAX_FILE_SIZE {
            return Err(NfsStat::FBIG);
        }
        // A size change is I/O: its stateid is checked like WRITE's (RFC 8881 §18.30.3).
        check_io_stateid(ctx, args.stateid, &a, IoAccess::Write)?;
    }
    check_perms(&ctx.cred, &a, sa)?;
    if *sa != SetAttrs::default() {
        delegs::break_for_change(&ctx.srv.delegs_env(), clientid(ctx).ok(), &a)?;
    }
    if sa.size.is_some_and(|s| s < a.size) {
        // Truncation frees blocks that layouts map: DELAY until they are back or their
        // holders fenced, so no client writes into blocks another file
        // may get.
        layouts::break_for(&ctx.srv.layouts_env(), fh_of(&a), Break::Truncate)?;
    }
    if *sa != SetAttrs::default() {
        ctx.srv.store.setattr(a.ino, sa)?;
    }
    Ok(())
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let res = decode(r, ctx.minor).and_then(|args| go(ctx, &args).map(|()| args.mask));
    match res {
        Ok(mask) => {
            mask.encode(w);
            Ok(())
        }
        Err(s) => {
            Bitmap::default().encode(w);
            Err(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::attr::num;
    use crate::store::{FileType, Timespec};

    use crate::nfs4::helpers::perm::tests::cred;

    fn attr() -> Attr {
        crate::nfs4::helpers::perm::tests::attr(FileType::Regular, 0o664)
    }

    #[test]
    fn permission_rules() {
        let a = attr();
        let owner = cred(1000, 100, &[200]);
        let other = cred(7, 100, &[]);
        let sa = |f: fn(&mut SetAttrs)| {
            let mut s = SetAttrs::default();
            f(&mut s);
            s
        };
        assert_eq!(
            check_perms(&owner, &a, &sa(|s| s.mode = Some(0o600))),
            Ok(())
        );
        assert_eq!(
            check_perms(&other, &a, &sa(|s| s.mode = Some(0o600))),
            Err(NfsStat::PERM)
        );
        assert_eq!(
            check_perms(&owner, &a, &sa(|s| s.uid = Some(7))),
            Err(NfsStat::PERM)
        );
        assert_eq!(check_perms(&owner, &a, &sa(|s| s.uid = Some(1000))), Ok(()));
        assert_eq!(
            check_perms(&cred(0, 0, &[]), &a, &sa(|s| s.uid = Some(7))),
            Ok(())
        );
        assert_eq!(check_perms(&owner, &a, &sa(|s| s.gid = Some(200))), Ok(()));
        assert_eq!(
            check_perms(&owner, &a, &sa(|s| s.gid = Some(300))),
            Err(NfsStat::PERM)
        );
        // Group members with write permission may touch to "now", not to a given time.
        assert_eq!(
            check_perms(&other, &a, &sa(|s| s.mtime = Some(SetTime::ServerNow))),
            Ok(())
        );
        assert_eq!(
            check_perms(
                &other,
                &a,
                &sa(|s| s.mtime = Some(SetTime::Client(Timespec::default())))
            ),
            Err(NfsStat::PERM)
        );
        assert_eq!(
            check_perms(
                &cred(9, 9, &[]),
                &a,
                &sa(|s| s.atime = Some(SetTime::ServerNow))
            ),
            Err(NfsStat::ACCESS)
        );
    }

    #[test]
    fn decode_args() {
        let mut w = XdrWriter::new();
        Stateid::ANONYMOUS.encode(&mut w);
        w.u32(2);
        w.u32(1 << num::SIZE);
        w.u32(1 << (num::MODE - 32));
        w.u32(12);
        w.u64(77);
        w.u32(0o600);
        let args = decode(&mut XdrReader::new(&w.buf), 1).unwrap();
        assert_eq!(args.attrs.size, Some(77));
        assert_eq!(args.attrs.mode, Some(0o600));
        // Every prefix of a valid request is BADXDR, never a panic.
        for n in 0..w.buf.len() {
            assert_eq!(
                decode(&mut XdrReader::new(&w.buf[..n]), 1).err(),
                Some(NfsStat::BADXDR),
                "prefix {n}"
            );
        }
    }
}
