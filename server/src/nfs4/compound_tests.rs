//! Dispatcher rules, driven through fake operations (the real table gives the metadata).

use super::*;

/// Fake operations. SEQUENCE's arguments are the session limits it sets:
/// `max_ops, max_request, max_response, max_response_cached, cachethis, replay`.
/// GETATTR writes a body of as many bytes as its one argument says. LINK panics.
/// READLINK writes a body and then answers BADXDR. Everything else answers OK.
#[derive(Default)]
struct Fake {
    minor: u32,
    fh: bool,
    session: Option<SessionSlotRef>,
    cached: Option<Vec<u8>>,
    ran: Vec<NfsOp>,
    /// The export rule's decision; `None` allows everything.
    access: Option<crate::exports::Decision>,
    /// What `record` was told: (op, status, ran).
    recorded: std::cell::RefCell<Vec<(NfsOp, NfsStat, bool)>>,
}

impl OpEnv for Fake {
    fn meta(&self, op: NfsOp) -> Option<OpFlags> {
        ops::lookup(op).map(|d| d.flags)
    }
    fn refuse(&self, need: Need) -> Option<NfsStat> {
        self.access.as_ref().and_then(|d| d.check(need))
    }
    fn begin(&mut self, minor: u32, _: usize) {
        self.minor = minor;
    }
    fn run(
        &mut self,
        op: NfsOp,
        _: usize,
        r: &mut XdrReader<'_>,
        w: &mut XdrWriter,
    ) -> Result<(), NfsStat> {
        self.ran.push(op);
        match op {
            NfsOp::SEQUENCE => {
                let mut v = [0u32; 6];
                for x in &mut v {
                    match r.u32() {
                        Ok(n) => *x = n,
                        Err(_) => return Err(NfsStat::BADXDR),
                    }
                }
                self.session = Some(SessionSlotRef {
                    sessionid: [7; 16],
                    clientid: 1,
                    slot: 0,
                    seqid: 1,
                    cachethis: v[4] != 0,
                    max_ops: v[0],
                    max_request_size: v[1],
                    max_response_size: v[2],
                    max_response_size_cached: v[3],
                });
                if v[5] != 0 {
                    self.cached = Some(b"CACHED".to_vec());
                }
                w.u32(0x5e9);
                Ok(())
            }
            NfsOp::PUTROOTFH => {
                self.fh = true;
                Ok(())
            }
            NfsOp::GETATTR => match r.u32() {
                Ok(n) => {
                    w.buf.resize(w.buf.len() + n as usize, 0xaa);
                    Ok(())
                }
                Err(_) => Err(NfsStat::BADXDR),
            },
            NfsOp::LINK => panic!("fake operation panics"),
            NfsOp::READLINK => {
                w.u32(1);
                Err(NfsStat::BADXDR)
            }
            _ => Ok(()),
        }
    }
    fn has_current_fh(&self) -> bool {
        self.fh
    }
    fn session(&self) -> Option<&SessionSlotRef> {
        self.session.as_ref()
    }
    fn take_cached_reply(&mut self) -> Option<Vec<u8>> {
        self.cached.take()
    }
    fn record(&self, op: NfsOp, st: NfsStat, ran: Option<Duration>) {
        self.recorded.borrow_mut().push((op, st, ran.is_some()));
    }
}

const SIZES: RpcSizes = RpcSizes {
    request_len: 100,
    reply_header_len: 24,
};

fn args(tag: &[u8], minor: u32, ops: &[(NfsOp, &[u32])]) -> Vec<u8> {
    let mut w = XdrWriter::new();
    w.opaque(tag);
    w.u32(minor);
    w.u32(ops.len() as u32);
    for (op, a) in ops {
        w.u32(op.0);
        for x in *a {
            w.u32(*x);
        }
    }
    w.into_inner()
}

/// A roomy session: (max_ops, max_req, max_resp, max_resp_cached, cachethis, replay).
const SEQ: &[u32] = &[16, 1 << 20, 1 << 20, 1 << 20, 0, 0];

