//! One file per NFS operation (docs/design.md, house rule 7) and the static table the COMPOUND
//! dispatcher runs from (docs/design.md, house rule 8). A handler decodes its arguments from the
//! reader, calls the store / state / layout layers, writes its result *body* (what follows the
//! status; only for the ops whose failure carries a body, or on OK) into the writer, and returns
//! `Ok(())` or the error status. The dispatcher writes the opcode and status, turns the `Result`
//! into the status, and checks, once, everything the table says (minor version, SEQUENCE first or a
//! sessionless op alone, NFSv4.0-only ops, current filehandle): handlers never re-check those.

use crate::exports::Need;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::opcode::NfsOp;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub type Handler = fn(&mut Ctx<'_>, &mut XdrReader<'_>, &mut XdrWriter) -> Result<(), NfsStat>;

/// What the dispatcher checks about an operation before it runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpFlags {
    /// Lowest minor version that has the operation (OP_ILLEGAL below it).
    pub min_minor: u32,
    /// NFS4ERR_NOFILEHANDLE unless a current filehandle is set.
    pub needs_fh: bool,
    /// May open a COMPOUND without SEQUENCE, and must then be its only operation (RFC 8881
    /// §18.46.3; §18.34.3, §18.35.3, §18.36.3, §18.37.3, §18.50.3). Every other operation
    /// outside a session is OP_NOT_IN_SESSION.
    pub sessionless: bool,
    /// Must be the only operation of its COMPOUND, also after SEQUENCE (BIND_CONN_TO_SESSION,
    /// RFC 8881 §18.34.3): NOT_ONLY_OP.
    pub solo: bool,
    /// An NFSv4.0 operation that 4.1 made obsolete ("MNI", RFC 8881 §18 table 12): NOTSUPP.
    pub v40_only: bool,
    /// What the export's client rule must allow (crate::exports): an operation with a
    /// current filehandle reads the namespace unless the table says more or less.
    pub access: Need,
}

/// An operation of the table: its handler and what the dispatcher checks first.
#[derive(Clone, Copy)]
pub struct OpDesc {
    pub handler: Handler,
    pub flags: OpFlags,
}

const fn op(handler: Handler, min_minor: u32) -> OpDesc {
    OpDesc {
        handler,
        flags: OpFlags {
            min_minor,
            needs_fh: false,
            sessionless: false,
            solo: false,
            v40_only: false,
            access: Need::Nothing,
        },
    }
}

