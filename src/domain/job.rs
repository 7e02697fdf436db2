//! The job as the rest of the system sees it, and what a submission carries.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{EventLevel, JobStatus, RetryPolicy, RoomId};

/// A job as the store holds it. The struct is the `job` table's SeaORM entity too: rows
/// decode straight into it (no second copy of the columns to keep in step), and the API
/// serves it as it is.
pub type Job = row::Model;

/// The `job` table (migrations create it; `store::entity::job` names it for the store).
pub mod row {
    use chrono::{DateTime, Utc};
    use sea_orm::entity::prelude::*;
    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    use crate::domain::{JobStatus, RetryPolicy};

    /// A job row, read from the store.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, DeriveEntityModel)]
    #[sea_orm(table_name = "job")]
    #[schema(as = Job)]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub id: Uuid,
        /// The room (tenant) the job belongs to; its children belong to it too.
        pub room: String,
        pub operation: String,
        pub queue: String,
        pub status: JobStatus,
        pub payload: Value,
        pub result: Option<Value>,
        /// The coordinator this job belongs to, if any.
        pub parent_job_id: Option<Uuid>,
        pub progress_current: i64,
        pub progress_total: Option<i64>,
        /// Claims so far, including the running one.
        pub attempts: i32,
        pub max_retries: i32,
        /// Error class of the last failure (for example `ValueError`, `ResultCommitFailed`).
        pub error_code: Option<String>,
        pub error_message: Option<String>,
        pub idempotency_key: Option<String>,
        pub created_at: DateTime<Utc>,
        pub started_at: Option<DateTime<Utc>>,
        pub finished_at: Option<DateTime<Utc>>,
        /// Until when the claiming worker owns the job; renewed by its heartbeat.
        pub leased_until: Option<DateTime<Utc>>,
        /// The worker holding the lease.
        pub owner: Option<String>,
        /// A QUEUED job is not claimed before this time (RetryLater, retry backoff).
        pub run_after: Option<DateTime<Utc>>,
        /// When the transport confirmed the job's message; `None` means the dispatch sweep
        /// must (re)send it.
        pub published_at: Option<DateTime<Utc>>,
        /// Attempts that ended in a failure so far (retries with backoff count these).
        pub failures: i32,
        /// How failures are retried, up to `max_retries`.
        #[sea_orm(column_type = "Json")]
        pub retry_policy: RetryPolicy,
        /// How this run fanned out (`batches` or `children`), if it did: its batches' outcomes
        /// or children's endings then advance `progress_current`, and the one that reaches
        /// `progress_total` closes it.
        pub fan_out: Option<String>,
        /// When this run of a coordinator returned with its work handed on: it holds no lease
        /// from then on.
        pub deferred_at: Option<DateTime<Utc>>,
        /// The user of the token that submitted it (a child: its parent's submitter); `None`
        /// for jobs submitted before users were recorded, and by the server itself.
        pub submitted_by: Option<String>,
        /// The service an uploaded script runs under (`run_script` jobs): its quotas and limits.
        pub service: Option<String>,
        /// When the cleaner removed the job's files (`run_script` jobs past their service's
        /// `max_age_hours`): its row and events stay, its result is gone (410).
        pub cleaned_at: Option<DateTime<Utc>>,
        /// How long one run may take: past it the run is stopped and fails `Timeout`
        /// (retried by the policy). `None`: no limit of its own.
        pub timeout_seconds: Option<f64>,
        /// A job not started by then is CANCELLED (`job.expired`).
        pub expires_at: Option<DateTime<Utc>>,
        /// 0 (first) to 9 (last), as submitted or defaulted: within a queue, a runnable job
        /// of a lower number starts before any of a higher one.
        #[schema(minimum = 0, maximum = 9)]
        pub priority: i16,
        /// The level dispatch and claims use: `priority`, raised one level (toward 0) for
        /// every `jobs.priority_aging_seconds` the job waits, so a low one is not starved.
        #[schema(minimum = 0, maximum = 9)]
        pub effective_priority: i16,
        /// When this QUEUED job's `effective_priority` next rises; `None` at level 0 or
        /// with aging off.
        pub ages_at: Option<DateTime<Utc>>,
        /// The limit it is counted under (its operation's or queue's `max_running` or
        /// `rate`): the rule, then a unit separator (U+001F) and its concurrency key when
        /// the limit is partitioned. `None`: no limit.
        pub limit_key: Option<String>,
        /// `limit_key` when its limit has a `rate`, whose window counts the job's starts;
        /// the store's own (an index of starts for rates only), not served.
        #[serde(skip)]
        pub rate_key: Option<String>,
        /// Since when the job is held QUEUED by its limit, neither sent nor claimable, until
        /// the limit allows it; `None` once admitted (or never held).
        pub held_since: Option<DateTime<Utc>>,
        /// The key a `unique` submission was made under (its own, or `auto:` and a digest
        /// of its operation, queue and payload): a later one of the same key, in the same
        /// room, within its window, gets this job back.
        pub unique_key: Option<String>,
        /// Since when the job waits for its dependencies (`depends_on`): QUEUED and held
        /// (`held_since`), neither sent nor claimable, until every one has succeeded (or
        /// ended, with `on_dependency_failure` `run`); `None` once they allowed it, or
        /// for a job with none.
        pub waiting_since: Option<DateTime<Utc>>,
        /// Whether jobs wait for this one: its ending settles them.
        pub has_dependents: bool,
        /// What a dependency's failure or cancellation does to this job: `cancel` (it is
        /// CANCELLED, `job.dependency_failed`) or `run`; `None` for a job with no
        /// dependencies.
        pub on_dependency_failure: Option<String>,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// A job as a list shows it: everything but the payload, the result and the retry policy
/// (`GET /jobs/{id}` has them), and the error message cut to [`JobSummary::MESSAGE_CHARS`],
/// so a page's size does not depend on what clients submitted. Decoded from the `job`
/// table's columns by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema, sea_orm::FromQueryResult)]
pub struct JobSummary {
    pub id: Uuid,
    pub room: String,
    pub operation: String,
    pub queue: String,
    pub status: JobStatus,
    pub parent_job_id: Option<Uuid>,
    pub progress_current: i64,
    pub progress_total: Option<i64>,
    pub attempts: i32,
    pub max_retries: i32,
    pub error_code: Option<String>,
    /// The first [`JobSummary::MESSAGE_CHARS`] characters of the error message.
    pub error_message: Option<String>,
    pub idempotency_key: Option<String>,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub leased_until: Option<DateTime<Utc>>,
    pub owner: Option<String>,
    pub run_after: Option<DateTime<Utc>>,
    pub failures: i32,
    pub fan_out: Option<String>,
    pub deferred_at: Option<DateTime<Utc>>,
    pub priority: i16,
    pub effective_priority: i16,
    pub limit_key: Option<String>,
    pub held_since: Option<DateTime<Utc>>,
    pub waiting_since: Option<DateTime<Utc>>,
}

impl JobSummary {
    /// Characters of the error message a summary keeps.
    pub const MESSAGE_CHARS: usize = 500;
}

/// One entry in a job's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobEvent {
    pub id: i64,
    pub job_id: Uuid,
    pub ts: DateTime<Utc>,
    pub event: String,
    pub message: Option<String>,
    pub fields: Value,
    pub level: EventLevel,
}

