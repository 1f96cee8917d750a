//! Entry points for cargo-fuzz targets (docs/design.md §7 and house rule 11, `fuzz/` and
//! docs/fuzzing.md). Each takes arbitrary bytes and must never panic; a fuzz target is one
//! line: `fuzz_target!(|d: &[u8]| pnfsd::fuzzing::rpc_stream(d));`. `seeds` builds the seed
//! corpus from the encoders the server itself uses (`cargo run -p pnfsd --example
//! fuzz_seeds`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::BytesMut;

use crate::nfs4::compound::{run_compound, OpEnv};
use crate::nfs4::opcode::NfsOp;
use crate::nfs4::ops::{self, OpFlags};
use crate::nfs4::state::SessionSlotRef;
use crate::nfs4::status::NfsStat;
use crate::rpc::auth::AuthPolicy;
use crate::rpc::program::{classify, Action};
use crate::rpc::record::RecordReader;
use crate::rpc::RpcSizes;
use crate::xdr::{XdrReader, XdrWriter};

/// A byte stream as a connection reads it: record marking, then each record through the RPC
/// header, credential and program checks.
pub fn rpc_stream(data: &[u8]) {
    let mut reader = RecordReader::new(1 << 16);
    let mut buf = BytesMut::from(data);
    while let Ok(Some(rec)) = reader.decode(&mut buf) {
        if let Action::CallbackReply { body, .. } = classify(&rec, AuthPolicy::default()) {
            let _ = crate::rpc::msg::reply_results(body);
        }
    }
}

/// COMPOUND4args through the dispatcher's rules over the real op table, with operations that
/// consume one word each (the operations' own decoders get their own targets as they land).
pub fn compound_args(data: &[u8]) {
    struct Env(Option<SessionSlotRef>, bool);
    impl OpEnv for Env {
        fn meta(&self, op: NfsOp) -> Option<OpFlags> {
            ops::lookup(op).map(|d| d.flags)
        }
        fn begin(&mut self, _: u32, _: usize) {}
        fn run(
            &mut self,
            op: NfsOp,
            _: usize,
            r: &mut XdrReader<'_>,
            _: &mut XdrWriter,
        ) -> Result<(), NfsStat> {
            let v = r.u32()?;
            match op {
                NfsOp::SEQUENCE => {
                    self.0 = Some(SessionSlotRef {
                        sessionid: [0; 16],
                        clientid: 0,
                        slot: 0,
                        seqid: 0,
                        cachethis: v & 1 != 0,
                        max_ops: v >> 24,
                        max_request_size: v & 0xffff,
                        max_response_size: v & 0xfff,
                        max_response_size_cached: v & 0xff,
                    })
                }
                NfsOp::PUTROOTFH => self.1 = true,
                _ => {}
            }
            match v % 3 {
                0 => Ok(()),
                st => Err(NfsStat(st)),
            }
        }
        fn has_current_fh(&self) -> bool {
            self.1
        }
        fn session(&self) -> Option<&SessionSlotRef> {
            self.0.as_ref()
        }
        fn take_cached_reply(&mut self) -> Option<Vec<u8>> {
            None
        }
    }
    let sizes = RpcSizes {
        request_len: data.len(),
        reply_header_len: crate::rpc::msg::SUCCESS_HEADER_LEN,
    };
    let _ = run_compound(&mut Env(None, false), data, sizes);
}

