//! What to do with one record: the checks of RFC 5531 §9 in the order knfsd applies them
//! (`svc_process_common`): RPC version, credential, program, version, procedure. Pure: the
//! answer is bytes to send or work to start, never I/O.

use crate::rpc::auth::{authenticate, AuthPolicy};
use crate::rpc::msg::{self, AcceptError, Denied, Incoming, MsgError};
use crate::rpc::record;
use crate::rpc::Cred;
use crate::xdr::XdrWriter;

pub const NFS_PROGRAM: u32 = 100003;
pub const NFS_V4: u32 = 4;
pub const PROC_NULL: u32 = 0;
pub const PROC_COMPOUND: u32 = 1;

/// The decision for one record.
#[derive(Debug, PartialEq, Eq)]
pub enum Action<'a> {
    /// Send this framed record.
    Reply(Vec<u8>),
    /// Run a COMPOUND with these arguments, then answer with [`compound_reply`].
    Compound {
        xid: u32,
        cred: Cred,
        args: &'a [u8],
    },
    /// A reply to one of our backchannel calls.
    CallbackReply { xid: u32, body: &'a [u8] },
    /// Nothing can be answered (no xid, or not a call/reply).
    Drop,
}

/// A framed reply built by `f`.
pub fn framed(f: impl FnOnce(&mut XdrWriter)) -> Vec<u8> {
    let mut w = XdrWriter::new();
    let at = record::begin_record(&mut w.buf);
    f(&mut w);
    let mut out = w.into_inner();
    record::finish_record(&mut out, at);
    out
}

fn accept_error(xid: u32, e: AcceptError) -> Action<'static> {
    Action::Reply(framed(|w| msg::accept_error(w, xid, e)))
}

/// Decides what `rec` (one reassembled record) asks for.
pub fn classify(rec: &[u8], policy: AuthPolicy) -> Action<'_> {
    let call = match msg::decode(rec) {
        Ok(Incoming::Call(c)) => c,
        Ok(Incoming::Reply { xid, body }) => return Action::CallbackReply { xid, body },
        Err(MsgError::Unreadable) => return Action::Drop,
        Err(MsgError::Deny { xid, why }) => {
            return Action::Reply(framed(|w| msg::denied(w, xid, why)))
        }
        Err(MsgError::Garbage { xid }) => return accept_error(xid, AcceptError::GarbageArgs),
    };
    let xid = call.xid;
    let null_proc = call.proc_ == PROC_NULL;
    let cred = match authenticate(&call, null_proc, policy) {
        Ok(c) => c,
        Err(s) => return Action::Reply(framed(|w| msg::denied(w, xid, Denied::Auth(s)))),
    };
    if call.prog != NFS_PROGRAM {
        return accept_error(xid, AcceptError::ProgUnavail);
    }
    if call.vers != NFS_V4 {
        return accept_error(
            xid,
            AcceptError::ProgMismatch {
                low: NFS_V4,
                high: NFS_V4,
            },
        );
    }
    match call.proc_ {
        // NULL takes void; extra bytes are ignored, as knfsd does.
        PROC_NULL => Action::Reply(framed(|w| msg::success_header(w, xid))),
        PROC_COMPOUND => Action::Compound {
            xid,
            cred,
            args: call.args,
        },
        _ => accept_error(xid, AcceptError::ProcUnavail),
    }
}

