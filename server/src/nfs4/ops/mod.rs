//! One file per NFS operation (style.md rule 7) and the static table the COMPOUND dispatcher
//! runs from (style.md rule 8). A handler decodes its arguments from the reader, calls the
//! store / state / layout layers, writes its result *body* (what follows the status; only for
//! the ops whose failure carries a body, or on OK) into the writer, and returns the status.
//! The dispatcher writes the opcode and status and checks, once, everything the table says
//! (current filehandle, SEQUENCE first, minor version, ...): handlers never re-check those.

use crate::nfs4::compound::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub type Handler = fn(&mut Ctx<'_>, &mut XdrReader<'_>, &mut XdrWriter) -> Result<(), NfsStat>;

/// What the dispatcher needs to know about an operation.
#[derive(Clone, Copy)]
pub struct OpDesc {
    pub name: &'static str,
    pub handler: Handler,
    /// Lowest minor version that has the operation (ops of 4.2 only are 2).
    pub min_minor: u32,
    /// NFS4ERR_NOFILEHANDLE unless a current filehandle is set.
    pub needs_fh: bool,
}

/// Operation numbers (RFC 8881 §16, RFC 7862 §15, RFC 8276).
pub mod opnum {
    pub const ACCESS: u32 = 3;
    pub const CLOSE: u32 = 4;
    pub const COMMIT: u32 = 5;
    pub const CREATE: u32 = 6;
    pub const DELEGPURGE: u32 = 7;
    pub const DELEGRETURN: u32 = 8;
    pub const GETATTR: u32 = 9;
    pub const GETFH: u32 = 10;
    pub const LINK: u32 = 11;
    pub const LOCK: u32 = 12;
    pub const LOCKT: u32 = 13;
    pub const LOCKU: u32 = 14;
    pub const LOOKUP: u32 = 15;
    pub const LOOKUPP: u32 = 16;
    pub const NVERIFY: u32 = 17;
    pub const OPEN: u32 = 18;
    pub const OPENATTR: u32 = 19;
    pub const OPEN_CONFIRM: u32 = 20;
    pub const OPEN_DOWNGRADE: u32 = 21;
    pub const PUTFH: u32 = 22;
    pub const PUTPUBFH: u32 = 23;
    pub const PUTROOTFH: u32 = 24;
    pub const READ: u32 = 25;
    pub const READDIR: u32 = 26;
    pub const READLINK: u32 = 27;
    pub const REMOVE: u32 = 28;
    pub const RENAME: u32 = 29;
    pub const RENEW: u32 = 30;
    pub const RESTOREFH: u32 = 31;
    pub const SAVEFH: u32 = 32;
    pub const SECINFO: u32 = 33;
    pub const SETATTR: u32 = 34;
    pub const SETCLIENTID: u32 = 35;
    pub const SETCLIENTID_CONFIRM: u32 = 36;
    pub const VERIFY: u32 = 37;
    pub const WRITE: u32 = 38;
    pub const RELEASE_LOCKOWNER: u32 = 39;
    pub const BACKCHANNEL_CTL: u32 = 40;
    pub const BIND_CONN_TO_SESSION: u32 = 41;
    pub const EXCHANGE_ID: u32 = 42;
    pub const CREATE_SESSION: u32 = 43;
    pub const DESTROY_SESSION: u32 = 44;
    pub const FREE_STATEID: u32 = 45;
    pub const GET_DIR_DELEGATION: u32 = 46;
    pub const GETDEVICEINFO: u32 = 47;
    pub const GETDEVICELIST: u32 = 48;
    pub const LAYOUTCOMMIT: u32 = 49;
    pub const LAYOUTGET: u32 = 50;
    pub const LAYOUTRETURN: u32 = 51;
    pub const SECINFO_NO_NAME: u32 = 52;
    pub const SEQUENCE: u32 = 53;
    pub const SET_SSV: u32 = 54;
    pub const TEST_STATEID: u32 = 55;
    pub const WANT_DELEGATION: u32 = 56;
    pub const DESTROY_CLIENTID: u32 = 57;
    pub const RECLAIM_COMPLETE: u32 = 58;
    pub const ALLOCATE: u32 = 59;
    pub const COPY: u32 = 60;
    pub const COPY_NOTIFY: u32 = 61;
    pub const DEALLOCATE: u32 = 62;
    pub const IO_ADVISE: u32 = 63;
    pub const LAYOUTERROR: u32 = 64;
    pub const LAYOUTSTATS: u32 = 65;
    pub const OFFLOAD_CANCEL: u32 = 66;
    pub const OFFLOAD_STATUS: u32 = 67;
    pub const READ_PLUS: u32 = 68;
    pub const SEEK: u32 = 69;
    pub const WRITE_SAME: u32 = 70;
    pub const CLONE: u32 = 71;
    pub const GETXATTR: u32 = 72;
    pub const SETXATTR: u32 = 73;
    pub const LISTXATTRS: u32 = 74;
    pub const REMOVEXATTR: u32 = 75;
    pub const ILLEGAL: u32 = 10044;
    /// The last operation of each minor version (1 → RECLAIM_COMPLETE, 2 → REMOVEXATTR).
    pub const LAST_OF_MINOR: [u32; 3] = [39, 58, 75];
}