/// Operations after SEQUENCE + PUTROOTFH, through the real dispatcher and every operation's
/// own decoder and handler, on a real server over an in-memory volume. `data[0]` picks the
/// minor version (bit 0: 4.1 or 4.2) and `data[1]` how many operations follow (0..=15); the
/// rest are those operations as they go on the wire (opcode, arguments). The rig keeps one
/// session and is rebuilt every [`RIG_RUNS`] inputs, or when an input lost the session
/// (DESTROY_SESSION, DESTROY_CLIENTID), so that state does not pile up without bound.
pub fn compound_ops(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let mut rig = lock(&RIG);
    if rig.as_ref().is_none_or(|r| r.runs >= RIG_RUNS) {
        *rig = Rig::new();
    }
    let Some(r) = rig.as_mut() else {
        return;
    };
    r.runs += 1;
    let mut w = XdrWriter::new();
    w.opaque(&[]); // tag
    w.u32(1 + u32::from(data[0] & 1));
    w.u32(2 + u32::from(data[1] % 16));
    w.u32(NfsOp::SEQUENCE.0);
    w.opaque_fixed(&r.sessionid);
    w.u32(r.seqid);
    w.u32(0); // slot
    w.u32(0); // highest slot
    w.bool(false);
    w.u32(NfsOp::PUTROOTFH.0);
    w.buf.extend_from_slice(&data[2..]);
    match r.call(&w.buf) {
        Some(OpResult { op, status }) if op == NfsOp::SEQUENCE.0 && status == NfsStat::OK => {
            r.seqid = r.seqid.wrapping_add(1)
        }
        _ => *rig = None,
    }
}

/// Inputs one rig serves before it is rebuilt.
pub const RIG_RUNS: u32 = 20_000;
/// The rig's volume.
const RIG_VOLUME: u64 = 16 << 20;

static RIG: Mutex<Option<Rig>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A server on a 16 MiB in-memory volume with one client and one session (slot 0).
struct Rig {
    srv: crate::server::Server,
    conn: crate::rpc::ConnInfo,
    sessionid: [u8; 16],
    seqid: u32,
    runs: u32,
}

/// The first operation's number and status in a COMPOUND4res.
struct OpResult {
    op: u32,
    status: NfsStat,
}

impl Rig {
    fn new() -> Option<Rig> {
        use crate::store::{Store, StoreOptions};
        let dev = Arc::new(metalog::CrashDev::new(RIG_VOLUME, 1));
        Store::mkfs_dev(dev.clone(), false).ok()?;
        // An async export: nothing is forced per operation (the fuzzer looks for decoding
        // and handler faults, not durability; the crash tests cover that).
        let sopts = StoreOptions {
            sync: false,
            ..StoreOptions::default()
        };
        let store = Arc::new(Store::open_dev(dev, sopts).ok()?);
        let opts = crate::server::NfsOptions {
            grace_seconds: 0,
            sync: false,
            ..Default::default()
        };
        let mut r = Rig {
            srv: crate::server::Server::new(store, opts),
            conn: crate::rpc::ConnInfo {
                id: 1,
                peer: SocketAddr::from(([127, 0, 0, 1], 700)),
                backchannel: None,
            },
            sessionid: [0; 16],
            seqid: 1,
            runs: 0,
        };
        let (clientid, seq) = r.exchange_id()?;
        r.sessionid = r.create_session(clientid, seq)?;
        // Nothing to reclaim: without this every OPEN and CREATE answers GRACE.
        let mut w = seeds::compound_head(1, 2);
        w.u32(NfsOp::SEQUENCE.0);
        w.opaque_fixed(&r.sessionid);
        w.u32(r.seqid);
        w.u32(0);
        w.u32(0);
        w.bool(false);
        w.u32(NfsOp::RECLAIM_COMPLETE.0);
        w.bool(false);
        let ok = r.call(&w.buf)?;
        (ok.status == NfsStat::OK).then_some(())?;
        r.seqid += 1;
        Some(r)
    }

    /// Runs one COMPOUND; the first operation's result.
    fn call(&self, args: &[u8]) -> Option<OpResult> {
        self.reply(args).and_then(|res| {
            let mut rd = XdrReader::new(&res);
            let _status = rd.u32().ok()?;
            let _tag = rd.opaque(1024).ok()?;
            (rd.u32().ok()? > 0).then_some(())?;
            Some(OpResult {
                op: rd.u32().ok()?,
                status: NfsStat(rd.u32().ok()?),
            })
        })
    }

    fn reply(&self, args: &[u8]) -> Option<Vec<u8>> {
        let cred = crate::rpc::Cred {
            flavor: crate::rpc::msg::flavor::AUTH_SYS,
            uid: 0,
            gid: 0,
            gids: vec![],
            machine: b"fuzz".to_vec(),
        };
        let sizes = RpcSizes {
            request_len: args.len() + 100,
            reply_header_len: crate::rpc::msg::SUCCESS_HEADER_LEN,
        };
        crate::nfs4::compound::process(&self.srv, &self.conn, cred, args, sizes).ok()
    }