/// Decoded COMPOUND4res: (status, tag, [(op, status, body)]).
type Res = (NfsStat, Vec<u8>, Vec<(NfsOp, NfsStat, Vec<u8>)>);

/// Parses a reply whose bodies are known: SEQUENCE 4 bytes, GETATTR `getattr_len`, SETATTR
/// 4 (its `attrsset`, whatever the status), else 0.
fn parse(reply: &[u8], getattr_len: usize) -> Res {
    let mut r = XdrReader::new(reply);
    let st = NfsStat(r.u32().unwrap());
    let tag = r.opaque(MAX_TAG).unwrap().to_vec();
    let n = r.u32().unwrap();
    let mut res = Vec::new();
    for _ in 0..n {
        let op = NfsOp(r.u32().unwrap());
        let s = NfsStat(r.u32().unwrap());
        let blen = match (op, s) {
            (NfsOp::SEQUENCE, NfsStat::OK) => 4,
            (NfsOp::GETATTR, NfsStat::OK) => getattr_len,
            (NfsOp::SETATTR, _) => 4,
            _ => 0,
        };
        res.push((op, s, r.opaque_fixed(blen).unwrap().to_vec()));
    }
    r.finish().unwrap();
    (st, tag, res)
}

fn run(a: &[u8]) -> (Fake, Outcome) {
    run_sized(a, SIZES)
}

fn run_sized(a: &[u8], sizes: RpcSizes) -> (Fake, Outcome) {
    let mut f = Fake::default();
    let out = run_compound(&mut f, a, sizes).unwrap();
    (f, out)
}

/// The (op, status) pairs of a reply.
fn results(out: &Outcome, getattr_len: usize) -> (NfsStat, Vec<(NfsOp, NfsStat)>) {
    let (st, _, res) = parse(&out.reply, getattr_len);
    (st, res.into_iter().map(|(o, s, _)| (o, s)).collect())
}

#[test]
fn minor_versions_other_than_1_and_2_mismatch_with_no_results() {
    for minor in [0, 3, 50] {
        let (f, out) = run(&args(
            b"t",
            minor,
            &[(NfsOp::ILLEGAL, &[]), (NfsOp::PUTROOTFH, &[])],
        ));
        let (st, tag, res) = parse(&out.reply, 0);
        assert_eq!(
            (st, tag, res.len()),
            (NfsStat::MINOR_VERS_MISMATCH, b"t".to_vec(), 0)
        );
        assert!(f.ran.is_empty());
    }
    for minor in [1, 2] {
        let (_, out) = run(&args(b"", minor, &[]));
        assert_eq!(results(&out, 0), (NfsStat::OK, vec![]));
    }
}

#[test]
fn tag_is_echoed_and_must_be_utf8() {
    let (_, out) = run(&args(b"tag test", 1, &[(NfsOp::SEQUENCE, SEQ)]));
    assert_eq!(parse(&out.reply, 0).1, b"tag test");
    let (_, out) = run(&args(&[0xff, 0xfe], 1, &[(NfsOp::SEQUENCE, SEQ)]));
    assert_eq!(results(&out, 0), (NfsStat::INVAL, vec![]));
    // COMP3: valid UTF-8 holding a noncharacter (U+FFFE) is no utf8str either.
    let (_, out) = run(&args("a\u{fffe}".as_bytes(), 1, &[(NfsOp::SEQUENCE, SEQ)]));
    assert_eq!(results(&out, 0), (NfsStat::INVAL, vec![]));
}