/// A validated submission, ready to insert.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    /// Checked against the submitter's grants by the API; a child's is its parent's.
    pub room: RoomId,
    pub operation: String,
    pub queue: QueueName,
    pub payload: Value,
    pub parent_job_id: Option<Uuid>,
    pub max_retries: i32,
    pub retry_policy: RetryPolicy,
    pub idempotency_key: Option<String>,
    /// Its submitter publishes it right after the commit (`dispatch::Dispatcher`): the row
    /// is written as published, so the sweep does not send it again and no second write
    /// records the publication. In process a send cannot be lost while the process lives;
    /// on a durable transport [`Self::outbox`] covers the time until the confirm.
    pub announced: bool,
    /// With a durable transport, the submission's row of the dispatch outbox: the job is
    /// written published (as `announced`) and named by that row until the transport
    /// confirmed its message; a row left behind (a crash, a failed publish) hands its jobs
    /// back to the dispatch sweep. `None`: no outbox row.
    pub outbox: Option<Uuid>,
    /// The id to insert it under; `None` for a fresh one. An upload names its job before
    /// the row exists, so its files are in place under that id when the row appears.
    pub id: Option<Uuid>,
    /// See [`Job::submitted_by`].
    pub submitted_by: Option<String>,
    /// See [`Job::service`].
    pub service: Option<String>,
    /// Not to start before this time (`run_at`, `delay_seconds`); `None`: at once. A
    /// job that waits for its time is not announced at its commit: the dispatch sweep
    /// sends it when it is due.
    pub run_after: Option<DateTime<Utc>>,
    /// See [`Job::timeout_seconds`].
    pub timeout_seconds: Option<f64>,
    /// See [`Job::expires_at`].
    pub expires_at: Option<DateTime<Utc>>,
    /// See [`Job::priority`]: 0 to [`LOWEST_PRIORITY`].
    pub priority: u8,
    /// See [`Job::ages_at`]: set by the dispatcher, which raises waiting jobs.
    pub ages_at: Option<DateTime<Utc>>,
    /// The limit the job is counted under, if one applies (see [`Job::limit_key`]).
    pub limit: Option<super::Limit>,
    /// Made only if no job of the same key is in one of the states within the window.
    pub unique: Option<Unique>,
    /// The jobs this one waits for (in its room; at most `jobs.max_dependencies`): it
    /// queues once every one has succeeded (or ended, with [`super::OnDependencyFailure::Run`]).
    pub depends_on: Vec<Uuid>,
    /// What a dependency's failure does to it.
    pub on_dependency_failure: super::OnDependencyFailure,
}

