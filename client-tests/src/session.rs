//! NFSv4.1 sessions, client side (RFC 8881 §2.10): EXCHANGE_ID → CREATE_SESSION (with the
//! backchannel on the fore connection) → RECLAIM_COMPLETE, a slot table so several COMPOUNDs
//! run at once, and explicit slot control so a test can resend a request on the same slot and
//! sequence id (reply-cache tests, §2.10.6.1).

use std::sync::{Arc, Mutex};

use pnfsd::nfs4::opcode::NfsOp;
use pnfsd::nfs4::status::NfsStat;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::compound::{Compound, Reply};
use crate::conn::Connection;
use crate::error::{ClientError, Result};
use crate::ops::{exchgid_flag, session_flag, ChannelAttrs, CreateSessionArgs, Op, SequenceArgs};
use crate::results::{CreateSessionRes, ExchangeIdRes, OpRes};
use crate::rpc::AuthSys;

/// Callback program number the client registers (any number the server echoes will do).
pub const CB_PROGRAM: u32 = 0x4000_0000;

/// How to set a session up.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    pub minor: u32,
    pub owner: Vec<u8>,
    pub verifier: [u8; 8],
    pub exchange_flags: u32,
    pub create_flags: u32,
    pub fore: ChannelAttrs,
    pub back: ChannelAttrs,
    /// Send RECLAIM_COMPLETE after CREATE_SESSION (a client that has nothing to reclaim).
    pub reclaim_complete: bool,
}

impl SessionOptions {
    /// A fresh client owner (unique per process and call) on minor version 1.
    pub fn new(name: &str) -> SessionOptions {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        SessionOptions {
            minor: 1,
            owner: format!("pnfsd-client-tests/{}/{}/{}", std::process::id(), name, n).into_bytes(),
            verifier: (std::process::id() as u64 * 1000 + n).to_be_bytes(),
            exchange_flags: exchgid_flag::USE_PNFS_MDS,
            create_flags: session_flag::CONN_BACK_CHAN,
            fore: ChannelAttrs::fore_default(),
            back: ChannelAttrs::back_default(),
            reclaim_complete: true,
        }
    }
}

#[derive(Debug)]
struct SlotTable {
    /// Next sequence id of each slot (the server starts every slot at 0, RFC 8881 §2.10.6.1).
    next_seqid: Mutex<Vec<u32>>,
    free: Mutex<Vec<u32>>,
    sem: Arc<Semaphore>,
}

/// A slot held by one request at a time. Dropping it gives the slot back.
#[derive(Debug)]
pub struct Slot {
    pub slotid: u32,
    /// The sequence id the next request on this slot carries.
    pub seqid: u32,
    table: Arc<SlotTable>,
    _permit: OwnedSemaphorePermit,
}

impl Slot {
    /// The request was answered with SEQUENCE OK: the next one must carry seqid + 1.
    pub fn advance(&mut self) {
        self.seqid = self.seqid.wrapping_add(1);
    }

    /// Advances the slot if `rep` shows the server ran SEQUENCE on it (RFC 8881 §2.10.6.1:
    /// the server's slot moves only then). Call it after every `send_on` whose reply is kept,
    /// unless the test means to retry.
    pub fn settle(&mut self, rep: &Reply) {
        if rep.results.first().map(|r| (r.op, r.status)) == Some((NfsOp::SEQUENCE, NfsStat::OK)) {
            self.advance();
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut s) = self.table.next_seqid.lock() {
            if let Some(x) = s.get_mut(self.slotid as usize) {
                *x = self.seqid;
            }
        }
        if let Ok(mut f) = self.table.free.lock() {
            f.push(self.slotid);
        }
    }
}

/// An established session.
pub struct Session {
    pub conn: Arc<Connection>,
    /// What the session was set up with: `Session::connect_with` the same options after a
    /// server restart is the same client coming back (its owner may reclaim, §8.4.2).
    pub options: SessionOptions,
    pub minor: u32,
    pub clientid: u64,
    pub sessionid: [u8; 16],
    pub exchange: ExchangeIdRes,
    pub created: CreateSessionRes,
    slots: Arc<SlotTable>,
}

impl Session {
    /// EXCHANGE_ID on `conn` (no session yet).
    pub async fn exchange_id(conn: &Connection, o: &SessionOptions) -> Result<ExchangeIdRes> {
        let rep = conn
            .compound(
                o.minor,
                &Compound::new().op(Op::ExchangeId {
                    verifier: o.verifier,
                    owner: o.owner.clone(),
                    flags: o.exchange_flags,
                }),
            )
            .await?
            .ok()?;
        match rep.body(NfsOp::EXCHANGE_ID)? {
            OpRes::ExchangeId(x) => Ok(x.clone()),
            _ => Err(ClientError::Missing("EXCHANGE_ID body")),
        }
    }

    /// CREATE_SESSION for `clientid` with `sequence` (the EXCHANGE_ID `eir_sequenceid`).
    pub async fn create_session(
        conn: &Connection,
        o: &SessionOptions,
        clientid: u64,
        sequence: u32,
    ) -> Result<CreateSessionRes> {
        let rep = conn
            .compound(
                o.minor,
                &Compound::new().op(Op::CreateSession(CreateSessionArgs {
                    clientid,
                    sequence,
                    flags: o.create_flags,
                    fore: o.fore,
                    back: o.back,
                    cb_program: CB_PROGRAM,
                    cb_sec: Some(AuthSys::root()),
                })),
            )
            .await?
            .ok()?;
        match rep.body(NfsOp::CREATE_SESSION)? {
            OpRes::CreateSession(x) => Ok(x.clone()),
            _ => Err(ClientError::Missing("CREATE_SESSION body")),
        }
    }