#[test]
fn illegal_opcodes_answer_op_illegal_and_stop() {
    // Unknown numbers, ILLEGAL itself, ops of a later minor version.
    for (minor, op) in [
        (1, NfsOp(0)),
        (1, NfsOp(1)),
        (1, NfsOp(2)),
        (1, NfsOp::ILLEGAL),
        (1, NfsOp(76)),
        (1, NfsOp::GETXATTR),
        (1, NfsOp::ALLOCATE),
        (2, NfsOp(76)),
    ] {
        let (f, out) = run(&args(b"", minor, &[(op, &[]), (NfsOp::PUTROOTFH, &[])]));
        assert_eq!(
            results(&out, 0),
            (
                NfsStat::OP_ILLEGAL,
                vec![(NfsOp::ILLEGAL, NfsStat::OP_ILLEGAL)]
            ),
            "{minor} {op:?}"
        );
        assert!(f.ran.is_empty());
        // Also after SEQUENCE.
        let (f, out) = run(&args(b"", minor, &[(NfsOp::SEQUENCE, SEQ), (op, &[])]));
        assert_eq!(results(&out, 0).1[1], (NfsOp::ILLEGAL, NfsStat::OP_ILLEGAL));
        assert_eq!(f.ran, vec![NfsOp::SEQUENCE]);
    }
    // ALLOCATE is legal in 4.2.
    let (_, out) = run(&args(
        b"",
        2,
        &[
            (NfsOp::SEQUENCE, SEQ),
            (NfsOp::PUTROOTFH, &[]),
            (NfsOp::ALLOCATE, &[]),
        ],
    ));
    assert_eq!(results(&out, 0).0, NfsStat::OK);
}

#[test]
fn first_op_must_be_sequence_or_a_sessionless_op_alone() {
    let (f, out) = run(&args(b"", 1, &[(NfsOp::PUTROOTFH, &[])]));
    assert_eq!(
        results(&out, 0).1,
        vec![(NfsOp::PUTROOTFH, NfsStat::OP_NOT_IN_SESSION)]
    );
    assert!(f.ran.is_empty());
    for op in [
        NfsOp::EXCHANGE_ID,
        NfsOp::CREATE_SESSION,
        NfsOp::DESTROY_SESSION,
        NfsOp::BIND_CONN_TO_SESSION,
        NfsOp::DESTROY_CLIENTID,
    ] {
        let (f, out) = run(&args(b"", 1, &[(op, &[])]));
        assert_eq!(results(&out, 0), (NfsStat::OK, vec![(op, NfsStat::OK)]));
        assert_eq!(f.ran, vec![op]);
        let (f, out) = run(&args(b"", 1, &[(op, &[]), (NfsOp::PUTROOTFH, &[])]));
        assert_eq!(
            results(&out, 0),
            (NfsStat::NOT_ONLY_OP, vec![(op, NfsStat::NOT_ONLY_OP)])
        );
        assert!(f.ran.is_empty());
    }
    // Obsolete 4.0 operations first: not in a session either.
    let (_, out) = run(&args(b"", 1, &[(NfsOp::SETCLIENTID, &[])]));
    assert_eq!(
        results(&out, 0).1,
        vec![(NfsOp::SETCLIENTID, NfsStat::OP_NOT_IN_SESSION)]
    );
}

#[test]
fn sequence_elsewhere_than_first_is_sequence_pos() {
    let (f, out) = run(&args(
        b"",
        1,
        &[
            (NfsOp::SEQUENCE, SEQ),
            (NfsOp::PUTROOTFH, &[]),
            (NfsOp::SEQUENCE, SEQ),
        ],
    ));
    assert_eq!(
        results(&out, 0).1,
        vec![
            (NfsOp::SEQUENCE, NfsStat::OK),
            (NfsOp::PUTROOTFH, NfsStat::OK),
            (NfsOp::SEQUENCE, NfsStat::SEQUENCE_POS)
        ]
    );
    assert_eq!(f.ran, vec![NfsOp::SEQUENCE, NfsOp::PUTROOTFH]);
    let (_, out) = run(&args(
        b"",
        1,
        &[(NfsOp::SEQUENCE, SEQ), (NfsOp::BIND_CONN_TO_SESSION, &[])],
    ));
    assert_eq!(results(&out, 0).0, NfsStat::NOT_ONLY_OP);
}

