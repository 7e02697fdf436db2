//! The two-session executor.
//!
//! Session 1 claims (QUEUED → RUNNING, `job.started`, commit). The operation then runs with
//! no transaction open. Session 2 records SUCCEEDED or FAILED; if it cannot commit, a
//! fallback session marks the job FAILED so it never stays RUNNING.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use sea_orm::DatabaseConnection;
use tracing::{debug, error, info, warn};
use uuid::Uuid;

use crate::domain::{Job, JobStatus};
use crate::ops::{JobContext, OperationError, OperationRegistry};
use crate::store::{Completion, JobStore, StoreError};

/// Error class recorded when the outcome could not be committed.
pub const RESULT_COMMIT_FAILED: &str = "ResultCommitFailed";
/// Error class recorded when a worker has no operation of the job's name.
pub const UNKNOWN_OPERATION: &str = "UnknownOperation";
/// Error class recorded when an operation panics.
pub const OPERATION_PANICKED: &str = "OperationPanicked";

/// Tries of the fallback session, with a doubling pause starting here.
const FALLBACK_ATTEMPTS: u32 = 4;
const FALLBACK_FIRST_PAUSE: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Written to `job.owner` on claim: which worker holds the job.
    pub owner: String,
    /// How long a claim is leased before the heartbeat must renew it.
    pub lease: Duration,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Session 1 committed: the job is RUNNING and ours.
    Claimed(Box<Job>),
    /// The job exists but is not claimable (another worker has it, it was cancelled or
    /// finished, or it is waiting out a RetryLater delay).
    NotClaimable,
    /// No such job: the message is garbage and goes to the dead letters.
    Missing,
}

/// What happened to a claimed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleOutcome {
    /// The job was not claimable (or missing); nothing ran.
    NotClaimed,
    /// Ran and was recorded as this status.
    Finished(JobStatus),
    /// Asked to run again later; back to QUEUED with `run_after` set.
    RetryLater,
    /// Ran, but the job had left RUNNING meanwhile (cancelled): the outcome was dropped.
    Superseded,
    /// Ran, the outcome could not be committed, and the fallback recorded FAILED.
    ForcedFailed,
    /// Neither the outcome nor the fallback could be committed; the lease will expire.
    Unrecorded,
}

/// Runs jobs by id. Shared by every consumer of a process.
pub struct Executor {
    store: Arc<dyn JobStore>,
    registry: Arc<OperationRegistry>,
    db: DatabaseConnection,
    config: ExecutorConfig,
}

impl Executor {
    pub fn new(
        store: Arc<dyn JobStore>,
        registry: Arc<OperationRegistry>,
        db: DatabaseConnection,
        config: ExecutorConfig,
    ) -> Self {
        Executor { store, registry, db, config }
    }

    /// Claims and executes one job. `Err` only when the claim itself could not be made;
    /// the caller should then give the message back for another try.
    pub async fn handle_job(&self, id: Uuid) -> Result<HandleOutcome, StoreError> {
        match self.claim(id).await? {
            Claim::Claimed(job) => Ok(self.run(*job).await),
            Claim::NotClaimable | Claim::Missing => Ok(HandleOutcome::NotClaimed),
        }
    }

    /// Session 1: QUEUED → RUNNING, committed before anything runs.
    pub async fn claim(&self, id: Uuid) -> Result<Claim, StoreError> {
        if let Some(job) = self.store.claim(id, &self.config.owner, self.config.lease).await? {
            info!(job_id = %id, operation = %job.operation, attempt = job.attempts, "claimed");
            return Ok(Claim::Claimed(Box::new(job)));
        }
        match self.store.get(id).await? {
            Some(job) => {
                debug!(job_id = %id, status = %job.status, "not claimable, skipped");
                Ok(Claim::NotClaimable)
            }
            None => Ok(Claim::Missing),
        }
    }

