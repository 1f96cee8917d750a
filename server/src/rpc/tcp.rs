//! The listener: accepts connections and serves each on its own tasks until shutdown, within
//! the connection cap (limits.rs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::rpc::conn::serve_connection;
use crate::rpc::limits::Shared;
use crate::rpc::{Program, RpcOptions};

/// Connection ids are unique for the life of the process (the state layer binds them to
/// sessions).
static NEXT_CONN_ID: AtomicU64 = AtomicU64::new(1);

/// Idle connections closed per failed accept when out of file descriptors.
const EVICT_BATCH: usize = 16;

/// Accepts connections on `listener` until `shutdown` turns true, then stops accepting,
/// lets every connection answer what it already started (up to `drain`), and returns.
///
/// At `max_connections`, or when the process is out of file descriptors, the connection
/// idle the longest with no session is closed to make room (knfsd does the same with its
/// oldest temporary socket, `svc_check_conn_limits`); with none to close, the new one is
/// refused. Either way one line per 10 s is logged, not one per connection.
pub async fn serve<P: Program>(
    listener: TcpListener,
    prog: Arc<P>,
    opts: RpcOptions,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) {
    let shared = Arc::new(Shared::new(opts.max_blocking));
    let opts = Arc::new(opts);
    let mut conns = JoinSet::new();
    let has_session = |id| prog.connection_in_session(id);
    // What a burst of connections freed goes back to the kernel (trim.rs).
    let trimmer = tokio::spawn(crate::rpc::trim::run(shared.clone(), shutdown.clone()));
    loop {
        if *shutdown.borrow() {
            break;
        }
        tokio::select! {
            acc = listener.accept() => match acc {
                Ok((stream, peer)) => {
                    if shared.connections() >= opts.max_connections
                        && shared.evict_one(has_session).is_none()
                    {
                        if let Some(n) = shared.log_refused.allow() {
                            tracing::warn!(
                                %peer,
                                max_connections = opts.max_connections,
                                similar_not_logged = n,
                                "connection refused: every connection is busy or has a session"
                            );
                        }
                        drop(stream);
                        continue;
                    }
                    let id = NEXT_CONN_ID.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(conn = id, %peer, "connection accepted");
                    conns.spawn(serve_connection(
                        stream,
                        id,
                        peer,
                        prog.clone(),
                        opts.clone(),
                        shared.clone(),
                        shutdown.clone(),
                    ));
                }
                // Out of file descriptors and the like: make room if an idle connection
                // can go, and back off instead of spinning.
                Err(e) => {
                    // Several at once: the backlog may hold more idle peers ahead of the
                    // client that needs the room.
                    let evicted = (0..EVICT_BATCH)
                        .map_while(|_| shared.evict_one(has_session))
                        .count();
                    if let Some(n) = shared.log_accept.allow() {
                        tracing::warn!(
                            connections = shared.connections(),
                            closing_idle = evicted,
                            similar_not_logged = n,
                            "accept failed: {e}"
                        );
                    }
                    let pause = if evicted > 0 { 10 } else { 100 };
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            // An error means the sender is gone: nobody can stop us later, so stop now.
            r = shutdown.changed() => if r.is_err() { break },
        }
    }
    drop(listener);
    trimmer.abort();
    let all_done = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(drain, all_done).await.is_err() {
        tracing::warn!("connections still busy after {drain:?}; abandoning them");
        conns.abort_all();
        // COMPOUNDs already running get a moment more before the caller unmounts the store.
        if !shared.pool.wait_idle(Duration::from_secs(5)).await {
            tracing::warn!("COMPOUNDs still running after the drain");
        }
    }
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;