#[test]
fn minor0_only_ops_are_notsupp() {
    for op in [
        NfsOp::OPEN_CONFIRM,
        NfsOp::RENEW,
        NfsOp::SETCLIENTID,
        NfsOp::SETCLIENTID_CONFIRM,
        NfsOp::RELEASE_LOCKOWNER,
    ] {
        let (f, out) = run(&args(
            b"",
            1,
            &[(NfsOp::SEQUENCE, SEQ), (NfsOp::PUTROOTFH, &[]), (op, &[])],
        ));
        assert_eq!(results(&out, 0).1[2], (op, NfsStat::NOTSUPP));
        assert_eq!(f.ran, vec![NfsOp::SEQUENCE, NfsOp::PUTROOTFH]);
    }
}

#[test]
fn session_limits_on_ops_and_request_size() {
    let seq4: &[u32] = &[4, 1 << 20, 1 << 20, 1 << 20, 0, 0];
    let four = args(
        b"",
        1,
        &[
            (NfsOp::SEQUENCE, seq4),
            (NfsOp::PUTROOTFH, &[]),
            (NfsOp::GETFH, &[]),
            (NfsOp::GETATTR, &[0]),
        ],
    );
    assert_eq!(results(&run(&four).1, 0).0, NfsStat::OK);
    let five = args(
        b"",
        1,
        &[
            (NfsOp::SEQUENCE, seq4),
            (NfsOp::PUTROOTFH, &[]),
            (NfsOp::GETFH, &[]),
            (NfsOp::GETATTR, &[0]),
            (NfsOp::GETATTR, &[0]),
        ],
    );
    let (f, out) = run(&five);
    assert_eq!(
        results(&out, 0),
        (
            NfsStat::TOO_MANY_OPS,
            vec![
                (NfsOp::SEQUENCE, NfsStat::OK),
                (NfsOp::PUTROOTFH, NfsStat::TOO_MANY_OPS)
            ]
        )
    );
    assert_eq!(f.ran, vec![NfsOp::SEQUENCE]);
    assert!(
        out.slot.is_some(),
        "the slot NfsOp::SEQUENCE took still gets the reply"
    );

    let seq512: &[u32] = &[16, 512, 1 << 20, 1 << 20, 0, 0];
    let a = args(
        b"",
        1,
        &[(NfsOp::SEQUENCE, seq512), (NfsOp::PUTROOTFH, &[])],
    );
    let at = |n| RpcSizes {
        request_len: n,
        reply_header_len: 24,
    };
    assert_eq!(results(&run_sized(&a, at(512)).1, 0).0, NfsStat::OK);
    let (f, out) = run_sized(&a, at(513));
    assert_eq!(
        results(&out, 0).1,
        vec![
            (NfsOp::SEQUENCE, NfsStat::OK),
            (NfsOp::PUTROOTFH, NfsStat::REQ_TOO_BIG)
        ]
    );
    assert_eq!(f.ran, vec![NfsOp::SEQUENCE]);
}

#[test]
fn reply_size_limits() {
    // Header: status 4 + empty tag 4 + count 4 = 12; SEQUENCE result 12; PUTROOTFH 8;
    // GETATTR 8 + body. With the 24-byte RPC header, a body of n makes 64 + n bytes.
    let fixed = 24 + 12 + 12 + 8 + 8;
    let seq =
        |resp: u32, cached: u32, cachethis: u32| vec![16, 1 << 20, resp, cached, cachethis, 0];
    let compound = |s: &[u32], n: u32| {
        args(
            b"",
            1,
            &[
                (NfsOp::SEQUENCE, s),
                (NfsOp::PUTROOTFH, &[]),
                (NfsOp::GETATTR, &[n]),
            ],
        )
    };

    let s = seq(fixed + 100, 0, 0);
    let out = run(&compound(&s, 100)).1;
    assert_eq!(results(&out, 100).0, NfsStat::OK);
    let out = run(&compound(&s, 104)).1;
    assert_eq!(
        results(&out, 104).1[2],
        (NfsOp::GETATTR, NfsStat::REP_TOO_BIG)
    );

    // cachethis: the cached limit applies; without cachethis it does not.
    let s = seq(1 << 20, fixed + 100, 1);
    assert_eq!(results(&run(&compound(&s, 100)).1, 100).0, NfsStat::OK);
    let out = run(&compound(&s, 104)).1;
    assert_eq!(
        results(&out, 104).1[2],
        (NfsOp::GETATTR, NfsStat::REP_TOO_BIG_TO_CACHE)
    );
    let s = seq(1 << 20, fixed + 100, 0);
    assert_eq!(results(&run(&compound(&s, 104)).1, 104).0, NfsStat::OK);
}

