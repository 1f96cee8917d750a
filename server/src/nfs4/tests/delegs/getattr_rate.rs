//! Not a test: what the write-delegation check of GETATTR (cb_getattr.rs,
//! `StateManager::write_deleg_holder`) costs when several COMPOUND threads GETATTR at once.
//! docs/delegations.md quotes the figures.

use std::sync::atomic::Ordering;

use super::write::getattr_compound;
use super::*;
use crate::nfs4::tests::fixture::{cred, Fx};
use crate::rpc::RpcSizes;

const OPEN_DELEGATE_WRITE: u32 = 2;

/// One setting measured: a server with its clients, each with a file it opened for write.
struct Setup {
    label: &'static str,
    fx: Fx,
    conns: Vec<ConnInfo>,
    /// Per client: session, next seqid, file.
    clients: Vec<([u8; 16], u32, Fh)>,
}

impl Setup {
    /// `on`: write delegations on (each client holds one of its own file); `locked`: the
    /// check takes the lock whatever the count (as before the count existed).
    fn new(label: &'static str, on: bool, locked: bool, n: usize) -> Setup {
        let fx = Fx::new(if on {
            write_delegations()
        } else {
            read_delegations()
        });
        fx.srv
            .state
            .lock_every_getattr
            .store(locked, Ordering::Relaxed);
        let bcs: Vec<Arc<Bc>> = (0..n).map(|_| Arc::default()).collect();
        let conns: Vec<ConnInfo> = (0..n).map(|i| bc_conn(10 + i as u64, &bcs[i])).collect();
        let mut clients = Vec::new();
        for (i, c) in conns.iter().enumerate() {
            let mut x = cx(&fx.srv, c);
            let (_, sid) = mount(&mut x, format!("client{i}").as_bytes());
            let name = format!("f{i}");
            let (_, dtype, _) = open_name(&mut x, name.as_bytes(), 3, true).unwrap();
            assert_eq!(dtype, if on { OPEN_DELEGATE_WRITE } else { 0 });
            fx.srv.state.slot_done(x.session.as_ref().unwrap(), &[]);
            clients.push((sid, 1, x.current_fh.unwrap()));
        }
        assert_eq!(
            fx.srv.state.write_delegations_held(),
            if on { n } else { 0 }
        );
        Setup {
            label,
            fx,
            conns,
            clients,
        }
    }

    /// `threads` threads, thread i as client i on its own connection and file, each `n`
    /// COMPOUNDs { SEQUENCE, PUTFH, GETATTR change+size } through `compound::process`:
    /// COMPOUNDs per second, all threads together.
    fn run(&mut self, threads: usize, n: u32) -> f64 {
        let srv = &self.fx.srv;
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for (c, conn) in self.clients[..threads].iter_mut().zip(&self.conns) {
                s.spawn(move || {
                    for _ in 0..n {
                        c.1 += 1;
                        let args = getattr_compound(c.0, c.1, c.2, &[3, 4]);
                        let sizes = RpcSizes {
                            request_len: args.len() + 40,
                            reply_header_len: 24,
                        };
                        let reply =
                            crate::nfs4::compound::process(srv, conn, cred(0, 0), &args, sizes)
                                .unwrap();
                        assert_eq!(&reply[..4], &[0; 4], "COMPOUND failed");
                    }
                });
            }
        });
        f64::from(n) * threads as f64 / t0.elapsed().as_secs_f64()
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default()
}

/// GETATTR of change and size per second, with 1, 2 and 4 threads (each its own client,
/// session and file, opened for write): `write_delegations` off (no write delegation held,
/// so the check answers from the count without the lock), off with the check forced
/// through the lock (`lock_every_getattr`: the check as it was before the count), and on
/// (each client holds a write delegation of its file: the check takes the lock and finds
/// the caller's own). Rounds interleave the settings and thread counts; median of 7
/// rounds of 20,000 COMPOUNDs per thread. Run with `cargo test --release -p pnfsd --lib
/// getattr_rate -- --ignored --nocapture`.
#[test]
#[ignore]
fn getattr_rate_threads() {
    const ROUNDS: usize = 7;
    const N: u32 = 20_000;
    const THREADS: [usize; 3] = [1, 2, 4];
    let mut setups = [
        Setup::new("off", false, false, 4),
        Setup::new("off, locked (before)", false, true, 4),
        Setup::new("on", true, false, 4),
    ];
    println!("load average before: {}", loadavg().trim());
    let mut rates = vec![vec![Vec::new(); THREADS.len()]; setups.len()];
    for _ in 0..ROUNDS {
        for (t, &threads) in THREADS.iter().enumerate() {
            for (s, setup) in setups.iter_mut().enumerate() {
                rates[s][t].push(setup.run(threads, N));
            }
        }
    }
    println!("load average after: {}", loadavg().trim());
    let mut medians = vec![[0.0; THREADS.len()]; setups.len()];
    for (s, setup) in setups.iter().enumerate() {
        for (t, &threads) in THREADS.iter().enumerate() {
            let r = &mut rates[s][t];
            r.sort_by(f64::total_cmp);
            medians[s][t] = r[ROUNDS / 2];
            println!(
                "GETATTR change+size, {:<20} {threads} threads: {:.0} ops/s median (rounds {:.0}..{:.0})",
                setup.label,
                r[ROUNDS / 2],
                r[0],
                r[ROUNDS - 1]
            );
        }
    }
    for (t, &threads) in THREADS.iter().enumerate() {
        println!(
            "{threads} threads: off / off-locked {:.3}, on / off {:.3}",
            medians[0][t] / medians[1][t],
            medians[2][t] / medians[0][t]
        );
    }
}
