//! Unit tests of the host gate: host ↔ client map, fences, their state file, the per-command check.

use nvme_tcp::policy::Access;
use nvme_tcp::HostPolicy;

use super::*;

fn host(nqn: &str, ip: &str) -> (String, IpAddr) {
    (nqn.to_string(), ip.parse().unwrap())
}

fn admits(g: &HostGate, (nqn, ip): &(String, IpAddr)) -> bool {
    g.admit(&HostRef {
        nqn,
        hostid: &[0; 16],
        ip: *ip,
    })
}

#[test]
fn state_file_round_trip_and_restored_fences_lift() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nvme-fences");
    let g = HostGate::default();
    g.fences.write().unwrap().push(Fence {
        clientid: Some(1),
        ip: "127.0.0.2".parse().unwrap(),
        owner: b"a b".to_vec(),
        verifier: [1; 8],
        since: Instant::now(),
    });
    g.state_file.set(path.clone()).unwrap();
    g.persist().unwrap();
    let back = read_fences(&path);
    assert_eq!(back.len(), 1);
    assert_eq!(
        (back[0].owner.as_slice(), back[0].verifier),
        (&b"a b"[..], [1; 8])
    );
    let r = HostGate::default();
    r.fences.write().unwrap().extend(back);
    r.any_fence.store(true, Ordering::Relaxed);
    let h = host("nqn.x", "127.0.0.2");
    assert!(!admits(&r, &h));
    assert!(admits(&r, &host("nqn.x", "127.0.0.3")));
    let none = |_| false;
    let lease = Duration::from_secs(1);
    // The same instance back: still fenced; a new verifier: lifted.
    r.lift(
        &none,
        &[(b"a b".to_vec(), [1; 8])],
        false,
        lease,
        Instant::now(),
    );
    assert!(!admits(&r, &h));
    r.lift(
        &none,
        &[(b"a b".to_vec(), [2; 8])],
        false,
        lease,
        Instant::now(),
    );
    assert!(admits(&r, &h));
}

/// A host whose client is gone stays refused until its own reconnect timeout has failed
/// what it queued (READMIT_AFTER), not just a lease: a replayed write would land in
/// blocks freed and reused meanwhile. The same for a fence restored after a restart.
#[test]
fn a_gone_client_stays_refused_past_the_hosts_reconnect_timeout() {
    let t0 = Instant::now();
    let fence = |clientid| Fence {
        clientid,
        ip: "127.0.0.2".parse().unwrap(),
        owner: b"o".to_vec(),
        verifier: [1; 8],
        since: t0,
    };
    let lease = Duration::from_secs(1);
    let h = host("nqn.x", "127.0.0.2");
    let none = |_| false;
    for (clientid, previous_gone) in [(Some(1), false), (None, true)] {
        let g = HostGate::default();
        g.fences.write().unwrap().push(fence(clientid));
        g.any_fence.store(true, Ordering::Relaxed);
        g.lift(&none, &[], previous_gone, lease, t0 + 2 * lease);
        assert!(!admits(&g, &h), "{clientid:?}: a lease after the fence");
        let past = t0 + READMIT_AFTER + lease;
        g.lift(&none, &[], previous_gone, lease, past);
        assert!(admits(&g, &h), "{clientid:?}: past READMIT_AFTER");
    }
}

/// The per-command rules without a target: a host gets the union of its clients'
/// sets (by address, or by the owner `[nvme_hosts]` names), the probe window is read
/// and counted, a host of no client reads only, and while the previous instance's
/// layouts may be reclaimed nobody's write is refused for want of a layout.
#[test]
fn access_follows_the_clients_sets() {
    use layout::block::{BlockExtent, ExtentState, IoMode};
    use layout::policy::Grants;
    let g = HostGate::default();
    g.enforce(Enforce {
        on: true,
        admin_hosts: vec![],
        signature: (32, 48),
        lbas: 10_000,
        reclaim: false,
    });
    let mut m = HashMap::new();
    m.insert("nqn.nat".to_string(), HostOwner::parse("owner-c"));
    g.set_overrides(m);
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let note = |id, at: &str, owner: &[u8]| {
        g.note_client(
            id,
            ClientHost {
                ip: ip(at),
                owner: owner.to_vec(),
                verifier: [0; 8],
                block: true,
            },
        )
    };
    note(1, "10.0.0.1", b"owner-a");
    note(2, "10.0.0.1", b"owner-b");
    note(3, "10.0.0.3", b"owner-c");
    let lba = u64::from(layout::LBA_SIZE);
    let give = |id, ino, at: u64, n: u64| {
        let mut gr = Grants::default();
        gr.add(0, n * lba, IoMode::RW);
        let x = BlockExtent {
            deviceid: [0; 16],
            file_offset: 0,
            length: n * lba,
            storage_offset: at * lba,
            state: ExtentState::INVALID_DATA,
        };
        g.blocks.write().unwrap().sync(
            id,
            crate::store::Ino(ino),
            Some(&gr),
            Some((&[x], IoMode::RW)),
        );
    };
    give(1, 10, 5000, 2);
    give(2, 11, 5002, 2);
    give(3, 12, 6000, 1);
    let io = |nqn: &str, at: &str, a, slba, nlb| {
        g.access(
            &HostRef {
                nqn,
                hostid: &[0; 16],
                ip: ip(at),
            },
            1,
            a,
            slba,
            nlb,
        )
    };
    // Both clients at 10.0.0.1: one write across both files' blocks.
    assert!(io("nqn.x", "10.0.0.1", Access::Write, 5000, 4));
    assert!(!io("nqn.x", "10.0.0.1", Access::Write, 5000, 5));
    assert!(!io("nqn.x", "10.0.0.1", Access::Write, 6000, 1));
    // The NAT'd host named by owner: client 3's blocks, wherever it connects from.
    assert!(io("nqn.nat", "10.0.0.1", Access::Write, 6000, 1));
    assert!(!io("nqn.nat", "10.0.0.1", Access::Write, 5000, 1));
    // Reads: the signature block and the probe windows, the latter counted.
    assert!(io("nqn.x", "10.0.0.1", Access::Read, 0, 1));
    assert_eq!(g.metrics.snapshot().probe_reads, 0);
    assert!(io("nqn.x", "10.0.0.1", Access::Read, 1, 1));
    assert!(io("nqn.x", "10.0.0.1", Access::Read, 10_000 - 1, 1));
    assert_eq!(g.metrics.snapshot().probe_reads, 2);
    assert!(!io("nqn.x", "10.0.0.1", Access::Read, 7000, 1));
    // A host of no client: reads, never writes.
    assert!(io("nqn.y", "10.0.0.9", Access::Read, 7000, 1));
    assert!(!io("nqn.y", "10.0.0.9", Access::Write, 7000, 1));
    // The previous instance's layouts may still be reclaimed: writes go through.
    g.set_reclaim(true);
    assert!(io("nqn.y", "10.0.0.9", Access::Write, 7000, 1));
    assert!(io("nqn.x", "10.0.0.1", Access::Write, 7000, 1));
    g.set_reclaim(false);
    assert!(!io("nqn.x", "10.0.0.1", Access::Write, 7000, 1));
}