// ---- modules: session and state operations (sessions/state work) ----
pub mod backchannel_ctl;
pub mod bind_conn_to_session;
pub mod close;
pub mod create_session;
pub mod delegreturn;
pub mod destroy_clientid;
pub mod destroy_session;
pub mod exchange_id;
pub mod free_stateid;
pub mod lock;
pub mod lockt;
pub mod locku;
pub mod open;
pub mod open_deleg;
pub mod open_downgrade;
pub mod reclaim_complete;
pub mod sequence;
#[cfg(test)]
mod state_tests;
mod state_util;
pub mod test_stateid;

// ---- modules: namespace and I/O operations (namespace work) ----
pub mod access;
pub mod allocate;
pub mod commit;
pub mod create;
pub mod deallocate;
pub mod getattr;
pub mod getfh;
pub mod link;
pub mod lookup;
pub mod lookupp;
#[cfg(test)]
mod ns_tests;
pub mod ns_util;
pub mod nverify;
pub mod putfh;
pub mod putpubfh;
pub mod putrootfh;
pub mod read;
pub mod readdir;
pub mod readlink;
pub mod remove;
pub mod rename;
pub mod restorefh;
pub mod savefh;
pub mod secinfo;
pub mod secinfo_no_name;
pub mod seek;
pub mod setattr;
pub mod verify;
pub mod write;

// ---- modules: extended attributes (RFC 8276) ----
pub mod getxattr;
pub mod listxattrs;
pub mod removexattr;
pub mod setxattr;
mod xattr_util;

// ---- modules: pNFS operations (layout work) ----
pub mod getdeviceinfo;
pub mod getdevicelist;
pub mod layoutcommit;
pub mod layoutget;
pub mod layoutreturn;
#[cfg(test)]
mod pnfs_tests;
pub mod pnfs_util;
#[cfg(test)]
mod test_fixture;

/// Answers NFS4ERR_NOTSUPP: an operation of the protocol that pnfsd does not offer.
pub fn notsupp(_: &mut Ctx<'_>, _: &mut XdrReader<'_>, _: &mut XdrWriter) -> Result<(), NfsStat> {
    Err(NfsStat::NOTSUPP)
}

const fn op(name: &'static str, handler: Handler, min_minor: u32, needs_fh: bool) -> OpDesc {
    OpDesc {
        name,
        handler,
        min_minor,
        needs_fh,
    }
}