    /// EXCHANGE_ID as a pNFS MDS client: (clientid, sequenceid).
    fn exchange_id(&self) -> Option<(u64, u32)> {
        let mut w = seeds::compound_head(1, 1);
        seeds::exchange_id_op(&mut w);
        let res = self.reply(&w.buf)?;
        let mut rd = XdrReader::new(&res);
        (rd.u32().ok()? == 0).then_some(())?;
        rd.opaque(1024).ok()?;
        rd.u32().ok()?;
        rd.u32().ok()?;
        rd.u32().ok()?;
        Some((rd.u64().ok()?, rd.u32().ok()?))
    }

    fn create_session(&self, clientid: u64, seq: u32) -> Option<[u8; 16]> {
        let mut w = seeds::compound_head(1, 1);
        seeds::create_session_op(&mut w, clientid, seq);
        let res = self.reply(&w.buf)?;
        let mut rd = XdrReader::new(&res);
        (rd.u32().ok()? == 0).then_some(())?;
        rd.opaque(1024).ok()?;
        rd.u32().ok()?;
        rd.u32().ok()?;
        rd.u32().ok()?;
        rd.array().ok()
    }
}

/// LAYOUTCOMMIT's `layoutupdate` bodies (block, RFC 5663 §2.3.5; SCSI, RFC 8154 §2.3.5)
/// and SCSI device addresses (RFC 8154 §2.3.1), decoded as the layout crate does; whatever
/// decodes must encode back to bytes that decode the same.
pub fn layout_bodies(data: &[u8]) {
    use layout::block::BlockExtent;
    if let Ok(list) = BlockExtent::decode_list(data) {
        let again = BlockExtent::decode_list(&BlockExtent::encode_list(&list));
        assert_eq!(again.as_ref().ok(), Some(&list), "block extents round trip");
    }
    if let Ok(list) = layout::scsi::decode_update(data) {
        let again = layout::scsi::decode_update(&layout::scsi::encode_update(&list));
        assert_eq!(again.as_ref().ok(), Some(&list), "SCSI ranges round trip");
    }
    let _ = layout::scsi::decode_deviceaddr(data);
}

/// The volume superblock (block 0): decoding never panics, and what decodes encodes back
/// to a superblock that decodes the same.
pub fn superblock(data: &[u8]) {
    use layout::superblock::Superblock;
    if let Ok(sb) = Superblock::decode(data) {
        let again = Superblock::decode(&sb.encode());
        assert_eq!(again.ok(), Some(sb), "superblock round trip");
    }
    let _ = Superblock::looks_formatted(data);
}

/// The store's on-disk structures (checkpoints, B+tree nodes, blobs) edited by the input
/// in a volume a real store wrote, then mounted, walked, changed and mounted again
/// (`store::fuzzing` says how the input is read).
pub fn store_image(data: &[u8]) {
    crate::store::fuzzing::image(data)
}

/// Encoders for the seed corpus and the rig (what a well-behaved client sends).
pub mod seeds {
    use crate::nfs4::opcode::NfsOp;
    use crate::xdr::XdrWriter;

    /// A COMPOUND4args header: empty tag, `minor`, `nops` operations.
    pub fn compound_head(minor: u32, nops: u32) -> XdrWriter {
        let mut w = XdrWriter::new();
        w.opaque(&[]);
        w.u32(minor);
        w.u32(nops);
        w
    }

    /// EXCHANGE_ID for a pNFS client (USE_PNFS_MDS), SP4_NONE, no implementation id.
    pub fn exchange_id_op(w: &mut XdrWriter) {
        w.u32(NfsOp::EXCHANGE_ID.0);
        w.opaque_fixed(&[7; 8]);
        w.opaque(b"pnfsd-fuzz");
        w.u32(0x0004_0000);
        w.u32(0);
        w.u32(0);
    }

    fn channel(w: &mut XdrWriter) {
        for v in [0, 1 << 20, 1 << 20, 8192, 16, 8] {
            w.u32(v);
        }
        w.u32(0);
    }

