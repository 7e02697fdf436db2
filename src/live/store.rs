//! The in-process half of the notification path: a `JobStore` that wakes the waiters of
//! every job a write changed (and of its parent, whose counters a child's ending moves),
//! and the claimers of a registered type whose job became claimable, once the write has
//! returned, so after its commit. The same writes move the job metrics (started, ended,
//! requeued) first, so they count what was committed, once, before anyone is woken.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::{JobWaiters, StopRuns, TaskWaiters, ANY_JOB};
use crate::domain::{BatchOutcome, FanOutForm, Job, JobEvent, JobStatus, NewEvent, NewJob, QueueName, RUN_SCRIPT};
use crate::store::{
    BatchRecorded, Cancellation, Completion, Dispatch, DispatchBook, ExpiredLease, JobCommands, JobFilter, JobReads,
    JobStore, Maintenance, Page, Pruned, Reduce, Requeue, RunRef, RunWrites, StoreError, Submission,
};
use crate::telemetry::metrics;

pub struct NotifyingStore {
    inner: Arc<dyn JobStore>,
    waiters: Arc<JobWaiters>,
    tasks: Arc<TaskWaiters>,
    stop_runs: Option<StopRuns>,
}

impl NotifyingStore {
    pub fn new(inner: Arc<dyn JobStore>, waiters: Arc<JobWaiters>, tasks: Arc<TaskWaiters>) -> Self {
        NotifyingStore { inner, waiters, tasks, stop_runs: None }
    }

    /// A cancel that ends a run stops this process's run of it through `stop_runs`, at once.
    pub fn with_stop_runs(mut self, stop_runs: StopRuns) -> Self {
        self.stop_runs = Some(stop_runs);
        self
    }

    /// Wakes the waiters of a job that changed, and of its parent; a job of a registered
    /// type that is QUEUED now wakes its type's claimers.
    fn changed(&self, job: &Job) {
        self.waiters.wake(&ANY_JOB);
        self.waiters.wake(&job.id);
        if let Some(parent) = job.parent_job_id {
            self.waiters.wake(&parent);
        }
        if job.status == JobStatus::Queued && job.queue == QueueName::REMOTE {
            self.tasks.wake(job.operation.as_str());
        }
        // A script job queued is one to claim; one that left RUNNING freed a quota slot.
        if job.queue == QueueName::SCRIPTS && job.status != JobStatus::Running {
            self.tasks.wake(RUN_SCRIPT);
        }
    }

    fn changed_option(&self, job: &Option<Job>) {
        if let Some(job) = job {
            self.changed(job);
        }
    }
}

#[async_trait]
impl JobReads for NotifyingStore {
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }

    async fn get(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        self.inner.get(id).await
    }

    async fn list(&self, filter: &JobFilter) -> Result<Page, StoreError> {
        self.inner.list(filter).await
    }

    async fn events(&self, id: Uuid, after: Option<i64>, limit: u64) -> Result<Vec<JobEvent>, StoreError> {
        self.inner.events(id, after, limit).await
    }

    async fn room_events(&self, room: &str, after: Option<i64>, limit: u64) -> Result<Vec<JobEvent>, StoreError> {
        self.inner.room_events(room, after, limit).await
    }

    async fn queue_position(&self, job: &Job) -> Result<Option<i64>, StoreError> {
        self.inner.queue_position(job).await
    }
}

#[async_trait]
impl JobCommands for NotifyingStore {
    async fn submit(&self, job: NewJob) -> Result<Submission, StoreError> {
        let submission = self.inner.submit(job).await?;
        self.changed(&submission.job);
        Ok(submission)
    }

    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Submission>, StoreError> {
        let submissions = self.inner.submit_many(jobs).await?;
        submissions.iter().for_each(|submission| self.changed(&submission.job));
        Ok(submissions)
    }

    async fn cancel(&self, id: Uuid) -> Result<Cancellation, StoreError> {
        let cancellation = self.inner.cancel(id).await?;
        if cancellation.changed {
            metrics::job_ended(&cancellation.job);
            if let Some(stop) = &self.stop_runs {
                std::iter::once(&cancellation.job.id).chain(&cancellation.descendants).for_each(|id| stop(*id));
            }
        }
        self.changed(&cancellation.job);
        cancellation.descendants.iter().for_each(|child| self.waiters.wake(child));
        Ok(cancellation)
    }

    async fn retry(&self, id: Uuid) -> Result<Job, StoreError> {
        let job = self.inner.retry(id).await?;
        self.changed(&job);
        Ok(job)
    }

    async fn note_queued(&self, id: Uuid, event: NewEvent) -> Result<bool, StoreError> {
        let noted = self.inner.note_queued(id, event).await?;
        if noted {
            self.waiters.wake(&ANY_JOB);
            self.waiters.wake(&id);
        }
        Ok(noted)
    }
}

#[async_trait]
impl RunWrites for NotifyingStore {
    async fn claim(&self, id: Uuid, owner: &str, lease: Duration) -> Result<Option<Job>, StoreError> {
        let job = self.inner.claim(id, owner, lease).await?;
        job.iter().for_each(metrics::job_started);
        self.changed_option(&job);
        Ok(job)
    }

    async fn claim_next(&self, operations: &[String], owner: &str, lease: Duration) -> Result<Option<Job>, StoreError> {
        let job = self.inner.claim_next(operations, owner, lease).await?;
        job.iter().for_each(metrics::job_started);
        self.changed_option(&job);
        Ok(job)
    }