    /// Executes a claimed job and records its outcome (session 2, or the fallback).
    pub async fn run(&self, job: Job) -> HandleOutcome {
        let id = job.id;
        let completion = match self.parent_cancelled(&job).await {
            true => Ok(Completion::CancelledByParent),
            false => self.execute(job).await,
        };
        match completion {
            Ok(completion) => self.record(id, completion).await,
            Err((delay, reason)) => self.retry_later(id, delay, &reason).await,
        }
    }

    async fn retry_later(&self, id: Uuid, delay: Duration, reason: &str) -> HandleOutcome {
        match self.store.requeue_later(id, delay, reason).await {
            Ok(Some(_)) => {
                info!(job_id = %id, delay_seconds = delay.as_secs_f64(), reason, "retry later");
                HandleOutcome::RetryLater
            }
            Ok(None) => HandleOutcome::Superseded,
            Err(err) => {
                let completion = Completion::Failed {
                    error_code: RESULT_COMMIT_FAILED.to_owned(),
                    message: format!("the retry-later request could not be committed: {err}"),
                };
                self.record_fallback(id, completion).await
            }
        }
    }

    async fn parent_cancelled(&self, job: &Job) -> bool {
        let Some(parent) = job.parent_job_id else {
            return false;
        };
        match self.store.get(parent).await {
            Ok(Some(parent)) => parent.status == JobStatus::Cancelled,
            Ok(None) => false,
            Err(err) => {
                warn!(job_id = %job.id, error = %err, "cannot read parent; running anyway");
                false
            }
        }
    }

    /// Runs the operation with no transaction open. A panic becomes a failure; `Err` is a
    /// request to run again after a delay.
    async fn execute(&self, job: Job) -> Result<Completion, (Duration, String)> {
        let Some(operation) = self.registry.get(&job.operation) else {
            let message = format!("this worker has no operation named {:?}", job.operation);
            return Ok(failed(UNKNOWN_OPERATION.to_owned(), message));
        };
        let payload = job.payload.clone();
        let ctx = JobContext::new(job, self.store.clone(), self.db.clone());
        match AssertUnwindSafe(operation.execute(ctx, payload)).catch_unwind().await {
            Ok(Ok(result)) => Ok(Completion::Succeeded { result }),
            Ok(Err(OperationError::Failed { class, message })) => Ok(failed(class, message)),
            Ok(Err(OperationError::RetryLater { delay, reason })) => Err((delay, reason)),
            Err(panic) => Ok(failed(OPERATION_PANICKED.to_owned(), panic_message(&panic))),
        }
    }

    /// Session 2, then the fallback session if session 2 cannot commit.
    async fn record(&self, id: Uuid, completion: Completion) -> HandleOutcome {
        let first_error = match self.store.finish(id, &completion).await {
            Ok(Some(job)) => {
                info!(job_id = %id, status = %job.status, "finished");
                return HandleOutcome::Finished(job.status);
            }
            Ok(None) => {
                info!(job_id = %id, "job left RUNNING while executing; outcome dropped");
                return HandleOutcome::Superseded;
            }
            Err(err) => err,
        };
        warn!(job_id = %id, error = %first_error, "outcome not committed; marking the job failed");
        let fallback = Completion::Failed {
            error_code: RESULT_COMMIT_FAILED.to_owned(),
            message: format!("the outcome could not be committed: {first_error}"),
        };
        self.record_fallback(id, fallback).await
    }

    /// The fallback session: records FAILED, retrying a few times with a growing pause.
    async fn record_fallback(&self, id: Uuid, fallback: Completion) -> HandleOutcome {
        let mut pause = FALLBACK_FIRST_PAUSE;
        for attempt in 1..=FALLBACK_ATTEMPTS {
            match self.store.finish(id, &fallback).await {
                Ok(Some(_)) => return HandleOutcome::ForcedFailed,
                Ok(None) => return HandleOutcome::Superseded,
                Err(err) if attempt == FALLBACK_ATTEMPTS => {
                    error!(job_id = %id, error = %err, "fallback failed too; the lease will expire");
                }
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
        HandleOutcome::Unrecorded
    }
}

fn failed(error_code: String, message: String) -> Completion {
    Completion::Failed { error_code, message }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "operation panicked".to_owned())
}
