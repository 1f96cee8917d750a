//! OPEN (RFC 8881 §18.16): CLAIM_NULL (by name, with create), CLAIM_FH and CLAIM_PREVIOUS
//! (reclaim in grace, of an open and of the delegation the client held); UNCHECKED4, GUARDED4,
//! EXCLUSIVE4 and EXCLUSIVE4_1 creates, the verifier kept in atime/mtime (§18.16.3). Delegations
//! (recall of conflicting ones, the offer in the reply) are in nfs4/delegs.

use crate::nfs4::attr::{self, num};
use crate::nfs4::ctx::Ctx;
use crate::nfs4::delegs;
use crate::nfs4::delegs::{
    OPEN_DELEGATE_NONE, OPEN_DELEGATE_READ, OPEN_DELEGATE_WRITE, WANT_CANCEL, WANT_MASK,
};
use crate::nfs4::helpers::caller::{clientid, decode_owner};
use crate::nfs4::helpers::fh::{cur_attr, require_lookup_dir, require_regular, NotRegular};
use crate::nfs4::helpers::name::{check_name, decode_component};
use crate::nfs4::helpers::perm::{require, share_access_bits, ACCESS4_MODIFY};
use crate::nfs4::state::{OpenReq, ShareAccess};
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Bitmap, Fh, Stateid};
use crate::store::{Attr, DirChange, FileType, NewNode, SetAttrs, SetTime, StoreError, Timespec};
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// OPEN4_SHARE_ACCESS_WANT_*_PUSH_DELEG bits (RFC 8881 §18.16.1).
const WANT_SIGNAL_PUSH: u32 = 0x3_0000;
/// OPEN4_SHARE_ACCESS_WANT_DELEG_TIMESTAMPS and _WANT_OPEN_XOR_DELEGATION (RFC 9754 §4,
/// §5): accepted and not acted on. `open_arguments` does not offer them (attr/fs.rs), so a
/// client that sends one anyway gets what the reply says: an open stateid (no
/// OPEN4_RESULT_NO_OPEN_STATEID) and a delegation without delegated timestamps. pynfs
/// DELEG24/25 send DELEG_TIMESTAMPS after misreading the attribute's bitmap.
const WANT_NOT_OFFERED: u32 = 0x30_0000;
/// OPEN4_RESULT_LOCKTYPE_POSIX: our byte-range locks behave as POSIX ones.
const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 0x4;
pub enum CreateHow {
    Unchecked(Bitmap, SetAttrs),
    Guarded(Bitmap, SetAttrs),
    /// EXCLUSIVE4 (verifier only) and EXCLUSIVE4_1 (verifier and attributes).
    Exclusive([u8; 8], Bitmap, SetAttrs),
}

pub enum Claim {
    Null(Vec<u8>),
    Previous(u32),
    Fh,
    DelegateCur,
    DelegatePrev,
}

/// `OPEN4args`.
pub struct OpenArgs {
    pub share_access: u32,
    pub share_deny: u32,
    pub owner: Vec<u8>,
    pub create: Option<CreateHow>,
    pub claim: Claim,
}

impl OpenArgs {
    pub fn decode(r: &mut XdrReader<'_>, minor: u32) -> Result<OpenArgs, NfsStat> {
        let _seqid = r.u32()?;
        let share_access = r.u32()?;
        let share_deny = r.u32()?;
        let (_clientid, owner) = decode_owner(r)?;
        let create = match r.u32()? {
            0 => None,
            1 => Some(match r.u32()? {
                0 => {
                    let (m, s) = attr::decode_fattr_minor(r, minor)?;
                    CreateHow::Unchecked(m, s)
                }
                1 => {
                    let (m, s) = attr::decode_fattr_minor(r, minor)?;
                    CreateHow::Guarded(m, s)
                }
                2 => CreateHow::Exclusive(r.array()?, Bitmap::default(), SetAttrs::default()),
                3 => {
                    let v = r.array()?;
                    let (m, s) = attr::decode_fattr_minor(r, minor)?;
                    CreateHow::Exclusive(v, m, s)
                }
                _ => return Err(NfsStat::BADXDR),
            }),
            _ => return Err(NfsStat::BADXDR),
        };
        let claim = match r.u32()? {
            0 => Claim::Null(decode_component(r)?),
            1 => Claim::Previous(r.u32()?),
            2 => {
                let _deleg: Stateid = r.read()?;
                let _name = decode_component(r)?;
                Claim::DelegateCur
            }
            3 => {
                let _name = decode_component(r)?;
                Claim::DelegatePrev
            }
            4 => Claim::Fh,
            5 => {
                let _deleg: Stateid = r.read()?;
                Claim::DelegateCur
            }
            6 => Claim::DelegatePrev,
            _ => return Err(NfsStat::BADXDR),
        };
        Ok(OpenArgs {
            share_access,
            share_deny,
            owner,
            create,
            claim,
        })
    }
}

