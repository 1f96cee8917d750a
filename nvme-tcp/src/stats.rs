//! What the target has done: commands by queue, opcode and status, and the bytes read and
//! written, for the embedder's metrics; and who is connected (`ControllerInfo`), for its
//! status page.
//!
//! Cheap on the I/O path: each queue counts its successes in counters of its own (relaxed
//! atomics no other queue writes: no lock, no shared cache line), summed at scrape. Errors
//! are rare and go to one map under a lock. Every label comes from a fixed table here or
//! from a status the target itself produced, so the label set is bounded whatever hosts send.

use crate::namespace::lock;
use crate::pdu::{AdminOpc, FcType, IoOpc, Sqe};
use crate::status::Status;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The opcodes counted by name, as (queue, opcode) labels; anything else is `other`.
/// Fabrics commands (opcode 7Fh) count by their FCTYPE, on the queue they came on.
const OPS: &[(&str, &str)] = &[
    ("admin", "get_log_page"),
    ("admin", "identify"),
    ("admin", "abort"),
    ("admin", "set_features"),
    ("admin", "get_features"),
    ("admin", "async_event_request"),
    ("admin", "keep_alive"),
    ("admin", "connect"),
    ("admin", "property_get"),
    ("admin", "property_set"),
    ("admin", "disconnect"),
    ("admin", "other"),
    ("io", "flush"),
    ("io", "write"),
    ("io", "read"),
    ("io", "write_zeroes"),
    ("io", "dataset_management"),
    ("io", "reservation_register"),
    ("io", "reservation_report"),
    ("io", "reservation_acquire"),
    ("io", "reservation_release"),
    ("io", "connect"),
    ("io", "disconnect"),
    ("io", "other"),
];
const N_OPS: usize = OPS.len();

/// `OPS` index of a command; `Op::WRITE`'s successes add their data to the bytes written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Op(u8);

impl Op {
    const IO_BASE: u8 = 12;
    pub const WRITE: Op = Op(Op::IO_BASE + 1);
    pub const READ: Op = Op(Op::IO_BASE + 2);
    /// Where the opcode is unknown (a capsule whose data digest failed).
    pub fn other(admin: bool) -> Op {
        Op(if admin { 11 } else { N_OPS as u8 - 1 })
    }

    pub fn of(admin: bool, sqe: &Sqe) -> Op {
        if sqe.is_fabrics() {
            // A Connect arrives before its queue has a QID: it counts on the queue it creates.
            let admin = if sqe.fctype() == FcType::CONNECT {
                let q = crate::pdu::connect_off::QID;
                u16::from_le_bytes([sqe.0[q], sqe.0[q + 1]]) == 0
            } else {
                admin
            };
            let i = match (admin, sqe.fctype()) {
                (true, FcType::CONNECT) => 7,
                (true, FcType::PROPERTY_GET) => 8,
                (true, FcType::PROPERTY_SET) => 9,
                (true, FcType::DISCONNECT) => 10,
                (false, FcType::CONNECT) => Op::IO_BASE + 9,
                (false, FcType::DISCONNECT) => Op::IO_BASE + 10,
                _ => return Op::other(admin),
            };
            return Op(i);
        }
        let i = if admin {
            match AdminOpc(sqe.opcode()) {
                AdminOpc::GET_LOG_PAGE => 0,
                AdminOpc::IDENTIFY => 1,
                AdminOpc::ABORT => 2,
                AdminOpc::SET_FEATURES => 3,
                AdminOpc::GET_FEATURES => 4,
                AdminOpc::ASYNC_EVENT => 5,
                AdminOpc::KEEP_ALIVE => 6,
                _ => return Op::other(true),
            }
        } else {
            Op::IO_BASE
                + match IoOpc(sqe.opcode()) {
                    IoOpc::FLUSH => 0,
                    IoOpc::WRITE => 1,
                    IoOpc::READ => 2,
                    IoOpc::WRITE_ZEROES => 3,
                    IoOpc::DSM => 4,
                    IoOpc::RESV_REGISTER => 5,
                    IoOpc::RESV_REPORT => 6,
                    IoOpc::RESV_ACQUIRE => 7,
                    IoOpc::RESV_RELEASE => 8,
                    _ => return Op::other(false),
                }
        };
        Op(i)
    }
}