/// What makes a submission a repeat of an earlier job (Oban's unique jobs): the same key
/// in the same room, the earlier job created within `window` and now in one of `states`.
#[derive(Debug, Clone, PartialEq)]
pub struct Unique {
    pub key: String,
    pub window: std::time::Duration,
    pub states: Vec<JobStatus>,
}

/// The last of the priorities: 0 starts first, this last.
pub const LOWEST_PRIORITY: u8 = 9;

impl NewJob {
    /// A submission of `operation` in the default room with an empty payload on the default
    /// queue, no retries and no idempotency key.
    pub fn new(operation: impl Into<String>) -> NewJob {
        NewJob {
            room: RoomId::default(),
            operation: operation.into(),
            queue: QueueName::default(),
            payload: Value::Object(Default::default()),
            parent_job_id: None,
            max_retries: 0,
            retry_policy: RetryPolicy::default(),
            idempotency_key: None,
            announced: false,
            outbox: None,
            id: None,
            submitted_by: None,
            service: None,
            run_after: None,
            timeout_seconds: None,
            expires_at: None,
            priority: 0,
            ages_at: None,
            limit: None,
            unique: None,
            depends_on: Vec::new(),
            on_dependency_failure: super::OnDependencyFailure::Cancel,
        }
    }

    /// Whether two submissions ask for the same job (as [`NewJob::matches`]).
    pub fn matches_new(&self, other: &NewJob) -> bool {
        let asked = Asked::of_new(other);
        Asked::of_new(self) == asked
    }

    /// True when `job` is what this submission would have created: the test for
    /// whether a reused idempotency key is a retry or a conflict. Every field a client
    /// chooses counts, retries included.
    pub fn matches(&self, job: &Job) -> bool {
        let asked = Asked {
            room: &job.room,
            operation: &job.operation,
            queue: &job.queue,
            payload: &job.payload,
            parent_job_id: job.parent_job_id,
            max_retries: job.max_retries,
            retry_policy: &job.retry_policy,
            timeout_seconds: job.timeout_seconds,
            priority: job.priority,
        };
        Asked::of_new(self) == asked
    }
}

