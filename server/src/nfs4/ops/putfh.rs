//! PUTFH (RFC 8881 §18.19). A handle that is not one of ours is BADHANDLE, one whose inode
//! is gone or was reused is STALE.

use crate::nfs4::ctx::Ctx;
use crate::nfs4::helpers::fh::fh_attr;
use crate::nfs4::status::NfsStat;
use crate::nfs4::types::{Fh, NFS4_FHSIZE};
use crate::xdr::{XdrReader, XdrWriter};

/// `PUTFH4args`: `nfs_fh4 object` (opaque<NFS4_FHSIZE>).
pub fn decode(r: &mut XdrReader<'_>) -> Result<Option<Fh>, NfsStat> {
    let b = r.opaque(NFS4_FHSIZE)?;
    Ok(Fh::from_bytes(b))
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, _w: &mut XdrWriter) -> Result<(), NfsStat> {
    let fh = decode(r)?.ok_or(NfsStat::BADHANDLE)?;
    fh_attr(ctx, fh)?;
    ctx.current_fh = Some(fh);
    // RFC 8881 §16.2.3.1.2: a PUTFH-like operation clears the current stateid.
    ctx.current_stateid = None;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Ino;
    use crate::xdr::XdrWriter;

    #[test]
    fn decode_handles() {
        let fh = Fh {
            ino: Ino(9),
            generation: 2,
        };
        let mut w = XdrWriter::new();
        w.opaque(&fh.to_bytes());
        assert_eq!(decode(&mut XdrReader::new(&w.buf)), Ok(Some(fh)));
        // Foreign handles decode (they are valid XDR) but are not ours: BADHANDLE later.
        let mut w = XdrWriter::new();
        w.opaque(&[1u8; 32]);
        assert_eq!(decode(&mut XdrReader::new(&w.buf)), Ok(None));
        let mut w = XdrWriter::new();
        w.opaque(&[]);
        assert_eq!(decode(&mut XdrReader::new(&w.buf)), Ok(None));
        // Longer than NFS4_FHSIZE, or cut short: BADXDR.
        let mut w = XdrWriter::new();
        w.opaque(&[0u8; 129]);
        assert_eq!(decode(&mut XdrReader::new(&w.buf)), Err(NfsStat::BADXDR));
        assert_eq!(
            decode(&mut XdrReader::new(&[0, 0, 0, 16, 1, 2])),
            Err(NfsStat::BADXDR)
        );
    }
}
