//! The attribute codec (`nfs4::attr`) in the environment of an operation's server and
//! export rule: the codec itself sees only `AttrEnv`.

use crate::nfs4::attr::{encode_fattr, AttrEnv};
use crate::nfs4::ctx::Ctx;
use crate::nfs4::types::Bitmap;
use crate::store::Attr;
use crate::xdr::XdrWriter;

/// Runs `f` with the environment of the server of `ctx`.
pub fn with_env<R>(ctx: &Ctx, f: impl FnOnce(&AttrEnv<'_>) -> R) -> R {
    let store = &ctx.srv.store;
    let fsstat = || store.fsstat();
    let env = AttrEnv {
        minor: ctx.minor,
        lease_seconds: ctx.srv.opts.lease_seconds,
        // A client whose export rule says `pnfs = false` sees no layout type (crate::exports).
        layout_types: if ctx.access.pnfs {
            &ctx.srv.opts.layout_types
        } else {
            &[]
        },
        volume_uuid: store.volume_uuid(),
        block_size: store.block_size(),
        fsstat: &fsstat,
    };
    f(&env)
}

/// `attr::encode_fattr` in the environment of the server of `ctx`.
pub fn encode_attrs(ctx: &Ctx, attr: &Attr, req: &Bitmap, w: &mut XdrWriter) -> Bitmap {
    with_env(ctx, |env| encode_fattr(env, attr, req, w))
}
