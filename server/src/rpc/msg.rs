//! ONC RPC v2 messages (RFC 5531 §9): call and reply headers, decoded from a reassembled
//! record and encoded into a buffer. No I/O here (docs/design.md, house rule 1).
//!
//! Why not the `onc-rpc` 0.3 crate for parsing (it is a dev-dependency, used in the tests as
//! an independent oracle that our bytes interoperate):
//! - its parse is all-or-nothing: a call with RPC version 3, a 500-byte credential or a
//!   malformed AUTH_SYS body comes back as one `Error` without the xid, so we could not answer
//!   RPC_MISMATCH, AUTH_BADCRED or GARBAGE_ARGS for it (RFC 5531 §9 wants all three);
//! - it rejects fragmented records (`Error::Fragmented`) and wants the record mark in front,
//!   so every reassembled record would be copied to prepend a header;
//! - its AUTH_SYS parser refuses a non-UTF-8 machine name, and its serialiser `assert!`s on
//!   opaque sizes (a panic path that docs/design.md, house rule 3 forbids on the reply side);
//! - the COMPOUND body is ours anyway (XDR of RFC 5662), so the header is 60 lines on the same
//!   `XdrReader` that decodes everything else.

use crate::xdr::{XdrError, XdrReader, XdrWriter};

pub const RPC_VERSION: u32 = 2;
pub const CALL: u32 = 0;
pub const REPLY: u32 = 1;
const MSG_ACCEPTED: u32 = 0;
const MSG_DENIED: u32 = 1;

/// Authentication flavors (RFC 5531 §8.2, RFC 2203, RFC 9289).
pub mod flavor {
    pub const AUTH_NONE: u32 = 0;
    pub const AUTH_SYS: u32 = 1;
    pub const AUTH_SHORT: u32 = 2;
    pub const AUTH_DH: u32 = 3;
    pub const RPCSEC_GSS: u32 = 6;
    pub const AUTH_TLS: u32 = 7;
}

/// `opaque_auth` bodies are at most 400 bytes (RFC 5531 §8.2).
pub const MAX_AUTH_BYTES: usize = 400;

/// `accept_stat` values other than SUCCESS, with their bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptError {
    ProgUnavail,
    ProgMismatch { low: u32, high: u32 },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

/// `auth_stat` (RFC 5531 §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthStat {
    BadCred = 1,
    RejectedCred = 2,
    BadVerf = 3,
    RejectedVerf = 4,
    TooWeak = 5,
}

/// A `rejected_reply`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    RpcMismatch { low: u32, high: u32 },
    Auth(AuthStat),
}

/// `opaque_auth` as it came: the flavor and its undecoded body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpaqueAuth<'a> {
    pub flavor: u32,
    pub body: &'a [u8],
}

/// A decoded call header; `args` are the procedure's arguments (the rest of the record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call<'a> {
    pub xid: u32,
    pub prog: u32,
    pub vers: u32,
    pub proc_: u32,
    pub cred: OpaqueAuth<'a>,
    pub verf: OpaqueAuth<'a>,
    pub args: &'a [u8],
}

/// What a record holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming<'a> {
    Call(Call<'a>),
    /// A reply to one of our backchannel calls: `body` starts at `reply_stat`.
    Reply {
        xid: u32,
        body: &'a [u8],
    },
}

/// Why a record could not be taken as a call, and what to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgError {
    /// No xid and message type: nothing can be answered, the record is dropped.
    Unreadable,
    /// Answer with a rejected reply (RPC version, credential or verifier).
    Deny { xid: u32, why: Denied },
    /// The header after the RPC version cannot be decoded: GARBAGE_ARGS.
    Garbage { xid: u32 },
}

fn opaque_auth<'a>(r: &mut XdrReader<'a>) -> Result<OpaqueAuth<'a>, XdrError> {
    let flavor = r.u32()?;
    let body = r.opaque(MAX_AUTH_BYTES)?;
    Ok(OpaqueAuth { flavor, body })
}

