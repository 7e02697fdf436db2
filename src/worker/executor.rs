//! The two-session executor.
//!
//! Session 1 claims (QUEUED → RUNNING, `job.started`, commit). The operation then runs with
//! no transaction open. Session 2 records the outcome for this run: SUCCEEDED, FAILED, a
//! retry after a failure (the job's retry policy), or RetryLater. While the database cannot
//! be reached, session 2 is tried again until it can (a blink never fails a job); if it
//! cannot commit for another reason, a fallback session marks the job FAILED so it never
//! stays RUNNING.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};
use uuid::Uuid;

use serde_json::Value;

use crate::domain::{nul_pointer, scrub_nul, Job, JobStatus};
use crate::ops::{JobContext, OperationError, OperationRegistry, Services};
use crate::store::{after_failure, Completion, Dispatch, Requeue, RunRef, StoreError};

/// Error class recorded when the outcome could not be committed.
pub const RESULT_COMMIT_FAILED: &str = "ResultCommitFailed";
/// Error class recorded when a worker has no operation of the job's name.
pub const UNKNOWN_OPERATION: &str = "UnknownOperation";
/// Error class recorded when an operation panics.
pub const OPERATION_PANICKED: &str = "OperationPanicked";
/// Error class recorded when a result cannot be stored (it holds a NUL character).
pub const INVALID_RESULT: &str = "InvalidResult";
/// Error class recorded when a run outlived its job's `timeout_seconds`.
pub const TIMEOUT: &str = "Timeout";
/// How long a run past its timeout has, once told to stop, before it is abandoned.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Tries of the fallback session, with a doubling pause starting here.
const FALLBACK_ATTEMPTS: u32 = 4;
const FALLBACK_FIRST_PAUSE: Duration = Duration::from_millis(50);
/// Longest pause between writes of an outcome while the database is unreachable.
const MAX_UNREACHABLE_PAUSE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// Written to `job.owner` on claim: which worker holds the job.
    pub owner: String,
    /// How long a claim is leased; the heartbeat renews it.
    pub lease: Duration,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Session 1 committed: the job is RUNNING and ours.
    Claimed(Box<Job>),
    /// The job exists but is not claimable (another worker has it, it was cancelled or
    /// finished, or it is waiting out a delay).
    NotClaimable,
    /// No such job: the message is garbage and goes to the dead letters.
    Missing,
}

/// What happened to a claimed job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleOutcome {
    /// Ran and was recorded as this status.
    Finished(JobStatus),
    /// Fanned out and returned: RUNNING until its batches close it.
    Deferred,
    /// Back to QUEUED: RetryLater, or a failure with retries left.
    Requeued,
    /// Ran, but the run was no longer current (cancelled, reaped, shut down): dropped.
    Superseded,
    /// Ran, the outcome could not be committed, and the fallback recorded FAILED.
    ForcedFailed,
    /// Neither the outcome nor the fallback could be committed; the lease will expire.
    Unrecorded,
}

/// How a run ended, before it is written.
enum Outcome {
    Complete(Completion),
    Requeue(Requeue),
    /// It fanned out: its batches close it, nothing to write now.
    Deferred,
}

/// Runs jobs by id. Shared by every consumer of a process.
pub struct Executor {
    registry: Arc<OperationRegistry>,
    services: Arc<Services>,
    config: ExecutorConfig,
}

impl Executor {
    pub fn new(services: Services, registry: Arc<OperationRegistry>, config: ExecutorConfig) -> Self {
        Executor { registry, services: Arc::new(services), config }
    }

    pub fn config(&self) -> &ExecutorConfig {
        &self.config
    }

    /// Session 1: QUEUED → RUNNING, committed before anything runs.
    pub async fn claim(&self, id: Uuid) -> Result<Claim, StoreError> {
        if let Some(job) = self.services.store.claim(id, &self.config.owner, self.config.lease).await? {
            info!(job_id = %id, operation = %job.operation, attempt = job.attempts, "claimed");
            return Ok(Claim::Claimed(Box::new(job)));
        }
        // Boxed: its row and its writes are no part of the future every run holds.
        Box::pin(self.not_claimed(id)).await
    }

