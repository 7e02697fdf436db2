//! The values the store's roles take and give: runs, completions and requeues, submissions
//! and cancellations, filters and pages, what maintenance found, and the store's errors.

use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::domain::{EventName, InvalidTransition, Job, JobStatus, JobSummary};

/// What one [`Maintenance::prune`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Top-level jobs, and their children.
    pub jobs: u64,
    pub children: u64,
    pub events: u64,
    /// How long the delete held its write transaction (on SQLite, the one writer's turn):
    /// what the cleaner sizes its next batch and its pause by.
    pub held: std::time::Duration,
}

/// See [`Reduce::batch_rows`].
#[derive(Debug, Clone)]
pub struct BatchRows {
    /// The output recorded for the batch and handed to `reduce`.
    pub kept: Value,
    /// Rows to insert beside the count; make it idempotent (`ON CONFLICT DO NOTHING`).
    pub insert: Option<sea_orm::sea_query::InsertStatement>,
}

/// What [`RunWrites::record_batch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchRecorded {
    /// Counted; `closed` is the parent's new status when this outcome closed it.
    Counted { closed: Option<JobStatus> },
    /// This batch of this run was recorded before: nothing changed.
    Duplicate,
    /// The parent's run is no longer RUNNING (finished, cancelled or re-run): dropped.
    ParentGone,
}

/// The result of [`JobCommands::submit`].
#[derive(Debug, Clone)]
pub struct Submission {
    pub job: Job,
    /// False when an earlier submission with the same idempotency key created the job.
    pub created: bool,
}

/// A job to publish, as it was when read: `attempts` tells this QUEUED stint from a later
/// one, so a late publication record cannot mark a job that has since been re-queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch {
    pub id: Uuid,
    pub queue: String,
    pub attempts: i32,
    /// The level its message goes out at: the job's `effective_priority`, 0 first.
    pub priority: u8,
}

impl Dispatch {
    /// The publication of `job` as it is now.
    pub fn of(job: &Job) -> Dispatch {
        Dispatch {
            id: job.id,
            queue: job.queue.clone(),
            attempts: job.attempts,
            priority: level(job.effective_priority),
        }
    }
}

/// A stored priority as a level, 0 to [`crate::domain::LOWEST_PRIORITY`] (a row outside
/// that range, written by hand, goes last).
pub fn level(stored: i16) -> u8 {
    u8::try_from(stored).unwrap_or(crate::domain::LOWEST_PRIORITY).min(crate::domain::LOWEST_PRIORITY)
}

/// What [`crate::store::DispatchBook::release`] admitted.
#[derive(Debug, Clone, Default)]
pub struct Released {
    /// The held jobs admitted, to be sent.
    pub jobs: Vec<Dispatch>,
    /// When nothing was admitted because a rate is used up: how long until it has room.
    pub retry_in: Option<std::time::Duration>,
    /// The limit held no job: nothing waits for its room.
    pub nothing_held: bool,
}

/// What settling waiting jobs did ([`crate::store::DispatchBook::settle_dependents`]).
#[derive(Debug, Clone, Default)]
pub struct Settled {
    /// Jobs whose dependencies allow them now and that may be sent at once.
    pub released: Vec<Dispatch>,
    /// Jobs that queued, those a limit still holds or that wait for a time included.
    pub queued: usize,
    /// Jobs cancelled because a dependency failed.
    pub cancelled: usize,
}

/// A job another waits for, or that waits for another, as `GET /jobs/{id}/dependencies`
/// shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct Linked {
    pub id: Uuid,
    pub operation: String,
    pub status: JobStatus,
    /// Set while the job itself waits for its dependencies.
    pub waiting_since: Option<chrono::DateTime<chrono::Utc>>,
}

/// What a waiter or an access check needs of a job: its status and room, read without the
/// rest of its row (a coordinator's holds megabytes of inputs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobHead {
    pub status: JobStatus,
    pub room: String,
}