#[test]
fn an_undefined_opcode_is_op_illegal_before_the_session_limits() {
    // Past `max_ops` (not echoed with TOO_MANY_OPS) and past the request size.
    let seq2: &[u32] = &[2, 512, 1 << 20, 1 << 20, 0, 0];
    let big = RpcSizes {
        request_len: 513,
        reply_header_len: 24,
    };
    for (minor, op) in [
        (1, NfsOp(76)),
        (1, NfsOp(0)),
        (1, NfsOp::ILLEGAL),
        (1, NfsOp::GETXATTR),
        (2, NfsOp(1000)),
    ] {
        let a = args(
            b"",
            minor,
            &[(NfsOp::SEQUENCE, seq2), (op, &[]), (NfsOp::PUTROOTFH, &[])],
        );
        for sizes in [SIZES, big] {
            let (f, out) = run_sized(&a, sizes);
            assert_eq!(
                results(&out, 0),
                (
                    NfsStat::OP_ILLEGAL,
                    vec![
                        (NfsOp::SEQUENCE, NfsStat::OK),
                        (NfsOp::ILLEGAL, NfsStat::OP_ILLEGAL)
                    ]
                ),
                "{minor} {op:?} {sizes:?}"
            );
            assert_eq!(f.ran, vec![NfsOp::SEQUENCE]);
        }
    }
    // A legal operation in the same place still meets the limits.
    let a = args(
        b"",
        1,
        &[
            (NfsOp::SEQUENCE, seq2),
            (NfsOp::GETFH, &[]),
            (NfsOp::PUTROOTFH, &[]),
        ],
    );
    assert_eq!(results(&run(&a).1, 0).0, NfsStat::TOO_MANY_OPS);
}

#[test]
fn setattr_results_always_carry_attrsset() {
    // RFC 8881 §18.30.2: `attrsset` follows the status whatever it is, also when the
    // dispatcher refuses the operation. `parse` reads the 4 bytes of an empty
    // bitmap after every SETATTR status and fails on a reply without them.
    let seq1: &[u32] = &[1, 1 << 20, 1 << 20, 1 << 20, 0, 0];
    // Room for the RPC header, COMPOUND header, SEQUENCE and PUTROOTFH results, not SETATTR's.
    let tiny: &[u32] = &[16, 1 << 20, 24 + 12 + 12 + 8 + 8 - 1, 1 << 20, 0, 0];
    let in_session = |seq: &'static [u32]| {
        args(
            b"",
            1,
            &[
                (NfsOp::SEQUENCE, seq),
                (NfsOp::PUTROOTFH, &[]),
                (NfsOp::SETATTR, &[]),
            ],
        )
    };
    for (a, want) in [
        // No current filehandle.
        (
            args(b"", 1, &[(NfsOp::SEQUENCE, SEQ), (NfsOp::SETATTR, &[])]),
            NfsStat::NOFILEHANDLE,
        ),
        // Not in a session.
        (
            args(b"", 1, &[(NfsOp::SETATTR, &[])]),
            NfsStat::OP_NOT_IN_SESSION,
        ),
        // Past the session's operation limit.
        (
            args(b"", 1, &[(NfsOp::SEQUENCE, seq1), (NfsOp::SETATTR, &[])]),
            NfsStat::TOO_MANY_OPS,
        ),
        // Run, then refused for the size of its reply.
        (in_session(tiny), NfsStat::REP_TOO_BIG),
        // Run and OK (the fake writes no body: the dispatcher adds the empty bitmap).
        (in_session(SEQ), NfsStat::OK),
    ] {
        let (st, _, res) = parse(&run(&a).1.reply, 0);
        assert_eq!(st, want);
        assert_eq!(
            res.last(),
            Some(&(NfsOp::SETATTR, want, vec![0; 4])),
            "{want:?}"
        );
    }
}

