//! CREATE (RFC 8881 §18.4): directories, symbolic links, devices, sockets and FIFOs in the
//! current directory; the new object becomes the current filehandle. Regular files are
//! made by OPEN (NF4REG → BADTYPE).

use crate::nfs4::attr::decode_fattr_minor;
use crate::nfs4::attr::file::ftype;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::{cur_attr, fh_of, require_dir};
use crate::nfs4::helpers::name::{check_new_name, decode_component};
use crate::nfs4::helpers::perm::require_dir_write;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::encode_change_info;
use crate::nfs4::types::Bitmap;
use crate::rpc::Cred;
use crate::store::{NewNode, SetAttrs};
use crate::xdr::{Xdr, XdrReader, XdrWriter};

/// Longest symbolic link target (the usual PATH_MAX).
const MAX_LINKDATA: usize = 4096;

/// `CREATE4args`. `node` is `Err` for a type CREATE does not make (checked after decoding,
/// so that malformed arguments are BADXDR first).
#[derive(Debug)]
pub struct CreateArgs {
    pub node: Result<NewNode, NfsStat>,
    pub name: Vec<u8>,
    pub mask: Bitmap,
    pub attrs: SetAttrs,
}

pub fn decode(r: &mut XdrReader<'_>, minor: u32) -> Result<CreateArgs, NfsStat> {
    let node = match r.u32()? {
        ftype::NF4LNK => {
            let n = r.remaining();
            let data = r.opaque(n)?;
            if data.is_empty() {
                Err(NfsStat::INVAL)
            } else if data.len() > MAX_LINKDATA {
                Err(NfsStat::NAMETOOLONG)
            } else {
                Ok(NewNode::Symlink(data.to_vec()))
            }
        }
        t @ (ftype::NF4BLK | ftype::NF4CHR) => {
            let (major, minor) = (r.u32()?, r.u32()?);
            Ok(if t == ftype::NF4BLK {
                NewNode::BlockDev { major, minor }
            } else {
                NewNode::CharDev { major, minor }
            })
        }
        ftype::NF4SOCK => Ok(NewNode::Socket),
        ftype::NF4FIFO => Ok(NewNode::Fifo),
        ftype::NF4DIR => Ok(NewNode::Directory),
        // NF4REG, named-attribute types and unknown values have void arms.
        _ => Err(NfsStat::BADTYPE),
    };
    let name = decode_component(r)?;
    let (mask, attrs) = decode_fattr_minor(r, minor)?;
    Ok(CreateArgs {
        node,
        name,
        mask,
        attrs,
    })
}

/// Only root creates objects owned by someone else, or by a group it is not in (the same
/// rule as SETATTR, RFC 8881 §5.8.2.26 chown_restricted).
pub fn check_owner(cred: &Cred, sa: &SetAttrs) -> Result<(), NfsStat> {
    if cred.uid == 0 {
        return Ok(());
    }
    if sa.uid.is_some_and(|u| u != cred.uid) {
        return Err(NfsStat::PERM);
    }
    if sa
        .gid
        .is_some_and(|g| g != cred.gid && !cred.gids.contains(&g))
    {
        return Err(NfsStat::PERM);
    }
    Ok(())
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let args = decode(r, ctx.minor)?;
    let dir = cur_attr(ctx)?;
    require_dir(&dir)?;
    let node = args.node?;
    check_new_name(&args.name)?;
    require_dir_write(&ctx.cred, &dir)?;
    // A size is meaningless for what CREATE makes.
    if args.attrs.size.is_some() {
        return Err(NfsStat::INVAL);
    }
    check_owner(&ctx.cred, &args.attrs)?;
    let cred = (ctx.cred.uid, ctx.cred.gid);
    let (a, change) = ctx
        .srv
        .store
        .create(dir.ino, &args.name, node, &args.attrs, cred)?;
    ctx.current_fh = Some(fh_of(&a));
    encode_change_info(w, &change);
    args.mask.encode(w);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(t: u32, extra: impl FnOnce(&mut XdrWriter)) -> Vec<u8> {
        let mut w = XdrWriter::new();
        w.u32(t);
        extra(&mut w);
        w.string(b"obj");
        w.u32(0); // empty bitmap
        w.u32(0); // empty attrlist
        w.buf
    }

    #[test]
    fn decode_types() {
        let d = |b: &[u8]| decode(&mut XdrReader::new(b), 1);
        let a = d(&args(ftype::NF4LNK, |w| w.string(b"target"))).unwrap();
        assert_eq!(a.node, Ok(NewNode::Symlink(b"target".to_vec())));
        assert_eq!(a.name, b"obj");
        let a = d(&args(ftype::NF4CHR, |w| {
            w.u32(1);
            w.u32(3)
        }))
        .unwrap();
        assert_eq!(a.node, Ok(NewNode::CharDev { major: 1, minor: 3 }));
        assert_eq!(
            d(&args(ftype::NF4DIR, |_| {})).unwrap().node,
            Ok(NewNode::Directory)
        );
        assert_eq!(
            d(&args(ftype::NF4REG, |_| {})).unwrap().node,
            Err(NfsStat::BADTYPE)
        );
        assert_eq!(d(&args(99, |_| {})).unwrap().node, Err(NfsStat::BADTYPE));
        assert_eq!(
            d(&args(ftype::NF4LNK, |w| w.string(b""))).unwrap().node,
            Err(NfsStat::INVAL)
        );
        let me = Cred {
            flavor: 1,
            uid: 7,
            gid: 8,
            gids: vec![9],
            machine: vec![],
        };
        let owned = |uid, gid| SetAttrs {
            uid,
            gid,
            ..SetAttrs::default()
        };
        assert_eq!(check_owner(&me, &owned(Some(7), Some(9))), Ok(()));
        assert_eq!(check_owner(&me, &owned(Some(0), None)), Err(NfsStat::PERM));
        assert_eq!(check_owner(&me, &owned(None, Some(10))), Err(NfsStat::PERM));
        // Truncated arguments are BADXDR.
        let full = args(ftype::NF4BLK, |w| {
            w.u32(8);
            w.u32(0)
        });
        for n in 0..full.len() {
            assert_eq!(d(&full[..n]).err(), Some(NfsStat::BADXDR), "prefix {n}");
        }
    }
}