/// Decodes the message in one record (RFC 5531 §9 `rpc_msg`).
pub fn decode(record: &[u8]) -> Result<Incoming<'_>, MsgError> {
    let mut r = XdrReader::new(record);
    let (xid, mtype) = match (r.u32(), r.u32()) {
        (Ok(x), Ok(m)) => (x, m),
        _ => return Err(MsgError::Unreadable),
    };
    match mtype {
        CALL => {}
        REPLY => {
            return Ok(Incoming::Reply {
                xid,
                body: r.rest(),
            })
        }
        _ => return Err(MsgError::Unreadable),
    }
    let garbage = MsgError::Garbage { xid };
    let rpcvers = r.u32().map_err(|_| garbage)?;
    if rpcvers != RPC_VERSION {
        return Err(MsgError::Deny {
            xid,
            why: Denied::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            },
        });
    }
    let (prog, vers, proc_) = match (r.u32(), r.u32(), r.u32()) {
        (Ok(p), Ok(v), Ok(c)) => (p, v, c),
        _ => return Err(garbage),
    };
    let cred = match opaque_auth(&mut r) {
        Ok(c) => c,
        Err(XdrError::TooLong(_)) => return Err(deny(xid, AuthStat::BadCred)),
        Err(_) => return Err(garbage),
    };
    let verf = match opaque_auth(&mut r) {
        Ok(v) => v,
        Err(XdrError::TooLong(_)) => return Err(deny(xid, AuthStat::BadVerf)),
        Err(_) => return Err(garbage),
    };
    Ok(Incoming::Call(Call {
        xid,
        prog,
        vers,
        proc_,
        cred,
        verf,
        args: r.rest(),
    }))
}

fn deny(xid: u32, s: AuthStat) -> MsgError {
    MsgError::Deny {
        xid,
        why: Denied::Auth(s),
    }
}

/// Header of a successful reply (AUTH_NONE verifier); the caller appends the results.
pub fn success_header(w: &mut XdrWriter, xid: u32) {
    accepted_header(w, xid);
    w.u32(0); // SUCCESS
}

/// Bytes [`success_header`] writes: counted in `ca_maxresponsesize` (RFC 8881 §18.36.3).
pub const SUCCESS_HEADER_LEN: usize = 24;

fn accepted_header(w: &mut XdrWriter, xid: u32) {
    w.u32(xid);
    w.u32(REPLY);
    w.u32(MSG_ACCEPTED);
    w.u32(flavor::AUTH_NONE);
    w.u32(0);
}

/// An accepted reply that is not SUCCESS.
pub fn accept_error(w: &mut XdrWriter, xid: u32, e: AcceptError) {
    accepted_header(w, xid);
    match e {
        AcceptError::ProgUnavail => w.u32(1),
        AcceptError::ProgMismatch { low, high } => {
            w.u32(2);
            w.u32(low);
            w.u32(high);
        }
        AcceptError::ProcUnavail => w.u32(3),
        AcceptError::GarbageArgs => w.u32(4),
        AcceptError::SystemErr => w.u32(5),
    }
}

/// A rejected reply.
pub fn denied(w: &mut XdrWriter, xid: u32, d: Denied) {
    w.u32(xid);
    w.u32(REPLY);
    w.u32(MSG_DENIED);
    match d {
        Denied::RpcMismatch { low, high } => {
            w.u32(0);
            w.u32(low);
            w.u32(high);
        }
        Denied::Auth(s) => {
            w.u32(1);
            w.u32(s as u32);
        }
    }
}

/// A call header (for backchannel calls); the caller appends the arguments.
pub fn call_header(
    w: &mut XdrWriter,
    xid: u32,
    prog: u32,
    vers: u32,
    proc_: u32,
    cred: OpaqueAuth<'_>,
) {
    w.u32(xid);
    w.u32(CALL);
    w.u32(RPC_VERSION);
    w.u32(prog);
    w.u32(vers);
    w.u32(proc_);
    w.u32(cred.flavor);
    w.opaque(cred.body);
    w.u32(flavor::AUTH_NONE);
    w.u32(0);
}

/// Why a reply to one of our calls carries no results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("malformed RPC reply")]
    Malformed,
    #[error("RPC call accepted with status {0}")]
    Accepted(u32),
    #[error("RPC call denied ({0:?})")]
    Denied(Denied),
}

