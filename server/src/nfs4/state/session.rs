//! Sessions (RFC 8881 §2.10): channel attributes negotiated by CREATE_SESSION, and the slot
//! table with its reply cache. The cache keeps *encoded* replies (docs/design.md, house rule 8) and
//! a hash of the request, so that a retry is answered byte for byte and a false retry (same slot
//! and seqid, different request) is detected (§2.10.6.1.3.1).

use std::collections::HashSet;
use std::sync::Arc;

use crate::nfs4::status::NfsStat;
use crate::rpc::Backchannel;

/// The largest READ and WRITE we offer (`maxread` / `maxwrite`): 1 MiB, what the Linux
/// client uses as its largest rsize/wsize. READ cuts its count to it; the session's request
/// and reply limits below bound a WRITE to it.
pub const MAX_IO: u32 = 1 << 20;
/// Our limits for the fore channel: `MAX_IO` of data plus room for the COMPOUND around it.
pub const MAX_REQUEST: u32 = MAX_IO + 4096;
pub const MAX_RESPONSE: u32 = MAX_IO + 4096;
/// A cached reply is kept per slot: 64 slots x 32 KiB bounds a session's cache at 2 MiB.
pub const MAX_RESPONSE_CACHED: u32 = 32 * 1024;
/// Operations per COMPOUND. Linux asks for 8 and refuses a session that gives fewer
/// than it asked (`nfs4_verify_fore_channel_attrs`); pynfs asks for up to 128.
pub const MAX_OPS: u32 = 128;
/// Slots per session (RFC 8881 §2.10.6.1: the server chooses; Linux asks for 64).
pub const MAX_SLOTS: u32 = 64;
/// What a slot may keep whatever `ca_maxresponsesize_cached` says: a SEQUENCE-only reply
/// is cached without `sa_cachethis` (§2.10.6.1.3), and with the longest tag (1,024 bytes)
/// it takes 1,080 bytes.
pub const SOLO_REPLY_ROOM: u32 = 1152;
/// The slot itself, beside its reply (seqid, state, request hash, the Vec).
pub const SLOT_OVERHEAD: u64 = 64;
/// Below these a COMPOUND with SEQUENCE cannot even carry its own header: TOOSMALL.
pub const MIN_REQUEST: u32 = 256;
pub const MIN_RESPONSE: u32 = 256;

/// `channel_attrs4`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChannelAttrs {
    pub headerpadsize: u32,
    pub maxrequestsize: u32,
    pub maxresponsesize: u32,
    pub maxresponsesize_cached: u32,
    pub maxoperations: u32,
    pub maxrequests: u32,
    pub rdma_ird: Option<u32>,
}

/// What one slot of a session with this `ca_maxresponsesize_cached` may hold at most:
/// its share of `max_client_memory` (RFC 8881 §18.36.3: the server sizes the reply cache).
pub fn slot_charge(maxresponsesize_cached: u32) -> u64 {
    u64::from(maxresponsesize_cached.max(SOLO_REPLY_ROOM)) + SLOT_OVERHEAD
}

impl ChannelAttrs {
    /// RFC 8881 §18.36.3: the server may lower what the client asked for, never raise it.
    pub fn negotiate_fore(&self) -> Result<ChannelAttrs, NfsStat> {
        if self.maxrequestsize < MIN_REQUEST
            || self.maxresponsesize < MIN_RESPONSE
            || self.maxoperations == 0
            || self.maxrequests == 0
        {
            return Err(NfsStat::TOOSMALL);
        }
        Ok(ChannelAttrs {
            headerpadsize: 0,
            maxrequestsize: self.maxrequestsize.min(MAX_REQUEST),
            maxresponsesize: self.maxresponsesize.min(MAX_RESPONSE),
            maxresponsesize_cached: self.maxresponsesize_cached.min(MAX_RESPONSE_CACHED),
            maxoperations: self.maxoperations.min(MAX_OPS),
            maxrequests: self.maxrequests.min(MAX_SLOTS),
            rdma_ird: None,
        })
    }

