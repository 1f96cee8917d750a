//! The daemon's log: text or JSON lines on stderr, the filter reloadable on SIGHUP.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer as _;
use tracing_subscriber::{reload, EnvFilter, Registry};

use crate::config::Config;

/// The log filter, reloadable on SIGHUP; `RUST_LOG`, when set, overrides `log_level`.
pub struct Logging {
    pub handle: reload::Handle<EnvFilter, Registry>,
    pub env: Option<String>,
}

impl Logging {
    pub fn init(format: crate::config::LogFormat) -> Logging {
        let env = std::env::var("RUST_LOG")
            .ok()
            .filter(|s| !s.trim().is_empty());
        let filter = env
            .as_deref()
            .and_then(|s| EnvFilter::try_new(s).ok())
            .unwrap_or_else(|| EnvFilter::new("info"));
        let (filter, handle) = reload::Layer::new(filter);
        let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let lines = match format {
            // Plain text when the log goes to a file or a pipe (test harnesses grep it).
            crate::config::LogFormat::Text => stderr
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                .boxed(),
            crate::config::LogFormat::Json => stderr.json().boxed(),
        };
        tracing_subscriber::registry()
            .with(filter)
            .with(lines)
            .init();
        Logging { handle, env }
    }

    /// Applies the configuration's `log_level`, unless `RUST_LOG` overrides it.
    pub fn apply(&self, cfg: &Config) -> Result<(), crate::config::ConfigError> {
        if self.env.is_none() {
            let f = cfg.log_filter()?;
            if let Err(e) = self.handle.reload(f) {
                tracing::error!("log_level {:?} not applied: {e}", cfg.log_level);
            }
        }
        Ok(())
    }
}
