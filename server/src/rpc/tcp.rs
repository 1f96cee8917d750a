//! The listener: accepts connections and serves each on its own tasks until shutdown.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::rpc::conn::serve_connection;
use crate::rpc::{Program, RpcOptions};

/// Connection ids are unique for the life of the process (the state layer binds them to
/// sessions).
static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// Accepts connections on `listener` until `shutdown` turns true, then stops accepting,
/// lets every connection answer what it already started (up to `drain`), and returns.
pub async fn serve<P: Program>(
    listener: TcpListener,
    prog: Arc<P>,
    opts: RpcOptions,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) {
    let opts = Arc::new(opts);
    let mut conns = JoinSet::new();
    loop {
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            acc = listener.accept() => match acc {
                Ok((stream, peer)) => {
                    let id = NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(conn = id, %peer, "connection accepted");
                    conns.spawn(serve_connection(stream, id, peer, prog.clone(), opts.clone(), shutdown.clone()));
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            // An error means the sender is gone: nobody can stop us later, so stop now.
            r = shutdown.changed() => if r.is_err() { break },
        }
    }
    drop(listener);
    let all_done = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(drain, all_done).await.is_err() {
        tracing::warn!("connections still busy after {drain:?}; abandoning them");
        conns.abort_all();
    }
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;
