//! The `[log]` settings: what the process logs, in which format, and where spans go.

use serde::{Deserialize, Serialize};

/// Logs go to standard error (journald under systemd), as text for people or as one JSON
/// object per line for a log pipeline.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSettings {
    pub format: LogFormat,
    /// A `tracing` filter (`info`, `yardmaster=debug,sqlx=warn`, …); `RUST_LOG` wins over it.
    pub filter: String,
    /// An OTLP/HTTP collector (`http://collector:4318`) to export spans to; empty: none.
    /// Needs a build with the `otel` feature.
    pub otlp_endpoint: String,
    /// The `service.name` of the exported spans.
    pub service_name: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        LogSettings {
            format: LogFormat::Text,
            filter: "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn".into(),
            otlp_endpoint: String::new(),
            service_name: "yardmaster".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `time level span{fields}: message fields`, coloured on a terminal.
    Text,
    /// One JSON object per line: `timestamp`, `level`, `fields`, and the spans it was in
    /// (`request` with its id, `job` with its id and attempt).
    Json,
}
