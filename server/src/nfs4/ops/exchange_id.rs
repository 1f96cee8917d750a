//! EXCHANGE_ID (RFC 8881 §18.35): establishes a client record. We answer as a pNFS MDS
//! (docs/design.md §5) with SP4_NONE; SSV is refused with ENCR_ALG_UNSUPP (knfsd does the same)
//! and MACH_CRED with INVAL, because we have no integrity-protected (RPCSEC_GSS) transport.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::principal;
use crate::nfs4::state::ExchangeIdReq;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, NFS4_OPAQUE_LIMIT};
use crate::store::Timespec;
use crate::xdr::{Xdr, XdrReader, XdrResult, XdrWriter};

/// `state_protect_how4`.
const SP4_NONE: u32 = 0;
const SP4_MACH_CRED: u32 = 1;
const SP4_SSV: u32 = 2;

/// What identifies this server across restarts: clients reclaim only when the owner and
/// scope stay the same (RFC 8881 §2.10.4, §8.4.2.1), so these are constants.
pub const SERVER_MAJOR_ID: &[u8] = b"pnfsd";
pub const SERVER_SCOPE: &[u8] = b"pnfsd";

/// `nfs_impl_id4`.
pub struct ImplId {
    pub domain: Vec<u8>,
    pub name: Vec<u8>,
    pub date: Timespec,
}

impl Xdr for ImplId {
    fn encode(&self, w: &mut XdrWriter) {
        w.string(&self.domain);
        w.string(&self.name);
        self.date.encode(w);
    }
    fn decode(r: &mut XdrReader<'_>) -> XdrResult<Self> {
        Ok(ImplId {
            domain: r.string(NFS4_OPAQUE_LIMIT)?,
            name: r.string(NFS4_OPAQUE_LIMIT)?,
            date: r.read()?,
        })
    }
}

/// `EXCHANGE_ID4args`.
pub struct ExchangeIdArgs {
    pub verifier: [u8; 8],
    pub ownerid: Vec<u8>,
    pub flags: u32,
    pub state_protect: u32,
    pub impl_id: Vec<ImplId>,
}

impl ExchangeIdArgs {
    pub fn decode(r: &mut XdrReader<'_>) -> XdrResult<Self> {
        let verifier = r.array()?;
        let ownerid = r.opaque_vec(NFS4_OPAQUE_LIMIT)?;
        let flags = r.u32()?;
        let state_protect = r.u32()?;
        match state_protect {
            SP4_NONE => {}
            SP4_MACH_CRED => {
                let _enforce: Bitmap = r.read()?;
                let _allow: Bitmap = r.read()?;
            }
            SP4_SSV => {
                let _enforce: Bitmap = r.read()?;
                let _allow: Bitmap = r.read()?;
                for _ in 0..2 {
                    // ssp_hash_algs, ssp_encr_algs: sec_oid4<>
                    let n = r.array_len(64, 4)?;
                    for _ in 0..n {
                        r.opaque(NFS4_OPAQUE_LIMIT)?;
                    }
                }
                let _window = r.u32()?;
                let _handles = r.u32()?;
            }
            _ => return Err(crate::xdr::XdrError::BadValue),
        }
        let impl_id = r.vec(1, 12)?;
        Ok(ExchangeIdArgs {
            verifier,
            ownerid,
            flags,
            state_protect,
            impl_id,
        })
    }
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let args = ExchangeIdArgs::decode(r)?;
    match args.state_protect {
        SP4_SSV => return Err(NfsStat::ENCR_ALG_UNSUPP),
        SP4_MACH_CRED => return Err(NfsStat::INVAL),
        _ => {}
    }
    if args.ownerid.is_empty() {
        return Err(NfsStat::INVAL);
    }
    let res = ctx.srv.state.exchange_id(&ExchangeIdReq {
        owner: args.ownerid,
        verifier: args.verifier,
        flags: args.flags,
        principal: principal(ctx),
    })?;
    w.u64(res.clientid);
    w.u32(res.sequenceid);
    w.u32(res.flags);
    w.u32(SP4_NONE);
    // server_owner4: so_minor_id, so_major_id.
    w.u64(0);
    w.opaque(SERVER_MAJOR_ID);
    w.opaque(SERVER_SCOPE);
    w.vec(&[ImplId {
        domain: b"pnfsd.org".to_vec(),
        name: concat!("pnfsd ", env!("CARGO_PKG_VERSION"))
            .as_bytes()
            .to_vec(),
        date: Timespec::default(),
    }]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(sp: u32) -> Vec<u8> {
        let mut w = XdrWriter::new();
        w.opaque_fixed(&[1; 8]);
        w.opaque(b"linux-client");
        w.u32(0x1_0000);
        w.u32(sp);
        if sp == SP4_MACH_CRED {
            Bitmap(vec![1]).encode(&mut w);
            Bitmap(vec![]).encode(&mut w);
        }
        w.u32(1);
        w.string(b"kernel.org");
        w.string(b"Linux");
        Timespec { sec: 5, nsec: 0 }.encode(&mut w);
        w.buf
    }

    #[test]
    fn decodes_args_with_and_without_state_protection() {
        for sp in [SP4_NONE, SP4_MACH_CRED] {
            let b = args(sp);
            let mut r = XdrReader::new(&b);
            let a = ExchangeIdArgs::decode(&mut r).unwrap();
            r.finish().unwrap();
            assert_eq!(a.ownerid, b"linux-client");
            assert_eq!(a.state_protect, sp);
            assert_eq!(a.impl_id.len(), 1);
        }
        let mut b = args(SP4_NONE);
        b[28..32].copy_from_slice(&9u32.to_be_bytes());
        assert!(ExchangeIdArgs::decode(&mut XdrReader::new(&b)).is_err());
    }
}