/// One queue's counters (`tgt/conn/`), registered with the subsystem while it lives.
#[derive(Default)]
pub(crate) struct QueueStats {
    ok: [AtomicU64; N_OPS],
    read_bytes: AtomicU64,
    write_bytes: AtomicU64,
    /// The embedder's count of this queue's host's successful Writes
    /// (`HostPolicy::write_counter`), set at the queue's Connect.
    host_writes: std::sync::OnceLock<std::sync::Arc<AtomicU64>>,
}

impl QueueStats {
    /// One answer: `data_out` bytes of C2HData went with it, `data_in` bytes came with the
    /// command; a Read's and a Write's count as bytes read and written when they succeed.
    pub fn answered(&self, all: &Registry, op: Op, status: Status, data_out: usize, data_in: u32) {
        if !status.is_success() {
            all.error(op, status);
            return;
        }
        self.ok[op.0 as usize].fetch_add(1, Ordering::Relaxed);
        if op == Op::READ {
            self.read_bytes
                .fetch_add(data_out as u64, Ordering::Relaxed);
        }
        if op == Op::WRITE {
            self.write_bytes
                .fetch_add(data_in as u64, Ordering::Relaxed);
            if let Some(c) = self.host_writes.get() {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts this queue's successful Writes in `c` too (once; a later call is ignored).
    pub fn count_host_writes(&self, c: std::sync::Arc<AtomicU64>) {
        let _ = self.host_writes.set(c);
    }

    fn add_to(&self, ok: &mut [u64; N_OPS], bytes: &mut (u64, u64)) {
        for (t, c) in ok.iter_mut().zip(&self.ok) {
            *t += c.load(Ordering::Relaxed);
        }
        bytes.0 += self.read_bytes.load(Ordering::Relaxed);
        bytes.1 += self.write_bytes.load(Ordering::Relaxed);
    }
}

/// All queues' counters: the live queues, what the gone ones counted, and the errors.
#[derive(Default)]
pub(crate) struct Registry {
    st: Mutex<RegState>,
    errors: Mutex<HashMap<(Op, u16), u64>>,
}

#[derive(Default)]
struct RegState {
    live: Vec<Arc<QueueStats>>,
    gone_ok: [u64; N_OPS],
    gone_bytes: (u64, u64),
}

impl Registry {
    /// A new queue's counters (once per connection, not per command).
    pub fn queue(&self) -> Arc<QueueStats> {
        let q = Arc::new(QueueStats::default());
        lock(&self.st).live.push(q.clone());
        q
    }

    /// A queue ended: its counts stay in the totals.
    pub fn retire(&self, q: &Arc<QueueStats>) {
        let mut st = lock(&self.st);
        let RegState {
            live,
            gone_ok,
            gone_bytes,
        } = &mut *st;
        if let Some(i) = live.iter().position(|x| Arc::ptr_eq(x, q)) {
            live.swap_remove(i);
            q.add_to(gone_ok, gone_bytes);
        }
    }

    fn error(&self, op: Op, status: Status) {
        *lock(&self.errors).entry((op, status.0)).or_default() += 1;
    }

    pub fn snapshot(&self) -> CommandStats {
        let st = lock(&self.st);
        let (mut ok, mut bytes) = (st.gone_ok, st.gone_bytes);
        for q in &st.live {
            q.add_to(&mut ok, &mut bytes);
        }
        drop(st);
        let mut commands: Vec<CommandCount> = ok
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| CommandCount {
                queue: OPS[i].0,
                opcode: OPS[i].1,
                status: "success".into(),
                count: n,
            })
            .collect();
        for (&(op, st), &n) in lock(&self.errors).iter() {
            commands.push(CommandCount {
                queue: OPS[op.0 as usize].0,
                opcode: OPS[op.0 as usize].1,
                status: status_label(Status(st)),
                count: n,
            });
        }
        commands
            .sort_by(|a, b| (a.queue, a.opcode, &a.status).cmp(&(b.queue, b.opcode, &b.status)));
        CommandStats {
            commands,
            read_bytes: bytes.0,
            write_bytes: bytes.1,
        }
    }
}

/// Hosts whose Reservation Conflicts one namespace logs by name; past it a new host's are
/// counted and logged without a line of their own (the map stays bounded whatever NQNs
/// hosts send).
const CONFLICT_HOSTS: usize = 256;

/// One namespace's commands refused with Reservation Conflict (NVMe Base 2.0 §8.19.5): how
/// many, and the host NQNs that drew them, so that the log names a host the first time it
/// is refused (then at its 2nd, 4th, 8th, … refusal), and a fenced host is seen to have
/// written nothing.
#[derive(Default)]
pub(crate) struct Conflicts {
    count: AtomicU64,
    hosts: Mutex<HashMap<String, u64>>,
}

impl Conflicts {
    /// A command of `host` on `nsid` was refused with Reservation Conflict.
    pub fn note(&self, nsid: u32, host: &crate::policy::HostRef<'_>) {
        let total = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let mine = {
            let mut h = lock(&self.hosts);
            let full = h.len() >= CONFLICT_HOSTS;
            match h.get_mut(host.nqn) {
                Some(n) => {
                    *n += 1;
                    Some(*n)
                }
                None if !full => {
                    h.insert(host.nqn.to_string(), 1);
                    Some(1)
                }
                None => None,
            }
        };
        let say = match mine {
            Some(n) => n.is_power_of_two(),
            None => total.is_power_of_two(),
        };
        if say {
            tracing::warn!(
                host = %host.nqn,
                ip = %host.ip,
                nsid,
                host_refusals = mine,
                namespace_refusals = total,
                "command refused: reservation conflict"
            );
        }
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// One namespace's counters (`Target::namespace_stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceStats {
    pub nsid: u32,
    /// Commands refused with Reservation Conflict since the target started: I/O of a host
    /// the reservation shuts out (a preempted one), and reservation commands refused.
    pub reservation_conflicts: u64,
}

/// `success`, else the status code type and code: `sct1_sc81` (Connect Controller Busy).
pub fn status_label(s: Status) -> String {
    if s.is_success() {
        "success".into()
    } else {
        format!("sct{:x}_sc{:02x}", s.sct(), s.sc())
    }
}

/// Commands answered since the target started (`Target::command_stats`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandStats {
    /// Nonzero counts only, sorted by queue, opcode, status.
    pub commands: Vec<CommandCount>,
    /// Bytes of Reads that succeeded (admin data such as Identify is not counted).
    pub read_bytes: u64,
    /// Bytes of Writes that succeeded.
    pub write_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandCount {
    /// `admin` or `io`.
    pub queue: &'static str,
    /// The command's name (`read`, `identify`, `connect`, …) or `other`.
    pub opcode: &'static str,
    /// `status_label`.
    pub status: String,
    pub count: u64,
}

/// One controller connected (`Target::controllers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerInfo {
    pub cntlid: u16,
    /// A discovery controller, not one of the NVM subsystem.
    pub discovery: bool,
    pub host_nqn: String,
    /// The address of the connection that created it (its admin queue).
    pub host_addr: std::net::IpAddr,
    /// I/O queues connected now.
    pub io_queues: usize,
    /// The Keep Alive Timeout granted, in ms (0: none).
    pub kato_ms: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_table_matches_the_indices_used() {
        let mut s = Sqe::new(IoOpc::WRITE.0);
        assert_eq!(OPS[Op::of(false, &s).0 as usize], ("io", "write"));
        assert_eq!(Op::of(false, &s), Op::WRITE);
        s = Sqe::new(IoOpc::READ.0);
        assert_eq!(OPS[Op::of(false, &s).0 as usize], ("io", "read"));
        assert_eq!(Op::of(false, &s), Op::READ);
        s = Sqe::new(AdminOpc::KEEP_ALIVE.0);
        assert_eq!(OPS[Op::of(true, &s).0 as usize], ("admin", "keep_alive"));
        s = Sqe::new(0x55);
        assert_eq!(OPS[Op::of(true, &s).0 as usize], ("admin", "other"));
        assert_eq!(OPS[Op::of(false, &s).0 as usize], ("io", "other"));
        let mut io_connect = Sqe::fabrics(FcType::CONNECT);
        io_connect.0[42] = 1;
        assert_eq!(OPS[Op::of(true, &io_connect).0 as usize], ("io", "connect"));
        for (admin, fc, name) in [
            (true, FcType::CONNECT, "connect"),
            (true, FcType::PROPERTY_GET, "property_get"),
            (true, FcType::PROPERTY_SET, "property_set"),
            (true, FcType::DISCONNECT, "disconnect"),
            (false, FcType::DISCONNECT, "disconnect"),
        ] {
            let s = Sqe::fabrics(fc);
            let q = if admin { "admin" } else { "io" };
            assert_eq!(OPS[Op::of(admin, &s).0 as usize], (q, name));
        }
    }

    /// What counting costs a command (docs/nvme-tcp.md "Counters"): printed, not asserted.
    /// The count is checked, so the loop is not optimised away.
    #[test]
    fn cost_per_answer_is_printed() {
        let r = Registry::default();
        let q = r.queue();
        let rd = Op::of(false, &Sqe::new(IoOpc::READ.0));
        const N: u64 = 2_000_000;
        let t0 = std::time::Instant::now();
        for _ in 0..N {
            q.answered(&r, std::hint::black_box(rd), Status::SUCCESS, 4096, 0);
        }
        let ns = t0.elapsed().as_nanos() as f64 / N as f64;
        println!("QueueStats::answered: {ns:.1} ns per successful Read");
        assert_eq!(r.snapshot().read_bytes, N * 4096);
    }

    #[test]
    fn conflicts_count_every_refusal_and_keep_the_host_map_bounded() {
        let c = Conflicts::default();
        let ip = std::net::IpAddr::from([127, 0, 0, 1]);
        let h = |nqn: &'static str| crate::policy::HostRef {
            nqn,
            hostid: &[0; 16],
            ip,
        };
        c.note(1, &h("nqn.a"));
        c.note(1, &h("nqn.a"));
        c.note(1, &h("nqn.b"));
        assert_eq!(c.count(), 3);
        assert_eq!(lock(&c.hosts).get("nqn.a"), Some(&2));
        let names: Vec<String> = (0..2 * CONFLICT_HOSTS)
            .map(|i| format!("nqn.h{i}"))
            .collect();
        for n in &names {
            c.note(
                1,
                &crate::policy::HostRef {
                    nqn: n,
                    hostid: &[0; 16],
                    ip,
                },
            );
        }
        assert_eq!(c.count(), 3 + 2 * CONFLICT_HOSTS as u64);
        assert_eq!(lock(&c.hosts).len(), CONFLICT_HOSTS);
    }

    #[test]
    fn counts_survive_their_queue_and_errors_are_labelled() {
        let r = Registry::default();
        let q = r.queue();
        let rd = Op::of(false, &Sqe::new(IoOpc::READ.0));
        q.answered(&r, rd, Status::SUCCESS, 4096, 0);
        q.answered(&r, Op::WRITE, Status::SUCCESS, 0, 8192);
        q.answered(&r, Op::WRITE, Status::LBA_OUT_OF_RANGE, 0, 8192);
        // Admin data is not bytes read.
        let id = Op::of(true, &Sqe::new(AdminOpc::IDENTIFY.0));
        q.answered(&r, id, Status::SUCCESS, 4096, 0);
        r.retire(&q);
        let q2 = r.queue();
        q2.answered(&r, rd, Status::SUCCESS, 512, 0);
        let s = r.snapshot();
        assert_eq!((s.read_bytes, s.write_bytes), (4608, 8192));
        let find = |op: &str, st: &str| {
            s.commands
                .iter()
                .find(|c| c.opcode == op && c.status == st)
                .map(|c| c.count)
        };
        assert_eq!(find("read", "success"), Some(2));
        assert_eq!(find("write", "success"), Some(1));
        assert_eq!(find("write", "sct0_sc80"), Some(1));
        assert_eq!(find("identify", "success"), Some(1));
        assert_eq!(s.commands.len(), 4);
    }
}