#[test]
fn current_filehandle_is_required_where_the_table_says() {
    let (f, out) = run(&args(
        b"",
        1,
        &[(NfsOp::SEQUENCE, SEQ), (NfsOp::GETFH, &[])],
    ));
    assert_eq!(results(&out, 0).1[1], (NfsOp::GETFH, NfsStat::NOFILEHANDLE));
    assert_eq!(f.ran, vec![NfsOp::SEQUENCE]);
    let (f, _) = run(&args(
        b"",
        1,
        &[
            (NfsOp::SEQUENCE, SEQ),
            (NfsOp::PUTROOTFH, &[]),
            (NfsOp::GETFH, &[]),
        ],
    ));
    assert_eq!(f.ran, vec![NfsOp::SEQUENCE, NfsOp::PUTROOTFH, NfsOp::GETFH]);
}

#[test]
fn badxdr_stops_without_a_body_and_errors_stop() {
    let (f, out) = run(&args(
        b"",
        1,
        &[
            (NfsOp::SEQUENCE, SEQ),
            (NfsOp::PUTROOTFH, &[]),
            (NfsOp::READLINK, &[]),
            (NfsOp::PUTROOTFH, &[]),
        ],
    ));
    assert_eq!(
        results(&out, 0),
        (
            NfsStat::BADXDR,
            vec![
                (NfsOp::SEQUENCE, NfsStat::OK),
                (NfsOp::PUTROOTFH, NfsStat::OK),
                (NfsOp::READLINK, NfsStat::BADXDR)
            ]
        )
    );
    assert_eq!(
        f.ran,
        vec![NfsOp::SEQUENCE, NfsOp::PUTROOTFH, NfsOp::READLINK]
    );
    // Arguments missing altogether: the operation's own decode fails.
    let (_, out) = run(&args(
        b"",
        1,
        &[
            (NfsOp::SEQUENCE, SEQ),
            (NfsOp::PUTROOTFH, &[]),
            (NfsOp::GETATTR, &[]),
        ],
    ));
    assert_eq!(results(&out, 0).1[2], (NfsOp::GETATTR, NfsStat::BADXDR));
    // Fewer operations than the count says: the missing opcode is BADXDR.
    let mut a = args(b"", 1, &[(NfsOp::SEQUENCE, SEQ)]);
    a[11] = 2;
    let (_, out) = run(&a);
    assert_eq!(
        results(&out, 0).1,
        vec![
            (NfsOp::SEQUENCE, NfsStat::OK),
            (NfsOp::ILLEGAL, NfsStat::BADXDR)
        ]
    );
    // A count that the bytes cannot hold is refused before anything runs.
    a[11] = 100;
    assert!(run_compound(&mut Fake::default(), &a, SIZES).is_err());
}

#[test]
fn a_panicking_operation_answers_serverfault_and_keeps_the_slot() {
    let (f, out) = run(&args(
        b"",
        1,
        &[
            (NfsOp::SEQUENCE, SEQ),
            (NfsOp::PUTROOTFH, &[]),
            (NfsOp::LINK, &[]),
            (NfsOp::GETFH, &[]),
        ],
    ));
    assert_eq!(results(&out, 0).1[2], (NfsOp::LINK, NfsStat::SERVERFAULT));
    assert_eq!(results(&out, 0).1.len(), 3);
    assert_eq!(f.ran, vec![NfsOp::SEQUENCE, NfsOp::PUTROOTFH, NfsOp::LINK]);
    assert!(out.slot.is_some());
}

#[test]
fn a_cached_reply_is_sent_verbatim() {
    let replay: &[u32] = &[16, 1 << 20, 1 << 20, 1 << 20, 1, 1];
    let (f, out) = run(&args(
        b"",
        1,
        &[
            (NfsOp::SEQUENCE, replay),
            (NfsOp::PUTROOTFH, &[]),
            (NfsOp::LINK, &[]),
        ],
    ));
    assert_eq!(out.reply, b"CACHED");
    assert!(out.replayed && out.slot.is_some());
    assert_eq!(f.ran, vec![NfsOp::SEQUENCE]);
}

