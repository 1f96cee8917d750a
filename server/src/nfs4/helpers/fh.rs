//! The current and saved filehandles (RFC 8881 §16.2.3), the objects behind them, and the
//! file-type rules of the operations: one function per rule.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Fh;
use crate::store::{Attr, FileType, Ino};

/// The current filehandle (the dispatcher has checked it is set where the table says so;
/// NOFILEHANDLE otherwise).
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

/// The current filehandle's attributes.
pub fn cur_attr(ctx: &Ctx<'_>) -> Result<Attr, NfsStat> {
    fh_attr(ctx, cur_fh(ctx)?)
}

/// The saved filehandle's attributes (RENAME source directory, LINK source file).
pub fn saved_attr(ctx: &Ctx<'_>) -> Result<Attr, NfsStat> {
    fh_attr(ctx, ctx.saved_fh.ok_or(NfsStat::NOFILEHANDLE)?)
}

pub use crate::nfs4::types::fh_of;

/// The current filehandle must be a directory (CREATE, REMOVE, RENAME, LINK, READDIR,
/// SECINFO): NOTDIR otherwise.
pub fn require_dir(a: &Attr) -> Result<(), NfsStat> {
    match a.ftype {
        FileType::Directory => Ok(()),
        _ => Err(NfsStat::NOTDIR),
    }
}

/// A directory to look a name up in (LOOKUP, LOOKUPP, OPEN by name): a symbolic link is
/// SYMLINK, since following it is the client's job (RFC 8881 §18.13.3), anything
/// else NOTDIR.
pub fn require_lookup_dir(a: &Attr) -> Result<(), NfsStat> {
    match a.ftype {
        FileType::Directory => Ok(()),
        FileType::Symlink => Err(NfsStat::SYMLINK),
        _ => Err(NfsStat::NOTDIR),
    }
}

/// What an operation on regular files only answers for the other types of object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotRegular {
    pub dir: NfsStat,
    pub symlink: NfsStat,
    pub other: NfsStat,
}

impl NotRegular {
    /// READ, WRITE, COMMIT, ALLOCATE, DEALLOCATE, SEEK and a SETATTR of the size: a
    /// directory is ISDIR, anything else INVAL (RFC 8881 §18.22.3, §18.32.3).
    pub const IO: NotRegular = NotRegular {
        dir: NfsStat::ISDIR,
        symlink: NfsStat::INVAL,
        other: NfsStat::INVAL,
    };
    /// OPEN: ISDIR, SYMLINK, else WRONG_TYPE (RFC 8881 §18.16.3).
    pub const OPEN: NotRegular = NotRegular {
        dir: NfsStat::ISDIR,
        symlink: NfsStat::SYMLINK,
        other: NfsStat::WRONG_TYPE,
    };
    /// LOCK, LOCKT, LOCKU: as OPEN, but INVAL for the other types (as knfsd answers).
    pub const LOCK: NotRegular = NotRegular {
        other: NfsStat::INVAL,
        ..NotRegular::OPEN
    };
    /// LAYOUTGET: there is no layout of anything but a regular file.
    pub const LAYOUTGET: NotRegular = NotRegular {
        dir: NfsStat::LAYOUTUNAVAILABLE,
        symlink: NfsStat::LAYOUTUNAVAILABLE,
        other: NfsStat::LAYOUTUNAVAILABLE,
    };
    /// LAYOUTCOMMIT: INVAL whatever the type.
    pub const LAYOUTCOMMIT: NotRegular = NotRegular {
        dir: NfsStat::INVAL,
        symlink: NfsStat::INVAL,
        other: NfsStat::INVAL,
    };
}

/// The rule of the operations on regular files only: the file's inode, or the operation's
/// answer for the object's type.
pub fn require_regular(a: &Attr, not: NotRegular) -> Result<Ino, NfsStat> {
    match a.ftype {
        FileType::Regular => Ok(a.ino),
        FileType::Directory => Err(not.dir),
        FileType::Symlink => Err(not.symlink),
        _ => Err(not.other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nfs4::helpers::perm::tests::attr;

    #[test]
    fn file_type_rules() {
        let reg = attr(FileType::Regular, 0o644);
        let dir = attr(FileType::Directory, 0o755);
        let lnk = attr(FileType::Symlink, 0o777);
        let fifo = attr(FileType::Fifo, 0o644);
        for not in [NotRegular::IO, NotRegular::OPEN, NotRegular::LAYOUTGET] {
            assert_eq!(require_regular(&reg, not), Ok(reg.ino));
        }
        let io = NotRegular::IO;
        assert_eq!(require_regular(&dir, io), Err(NfsStat::ISDIR));
        assert_eq!(require_regular(&lnk, io), Err(NfsStat::INVAL));
        let open = NotRegular::OPEN;
        assert_eq!(require_regular(&lnk, open), Err(NfsStat::SYMLINK));
        assert_eq!(require_regular(&fifo, open), Err(NfsStat::WRONG_TYPE));
        let lock = NotRegular::LOCK;
        assert_eq!(require_regular(&dir, lock), Err(NfsStat::ISDIR));
        assert_eq!(require_regular(&fifo, lock), Err(NfsStat::INVAL));
        let lg = NotRegular::LAYOUTGET;
        assert_eq!(require_regular(&dir, lg), Err(NfsStat::LAYOUTUNAVAILABLE));
        let lc = NotRegular::LAYOUTCOMMIT;
        assert_eq!(require_regular(&lnk, lc), Err(NfsStat::INVAL));
        assert_eq!(require_dir(&dir), Ok(()));
        assert_eq!(require_dir(&lnk), Err(NfsStat::NOTDIR));
        assert_eq!(require_lookup_dir(&lnk), Err(NfsStat::SYMLINK));
        assert_eq!(require_lookup_dir(&reg), Err(NfsStat::NOTDIR));
    }
}
