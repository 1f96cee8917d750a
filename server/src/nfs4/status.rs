//! `nfsstat4` (RFC 8881 §15.1, RFC 7862 §11) and the one place where lower-layer errors become
//! NFS statuses (docs/design.md, house rule 3).

use crate::store::StoreError;
use crate::xdr::XdrError;

/// An `nfsstat4`. A newtype so that unknown values survive (docs/design.md, house rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NfsStat(pub u32);

macro_rules! nfsstat {
    ($($name:ident = $v:expr,)*) => {
        impl NfsStat { $(pub const $name: NfsStat = NfsStat($v);)* }
        impl NfsStat {
            pub fn name(self) -> &'static str {
                match self.0 { $($v => stringify!($name),)* _ => "UNKNOWN" }
            }
        }
    };
}

nfsstat! {
    OK = 0, PERM = 1, NOENT = 2, IO = 5, NXIO = 6, ACCESS = 13, EXIST = 17, XDEV = 18,
    NOTDIR = 20, ISDIR = 21, INVAL = 22, FBIG = 27, NOSPC = 28, ROFS = 30, MLINK = 31,
    NAMETOOLONG = 63, NOTEMPTY = 66, DQUOT = 69, STALE = 70, BADHANDLE = 10001,
    BAD_COOKIE = 10003, NOTSUPP = 10004, TOOSMALL = 10005, SERVERFAULT = 10006,
    BADTYPE = 10007, DELAY = 10008, SAME = 10009, DENIED = 10010, EXPIRED = 10011,
    LOCKED = 10012, GRACE = 10013, FHEXPIRED = 10014, SHARE_DENIED = 10015, WRONGSEC = 10016,
    CLID_INUSE = 10017, RESOURCE = 10018, MOVED = 10019, NOFILEHANDLE = 10020,
    MINOR_VERS_MISMATCH = 10021, STALE_CLIENTID = 10022, STALE_STATEID = 10023,
    OLD_STATEID = 10024, BAD_STATEID = 10025, BAD_SEQID = 10026, NOT_SAME = 10027,
    LOCK_RANGE = 10028, SYMLINK = 10029, RESTOREFH = 10030, LEASE_MOVED = 10031,
    ATTRNOTSUPP = 10032, NO_GRACE = 10033, RECLAIM_BAD = 10034, RECLAIM_CONFLICT = 10035,
    BADXDR = 10036, LOCKS_HELD = 10037, OPENMODE = 10038, BADOWNER = 10039, BADCHAR = 10040,
    BADNAME = 10041, BAD_RANGE = 10042, LOCK_NOTSUPP = 10043, OP_ILLEGAL = 10044,
    DEADLOCK = 10045, FILE_OPEN = 10046, ADMIN_REVOKED = 10047, CB_PATH_DOWN = 10048,
    BADIOMODE = 10049, BADLAYOUT = 10050, BAD_SESSION_DIGEST = 10051, BADSESSION = 10052,
    BADSLOT = 10053, COMPLETE_ALREADY = 10054, CONN_NOT_BOUND_TO_SESSION = 10055,
    DELEG_ALREADY_WANTED = 10056, BACK_CHAN_BUSY = 10057, LAYOUTTRYLATER = 10058,
    LAYOUTUNAVAILABLE = 10059, NOMATCHING_LAYOUT = 10060, RECALLCONFLICT = 10061,
    UNKNOWN_LAYOUTTYPE = 10062, SEQ_MISORDERED = 10063, SEQUENCE_POS = 10064,
    REQ_TOO_BIG = 10065, REP_TOO_BIG = 10066, REP_TOO_BIG_TO_CACHE = 10067,
    RETRY_UNCACHED_REP = 10068, UNSAFE_COMPOUND = 10069, TOO_MANY_OPS = 10070,
    OP_NOT_IN_SESSION = 10071, HASH_ALG_UNSUPP = 10072, CLIENTID_BUSY = 10074,
    PNFS_IO_HOLE = 10075, SEQ_FALSE_RETRY = 10076, BAD_HIGH_SLOT = 10077, DEADSESSION = 10078,
    ENCR_ALG_UNSUPP = 10079, PNFS_NO_LAYOUT = 10080, NOT_ONLY_OP = 10081, WRONG_CRED = 10082,
    WRONG_TYPE = 10083, DIRDELEG_UNAVAIL = 10084, REJECT_DELEG = 10085, RETURNCONFLICT = 10086,
    DELEG_REVOKED = 10087, PARTNER_NOTSUPP = 10088, PARTNER_NO_AUTH = 10089,
    UNION_NOTSUPP = 10090, OFFLOAD_DENIED = 10091, WRONG_LFS = 10092, BADLABEL = 10093,
    OFFLOAD_NO_REQS = 10094, NOXATTR = 10095, XATTR2BIG = 10096,
}

impl From<StoreError> for NfsStat {
    fn from(e: StoreError) -> NfsStat {
        match e {
            StoreError::NoEnt => NfsStat::NOENT,
            StoreError::Exist => NfsStat::EXIST,
            StoreError::NotDir => NfsStat::NOTDIR,
            StoreError::IsDir => NfsStat::ISDIR,
            StoreError::NotEmpty => NfsStat::NOTEMPTY,
            StoreError::Inval => NfsStat::INVAL,
            StoreError::NameTooLong => NfsStat::NAMETOOLONG,
            StoreError::BadName => NfsStat::BADNAME,
            StoreError::NoSpace => NfsStat::NOSPC,
            StoreError::FileTooBig => NfsStat::FBIG,
            StoreError::Stale => NfsStat::STALE,
            StoreError::WrongType => NfsStat::WRONG_TYPE,
            StoreError::TooManyLinks => NfsStat::MLINK,
            StoreError::BadCookie => NfsStat::BAD_COOKIE,
            StoreError::NoXattr => NfsStat::NOXATTR,
            StoreError::XattrTooBig => NfsStat::XATTR2BIG,
            StoreError::Io(_) => NfsStat::IO,
            StoreError::DeviceFull(_) => NfsStat::NOSPC,
            StoreError::Served(_) => NfsStat::IO,
        }
    }
}

/// The block layout's rules (layout::policy).
impl From<layout::policy::PolicyError> for NfsStat {
    fn from(e: layout::policy::PolicyError) -> NfsStat {
        use layout::policy::PolicyError as P;
        match e {
            P::Inval => NfsStat::INVAL,
            P::BadIoMode => NfsStat::BADIOMODE,
            P::TooSmall => NfsStat::TOOSMALL,
            P::BadLayout => NfsStat::BADLAYOUT,
        }
    }
}

impl From<XdrError> for NfsStat {
    fn from(_: XdrError) -> NfsStat {
        NfsStat::BADXDR
    }
}
