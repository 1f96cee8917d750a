//! Storage faults that fail safe: the real server, store and log over a device
//! that fails where the test says (metalog `FaultDev` over the crash-simulating `CrashDev`).
//! An I/O error or a full device while clients change things gives them NFS4ERR_IO or
//! NFS4ERR_NOSPC at once, never a hang; reads go on; the log stays shut (nothing more is
//! acknowledged); and after the device heals, a restart recovers everything acknowledged.

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use metalog::{BlockDev, CrashDev, Fault, FaultDev};
use pnfsd::fuzzing::seeds;
use pnfsd::nfs4::compound::process;
use pnfsd::nfs4::opcode::NfsOp;
use pnfsd::rpc::{ConnInfo, Cred, RpcSizes};
use pnfsd::server::{NfsOptions, Server};
use pnfsd::store::{Store, StoreOptions};
use pnfsd::xdr::{XdrReader, XdrWriter};

const NFS4_OK: u32 = 0;
const NFS4ERR_IO: u32 = 5;
const NFS4ERR_NOSPC: u32 = 28;
/// Every call must be answered within this (a hang fails the test instead of blocking it).
const ANSWER: Duration = Duration::from_secs(30);

/// One client with one session on a server over `dev`.
struct Client {
    srv: Arc<Server>,
    sid: [u8; 16],
    seq: u32,
}

fn cred() -> Cred {
    Cred {
        flavor: 1,
        uid: 0,
        gid: 0,
        gids: vec![],
        machine: b"faults".to_vec(),
    }
}

/// Runs a COMPOUND on another thread; its encoded result, or a panic after [`ANSWER`].
fn run(srv: &Arc<Server>, args: Vec<u8>) -> Vec<u8> {
    let (tx, rx) = mpsc::channel();
    let srv = srv.clone();
    std::thread::spawn(move || {
        let conn = ConnInfo {
            id: 1,
            peer: SocketAddr::from(([127, 0, 0, 1], 800)),
            backchannel: None,
        };
        let sizes = RpcSizes {
            request_len: args.len() + 100,
            reply_header_len: 24,
        };
        let _ = tx.send(process(&srv, &conn, cred(), &args, sizes).unwrap());
    });
    rx.recv_timeout(ANSWER)
        .expect("no answer: the server hangs")
}

impl Client {
    fn start(dev: Arc<dyn BlockDev>) -> Client {
        let store = Arc::new(Store::open_dev(dev, StoreOptions::default()).unwrap());
        let opts = NfsOptions {
            grace_seconds: 0,
            ..Default::default()
        };
        let srv = Arc::new(Server::new(store, opts));
        let mut w = seeds::compound_head(1, 1);
        seeds::exchange_id_op(&mut w);
        let res = run(&srv, w.buf);
        let mut r = XdrReader::new(&res);
        assert_eq!(r.u32().unwrap(), NFS4_OK);
        r.opaque(64).unwrap();
        r.u32().unwrap();
        r.u32().unwrap();
        r.u32().unwrap();
        let (clientid, seq) = (r.u64().unwrap(), r.u32().unwrap());
        let mut w = seeds::compound_head(1, 1);
        seeds::create_session_op(&mut w, clientid, seq);
        let res = run(&srv, w.buf);
        let mut r = XdrReader::new(&res);
        assert_eq!(r.u32().unwrap(), NFS4_OK);
        r.opaque(64).unwrap();
        r.u32().unwrap();
        r.u32().unwrap();
        r.u32().unwrap();
        let sid = r.array().unwrap();
        let mut c = Client { srv, sid, seq: 1 };
        // Nothing to reclaim (RFC 8881 §18.51): out of the grace period for this client.
        assert_eq!(
            c.call(1, |w| {
                w.u32(NfsOp::RECLAIM_COMPLETE.0);
                w.bool(false);
            }),
            NFS4_OK
        );
        c
    }

    /// SEQUENCE + PUTROOTFH + `nops` operations from `ops`: the COMPOUND's status.
    fn call(&mut self, nops: u32, ops: impl Fn(&mut XdrWriter)) -> u32 {
        let mut w = seeds::compound_head(1, 2 + nops);
        w.u32(NfsOp::SEQUENCE.0);
        w.opaque_fixed(&self.sid);
        w.u32(self.seq);
        w.u32(0);
        w.u32(0);
        w.bool(false);
        w.u32(NfsOp::PUTROOTFH.0);
        ops(&mut w);
        let res = run(&self.srv, w.buf);
        let mut r = XdrReader::new(&res);
        let status = r.u32().unwrap();
        r.opaque(64).unwrap();
        r.u32().unwrap();
        r.u32().unwrap();
        if r.u32().unwrap() == NFS4_OK {
            self.seq += 1;
        }
        status
    }

    fn mkdir(&mut self, name: &str) -> u32 {
        self.call(1, |w| {
            w.u32(NfsOp::CREATE.0);
            w.u32(2); // NF4DIR
            w.opaque(name.as_bytes());
            w.u32(2);
            w.u32(0);
            w.u32(1 << 1); // mode
            w.opaque(&0o755u32.to_be_bytes());
        })
    }

    fn lookup(&mut self, name: &str) -> u32 {
        self.call(1, |w| {
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(name.as_bytes());
        })
    }

