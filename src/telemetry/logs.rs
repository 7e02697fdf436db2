//! Structured logging via `tracing` to standard error, as text or JSON lines (`[log]`);
//! `RUST_LOG` overrides the configured filter. Lines logged inside a request carry its
//! `request{id=…}` span, and lines about a running job its `job{id=… attempt=…}` span.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// Installs the default subscriber (text, `info`) once; later calls are no-ops.
pub fn init() {
    init_with(&LogSettings::default());
}

/// Installs the global subscriber `settings` describe, once; later calls are no-ops (tests
/// call it freely).
pub fn init_with(settings: &LogSettings) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&settings.filter));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match settings.format {
        LogFormat::Text => builder.with_target(false).with_ansi(std::io::stderr().is_terminal()).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).with_span_list(true).try_init(),
    };
}