impl OpDesc {
    const fn fh(mut self) -> Self {
        self.flags.needs_fh = true;
        self.flags.access = Need::Read;
        self
    }
    /// Changes the namespace (ROFS on a read-only rule).
    const fn write(mut self) -> Self {
        self.flags.access = Need::Write;
        self
    }
    const fn needs(mut self, access: Need) -> Self {
        self.flags.access = access;
        self
    }
    const fn sessionless(mut self) -> Self {
        self.flags.sessionless = true;
        self
    }
    const fn solo(mut self) -> Self {
        self.flags.solo = true;
        self
    }
    const fn v40_only(mut self) -> Self {
        self.flags.v40_only = true;
        self
    }
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
pub mod open_downgrade;
pub mod reclaim_complete;
pub mod sequence;
pub mod test_stateid;

// ---- modules: namespace and I/O operations (namespace work) ----
pub mod access;
pub mod allocate;
pub mod commit;
pub mod copy;
pub mod create;
pub mod deallocate;
pub mod getattr;
pub mod getfh;
pub mod link;
pub mod lookup;
pub mod lookupp;
pub mod nverify;
pub mod offload_cancel;
pub mod offload_status;
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

// ---- modules: pNFS operations (layout work) ----
pub mod getdeviceinfo;
pub mod getdevicelist;
pub mod layoutcommit;
pub mod layoutget;
pub mod layoutreturn;

/// Answers NFS4ERR_NOTSUPP: an operation of the protocol that pnfsd does not offer.
pub fn notsupp(_: &mut Ctx<'_>, _: &mut XdrReader<'_>, _: &mut XdrWriter) -> Result<(), NfsStat> {
    Err(NfsStat::NOTSUPP)
}

/// One entry per operation number up to the last one of the highest minor version.
const TABLE_LEN: usize = NfsOp::REMOVEXATTR.0 as usize + 1;

/// The table, indexed by opcode: `None` for numbers that are no operation (→ OP_ILLEGAL).
static OPS: [Option<OpDesc>; TABLE_LEN] = table(&[
    // ---- session and state operations (sessions/state work) ----
    (NfsOp::EXCHANGE_ID, op(exchange_id::run, 1).sessionless()),
    (
        NfsOp::CREATE_SESSION,
        op(create_session::run, 1).sessionless(),
    ),
    (
        NfsOp::DESTROY_SESSION,
        op(destroy_session::run, 1).sessionless(),
    ),
    (
        NfsOp::DESTROY_CLIENTID,
        op(destroy_clientid::run, 1).sessionless(),
    ),
    (NfsOp::SEQUENCE, op(sequence::run, 1)),
    (
        NfsOp::BIND_CONN_TO_SESSION,
        op(bind_conn_to_session::run, 1).sessionless().solo(),
    ),
    (NfsOp::BACKCHANNEL_CTL, op(backchannel_ctl::run, 1)),
    (NfsOp::RECLAIM_COMPLETE, op(reclaim_complete::run, 1)),
    (NfsOp::OPEN, op(open::run, 0).fh()),
    (NfsOp::OPEN_DOWNGRADE, op(open_downgrade::run, 0).fh()),
    (NfsOp::CLOSE, op(close::run, 0).fh().needs(Need::Nothing)),
    (NfsOp::LOCK, op(lock::run, 0).fh()),
    (NfsOp::LOCKT, op(lockt::run, 0).fh()),
    (NfsOp::LOCKU, op(locku::run, 0).fh().needs(Need::Nothing)),
    (NfsOp::TEST_STATEID, op(test_stateid::run, 1)),
    (NfsOp::FREE_STATEID, op(free_stateid::run, 1)),
    (
        NfsOp::DELEGRETURN,
        op(delegreturn::run, 0).fh().needs(Need::Nothing),
    ),
    // No delegations: DELEGPURGE is NOTSUPP (RFC 8881 §18.5.3, no CLAIM_DELEGATE_PREV),
    // and so are WANT_DELEGATION and GET_DIR_DELEGATION.
    (NfsOp::DELEGPURGE, op(notsupp, 0)),
    (NfsOp::WANT_DELEGATION, op(notsupp, 1).fh()),
    (NfsOp::GET_DIR_DELEGATION, op(notsupp, 1).fh()),
    (NfsOp::SET_SSV, op(notsupp, 1)),
    // NFSv4.0 operations that 4.1 made obsolete: NOTSUPP ("MNI", RFC 8881 §18 table 12).
    (NfsOp::OPEN_CONFIRM, op(notsupp, 0).fh().v40_only()),
    (NfsOp::RENEW, op(notsupp, 0).v40_only()),
    (NfsOp::SETCLIENTID, op(notsupp, 0).v40_only()),
    (NfsOp::SETCLIENTID_CONFIRM, op(notsupp, 0).v40_only()),
    (NfsOp::RELEASE_LOCKOWNER, op(notsupp, 0).v40_only()),
    // ---- namespace and I/O operations (namespace work) ----
    (NfsOp::PUTROOTFH, op(putrootfh::run, 0)),
    (NfsOp::PUTPUBFH, op(putpubfh::run, 0)),
    (NfsOp::PUTFH, op(putfh::run, 0)),
    (NfsOp::GETFH, op(getfh::run, 0).fh()),
    (NfsOp::SAVEFH, op(savefh::run, 0).fh()),
    (NfsOp::RESTOREFH, op(restorefh::run, 0)),
    (NfsOp::LOOKUP, op(lookup::run, 0).fh()),
    (NfsOp::LOOKUPP, op(lookupp::run, 0).fh()),
    (NfsOp::GETATTR, op(getattr::run, 0).fh()),
    (NfsOp::SETATTR, op(setattr::run, 0).fh().write()),
    (NfsOp::VERIFY, op(verify::run, 0).fh()),
    (NfsOp::NVERIFY, op(nverify::run, 0).fh()),
    (NfsOp::ACCESS, op(access::run, 0).fh()),
    (NfsOp::CREATE, op(create::run, 0).fh().write()),
    (NfsOp::REMOVE, op(remove::run, 0).fh().write()),
    (NfsOp::RENAME, op(rename::run, 0).fh().write()),
    (NfsOp::LINK, op(link::run, 0).fh().write()),
    (NfsOp::READDIR, op(readdir::run, 0).fh()),
    (NfsOp::READLINK, op(readlink::run, 0).fh()),
    (NfsOp::READ, op(read::run, 0).fh()),
    (NfsOp::WRITE, op(write::run, 0).fh().write()),
    (NfsOp::COMMIT, op(commit::run, 0).fh().write()),
    (
        NfsOp::SECINFO,
        op(secinfo::run, 0).fh().needs(Need::Secinfo),
    ),
    (
        NfsOp::SECINFO_NO_NAME,
        op(secinfo_no_name::run, 1).fh().needs(Need::Secinfo),
    ),
    (NfsOp::OPENATTR, op(notsupp, 0).fh()),
    (NfsOp::ALLOCATE, op(allocate::run, 2).fh().write()),
    (NfsOp::DEALLOCATE, op(deallocate::run, 2).fh().write()),
    (NfsOp::SEEK, op(seek::run, 2).fh()),
    (NfsOp::READ_PLUS, op(notsupp, 2).fh()),
    // Intra-server (nfs4::copy): COPY_NOTIFY serves only inter-server copies. OFFLOAD_*
    // name an async copy by its stateid; the current filehandle (the destination, as the
    // Linux client sends it) is required but not checked against the copy.
    (NfsOp::COPY, op(copy::run, 2).fh().write()),
    (NfsOp::COPY_NOTIFY, op(notsupp, 2).fh()),
    (NfsOp::OFFLOAD_CANCEL, op(offload_cancel::run, 2).fh()),
    (NfsOp::OFFLOAD_STATUS, op(offload_status::run, 2).fh()),
    (NfsOp::IO_ADVISE, op(notsupp, 2).fh()),
    (NfsOp::WRITE_SAME, op(notsupp, 2).fh()),
    (NfsOp::CLONE, op(notsupp, 2).fh()),
    (NfsOp::GETXATTR, op(getxattr::run, 2).fh()),
    (NfsOp::SETXATTR, op(setxattr::run, 2).fh().write()),
    (NfsOp::LISTXATTRS, op(listxattrs::run, 2).fh()),
    (NfsOp::REMOVEXATTR, op(removexattr::run, 2).fh().write()),
    // ---- pNFS operations (layout work) ----
    (
        NfsOp::LAYOUTGET,
        op(layoutget::run, 1).fh().needs(Need::Layout),
    ),
    (
        NfsOp::LAYOUTCOMMIT,
        op(layoutcommit::run, 1).fh().needs(Need::LayoutWrite),
    ),
    // LAYOUTRETURN(ALL) needs no current filehandle; FILE and FSID check for one.
    (NfsOp::LAYOUTRETURN, op(layoutreturn::run, 1)),
    (
        NfsOp::GETDEVICEINFO,
        op(getdeviceinfo::run, 1).needs(Need::Layout),
    ),
    (
        NfsOp::GETDEVICELIST,
        op(getdevicelist::run, 1).fh().needs(Need::Layout),
    ),
    (NfsOp::LAYOUTERROR, op(notsupp, 2).fh()),
    (NfsOp::LAYOUTSTATS, op(notsupp, 2).fh()),
]);

const fn table(entries: &[(NfsOp, OpDesc)]) -> [Option<OpDesc>; TABLE_LEN] {
    let mut t = [None; TABLE_LEN];
    let mut i = 0;
    while i < entries.len() {
        t[entries[i].0 .0 as usize] = Some(entries[i].1);
        i += 1;
    }
    t
}

/// The operation `op`, if the protocol has one of that number.
pub fn lookup(op: NfsOp) -> Option<&'static OpDesc> {
    OPS.get(op.0 as usize)?.as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_number_has_an_entry() {
        for n in 0..TABLE_LEN as u32 + 5 {
            let known = (3..TABLE_LEN as u32).contains(&n);
            assert_eq!(lookup(NfsOp(n)).is_some(), known, "{:?}", NfsOp(n));
        }
        assert!(lookup(NfsOp::ILLEGAL).is_none());
    }