    /// What a claim that took nothing found.
    async fn not_claimed(&self, id: Uuid) -> Result<Claim, StoreError> {
        match self.services.store.get(id).await? {
            Some(job) if job.status == JobStatus::Queued => {
                // Not due yet (its delay is not over): the message is spent, so the sweep
                // must send the job again once it is due.
                self.services.store.forget_publication(&Dispatch::of(&job)).await?;
                debug!(job_id = %id, "not due yet; left to the dispatch sweep");
                Ok(Claim::NotClaimable)
            }
            Some(job) => {
                debug!(job_id = %id, status = %job.status, "not claimable, skipped");
                Ok(Claim::NotClaimable)
            }
            None => Ok(Claim::Missing),
        }
    }

    /// Executes a claimed job and records its outcome (session 2, or the fallback).
    /// `cancel` fires when the run is cancelled or taken away; cooperative operations stop.
    /// `returned` hears when the operation is done, as its outcome starts on its way.
    ///
    /// The job comes boxed and stays so until its context holds it: a `Job` by value would
    /// be a copy of its row in each future this run nests (the run's, its operation's),
    /// which every in-flight job holds for as long as it runs.
    pub async fn run(
        &self,
        job: Box<Job>,
        cancel: CancellationToken,
        returned: Option<oneshot::Sender<()>>,
    ) -> HandleOutcome {
        let run = RunRef::from(&*job);
        let outcome = match self.parent_cancelled(&job).await {
            true => Outcome::Complete(Completion::CancelledByParent),
            false => self.execute(job, cancel).await,
        };
        if let Some(returned) = returned {
            let _ = returned.send(());
        }
        if matches!(outcome, Outcome::Deferred) {
            return HandleOutcome::Deferred;
        }
        let mut written = self.write(run, &outcome).await;
        // The rare paths are boxed, so the future every in-flight job holds does not carry
        // their pauses and errors.
        if written.as_ref().is_err_and(StoreError::is_unavailable) {
            written = Box::pin(self.write_when_back(run, &outcome)).await;
        }
        match written {
            Ok(Some(JobStatus::Queued)) => {
                info!(job_id = %run.id, "re-queued");
                HandleOutcome::Requeued
            }
            Ok(Some(status)) => {
                info!(job_id = %run.id, %status, "finished");
                HandleOutcome::Finished(status)
            }
            Ok(None) => {
                info!(job_id = %run.id, "run no longer current; outcome dropped");
                HandleOutcome::Superseded
            }
            Err(err) => Box::pin(self.record_fallback(run, err)).await,
        }
    }

    /// Session 2: the outcome's compare-and-set for this run.
    async fn write(&self, run: RunRef, outcome: &Outcome) -> Result<Option<JobStatus>, StoreError> {
        match outcome {
            Outcome::Complete(completion) => {
                self.services.store.finish(run, completion).await.map(|job| job.map(|job| job.status))
            }
            Outcome::Requeue(requeue) => {
                self.services.store.requeue(run, requeue).await.map(|job| job.map(|_| JobStatus::Queued))
            }
            Outcome::Deferred => Ok(None),
        }
    }

