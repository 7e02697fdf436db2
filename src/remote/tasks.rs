//! Claiming and reporting tasks: the remote half of two-phase execution. A claim is the
//! lifecycle's own compare-and-set (QUEUED → RUNNING with `job.started` and a lease) tried
//! on the oldest runnable jobs of the worker's types; a report writes progress or the
//! outcome for the claiming run only, with the retry policy deciding a failure as it does
//! for local operations. Nothing here holds a transaction across a wait.

use std::time::Duration;

use futures_util::future::select_all;
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use super::workers::LiveWorker;
use super::Remote;
use crate::domain::{nul_pointer, scrub_nul, EventLevel, Job, JobStatus, NewEvent, QueueName};
use crate::live::JobWaiters;
use crate::store::{after_failure, Completion, JobReads, Requeue, RunRef, RunWrites, StoreError};

/// Longest RetryLater delay a worker may ask for.
const MAX_DELAY_SECONDS: f64 = 86_400.0;

/// Claims up to `most` of the oldest runnable tasks of the worker's types in one commit,
/// waiting up to `wait` for at least one: woken by the write that made one claimable (in
/// this process, or by NOTIFY from another), never by polling the database. Empty when
/// none came within the wait.
pub async fn claim(
    remote: &Remote,
    runs: &dyn RunWrites,
    worker: &LiveWorker,
    token: Uuid,
    wait: Duration,
    most: usize,
    closing: &tokio_util::sync::CancellationToken,
) -> Result<Vec<Job>, StoreError> {
    let owner = worker.owner();
    let attempt = || async {
        let claimed = runs.claim_next(&worker.types, &owner, remote.lease, most).await?;
        Ok((!claimed.is_empty()).then_some(claimed))
    };
    Ok(hold_claim(remote, worker, token, &worker.types, wait, closing, attempt).await?.unwrap_or_default())
}

/// The held claim of every remote worker: tries `attempt` now, and, while it finds nothing,
/// waits for a write that wakes one of `keys` (a task queued, a slot freed) and tries again,
/// up to `wait`. Watching starts before each look, so nothing written between the two is
/// missed. A worker that left (or was marked gone) while its claim waited takes nothing:
/// its own DELETE requeues a task, whose write wakes this very claim.
pub async fn hold_claim<F, Fut, T>(
    remote: &Remote,
    worker: &LiveWorker,
    token: Uuid,
    keys: &[String],
    wait: Duration,
    closing: &tokio_util::sync::CancellationToken,
    attempt: F,
) -> Result<Option<T>, StoreError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, StoreError>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let mut watches: Vec<_> = keys.iter().map(|key| remote.claimers.watch(key.clone())).collect();
        if let Some(job) = attempt().await? {
            return Ok(Some(job));
        }
        if watches.is_empty() || tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        let woken = select_all(watches.iter_mut().map(|watch| Box::pin(watch.changed())));
        let _held = crate::telemetry::metrics::claim_held();
        tokio::select! {
            _ = woken => {}
            () = tokio::time::sleep_until(deadline) => return Ok(None),
            // Only the wait is cut short, never a claim being written.
            () = closing.cancelled() => return Ok(None),
        }
        if remote.workers.check_lately(worker.id, token).await.is_err() {
            return Ok(None);
        }
    }
}

/// The longest a claim may be held: `server.max_wait_seconds`, and less than the worker's
/// deadline (the claim renewed it, so the wait cannot outlive it).
pub fn claim_wait(remote: &Remote, asked: Option<Duration>, max_wait: Duration) -> Option<Duration> {
    let cap = max_wait.min(remote.workers.ttl().saturating_sub(Duration::from_secs(1)));
    asked.map(|asked| asked.min(cap))
}

