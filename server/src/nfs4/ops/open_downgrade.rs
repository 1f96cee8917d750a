//! OPEN_DOWNGRADE (RFC 8881 §18.18): narrows an open's access/deny to a mode it had.

use super::state_util::{clientid, decode_or_badxdr, resolve_stateid, try_stat};
use crate::nfs4::compound::Ctx;
use crate::nfs4::state::ShareAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::xdr::{Xdr, XdrReader, XdrWriter};

pub fn open_downgrade(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> NfsStat {
    let sid: Stateid = decode_or_badxdr!(r.read());
    let _seqid = decode_or_badxdr!(r.u32());
    let access = decode_or_badxdr!(r.u32());
    let deny = decode_or_badxdr!(r.u32());
    let cid = try_stat!(clientid(ctx));
    let sid = try_stat!(resolve_stateid(ctx, sid));
    let Some(fh) = ctx.current_fh else {
        return NfsStat::NOFILEHANDLE;
    };
    // Want flags mean nothing here (§18.18.3): only the access and deny bits.
    let share = try_stat!(ShareAccess::new(access, deny));
    let new = try_stat!(ctx.srv.state.open_downgrade(cid, &sid, fh.ino, share));
    ctx.current_stateid = Some(new);
    new.encode(w);
    NfsStat::OK
}
