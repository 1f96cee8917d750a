//! Crash-under-load plumbing shared by the SIGKILL tests (`restart.rs`, `crash_churn.rs`): wait
//! for enough acknowledged work, kill the server mid-flight, come back as the same clients
//! (docs/design.md §4: on a sync export an acknowledged change survives). Like
//! `harness::after_grace`, these panic on failure: they exist only for tests.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::error::Result;
use crate::harness::PnfsdProcess;
use crate::session::{Session, SessionOptions};

/// Connects `n` clients to `srv` and runs `work(t, session)` for client `t` in its own task;
/// returns their owners (to come back as them after a crash) and the tasks.
pub async fn spawn_clients<F, Fut>(
    srv: &PnfsdProcess,
    n: u64,
    work: F,
) -> (Vec<SessionOptions>, Vec<JoinHandle<Result<()>>>)
where
    F: Fn(u64, Session) -> Fut,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let mut owners = Vec::new();
    let mut tasks = Vec::new();
    for t in 0..n {
        let s = Session::connect(srv.addr()).await.unwrap();
        owners.push(s.options.clone());
        tasks.push(tokio::spawn(work(t, s)));
    }
    (owners, tasks)
}

/// Waits (at most 60 s) until `count()` reaches `n`; returns the last count, which the caller
/// checks.
pub async fn wait_for(n: usize, count: impl Fn() -> usize) -> usize {
    for _ in 0..6000 {
        if count() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    count()
}

/// SIGKILL `srv` while `tasks` run; each of them must then stop with an error (the server is
/// gone, so no writer may believe it finished).
pub async fn kill_under_load(srv: &mut PnfsdProcess, tasks: Vec<JoinHandle<Result<()>>>) {
    srv.kill().unwrap();
    for t in tasks {
        assert!(t.await.unwrap().is_err());
    }
}

/// Restarts `srv` on the same data and reconnects every client as its old owner.
pub async fn restart_as(srv: &mut PnfsdProcess, owners: Vec<SessionOptions>) -> Vec<Session> {
    srv.restart().unwrap();
    let mut back = Vec::new();
    for o in owners {
        back.push(Session::connect_with(srv.addr(), o).await.unwrap());
    }
    back
}