    /// The back channel carries our CB_SEQUENCE + CB_LAYOUTRECALL (two operations, a few
    /// hundred bytes). The client's values are answered as they came: Linux refuses a
    /// session whose back channel `max_ops` or `max_reqs` differ from what it sent
    /// (`nfs4_verify_back_channel_attrs`). We use slot 0 only.
    pub fn negotiate_back(&self) -> Result<ChannelAttrs, NfsStat> {
        if self.maxrequestsize < MIN_REQUEST
            || self.maxresponsesize < 64
            || self.maxoperations < 2
            || self.maxrequests == 0
        {
            return Err(NfsStat::TOOSMALL);
        }
        Ok(ChannelAttrs {
            headerpadsize: 0,
            rdma_ird: None,
            ..self.clone()
        })
    }
}

/// What a slot remembers of its last request.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cached {
    /// Never used.
    Empty,
    /// Running now.
    InProgress {
        hash: u64,
        cache: bool,
    },
    /// Done, reply not kept (client did not ask: `sa_cachethis` false).
    Uncached {
        hash: u64,
    },
    Reply {
        hash: u64,
        bytes: Vec<u8>,
    },
}

#[derive(Debug, Clone)]
struct Slot {
    seqid: u32,
    cached: Cached,
}

/// What SEQUENCE does with a request on a slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotUse {
    /// A new request: run it.
    New,
    /// A retry of the last request: send these bytes again.
    Replay(Vec<u8>),
}

#[derive(Debug, Clone)]
pub struct SlotTable {
    slots: Vec<Slot>,
    /// The largest reply a slot keeps: the negotiated `ca_maxresponsesize_cached` (or
    /// `SOLO_REPLY_ROOM`). A larger one is not kept, so the cache never holds more than
    /// the session was charged for (`slot_charge`).
    max_cached: usize,
}

impl SlotTable {
    pub fn new(n: u32, maxresponsesize_cached: u32) -> SlotTable {
        SlotTable {
            max_cached: maxresponsesize_cached.max(SOLO_REPLY_ROOM) as usize,
            slots: vec![
                Slot {
                    seqid: 0,
                    cached: Cached::Empty
                };
                n.max(1) as usize
            ],
        }
    }

    pub fn len(&self) -> u32 {
        self.slots.len() as u32
    }

    /// RFC 8881 §2.10.6.1 and §18.46.3: seqid one past the slot's is a new request; equal is a
    /// retry (answered from the cache, or RETRY_UNCACHED_REP, or SEQ_FALSE_RETRY if it is not
    /// the same request, or DELAY while the original still runs); anything else is misordered.
    pub fn begin(
        &mut self,
        slot: u32,
        seqid: u32,
        hash: u64,
        cache: bool,
    ) -> Result<SlotUse, NfsStat> {
        let s = self.slots.get_mut(slot as usize).ok_or(NfsStat::BADSLOT)?;
        if seqid == s.seqid.wrapping_add(1) {
            // A client sends the next seqid only after it got the previous reply, so a slot
            // still "in progress" here lost its `done` (a COMPOUND that panicked): reuse it.
            s.seqid = seqid;
            s.cached = Cached::InProgress { hash, cache };
            return Ok(SlotUse::New);
        }
        if seqid != s.seqid {
            return Err(NfsStat::SEQ_MISORDERED);
        }
        match &s.cached {
            Cached::Empty => Err(NfsStat::SEQ_MISORDERED),
            Cached::InProgress { .. } => Err(NfsStat::DELAY),
            Cached::Uncached { hash: h } | Cached::Reply { hash: h, .. } if *h != hash => {
                Err(NfsStat::SEQ_FALSE_RETRY)
            }
            Cached::Uncached { .. } => Err(NfsStat::RETRY_UNCACHED_REP),
            Cached::Reply { bytes, .. } => Ok(SlotUse::Replay(bytes.clone())),
        }
    }

