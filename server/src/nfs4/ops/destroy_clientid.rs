//! DESTROY_CLIENTID (RFC 8881 §18.50): CLIENTID_BUSY while the client has sessions. Its
//! async copies (nfs4/copy/offload.rs) are cancelled and freed with it.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let clientid = r.u64()?;
    ctx.srv.state.destroy_clientid(clientid)?;
    ctx.srv.copies.forget_client(clientid);
    Ok(())
}
