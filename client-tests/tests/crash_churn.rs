//! SIGKILL during namespace churn from four clients (create → rename → maybe remove, and
//! directories made and removed). After the restart every item is in a state at least as new
//! as its last acknowledged step (the step in flight may or may not have landed), never under
//! two names, and the directory is self-consistent (each name once, each name looks up, fileids
//! unique). Design.md §4: on a sync export an acknowledged change is durable.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use client_tests::attrs::{attr, bitmap};
use client_tests::crash::{kill_under_load, restart_as, spawn_clients, wait_for};
use client_tests::{Compound, PnfsdProcess};

/// The last acknowledged step of item `(writer, i)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Created,
    Renamed,
    Removed,
}

fn names(t: u64, i: u64) -> (String, String) {
    (format!("c{t}-{i}"), format!("r{t}-{i}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_namespace_churn() {
    let mut srv = PnfsdProcess::start().unwrap();
    let acked: Arc<Mutex<HashMap<(u64, u64), Step>>> = Arc::default();
    let (owners, tasks) = spawn_clients(&srv, 4, |t, s| {
        let acked = acked.clone();
        async move {
            let root = s.lookup_path("").await?;
            for i in 0..100_000u64 {
                let (c, r) = names(t, i);
                // Odd items are directories, even ones files.
                if i % 2 == 1 {
                    s.run_ok(Compound::new().putfh(&root).mkdir(&c, 0o755))
                        .await?;
                } else {
                    let f = s.create_file(&root, &c, 0o644).await?;
                    s.close_file(&f).await?;
                }
                acked.lock().unwrap().insert((t, i), Step::Created);
                s.run_ok(Compound::new().putfh(&root).savefh().rename(&c, &r))
                    .await?;
                acked.lock().unwrap().insert((t, i), Step::Renamed);
                if i % 3 == 0 {
                    s.run_ok(Compound::new().putfh(&root).remove(&r)).await?;
                    acked.lock().unwrap().insert((t, i), Step::Removed);
                }
            }
            Ok(())
        }
    })
    .await;
    let n = wait_for(120, || acked.lock().unwrap().len()).await;
    assert!(n >= 120, "too slow");
    kill_under_load(&mut srv, tasks).await;
    let acked = acked.lock().unwrap().clone();

    let back = restart_as(&mut srv, owners).await;
    let s = &back[0];
    let root = s.lookup_path("").await.unwrap();
    let entries = s
        .readdir_all(&root, bitmap(&[attr::FILEID, attr::TYPE]))
        .await
        .unwrap();
    let mut seen = HashSet::new();
    let mut fileids = HashSet::new();
    for e in &entries {
        let name = String::from_utf8_lossy(&e.name).into_owned();
        assert!(seen.insert(name.clone()), "{name} listed twice");
        assert!(
            fileids.insert(e.attrs.fileid),
            "fileid of {name} not unique"
        );
        let a = s.stat(&name).await.unwrap();
        assert_eq!(
            a.fileid, e.attrs.fileid,
            "{name}: READDIR and LOOKUP disagree"
        );
    }
    for (&(t, i), &step) in &acked {
        let (c, r) = names(t, i);
        let (has_c, has_r) = (seen.contains(&c), seen.contains(&r));
        assert!(!(has_c && has_r), "{c} and {r} both exist");
        let ok = match step {
            // The rename may have landed without its reply.
            Step::Created => has_c || has_r,
            // A remove may have landed without its reply (only every third item has one).
            Step::Renamed => has_r || (i % 3 == 0 && !has_c),
            Step::Removed => !has_c && !has_r,
        };
        assert!(
            ok,
            "item {c}: last acknowledged {step:?}, now c={has_c} r={has_r}"
        );
        let want_dir = i % 2 == 1;
        if has_r || has_c {
            let name = if has_r { &r } else { &c };
            let a = s.stat(name).await.unwrap();
            let is_dir = a.ftype == Some(client_tests::attrs::ftype::DIR);
            assert_eq!(is_dir, want_dir, "{name} has the wrong type");
        }
    }
    // Nothing exists that was never even started: at most one unacknowledged item per writer.
    let unacked = seen
        .iter()
        .filter(|n| {
            let k = n[1..]
                .split_once('-')
                .and_then(|(t, i)| Some((t.parse().ok()?, i.parse().ok()?)));
            k.map(|k: (u64, u64)| !acked.contains_key(&k))
                .unwrap_or(true)
        })
        .count();
    assert!(
        unacked <= 4,
        "{unacked} names without any acknowledged step"
    );
    // The root's link count matches its subdirectories (2 + one per child directory).
    let dirs = entries
        .iter()
        .filter(|e| e.attrs.ftype == Some(client_tests::attrs::ftype::DIR))
        .count();
    let a = s
        .getattr_fh(&root, client_tests::attrs::basic())
        .await
        .unwrap();
    assert_eq!(
        a.numlinks,
        Some(2 + dirs as u32),
        "root nlink after recovery"
    );
}