/// What the open found or made.
struct Target {
    attr: Attr,
    cinfo: Option<DirChange>,
    attrset: Bitmap,
    created: bool,
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let args = OpenArgs::decode(r, ctx.minor)?;
    let cid = clientid(ctx)?;
    if args.share_access & !(0xff | WANT_MASK | WANT_SIGNAL_PUSH | WANT_NOT_OFFERED) != 0
        || args.share_access & WANT_MASK > WANT_CANCEL
    {
        return Err(NfsStat::INVAL);
    }
    let share = ShareAccess::new(args.share_access & 0xff, args.share_deny)?;
    // OPEN reads the namespace (the table's flag); opening for write or creating changes it,
    // which the export's rule must allow (ROFS otherwise, as knfsd).
    if share.access & ShareAccess::WRITE != 0 || args.create.is_some() {
        ctx.access.require_write()?;
    }
    let reclaim = matches!(args.claim, Claim::Previous(_));
    ctx.srv.state.check_open_reclaim(cid, reclaim)?;
    let t = find_or_create(ctx, &args, share)?;
    let ino = require_regular(&t.attr, NotRegular::OPEN)?;
    if !t.created {
        require(&ctx.cred, &t.attr, share_access_bits(&share))?;
    }
    let fh = Fh {
        ino,
        generation: t.attr.generation,
    };
    delegs::break_conflicts(
        &ctx.srv.delegs_env(),
        cid,
        fh,
        delegs::Breaker::Access(share.access),
    )?;
    let sid = ctx.srv.state.open(&OpenReq {
        clientid: cid,
        owner: &args.owner,
        ino,
        share,
    })?;
    let mut attrset = t.attrset;
    if let Some(CreateHow::Unchecked(_, set)) = &args.create {
        // UNCHECKED4 over an existing file applies the size (the O_TRUNC of a create).
        if !t.created && set.size.is_some() {
            let truncate = SetAttrs {
                size: set.size,
                ..SetAttrs::default()
            };
            ctx.srv
                .store
                .setattr(ino, &truncate)
                .map_err(NfsStat::from)?;
            attrset.set(num::SIZE);
        }
    }
    ctx.current_fh = Some(fh);
    ctx.current_stateid = Some(sid);
    let by_name_or_fh = matches!(args.claim, Claim::Null(_) | Claim::Fh);
    let offer = match args.claim {
        // The reclaim of a delegation held before the restart (§10.2.1).
        Claim::Previous(t) if t != OPEN_DELEGATE_NONE => {
            delegs::reclaim(&ctx.srv.state, cid, fh, t == OPEN_DELEGATE_WRITE)
        }
        _ => delegs::offer(&ctx.srv.state, cid, fh, args.share_access, by_name_or_fh),
    };
    sid.encode(w);
    let c = t.cinfo.unwrap_or(DirChange {
        before: 0,
        after: 0,
    });
    w.bool(t.cinfo.is_some());
    w.u64(c.before);
    w.u64(c.after);
    w.u32(OPEN4_RESULT_LOCKTYPE_POSIX);
    attrset.encode(w);
    delegs::encode(w, &offer);
    Ok(())
}

