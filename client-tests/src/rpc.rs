//! ONC RPC v2 messages (RFC 5531) and TCP record marking (RFC 5531 §11), client side. Pure
//! codec: builds CALL records and parses what arrives (a REPLY to one of our calls, or a CALL
//! the server makes on the backchannel, RFC 8881 §2.10.3.1). No I/O here (docs/design.md, house
//! rule 1).

use pnfsd::xdr::{XdrReader, XdrResult, XdrWriter};

use crate::error::RpcError;

pub const NFS_PROGRAM: u32 = 100003;
pub const NFS_V4: u32 = 4;
pub const PROC_NULL: u32 = 0;
pub const PROC_COMPOUND: u32 = 1;
/// Callback program version of NFSv4.1 (RFC 8881 §18.36: `NFS_CB` = 1).
pub const NFS_CB_VERSION: u32 = 1;
pub const CB_PROC_NULL: u32 = 0;
pub const CB_PROC_COMPOUND: u32 = 1;

pub const AUTH_NONE: u32 = 0;
pub const AUTH_SYS: u32 = 1;

const RPC_VERSION: u32 = 2;
const MSG_CALL: u32 = 0;
const MSG_REPLY: u32 = 1;
const LAST_FRAGMENT: u32 = 0x8000_0000;
/// Largest record the client accepts (a READ of 1 MiB plus headers fits many times).
pub const MAX_RECORD: usize = 16 << 20;

/// AUTH_SYS parameters (RFC 5531 appendix A, `authsys_parms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSys {
    pub stamp: u32,
    pub machine: Vec<u8>,
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

impl AuthSys {
    /// root on "pnfsd-test", the credential the tests use by default.
    pub fn root() -> AuthSys {
        AuthSys {
            stamp: 0,
            machine: b"pnfsd-test".to_vec(),
            uid: 0,
            gid: 0,
            gids: vec![],
        }
    }

    pub fn encode(&self, w: &mut XdrWriter) {
        w.u32(self.stamp);
        w.string(&self.machine);
        w.u32(self.uid);
        w.u32(self.gid);
        w.vec(&self.gids);
    }
}

/// The credential of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cred {
    None,
    Sys(AuthSys),
}

impl Cred {
    fn encode(&self, w: &mut XdrWriter) {
        match self {
            Cred::None => {
                w.u32(AUTH_NONE);
                w.opaque(&[]);
            }
            Cred::Sys(a) => {
                let mut body = XdrWriter::new();
                a.encode(&mut body);
                w.u32(AUTH_SYS);
                w.opaque(&body.buf);
            }
        }
    }
}

/// A CALL message (without record mark): header then the already-encoded arguments.
pub fn encode_call(
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: &Cred,
    args: &[u8],
) -> Vec<u8> {
    let mut w = XdrWriter::with_capacity(64 + args.len());
    w.u32(xid);
    w.u32(MSG_CALL);
    w.u32(RPC_VERSION);
    w.u32(prog);
    w.u32(vers);
    w.u32(proc_);
    cred.encode(&mut w);
    // Verifier: AUTH_NONE.
    w.u32(AUTH_NONE);
    w.opaque(&[]);
    w.buf.extend_from_slice(args);
    w.into_inner()
}

/// An accepted, successful REPLY to `xid` carrying `body` (used to answer callbacks).
pub fn encode_success_reply(xid: u32, body: &[u8]) -> Vec<u8> {
    let mut w = XdrWriter::with_capacity(24 + body.len());
    w.u32(xid);
    w.u32(MSG_REPLY);
    w.u32(0); // MSG_ACCEPTED
    w.u32(AUTH_NONE);
    w.opaque(&[]);
    w.u32(0); // SUCCESS
    w.buf.extend_from_slice(body);
    w.into_inner()
}

/// An accepted REPLY with a non-success `accept_stat` (PROC_UNAVAIL, GARBAGE_ARGS, ...).
pub fn encode_error_reply(xid: u32, accept_stat: u32) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.u32(xid);
    w.u32(MSG_REPLY);
    w.u32(0);
    w.u32(AUTH_NONE);
    w.opaque(&[]);
    w.u32(accept_stat);
    w.into_inner()
}

/// One record in a single last fragment.
pub fn frame(record: &[u8]) -> Vec<u8> {
    frame_fragments(record, usize::MAX)
}

/// One record cut into fragments of at most `frag` bytes (to exercise the server's
/// reassembly). An empty record is one empty last fragment.
pub fn frame_fragments(record: &[u8], frag: usize) -> Vec<u8> {
    let frag = frag.clamp(1, 0x7fff_ffff);
    let mut out = Vec::with_capacity(record.len() + 4 * (record.len() / frag + 1));
    let mut chunks = record.chunks(frag).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&LAST_FRAGMENT.to_be_bytes());
    }
    while let Some(c) = chunks.next() {
        let mut h = c.len() as u32;
        if chunks.peek().is_none() {
            h |= LAST_FRAGMENT;
        }
        out.extend_from_slice(&h.to_be_bytes());
        out.extend_from_slice(c);
    }
    out
}

