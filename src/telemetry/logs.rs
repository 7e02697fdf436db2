//! Structured logging via `tracing` to standard error, as text or JSON lines (`[log]`);
//! `RUST_LOG` overrides the configured filter. Lines logged inside a request carry its
//! `request{id=…}` span, and lines about a running job its `job{id=… attempt=…}` span. The
//! same spans go to an OpenTelemetry collector when one is configured ([`super::otel`]).

use std::io::IsTerminal as _;

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use super::otel;
use super::settings::{LogFormat, LogSettings};

/// Installs the default subscriber (text, `info`) once; later calls are no-ops.
pub fn init() {
    init_with(&LogSettings::default());
}

/// Installs the global subscriber `settings` describe, once; later calls are no-ops (tests
/// call it freely).
pub fn init_with(settings: &LogSettings) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&settings.filter));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let lines = match settings.format {
        LogFormat::Text => lines.with_target(false).with_ansi(std::io::stderr().is_terminal()).boxed(),
        LogFormat::Json => lines.json().with_current_span(false).with_span_list(true).boxed(),
    };
    let _ = tracing_subscriber::registry().with(filter).with(lines).with(otel::layer(settings)).try_init();
}
