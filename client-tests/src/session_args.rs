//! Arguments of the session operations (RFC 8881 §18.35, §18.36, §18.46): SEQUENCE,
//! EXCHANGE_ID flags, CREATE_SESSION and its channel attributes. Re-exported by `ops`.

use pnfsd::xdr::XdrWriter;

use crate::rpc::AuthSys;

/// `SEQUENCE4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceArgs {
    pub sessionid: [u8; 16],
    pub sequenceid: u32,
    pub slotid: u32,
    pub highest_slotid: u32,
    pub cachethis: bool,
}

impl SequenceArgs {
    /// SEQUENCE on `slotid` of `sessionid` without reply caching: what tests of its errors send.
    pub fn uncached(sessionid: [u8; 16], slotid: u32, sequenceid: u32, highest: u32) -> Self {
        SequenceArgs {
            sessionid,
            sequenceid,
            slotid,
            highest_slotid: highest,
            cachethis: false,
        }
    }
}

/// EXCHGID4_FLAG_* (RFC 8881 §18.35).
pub mod exchgid_flag {
    pub const SUPP_MOVED_REFER: u32 = 0x1;
    pub const SUPP_MOVED_MIGR: u32 = 0x2;
    pub const BIND_PRINC_STATEID: u32 = 0x100;
    pub const USE_NON_PNFS: u32 = 0x1_0000;
    pub const USE_PNFS_MDS: u32 = 0x2_0000;
    pub const USE_PNFS_DS: u32 = 0x4_0000;
    pub const UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
    pub const CONFIRMED_R: u32 = 0x8000_0000;
}

/// CREATE_SESSION4_FLAG_*.
pub mod session_flag {
    pub const PERSIST: u32 = 0x1;
    pub const CONN_BACK_CHAN: u32 = 0x2;
    pub const CONN_RDMA: u32 = 0x4;
}

/// `channel_attrs4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelAttrs {
    pub headerpadsize: u32,
    pub maxrequestsize: u32,
    pub maxresponsesize: u32,
    pub maxresponsesize_cached: u32,
    pub maxoperations: u32,
    pub maxrequests: u32,
}

impl ChannelAttrs {
    pub fn encode(&self, w: &mut XdrWriter) {
        w.u32(self.headerpadsize);
        w.u32(self.maxrequestsize);
        w.u32(self.maxresponsesize);
        w.u32(self.maxresponsesize_cached);
        w.u32(self.maxoperations);
        w.u32(self.maxrequests);
        w.u32(0); // ca_rdma_ird<1>: empty
    }

    /// What the tests ask for on the fore channel (the server may lower it).
    pub fn fore_default() -> ChannelAttrs {
        ChannelAttrs {
            headerpadsize: 0,
            maxrequestsize: 1 << 20,
            maxresponsesize: 1 << 20,
            maxresponsesize_cached: 64 << 10,
            maxoperations: 16,
            maxrequests: 8,
        }
    }

    pub fn back_default() -> ChannelAttrs {
        ChannelAttrs {
            headerpadsize: 0,
            maxrequestsize: 16 << 10,
            maxresponsesize: 16 << 10,
            maxresponsesize_cached: 0,
            maxoperations: 4,
            maxrequests: 1,
        }
    }
}

/// `CREATE_SESSION4args`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSessionArgs {
    pub clientid: u64,
    pub sequence: u32,
    pub flags: u32,
    pub fore: ChannelAttrs,
    pub back: ChannelAttrs,
    pub cb_program: u32,
    /// `callback_sec_parms4`: AUTH_SYS with these parameters, or AUTH_NONE.
    pub cb_sec: Option<AuthSys>,
}
