//! Eight clients run seeded random file operations (create, write, truncate, rename, link,
//! remove) in their own directories while a model in memory tracks what each acknowledged
//! reply means. The server must match the model — names, link counts, sizes, bytes — while
//! running, after a SIGKILL and restart, and after a SIGTERM and restart.

use std::collections::{BTreeMap, HashMap};

use client_tests::attrs::SetAttrs;
use client_tests::harness::pattern;
use client_tests::ops::{share, CreateHow, OpenClaim, Stable};
use client_tests::{Compound, PnfsdProcess, Session, SessionOptions, Stateid};

/// One client's directory as the model sees it.
#[derive(Default, Clone)]
struct Dir {
    names: BTreeMap<String, u64>,
    data: HashMap<u64, Vec<u8>>,
    next: u64,
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

async fn run_client(s: &Session, t: u64, steps: usize) -> Dir {
    let root = s.lookup_path("").await.unwrap();
    let dir = s.mkdir(&root, &format!("d{t}"), 0o755).await.unwrap();
    let mut m = Dir::default();
    let mut rng = Rng(0x9e37_79b9 ^ ((t + 1) * 0x1234_5678_9abc));
    for step in 0..steps {
        let existing: Vec<String> = m.names.keys().cloned().collect();
        let pick = |rng: &mut Rng| existing[rng.below(existing.len() as u64) as usize].clone();
        let fresh = format!("n{}", rng.below(40));
        match if existing.is_empty() { 0 } else { rng.below(6) } {
            0 if !m.names.contains_key(&fresh) => {
                let data = pattern(t * 1_000_000 + step as u64, rng.below(20_000) as usize);
                let args = s.open_args(
                    share::ACCESS_BOTH,
                    Some(CreateHow::Guarded(SetAttrs::mode(0o644))),
                    OpenClaim::Null(fresh.as_bytes().to_vec()),
                );
                let rep = s
                    .run_ok(Compound::new().putfh(&dir).open(args).getfh())
                    .await
                    .unwrap();
                let f = client_tests::fs::OpenFile {
                    fh: rep.fh().unwrap(),
                    stateid: rep.open().unwrap().stateid,
                };
                s.write_all(&f, 0, &data, Stable::FileSync).await.unwrap();
                s.close_file(&f).await.unwrap();
                m.next += 1;
                m.names.insert(fresh, m.next);
                m.data.insert(m.next, data);
            }
            1 => {
                let name = pick(&mut rng);
                let ino = m.names[&name];
                let off = rng.below(25_000);
                let data = pattern(
                    t * 1_000_000 + 500_000 + step as u64,
                    1 + rng.below(8000) as usize,
                );
                let fh = s
                    .run_ok(Compound::new().putfh(&dir).lookup(&name).getfh())
                    .await
                    .unwrap()
                    .fh()
                    .unwrap();
                let f = client_tests::fs::OpenFile {
                    fh,
                    stateid: Stateid::ANONYMOUS,
                };
                s.write_all(&f, off, &data, Stable::FileSync).await.unwrap();
                let content = m.data.get_mut(&ino).unwrap();
                let end = off as usize + data.len();
                if content.len() < end {
                    content.resize(end, 0);
                }
                content[off as usize..end].copy_from_slice(&data);
            }
            2 => {
                let name = pick(&mut rng);
                let size = rng.below(30_000);
                s.run_ok(
                    Compound::new()
                        .putfh(&dir)
                        .lookup(&name)
                        .setattr(Stateid::ANONYMOUS, SetAttrs::size(size)),
                )
                .await
                .unwrap();
                m.data
                    .get_mut(&m.names[&name])
                    .unwrap()
                    .resize(size as usize, 0);
            }
            3 => {
                let (from, to) = (pick(&mut rng), fresh);
                s.run_ok(Compound::new().putfh(&dir).savefh().rename(&from, &to))
                    .await
                    .unwrap();
                // Two names of the same file: RENAME does nothing (RFC 8881 §18.26.4, POSIX).
                if m.names.get(&to) != m.names.get(&from) {
                    let ino = m.names.remove(&from).unwrap();
                    m.names.insert(to, ino);
                }
            }
            4 if !m.names.contains_key(&fresh) => {
                let from = pick(&mut rng);
                s.run_ok(
                    Compound::new()
                        .putfh(&dir)
                        .lookup(&from)
                        .savefh()
                        .putfh(&dir)
                        .link(&fresh),
                )
                .await
                .unwrap();
                let ino = m.names[&from];
                m.names.insert(fresh, ino);
            }
            5 => {
                let name = pick(&mut rng);
                s.run_ok(Compound::new().putfh(&dir).remove(&name))
                    .await
                    .unwrap();
                m.names.remove(&name);
            }
            _ => {}
        }
    }
    m
}

async fn check(s: &Session, t: u64, m: &Dir) {
    let dir = s.lookup_path(&format!("d{t}")).await.unwrap();
    let names = s.list(&dir).await.unwrap();
    assert_eq!(
        names,
        m.names.keys().cloned().collect::<Vec<_>>(),
        "d{t}: names"
    );
    let mut fileids: HashMap<u64, u64> = HashMap::new();
    for (name, ino) in &m.names {
        let path = format!("d{t}/{name}");
        let a = s.stat(&path).await.unwrap();
        let want = &m.data[ino];
        assert_eq!(a.size, Some(want.len() as u64), "{path}: size");
        let links = m.names.values().filter(|i| *i == ino).count() as u32;
        assert_eq!(a.numlinks, Some(links), "{path}: links");
        let id = a.fileid.unwrap();
        assert_eq!(
            *fileids.entry(*ino).or_insert(id),
            id,
            "{path}: hard links disagree on fileid"
        );
        let fh = s.lookup_path(&path).await.unwrap();
        let got = s
            .read_all(
                &client_tests::fs::OpenFile {
                    fh,
                    stateid: Stateid::ANONYMOUS,
                },
                0,
                want.len(),
            )
            .await
            .unwrap();
        assert!(got == *want, "{path}: bytes differ");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_clients_match_the_model_across_sigkill_and_sigterm() {
    let mut srv = PnfsdProcess::start().unwrap();
    let mut owners: Vec<SessionOptions> = Vec::new();
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let s = Session::connect(srv.addr()).await.unwrap();
        owners.push(s.options.clone());
        tasks.push(tokio::spawn(async move {
            let m = run_client(&s, t, 60).await;
            check(&s, t, &m).await;
            m
        }));
    }
    let mut models = Vec::new();
    for t in tasks {
        models.push(t.await.unwrap());
    }

    srv.kill().unwrap();
    srv.restart().unwrap();
    let mut back = Vec::new();
    for o in &owners {
        back.push(Session::connect_with(srv.addr(), o.clone()).await.unwrap());
    }
    for (t, m) in models.iter().enumerate() {
        check(&back[0], t as u64, m).await;
    }
    drop(back);

    assert!(srv.terminate().unwrap().success());
    srv.restart().unwrap();
    // Every client comes back and completes its reclaim, which ends the grace period.
    let mut back = Vec::new();
    for o in &owners {
        back.push(Session::connect_with(srv.addr(), o.clone()).await.unwrap());
    }
    for (t, m) in models.iter().enumerate() {
        check(&back[t], t as u64, m).await;
    }
}