/// Takes the body of an [`Incoming::Reply`] and returns the procedure's results.
pub fn reply_results(body: &[u8]) -> Result<&[u8], ReplyError> {
    let mut r = XdrReader::new(body);
    let bad = |_| ReplyError::Malformed;
    match r.u32().map_err(bad)? {
        MSG_ACCEPTED => {
            opaque_auth(&mut r).map_err(bad)?;
            match r.u32().map_err(bad)? {
                0 => Ok(r.rest()),
                s => Err(ReplyError::Accepted(s)),
            }
        }
        MSG_DENIED => {
            let d = match r.u32().map_err(bad)? {
                0 => Denied::RpcMismatch {
                    low: r.u32().map_err(bad)?,
                    high: r.u32().map_err(bad)?,
                },
                1 => Denied::Auth(match r.u32().map_err(bad)? {
                    1 => AuthStat::BadCred,
                    2 => AuthStat::RejectedCred,
                    3 => AuthStat::BadVerf,
                    4 => AuthStat::RejectedVerf,
                    _ => AuthStat::TooWeak,
                }),
                _ => return Err(ReplyError::Malformed),
            };
            Err(ReplyError::Denied(d))
        }
        _ => Err(ReplyError::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onc_rpc::auth::{AuthFlavor, AuthUnixParams};
    use onc_rpc::{AcceptedStatus, CallBody, MessageType, RejectedReply, ReplyBody, RpcMessage};

    /// A call encoded by the `onc-rpc` crate, without its record mark.
    fn oracle_call(xid: u32, cred: AuthFlavor<&[u8]>, args: &[u8]) -> Vec<u8> {
        let msg = RpcMessage::new(
            xid,
            MessageType::Call(CallBody::new(
                100003,
                4,
                1,
                cred,
                AuthFlavor::AuthNone(None),
                args,
            )),
        );
        msg.serialise().unwrap()[4..].to_vec()
    }

    /// What the `onc-rpc` crate reads in our reply: xid, then the accepted status (owned) or
    /// the rejection.
    fn oracle_reply(w: &XdrWriter) -> (u32, Result<AcceptedStatus<Vec<u8>>, RejectedReply>) {
        let framed = crate::rpc::record::frame(&w.buf);
        let m = RpcMessage::try_from(&framed[..]).unwrap();
        let st = match m.reply_body().unwrap() {
            ReplyBody::Accepted(a) => Ok(match a.status() {
                AcceptedStatus::Success(p) => AcceptedStatus::Success(p.to_vec()),
                AcceptedStatus::ProgramUnavailable => AcceptedStatus::ProgramUnavailable,
                AcceptedStatus::ProgramMismatch { low, high } => AcceptedStatus::ProgramMismatch {
                    low: *low,
                    high: *high,
                },
                AcceptedStatus::ProcedureUnavailable => AcceptedStatus::ProcedureUnavailable,
                AcceptedStatus::GarbageArgs => AcceptedStatus::GarbageArgs,
                AcceptedStatus::SystemError => AcceptedStatus::SystemError,
            }),
            ReplyBody::Denied(RejectedReply::AuthError(e)) => {
                Err(RejectedReply::AuthError(e.clone()))
            }
            ReplyBody::Denied(RejectedReply::RpcVersionMismatch { low, high }) => {
                Err(RejectedReply::RpcVersionMismatch {
                    low: *low,
                    high: *high,
                })
            }
        };
        (m.xid(), st)
    }

    #[test]
    fn decodes_calls_encoded_by_onc_rpc() {
        let unix = AuthUnixParams::new(7, b"host".as_slice(), 1000, 100, [10, 11]);
        let wire = oracle_call(0xdead_beef, AuthFlavor::AuthUnix(unix), b"ARGS");
        let Incoming::Call(c) = decode(&wire).unwrap() else {
            panic!("not a call")
        };
        assert_eq!(
            (c.xid, c.prog, c.vers, c.proc_),
            (0xdead_beef, 100003, 4, 1)
        );
        assert_eq!(c.cred.flavor, flavor::AUTH_SYS);
        assert_eq!(
            c.verf,
            OpaqueAuth {
                flavor: 0,
                body: &[]
            }
        );
        assert_eq!(c.args, b"ARGS");
    }

    #[test]
    fn our_replies_parse_with_onc_rpc() {
        let mut w = XdrWriter::new();
        success_header(&mut w, 9);
        assert_eq!(w.len(), SUCCESS_HEADER_LEN);
        w.u32(42);
        assert_eq!(
            oracle_reply(&w),
            (9, Ok(AcceptedStatus::Success(vec![0, 0, 0, 42])))
        );
        for (e, want) in [
            (AcceptError::ProgUnavail, AcceptedStatus::ProgramUnavailable),
            (
                AcceptError::ProgMismatch { low: 4, high: 4 },
                AcceptedStatus::ProgramMismatch { low: 4, high: 4 },
            ),
            (
                AcceptError::ProcUnavail,
                AcceptedStatus::ProcedureUnavailable,
            ),
            (AcceptError::GarbageArgs, AcceptedStatus::GarbageArgs),
            (AcceptError::SystemErr, AcceptedStatus::SystemError),
        ] {
            let mut w = XdrWriter::new();
            accept_error(&mut w, 1, e);
            assert_eq!(oracle_reply(&w), (1, Ok(want)));
        }
        for (s, want) in [
            (AuthStat::BadCred, onc_rpc::AuthError::BadCredentials),
            (AuthStat::BadVerf, onc_rpc::AuthError::BadVerifier),
            (AuthStat::TooWeak, onc_rpc::AuthError::TooWeak),
        ] {
            let mut w = XdrWriter::new();
            denied(&mut w, 3, Denied::Auth(s));
            assert_eq!(oracle_reply(&w), (3, Err(RejectedReply::AuthError(want))));
        }
        let mut w = XdrWriter::new();
        denied(&mut w, 3, Denied::RpcMismatch { low: 2, high: 2 });
        assert_eq!(
            oracle_reply(&w),
            (
                3,
                Err(RejectedReply::RpcVersionMismatch { low: 2, high: 2 })
            )
        );
    }

    #[test]
    fn header_errors_map_to_the_right_reply() {
        assert_eq!(decode(&[0, 0, 0, 1]), Err(MsgError::Unreadable));
        assert_eq!(decode(&[0, 0, 0, 1, 0, 0, 0, 7]), Err(MsgError::Unreadable));
        // RPC version 3.
        let mut w = XdrWriter::new();
        for v in [5, CALL, 3, 100003, 4, 0] {
            w.u32(v);
        }
        assert_eq!(
            decode(&w.buf),
            Err(MsgError::Deny {
                xid: 5,
                why: Denied::RpcMismatch { low: 2, high: 2 }
            })
        );
        // Truncated after the procedure number.
        let mut w = XdrWriter::new();
        for v in [6, CALL, 2, 100003, 4, 1] {
            w.u32(v);
        }
        assert_eq!(decode(&w.buf), Err(MsgError::Garbage { xid: 6 }));
        // A 401-byte credential.
        w.u32(flavor::AUTH_SYS);
        w.opaque(&[0; 401]);
        assert_eq!(
            decode(&w.buf),
            Err(MsgError::Deny {
                xid: 6,
                why: Denied::Auth(AuthStat::BadCred)
            })
        );
    }

    #[test]
    fn backchannel_call_and_reply() {
        let mut w = XdrWriter::new();
        call_header(
            &mut w,
            77,
            0x4000_0000,
            1,
            1,
            OpaqueAuth {
                flavor: 0,
                body: &[],
            },
        );
        w.u32(123);
        let Incoming::Call(c) = decode(&w.buf).unwrap() else {
            panic!()
        };
        assert_eq!(
            (c.xid, c.prog, c.vers, c.proc_, c.args),
            (77, 0x4000_0000, 1, 1, &[0, 0, 0, 123][..])
        );
        // The peer's reply: accepted, SUCCESS, results.
        let mut w = XdrWriter::new();
        success_header(&mut w, 77);
        w.u32(55);
        let Incoming::Reply { xid, body } = decode(&w.buf).unwrap() else {
            panic!()
        };
        assert_eq!(xid, 77);
        assert_eq!(reply_results(body), Ok(&[0, 0, 0, 55][..]));
        let mut w = XdrWriter::new();
        accept_error(&mut w, 78, AcceptError::ProcUnavail);
        let Incoming::Reply { body, .. } = decode(&w.buf).unwrap() else {
            panic!()
        };
        assert_eq!(reply_results(body), Err(ReplyError::Accepted(3)));
        assert_eq!(reply_results(&[]), Err(ReplyError::Malformed));
    }

    proptest::proptest! {
        #[test]
        fn random_records_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128)) {
            if let Ok(Incoming::Reply { body, .. }) = decode(&data) {
                let _ = reply_results(body);
            }
        }
    }
}