    /// CREATE_SESSION for `clientid` at `seq`, no backchannel flags, AUTH_NONE callbacks.
    pub fn create_session_op(w: &mut XdrWriter, clientid: u64, seq: u32) {
        w.u32(NfsOp::CREATE_SESSION.0);
        w.u64(clientid);
        w.u32(seq);
        w.u32(0);
        channel(w);
        channel(w);
        w.u32(0x4000_0000);
        w.u32(1);
        w.u32(0);
    }

    /// Well-formed operations of each kind `compound_ops` can reach, as (name, how many
    /// operations, bytes after SEQUENCE + PUTROOTFH). Arguments are plausible, not necessarily valid in the
    /// rig's state: the fuzzer mutates from here.
    pub fn ops() -> Vec<(&'static str, u8, Vec<u8>)> {
        let mut out = Vec::new();
        let mut op = |name: &'static str, nops: u8, f: &dyn Fn(&mut XdrWriter)| {
            let mut w = XdrWriter::new();
            f(&mut w);
            out.push((name, nops, w.buf));
        };
        let stateid = |w: &mut XdrWriter| {
            w.u32(0);
            w.opaque_fixed(&[0; 12]);
        };
        let bitmap = |w: &mut XdrWriter, words: &[u32]| {
            w.u32(words.len() as u32);
            for x in words {
                w.u32(*x);
            }
        };
        let fattr_mode = |w: &mut XdrWriter| {
            bitmap(w, &[0, 1 << 1]); // mode
            w.opaque(&0o644u32.to_be_bytes());
        };
        let open_create = |w: &mut XdrWriter, name: &[u8]| {
            w.u32(NfsOp::OPEN.0);
            w.u32(0); // seqid
            w.u32(3); // share access both
            w.u32(0);
            w.u64(1); // clientid
            w.opaque(b"owner");
            w.u32(1); // OPEN4_CREATE
            w.u32(0); // UNCHECKED4
            fattr_mode(w);
            w.u32(0); // CLAIM_NULL
            w.opaque(name);
        };
        op("getattr", 1, &|w| {
            w.u32(NfsOp::GETATTR.0);
            bitmap(w, &[0x0010_011a, 0x00b0_a23a, 0x0000_0002]);
        });
        op("getfh", 1, &|w| w.u32(NfsOp::GETFH.0));
        op("access", 1, &|w| {
            w.u32(NfsOp::ACCESS.0);
            w.u32(0x3f);
        });
        op("lookup", 1, &|w| {
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(b"f");
        });
        op("lookupp", 1, &|w| w.u32(NfsOp::LOOKUPP.0));
        op("create_dir", 1, &|w| {
            w.u32(NfsOp::CREATE.0);
            w.u32(2); // NF4DIR
            w.opaque(b"d");
            fattr_mode(w);
        });
        op("create_symlink", 1, &|w| {
            w.u32(NfsOp::CREATE.0);
            w.u32(5); // NF4LNK
            w.opaque(b"target");
            w.opaque(b"l");
            fattr_mode(w);
        });
        op("open_create_write_close", 4, &|w| {
            open_create(w, b"f");
            w.u32(NfsOp::WRITE.0);
            stateid(w);
            w.u64(0);
            w.u32(2);
            w.opaque(b"hello");
            w.u32(NfsOp::COMMIT.0);
            w.u64(0);
            w.u32(0);
            w.u32(NfsOp::CLOSE.0);
            w.u32(0);
            stateid(w);
        });
        op("read", 2, &|w| {
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(b"f");
            w.u32(NfsOp::READ.0);
            stateid(w);
            w.u64(0);
            w.u32(4096);
        });
        op("readdir", 1, &|w| {
            w.u32(NfsOp::READDIR.0);
            w.u64(0);
            w.opaque_fixed(&[0; 8]);
            w.u32(4096);
            w.u32(8192);
            bitmap(w, &[0x0010_0002, 0x0000_0002]);
        });
        op("readlink", 2, &|w| {
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(b"l");
            w.u32(NfsOp::READLINK.0);
        });
        op("remove", 1, &|w| {
            w.u32(NfsOp::REMOVE.0);
            w.opaque(b"f");
        });
        op("rename", 2, &|w| {
            w.u32(NfsOp::SAVEFH.0);
            w.u32(NfsOp::RENAME.0);
            w.opaque(b"f");
            w.opaque(b"g");
        });
        op("link", 4, &|w| {
            w.u32(NfsOp::SAVEFH.0);
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(b"f");
            w.u32(NfsOp::RESTOREFH.0);
            w.u32(NfsOp::LINK.0);
            w.opaque(b"h");
        });
        op("setattr", 2, &|w| {
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(b"f");
            w.u32(NfsOp::SETATTR.0);
            stateid(w);
            bitmap(w, &[1 << 4]); // size
            w.opaque(&4096u64.to_be_bytes());
        });
        op("verify", 2, &|w| {
            w.u32(NfsOp::VERIFY.0);
            bitmap(w, &[1 << 1]);
            w.opaque(&2u32.to_be_bytes());
            w.u32(NfsOp::NVERIFY.0);
            bitmap(w, &[1 << 1]);
            w.opaque(&1u32.to_be_bytes());
        });
        op("secinfo", 2, &|w| {
            w.u32(NfsOp::SECINFO.0);
            w.opaque(b"f");
            w.u32(NfsOp::SECINFO_NO_NAME.0);
            w.u32(0);
        });
        op("lock", 4, &|w| {
            open_create(w, b"k");
            w.u32(NfsOp::LOCK.0);
            w.u32(2); // WRITE_LT
            w.bool(false);
            w.u64(0);
            w.u64(100);
            w.bool(true); // new lock owner
            w.u32(0);
            stateid(w);
            w.u32(0);
            w.u64(1);
            w.opaque(b"lo");
            w.u32(NfsOp::LOCKT.0);
            w.u32(2);
            w.u64(0);
            w.u64(10);
            w.u64(1);
            w.opaque(b"other");
            w.u32(NfsOp::LOCKU.0);
            w.u32(2);
            w.u32(0);
            stateid(w);
            w.u64(0);
            w.u64(100);
        });
        op("layoutget", 2, &|w| {
            open_create(w, b"p");
            w.u32(NfsOp::LAYOUTGET.0);
            w.bool(false);
            w.u32(3); // LAYOUT4_BLOCK_VOLUME
            w.u32(2); // IOMODE_RW
            w.u64(0);
            w.u64(1 << 20);
            w.u64(4096);
            stateid(w);
            w.u32(65536);
        });
        op("layoutcommit", 2, &|w| {
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(b"p");
            w.u32(NfsOp::LAYOUTCOMMIT.0);
            w.u64(0);
            w.u64(4096);
            w.bool(false);
            stateid(w);
            w.bool(true);
            w.u64(4095);
            w.bool(false);
            w.u32(3);
            w.opaque(&layout::block::BlockExtent::encode_list(&[]));
        });
        op("layoutreturn", 2, &|w| {
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(b"p");
            w.u32(NfsOp::LAYOUTRETURN.0);
            w.bool(false);
            w.u32(3);
            w.u32(3); // IOMODE_ANY
            w.u32(1); // LAYOUTRETURN4_FILE
            w.u64(0);
            w.u64(u64::MAX);
            stateid(w);
            w.opaque(&[]);
        });
        op("getdeviceinfo", 2, &|w| {
            w.u32(NfsOp::GETDEVICEINFO.0);
            w.opaque_fixed(&[0; 16]);
            w.u32(3);
            w.u32(4096);
            bitmap(w, &[]);
            w.u32(NfsOp::GETDEVICELIST.0);
            w.u32(3);
            w.u32(16);
            w.u64(0);
            w.opaque_fixed(&[0; 8]);
        });
        op("seek_allocate_deallocate", 4, &|w| {
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(b"f");
            w.u32(NfsOp::ALLOCATE.0);
            stateid(w);
            w.u64(0);
            w.u64(8192);
            w.u32(NfsOp::DEALLOCATE.0);
            stateid(w);
            w.u64(0);
            w.u64(4096);
            w.u32(NfsOp::SEEK.0);
            stateid(w);
            w.u64(0);
            w.u32(0);
        });
        op("xattrs", 5, &|w| {
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(b"f");
            w.u32(NfsOp::SETXATTR.0);
            w.u32(0);
            w.opaque(b"user.a");
            w.opaque(b"v");
            w.u32(NfsOp::GETXATTR.0);
            w.opaque(b"user.a");
            w.u32(NfsOp::LISTXATTRS.0);
            w.u64(0);
            w.u32(4096);
            w.u32(NfsOp::REMOVEXATTR.0);
            w.opaque(b"user.a");
        });
        op("state_ops", 5, &|w| {
            w.u32(NfsOp::TEST_STATEID.0);
            w.u32(1);
            stateid(w);
            w.u32(NfsOp::FREE_STATEID.0);
            stateid(w);
            w.u32(NfsOp::DELEGRETURN.0);
            stateid(w);
            w.u32(NfsOp::OPEN_DOWNGRADE.0);
            stateid(w);
            w.u32(0);
            w.u32(1);
            w.u32(0);
            w.u32(NfsOp::RECLAIM_COMPLETE.0);
            w.bool(false);
        });
        op("session_ops", 2, &|w| {
            w.u32(NfsOp::BACKCHANNEL_CTL.0);
            w.u32(0x4000_0000);
            w.u32(1);
            w.u32(0);
            w.u32(NfsOp::BIND_CONN_TO_SESSION.0);
            w.opaque_fixed(&[0; 16]);
            w.u32(3);
            w.bool(false);
        });
        op("putfh_putpubfh", 3, &|w| {
            w.u32(NfsOp::PUTFH.0);
            w.opaque(&[0; 16]);
            w.u32(NfsOp::PUTPUBFH.0);
            w.u32(NfsOp::ILLEGAL.0);
        });
        out
    }

    /// Whole COMPOUND4args: EXCHANGE_ID, CREATE_SESSION, and SEQUENCE + PUTROOTFH + each
    /// seed of [`ops`], for `compound_args` and (framed, with an AUTH_SYS call header) for
    /// `rpc_stream`.
    pub fn compounds() -> Vec<(String, Vec<u8>)> {
        let mut v = Vec::new();
        let mut w = compound_head(1, 1);
        exchange_id_op(&mut w);
        v.push(("exchange_id".to_string(), w.buf));
        let mut w = compound_head(1, 1);
        create_session_op(&mut w, 1, 1);
        v.push(("create_session".to_string(), w.buf));
        for (name, n, bytes) in ops() {
            let mut w = compound_head(1, 2 + u32::from(n));
            w.u32(NfsOp::SEQUENCE.0);
            w.opaque_fixed(&[0; 16]);
            w.u32(1);
            w.u32(0);
            w.u32(0);
            w.bool(true);
            w.u32(NfsOp::PUTROOTFH.0);
            w.buf.extend_from_slice(&bytes);
            v.push((name.to_string(), w.buf));
        }
        v
    }

    /// RPC records: NULL, and each of [`compounds`] as a COMPOUND call with AUTH_SYS, once in
    /// one fragment and once cut into fragments of 40 bytes.
    pub fn rpc_records() -> Vec<(String, Vec<u8>)> {
        use crate::rpc::msg::{call_header, flavor, OpaqueAuth};
        use crate::rpc::program::{NFS_PROGRAM, NFS_V4, PROC_COMPOUND, PROC_NULL};
        let cred = crate::rpc::Cred {
            flavor: flavor::AUTH_SYS,
            uid: 0,
            gid: 0,
            gids: vec![1, 2],
            machine: b"fuzz".to_vec(),
        };
        let sys = crate::rpc::auth::encode_authsys(&cred, 1);
        let call = |proc_: u32, args: &[u8]| {
            let mut w = XdrWriter::new();
            let auth = OpaqueAuth {
                flavor: flavor::AUTH_SYS,
                body: &sys,
            };
            call_header(&mut w, 1, NFS_PROGRAM, NFS_V4, proc_, auth);
            w.buf.extend_from_slice(args);
            w.buf
        };
        let mut v = vec![(
            "null".to_string(),
            crate::rpc::record::frame(&call(PROC_NULL, &[])),
        )];
        for (name, args) in compounds() {
            let msg = call(PROC_COMPOUND, &args);
            v.push((name.clone(), crate::rpc::record::frame(&msg)));
            let mut frags = Vec::new();
            let mut chunks = msg.chunks(40).peekable();
            while let Some(c) = chunks.next() {
                let last = if chunks.peek().is_none() { 1 << 31 } else { 0 };
                frags.extend_from_slice(&(c.len() as u32 | last).to_be_bytes());
                frags.extend_from_slice(c);
            }
            v.push((format!("{name}-fragments"), frags));
        }
        v
    }

    /// Block and SCSI layoutupdate bodies and device addresses.
    pub fn layout_bodies() -> Vec<(String, Vec<u8>)> {
        use layout::block::{simple_deviceaddr, BlockExtent, ExtentState};
        let ext = |off: u64, state: ExtentState| BlockExtent {
            deviceid: [3; 16],
            file_offset: off,
            length: 8192,
            storage_offset: 1 << 20,
            state,
        };
        vec![
            (
                "block-extents".to_string(),
                BlockExtent::encode_list(&[
                    ext(0, ExtentState::READ_WRITE_DATA),
                    ext(8192, ExtentState::INVALID_DATA),
                ]),
            ),
            (
                "scsi-ranges".to_string(),
                layout::scsi::encode_update(&[layout::scsi::ScsiRange {
                    offset: 0,
                    length: 4096,
                }]),
            ),
            (
                "scsi-deviceaddr".to_string(),
                layout::scsi::eui_deviceaddr(&[0x11; 8], 0x1234),
            ),
            (
                "block-deviceaddr".to_string(),
                simple_deviceaddr(32, &[0xab; 16]),
            ),
        ]
    }

    /// A superblock as mkfs writes it for a 1 GiB volume.
    pub fn superblocks() -> Vec<(String, Vec<u8>)> {
        use layout::superblock::{Geometry, Superblock};
        Geometry::for_volume(1 << 30)
            .map(|geometry| {
                let sb = Superblock {
                    uuid: [9; 16],
                    features: 0,
                    geometry,
                    created: 1_700_000_000,
                    mounted: None,
                };
                // and as a mount marks it (store/mount.rs mark_mounted)
                let marked = Superblock {
                    mounted: Some(layout::MountMark::new("mds-a", 42, 1_800_000_000)),
                    ..sb
                };
                vec![
                    ("mkfs-1g".to_string(), sb.encode()),
                    ("mounted-1g".to_string(), marked.encode()),
                ]
            })
            .unwrap_or_default()
    }

    /// `store_image` inputs: the base volume with each flag, one edit of each metadata block.
    pub fn store_images() -> Vec<(String, Vec<u8>)> {
        crate::store::fuzzing::seeds()
    }

    /// `compound_ops` inputs: minor-version byte, op-count byte, the operations.
    pub fn compound_ops_inputs() -> Vec<(String, Vec<u8>)> {
        let mut v = Vec::new();
        for (name, n, bytes) in ops() {
            for minor in [0u8, 1] {
                let mut d = vec![minor, n];
                d.extend_from_slice(&bytes);
                v.push((format!("{name}-4{}", 1 + minor), d));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn entry_points_survive_random_input(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            rpc_stream(&data);
            compound_args(&data);
            layout_bodies(&data);
            superblock(&data);
        }
    }

    #[test]
    fn the_store_image_base_is_sound_and_every_seed_runs() {
        let (checkpoints, nodes, live, blobs) = crate::store::fuzzing::base_shape().unwrap();
        assert_eq!(checkpoints, 2);
        assert!(
            live >= 3 && nodes >= live,
            "a tree of two levels: {live} nodes"
        );
        assert!(
            blobs >= 2,
            "the free-space list and the client records: {blobs}"
        );
        assert!(crate::store::fuzzing::base_mounts_whole());
        for (_, d) in seeds::store_images() {
            store_image(&d);
        }
    }

    #[test]
    fn the_rig_runs_every_seed_and_keeps_its_session() {
        for (name, d) in seeds::compound_ops_inputs() {
            compound_ops(&d);
            assert!(lock(&RIG).is_some(), "{name} lost the rig's session");
        }
    }
}
