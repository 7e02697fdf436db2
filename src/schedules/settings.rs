//! The `[scheduler]` settings (how the scheduler of every process runs) and the schedules
//! declared under `[schedules.NAME]`, created or brought up to date at start.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::spec::{CatchUp, Overlap, Spec};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSettings {
    /// Run the scheduler in this process. Any number of processes may: each tick is
    /// decided once, in the store, whichever decides it.
    pub enabled: bool,
    /// The longest sleep between passes, in ms; a pass also runs at the next fire time.
    pub interval_ms: u64,
    /// Most schedules decided in one pass (another follows at once when it was full).
    pub batch: u64,
    /// Schedules a pass works on at once (each schedule's ticks stay in order).
    pub concurrency: usize,
    /// How late a tick may be and still fire under `catch_up = "none"`, in ms.
    pub misfire_grace_ms: u64,
    /// A tick decided to fire whose job is still unrecorded after this many ms (its
    /// scheduler died in between) is finished by any scheduler: the same job, by its key.
    pub settle_ms: u64,
    /// A schedule's log keeps ticks this many days (its jobs go by `[retention]`).
    pub keep_ticks_days: u64,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        SchedulerSettings {
            enabled: true,
            interval_ms: 1000,
            batch: 100,
            concurrency: 8,
            misfire_grace_ms: 60_000,
            settle_ms: 5000,
            keep_ticks_days: 30,
        }
    }
}

impl SchedulerSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (10..=60_000).contains(&self.interval_ms),
            "scheduler.interval_ms must be between 10 and 60000"
        );
        anyhow::ensure!((1..=10_000).contains(&self.batch), "scheduler.batch must be between 1 and 10000");
        anyhow::ensure!((1..=256).contains(&self.concurrency), "scheduler.concurrency must be between 1 and 256");
        anyhow::ensure!(self.settle_ms >= 100, "scheduler.settle_ms must be at least 100");
        anyhow::ensure!((1..=36_500).contains(&self.keep_ticks_days), "scheduler.keep_ticks_days must be 1-36500");
        Ok(())
    }
}

/// A schedule kept in `config.toml`: `[schedules.NAME]`, the fields of `POST /schedules`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredSchedule {
    /// Its room; default `@global`.
    #[serde(default)]
    pub room: Option<String>,
    #[serde(default)]
    pub cron: Option<String>,
    #[serde(default)]
    pub every_seconds: Option<f64>,
    #[serde(default)]
    pub timezone: Option<String>,
    /// The job each tick submits (`operation`, `payload`, `queue`, retries, timeouts).
    pub job: Value,
    #[serde(default)]
    pub overlap: Option<Overlap>,
    #[serde(default)]
    pub catch_up: Option<CatchUp>,
    #[serde(default)]
    pub max_catch_up: Option<u32>,
    #[serde(default)]
    pub paused: Option<bool>,
}

/// The times of every declared schedule must parse, so a typo stops the start, not a tick.
pub fn validate_declared(declared: &BTreeMap<String, DeclaredSchedule>) -> anyhow::Result<()> {
    for (name, schedule) in declared {
        Spec::parse(schedule.cron.as_deref(), schedule.every_seconds, schedule.timezone.as_deref())
            .map_err(|err| anyhow::anyhow!("schedules.{name}: {}", err.detail))?;
        anyhow::ensure!(schedule.job.is_object(), "schedules.{name}.job must be a table (operation, payload, …)");
    }
    Ok(())
}
