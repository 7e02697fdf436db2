//! The `[jobs]` settings: what a submission may ask of time.

use std::time::Duration;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobsSettings {
    /// How far ahead `run_at` / `delay_seconds` may put a job's start, in days; further is
    /// refused (422), so a typo in a year does not park a job for a century.
    pub max_delay_days: u64,
}

impl Default for JobsSettings {
    fn default() -> Self {
        JobsSettings { max_delay_days: 365 }
    }
}

impl JobsSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!((1..=36_500).contains(&self.max_delay_days), "jobs.max_delay_days must be between 1 and 36500");
        Ok(())
    }

    /// The furthest start a submission may ask for, from now.
    pub fn horizon(&self) -> Duration {
        Duration::from_secs(self.max_delay_days * 24 * 3600)
    }
}
