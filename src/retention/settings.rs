//! The `[retention]` settings: how long finished jobs' history is kept, and the cleaner's pace.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionSettings {
    /// Run the cleaner in this process.
    pub enabled: bool,
    /// Milliseconds between passes.
    pub interval_ms: u64,
    /// Most jobs per transaction: each batch of history is deleted in one transaction,
    /// sized to last a few milliseconds, at most this many.
    pub batch: u64,
    /// Days after a job ended SUCCEEDED, FAILED or CANCELLED before its row, its children
    /// and all their events are deleted; 0 keeps that history.
    pub succeeded_days: f64,
    pub failed_days: f64,
    pub cancelled_days: f64,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            enabled: true,
            interval_ms: 60_000,
            batch: 500,
            succeeded_days: 7.0,
            failed_days: 30.0,
            cancelled_days: 7.0,
        }
    }
}

impl RetentionSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        for (name, days) in
            [("succeeded", self.succeeded_days), ("failed", self.failed_days), ("cancelled", self.cancelled_days)]
        {
            anyhow::ensure!(days.is_finite() && days >= 0.0, "retention.{name}_days must be 0 or more");
        }
        anyhow::ensure!(self.batch >= 1, "retention.batch must be at least 1");
        anyhow::ensure!(self.interval_ms >= 1, "retention.interval_ms must be at least 1");
        Ok(())
    }
}