/// What a submission asks for, borrowed: the fields an idempotent repeat must match.
#[derive(PartialEq)]
struct Asked<'a> {
    room: &'a str,
    operation: &'a str,
    queue: &'a str,
    payload: &'a Value,
    parent_job_id: Option<Uuid>,
    max_retries: i32,
    retry_policy: &'a RetryPolicy,
    /// Times that count from the submission (`run_at` from `delay_seconds`, `expires_at`
    /// from `queue_timeout_seconds`) differ between a request and its repeat: not compared.
    timeout_seconds: Option<f64>,
    priority: i16,
}

impl<'a> Asked<'a> {
    fn of_new(new: &'a NewJob) -> Self {
        Asked {
            room: new.room.as_str(),
            operation: &new.operation,
            queue: new.queue.as_str(),
            payload: &new.payload,
            parent_job_id: new.parent_job_id,
            max_retries: new.max_retries,
            retry_policy: &new.retry_policy,
            timeout_seconds: new.timeout_seconds,
            priority: i16::from(new.priority),
        }
    }
}

/// The operation of uploaded `run.sh` jobs; also the key their claimers wait under.
pub const RUN_SCRIPT: &str = "run_script";

/// A queue name: 1-64 characters of `[A-Za-z0-9._-]`, safe as an AMQP queue name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct QueueName(String);

impl QueueName {
    pub const DEFAULT: &'static str = "default";
    /// Where jobs of registered types wait: claimed by remote workers over HTTP, never
    /// published to the transport. No client can name it (`@` is not a queue character).
    pub const REMOTE: &'static str = "@remote";

    /// The queue of registered types' jobs ([`QueueName::REMOTE`]).
    pub fn remote() -> Self {
        QueueName(QueueName::REMOTE.to_owned())
    }

    pub fn is_remote(&self) -> bool {
        self.0 == QueueName::REMOTE
    }

    /// Where uploaded scripts wait (operation [`RUN_SCRIPT`]): claimed by script hosts
    /// under their service's quotas, never published to the transport.
    pub const SCRIPTS: &'static str = "@scripts";

    pub fn scripts() -> Self {
        QueueName(QueueName::SCRIPTS.to_owned())
    }

    /// True for a queue whose jobs are claimed by whoever runs them ([`QueueName::REMOTE`],
    /// [`QueueName::SCRIPTS`]) rather than sent to a consumer by the transport.
    pub fn is_pulled(&self) -> bool {
        QueueName::pulled(&self.0)
    }

    /// [`QueueName::is_pulled`] of a stored queue name.
    pub fn pulled(name: &str) -> bool {
        name.starts_with('@')
    }

    pub fn parse(name: &str) -> Result<Self, String> {
        let valid_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if name.is_empty() || name.len() > 64 || !name.chars().all(valid_char) {
            return Err(format!("queue name {name:?} must be 1-64 characters of letters, digits, '.', '_' or '-'"));
        }
        Ok(QueueName(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for QueueName {
    fn default() -> Self {
        QueueName(QueueName::DEFAULT.to_owned())
    }
}

impl TryFrom<String> for QueueName {
    type Error = String;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        QueueName::parse(&value)
    }
}

impl From<QueueName> for String {
    fn from(value: QueueName) -> Self {
        value.0
    }
}

impl std::fmt::Display for QueueName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::QueueName;

    #[test]
    fn queue_names_are_checked() {
        assert!(QueueName::parse("default").is_ok());
        assert!(QueueName::parse("gpu.embeddings-2_a").is_ok());
        for bad in ["", "has space", "slash/no", &"x".repeat(65)] {
            assert!(QueueName::parse(bad).is_err(), "{bad:?}");
        }
    }
}
