//! SECINFO (RFC 8881 §18.29): the security flavors for a name in the current directory.
//! The flavors are those the export's client rule accepts (crate::exports). On success the current filehandle is consumed
//! (§2.6.3.1.1.8): a following operation that needs one gets NOFILEHANDLE.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::{cur_attr, require_dir};
use crate::nfs4::helpers::name::{check_name, decode_component};
use crate::nfs4::helpers::perm::{require, ACCESS4_LOOKUP};
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

/// `SECINFO4resok`: the flavors in order of preference (no RPCSEC_GSS, so no
/// `rpcsec_gss_info` bodies).
pub fn encode_flavors(w: &mut XdrWriter, flavors: &[u32]) {
    w.u32(flavors.len() as u32);
    for f in flavors {
        w.u32(*f);
    }
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let name = decode_component(r)?;
    let dir = cur_attr(ctx)?;
    require_dir(&dir)?;
    check_name(&name)?;
    require(&ctx.cred, &dir, ACCESS4_LOOKUP)?;
    ctx.srv.store.lookup(dir.ino, &name)?;
    encode_flavors(w, &ctx.access.flavors);
    ctx.current_fh = None;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::msg::flavor;

    #[test]
    fn flavors() {
        let mut w = XdrWriter::new();
        encode_flavors(&mut w, &[flavor::AUTH_SYS, flavor::AUTH_NONE]);
        let mut r = XdrReader::new(&w.buf);
        assert_eq!(r.u32().unwrap(), 2);
        assert_eq!(
            (r.u32().unwrap(), r.u32().unwrap()),
            (flavor::AUTH_SYS, flavor::AUTH_NONE)
        );
        r.finish().unwrap();
    }
}
