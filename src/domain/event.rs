//! The event vocabulary of the JobEvent log: names written by the lifecycle, and levels.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Event names the lifecycle itself writes. Operations add their own dotted names.
pub struct EventName;

impl EventName {
    pub const QUEUED: &'static str = "job.queued";
    pub const STARTED: &'static str = "job.started";
    pub const SUCCEEDED: &'static str = "job.succeeded";
    pub const FAILED: &'static str = "job.failed";
    pub const CANCELLED: &'static str = "job.cancelled";
    pub const RETRIED: &'static str = "job.retried";
    pub const CANCELLED_BY_PARENT: &'static str = "job.cancelled_by_parent";
    pub const RETRY_LATER: &'static str = "job.retry_later";
    pub const RETRY_SCHEDULED: &'static str = "job.retry_scheduled";
    pub const LEASE_EXPIRED_REQUEUE: &'static str = "job.lease_expired_requeue";
    pub const LEASE_EXPIRED: &'static str = "job.lease_expired";
    pub const REQUEUED_ON_SHUTDOWN: &'static str = "job.requeued_on_shutdown";
    /// A QUEUED job was not started by its `expires_at`: CANCELLED.
    pub const EXPIRED: &'static str = "job.expired";
    /// A job its limit holds QUEUED, unsent, until the limit has room (fields: the limit,
    /// its concurrency key, and which bound holds it).
    pub const HELD: &'static str = "job.held";
    /// A job that waits QUEUED, unsent, for the jobs it depends on (`depends_on`, and how
    /// many of them have not ended: `pending`).
    pub const WAITING: &'static str = "job.waiting";
    /// Its dependencies allow the waiting job now: it queues.
    pub const DEPENDENCIES_MET: &'static str = "job.dependencies_met";
    /// A dependency failed or was cancelled (`dependency_job_id`, `dependency_status`):
    /// the waiting job is CANCELLED.
    pub const DEPENDENCY_FAILED: &'static str = "job.dependency_failed";
    /// A coordinator whose batches lived in the memory of a process that stopped (the
    /// in-process transport) is run again.
    pub const REQUEUED_BATCHES_LOST: &'static str = "job.requeued_batches_lost";
    /// A coordinator sent work to a queue that no process consumes (`queue`): it waits
    /// until a worker for that queue starts.
    pub const NO_CONSUMER: &'static str = "job.no_consumer";
    /// A coordinator sent its batches (`batches`, `queue`).
    pub const FANNED_OUT: &'static str = "job.fanned_out";
    /// A coordinator returned; its batches close it.
    pub const DEFERRED: &'static str = "job.deferred";
    /// Batches of a deferred job finished (`batches`: their indexes).
    pub const BATCHES_SUCCEEDED: &'static str = "batch.succeeded";
    /// Child jobs of a deferred job succeeded (`_progress_current`: how many so far).
    pub const CHILDREN_SUCCEEDED: &'static str = "child.succeeded";
    /// A batch or child job failed for good (`batch` or `child_job_id`, `error_code`): the
    /// parent fails.
    pub const CHILD_FAILED: &'static str = "child.failed";
}

/// Severity of an event, as shown on a timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EventLevel {
    #[default]
    Info,
    Warning,
    Error,
}

impl EventLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            EventLevel::Info => "info",
            EventLevel::Warning => "warning",
            EventLevel::Error => "error",
        }
    }
}

impl fmt::Display for EventLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventLevel {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "info" => Ok(EventLevel::Info),
            "warning" => Ok(EventLevel::Warning),
            "error" => Ok(EventLevel::Error),
            other => Err(format!("unknown event level {other:?}")),
        }
    }
}

/// An event about to be appended to a job's log.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event: String,
    pub message: Option<String>,
    pub fields: Value,
    pub level: EventLevel,
}

impl NewEvent {
    pub fn new(event: impl Into<String>) -> Self {
        NewEvent {
            event: event.into(),
            message: None,
            fields: Value::Object(Default::default()),
            level: EventLevel::Info,
        }
    }

    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    pub fn fields(mut self, fields: Value) -> Self {
        self.fields = fields;
        self
    }

    pub fn level(mut self, level: EventLevel) -> Self {
        self.level = level;
        self
    }

    /// Progress carried in `_progress_current` / `_progress_total`, written back to the job.
    pub fn progress(&self) -> (Option<i64>, Option<i64>) {
        let read = |key: &str| self.fields.get(key).and_then(Value::as_i64);
        (read("_progress_current"), read("_progress_total"))
    }
}
