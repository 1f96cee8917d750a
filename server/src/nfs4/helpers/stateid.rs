//! The stateids operations name (RFC 8881 §8.2): the current stateid resolved, and the check
//! of the stateid an I/O operation carries. The state itself is `nfs4::state`'s.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::perm::{require_owner_override, ACCESS4_MODIFY, ACCESS4_READ};
use crate::nfs4::state::IoAccess;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::Stateid;
use crate::store::Attr;

/// RFC 8881 §16.2.3.1.2: the special "current stateid" stands for the one the previous
/// operation produced; without one, or when that is the invalid stateid (after CLOSE), it is
/// BAD_STATEID. Any other stateid is itself.
pub fn resolve_stateid(ctx: &Ctx<'_>, sid: Stateid) -> Result<Stateid, NfsStat> {
    if sid != Stateid::CURRENT {
        return Ok(sid);
    }
    match ctx.current_stateid {
        Some(s) if s != Stateid::INVALID => Ok(s),
        _ => Err(NfsStat::BAD_STATEID),
    }
}

/// Checks the stateid of READ / WRITE / SETATTR(size) / ALLOCATE / DEALLOCATE / SEEK. The
/// anonymous and READ-bypass stateids (RFC 8881 §8.2.3) are checked against the mode bits,
/// and refused during the grace period (§8.4.2: the I/O could conflict with a share
/// reservation being reclaimed); any other against the client's state.
pub fn check_io_stateid(
    ctx: &Ctx<'_>,
    sid: Stateid,
    a: &Attr,
    access: IoAccess,
) -> Result<(), NfsStat> {
    let sid = resolve_stateid(ctx, sid)?;
    if !sid.is_anonymous_or_bypass() {
        let clientid = ctx.session.as_ref().map(|s| s.clientid);
        return ctx.srv.state.check_io(clientid, &sid, a.ino, access);
    }
    if ctx.srv.state.in_grace() {
        return Err(NfsStat::GRACE);
    }
    let want = match access {
        IoAccess::Read => ACCESS4_READ,
        IoAccess::Write => ACCESS4_MODIFY,
    };
    require_owner_override(&ctx.cred, a, want)
}