/// A job's dependencies and dependents.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct Links {
    /// The jobs it waits for (or waited for), oldest first.
    pub dependencies: Vec<Linked>,
    /// The jobs that wait for it, oldest first.
    pub dependents: Vec<Linked>,
}

/// A dependency's outcome, as the waiting job's operation reads it from its context.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DependencyResult {
    pub id: Uuid,
    pub operation: String,
    pub status: JobStatus,
    pub result: Option<Value>,
    pub error_code: Option<String>,
}

/// The result of [`JobCommands::cancel`].
#[derive(Debug, Clone)]
pub struct Cancellation {
    pub job: Job,
    /// False when the job was already terminal (a no-op).
    pub changed: bool,
    /// The descendants cancelled with it.
    pub descendants: Vec<Uuid>,
}

/// One claimed run of a job: its id and the `attempts` value its claim set. Every write a
/// worker makes about its run names it, so a run the reaper or a shutdown took away can
/// never finish, extend or requeue a later run of the same job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunRef {
    pub id: Uuid,
    pub attempt: i32,
}

impl From<&Job> for RunRef {
    fn from(job: &Job) -> Self {
        RunRef { id: job.id, attempt: job.attempts }
    }
}

/// How a RUNNING job ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    Succeeded {
        result: Value,
    },
    /// The operation failed for good (no retry left, or not retryable).
    Failed {
        error_code: String,
        message: String,
    },
    /// Its parent was cancelled between claim and execute; it never ran.
    CancelledByParent,
    /// The reaper gave up on a run whose lease kept expiring (only while it is expired).
    LeaseExpired {
        message: String,
    },
}

impl Completion {
    pub fn status(&self) -> JobStatus {
        match self {
            Completion::Succeeded { .. } => JobStatus::Succeeded,
            Completion::Failed { .. } | Completion::LeaseExpired { .. } => JobStatus::Failed,
            Completion::CancelledByParent => JobStatus::Cancelled,
        }
    }

    /// The event the run's ending writes.
    pub fn event(&self) -> &'static str {
        match self {
            Completion::Succeeded { .. } => EventName::SUCCEEDED,
            Completion::Failed { .. } => EventName::FAILED,
            Completion::CancelledByParent => EventName::CANCELLED_BY_PARENT,
            Completion::LeaseExpired { .. } => EventName::LEASE_EXPIRED,
        }
    }
}

/// Why a RUNNING job goes back to QUEUED.
#[derive(Debug, Clone, PartialEq)]
pub enum Requeue {
    /// The operation asked to run again after `delay` (a busy resource); not a failure.
    RetryLater { delay: Duration, reason: String },
    /// Failure number `failure` of the job; the retry policy allows another try after `delay`.
    RetryAfterFailure { failure: i32, delay: Duration, error_code: String, message: String },
    /// The worker is shutting down and could not finish within its grace period.
    Shutdown,
    /// The reaper found the lease expired (only while it still is).
    LeaseExpired,
    /// A coordinator's batches were held by a transport that kept nothing across the
    /// restart of its process (in-process): the coordinator runs again.
    BatchesLost,
}

impl Requeue {
    /// The event the requeue writes.
    pub fn event(&self) -> &'static str {
        match self {
            Requeue::RetryLater { .. } => EventName::RETRY_LATER,
            Requeue::RetryAfterFailure { .. } => EventName::RETRY_SCHEDULED,
            Requeue::Shutdown => EventName::REQUEUED_ON_SHUTDOWN,
            Requeue::LeaseExpired => EventName::LEASE_EXPIRED_REQUEUE,
            Requeue::BatchesLost => EventName::REQUEUED_BATCHES_LOST,
        }
    }
}

