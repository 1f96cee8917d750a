//! `nfs_opnum4` (RFC 8881 §16.2.1, RFC 7862 §15, RFC 8276 §8.4): a newtype, so that any
//! number a client sends decodes and the dispatcher answers OP_ILLEGAL for the ones that are
//! no operation of the COMPOUND's minor version (docs/design.md, house rule 2).

use std::fmt;

/// An operation number of a COMPOUND.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NfsOp(pub u32);

macro_rules! nfs_ops {
    ($($name:ident = $v:expr,)*) => {
        impl NfsOp { $(pub const $name: NfsOp = NfsOp($v);)* }
        impl NfsOp {
            /// The protocol's name of the operation, "UNKNOWN" for any other number.
            pub fn name(self) -> &'static str {
                match self.0 { $($v => stringify!($name),)* _ => "UNKNOWN" }
            }
        }
    };
}

nfs_ops! {
    ACCESS = 3, CLOSE = 4, COMMIT = 5, CREATE = 6, DELEGPURGE = 7, DELEGRETURN = 8,
    GETATTR = 9, GETFH = 10, LINK = 11, LOCK = 12, LOCKT = 13, LOCKU = 14, LOOKUP = 15,
    LOOKUPP = 16, NVERIFY = 17, OPEN = 18, OPENATTR = 19, OPEN_CONFIRM = 20,
    OPEN_DOWNGRADE = 21, PUTFH = 22, PUTPUBFH = 23, PUTROOTFH = 24, READ = 25, READDIR = 26,
    READLINK = 27, REMOVE = 28, RENAME = 29, RENEW = 30, RESTOREFH = 31, SAVEFH = 32,
    SECINFO = 33, SETATTR = 34, SETCLIENTID = 35, SETCLIENTID_CONFIRM = 36, VERIFY = 37,
    WRITE = 38, RELEASE_LOCKOWNER = 39,
    // NFSv4.1 (RFC 8881).
    BACKCHANNEL_CTL = 40, BIND_CONN_TO_SESSION = 41, EXCHANGE_ID = 42, CREATE_SESSION = 43,
    DESTROY_SESSION = 44, FREE_STATEID = 45, GET_DIR_DELEGATION = 46, GETDEVICEINFO = 47,
    GETDEVICELIST = 48, LAYOUTCOMMIT = 49, LAYOUTGET = 50, LAYOUTRETURN = 51,
    SECINFO_NO_NAME = 52, SEQUENCE = 53, SET_SSV = 54, TEST_STATEID = 55,
    WANT_DELEGATION = 56, DESTROY_CLIENTID = 57, RECLAIM_COMPLETE = 58,
    // NFSv4.2 (RFC 7862; the xattr operations of RFC 8276).
    ALLOCATE = 59, COPY = 60, COPY_NOTIFY = 61, DEALLOCATE = 62, IO_ADVISE = 63,
    LAYOUTERROR = 64, LAYOUTSTATS = 65, OFFLOAD_CANCEL = 66, OFFLOAD_STATUS = 67,
    READ_PLUS = 68, SEEK = 69, WRITE_SAME = 70, CLONE = 71, GETXATTR = 72, SETXATTR = 73,
    LISTXATTRS = 74, REMOVEXATTR = 75,
    ILLEGAL = 10044,
}

impl NfsOp {
    /// The last operation of minor version `minor` (RFC 8881 §16.2.3: any later number is
    /// OP_ILLEGAL in a COMPOUND of that version); `None` for versions we do not know.
    pub fn last_of_minor(minor: u32) -> Option<NfsOp> {
        match minor {
            0 => Some(NfsOp::RELEASE_LOCKOWNER),
            1 => Some(NfsOp::RECLAIM_COMPLETE),
            2 => Some(NfsOp::REMOVEXATTR),
            _ => None,
        }
    }
}

impl fmt::Debug for NfsOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            "UNKNOWN" => write!(f, "NfsOp({})", self.0),
            name => f.write_str(name),
        }
    }
}

impl fmt::Display for NfsOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_unknown_numbers() {
        assert_eq!(NfsOp::SEQUENCE.name(), "SEQUENCE");
        assert_eq!(NfsOp(53), NfsOp::SEQUENCE);
        assert_eq!(NfsOp(76).name(), "UNKNOWN");
        assert_eq!(
            format!("{:?} {:?}", NfsOp::ILLEGAL, NfsOp(0)),
            "ILLEGAL NfsOp(0)"
        );
        assert_eq!(NfsOp::last_of_minor(1), Some(NfsOp::RECLAIM_COMPLETE));
        assert_eq!(NfsOp::last_of_minor(2), Some(NfsOp(75)));
        assert_eq!(NfsOp::last_of_minor(3), None);
    }
}
