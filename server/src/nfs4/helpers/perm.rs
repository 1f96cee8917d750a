//! Permissions: the ACCESS4 bits (RFC 8881 §18.1, RFC 8276 §8.3) a credential has on an
//! object, and the checks the operations make with them.
//!
//! Permissions come from the mode bits and the AUTH_SYS credential (no ACLs: aclsupport 0).
//! Root may read and write anything, and execute what has an execute bit (common practice:
//! knfsd and local file systems do the same).

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::cur_attr;
use crate::nfs4::state::ShareAccess;
use crate::nfs4::status::NfsStat;
use crate::rpc::Cred;
use crate::store::{Attr, FileType};

pub const ACCESS4_READ: u32 = 0x01;
pub const ACCESS4_LOOKUP: u32 = 0x02;
pub const ACCESS4_MODIFY: u32 = 0x04;
pub const ACCESS4_EXTEND: u32 = 0x08;
pub const ACCESS4_DELETE: u32 = 0x10;
pub const ACCESS4_EXECUTE: u32 = 0x20;
/// RFC 8276 §8.3: read, write and list extended attributes (NFSv4.2 only).
pub const ACCESS4_XAREAD: u32 = 0x40;
pub const ACCESS4_XAWRITE: u32 = 0x80;
pub const ACCESS4_XALIST: u32 = 0x100;

/// The rwx bits (as 0o7) that apply to `cred` for `a`: owner, group or other class.
fn class_bits(cred: &Cred, a: &Attr) -> u32 {
    let m = a.mode;
    if cred.uid == a.uid {
        (m >> 6) & 7
    } else if cred.gid == a.gid || cred.gids.contains(&a.gid) {
        (m >> 3) & 7
    } else {
        m & 7
    }
}

/// The ACCESS4 bits `cred` has on `a` (among those meaningful for its type).
pub fn allowed(cred: &Cred, a: &Attr) -> u32 {
    let is_dir = a.ftype == FileType::Directory;
    let (r, w, x) = if cred.uid == 0 {
        (true, true, is_dir || a.mode & 0o111 != 0)
    } else {
        let b = class_bits(cred, a);
        (b & 4 != 0, b & 2 != 0, b & 1 != 0)
    };
    let mut out = 0;
    if r {
        out |= ACCESS4_READ;
    }
    if w {
        out |= ACCESS4_MODIFY | ACCESS4_EXTEND;
        if is_dir {
            out |= ACCESS4_DELETE;
        }
    }
    if x {
        out |= if is_dir {
            ACCESS4_LOOKUP
        } else {
            ACCESS4_EXECUTE
        };
    }
    out
}

/// The xattr bits follow the file's own: reading lets one read and list them, writing lets
/// one change them (RFC 8276 §8.3; what `xattr_target` checks).
pub fn with_xattr_bits(bits: u32) -> u32 {
    let mut out = bits;
    if bits & ACCESS4_READ != 0 {
        out |= ACCESS4_XAREAD | ACCESS4_XALIST;
    }
    if bits & ACCESS4_MODIFY != 0 {
        out |= ACCESS4_XAWRITE;
    }
    out
}

/// ACCESS if `cred` lacks any of `want` on `a`.
pub fn require(cred: &Cred, a: &Attr, want: u32) -> Result<(), NfsStat> {
    if allowed(cred, a) & want == want {
        Ok(())
    } else {
        Err(NfsStat::ACCESS)
    }
}

/// As `require`, but the owner may always read and write his file (anonymous-stateid I/O
/// on a file opened and then chmod'ed must keep working, as with a local open fd).
pub fn require_owner_override(cred: &Cred, a: &Attr, want: u32) -> Result<(), NfsStat> {
    if cred.uid == a.uid && want & !(ACCESS4_READ | ACCESS4_MODIFY | ACCESS4_EXTEND) == 0 {
        return Ok(());
    }
    require(cred, a, want)
}

/// The ACCESS4 bits an open's share access needs of the file: READ to read, MODIFY to write.
pub fn share_access_bits(share: &ShareAccess) -> u32 {
    let mut want = 0;
    if share.access & ShareAccess::READ != 0 {
        want |= ACCESS4_READ;
    }
    if share.access & ShareAccess::WRITE != 0 {
        want |= ACCESS4_MODIFY;
    }
    want
}

/// Write and search permission on a directory whose entries change.
pub fn require_dir_write(cred: &Cred, dir: &Attr) -> Result<(), NfsStat> {
    require(cred, dir, ACCESS4_MODIFY | ACCESS4_LOOKUP)
}

/// In a sticky directory (mode 01000, like /tmp) only root, the directory's owner and the
/// entry's owner may remove or rename the entry (POSIX; Linux answers EPERM).
pub fn check_sticky(cred: &Cred, dir: &Attr, victim: &Attr) -> Result<(), NfsStat> {
    if dir.mode & 0o1000 == 0 || cred.uid == 0 || cred.uid == dir.uid || cred.uid == victim.uid {
        Ok(())
    } else {
        Err(NfsStat::PERM)
    }
}

