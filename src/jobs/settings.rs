//! The `[jobs]` settings: what a submission may ask of time, and what a job gets when it
//! does not say (by operation, then by queue).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::{Limit, LimitRules, Rate, LOWEST_PRIORITY};

/// The longest `timeout_seconds` a job may have: a year.
pub const MAX_TIMEOUT_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobsSettings {
    /// How far ahead `run_at` / `delay_seconds` may put a job's start, in days; further is
    /// refused (422), so a typo in a year does not park a job for a century.
    pub max_delay_days: u64,
    /// Defaults of the jobs of an operation (`[jobs.operations.NAME]`); they win over the
    /// queue's.
    pub operations: BTreeMap<String, JobDefaults>,
    /// Defaults of the jobs of a queue (`[jobs.queues.NAME]`).
    pub queues: BTreeMap<String, JobDefaults>,
    /// A QUEUED job of a priority above 0 rises one level (toward 0) for every this many
    /// seconds it waits, so a steady stream of urgent work cannot starve it for good; 0:
    /// levels never change.
    pub priority_aging_seconds: f64,
    /// Most jobs one job may wait for (`depends_on`), 1 to 10,000.
    pub max_dependencies: usize,
}

/// What a job gets when its submission does not say.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobDefaults {
    /// How long one run may take (see `timeout_seconds` on `POST /jobs`).
    pub timeout_seconds: Option<f64>,
    /// The priority, 0 (first) to 9 (see `priority` on `POST /jobs`).
    pub priority: Option<u8>,
    /// At most this many of these jobs RUNNING at once, across every process and host
    /// (per concurrency key, with `concurrency_key`). An operation's limit applies to its
    /// jobs instead of their queue's.
    pub max_running: Option<u32>,
    /// At most this many starts of these jobs per `rate_period_seconds`.
    pub rate: Option<u32>,
    /// The period of `rate`, in seconds; default 1.
    pub rate_period_seconds: Option<f64>,
    /// A JSON pointer into the payload (`/tenant_id`) whose value partitions the limits:
    /// each value gets its own `max_running` and `rate`. A submission's own
    /// `concurrency_key` wins.
    pub concurrency_key: Option<String>,
}

impl JobDefaults {
    fn validate_limits(&self, kind: &str, name: &str) -> anyhow::Result<()> {
        anyhow::ensure!(self.max_running != Some(0), "jobs.{kind}.{name}.max_running must be at least 1");
        anyhow::ensure!(self.rate != Some(0), "jobs.{kind}.{name}.rate must be at least 1");
        if let Some(period) = self.rate_period_seconds {
            anyhow::ensure!(
                period.is_finite() && period > 0.0 && period <= 86_400.0,
                "jobs.{kind}.{name}.rate_period_seconds must be above 0 and at most 86400"
            );
            anyhow::ensure!(self.rate.is_some(), "jobs.{kind}.{name}.rate_period_seconds needs a rate");
        }
        if let Some(pointer) = &self.concurrency_key {
            anyhow::ensure!(
                pointer.starts_with('/'),
                "jobs.{kind}.{name}.concurrency_key must be a JSON pointer into the payload, such as \"/tenant_id\""
            );
            anyhow::ensure!(self.limits(), "jobs.{kind}.{name}.concurrency_key needs max_running or rate");
        }
        Ok(())
    }

    /// Whether these defaults limit their jobs.
    pub fn limits(&self) -> bool {
        self.max_running.is_some() || self.rate.is_some()
    }

    /// The limit of `rule` (these defaults') over the jobs of `concurrency_key`.
    pub fn limit(&self, rule: &str, concurrency_key: Option<&str>) -> Limit {
        Limit { key: Limit::key_of(rule, concurrency_key), max_running: self.max_running, rate: self.rate() }
    }

    fn rate(&self) -> Option<Rate> {
        let per = Duration::from_secs_f64(self.rate_period_seconds.unwrap_or(1.0));
        self.rate.map(|starts| Rate { starts, per })
    }
}