    /// The database could not be reached, so nothing was written: the same outcome is
    /// tried again, with a growing pause, for up to three leases. A job that succeeded
    /// must not end FAILED because the database blinked. If the run is taken away
    /// meanwhile (its lease expired, the reaper re-queued it), the write finds it no longer
    /// current and is dropped; a commit whose fate was unknown is found applied the same way.
    async fn write_when_back(&self, run: RunRef, outcome: &Outcome) -> Result<Option<JobStatus>, StoreError> {
        let deadline = tokio::time::Instant::now() + self.config.lease * 3;
        let mut pause = FALLBACK_FIRST_PAUSE;
        loop {
            warn!(job_id = %run.id, "the database is unreachable; the outcome will be written when it is back");
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_UNREACHABLE_PAUSE);
            let written = self.write(run, outcome).await;
            let unreachable = written.as_ref().is_err_and(StoreError::is_unavailable);
            if !unreachable || tokio::time::Instant::now() >= deadline {
                return written;
            }
        }
    }

    async fn parent_cancelled(&self, job: &Job) -> bool {
        let Some(parent) = job.parent_job_id else { return false };
        match self.services.store.get(parent).await {
            Ok(Some(parent)) => parent.status == JobStatus::Cancelled,
            Ok(None) => false,
            Err(err) => {
                warn!(job_id = %job.id, error = %err, "cannot read parent; running anyway");
                false
            }
        }
    }

    /// Runs the operation with no transaction open and decides what to record. A panic is a
    /// failure; a failure with retries left becomes a delayed requeue.
    async fn execute(&self, mut job: Box<Job>, cancel: CancellationToken) -> Outcome {
        let Some(operation) = self.registry.get(&job.operation) else {
            let message = format!("this worker has no operation named {:?}", job.operation);
            return Outcome::Complete(Completion::Failed { error_code: UNKNOWN_OPERATION.into(), message });
        };
        // The operation owns the payload; the context's job keeps none (`JobContext::job`).
        let payload = std::mem::take(&mut job.payload);
        // A row's timeout is checked at submission; one no duration can hold is no limit.
        let limit = job.timeout_seconds.and_then(|seconds| Duration::try_from_secs_f64(seconds).ok());
        // The run's own token: its timeout stops it without touching the in-flight one.
        let stop = cancel.child_token();
        let job: Arc<Job> = Arc::from(job);
        let ctx = JobContext::new(job.clone(), self.services.clone(), stop.clone());
        // What is read back once the operation returns; the context itself goes to it.
        let fanned_out = ctx.deferral();
        let work = AssertUnwindSafe(operation.execute(ctx, payload)).catch_unwind();
        let executed = match within(limit, work, &stop).await {
            Some(executed) => executed,
            None => {
                let seconds = limit.unwrap_or_default().as_secs_f64();
                let message = format!("the run took longer than its timeout of {seconds} s and was stopped");
                Ok(Err(OperationError::Failed { class: TIMEOUT.into(), message }))
            }
        };
        if fanned_out.is_set() {
            // Its batches are out and decide the outcome, whatever this run returned.
            return Outcome::Deferred;
        }
        let (error_code, message) = match executed {
            Ok(Ok(result)) => match unstorable(&result) {
                None => return Outcome::Complete(Completion::Succeeded { result }),
                Some(reason) => (INVALID_RESULT.to_owned(), reason),
            },
            Ok(Err(OperationError::RetryLater { delay, reason })) => {
                return Outcome::Requeue(Requeue::RetryLater { delay, reason });
            }
            Ok(Err(OperationError::Failed { class, message })) => {
                (scrub_nul(&class).into(), scrub_nul(&message).into())
            }
            Err(panic) => (OPERATION_PANICKED.to_owned(), panic_message(&panic)),
        };
        match after_failure(&job, error_code, message) {
            Ok(requeue) => Outcome::Requeue(requeue),
            Err(completion) => Outcome::Complete(completion),
        }
    }

    /// The fallback session: session 2 could not commit, so record FAILED, retrying a few
    /// times with a growing pause.
    async fn record_fallback(&self, run: RunRef, first_error: StoreError) -> HandleOutcome {
        warn!(job_id = %run.id, error = %first_error, "outcome not committed; marking the job failed");
        let fallback = Completion::Failed {
            error_code: RESULT_COMMIT_FAILED.to_owned(),
            message: format!("the outcome could not be committed: {first_error}"),
        };
        let mut pause = FALLBACK_FIRST_PAUSE;
        for attempt in 1..=FALLBACK_ATTEMPTS {
            match self.services.store.finish(run, &fallback).await {
                Ok(Some(_)) => return HandleOutcome::ForcedFailed,
                Ok(None) => return HandleOutcome::Superseded,
                Err(err) if attempt == FALLBACK_ATTEMPTS => {
                    error!(job_id = %run.id, error = %err, "fallback failed too; the lease will expire");
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

/// Runs `work`; past `limit` (if any) fires `stop`, gives the work [`STOP_GRACE`] to
/// return, and answers `None` (the run timed out, whatever it then returned). The timer is
/// boxed: a run with no timeout, most of them, holds none.
async fn within<F: Future>(limit: Option<Duration>, work: F, stop: &CancellationToken) -> Option<F::Output> {
    match limit {
        None => Some(work.await),
        Some(limit) => Box::pin(timed(limit, work, stop)).await,
    }
}

async fn timed<F: Future>(limit: Duration, work: F, stop: &CancellationToken) -> Option<F::Output> {
    tokio::pin!(work);
    if let Ok(done) = tokio::time::timeout(limit, &mut work).await {
        return Some(done);
    }
    stop.cancel();
    let _ = tokio::time::timeout(STOP_GRACE, &mut work).await;
    None
}

/// Why `result` cannot be stored, if it cannot: PostgreSQL keeps no NUL character, and a
/// result must read the same on both backends.
pub fn unstorable(result: &Value) -> Option<String> {
    let at = nul_pointer(result)?;
    Some(format!("the result holds a NUL character at {:?}, which cannot be stored", scrub_nul(&at)))
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "operation panicked".to_owned())
}