/// The current object, if `ctx.cred` may read (`write == false`) or change its xattrs (RFC
/// 8276 §5: the file's own read / write permission decide, ACCESS4_XAREAD / XAWRITE).
pub fn xattr_target(ctx: &Ctx<'_>, write: bool) -> Result<Attr, NfsStat> {
    let a = cur_attr(ctx)?;
    // Only regular files and directories carry user xattrs (as on Linux).
    if !matches!(a.ftype, FileType::Regular | FileType::Directory) {
        return Err(NfsStat::WRONG_TYPE);
    }
    require(
        &ctx.cred,
        &a,
        if write { ACCESS4_MODIFY } else { ACCESS4_READ },
    )?;
    Ok(a)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::{Ino, Timespec};

    /// A file owned by 1000:100 (shared with the other ops' permission tests).
    pub(crate) fn attr(ftype: FileType, mode: u32) -> Attr {
        Attr {
            ino: Ino(5),
            generation: 1,
            ftype,
            mode,
            nlink: 1,
            uid: 1000,
            gid: 100,
            size: 0,
            used: 0,
            rdev: (0, 0),
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            crtime: Timespec::default(),
            change: 1,
            parent: Ino(1),
        }
    }

    pub(crate) fn cred(uid: u32, gid: u32, gids: &[u32]) -> Cred {
        Cred {
            flavor: 1,
            uid,
            gid,
            gids: gids.to_vec(),
            machine: vec![],
        }
    }

    #[test]
    fn owner_group_other_classes() {
        let f = attr(FileType::Regular, 0o640);
        let rw = ACCESS4_READ | ACCESS4_MODIFY | ACCESS4_EXTEND;
        assert_eq!(allowed(&cred(1000, 1, &[]), &f), rw);
        assert_eq!(allowed(&cred(7, 100, &[]), &f), ACCESS4_READ);
        assert_eq!(allowed(&cred(7, 1, &[5, 100]), &f), ACCESS4_READ);
        assert_eq!(allowed(&cred(7, 1, &[]), &f), 0);
        // The owner class applies even when it grants less than the group class.
        let g = attr(FileType::Regular, 0o070);
        assert_eq!(allowed(&cred(1000, 100, &[]), &g), 0);
    }

    #[test]
    fn root_and_directories() {
        let f = attr(FileType::Regular, 0o600);
        assert_eq!(allowed(&cred(0, 0, &[]), &f) & ACCESS4_EXECUTE, 0);
        let x = attr(FileType::Regular, 0o700);
        assert_ne!(allowed(&cred(0, 0, &[]), &x) & ACCESS4_EXECUTE, 0);
        let d = attr(FileType::Directory, 0o755);
        assert_eq!(allowed(&cred(7, 1, &[]), &d), ACCESS4_READ | ACCESS4_LOOKUP);
        assert_eq!(
            with_xattr_bits(ACCESS4_READ),
            ACCESS4_READ | ACCESS4_XAREAD | ACCESS4_XALIST
        );
        assert_eq!(
            with_xattr_bits(ACCESS4_MODIFY),
            ACCESS4_MODIFY | ACCESS4_XAWRITE
        );
        assert_eq!(
            allowed(&cred(1000, 1, &[]), &d),
            ACCESS4_READ | ACCESS4_LOOKUP | ACCESS4_MODIFY | ACCESS4_EXTEND | ACCESS4_DELETE
        );
        assert_eq!(
            require_dir_write(&cred(7, 1, &[]), &d),
            Err(NfsStat::ACCESS)
        );
        assert_eq!(
            require_dir_write(&cred(0, 0, &[]), &attr(FileType::Directory, 0)),
            Ok(())
        );
    }

    #[test]
    fn sticky_directories() {
        let tmp = Attr {
            uid: 0,
            ..attr(FileType::Directory, 0o1777)
        };
        let theirs = Attr {
            uid: 2000,
            ..attr(FileType::Regular, 0o644)
        };
        assert_eq!(
            check_sticky(&cred(3000, 1, &[]), &tmp, &theirs),
            Err(NfsStat::PERM)
        );
        assert_eq!(check_sticky(&cred(2000, 1, &[]), &tmp, &theirs), Ok(()));
        assert_eq!(check_sticky(&cred(0, 0, &[]), &tmp, &theirs), Ok(()));
        let plain = attr(FileType::Directory, 0o777);
        assert_eq!(check_sticky(&cred(3000, 1, &[]), &plain, &theirs), Ok(()));
    }

    #[test]
    fn owner_override_only_for_read_and_write() {
        let f = attr(FileType::Regular, 0o000);
        let me = cred(1000, 1, &[]);
        assert_eq!(require_owner_override(&me, &f, ACCESS4_MODIFY), Ok(()));
        assert_eq!(require(&me, &f, ACCESS4_MODIFY), Err(NfsStat::ACCESS));
        assert_eq!(
            require_owner_override(&cred(7, 1, &[]), &f, ACCESS4_READ),
            Err(NfsStat::ACCESS)
        );
    }
}
