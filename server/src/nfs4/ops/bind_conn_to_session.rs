//! BIND_CONN_TO_SESSION (RFC 8881 §18.34): binds the connection to a session for the fore
//! channel, the backchannel or both. The backchannel needs a sender from the transport.

use crate::nfs4::callback;
use crate::nfs4::ctx::Ctx;
use crate::nfs4::state::BindDir;
use crate::nfs4::status::NfsStat;
use crate::xdr::{XdrReader, XdrWriter};

/// `channel_dir_from_client4`.
fn dir_from_client(v: u32) -> Option<BindDir> {
    match v {
        1 => Some(BindDir::Fore),
        2 => Some(BindDir::Back),
        3 => Some(BindDir::ForeOrBoth),
        7 => Some(BindDir::BackOrBoth),
        _ => None,
    }
}

/// `channel_dir_from_server4`.
fn dir_to_server(d: BindDir) -> u32 {
    match d {
        BindDir::Fore => 1,
        BindDir::Back => 2,
        _ => 3,
    }
}

pub fn run(ctx: &mut Ctx<'_>, r: &mut XdrReader<'_>, w: &mut XdrWriter) -> Result<(), NfsStat> {
    let sessionid: [u8; 16] = r.array()?;
    let dir = r.u32()?;
    let _rdma = r.bool()?;
    let Some(dir) = dir_from_client(dir) else {
        return Err(NfsStat::INVAL);
    };
    let got = ctx.srv.state.bind_conn_to_session(
        &sessionid,
        dir,
        ctx.conn.id,
        ctx.conn.backchannel.clone(),
    )?;
    if got != BindDir::Fore {
        // A connection bound for the backchannel is probed afresh: the answer to a
        // CB_PATH_DOWN_SESSION (RFC 8881 §18.34.3).
        callback::queue_probe(&ctx.srv.backchannel(), &sessionid);
    }
    w.opaque_fixed(&sessionid);
    w.u32(dir_to_server(got));
    w.bool(false);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions() {
        assert_eq!(dir_from_client(7), Some(BindDir::BackOrBoth));
        assert_eq!(dir_from_client(4), None);
        assert_eq!(dir_to_server(BindDir::Both), 3);
        assert_eq!(dir_to_server(BindDir::Back), 2);
    }
}