    /// OPEN(create) `name`, WRITE `data` FILE_SYNC at 0, CLOSE.
    fn write_file(&mut self, name: &str, data: &[u8]) -> u32 {
        self.call(3, |w| {
            w.u32(NfsOp::OPEN.0);
            w.u32(0);
            w.u32(3);
            w.u32(0);
            w.u64(0);
            w.opaque(b"owner");
            w.u32(1); // OPEN4_CREATE
            w.u32(0); // UNCHECKED4
            w.u32(0); // no attributes
            w.opaque(&[]);
            w.u32(0); // CLAIM_NULL
            w.opaque(name.as_bytes());
            w.u32(NfsOp::WRITE.0);
            current_stateid(w);
            w.u64(0);
            w.u32(2); // FILE_SYNC4
            w.opaque(data);
            w.u32(NfsOp::CLOSE.0);
            w.u32(0);
            current_stateid(w);
        })
    }

    fn read_file(&mut self, name: &str) -> u32 {
        self.call(2, |w| {
            w.u32(NfsOp::LOOKUP.0);
            w.opaque(name.as_bytes());
            w.u32(NfsOp::READ.0);
            w.u32(0);
            w.opaque_fixed(&[0; 12]); // anonymous stateid
            w.u64(0);
            w.u32(4096);
        })
    }
}

/// RFC 8881 §16.2.3.1.2: seqid 1, other all zero: the current stateid.
fn current_stateid(w: &mut XdrWriter) {
    w.u32(1);
    w.opaque_fixed(&[0; 12]);
}

/// A formatted 64 MiB crash device behind a fault injector.
fn volume() -> (Arc<CrashDev>, Arc<FaultDev>) {
    let disk = Arc::new(CrashDev::new(64 << 20, 7));
    let fault = Arc::new(FaultDev::new(disk.clone()));
    Store::mkfs_dev(fault.clone(), false).unwrap();
    (disk, fault)
}

/// After the fault: the device heals, the server goes away without a clean unmount (what a
/// SIGKILL or a failed unmount leaves), and a new one mounts what the disk made durable.
fn restart(disk: &CrashDev) -> Client {
    Client::start(Arc::new(disk.crash()))
}

fn acknowledged(c: &mut Client, n: usize) {
    for i in 0..n {
        assert_eq!(c.mkdir(&format!("d{i}")), NFS4_OK);
        assert_eq!(c.write_file(&format!("f{i}"), &[i as u8; 3000]), NFS4_OK);
    }
}

fn all_there(c: &mut Client, n: usize) {
    for i in 0..n {
        assert_eq!(c.lookup(&format!("d{i}")), NFS4_OK, "d{i} lost");
        assert_eq!(c.read_file(&format!("f{i}")), NFS4_OK, "f{i} lost");
    }
}

#[test]
fn a_failing_write_refuses_changes_and_a_restart_keeps_what_was_acknowledged() {
    let (disk, fault) = volume();
    let mut c = Client::start(fault.clone());
    acknowledged(&mut c, 5);
    fault.fail_writes_after(0, Fault::Io);
    assert_eq!(c.mkdir("late"), NFS4ERR_IO);
    // The log is shut: every later change is refused the same way, at once.
    assert!(c.srv.store.log().shutdown_error().is_some());
    fault.heal();
    assert_eq!(
        c.mkdir("later"),
        NFS4ERR_IO,
        "nothing is acknowledged after a failure"
    );
    assert_eq!(c.write_file("g", b"x"), NFS4ERR_IO);
    // The daemon stays up and reads go on.
    assert_eq!(c.lookup("d3"), NFS4_OK);
    assert_eq!(c.read_file("f2"), NFS4_OK);
    assert!(fault.failed().1 > 0);
    drop(c);
    let mut c = restart(&disk);
    all_there(&mut c, 5);
    assert_eq!(c.mkdir("after"), NFS4_OK);
}

#[test]
fn a_failing_flush_refuses_changes_and_a_restart_keeps_what_was_acknowledged() {
    let (disk, fault) = volume();
    let mut c = Client::start(fault.clone());
    acknowledged(&mut c, 4);
    fault.fail_flushes_after(0, Fault::Io);
    assert_eq!(c.mkdir("late"), NFS4ERR_IO);
    assert_eq!(c.write_file("g", b"x"), NFS4ERR_IO);
    assert!(fault.failed().2 > 0);
    fault.heal();
    drop(c);
    let mut c = restart(&disk);
    all_there(&mut c, 4);
}

#[test]
fn a_full_device_answers_nospc_not_io() {
    let (disk, fault) = volume();
    let mut c = Client::start(fault.clone());
    acknowledged(&mut c, 3);
    fault.fail_writes_after(0, Fault::NoSpace);
    assert_eq!(c.write_file("big", &[1; 3000]), NFS4ERR_NOSPC);
    assert_eq!(c.mkdir("late"), NFS4ERR_NOSPC);
    assert_eq!(c.lookup("d1"), NFS4_OK);
    fault.heal();
    drop(c);
    let mut c = restart(&disk);
    all_there(&mut c, 3);
}

#[test]
fn a_failing_read_is_an_error_for_that_read_only() {
    let (_disk, fault) = volume();
    let mut c = Client::start(fault.clone());
    acknowledged(&mut c, 2);
    fault.fail_reads_in(0, Fault::Io, 0, u64::MAX);
    assert_eq!(c.read_file("f1"), NFS4ERR_IO);
    fault.heal();
    assert_eq!(c.read_file("f1"), NFS4_OK);
    // A failed read shuts nothing down: changes go on.
    assert!(c.srv.store.log().shutdown_error().is_none());
    assert_eq!(c.mkdir("after"), NFS4_OK);
}
