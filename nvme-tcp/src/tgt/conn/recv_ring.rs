//! The queue on a thread of its own (`Queue::spawn_thread`): its io_uring receives from the
//! socket and runs the file Reads and Writes, one blocking `io_uring_enter` per round.

use super::{connect_timed_out, Flow, Queue};
use crate::tgt::ring::Done;
use crate::transport::{PduBuf, PduReader};
use std::os::fd::AsRawFd;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::watch;

impl Queue {
    /// Moves the queue to a thread of its own and waits for it to end; meanwhile a stop of
    /// the target or the death of the controller shuts the socket down, which ends the
    /// thread's receive. Gives the queue back (`None` if the thread could not start or
    /// panicked).
    pub(super) async fn spawn_thread(
        mut self,
        reader: PduReader<OwnedReadHalf>,
        watcher: std::net::TcpStream,
        mut stop: watch::Receiver<bool>,
        connect_by: tokio::time::Instant,
    ) -> Option<Queue> {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let (dead_tx, dead_rx) = tokio::sync::oneshot::channel::<watch::Receiver<bool>>();
        self.threaded = true;
        // The thread receives through its ring and sends with blocking writes on a
        // descriptor of its own: the runtime lets go of the socket (its writer task ends and
        // both tokio halves are dropped), so arriving PDUs no longer wake a reactor thread.
        let sock = watcher.try_clone().ok()?;
        self.tx.detach_writer().await.ok()?;
        let (rd, mut buf) = reader.into_parts();
        drop(rd);
        let (self_subsys, self_peer) = (self.subsys.clone(), self.peer);
        // The thread's held answers are written (blocking) once they reach the bound.
        self.tx
            .set_hold_limit(self.subsys.limits.max_send_queued_per_connection);
        let spawned = std::thread::Builder::new()
            .name("nvme-tcp-queue".into())
            .spawn(move || {
                // In the runtime's context: controllers spawn their keep-alive timers.
                let rt = self.rt.clone();
                let _rt = rt.enter();
                self.run_thread(&sock, &mut buf, dead_tx);
                drop(sock);
                let _ = done_tx.send(self);
            });
        if spawned.is_err() {
            tracing::warn!("nvme-tcp: cannot start a queue thread");
            return None;
        }
        let (subsys, peer) = (self_subsys, self_peer);
        // The thread hands over the controller's end at its Connect: until then, the
        // connect deadline stands.
        let dead = async {
            match tokio::time::timeout_at(connect_by, dead_rx).await {
                Ok(Ok(mut rx)) => {
                    let _ = rx.wait_for(|d| *d).await;
                }
                Ok(Err(_)) => std::future::pending::<()>().await,
                Err(_) => connect_timed_out(&subsys, peer, "Connect"),
            }
        };
        tokio::pin!(done_rx);
        tokio::select! {
            q = &mut done_rx => return q.ok(),
            _ = dead => {}
            _ = stop.wait_for(|s| *s) => {}
        }
        let _ = watcher.shutdown(std::net::Shutdown::Both);
        done_rx.await.ok()
    }

    /// The queue on its own thread: one io_uring for the socket receive and the file I/O,
    /// one blocking `io_uring_enter` per round, everything received parsed and executed,
    /// every answer of the round in one `sendmsg` (read data vectored from its buffers).
    fn run_thread(
        &mut self,
        sock: &std::net::TcpStream,
        buf: &mut PduBuf,
        dead_tx: tokio::sync::oneshot::Sender<watch::Receiver<bool>>,
    ) {
        let fd = sock.as_raw_fd();
        let mut dead_tx = Some(dead_tx);
        let mut done = Vec::new();
        'conn: loop {
            // PDUs already buffered (the first ones may have come with the ICReq).
            let mut closed = false;
            loop {
                let Some(r) = buf.parse() else { break };
                self.more = buf.has_buffered_pdu();
                if let Flow::Close = self.on_received(r) {
                    break 'conn;
                }
            }
            self.more = false;
            if !self.batch.is_empty() {
                self.run_batch();
            }
            if self.held.get() {
                self.held.set(false);
                let _ = self.tx.flush();
            }
            if dead_tx.is_some() {
                if let Some(c) = &self.ctrl {
                    if let Some(tx) = dead_tx.take() {
                        let _ = tx.send(c.dead_rx());
                    }
                }
            }
            let Some(ring) = self.ring.as_mut() else {
                break;
            };
            if ring.push_recv(fd, buf).is_err() || ring.wait().is_err() {
                break;
            }
            ring.reap(|d| done.push(d));
            for d in done.drain(..) {
                match d {
                    Done::Recv(n) if n > 0 => {
                        if let Some(ring) = self.ring.as_mut() {
                            ring.recv_done(buf, n as usize);
                        }
                    }
                    Done::Recv(_) => closed = true,
                    d => self.on_done(d),
                }
            }
            if closed {
                // End of stream (or the socket was shut down): answer what is complete.
                while let Some(r) = buf.parse() {
                    if let Flow::Close = self.on_received(r) {
                        break;
                    }
                }
                break;
            }
        }
        let _ = self.tx.flush();
        self.drop_batch();
        if let Some(mut ring) = self.ring.take() {
            ring.end_recv(fd);
        }
    }
}