/// Body of `PATCH /tasks/{id}`, and each report of `POST /tasks:report`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// The worker reporting (its registration's id).
    pub worker_id: Uuid,
    /// The task: required in `POST /tasks:report`; in `PATCH /tasks/{id}`, if given, the
    /// path's.
    #[serde(default)]
    pub id: Option<Uuid>,
    /// The run: the task's `attempts` as the claim answered it.
    #[serde(deserialize_with = "crate::http::required_whole_number")]
    #[schema(minimum = 1)]
    pub attempt: i32,
    /// `running` (progress, a message, or only a lease renewal), `succeeded`, `failed`,
    /// or `retry_later`.
    pub status: ReportStatus,
    #[serde(default)]
    pub progress: Option<Progress>,
    /// A line for the event log (running), the failure's message (failed), or the reason
    /// (retry_later).
    #[serde(default)]
    #[schema(max_length = 10000)]
    pub message: Option<String>,
    /// The result (succeeded).
    #[serde(default)]
    pub result: Option<Value>,
    /// The error class of a failure (for example `ValueError`), matched by the task's retry
    /// policy; default `RemoteFailure`.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200)]
    pub error_code: Option<String>,
    /// Seconds before the task runs again (retry_later).
    #[serde(default)]
    #[schema(minimum = 0, maximum = 86400)]
    pub delay_seconds: Option<f64>,
}

/// Longest `message` a report may carry, in characters.
const MAX_MESSAGE_CHARS: usize = 10_000;
/// Longest `error_code`, in characters.
const MAX_ERROR_CODE_CHARS: usize = 200;