#[test]
fn sessionless_compounds_report_no_slot() {
    let (_, out) = run(&args(b"", 1, &[(NfsOp::EXCHANGE_ID, &[])]));
    assert!(out.slot.is_none() && !out.replayed);
}

#[test]
fn undecodable_headers_are_errors() {
    assert!(run_compound(&mut Fake::default(), &[], SIZES).is_err());
    let mut w = XdrWriter::new();
    w.opaque(&[b'x'; MAX_TAG + 1]);
    w.u32(1);
    w.u32(0);
    assert!(run_compound(&mut Fake::default(), &w.buf, SIZES).is_err());
    assert!(serverfault_reply(&w.buf).is_err());
    let ok = args(b"ab", 1, &[]);
    let sf = serverfault_reply(&ok).unwrap();
    assert_eq!(
        parse(&sf, 0),
        (NfsStat::SERVERFAULT, b"ab".to_vec(), vec![])
    );
}

proptest::proptest! {
    #[test]
    fn random_arguments_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
        let _ = run_compound(&mut Fake::default(), &data, SIZES);
    }

    #[test]
    fn random_op_streams_never_panic(ops in proptest::collection::vec(0u32..80, 0..12), minor in 0u32..4) {
        let list: Vec<(NfsOp, &[u32])> = std::iter::once((NfsOp::SEQUENCE, SEQ))
            .chain(ops.iter().map(|o| NfsOp(*o)).filter(|o| *o != NfsOp::LINK).map(|o| (o, &[0u32][..])))
            .collect();
        let _ = run_compound(&mut Fake::default(), &args(b"", minor, &list), SIZES);
    }
}

/// The export's client rule is enforced from the table's `access` flags, before the handler
/// runs: the put-filehandle operations pass, the next operation is refused.
#[test]
fn export_rules_refuse_before_the_handler_runs() {
    use crate::exports::{ClientRule, ExportConfig, ExportTable};
    use crate::rpc::auth::Cred;
    let t = ExportTable::compile(&[ExportConfig {
        path: "/".into(),
        clients: vec![ClientRule {
            access: crate::exports::AccessMode::Ro,
            ..ClientRule::for_hosts(&["127.0.0.2"])
        }],
    }])
    .unwrap();
    let sys = Cred {
        flavor: crate::rpc::msg::flavor::AUTH_SYS,
        uid: 1000,
        gid: 1000,
        gids: vec![],
        machine: vec![],
    };
    let run_as = |peer: &str, cred: &Cred, ops: &[(NfsOp, &[u32])]| {
        let mut f = Fake {
            fh: true,
            access: Some(t.decide(peer.parse().unwrap(), cred)),
            ..Fake::default()
        };
        let mut all = vec![(NfsOp::SEQUENCE, SEQ)];
        all.extend_from_slice(ops);
        let out = run_compound(&mut f, &args(b"", 1, &all), SIZES).unwrap();
        (f.ran, results(&out, 0).1)
    };
    let read = [(NfsOp::PUTROOTFH, &[][..]), (NfsOp::GETFH, &[][..])];
    // Read-only: reads run, a change is ROFS, a layout unavailable.
    let (ran, res) = run_as("127.0.0.2", &sys, &read);
    assert_eq!(ran, [NfsOp::SEQUENCE, NfsOp::PUTROOTFH, NfsOp::GETFH]);
    assert_eq!(res[2], (NfsOp::GETFH, NfsStat::OK));
    for (op, st) in [
        (NfsOp::WRITE, NfsStat::ROFS),
        (NfsOp::REMOVE, NfsStat::ROFS),
        (NfsOp::LAYOUTGET, NfsStat::LAYOUTUNAVAILABLE),
    ] {
        let (ran, res) = run_as("127.0.0.2", &sys, &[(NfsOp::PUTROOTFH, &[]), (op, &[])]);
        assert!(!ran.contains(&op), "{op:?} ran");
        assert_eq!(res[2], (op, st));
    }
    // A host no rule names: ACCESS on the first operation on the namespace.
    let (ran, res) = run_as("127.0.0.9", &sys, &read);
    assert_eq!(ran, [NfsOp::SEQUENCE, NfsOp::PUTROOTFH]);
    assert_eq!(res[2], (NfsOp::GETFH, NfsStat::ACCESS));
    // AUTH_NONE on a rule without sec "none": WRONGSEC, but SECINFO_NO_NAME answers.
    let none = Cred::anonymous(65534, 65534);
    let (_, res) = run_as("127.0.0.2", &none, &read);
    assert_eq!(res[2], (NfsOp::GETFH, NfsStat::WRONGSEC));
    let (ran, _) = run_as(
        "127.0.0.2",
        &none,
        &[(NfsOp::PUTROOTFH, &[]), (NfsOp::SECINFO_NO_NAME, &[])],
    );
    assert!(ran.contains(&NfsOp::SECINFO_NO_NAME));
}