fn find_or_create(ctx: &Ctx<'_>, args: &OpenArgs, share: ShareAccess) -> Result<Target, NfsStat> {
    let cur = cur_attr(ctx)?;
    let name = match &args.claim {
        Claim::Null(name) => name,
        Claim::Fh | Claim::Previous(_) => {
            if args.create.is_some() {
                return Err(NfsStat::INVAL);
            }
            if let Claim::Previous(deleg) = args.claim {
                // NONE, or the delegation the client held (given back by `run`);
                // OPEN_DELEGATE_NONE_EXT is no type a client can have held.
                if !matches!(
                    deleg,
                    OPEN_DELEGATE_NONE | OPEN_DELEGATE_READ | OPEN_DELEGATE_WRITE
                ) {
                    return Err(NfsStat::INVAL);
                }
            }
            return Ok(Target {
                attr: cur,
                cinfo: None,
                attrset: Bitmap::default(),
                created: false,
            });
        }
        // No delegation stateid exists; reclaiming delegations is not offered.
        Claim::DelegateCur => return Err(NfsStat::BAD_STATEID),
        Claim::DelegatePrev => return Err(NfsStat::NOTSUPP),
    };
    require_lookup_dir(&cur)?;
    check_name(name)?;
    let store = &ctx.srv.store;
    let dir = cur.ino;
    let unchanged = |a: Attr| Target {
        cinfo: Some(DirChange {
            before: cur.change,
            after: cur.change,
        }),
        attr: a,
        attrset: Bitmap::default(),
        created: false,
    };
    let Some(how) = &args.create else {
        return Ok(unchanged(store.lookup(dir, name)?));
    };
    if share.access & ShareAccess::WRITE == 0
        && matches!(how, CreateHow::Unchecked(_, s) | CreateHow::Guarded(_, s) if s.size.is_some())
    {
        // Setting the size needs write access (RFC 8881 §18.16.3).
        return Err(NfsStat::INVAL);
    }
    let cred = (ctx.cred.uid, ctx.cred.gid);
    let (mask, mut set, verf) = match how {
        CreateHow::Unchecked(m, s) | CreateHow::Guarded(m, s) => (m.clone(), s.clone(), None),
        CreateHow::Exclusive(v, m, s) => {
            // §18.16.3: only `suppattr_exclcreat` attributes, and not the ones that hold
            // the verifier.
            if attr::intersect(m, &attr::suppattr_exclcreat()) != *m
                || m.is_set(num::TIME_ACCESS_SET)
                || m.is_set(num::TIME_MODIFY_SET)
            {
                return Err(NfsStat::INVAL);
            }
            (m.clone(), s.clone(), Some(*v))
        }
    };
    if let Some(v) = verf {
        let (a, m) = verifier_times(&v);
        set.atime = Some(SetTime::Client(a));
        set.mtime = Some(SetTime::Client(m));
    }
    require(&ctx.cred, &cur, ACCESS4_MODIFY)?;
    match store.create(dir, name, NewNode::Regular, &set, cred) {
        Ok((attr, cinfo)) => {
            let mut attrset = mask;
            if verf.is_some() {
                attrset.set(num::TIME_ACCESS);
                attrset.set(num::TIME_MODIFY);
            }
            Ok(Target {
                attr,
                cinfo: Some(cinfo),
                attrset,
                created: true,
            })
        }
        Err(StoreError::Exist) => {
            let a = store.lookup(dir, name)?;
            match how {
                CreateHow::Guarded(..) => Err(NfsStat::EXIST),
                CreateHow::Unchecked(..) => Ok(unchanged(a)),
                CreateHow::Exclusive(v, m, _) => {
                    // A retry of our own exclusive create finds its verifier (§18.16.3).
                    let (at, mt) = verifier_times(v);
                    if a.ftype == FileType::Regular && a.atime == at && a.mtime == mt {
                        let mut t = unchanged(a);
                        t.attrset = m.clone();
                        t.attrset.set(num::TIME_ACCESS);
                        t.attrset.set(num::TIME_MODIFY);
                        t.created = true;
                        Ok(t)
                    } else {
                        Err(NfsStat::EXIST)
                    }
                }
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// The exclusive-create verifier as (atime, mtime): its two halves as seconds.
fn verifier_times(v: &[u8; 8]) -> (Timespec, Timespec) {
    let hi = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
    let lo = u32::from_be_bytes([v[4], v[5], v[6], v[7]]);
    (
        Timespec {
            sec: hi as i64,
            nsec: 0,
        },
        Timespec {
            sec: lo as i64,
            nsec: 0,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_bytes(create: Option<u32>, claim: u32) -> Vec<u8> {
        let mut w = XdrWriter::new();
        w.u32(0);
        w.u32(3);
        w.u32(0);
        w.u64(7);
        w.opaque(b"owner");
        match create {
            None => w.u32(0),
            Some(how) => {
                w.u32(1);
                w.u32(how);
                if how >= 2 {
                    w.opaque_fixed(&[1, 2, 3, 4, 5, 6, 7, 8]);
                }
                if how != 2 {
                    Bitmap::default().encode(&mut w);
                    w.opaque(b"");
                }
            }
        }
        w.u32(claim);
        match claim {
            0 => w.opaque(b"file"),
            1 => w.u32(0),
            _ => {}
        }
        w.buf
    }

    #[test]
    fn decodes_the_claims_and_create_modes() {
        let b = args_bytes(Some(3), 0);
        let mut r = XdrReader::new(&b);
        let a = OpenArgs::decode(&mut r, 1).unwrap();
        r.finish().unwrap();
        assert!(matches!(a.create, Some(CreateHow::Exclusive(v, _, _)) if v[7] == 8));
        assert!(matches!(a.claim, Claim::Null(ref n) if n == b"file"));
        let b = args_bytes(None, 4);
        assert!(matches!(
            OpenArgs::decode(&mut XdrReader::new(&b), 1).unwrap().claim,
            Claim::Fh
        ));
        let b = args_bytes(Some(2), 1);
        assert!(OpenArgs::decode(&mut XdrReader::new(&b), 1).is_ok());
        let b = args_bytes(None, 9);
        assert_eq!(
            OpenArgs::decode(&mut XdrReader::new(&b), 1).err(),
            Some(NfsStat::BADXDR)
        );
    }

    #[test]
    fn verifier_halves() {
        let (a, m) = verifier_times(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(a.sec, 1);
        assert_eq!(m.sec, u32::MAX as i64);
    }
}