impl Report {
    /// The bounds its schema states, checked before anything is read or written, so a
    /// report that breaks one is refused whatever its task's state.
    pub fn check(&self) -> Result<(), ReportError> {
        let invalid = |pointer, detail: &str| Err(ReportError::Invalid(pointer, detail.to_owned()));
        if self.attempt < 1 {
            return invalid("/attempt", "runs count from 1");
        }
        if self.progress.is_some_and(|p| p.current < 0 || p.total.is_some_and(|total| total < 0)) {
            return invalid("/progress", "progress counts are 0 or more");
        }
        if self.delay_seconds.is_some_and(|seconds| !(0.0..=MAX_DELAY_SECONDS).contains(&seconds)) {
            return invalid("/delay_seconds", &format!("must be 0-{MAX_DELAY_SECONDS}"));
        }
        if self.message.as_ref().is_some_and(|message| message.chars().count() > MAX_MESSAGE_CHARS) {
            return invalid("/message", &format!("at most {MAX_MESSAGE_CHARS} characters"));
        }
        let code_chars = self.error_code.as_ref().map(|code| code.chars().count());
        if code_chars.is_some_and(|chars| !(1..=MAX_ERROR_CODE_CHARS).contains(&chars)) {
            return invalid("/error_code", &format!("1 to {MAX_ERROR_CODE_CHARS} characters"));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportStatus {
    Running,
    Succeeded,
    Failed,
    RetryLater,
}

#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Progress {
    #[serde(deserialize_with = "crate::http::required_whole_number")]
    #[schema(minimum = 0)]
    pub current: i64,
    #[serde(default, deserialize_with = "crate::http::whole_number")]
    #[schema(minimum = 0)]
    pub total: Option<i64>,
}

/// Why a report was not applied.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("no task {0}")]
    NotFound(Uuid),
    #[error("task {0} is held by another worker")]
    NotYours(Uuid),
    #[error("task {0} was cancelled: stop working on it")]
    Cancelled(Uuid),
    #[error("run {attempt} of task {id} is no longer running (the task is {status}, at attempt {current})")]
    Stale { id: Uuid, attempt: i32, status: JobStatus, current: i32 },
    #[error("{0}")]
    Invalid(&'static str, String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Applies a worker's report to its run, and answers the task as it now is.
pub async fn report(
    remote: &Remote,
    reads: &dyn JobReads,
    runs: &dyn RunWrites,
    worker: &LiveWorker,
    id: Uuid,
    report: Report,
) -> Result<Job, ReportError> {
    let read = reads.get(id).await?;
    report_on(remote, reads, runs, worker, id, read, report).await
}

/// [`report`] on the task as `read` found it (`None`: no such task), for a batch of reports
/// that read their tasks together. Callers [`Report::check`] a report first, before its
/// worker is looked up, so a report out of bounds is refused whoever sent it.
pub async fn report_on(
    remote: &Remote,
    reads: &dyn JobReads,
    runs: &dyn RunWrites,
    worker: &LiveWorker,
    id: Uuid,
    read: Option<Job>,
    report: Report,
) -> Result<Job, ReportError> {
    let job = judge(read, worker, id, report.attempt)?;
    let run = RunRef { id, attempt: report.attempt };
    // The job as the write left it, when the write returns it; `None` when the run was no
    // longer current (a cancel or the reaper came first).
    let written: Option<Option<Job>> = match report.status {
        ReportStatus::Running => match running(remote, runs, run, &report).await? {
            true => None,
            false => Some(None),
        },
        ReportStatus::Succeeded => {
            let result = report.result.clone().unwrap_or(Value::Null);
            if let Some(at) = nul_pointer(&result) {
                let detail = format!("the result holds a NUL character at {at:?}, which cannot be stored");
                return Err(ReportError::Invalid("/result", detail));
            }
            Some(runs.finish(run, &Completion::Succeeded { result }).await?)
        }
        ReportStatus::Failed => {
            let error_code = scrub_nul(report.error_code.as_deref().unwrap_or("RemoteFailure")).into_owned();
            let message = scrub_nul(report.message.as_deref().unwrap_or("the remote worker reported a failure"));
            let message = message.into_owned();
            Some(match after_failure(&job, error_code, message) {
                Ok(requeue) => runs.requeue(run, &requeue).await?,
                Err(failed) => runs.finish(run, &failed).await?,
            })
        }
        ReportStatus::RetryLater => {
            let seconds = report.delay_seconds.unwrap_or(0.0);
            let reason = scrub_nul(report.message.as_deref().unwrap_or("the remote worker asked to retry later"));
            let requeue = Requeue::RetryLater { delay: Duration::from_secs_f64(seconds), reason: reason.into_owned() };
            Some(runs.requeue(run, &requeue).await?)
        }
    };
    match written {
        Some(Some(job)) => Ok(job),
        // Lost a race with a cancel or the reaper: say which.
        Some(None) => Err(current(reads, worker, id, report.attempt).await.err().unwrap_or(ReportError::Stale {
            id,
            attempt: report.attempt,
            status: job.status,
            current: job.attempts,
        })),
        None => reads.get(id).await?.ok_or(ReportError::NotFound(id)),
    }
}

/// A running report renews the run's lease and logs its progress or message.
async fn running(remote: &Remote, runs: &dyn RunWrites, run: RunRef, report: &Report) -> Result<bool, ReportError> {
    if !runs.extend_lease(run, remote.lease).await? {
        return Ok(false);
    }
    if report.progress.is_none() && report.message.is_none() {
        return Ok(true);
    }
    let mut fields = json!({});
    if let Some(progress) = report.progress {
        fields["_progress_current"] = json!(progress.current);
        if let Some(total) = progress.total {
            fields["_progress_total"] = json!(total);
        }
    }
    let name = if report.progress.is_some() { "job.progress" } else { "task.message" };
    let mut event = NewEvent::new(name).fields(fields).level(EventLevel::Info);
    if let Some(message) = &report.message {
        event = event.message(scrub_nul(message));
    }
    Ok(runs.record_event(run, event).await?)
}

/// The task, when `attempt` is its RUNNING run held by `worker`; otherwise why not.
pub async fn current(reads: &dyn JobReads, worker: &LiveWorker, id: Uuid, attempt: i32) -> Result<Job, ReportError> {
    judge(reads.get(id).await?, worker, id, attempt)
}

/// The task as read (`None`: missing), when `attempt` is its RUNNING run held by `worker`;
/// otherwise why not.
fn judge(read: Option<Job>, worker: &LiveWorker, id: Uuid, attempt: i32) -> Result<Job, ReportError> {
    let job = read.ok_or(ReportError::NotFound(id))?;
    let served = match job.queue.as_str() {
        QueueName::REMOTE => worker.types.contains(&job.operation),
        // An uploaded script, run by a script host elsewhere.
        QueueName::SCRIPTS => job.service.as_deref().is_some_and(|service| worker.serves_service(service)),
        _ => false,
    };
    if !served {
        return Err(ReportError::NotFound(id));
    }
    let mine = job.owner.as_deref() == Some(worker.owner().as_str());
    if job.attempts == attempt && !mine {
        return Err(ReportError::NotYours(id));
    }
    if job.status == JobStatus::Cancelled && (mine || job.attempts == attempt) {
        return Err(ReportError::Cancelled(id));
    }
    if job.status != JobStatus::Running || job.attempts != attempt || !mine {
        return Err(ReportError::Stale { id, attempt, status: job.status, current: job.attempts });
    }
    Ok(job)
}

/// A run a heartbeat names.
#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeldTask {
    pub id: Uuid,
    #[serde(deserialize_with = "crate::http::required_whole_number")]
    pub attempt: i32,
}

/// A run the worker must stop, as a heartbeat answers it.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Stop {
    pub id: Uuid,
    pub attempt: i32,
    /// What the task is now: `cancelled`, or another state when the run was taken away.
    pub status: JobStatus,
}

/// Renews the leases of the runs a heartbeat names; answers those the worker must stop
/// (cancelled, or no longer its run).
pub async fn renew(
    remote: &Remote,
    reads: &dyn JobReads,
    runs: &dyn RunWrites,
    worker: &LiveWorker,
    held: &[HeldTask],
) -> Result<Vec<Stop>, StoreError> {
    let mut stop = Vec::new();
    for task in held {
        let run = RunRef { id: task.id, attempt: task.attempt };
        let job = reads.get(task.id).await?;
        let owned = job.as_ref().is_some_and(|job| job.owner.as_deref() == Some(worker.owner().as_str()));
        if owned && runs.extend_lease(run, remote.lease).await? {
            continue;
        }
        stop.push(stop_of(task, reads.get(task.id).await?.as_ref(), owned));
    }
    Ok(stop)
}

/// A held task the worker must stop, as it is now: its status while it is the worker's
/// (or on a pulled queue), `cancelled` when it is gone or another's.
fn stop_of(task: &HeldTask, job: Option<&Job>, owned: bool) -> Stop {
    let status = match job {
        Some(job) if owned || QueueName::pulled(&job.queue) => job.status,
        _ => JobStatus::Cancelled,
    };
    Stop { id: task.id, attempt: task.attempt, status }
}

/// The wait a held heartbeat may take: what the worker asked, within `max_wait` and half
/// the lease and the worker's deadline (the next beat, sent as this one is answered, renews
/// both in time).
pub fn heartbeat_wait(remote: &Remote, asked: Option<Duration>, max_wait: Duration) -> Option<Duration> {
    let cap = max_wait.min(remote.lease / 2).min(remote.workers.ttl() / 2);
    asked.map(|asked| asked.min(cap))
}

/// A heartbeat held up to `wait`: renews as [`renew`] does; while nothing is to stop, waits
/// for a write to one of the held tasks (in this process, or by NOTIFY from another) and
/// looks again, so a cancel reaches the worker as it commits, not at its next beat.
/// Watching starts before the first look, so nothing written meanwhile is missed.
#[allow(clippy::too_many_arguments)]
pub async fn renew_held(
    remote: &Remote,
    reads: &dyn JobReads,
    runs: &dyn RunWrites,
    waiters: &JobWaiters,
    worker: &LiveWorker,
    held: &[HeldTask],
    wait: Duration,
    closing: &tokio_util::sync::CancellationToken,
) -> Result<Vec<Stop>, StoreError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut watches: Vec<_> = held.iter().map(|task| waiters.watch(task.id)).collect();
    let stop = renew(remote, reads, runs, worker, held).await?;
    if !stop.is_empty() || watches.is_empty() {
        return Ok(stop);
    }
    loop {
        let woken = select_all(watches.iter_mut().map(|watch| Box::pin(watch.changed())));
        tokio::select! {
            _ = woken => {}
            () = tokio::time::sleep_until(deadline) => return Ok(Vec::new()),
            () = closing.cancelled() => return Ok(Vec::new()),
        }
        let stop = stopped(reads, worker, held).await?;
        if !stop.is_empty() {
            return Ok(stop);
        }
    }
}

/// The held runs that are no longer the worker's running ones (a read: no lease moves).
async fn stopped(reads: &dyn JobReads, worker: &LiveWorker, held: &[HeldTask]) -> Result<Vec<Stop>, StoreError> {
    let owner = worker.owner();
    let mut stop = Vec::new();
    for task in held {
        let job = reads.get(task.id).await?;
        let owned = job
            .as_ref()
            .is_some_and(|job| job.owner.as_deref() == Some(owner.as_str()) && job.attempts == task.attempt);
        if owned && job.as_ref().is_some_and(|job| job.status == JobStatus::Running) {
            continue;
        }
        stop.push(stop_of(task, job.as_ref(), owned));
    }
    Ok(stop)
}
