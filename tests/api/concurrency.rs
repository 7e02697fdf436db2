//! Exactly-once execution under concurrent consumers and duplicate deliveries, and the
//! fallback session when the outcome cannot be committed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use uuid::Uuid;
use yardmaster::dispatch::encode_job_message;
use yardmaster::domain::{BatchOutcome, FanOutForm, Job, JobEvent, NewEvent, NewJob};
use yardmaster::store::{
    BatchRecorded, Cancellation, Completion, Dispatch, ExpiredLease, JobFilter, JobStore, Page, Reduce, Requeue,
    RunRef, StoreError, Submission,
};

use crate::helpers::{Backend, TestApp, TestOptions};

const JOBS: usize = 2_000;

async fn eight_consumers_run_two_thousand_jobs_exactly_once(backend: Backend) {
    run_exactly_once(backend, 0).await;
}

/// The same with group commit off.
async fn without_group_commit_every_job_runs_exactly_once(backend: Backend) {
    run_exactly_once(backend, 1).await;
}

async fn run_exactly_once(backend: Backend, group_commit_max: usize) {
    let options = TestOptions { queues: vec![("default", 8)], seed_jobs: JOBS, group_commit_max, ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    // The start-up sweep has published every seeded job; publish each once more so that
    // every job is delivered twice and the claims race.
    for id in &app.seeded {
        app.transport.publish("default", encode_job_message(*id)).await.unwrap();
    }
    let succeeded = "SELECT COUNT(*) FROM job WHERE status = 'succeeded'";
    app.wait_for_count(succeeded, JOBS as i64, Duration::from_secs(240)).await;

    assert_eq!(app.count("SELECT COUNT(*) FROM execution_log").await, JOBS as i64);
    assert_eq!(app.count("SELECT COUNT(DISTINCT job_id) FROM execution_log").await, JOBS as i64);
    let started = "SELECT COUNT(*) FROM job_event WHERE event = 'job.started'";
    assert_eq!(app.count(started).await, JOBS as i64);
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE attempts <> 1").await, 0);
}

/// Which writes of the real store fail, as if the database went away at that moment.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// A success cannot commit: session 2 fails.
    Success,
    /// No operation event (progress included) can be written.
    Events,
    /// Reading a job finds no connection to the database (counted in `UNREACHABLE_READS`).
    Unreachable,
}

/// Reads that [`Fault::Unreachable`] failed (each test runs in a process of its own).
static UNREACHABLE_READS: AtomicUsize = AtomicUsize::new(0);

/// Delegates to the real store but fails the writes its [`Fault`] names.
struct Faulty(Arc<dyn JobStore>, Fault);

fn injected() -> StoreError {
    StoreError::Database(sea_orm::DbErr::Custom("injected: connection lost at commit".into()))
}

#[async_trait]
impl JobStore for Faulty {
    async fn ping(&self) -> Result<(), StoreError> {
        self.0.ping().await
    }
    async fn submit(&self, job: NewJob) -> Result<Submission, StoreError> {
        self.0.submit(job).await
    }
    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Submission>, StoreError> {
        self.0.submit_many(jobs).await
    }
    async fn get(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        if self.1 == Fault::Unreachable {
            UNREACHABLE_READS.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Database(sea_orm::DbErr::ConnectionAcquire(
                sea_orm::error::ConnAcquireErr::Timeout,
            )));
        }
        self.0.get(id).await
    }
    async fn list(&self, filter: &JobFilter) -> Result<Page, StoreError> {
        self.0.list(filter).await
    }
    async fn events(&self, id: Uuid, after: Option<i64>, limit: u64) -> Result<Vec<JobEvent>, StoreError> {
        self.0.events(id, after, limit).await
    }
    async fn claim(&self, id: Uuid, owner: &str, lease: Duration) -> Result<Option<Job>, StoreError> {
        self.0.claim(id, owner, lease).await
    }
    async fn finish(&self, run: RunRef, completion: &Completion) -> Result<Option<Job>, StoreError> {
        match completion {
            Completion::Succeeded { .. } if self.1 == Fault::Success => Err(injected()),
            _ => self.0.finish(run, completion).await,
        }
    }
    async fn requeue(&self, run: RunRef, requeue: &Requeue) -> Result<Option<Job>, StoreError> {
        self.0.requeue(run, requeue).await
    }
    async fn extend_lease(&self, run: RunRef, lease: Duration) -> Result<bool, StoreError> {
        self.0.extend_lease(run, lease).await
    }
    async fn expired_leases(&self, limit: u64) -> Result<Vec<ExpiredLease>, StoreError> {
        self.0.expired_leases(limit).await
    }
    async fn stalled_runs(&self, timeout: Duration, stall: Duration, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.0.stalled_runs(timeout, stall, limit).await
    }
    async fn overdue_queued(&self, timeout: Duration, limit: u64) -> Result<Vec<Uuid>, StoreError> {
        self.0.overdue_queued(timeout, limit).await
    }
    async fn fail_queued(&self, id: Uuid, error_code: &str, message: &str) -> Result<Option<Job>, StoreError> {
        self.0.fail_queued(id, error_code, message).await
    }
    async fn cancel(&self, id: Uuid) -> Result<Cancellation, StoreError> {
        self.0.cancel(id).await
    }
    async fn retry(&self, id: Uuid) -> Result<Job, StoreError> {
        self.0.retry(id).await
    }
    async fn fan_out(&self, run: RunRef, total: i64, form: FanOutForm) -> Result<Option<Job>, StoreError> {
        self.0.fan_out(run, total, form).await
    }
    async fn rerun_children(&self, run: RunRef) -> Result<Vec<Job>, StoreError> {
        self.0.rerun_children(run).await
    }
    async fn run_is_current(&self, run: RunRef) -> Result<bool, StoreError> {
        self.0.run_is_current(run).await
    }
    async fn defer(&self, run: RunRef) -> Result<Option<Job>, StoreError> {
        self.0.defer(run).await
    }
    async fn record_batch(&self, outcome: BatchOutcome, reduce: Arc<dyn Reduce>) -> Result<BatchRecorded, StoreError> {
        self.0.record_batch(outcome, reduce).await
    }
    async fn record_event(&self, run: RunRef, event: NewEvent) -> Result<bool, StoreError> {
        match self.1 {
            Fault::Events => Err(injected()),
            Fault::Success | Fault::Unreachable => self.0.record_event(run, event).await,
        }
    }
    async fn mark_published(&self, jobs: &[Dispatch]) -> Result<u64, StoreError> {
        self.0.mark_published(jobs).await
    }
    async fn due_for_dispatch(&self, grace: Duration, limit: u64) -> Result<Vec<Dispatch>, StoreError> {
        self.0.due_for_dispatch(grace, limit).await
    }
    async fn forget_publications(&self) -> Result<u64, StoreError> {
        self.0.forget_publications().await
    }
    async fn batch_fan_outs(&self, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.0.batch_fan_outs(limit).await
    }
}

