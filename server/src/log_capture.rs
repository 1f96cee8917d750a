//! Tests that check what pnfsd logs: a tracing subscriber writing into a buffer, set as the
//! current thread's default for as long as the guard lives.

use std::sync::{Arc, Mutex};

use tracing::subscriber::DefaultGuard;

/// The log lines written while the guard of [`capture`] was alive.
#[derive(Clone, Default)]
pub(crate) struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Logs of this thread (and of a current-thread runtime's tasks) go to the returned buffer.
pub(crate) fn capture() -> (LogCapture, DefaultGuard) {
    let log = LogCapture::default();
    let writer = log.clone();
    let sub = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (log, tracing::subscriber::set_default(sub))
}