/// What a failure of `job`'s current run writes: a retry after its policy's delay while
/// its policy retries the class and retries are left, else FAILED. The one rule for every
/// place a run fails (a worker, a remote worker's report, the reaper's timeout).
pub fn after_failure(job: &Job, error_code: String, message: String) -> Result<Requeue, Completion> {
    let failure = job.failures + 1;
    match job.retry_policy.next_delay(job.max_retries, failure, &error_code, jitter()) {
        Some(delay) => Ok(Requeue::RetryAfterFailure { failure, delay, error_code, message }),
        None => Err(Completion::Failed { error_code, message }),
    }
}

/// A number in [0, 1) to spread retries; randomness from a v4 UUID, no extra dependency.
fn jitter() -> f64 {
    (Uuid::new_v4().as_u128() % 1_000_000) as f64 / 1_000_000.0
}

/// A RUNNING job whose lease expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredLease {
    pub run: RunRef,
    /// `job.lease_expired_requeue` events so far.
    pub requeues: i64,
}

/// Filters for [`JobReads::list`].
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    /// Only jobs of these rooms; `None`: every room.
    pub rooms: Option<Vec<String>>,
    pub status: Option<JobStatus>,
    pub operation: Option<String>,
    pub queue: Option<String>,
    pub parent_job_id: Option<Uuid>,
    /// Only jobs older than this id (the cursor).
    pub before: Option<Uuid>,
    /// Only jobs with this id or a newer one (ids are UUIDv7: a creation time's floor).
    pub not_before: Option<Uuid>,
    pub idempotency_key: Option<String>,
    pub limit: u64,
}

/// One page of [`JobReads::list`].
#[derive(Debug, Clone)]
pub struct Page {
    pub jobs: Vec<JobSummary>,
    /// Pass as `before` for the next page; `None` on the last page.
    pub next_cursor: Option<Uuid>,
}

impl StoreError {
    /// True when the database could not be reached at all (no connection, the server
    /// shutting down or restarting): nothing was written, and trying again later may work.
    pub fn is_unavailable(&self) -> bool {
        use sea_orm::{DbErr, RuntimeErr};
        let runtime = match self {
            StoreError::Unavailable(_) | StoreError::Database(DbErr::ConnectionAcquire(_) | DbErr::Conn(_)) => {
                return true
            }
            StoreError::Database(DbErr::Exec(runtime) | DbErr::Query(runtime)) => runtime,
            _ => return false,
        };
        let RuntimeErr::SqlxError(err) = runtime else { return false };
        match err.as_ref() {
            sea_orm::sqlx::Error::Io(_)
            | sea_orm::sqlx::Error::PoolTimedOut
            | sea_orm::sqlx::Error::PoolClosed
            | sea_orm::sqlx::Error::WorkerCrashed => true,
            // SQLSTATE classes 08 (connection exception) and 57 (operator intervention:
            // shutting down, cannot connect now).
            sea_orm::sqlx::Error::Database(db) => {
                db.code().is_some_and(|code| code.starts_with("08") || code.starts_with("57"))
            }
            _ => false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("job {0} not found")]
    NotFound(Uuid),
    #[error(transparent)]
    InvalidTransition(#[from] InvalidTransition),
    #[error("idempotency key {0:?} was already used for a different job")]
    IdempotencyConflict(String),
    /// A job named in `depends_on` does not exist in the job's room.
    #[error("no job with id {0} in the job's room to depend on")]
    DependencyNotFound(Uuid),
    /// A job named in `depends_on` has already failed or been cancelled, and the new job
    /// would be cancelled for it at once.
    #[error("dependency {id} is already {status}; submit with on_dependency_failure \"run\" to run anyway")]
    DependencyFailed { id: Uuid, status: JobStatus },
    #[error("database error: {0}")]
    Database(#[from] sea_orm::DbErr),
    #[error("stored row is unreadable: {0}")]
    Corrupt(String),
    /// The database could not be reached (a write shared with others in a group commit,
    /// say): the error as text, known to be a connection failure.
    #[error("database unreachable: {0}")]
    Unavailable(String),
}
