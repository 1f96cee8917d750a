//! Who is calling: the principal of the request (RFC 8881 §2.4), the client of its session,
//! the owners it names (`open_owner4` / `lock_owner4`), and the credential it wants
//! callbacks made with. No policy: that is in `nfs4::state`.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::state::Principal;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::NFS4_OPAQUE_LIMIT;
use crate::rpc::auth::read_authsys;
use crate::rpc::msg::flavor;
use crate::rpc::CbCred;
use crate::xdr::{XdrReader, XdrResult};

/// The principal of the request: who owns client records (RFC 8881 §2.4), from the
/// credential as sent, not as an export rule squashed it.
pub fn principal(ctx: &Ctx<'_>) -> Principal {
    Principal {
        flavor: ctx.rpc_cred.flavor,
        uid: ctx.rpc_cred.uid,
    }
}

/// The client of the COMPOUND's session (the dispatcher put SEQUENCE first).
pub fn clientid(ctx: &Ctx<'_>) -> Result<u64, NfsStat> {
    ctx.session
        .as_ref()
        .map(|s| s.clientid)
        .ok_or(NfsStat::OP_NOT_IN_SESSION)
}

/// `open_owner4` / `lock_owner4`: the clientid and the opaque owner.
pub fn decode_owner(r: &mut XdrReader<'_>) -> XdrResult<(u64, Vec<u8>)> {
    let clientid = r.u64()?;
    let owner = r.opaque_vec(NFS4_OPAQUE_LIMIT)?;
    Ok((clientid, owner))
}

/// `callback_sec_parms4<>` (CREATE_SESSION, BACKCHANNEL_CTL) with the credential callbacks use: the first AUTH_NONE or
/// AUTH_SYS entry (no RPCSEC_GSS on the backchannel).
pub fn decode_cb_sec(r: &mut XdrReader<'_>) -> XdrResult<(Vec<u32>, Option<CbCred>)> {
    let n = r.array_len(16, 4)?;
    let mut flavors = Vec::with_capacity(n);
    let mut cred = None;
    for _ in 0..n {
        let flavor = r.u32()?;
        match flavor {
            flavor::AUTH_NONE => {
                cred.get_or_insert(CbCred::None);
            }
            flavor::AUTH_SYS => {
                let sys = read_authsys(r)?;
                cred.get_or_insert(CbCred::Sys(sys));
            }
            flavor::RPCSEC_GSS => {
                let _service = r.u32()?;
                let _from_server = r.opaque(NFS4_OPAQUE_LIMIT)?;
                let _from_client = r.opaque(NFS4_OPAQUE_LIMIT)?;
            }
            _ => return Err(crate::xdr::XdrError::BadValue),
        }
        flavors.push(flavor);
    }
    Ok((flavors, cred))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdr::XdrWriter;

    #[test]
    fn cb_sec_parms_decode_and_refuse_unknown_flavors() {
        let mut w = XdrWriter::new();
        w.u32(2);
        w.u32(0);
        w.u32(1);
        w.u32(7);
        w.opaque(b"host");
        w.u32(0);
        w.u32(0);
        w.u32(1);
        w.u32(10);
        let mut r = XdrReader::new(&w.buf);
        // The first usable entry (AUTH_NONE) is what callbacks use.
        assert_eq!(
            decode_cb_sec(&mut r).unwrap(),
            (vec![0, 1], Some(CbCred::None))
        );
        r.finish().unwrap();
        // AUTH_SYS alone: its ids and machine name.
        let r = XdrReader::new(&w.buf[8..]);
        let mut sys = vec![0, 0, 0, 1];
        sys.extend_from_slice(r.rest());
        let (_, cred) = decode_cb_sec(&mut XdrReader::new(&sys)).unwrap();
        let Some(CbCred::Sys(c)) = cred else {
            panic!("{cred:?}")
        };
        assert_eq!(
            (c.uid, c.gid, c.gids, c.machine),
            (0, 0, vec![10], b"host".to_vec())
        );
        let mut w = XdrWriter::new();
        w.u32(1);
        w.u32(5);
        assert!(decode_cb_sec(&mut XdrReader::new(&w.buf)).is_err());
    }
}