async fn a_session_two_commit_failure_leaves_the_job_failed(backend: Backend) {
    let options = TestOptions {
        wrap_store: Some(Box::new(|store| Arc::new(Faulty(store, Fault::Success)) as Arc<dyn JobStore>)),
        ..Default::default()
    };
    let app = TestApp::spawn_with(backend, options).await;
    let (_, job) = app.submit(json!({ "operation": "count" })).await;
    let id = job["id"].as_str().unwrap();
    let failed = app.wait_for_status(id, "failed").await;
    assert_eq!(failed["error_code"], "ResultCommitFailed");
    assert!(failed["error_message"].as_str().unwrap().contains("injected"), "{failed}");
    assert!(failed["leased_until"].is_null());
    assert_eq!(app.count("SELECT COUNT(*) FROM execution_log").await, 1);
    assert_eq!(app.event_names(id).await, ["job.queued", "job.started", "job.failed"]);
}

/// Progress is advisory: reports that cannot be written are dropped, and the job still
/// succeeds with its result.
async fn progress_that_cannot_be_written_does_not_fail_the_job(backend: Backend) {
    let options = TestOptions {
        wrap_store: Some(Box::new(|store| Arc::new(Faulty(store, Fault::Events)) as Arc<dyn JobStore>)),
        ..Default::default()
    };
    let app = TestApp::spawn_with(backend, options).await;
    let (_, job) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 0.05, "steps": 5 } })).await;
    let id = job["id"].as_str().unwrap();
    let done = app.wait_for_status(id, "succeeded").await;
    assert_eq!(done["result"], json!({ "slept_seconds": 0.05 }));
    assert_eq!(app.event_names(id).await, ["job.queued", "job.started", "job.succeeded"]);
}

/// An unreachable store is a 503 with `Retry-After`, and for a moment every request gets it
/// at once instead of waiting for a connection of its own.
async fn an_unreachable_store_answers_503_at_once(backend: Backend) {
    let options = TestOptions {
        workers: false,
        wrap_store: Some(Box::new(|store| Arc::new(Faulty(store, Fault::Unreachable)) as Arc<dyn JobStore>)),
        ..Default::default()
    };
    let app = TestApp::spawn_with(backend, options).await;
    let path = format!("/jobs/{}", Uuid::now_v7());
    for _ in 0..3 {
        let response = app.client.get(app.url(&path)).send().await.unwrap();
        let retry_after = response.headers().get("retry-after").map(|value| value.to_str().unwrap().to_owned());
        let (code, problem) = crate::helpers::read(response).await;
        assert_eq!((code, problem["code"].as_str()), (503, Some("store_unavailable")), "{problem}");
        assert_eq!(retry_after.as_deref(), Some("2"));
    }
    assert_eq!(UNREACHABLE_READS.load(Ordering::SeqCst), 1, "later requests did not wait on the store");
    assert_eq!(app.get("/healthz").await.0, 200);
}

on_both_backends!(
    an_unreachable_store_answers_503_at_once,
    eight_consumers_run_two_thousand_jobs_exactly_once,
    without_group_commit_every_job_runs_exactly_once,
    a_session_two_commit_failure_leaves_the_job_failed,
    progress_that_cannot_be_written_does_not_fail_the_job,
);