/// The table. `None` for numbers that are no operation (→ OP_ILLEGAL).
pub fn lookup(opnum: u32) -> Option<OpDesc> {
    use opnum::*;
    Some(match opnum {
        // ---- session and state operations (sessions/state work) ----
        EXCHANGE_ID => op("EXCHANGE_ID", exchange_id::run, 1, false),
        CREATE_SESSION => op("CREATE_SESSION", create_session::run, 1, false),
        DESTROY_SESSION => op("DESTROY_SESSION", destroy_session::run, 1, false),
        DESTROY_CLIENTID => op("DESTROY_CLIENTID", destroy_clientid::run, 1, false),
        SEQUENCE => op("SEQUENCE", sequence::run, 1, false),
        BIND_CONN_TO_SESSION => op("BIND_CONN_TO_SESSION", bind_conn_to_session::run, 1, false),
        BACKCHANNEL_CTL => op("BACKCHANNEL_CTL", backchannel_ctl::run, 1, false),
        RECLAIM_COMPLETE => op("RECLAIM_COMPLETE", reclaim_complete::run, 1, false),
        OPEN => op("OPEN", open::run, 0, true),
        OPEN_DOWNGRADE => op("OPEN_DOWNGRADE", open_downgrade::run, 0, true),
        CLOSE => op("CLOSE", close::run, 0, true),
        LOCK => op("LOCK", lock::run, 0, true),
        LOCKT => op("LOCKT", lockt::run, 0, true),
        LOCKU => op("LOCKU", locku::run, 0, true),
        TEST_STATEID => op("TEST_STATEID", test_stateid::run, 1, false),
        FREE_STATEID => op("FREE_STATEID", free_stateid::run, 1, false),
        DELEGRETURN => op("DELEGRETURN", delegreturn::run, 0, true),
        // No delegations: DELEGPURGE is NOTSUPP (RFC 8881 §18.5.3, no CLAIM_DELEGATE_PREV),
        // and so are WANT_DELEGATION and GET_DIR_DELEGATION.
        DELEGPURGE => op("DELEGPURGE", notsupp, 0, false),
        WANT_DELEGATION => op("WANT_DELEGATION", notsupp, 1, true),
        GET_DIR_DELEGATION => op("GET_DIR_DELEGATION", notsupp, 1, true),
        SET_SSV => op("SET_SSV", notsupp, 1, false),
        // NFSv4.0-only operations are illegal in a 4.1 COMPOUND: RFC 8881 §16.2.3.1.
        OPEN_CONFIRM => op("OPEN_CONFIRM", notsupp, 0, true),
        RENEW => op("RENEW", notsupp, 0, false),
        SETCLIENTID => op("SETCLIENTID", notsupp, 0, false),
        SETCLIENTID_CONFIRM => op("SETCLIENTID_CONFIRM", notsupp, 0, false),
        RELEASE_LOCKOWNER => op("RELEASE_LOCKOWNER", notsupp, 0, false),

        // ---- namespace and I/O operations (namespace work) ----
        PUTROOTFH => op("PUTROOTFH", putrootfh::run, 0, false),
        PUTPUBFH => op("PUTPUBFH", putpubfh::run, 0, false),
        PUTFH => op("PUTFH", putfh::run, 0, false),
        GETFH => op("GETFH", getfh::run, 0, true),
        SAVEFH => op("SAVEFH", savefh::run, 0, true),
        RESTOREFH => op("RESTOREFH", restorefh::run, 0, false),
        LOOKUP => op("LOOKUP", lookup::run, 0, true),
        LOOKUPP => op("LOOKUPP", lookupp::run, 0, true),
        GETATTR => op("GETATTR", getattr::run, 0, true),
        SETATTR => op("SETATTR", setattr::run, 0, true),
        VERIFY => op("VERIFY", verify::run, 0, true),
        NVERIFY => op("NVERIFY", nverify::run, 0, true),
        ACCESS => op("ACCESS", access::run, 0, true),
        CREATE => op("CREATE", create::run, 0, true),
        REMOVE => op("REMOVE", remove::run, 0, true),
        RENAME => op("RENAME", rename::run, 0, true),
        LINK => op("LINK", link::run, 0, true),
        READDIR => op("READDIR", readdir::run, 0, true),
        READLINK => op("READLINK", readlink::run, 0, true),
        READ => op("READ", read::run, 0, true),
        WRITE => op("WRITE", write::run, 0, true),
        COMMIT => op("COMMIT", commit::run, 0, true),
        SECINFO => op("SECINFO", secinfo::run, 0, true),
        SECINFO_NO_NAME => op("SECINFO_NO_NAME", secinfo_no_name::run, 1, true),
        OPENATTR => op("OPENATTR", notsupp, 0, true),
        ALLOCATE => op("ALLOCATE", allocate::run, 2, true),
        DEALLOCATE => op("DEALLOCATE", deallocate::run, 2, true),
        SEEK => op("SEEK", seek::run, 2, true),
        READ_PLUS => op("READ_PLUS", notsupp, 2, true),
        COPY => op("COPY", notsupp, 2, true),
        COPY_NOTIFY => op("COPY_NOTIFY", notsupp, 2, true),
        OFFLOAD_CANCEL => op("OFFLOAD_CANCEL", notsupp, 2, true),
        OFFLOAD_STATUS => op("OFFLOAD_STATUS", notsupp, 2, true),
        IO_ADVISE => op("IO_ADVISE", notsupp, 2, true),
        WRITE_SAME => op("WRITE_SAME", notsupp, 2, true),
        CLONE => op("CLONE", notsupp, 2, true),
        GETXATTR => op("GETXATTR", getxattr::run, 2, true),
        SETXATTR => op("SETXATTR", setxattr::run, 2, true),
        LISTXATTRS => op("LISTXATTRS", listxattrs::run, 2, true),
        REMOVEXATTR => op("REMOVEXATTR", removexattr::run, 2, true),

        // ---- pNFS operations (layout work) ----
        LAYOUTGET => op("LAYOUTGET", layoutget::run, 1, true),
        LAYOUTCOMMIT => op("LAYOUTCOMMIT", layoutcommit::run, 1, true),
        // LAYOUTRETURN(ALL) needs no current filehandle; FILE and FSID check for one.
        LAYOUTRETURN => op("LAYOUTRETURN", layoutreturn::run, 1, false),
        GETDEVICEINFO => op("GETDEVICEINFO", getdeviceinfo::run, 1, false),
        GETDEVICELIST => op("GETDEVICELIST", getdevicelist::run, 1, true),
        LAYOUTERROR => op("LAYOUTERROR", notsupp, 2, true),
        LAYOUTSTATS => op("LAYOUTSTATS", notsupp, 2, true),
        _ => return None,
    })
}