    /// EXCHANGE_ID → CREATE_SESSION → RECLAIM_COMPLETE on `conn`.
    pub async fn establish(conn: Arc<Connection>, o: SessionOptions) -> Result<Session> {
        let exchange = Session::exchange_id(&conn, &o).await?;
        let created =
            Session::create_session(&conn, &o, exchange.clientid, exchange.sequenceid).await?;
        let s = Session::from_parts(conn, o.clone(), exchange, created);
        if o.reclaim_complete {
            s.run(Compound::new().op(Op::ReclaimComplete { one_fs: false }))
                .await?
                .ok()?;
        }
        Ok(s)
    }

    /// A session over a new connection to `addr`, with defaults.
    pub async fn connect(addr: std::net::SocketAddr) -> Result<Session> {
        Session::connect_with(addr, SessionOptions::new("default")).await
    }

    /// A session over a new connection to `addr` with the given client owner and options.
    pub async fn connect_with(addr: std::net::SocketAddr, o: SessionOptions) -> Result<Session> {
        let conn = Arc::new(Connection::connect(addr).await?);
        Session::establish(conn, o).await
    }

    fn from_parts(
        conn: Arc<Connection>,
        options: SessionOptions,
        exchange: ExchangeIdRes,
        created: CreateSessionRes,
    ) -> Session {
        let n = created.fore.maxrequests.clamp(1, 1024);
        let slots = Arc::new(SlotTable {
            next_seqid: Mutex::new(vec![1; n as usize]),
            free: Mutex::new((0..n).rev().collect()),
            sem: Arc::new(Semaphore::new(n as usize)),
        });
        Session {
            conn,
            minor: options.minor,
            options,
            clientid: exchange.clientid,
            sessionid: created.sessionid,
            exchange,
            created,
            slots,
        }
    }

    /// Number of slots the server granted.
    pub fn slot_count(&self) -> u32 {
        self.slots
            .next_seqid
            .lock()
            .map(|v| v.len() as u32)
            .unwrap_or(0)
    }

    /// Waits for a free slot.
    pub async fn take_slot(&self) -> Result<Slot> {
        let permit = self
            .slots
            .sem
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ClientError::Closed)?;
        let slotid = self
            .slots
            .free
            .lock()
            .ok()
            .and_then(|mut f| f.pop())
            .ok_or_else(|| ClientError::Protocol("slot table out of step".into()))?;
        let seqid = self
            .slots
            .next_seqid
            .lock()
            .ok()
            .and_then(|v| v.get(slotid as usize).copied())
            .unwrap_or(1);
        Ok(Slot {
            slotid,
            seqid,
            table: self.slots.clone(),
            _permit: permit,
        })
    }

    /// The SEQUENCE this session puts in front of a COMPOUND on `slot`.
    pub fn sequence_op(&self, slot: &Slot, cachethis: bool) -> Op {
        Op::Sequence(SequenceArgs {
            sessionid: self.sessionid,
            sequenceid: slot.seqid,
            slotid: slot.slotid,
            highest_slotid: self.slot_count().saturating_sub(1),
            cachethis,
        })
    }

    /// Sends SEQUENCE(slot, slot.seqid) + `c` without advancing the slot: sending it twice
    /// is a retry. The caller calls `slot.advance()` once it is done with that seqid.
    pub async fn send_on(&self, slot: &Slot, c: &Compound, cachethis: bool) -> Result<Reply> {
        self.send_via(&self.conn, slot, c, cachethis).await
    }

    /// `send_on` over another connection (one bound with BIND_CONN_TO_SESSION, §18.34).
    pub async fn send_via(
        &self,
        conn: &Connection,
        slot: &Slot,
        c: &Compound,
        cachethis: bool,
    ) -> Result<Reply> {
        let mut full = Compound {
            tag: c.tag.clone(),
            ops: Vec::with_capacity(c.ops.len() + 1),
        };
        full.ops.push(self.sequence_op(slot, cachethis));
        full.ops.extend(c.ops.iter().cloned());
        conn.compound(self.minor, &full).await
    }

    /// Largest READ or WRITE payload that fits the negotiated request and reply sizes.
    pub fn max_io(&self) -> usize {
        let f = &self.created.fore;
        (f.maxrequestsize.min(f.maxresponsesize) as usize)
            .saturating_sub(1024)
            .clamp(4096, 256 << 10)
    }

    /// Runs `c` after a SEQUENCE on a free slot; returns the reply whatever its status. The
    /// reply is cached by the server (`sa_cachethis`) when `c` changes anything, as a Linux
    /// client does: a READ may be larger than the cached-reply limit.
    pub async fn run(&self, c: Compound) -> Result<Reply> {
        let cachethis = !c.ops.iter().all(Op::is_read_only);
        let mut slot = self.take_slot().await?;
        let rep = self.send_on(&slot, &c, cachethis).await?;
        slot.settle(&rep);
        Ok(rep)
    }

    /// `run`, failing on the first failed operation.
    pub async fn run_ok(&self, c: Compound) -> Result<Reply> {
        self.run(c).await?.ok()
    }

    /// `run`, keeping only the compound's status: for tests that expect a given error.
    pub async fn status(&self, c: Compound) -> Result<NfsStat> {
        Ok(self.run(c).await?.status)
    }

    /// DESTROY_SESSION then DESTROY_CLIENTID (each alone, outside the session, as §18.37 and
    /// §18.50 allow).
    pub async fn destroy(self) -> Result<()> {
        self.conn
            .compound(
                self.minor,
                &Compound::new().op(Op::DestroySession(self.sessionid)),
            )
            .await?
            .ok()?;
        self.conn
            .compound(
                self.minor,
                &Compound::new().op(Op::DestroyClientid(self.clientid)),
            )
            .await?
            .ok()?;
        Ok(())
    }
}