    async fn finish(&self, run: RunRef, completion: &Completion) -> Result<Option<Job>, StoreError> {
        let job = self.inner.finish(run, completion).await?;
        if let Some(job) = &job {
            metrics::job_ended(job);
        }
        self.changed_option(&job);
        Ok(job)
    }

    async fn requeue(&self, run: RunRef, requeue: &Requeue) -> Result<Option<Job>, StoreError> {
        let job = self.inner.requeue(run, requeue).await?;
        if let Some(job) = &job {
            let reason = match requeue {
                Requeue::RetryLater { .. } => "retry_later",
                Requeue::RetryAfterFailure { .. } => "failure",
                Requeue::Shutdown => "shutdown",
                Requeue::LeaseExpired => "lease_expired",
                Requeue::BatchesLost => "batches_lost",
            };
            metrics::job_requeued(job, reason);
            metrics::job_ended(job);
        }
        self.changed_option(&job);
        Ok(job)
    }

    async fn extend_lease(&self, run: RunRef, lease: Duration) -> Result<bool, StoreError> {
        self.inner.extend_lease(run, lease).await
    }

    async fn fan_out(&self, run: RunRef, total: i64, form: FanOutForm) -> Result<Option<Job>, StoreError> {
        let job = self.inner.fan_out(run, total, form).await?;
        self.changed_option(&job);
        Ok(job)
    }

    async fn rerun_children(&self, run: RunRef) -> Result<Vec<Job>, StoreError> {
        let children = self.inner.rerun_children(run).await?;
        children.iter().for_each(|child| self.changed(child));
        self.waiters.wake(&run.id);
        Ok(children)
    }

    async fn run_is_current(&self, run: RunRef) -> Result<bool, StoreError> {
        self.inner.run_is_current(run).await
    }

    async fn defer(&self, run: RunRef) -> Result<Option<Job>, StoreError> {
        let job = self.inner.defer(run).await?;
        self.changed_option(&job);
        Ok(job)
    }

    async fn record_batch(&self, outcome: BatchOutcome, reduce: Arc<dyn Reduce>) -> Result<BatchRecorded, StoreError> {
        let parent = outcome.parent_job_id;
        let recorded = self.inner.record_batch(outcome, reduce).await?;
        if let BatchRecorded::Counted { closed } = &recorded {
            if closed.is_some() {
                // This outcome closed its coordinator: counted once, here, as any ending is.
                // A failed read only costs the metric, never the write it follows.
                match self.inner.get(parent).await {
                    Ok(Some(job)) => metrics::job_ended(&job),
                    Ok(None) => {}
                    Err(err) => tracing::warn!(job_id = %parent, error = %err, "closed coordinator not counted"),
                }
            }
            self.waiters.wake(&ANY_JOB);
            self.waiters.wake(&parent);
        }
        Ok(recorded)
    }

    async fn record_event(&self, run: RunRef, event: NewEvent) -> Result<bool, StoreError> {
        let written = self.inner.record_event(run, event).await?;
        if written {
            self.waiters.wake(&ANY_JOB);
            self.waiters.wake(&run.id);
        }
        Ok(written)
    }
}

#[async_trait]
impl Maintenance for NotifyingStore {
    async fn expired_leases(&self, limit: u64) -> Result<Vec<ExpiredLease>, StoreError> {
        self.inner.expired_leases(limit).await
    }

    async fn stalled_runs(&self, timeout: Duration, stall: Duration, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.inner.stalled_runs(timeout, stall, limit).await
    }

    async fn overdue_queued(&self, timeout: Duration, limit: u64) -> Result<Vec<Uuid>, StoreError> {
        self.inner.overdue_queued(timeout, limit).await
    }

    async fn fail_queued(&self, id: Uuid, error_code: &str, message: &str) -> Result<Option<Job>, StoreError> {
        let job = self.inner.fail_queued(id, error_code, message).await?;
        job.iter().for_each(metrics::job_ended);
        self.changed_option(&job);
        Ok(job)
    }

    async fn batch_fan_outs(&self, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.inner.batch_fan_outs(limit).await
    }

    async fn runs_owned_by(&self, owner: &str, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.inner.runs_owned_by(owner, limit).await
    }

    async fn mark_cleaned(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        let job = self.inner.mark_cleaned(id).await?;
        self.changed_option(&job);
        Ok(job)
    }

    async fn prune(&self, status: JobStatus, older_than: Duration, limit: u64) -> Result<Pruned, StoreError> {
        self.inner.prune(status, older_than, limit).await
    }
}

#[async_trait]
impl DispatchBook for NotifyingStore {
    async fn mark_published(&self, jobs: &[Dispatch]) -> Result<u64, StoreError> {
        let marked = self.inner.mark_published(jobs).await?;
        // The dispatch sweep announces a registered type's job once its delay is over; the
        // record names no type, so every claimer looks.
        if marked > 0 && jobs.iter().any(|job| QueueName::pulled(&job.queue)) {
            self.tasks.wake_all();
        }
        Ok(marked)
    }

    async fn due_for_dispatch(&self, grace: Duration, limit: u64) -> Result<Vec<Dispatch>, StoreError> {
        self.inner.due_for_dispatch(grace, limit).await
    }

    async fn forget_publication(&self, job: &Dispatch) -> Result<bool, StoreError> {
        self.inner.forget_publication(job).await
    }

    async fn forget_publications(&self) -> Result<u64, StoreError> {
        self.inner.forget_publications().await
    }
}
