//! Mutated COMPOUNDs (seeded, so a failure replays): the SEQUENCE stays valid and the
//! operations after it are corrupted — bytes flipped, truncated, counts changed. Every answer
//! must be a well-formed COMPOUND4res that this client decodes strictly (or GARBAGE_ARGS), the
//! connection must stay up and the server must not crash.

use client_tests::attrs::basic;
use client_tests::harness::pattern;
use client_tests::ops::Stable;
use client_tests::{ClientError, Compound, PnfsdProcess, Reply, RpcError, Session, Stateid};

#[tokio::test]
async fn mutated_compounds_are_answered() {
    let mut srv = PnfsdProcess::start().unwrap();
    let s = Session::connect(srv.addr()).await.unwrap();
    let root = s.lookup_path("").await.unwrap();
    let f = s.create_file(&root, "target", 0o644).await.unwrap();
    s.write_all(&f, 0, b"some bytes", Stable::FileSync)
        .await
        .unwrap();
    let open = s.create_args("fz");
    let base = Compound::new()
        .putfh(&root)
        .lookup("target")
        .getattr(basic())
        .read(Stateid::ANONYMOUS, 0, 100)
        .putfh(&root)
        .open(open)
        .write(Stateid::CURRENT, 0, Stable::Unstable, b"fuzz")
        .getfh()
        .readdir(0, [0; 8], 4096, basic())
        .savefh()
        .rename("fz", "fz2")
        .getattr(basic());

    let mut counts = std::collections::BTreeMap::<String, u32>::new();
    for seed in 0..1000u64 {
        let mut slot = s.take_slot().await.unwrap();
        let mut args = Compound {
            tag: vec![],
            ops: vec![s.sequence_op(&slot, false)],
        }
        .encode(1);
        let head = args.len();
        let mut body = Compound {
            tag: vec![],
            ops: base.ops.clone(),
        }
        .encode(1);
        // Drop the tag, minor version and count of the second encoding: only the ops.
        let ops = body.split_off(12);
        args.extend_from_slice(&ops);
        let count_at = 8; // tag length 0 (4) + minor (4)
        let r = pattern(seed, 64);
        match seed % 4 {
            // Flip a few bytes after SEQUENCE.
            0 | 1 => {
                for k in 0..(1 + r[0] as usize % 6) {
                    let at = head
                        + (u32::from_le_bytes([r[1 + 4 * k], r[2 + 4 * k], r[3 + 4 * k], 0])
                            as usize)
                            % (args.len() - head);
                    args[at] ^= r[30 + k] | 1;
                }
            }
            // Truncate somewhere after SEQUENCE.
            2 => {
                let cut =
                    head + (u32::from_le_bytes([r[1], r[2], 0, 0]) as usize) % (args.len() - head);
                args.truncate(cut);
            }
            // Claim more or fewer operations than there are.
            _ => {
                let n = base.ops.len() as u32 + 1;
                let claimed = (r[1] as u32 % (2 * n + 2)).max(1);
                args[count_at..count_at + 4].copy_from_slice(&claimed.to_be_bytes());
            }
        }
        if seed % 4 != 3 {
            let n = base.ops.len() as u32 + 1;
            args[count_at..count_at + 4].copy_from_slice(&n.to_be_bytes());
        }
        let outcome = match s.conn.compound_bytes(&args).await {
            Ok(raw) => match Reply::decode(raw) {
                Ok(rep) => {
                    slot.settle(&rep);
                    rep.status.name().to_string()
                }
                Err(e) => panic!("seed {seed}: the reply does not decode: {e}"),
            },
            Err(ClientError::Rpc(RpcError::GarbageArgs)) => "GARBAGE_ARGS".into(),
            Err(e) => panic!("seed {seed}: {e}"),
        };
        *counts.entry(outcome).or_default() += 1;
        drop(slot);
        assert!(!s.conn.is_closed(), "seed {seed}: connection dropped");
    }
    eprintln!("outcomes: {counts:?}");
    assert!(srv.is_running(), "pnfsd died");
    s.run_ok(Compound::new().putfh(&root).lookup("target"))
        .await
        .unwrap();
    drop(s);
    assert!(srv.terminate().unwrap().success());
}
