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

/// What happened to a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleOutcome {
    /// The job was missing or not QUEUED: another worker has it, or it was cancelled.
    NotClaimed,
    /// Ran and was recorded as this status.
    Finished(JobStatus),
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
        Executor {
            store,
            registry,
            db,
            config,
        }
    }

    /// Claims and executes one job. `Err` only when the claim itself could not be made;
    /// the caller should then give the message back for another try.
    pub async fn handle_job(&self, id: Uuid) -> Result<HandleOutcome, StoreError> {
        let Some(job) = self
            .store
            .claim(id, &self.config.owner, self.config.lease)
            .await?
        else {
            debug!(job_id = %id, "not claimable, skipped");
            return Ok(HandleOutcome::NotClaimed);
        };
        info!(job_id = %id, operation = %job.operation, attempt = job.attempts, "claimed");
        let completion = match self.parent_cancelled(&job).await {
            true => Completion::CancelledByParent,
            false => self.execute(job).await,
        };
        Ok(self.record(id, completion).await)
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

    /// Runs the operation with no transaction open. A panic becomes a failure.
    async fn execute(&self, job: Job) -> Completion {
        let Some(operation) = self.registry.get(&job.operation) else {
            let message = format!("this worker has no operation named {:?}", job.operation);
            return failed(OperationError::new(UNKNOWN_OPERATION, message));
        };
        let payload = job.payload.clone();
        let ctx = JobContext::new(job, self.store.clone(), self.db.clone());
        match AssertUnwindSafe(operation.execute(ctx, payload))
            .catch_unwind()
            .await
        {
            Ok(Ok(result)) => Completion::Succeeded { result },
            Ok(Err(err)) => failed(err),
            Err(panic) => failed(OperationError::new(
                OPERATION_PANICKED,
                panic_message(&panic),
            )),
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

fn failed(err: OperationError) -> Completion {
    Completion::Failed {
        error_code: err.class,
        message: err.message,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "operation panicked".to_owned())
}