/// Splits a record-mark header into (last fragment?, length).
pub fn parse_fragment_header(h: [u8; 4]) -> (bool, usize) {
    let v = u32::from_be_bytes(h);
    (v & LAST_FRAGMENT != 0, (v & !LAST_FRAGMENT) as usize)
}

/// A CALL the server sent us (backchannel).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingCall {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub args: Vec<u8>,
}

/// A parsed incoming record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A reply to our call `xid`: the result body, or why the call was not run.
    Reply {
        xid: u32,
        result: Result<Vec<u8>, RpcError>,
    },
    Call(IncomingCall),
}

/// Parses one whole record.
pub fn decode_message(rec: &[u8]) -> XdrResult<Message> {
    let mut r = XdrReader::new(rec);
    let xid = r.u32()?;
    match r.u32()? {
        MSG_CALL => {
            let _rpcvers = r.u32()?;
            let prog = r.u32()?;
            let vers = r.u32()?;
            let proc_ = r.u32()?;
            for _ in 0..2 {
                // credential and verifier: flavor + opaque body<400>
                r.u32()?;
                r.opaque(400)?;
            }
            Ok(Message::Call(IncomingCall {
                xid,
                prog,
                vers,
                proc_,
                args: r.rest().to_vec(),
            }))
        }
        MSG_REPLY => {
            let result = match r.u32()? {
                0 => {
                    r.u32()?;
                    r.opaque(400)?;
                    match r.u32()? {
                        0 => Ok(r.rest().to_vec()),
                        1 => Err(RpcError::ProgUnavail),
                        2 => Err(RpcError::ProgMismatch {
                            low: r.u32()?,
                            high: r.u32()?,
                        }),
                        3 => Err(RpcError::ProcUnavail),
                        4 => Err(RpcError::GarbageArgs),
                        5 => Err(RpcError::SystemErr),
                        n => Err(RpcError::Unknown(n)),
                    }
                }
                1 => match r.u32()? {
                    0 => Err(RpcError::RpcMismatch {
                        low: r.u32()?,
                        high: r.u32()?,
                    }),
                    _ => Err(RpcError::AuthError(r.u32()?)),
                },
                _ => return Err(pnfsd::xdr::XdrError::BadValue),
            };
            Ok(Message::Reply { xid, result })
        }
        _ => Err(pnfsd::xdr::XdrError::BadValue),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_header_layout() {
        let c = encode_call(
            7,
            NFS_PROGRAM,
            NFS_V4,
            PROC_COMPOUND,
            &Cred::Sys(AuthSys::root()),
            &[1, 2, 3, 4],
        );
        let mut r = XdrReader::new(&c);
        assert_eq!(r.u32().unwrap(), 7);
        assert_eq!(r.u32().unwrap(), MSG_CALL);
        assert_eq!(r.u32().unwrap(), 2);
        assert_eq!(r.u32().unwrap(), 100003);
        assert_eq!(r.u32().unwrap(), 4);
        assert_eq!(r.u32().unwrap(), 1);
        assert_eq!(r.u32().unwrap(), AUTH_SYS);
        let body = r.opaque(400).unwrap();
        // stamp + "pnfsd-test" (10 → 12 padded) + len + uid + gid + gids count
        assert_eq!(body.len(), 4 + 4 + 12 + 4 + 4 + 4);
        assert_eq!(r.u32().unwrap(), AUTH_NONE);
        assert_eq!(r.opaque(400).unwrap(), b"");
        assert_eq!(r.rest(), &[1, 2, 3, 4]);
    }

    #[test]
    fn fragments_reassemble_to_the_record() {
        let rec: Vec<u8> = (0..10u8).collect();
        let f = frame_fragments(&rec, 4);
        assert_eq!(f.len(), 10 + 3 * 4);
        assert_eq!(parse_fragment_header([f[0], f[1], f[2], f[3]]), (false, 4));
        assert_eq!(
            parse_fragment_header([f[16], f[17], f[18], f[19]]),
            (true, 2)
        );
        assert_eq!(frame(&[]), vec![0x80, 0, 0, 0]);
    }

    #[test]
    fn replies_and_calls_decode() {
        let ok = encode_success_reply(9, &[0, 0, 0, 5]);
        assert_eq!(
            decode_message(&ok).unwrap(),
            Message::Reply {
                xid: 9,
                result: Ok(vec![0, 0, 0, 5])
            }
        );
        let garbage = encode_error_reply(3, 4);
        assert_eq!(
            decode_message(&garbage).unwrap(),
            Message::Reply {
                xid: 3,
                result: Err(RpcError::GarbageArgs)
            }
        );
        let call = encode_call(11, 0x4000_0000, 1, 1, &Cred::None, &[9, 9, 9, 9]);
        match decode_message(&call).unwrap() {
            Message::Call(c) => {
                assert_eq!((c.xid, c.prog, c.vers, c.proc_), (11, 0x4000_0000, 1, 1));
                assert_eq!(c.args, vec![9, 9, 9, 9]);
            }
            m => panic!("not a call: {m:?}"),
        }
        assert!(decode_message(&[0, 0, 0, 1, 0, 0, 0, 7]).is_err());
    }
}
