//! CREATE_SESSION (RFC 8881 §18.36): confirms a client record and makes a session; the
//! channel attributes are negotiated in `nfs4::state::session`. With
//! CREATE_SESSION4_FLAG_CONN_BACK_CHAN the fore connection also carries the backchannel,
//! which the callback sender then probes with CB_NULL.

use crate::nfs4::callback;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::caller::{decode_cb_sec, principal};
use crate::nfs4::state::{ChannelAttrs, CreateSessionReq};
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrResult, XdrWriter};

pub fn decode_channel_attrs(r: &mut XdrReader<'_>) -> XdrResult<ChannelAttrs> {
    let mut a = ChannelAttrs {
        headerpadsize: r.u32()?,
        maxrequestsize: r.u32()?,
        maxresponsesize: r.u32()?,
        maxresponsesize_cached: r.u32()?,
        maxoperations: r.u32()?,
        maxrequests: r.u32()?,
        rdma_ird: None,
    };
    let n = r.array_len(1, 4)?;
    if n == 1 {
        a.rdma_ird = Some(r.u32()?);
    }
    Ok(a)
}

pub fn encode_channel_attrs(a: &ChannelAttrs, w: &mut XdrWriter) {
    w.u32(a.headerpadsize);
    w.u32(a.maxrequestsize);
    w.u32(a.maxresponsesize);
    w.u32(a.maxresponsesize_cached);
    w.u32(a.maxoperations);
    w.u32(a.maxrequests);
    match a.rdma_ird {
        Some(x) => {
            w.u32(1);
            w.u32(x);
        }
        None => w.u32(0),
    }
}

/// `CREATE_SESSION4args`.
pub struct CreateSessionArgs {
    pub clientid: u64,
    pub sequence: u32,
    pub flags: u32,
    pub fore: ChannelAttrs,
    pub back: ChannelAttrs,
    pub cb_program: u32,
    pub sec_flavors: Vec<u32>,
    /// The credential of callbacks (`None`: only RPCSEC_GSS offered; AUTH_NONE then).
    pub cb_cred: Option<crate::rpc::CbCred>,
}

impl CreateSessionArgs {
    pub fn decode(r: &mut XdrReader<'_>) -> XdrResult<Self> {
        let (clientid, sequence, flags) = (r.u64()?, r.u32()?, r.u32()?);
        let fore = decode_channel_attrs(r)?;
        let back = decode_channel_attrs(r)?;
        let cb_program = r.u32()?;
        let (sec_flavors, cb_cred) = decode_cb_sec(r)?;
        Ok(CreateSessionArgs {
            clientid,
            sequence,
            flags,
            fore,
            back,
            cb_program,
            sec_flavors,
            cb_cred,
        })
    }
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let a = CreateSessionArgs::decode(r)?;
    let res = ctx.srv.state.create_session(CreateSessionReq {
        clientid: a.clientid,
        sequence: a.sequence,
        flags: a.flags,
        fore: a.fore,
        back: a.back,
        cb_program: a.cb_program,
        principal: principal(ctx),
        conn: ctx.conn.id,
        peer: ctx.conn.peer,
        backchannel: ctx.conn.backchannel.clone(),
    })?;
    ctx.srv
        .state
        .set_cb_cred(&res.sessionid, a.cb_cred.unwrap_or_default(), ctx.minor);
    // A backchannel is probed with CB_NULL, asynchronously (§18.36.3).
    callback::queue_probe(&ctx.srv.backchannel(), &res.sessionid);
    w.opaque_fixed(&res.sessionid);
    w.u32(res.sequence);
    w.u32(res.flags);
    encode_channel_attrs(&res.fore, w);
    encode_channel_attrs(&res.back, w);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_attrs_round_trip() {
        let a = ChannelAttrs {
            headerpadsize: 0,
            maxrequestsize: 1 << 20,
            maxresponsesize: 1 << 20,
            maxresponsesize_cached: 4096,
            maxoperations: 16,
            maxrequests: 64,
            rdma_ird: Some(2),
        };
        let mut w = XdrWriter::new();
        encode_channel_attrs(&a, &mut w);
        assert_eq!(w.len(), 7 * 4 + 4);
        let mut r = XdrReader::new(&w.buf);
        assert_eq!(decode_channel_attrs(&mut r).unwrap(), a);
        r.finish().unwrap();
    }
}
