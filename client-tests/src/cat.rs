//! `nfs-cat`'s core: the bytes of one file as pnfsd serves them through the MDS (READ with
//! the anonymous stateid, RFC 8881 §8.2.3), written to any `Write`. The Linux-guest suite
//! compares them with the checksums computed in the guest (docs/testing-vm.md): data the
//! guest wrote through a layout straight to the volume must read back the same from the MDS.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use pnfsd::nfs4::types::Stateid;

use crate::attrs::basic;
use crate::error::{ClientError, Result};
use crate::fs::OpenFile;
use crate::session::{Session, SessionOptions};
use crate::NfsStat;

/// How often a READ refused with GRACE or DELAY is retried (right after a server restart),
/// one second apart.
const RETRIES: u32 = 120;

/// Copies the file at `path` (relative to the export root, `/`-separated) to `out`; returns
/// the number of bytes. Fails unless exactly the file's size (GETATTR) came back.
pub async fn cat(addr: SocketAddr, minor: u32, path: &str, out: &mut impl Write) -> Result<u64> {
    let mut o = SessionOptions::new("nfs-cat");
    o.minor = minor;
    let s = Session::connect_with(addr, o).await?;
    let res = copy(&s, path, out).await;
    // The client's state goes either way; a failure to destroy it is not the caller's.
    let _ = s.destroy().await;
    res
}

async fn copy(s: &Session, path: &str, out: &mut impl Write) -> Result<u64> {
    let fh = s.lookup_path(path).await?;
    let size = s
        .getattr_fh(&fh, basic())
        .await?
        .size
        .ok_or_else(|| ClientError::Protocol("GETATTR returned no size".into()))?;
    let f = OpenFile {
        fh,
        stateid: Stateid::ANONYMOUS,
    };
    let mut done = 0u64;
    while done < size {
        let want = (size - done).min(s.max_io() as u64) as usize;
        let chunk = read_retrying(s, &f, done, want).await?;
        if chunk.is_empty() {
            break;
        }
        out.write_all(&chunk)?;
        done += chunk.len() as u64;
    }
    out.flush()?;
    if done != size {
        return Err(ClientError::Protocol(format!(
            "{path}: read {done} bytes, the file has {size}"
        )));
    }
    Ok(done)
}

async fn read_retrying(s: &Session, f: &OpenFile, off: u64, len: usize) -> Result<Vec<u8>> {
    let mut tries = 0;
    loop {
        match s.read_all(f, off, len).await {
            Err(ClientError::Nfs { status, .. })
                if (status == NfsStat::GRACE || status == NfsStat::DELAY) && tries < RETRIES =>
            {
                tries += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            r => return r,
        }
    }
}