    /// The request on `slot` with `seqid` is done; keep its reply if it asked to be cached.
    pub fn done(&mut self, slot: u32, seqid: u32, reply: &[u8]) {
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return;
        };
        if s.seqid != seqid {
            return;
        }
        if let Cached::InProgress { hash, cache } = s.cached {
            // A reply over the cache's bound (the dispatcher answered REP_TOO_BIG_TO_CACHE
            // with `sa_cachethis`; a long solo SEQUENCE cannot be) is not kept: a retry
            // gets RETRY_UNCACHED_REP.
            s.cached = if cache && reply.len() <= self.max_cached {
                Cached::Reply {
                    hash,
                    bytes: reply.to_vec(),
                }
            } else {
                Cached::Uncached { hash }
            };
        }
    }

    /// Bytes the cached replies take.
    pub fn cached_bytes(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| match &s.cached {
                Cached::Reply { bytes, .. } => bytes.capacity() as u64,
                _ => 0,
            })
            .sum()
    }

    /// How many requests run on the table's slots.
    pub fn busy_count(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s.cached, Cached::InProgress { .. }))
            .count()
    }
}

/// One session of a client.
pub struct Session {
    pub id: [u8; 16],
    pub client: u64,
    pub fore: ChannelAttrs,
    pub cb_program: u32,
    /// The credential of callbacks (CREATE_SESSION / BACKCHANNEL_CTL `cb_sec_parms`).
    pub cb_cred: crate::rpc::CbCred,
    /// The minor version of CB_COMPOUNDs: the one CREATE_SESSION came in (the client's).
    pub cb_minor: u32,
    pub slots: SlotTable,
    /// What the session takes of `max_client_memory`: slots × `slot_charge`.
    pub charge: u64,
    /// Connections bound to the session (RFC 8881 §2.10.3.1).
    pub conns: HashSet<u64>,
    /// The connection and sender of the backchannel, if one is bound.
    pub back_conn: Option<(u64, Arc<dyn Backchannel>)>,
    /// A back channel was asked for (so a missing one is reported as CB_PATH_DOWN_SESSION).
    pub wants_back: bool,
    /// Our slot 0 on the client's callback slot table: last seqid used, and whether a
    /// CB_COMPOUND is outstanding on it (RFC 8881 §2.10.6.3 applies to both channels).
    pub cb_seqid: u32,
    pub cb_busy: bool,
    /// What the CB_NULL probe found of the backchannel (RFC 8881 §18.36.3, §18.33.3).
    pub cb_path: CbPath,
    /// Counts the probes started, so that an old probe's answer never overrides a newer
    /// probe of a backchannel bound since.
    pub cb_probe_gen: u64,
}