impl Default for JobsSettings {
    fn default() -> Self {
        JobsSettings {
            max_delay_days: 365,
            operations: BTreeMap::new(),
            queues: BTreeMap::new(),
            priority_aging_seconds: 300.0,
            max_dependencies: crate::domain::MAX_DEPENDENCIES,
        }
    }
}

impl JobsSettings {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!((1..=36_500).contains(&self.max_delay_days), "jobs.max_delay_days must be between 1 and 36500");
        let operations = self.operations.iter().map(|(name, defaults)| ("operations", name, defaults));
        let queues = self.queues.iter().map(|(name, defaults)| ("queues", name, defaults));
        for (kind, name, defaults) in operations.chain(queues) {
            if let Some(timeout) = defaults.timeout_seconds {
                anyhow::ensure!(
                    timeout > 0.0 && timeout <= MAX_TIMEOUT_SECONDS,
                    "jobs.{kind}.{name}.timeout_seconds must be above 0 and at most {MAX_TIMEOUT_SECONDS}"
                );
            }
            if let Some(priority) = defaults.priority {
                anyhow::ensure!(
                    priority <= LOWEST_PRIORITY,
                    "jobs.{kind}.{name}.priority must be 0 to {LOWEST_PRIORITY}"
                );
            }
            defaults.validate_limits(kind, name)?;
        }
        anyhow::ensure!(
            (1..=10_000).contains(&self.max_dependencies),
            "jobs.max_dependencies must be between 1 and 10000"
        );
        let aging = self.priority_aging_seconds;
        anyhow::ensure!(
            aging.is_finite() && (0.0..=MAX_TIMEOUT_SECONDS).contains(&aging),
            "jobs.priority_aging_seconds must be between 0 (off) and {MAX_TIMEOUT_SECONDS}"
        );
        Ok(())
    }

    /// How long a job waits per level it rises; `None`: levels never change.
    pub fn aging(&self) -> Option<Duration> {
        (self.priority_aging_seconds > 0.0).then(|| Duration::from_secs_f64(self.priority_aging_seconds))
    }

    /// The limit rule over jobs of `operation` on `queue`: the operation's if it sets one,
    /// else the queue's; with its name (`operation:NAME`, `queue:NAME`).
    pub fn limit_rule(&self, operation: &str, queue: &str) -> Option<(String, &JobDefaults)> {
        let of_operation = self.operations.get(operation).filter(|defaults| defaults.limits());
        let of_queue = self.queues.get(queue).filter(|defaults| defaults.limits());
        match (of_operation, of_queue) {
            (Some(defaults), _) => Some((format!("operation:{operation}"), defaults)),
            (None, Some(defaults)) => Some((format!("queue:{queue}"), defaults)),
            (None, None) => None,
        }
    }

    /// Every limit rule, for the releases.
    pub fn limit_rules(&self) -> LimitRules {
        let operations = self.operations.iter().map(|(name, defaults)| (format!("operation:{name}"), defaults));
        let queues = self.queues.iter().map(|(name, defaults)| (format!("queue:{name}"), defaults));
        operations
            .chain(queues)
            .filter(|(_, defaults)| defaults.limits())
            .fold(LimitRules::default(), |rules, (rule, defaults)| {
                rules.with(rule, defaults.max_running, defaults.rate())
            })
    }

    /// The priority a job of `operation` on `queue` gets when it asks for none.
    pub fn priority_of(&self, operation: &str, queue: &str) -> u8 {
        let of = |defaults: Option<&JobDefaults>| defaults.and_then(|defaults| defaults.priority);
        of(self.operations.get(operation)).or_else(|| of(self.queues.get(queue))).unwrap_or(0)
    }

    /// The furthest start a submission may ask for, from now.
    pub fn horizon(&self) -> Duration {
        Duration::from_secs(self.max_delay_days * 24 * 3600)
    }

    /// The timeout a job of `operation` on `queue` gets when it asks for none.
    pub fn timeout_of(&self, operation: &str, queue: &str) -> Option<f64> {
        let of = |defaults: Option<&JobDefaults>| defaults.and_then(|defaults| defaults.timeout_seconds);
        of(self.operations.get(operation)).or_else(|| of(self.queues.get(queue)))
    }
}
