//! What yardmaster tells its operators: logs ([`logs`]), and metrics in Prometheus text at
//! `GET /metrics` ([`metrics`]: counters and histograms recorded as things happen, and
//! gauges read from the store when scraped; [`http`]: every request by route pattern), and a
//! request id on every request and its log lines ([`requests`]).

pub mod http;
pub mod logs;
pub mod metrics;
pub mod otel;
pub mod requests;
pub mod settings;

pub use logs::{init, init_with};