/// The per-command check's cost through `access` (the locks, the host's clients, the
/// run lookup; docs/pnfs.md "The target enforces the layouts"): ns per check with 10,
/// 10,000 and 1,000,000 runs held by the host's client, at LBAs spread over them (a
/// third outside). A figure, not a limit:
/// `cargo test --release -p pnfsd -- --ignored check_cost --nocapture`.
#[test]
#[ignore]
fn check_cost() {
    use layout::block::{BlockExtent, ExtentState, IoMode};
    use layout::policy::Grants;
    let lba = u64::from(layout::LBA_SIZE);
    let ip: IpAddr = "10.0.0.1".parse().unwrap();
    let h = HostRef {
        nqn: "nqn.x",
        hostid: &[0; 16],
        ip,
    };
    for n in [10u64, 10_000, 1_000_000] {
        let g = HostGate::default();
        g.enforce(Enforce {
            on: true,
            signature: (32, 48),
            lbas: 4 * n + 1000,
            ..Enforce::default()
        });
        g.note_client(
            1,
            ClientHost {
                ip,
                owner: b"o".to_vec(),
                verifier: [0; 8],
                block: true,
            },
        );
        {
            let mut b = g.blocks.write().unwrap();
            let mut gr = Grants::default();
            gr.add(0, 2 * lba, IoMode::RW);
            // One file per run, two blocks each, a block apart: nothing merges.
            for i in 0..n {
                let x = BlockExtent {
                    deviceid: [0; 16],
                    file_offset: 0,
                    length: 2 * lba,
                    storage_offset: (PROBE_LBAS + 3 * i) * lba,
                    state: ExtentState::INVALID_DATA,
                };
                b.sync(
                    1,
                    crate::store::Ino(i + 10),
                    Some(&gr),
                    Some((&[x], IoMode::RW)),
                );
            }
            assert_eq!(b.runs_of(1), n as usize);
        }
        let checks = 2_000_000u64;
        // Spread at random over the runs, then in volume order (as a streaming writer);
        // through the runs as they changed, then through the flat copy the tick makes.
        let cases = [
            ("random", 2_654_435_761u64, false),
            ("in order", 1, false),
            ("random, after the tick", 2_654_435_761, true),
            ("in order, after the tick", 1, true),
        ];
        for (what, spread, tick) in cases {
            if tick {
                g.refresh_lookups();
            }
            let mut hit = 0u64;
            let t0 = Instant::now();
            for k in 0..checks {
                let at = PROBE_LBAS + (k / 3).wrapping_mul(spread) % n * 3 + k % 3;
                hit += u64::from(g.access(&h, 1, Access::Write, at, 1));
            }
            let ns = t0.elapsed().as_nanos() as f64 / checks as f64;
            assert!(hit > checks / 2 && hit < checks, "{hit}");
            println!("{n} runs, {what}: {ns:.1} ns/check");
        }
    }
}

#[test]
fn an_override_names_the_host() {
    let g = HostGate::default();
    let mut m = HashMap::new();
    m.insert("nqn.a".to_string(), HostOwner::parse("owner-a"));
    m.insert("nqn.nat".to_string(), HostOwner::parse("10.0.0.5"));
    g.set_overrides(m);
    let ip: IpAddr = "127.0.0.1".parse().unwrap();
    let r = |nqn| HostRef {
        nqn,
        hostid: &[0; 16],
        ip,
    };
    assert!(g.host_is(&r("nqn.a"), "10.9.9.9".parse().unwrap(), b"owner-a"));
    assert!(!g.host_is(&r("nqn.a"), ip, b"owner-b"));
    assert!(g.host_is(&r("nqn.nat"), "10.0.0.5".parse().unwrap(), b"x"));
    assert!(!g.host_is(&r("nqn.nat"), ip, b"x"));
    assert!(g.host_is(&r("nqn.other"), ip, b"x"));
}