/// The metrics hook sees each result the reply carries exactly once, with the status the
/// client gets: a run op, a panicked one (SERVERFAULT), one the reply limit replaced
/// (REP_TOO_BIG), a refused one (not run) and an undecodable opcode.
#[test]
fn every_result_in_the_reply_is_recorded_once_as_the_client_sees_it() {
    let small: &[u32] = &[16, 1 << 20, 200, 200, 0, 0];
    let cases: Vec<(Vec<u8>, Vec<bool>)> = vec![
        (
            args(
                b"",
                1,
                &[
                    (NfsOp::SEQUENCE, SEQ),
                    (NfsOp::PUTROOTFH, &[]),
                    (NfsOp::LINK, &[]),
                ],
            ),
            vec![true, true, true],
        ),
        (
            args(
                b"",
                1,
                &[
                    (NfsOp::SEQUENCE, small),
                    (NfsOp::PUTROOTFH, &[]),
                    (NfsOp::GETATTR, &[4000]),
                ],
            ),
            vec![true, true, true],
        ),
        (
            args(b"", 1, &[(NfsOp::SEQUENCE, SEQ), (NfsOp(9999), &[])]),
            vec![true, false],
        ),
        (
            args(b"", 1, &[(NfsOp::SEQUENCE, SEQ), (NfsOp::SEQUENCE, SEQ)]),
            vec![true, false],
        ),
    ];
    for (a, ran) in cases {
        let mut env = Fake::default();
        let out = run_compound(&mut env, &a, SIZES).unwrap();
        let (_, _, results) = parse(&out.reply, 0);
        let recorded = env.recorded.borrow().clone();
        let seen: Vec<(NfsOp, NfsStat)> = results.iter().map(|(o, s, _)| (*o, *s)).collect();
        let got: Vec<(NfsOp, NfsStat)> = recorded.iter().map(|(o, s, _)| (*o, *s)).collect();
        assert_eq!(got, seen);
        assert_eq!(
            recorded.iter().map(|r| r.2).collect::<Vec<_>>(),
            ran,
            "{seen:?}"
        );
    }
    // A truncated opcode: the reply's ILLEGAL/BADXDR is recorded, not run.
    let mut a = args(b"", 1, &[(NfsOp::SEQUENCE, SEQ)]);
    a[8..12].copy_from_slice(&2u32.to_be_bytes());
    let mut env = Fake::default();
    let out = run_compound(&mut env, &a, SIZES).unwrap();
    let (_, _, results) = parse(&out.reply, 0);
    assert_eq!(
        results.last().map(|r| (r.0, r.1)),
        Some((NfsOp::ILLEGAL, NfsStat::BADXDR))
    );
    assert_eq!(
        env.recorded.borrow().last(),
        Some(&(NfsOp::ILLEGAL, NfsStat::BADXDR, false))
    );
    assert_eq!(env.recorded.borrow().len(), results.len());
}