/// The backchannel as the server last saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CbPath {
    /// A probe is on its way (or none was sent yet). Counted as working, as knfsd does for
    /// NFSv4.1 (`nfsd4_cb_channel_good`): the client bound the backchannel itself, and a
    /// delegation granted meanwhile is recalled over it or revoked a lease later.
    #[default]
    Unknown,
    /// CB_NULL or a CB_COMPOUND was answered.
    Up,
    /// CB_NULL or a CB_COMPOUND got no answer: SEQUENCE reports CB_PATH_DOWN_SESSION until
    /// the client binds a connection again (BIND_CONN_TO_SESSION re-probes).
    Down,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_request_then_retry_answered_from_the_cache() {
        let mut t = SlotTable::new(4, 0);
        assert_eq!(t.begin(0, 1, 11, true), Ok(SlotUse::New));
        // A retry while the original still runs.
        assert_eq!(t.begin(0, 1, 11, true), Err(NfsStat::DELAY));
        t.done(0, 1, b"reply-1");
        assert_eq!(
            t.begin(0, 1, 11, true),
            Ok(SlotUse::Replay(b"reply-1".to_vec()))
        );
        assert_eq!(t.begin(0, 2, 12, true), Ok(SlotUse::New));
        t.done(0, 2, b"reply-2");
        assert_eq!(
            t.begin(0, 2, 12, false),
            Ok(SlotUse::Replay(b"reply-2".to_vec()))
        );
    }

    #[test]
    fn false_retry_and_uncached_retry() {
        let mut t = SlotTable::new(2, 0);
        assert_eq!(t.begin(1, 1, 5, true), Ok(SlotUse::New));
        t.done(1, 1, b"r");
        assert_eq!(t.begin(1, 1, 6, true), Err(NfsStat::SEQ_FALSE_RETRY));
        assert_eq!(t.begin(1, 2, 7, false), Ok(SlotUse::New));
        t.done(1, 2, b"r2");
        assert_eq!(t.begin(1, 2, 7, false), Err(NfsStat::RETRY_UNCACHED_REP));
        assert_eq!(t.begin(1, 2, 8, false), Err(NfsStat::SEQ_FALSE_RETRY));
    }

    #[test]
    fn misordered_and_bad_slot() {
        let mut t = SlotTable::new(2, 0);
        assert_eq!(t.begin(2, 1, 0, true), Err(NfsStat::BADSLOT));
        // The first request of a slot must use seqid 1.
        assert_eq!(t.begin(0, 0, 0, true), Err(NfsStat::SEQ_MISORDERED));
        assert_eq!(t.begin(0, 2, 0, true), Err(NfsStat::SEQ_MISORDERED));
        assert_eq!(t.begin(0, 1, 0, true), Ok(SlotUse::New));
        t.done(0, 1, b"");
        assert_eq!(t.begin(0, 3, 0, true), Err(NfsStat::SEQ_MISORDERED));
        // Slots are independent.
        assert_eq!(t.begin(1, 1, 0, true), Ok(SlotUse::New));
        assert_eq!(t.busy_count(), 1);
    }

    /// The cache keeps no reply over what the session negotiated (and was charged for).
    #[test]
    fn the_cache_keeps_no_reply_over_the_negotiated_size() {
        let mut t = SlotTable::new(2, 4096);
        assert_eq!(t.begin(0, 1, 1, true), Ok(SlotUse::New));
        t.done(0, 1, &[7; 4096]);
        assert_eq!(t.begin(1, 1, 2, true), Ok(SlotUse::New));
        t.done(1, 1, &[7; 4097]);
        assert_eq!(t.cached_bytes(), 4096);
        assert_eq!(t.begin(1, 1, 2, true), Err(NfsStat::RETRY_UNCACHED_REP));
        // A solo SEQUENCE with the longest tag fits even a session that caches nothing.
        let mut z = SlotTable::new(1, 0);
        assert_eq!(z.begin(0, 1, 3, true), Ok(SlotUse::New));
        z.done(0, 1, &[0; 1080]);
        assert_eq!(z.cached_bytes(), 1080);
        assert!(z.cached_bytes() <= slot_charge(0));
    }

    #[test]
    fn seqid_wraps() {
        let mut t = SlotTable::new(1, 0);
        t.slots[0].seqid = u32::MAX;
        t.slots[0].cached = Cached::Uncached { hash: 0 };
        assert_eq!(t.begin(0, 0, 1, true), Ok(SlotUse::New));
    }

    #[test]
    fn channel_negotiation_lowers_never_raises() {
        let asked = ChannelAttrs {
            headerpadsize: 64,
            maxrequestsize: 4 << 20,
            maxresponsesize: 8192,
            maxresponsesize_cached: 1 << 20,
            maxoperations: 8,
            maxrequests: 1000,
            rdma_ird: Some(3),
        };
        let got = asked.negotiate_fore().unwrap();
        assert_eq!(got.headerpadsize, 0);
        assert_eq!(got.maxrequestsize, MAX_REQUEST);
        assert_eq!(got.maxresponsesize, 8192);
        assert_eq!(got.maxresponsesize_cached, MAX_RESPONSE_CACHED);
        assert_eq!(got.maxoperations, 8);
        assert_eq!(got.maxrequests, MAX_SLOTS);
        assert_eq!(got.rdma_ird, None);
        let tiny = ChannelAttrs {
            maxrequestsize: 10,
            ..asked.clone()
        };
        assert_eq!(tiny.negotiate_fore(), Err(NfsStat::TOOSMALL));
        let back = asked.negotiate_back().unwrap();
        assert_eq!(back.maxrequests, asked.maxrequests);
        assert_eq!(back.maxoperations, asked.maxoperations);
    }
}
