//! One crash-suite run: workload, snapshots, recovery checks.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytecodec::{Reader, Writer};
use metalog::{
    BlockDev, CrashDev, Csn, FlushSeq, Item, Log, LogError, LogOptions, Transaction, TxObject,
    Writeback,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const UUID: [u8; 16] = *b"crash-suite-uuid";
const KEYS: usize = 24;
const SLOT: u64 = 4096;
const LOG_OFF: u64 = 2 * SLOT;

type State = [u64; KEYS];

#[derive(Debug, Default, Clone, Copy)]
pub struct RunStats {
    pub runs: u64,
    pub crash_points: u64,
    pub txs: u64,
    pub acked_checked: u64,
    pub recovery_crashes: u64,
    pub wraps: u64,
    pub space_waits: u64,
    pub overlapped_pushes: u64,
}

impl RunStats {
    pub fn add(&mut self, o: &RunStats) {
        self.runs += o.runs;
        self.crash_points += o.crash_points;
        self.txs += o.txs;
        self.acked_checked += o.acked_checked;
        self.recovery_crashes += o.recovery_crashes;
        self.wraps += o.wraps;
        self.space_waits += o.space_waits;
        self.overlapped_pushes += o.overlapped_pushes;
    }
}

#[derive(Clone, Debug)]
enum Op {
    Set(usize, u64),
    Intent(u64, usize, u64),
    Done(u64, usize, u64),
}

struct TxRec {
    csn: u64,
    ops: Vec<Op>,
}

struct Model {
    state: State,
    txs: Vec<TxRec>,
    next_intent: u64,
    open: Vec<(u64, usize, u64)>,
}

struct Store {
    dev: Arc<CrashDev>,
    fs: Arc<FlushSeq>,
    log: Mutex<Option<Arc<Log>>>,
    model: Mutex<Model>,
    wb_seq: Mutex<u64>,
}

fn kv_item(k: usize, v: u64) -> Item {
    Item::Opaque {
        kind: 1,
        key: (k as u64).to_le_bytes().to_vec(),
        value: Some(v.to_le_bytes().to_vec()),
    }
}

/// A key or value of [`kv_item`]: exactly one little-endian u64.
fn exact_u64(b: &[u8]) -> Result<u64, bytecodec::Error> {
    let mut r = Reader::new(b);
    let v = r.u64_le()?;
    r.finish()?;
    Ok(v)
}

fn slot_bytes(seq: u64, csn: u64, st: &State) -> Vec<u8> {
    let mut b = Vec::with_capacity(SLOT as usize);
    let mut w = Writer::new(&mut b);
    w.u64_le(seq).u64_le(csn);
    for v in st {
        w.u64_le(*v);
    }
    let crc = crc32c::crc32c(&b);
    Writer::new(&mut b).u32_le(crc);
    b.resize(SLOT as usize, 0);
    b
}

thread_local! {
    /// What the last recovery did (store slot used, checkpoints replayed), for failure messages.
    static TRACE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

fn read_slots(img: &[u8]) -> State {
    let mut best: Option<(u64, State)> = None;
    for s in 0..2 {
        let b = &img[(s * SLOT) as usize..((s + 1) * SLOT) as usize];
        let n = 16 + 8 * KEYS;
        let mut r = Reader::new(b);
        let (Ok(body), Ok(crc)) = (r.bytes(n), r.u32_le()) else {
            continue;
        };
        if crc32c::crc32c(body) != crc || body.iter().all(|&x| x == 0) {
            continue;
        }
        let mut r = Reader::new(body);
        let (Ok(seq), Ok(csn)) = (r.u64_le(), r.u64_le()) else {
            continue;
        };
        let mut st = [0u64; KEYS];
        for v in st.iter_mut() {
            *v = r.u64_le().unwrap_or(0);
        }
        if best.as_ref().is_none_or(|(q, _)| seq > *q) {
            TRACE.with(|t| *t.borrow_mut() = format!("slot seq {seq} csn {csn}; replayed"));
            best = Some((seq, st));
        }
    }
    best.map_or([0; KEYS], |(_, s)| s)
}

impl Writeback for Store {
    fn write_back(&self) -> Result<Csn, String> {
        let mut seq = self.wb_seq.lock().unwrap();
        let log = self.log.lock().unwrap().clone().ok_or("no log")?;
        let (c, snap) = {
            let m = self.model.lock().unwrap();
            (log.last_committed(), m.state)
        };
        log.force_seq(c).map_err(|e| e.to_string())?;
        *seq += 1;
        let slot = *seq % 2;
        self.dev
            .write_at(&slot_bytes(*seq, c.0, &snap), slot * SLOT)
            .map_err(|e| e.to_string())?;
        self.fs.flush().map_err(|e| e.to_string())?;
        Ok(c)
    }
}

/// Recover from `img`: store slots, then the log. Returns the state and the mounted log.
fn recover(img: Vec<u8>, seed: u64, log_len: u64) -> Result<(State, Arc<CrashDev>), LogError> {
    let dev = Arc::new(CrashDev::from_image(img, seed));
    let st = recover_on(&dev, log_len)?;
    Ok((st, dev))
}

fn recover_on(dev: &Arc<CrashDev>, log_len: u64) -> Result<State, LogError> {
    TRACE.with(|t| *t.borrow_mut() = "no slot; replayed".into());
    let mut st = read_slots(&dev.image());
    let fs = Arc::new(FlushSeq::new(dev.clone()));
    let mut last = u64::MAX;
    let log = Log::mount(
        dev.clone(),
        LOG_OFF,
        log_len,
        UUID,
        fs,
        LogOptions::default(),
        &mut |c, it| match it {
            _ if c.0 != last && {
                last = c.0;
                TRACE.with(|t| t.borrow_mut().push_str(&format!(" {}", c.0)));
                false
            } =>
            {
                Ok(())
            }
            Item::Opaque {
                key,
                value: Some(v),
                ..
            } => {
                let k = exact_u64(key).map_err(|_| "key")? as usize;
                let v = exact_u64(v).map_err(|_| "val")?;
                *st.get_mut(k).ok_or("key range")? = v;
                Ok(())
            }
            other => Err(format!("unexpected item {other:?}")),
        },
    )?;
    drop(log);
    Ok(st)
}

/// Model states at every checkpoint boundary: state → boundary indices (#txs in prefix).
fn boundary_states(txs: &[TxRec]) -> (HashMap<State, Vec<usize>>, Vec<u64>) {
    let mut map: HashMap<State, Vec<usize>> = HashMap::new();
    let mut st = [0u64; KEYS];
    let mut open: BTreeMap<u64, (usize, u64)> = BTreeMap::new();
    let mut csns = Vec::with_capacity(txs.len());
    let view = |st: &State, open: &BTreeMap<u64, (usize, u64)>| {
        let mut s = *st;
        for (k, v) in open.values() {
            s[*k] = *v;
        }
        s
    };
    for (n, t) in txs.iter().enumerate() {
        if n == 0 || txs[n - 1].csn < t.csn {
            map.entry(view(&st, &open)).or_default().push(n);
        }
        for op in &t.ops {
            match *op {
                Op::Set(k, v) => st[k] = v,
                Op::Intent(id, k, v) => {
                    open.insert(id, (k, v));
                }
                Op::Done(id, k, v) => {
                    open.remove(&id);
                    st[k] = v;
                }
            }
        }
        csns.push(t.csn);
    }
    map.entry(view(&st, &open)).or_default().push(txs.len());
    (map, csns)
}

pub fn run_one(seed: u64) -> RunStats {
    let mut rng = StdRng::seed_from_u64(seed);
    let blocks = *[17u64, 20, 33].get(rng.gen_range(0..3)).unwrap_or(&17);
    let log_len = blocks * 4096;
    let dev_size = LOG_OFF + log_len;
    let dev = Arc::new(CrashDev::new(dev_size, seed ^ 0xdead));
    Log::format(dev.clone(), LOG_OFF, log_len, UUID).unwrap();
    let fs = Arc::new(FlushSeq::new(dev.clone()));
    let store = Arc::new(Store {
        dev: dev.clone(),
        fs: fs.clone(),
        log: Mutex::new(None),
        model: Mutex::new(Model {
            state: [0; KEYS],
            txs: Vec::new(),
            next_intent: 1,
            open: Vec::new(),
        }),
        wb_seq: Mutex::new(0),
    });
    let log = Log::mount(
        dev.clone(),
        LOG_OFF,
        log_len,
        UUID,
        fs,
        LogOptions::default(),
        &mut |_, _| Err("fresh log replays nothing".into()),
    )
    .unwrap();
    *store.log.lock().unwrap() = Some(log.clone());
    let wb: Arc<dyn Writeback> = store.clone();
    log.set_writeback(Arc::downgrade(&wb));
    if rng.gen_bool(0.3) {
        // A flush that takes time widens every race window.
        dev.set_flush_delay(Duration::from_micros(rng.gen_range(10..200)));
    }
    if rng.gen_bool(0.5) {
        // Two pushes in flight whenever possible: completions out of order, holes.
        log.set_second_push_bytes(0);
    }
    dev.set_snapshot_prob(rng.gen_range(0.4..0.7));

    let committers = rng.gen_range(1..=3);
    let forcers = rng.gen_range(1..=2);
    let per = rng.gen_range(20..45);
    let acks: Arc<Mutex<Vec<(u64, u64)>>> = Arc::new(Mutex::new(Vec::new()));
    let running = Arc::new(AtomicU64::new(committers));
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut hs = Vec::new();
    for t in 0..committers {
        let (log, store, acks, running, dev, done_tx) = (
            log.clone(),
            store.clone(),
            acks.clone(),
            running.clone(),
            dev.clone(),
            done_tx.clone(),
        );
        let mut r = StdRng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(t));
        hs.push(std::thread::spawn(move || {
            for _ in 0..per {
                if commit_one(&log, &store, &mut r, &acks, &dev).is_err() {
                    break;
                }
            }
            running.fetch_sub(1, Ordering::SeqCst);
            let _ = done_tx.send(());
        }));
    }
    for t in 0..forcers {
        let (log, acks, running, dev, stop, done_tx) = (
            log.clone(),
            acks.clone(),
            running.clone(),
            dev.clone(),
            stop.clone(),
            done_tx.clone(),
        );
        let mut r = StdRng::seed_from_u64(seed.wrapping_mul(77).wrapping_add(t));
        hs.push(std::thread::spawn(move || {
            while running.load(Ordering::SeqCst) > 0 && !stop.load(Ordering::SeqCst) {
                let res = match r.gen_range(0..3) {
                    0 => {
                        let c = log.last_committed().0;
                        log.force_all().map(|_| c)
                    }
                    1 => {
                        let id = r.gen_range(0..4);
                        let datasync = r.gen_bool(0.5);
                        let (c, d) = log.object_seqs(id);
                        let want = if datasync { d } else { c };
                        log.force_object(id, datasync)
                            .map(|_| want.map_or(0, |s| s.0))
                    }
                    _ => {
                        let c = log.last_committed().0.saturating_sub(r.gen_range(0..2));
                        log.force_seq(Csn(c)).map(|_| c)
                    }
                };
                match res {
                    Ok(c) => acks.lock().unwrap().push((dev.op_count(), c)),
                    Err(_) => break,
                }
                std::thread::yield_now();
            }
            let _ = done_tx.send(());
        }));
    }
    drop(done_tx);
    for _ in 0..committers + forcers {
        if done_rx.recv_timeout(Duration::from_secs(20)).is_err() {
            panic!(
                "crash suite seed {seed}: workload hung (METALOG_CRASH_SEED={seed}): {}",
                log.debug_state()
            );
        }
    }
    stop.store(true, Ordering::SeqCst);
    for h in hs {
        h.join().unwrap();
    }
    let clean = rng.gen_bool(0.3);
    if clean {
        log.unmount()
            .unwrap_or_else(|e| panic!("seed {seed}: unmount: {e}"));
    }
    let counters = log.counters();
    let (_, head) = log.tail_head();
    dev.set_snapshot_prob(0.0);
    let mut snaps = dev.take_snapshots();
    let final_op = dev.op_count();
    snaps.push((final_op, dev.crash_image()));
    *store.log.lock().unwrap() = None;
    drop(wb);
    drop(log);

    let model = store.model.lock().unwrap();
    let (bounds, csns) = boundary_states(&model.txs);
    let acks = acks.lock().unwrap().clone();
    let mut stats = RunStats {
        runs: 1,
        txs: model.txs.len() as u64,
        wraps: u64::from(head.0 > log_len - 4096),
        space_waits: u64::from(counters.writebacks > 0),
        overlapped_pushes: counters.pushes_overlapped,
        ..Default::default()
    };
    for (i, (op, img)) in snaps.into_iter().enumerate() {
        let acked = acks
            .iter()
            .filter(|(o, _)| *o <= op)
            .map(|(_, c)| *c)
            .max()
            .unwrap_or(0);
        // Transactions that must be there: all of checkpoints <= acked.
        let must = csns.partition_point(|&c| c <= acked);
        let ctx =
            format!("crash suite seed {seed} (METALOG_CRASH_SEED={seed}), snapshot {i} at op {op}");
        let orig = img.clone();
        let (st, dev1) = recover(img, seed ^ i as u64, log_len)
            .unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
        let Some(ns) = bounds.get(&st) else {
            panic!(
                "{ctx}: recovered state is no checkpoint boundary (must {must}, clean {clean}): {}",
                explain(&st, &bounds, &model.txs)
            );
        };
        assert!(
            ns.iter().any(|&n| n >= must),
            "{ctx}: lost forced transactions: state at {ns:?}, forced up to tx {must} (csn {acked})"
        );
        if op == final_op && clean {
            assert!(
                ns.contains(&model.txs.len()),
                "{ctx}: clean unmount lost data"
            );
        }
        stats.crash_points += 1;
        stats.acked_checked += must as u64;
        // Recovering the recovered image changes nothing.
        let (st2, _) = recover(dev1.crash_image(), seed, log_len)
            .unwrap_or_else(|e| panic!("{ctx}: second recovery failed: {e}"));
        assert_eq!(st, st2, "{ctx}: second recovery differs");
        // A crash during recovery (at random device operations of the first recovery)
        // recovers to the same state again.
        if i % 3 == 0 {
            let d = Arc::new(CrashDev::from_image(orig.clone(), seed ^ 77));
            d.set_snapshot_prob(0.4);
            let again = recover_on(&d, log_len)
                .unwrap_or_else(|e| panic!("{ctx}: repeated recovery failed: {e}"));
            assert_eq!(st, again, "{ctx}: recovery is not deterministic");
            for (j, (_, mid)) in d.take_snapshots().into_iter().enumerate() {
                let (st3, _) = recover(mid, seed ^ 78, log_len).unwrap_or_else(|e| {
                    panic!("{ctx}: recovery after recovery crash {j} failed: {e}")
                });
                assert_eq!(
                    st, st3,
                    "{ctx}: recovery after crash {j} during recovery differs"
                );
                stats.recovery_crashes += 1;
            }
        }
    }
    stats
}

/// The three nearest boundary states and how they differ from `st`.
fn explain(st: &State, bounds: &HashMap<State, Vec<usize>>, txs: &[TxRec]) -> String {
    let mut v: Vec<(usize, &State, &Vec<usize>)> = bounds
        .iter()
        .map(|(s, n)| {
            (
                s.iter().zip(st.iter()).filter(|(a, b)| a != b).count(),
                s,
                n,
            )
        })
        .collect();
    v.sort_by_key(|x| x.0);
    let tx_of = |val: u64| {
        txs.get((val as usize).wrapping_sub(1))
            .map(|t| (t.csn, t.ops.clone()))
    };
    let mut out = format!("recovered {st:?}; {}; ", TRACE.with(|t| t.borrow().clone()));
    for (d, s, n) in v.iter().take(3) {
        let diffs: Vec<_> = (0..KEYS)
            .filter(|&k| s[k] != st[k])
            .map(|k| (k, s[k], tx_of(s[k]), st[k], tx_of(st[k])))
            .collect();
        out += &format!("boundary {n:?} ({d} diffs: key, model, model tx, recovered, recovered tx: {diffs:?}); ");
    }
    out += &format!(
        "tx csns {:?}",
        txs.iter().map(|t| t.csn).collect::<Vec<_>>()
    );
    out
}

fn commit_one(
    log: &Arc<Log>,
    store: &Store,
    r: &mut StdRng,
    acks: &Mutex<Vec<(u64, u64)>>,
    dev: &CrashDev,
) -> Result<(), LogError> {
    let obj = r.gen_range(0..4u64);
    let ts_only = r.gen_bool(0.3);
    // Build the transaction under the model lock (values depend on the model), but reserve
    // space first: write-back needs that lock.
    let res = log.reserve(3 * 4096)?;
    let csn = {
        let mut m = store.model.lock().unwrap();
        let n = m.txs.len() as u64 + 1;
        let mut ops = Vec::new();
        let mut items = Vec::new();
        match r.gen_range(0..10) {
            0 => {
                let id = m.next_intent;
                m.next_intent += 1;
                let k = r.gen_range(0..KEYS);
                m.open.push((id, k, n));
                items.push(Item::Intent {
                    id,
                    body: vec![kv_item(k, n)],
                });
                ops.push(Op::Intent(id, k, n));
            }
            1 if !m.open.is_empty() => {
                let (id, k, v) = m.open.remove(0);
                items.push(kv_item(k, v));
                items.push(Item::Done { id });
                ops.push(Op::Done(id, k, v));
            }
            _ => {
                for _ in 0..r.gen_range(1..=3) {
                    let k = r.gen_range(0..KEYS);
                    items.push(kv_item(k, n));
                    ops.push(Op::Set(k, n));
                }
            }
        }
        let tx = Transaction {
            items,
            objects: vec![TxObject {
                id: obj,
                timestamps_only: ts_only,
            }],
        };
        let csn = log.commit_reserved(tx, res)?;
        for op in &ops {
            match *op {
                Op::Set(k, v) | Op::Done(_, k, v) => m.state[k] = v,
                Op::Intent(..) => {}
            }
        }
        m.txs.push(TxRec { csn: csn.0, ops });
        csn
    };
    match r.gen_range(0..4) {
        0 => {
            log.force_seq(csn)?;
            acks.lock().unwrap().push((dev.op_count(), csn.0));
        }
        1 => {
            let (_, d) = log.object_seqs(obj);
            log.force_object(obj, true)?;
            if let Some(d) = d {
                acks.lock().unwrap().push((dev.op_count(), d.0));
            }
        }
        _ => {}
    }
    Ok(())
}