/// The framed reply to a COMPOUND: its results, or GARBAGE_ARGS / SYSTEM_ERR.
pub fn compound_reply(xid: u32, results: Result<&[u8], AcceptError>) -> Vec<u8> {
    match results {
        Ok(body) => framed(|w| {
            w.buf.reserve(msg::SUCCESS_HEADER_LEN + body.len());
            msg::success_header(w, xid);
            w.buf.extend_from_slice(body);
        }),
        Err(e) => framed(|w| msg::accept_error(w, xid, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::msg::{flavor, AuthStat, OpaqueAuth};

    fn call(prog: u32, vers: u32, proc_: u32, cred_flavor: u32) -> Vec<u8> {
        let mut w = XdrWriter::new();
        let body = if cred_flavor == flavor::AUTH_SYS {
            crate::rpc::auth::encode_authsys(
                &Cred {
                    flavor: 1,
                    uid: 1,
                    gid: 2,
                    gids: vec![],
                    machine: b"m".to_vec(),
                },
                0,
            )
        } else {
            vec![]
        };
        msg::call_header(
            &mut w,
            42,
            prog,
            vers,
            proc_,
            OpaqueAuth {
                flavor: cred_flavor,
                body: &body,
            },
        );
        w.u32(0xabcd);
        w.into_inner()
    }

    /// The reply a record gets, unframed: (xid, body after the message type).
    fn reply_of(a: Action<'_>) -> Vec<u8> {
        let Action::Reply(r) = a else {
            panic!("not a reply: {a:?}")
        };
        assert_eq!(
            u32::from_be_bytes([r[0], r[1], r[2], r[3]]) as usize,
            (r.len() - 4) | 1 << 31
        );
        r[4..].to_vec()
    }

    fn expect(a: Action<'_>, f: impl FnOnce(&mut XdrWriter)) {
        let mut w = XdrWriter::new();
        f(&mut w);
        assert_eq!(reply_of(a), w.buf);
    }

    #[test]
    fn null_and_compound() {
        let p = AuthPolicy::default();
        expect(classify(&call(NFS_PROGRAM, 4, 0, 0), p), |w| {
            msg::success_header(w, 42)
        });
        let rec = call(NFS_PROGRAM, 4, 1, flavor::AUTH_SYS);
        let Action::Compound { xid, cred, args } = classify(&rec, p) else {
            panic!()
        };
        assert_eq!(
            (xid, cred.uid, cred.gid, args),
            (42, 1, 2, &[0, 0, 0xab, 0xcd][..])
        );
    }

    #[test]
    fn program_version_procedure_errors() {
        let p = AuthPolicy::default();
        expect(classify(&call(100005, 4, 0, 0), p), |w| {
            msg::accept_error(w, 42, AcceptError::ProgUnavail)
        });
        expect(classify(&call(NFS_PROGRAM, 3, 0, 0), p), |w| {
            msg::accept_error(w, 42, AcceptError::ProgMismatch { low: 4, high: 4 })
        });
        expect(classify(&call(NFS_PROGRAM, 4, 2, 0), p), |w| {
            msg::accept_error(w, 42, AcceptError::ProcUnavail)
        });
    }

    #[test]
    fn auth_errors_come_before_program_checks() {
        let p = AuthPolicy::default();
        expect(classify(&call(100005, 4, 1, flavor::RPCSEC_GSS), p), |w| {
            msg::denied(w, 42, Denied::Auth(AuthStat::BadCred))
        });
        expect(
            classify(
                &call(NFS_PROGRAM, 4, 1, 0),
                AuthPolicy { allow_none: false },
            ),
            |w| msg::denied(w, 42, Denied::Auth(AuthStat::TooWeak)),
        );
    }

    #[test]
    fn garbage_and_rpc_version() {
        let p = AuthPolicy::default();
        let rec = call(NFS_PROGRAM, 4, 1, 0);
        expect(classify(&rec[..20], p), |w| {
            msg::accept_error(w, 42, AcceptError::GarbageArgs)
        });
        let mut v3 = rec.clone();
        v3[8..12].copy_from_slice(&3u32.to_be_bytes());
        expect(classify(&v3, p), |w| {
            msg::denied(w, 42, Denied::RpcMismatch { low: 2, high: 2 })
        });
        assert_eq!(classify(&rec[..6], p), Action::Drop);
        let mut reply = XdrWriter::new();
        msg::success_header(&mut reply, 9);
        assert!(matches!(
            classify(&reply.buf, p),
            Action::CallbackReply { xid: 9, .. }
        ));
    }

    #[test]
    fn compound_reply_frames_results() {
        let r = compound_reply(7, Ok(&[1, 2, 3, 4]));
        let mut w = XdrWriter::new();
        msg::success_header(&mut w, 7);
        w.buf.extend_from_slice(&[1, 2, 3, 4]);
        assert_eq!(&r[4..], &w.buf[..]);
        let r = compound_reply(7, Err(AcceptError::SystemErr));
        assert_eq!(&r[r.len() - 4..], &[0, 0, 0, 5]);
    }

    proptest::proptest! {
        #[test]
        fn random_records_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = classify(&data, AuthPolicy::default());
        }

        #[test]
        fn mutated_calls_never_panic(pos in 0usize..64, byte in proptest::prelude::any::<u8>(), cut in 0usize..64) {
            let mut rec = call(NFS_PROGRAM, 4, 1, flavor::AUTH_SYS);
            let n = rec.len();
            rec[pos % n] = byte;
            rec.truncate(cut.max(1).min(n));
            let _ = classify(&rec, AuthPolicy::default());
        }
    }
}
