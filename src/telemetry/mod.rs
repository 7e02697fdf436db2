//! What yardmaster tells its operators: logs ([`logs`]), and metrics in Prometheus text at
//! `GET /metrics` ([`metrics`]: counters and histograms recorded as things happen, and
//! gauges read from the store when scraped; [`http`]: every request by route pattern).

pub mod http;
pub mod logs;
pub mod metrics;
pub mod scrape;

pub use logs::init;