    /// Every operation on the current filehandle is checked against the export's rules,
    /// except those that only give state back; every change needs a read-write rule.
    #[test]
    fn every_filehandle_operation_is_checked_against_the_exports() {
        let gives_back = [NfsOp::CLOSE, NfsOp::LOCKU, NfsOp::DELEGRETURN];
        let changes = [
            NfsOp::SETATTR,
            NfsOp::CREATE,
            NfsOp::REMOVE,
            NfsOp::RENAME,
            NfsOp::LINK,
            NfsOp::WRITE,
            NfsOp::COMMIT,
            NfsOp::COPY,
            NfsOp::ALLOCATE,
            NfsOp::DEALLOCATE,
            NfsOp::SETXATTR,
            NfsOp::REMOVEXATTR,
        ];
        for n in 0..TABLE_LEN as u32 {
            let Some(d) = lookup(NfsOp(n)) else { continue };
            let op = NfsOp(n);
            if d.flags.needs_fh && !gives_back.contains(&op) {
                assert_ne!(d.flags.access, Need::Nothing, "{op:?}");
            }
            if changes.contains(&op) {
                assert_eq!(d.flags.access, Need::Write, "{op:?}");
            }
        }
        for op in [NfsOp::LAYOUTGET, NfsOp::GETDEVICEINFO, NfsOp::GETDEVICELIST] {
            assert_eq!(lookup(op).unwrap().flags.access, Need::Layout, "{op:?}");
        }
        assert_eq!(
            lookup(NfsOp::LAYOUTCOMMIT).unwrap().flags.access,
            Need::LayoutWrite
        );
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
            let _ = crate::nfs4::helpers::caller::decode_cb_sec(&mut XdrReader::new(&bytes));
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
