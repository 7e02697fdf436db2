//! Exactly-once execution under concurrent consumers and duplicate deliveries, the
//! fallback session when the outcome cannot be committed, and the races around a run: a
//! parent cancelled right after its child's claim, a requeue that fails at shutdown.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use uuid::Uuid;
use yardmaster::dispatch::{encode_job_ids, encode_job_message};
use yardmaster::domain::{BatchOutcome, FanOutForm, Job, JobEvent, NewEvent, NewJob};
use yardmaster::startup::StoreWrapper;
use yardmaster::store::{
    BatchRecorded, Cancellation, Completion, Dispatch, DispatchBook, ExpiredLease, JobCommands, JobFilter, JobReads,
    JobStore, Maintenance, Page, Reduce, Requeue, RunRef, RunWrites, StoreError, Submission,
};

use crate::helpers::{Backend, TestApp, TestOptions, PARKED};

const JOBS: usize = 2_000;

async fn eight_consumers_run_two_thousand_jobs_exactly_once(backend: Backend) {
    run_exactly_once(backend, 0).await;
}

/// The same with messages of up to 16 job ids, each published twice more in messages of 5:
/// every job still runs exactly once.
async fn with_several_ids_per_message_every_job_runs_exactly_once(backend: Backend) {
    let options =
        TestOptions { queues: vec![("default", 8)], seed_jobs: JOBS, ids_per_message: 16, ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    for _ in 0..2 {
        for ids in app.seeded.chunks(5) {
            app.transport.publish("default", encode_job_ids(ids)).await.unwrap();
        }
    }
    let succeeded = "SELECT COUNT(*) FROM job WHERE status = 'succeeded'";
    app.wait_for_count(succeeded, JOBS as i64, Duration::from_secs(240)).await;
    assert_eq!(app.count("SELECT COUNT(*) FROM execution_log").await, JOBS as i64);
    assert_eq!(app.count("SELECT COUNT(DISTINCT job_id) FROM execution_log").await, JOBS as i64);
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE attempts <> 1").await, 0);
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
    /// Right after a child's claim commits, its parent is cancelled: the race between a
    /// claim and the execution that follows it.
    CancelParentOnClaim,
    /// A shutdown's requeue cannot commit.
    ShutdownRequeue,
    /// The first outcomes find no connection to the database (it is restarting); later
    /// ones go through.
    OutcomeWhileDatabaseAway,
}

/// Outcomes [`Fault::OutcomeWhileDatabaseAway`] refuses before the database is back.
const AWAY_FOR_WRITES: usize = 3;
static OUTCOMES_REFUSED: AtomicUsize = AtomicUsize::new(0);

/// Reads that [`Fault::Unreachable`] failed (each test runs in a process of its own).
static UNREACHABLE_READS: AtomicUsize = AtomicUsize::new(0);

/// Delegates to the real store but fails the writes its [`Fault`] names.
struct Faulty(Arc<dyn JobStore>, Fault);

fn injected() -> StoreError {
    StoreError::Database(sea_orm::DbErr::Custom("injected: connection lost at commit".into()))
}

#[async_trait]
impl JobReads for Faulty {
    async fn ping(&self) -> Result<(), StoreError> {
        self.0.ping().await
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

    async fn room_events(&self, room: &str, after: Option<i64>, limit: u64) -> Result<Vec<JobEvent>, StoreError> {
        self.0.room_events(room, after, limit).await
    }
    async fn queue_position(&self, job: &Job) -> Result<Option<i64>, StoreError> {
        self.0.queue_position(job).await
    }
}

#[async_trait]
impl JobCommands for Faulty {
    async fn submit(&self, job: NewJob) -> Result<Submission, StoreError> {
        self.0.submit(job).await
    }

    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<Submission>, StoreError> {
        self.0.submit_many(jobs).await
    }

    async fn cancel(&self, id: Uuid) -> Result<Cancellation, StoreError> {
        self.0.cancel(id).await
    }

    async fn retry(&self, id: Uuid) -> Result<Job, StoreError> {
        self.0.retry(id).await
    }

    async fn note_queued(&self, id: Uuid, event: yardmaster::domain::NewEvent) -> Result<bool, StoreError> {
        self.0.note_queued(id, event).await
    }
}

#[async_trait]
impl RunWrites for Faulty {
    async fn claim(&self, id: Uuid, owner: &str, lease: Duration) -> Result<Option<Job>, StoreError> {
        let claimed = self.0.claim(id, owner, lease).await?;
        if let (Fault::CancelParentOnClaim, Some(parent)) = (self.1, claimed.as_ref().and_then(|job| job.parent_job_id))
        {
            self.0.cancel(parent).await?;
        }
        Ok(claimed)
    }

    async fn claim_next(&self, operations: &[String], owner: &str, lease: Duration) -> Result<Option<Job>, StoreError> {
        let job = self.0.claim_next(operations, owner, lease).await?;
        Ok(job)
    }

    async fn finish(&self, run: RunRef, completion: &Completion) -> Result<Option<Job>, StoreError> {
        match completion {
            Completion::Succeeded { .. } if self.1 == Fault::Success => Err(injected()),
            _ if self.1 == Fault::OutcomeWhileDatabaseAway
                && OUTCOMES_REFUSED.fetch_add(1, Ordering::SeqCst) < AWAY_FOR_WRITES =>
            {
                Err(StoreError::Database(sea_orm::DbErr::ConnectionAcquire(sea_orm::error::ConnAcquireErr::Timeout)))
            }
            _ => self.0.finish(run, completion).await,
        }
    }

    async fn requeue(&self, run: RunRef, requeue: &Requeue) -> Result<Option<Job>, StoreError> {
        match requeue {
            Requeue::Shutdown if self.1 == Fault::ShutdownRequeue => Err(injected()),
            _ => self.0.requeue(run, requeue).await,
        }
    }

    async fn extend_lease(&self, run: RunRef, lease: Duration) -> Result<bool, StoreError> {
        self.0.extend_lease(run, lease).await
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
            _ => self.0.record_event(run, event).await,
        }
    }
}

#[async_trait]
impl Maintenance for Faulty {
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

    async fn batch_fan_outs(&self, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.0.batch_fan_outs(limit).await
    }

    async fn runs_owned_by(&self, owner: &str, limit: u64) -> Result<Vec<RunRef>, StoreError> {
        self.0.runs_owned_by(owner, limit).await
    }

    async fn mark_cleaned(&self, id: Uuid) -> Result<Option<Job>, StoreError> {
        self.0.mark_cleaned(id).await
    }

    async fn prune(
        &self,
        status: yardmaster::domain::JobStatus,
        older_than: Duration,
        limit: u64,
    ) -> Result<yardmaster::store::Pruned, StoreError> {
        self.0.prune(status, older_than, limit).await
    }
}

#[async_trait]
impl DispatchBook for Faulty {
    async fn mark_published(&self, jobs: &[Dispatch]) -> Result<u64, StoreError> {
        self.0.mark_published(jobs).await
    }

    async fn due_for_dispatch(&self, grace: Duration, limit: u64) -> Result<Vec<Dispatch>, StoreError> {
        self.0.due_for_dispatch(grace, limit).await
    }

    async fn forget_publication(&self, job: &Dispatch) -> Result<bool, StoreError> {
        self.0.forget_publication(job).await
    }

    async fn forget_publications(&self) -> Result<u64, StoreError> {
        self.0.forget_publications().await
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

fn faulty(fault: Fault) -> Option<StoreWrapper> {
    Some(Box::new(move |store| Arc::new(Faulty(store, fault)) as Arc<dyn JobStore>))
}

/// A child whose parent is cancelled between its claim and its execution ends CANCELLED
/// without running.
async fn a_child_whose_parent_is_cancelled_after_its_claim_never_runs(backend: Backend) {
    let options = TestOptions {
        queues: vec![("default", 1)],
        wrap_store: faulty(Fault::CancelParentOnClaim),
        ..Default::default()
    };
    let app = TestApp::spawn_with(backend, options).await;
    let (_, parent) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
    let parent = parent["id"].as_str().unwrap();
    let (_, child) = app.submit(json!({ "operation": "count", "parent_job_id": parent })).await;
    let child = child["id"].as_str().unwrap();
    // One job at a time: the sentinel finishing means the child's run is over.
    let (_, sentinel) = app.submit(json!({ "operation": "ping" })).await;
    app.wait_for_status(sentinel["id"].as_str().unwrap(), "succeeded").await;

    assert_eq!(app.get(&format!("/jobs/{parent}")).await.1["status"], "cancelled");
    let (_, after) = app.get(&format!("/jobs/{child}")).await;
    assert_eq!((after["status"].as_str(), after["attempts"].as_i64()), (Some("cancelled"), Some(1)), "{after}");
    assert_eq!(app.count("SELECT COUNT(*) FROM execution_log").await, 0, "the child ran");
    let names = app.event_names(child).await;
    assert!(!names.iter().any(|name| name == "job.succeeded" || name == "job.failed"), "{names:?}");
}

/// On SIGTERM, a run still going at the end of the grace period whose requeue cannot commit
/// is FAILED with `WorkerShutdown`, and the process still exits with 143.
async fn a_run_that_cannot_be_requeued_at_shutdown_fails_with_worker_shutdown(backend: Backend) {
    let options =
        TestOptions { handle_signals: true, wrap_store: faulty(Fault::ShutdownRequeue), ..Default::default() };
    let mut app = TestApp::spawn_with(backend, options).await;
    let (_, job) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 60, "steps": 600 } })).await;
    let id = job["id"].as_str().unwrap();
    app.wait_for_status(id, "running").await;
    // Each test runs in a process of its own (nextest), whose SIGTERM the app's guard owns.
    // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
    let code = tokio::time::timeout(Duration::from_secs(30), &mut app.stopped).await;
    assert_eq!(code.expect("the app stops within 30 s").unwrap().unwrap(), 143);

    let job = app.store.get(id.parse().unwrap()).await.unwrap().unwrap();
    assert_eq!((job.status.as_str(), job.error_code.as_deref()), ("failed", Some("WorkerShutdown")), "{job:?}");
    assert!(job.error_message.unwrap_or_default().contains("injected"));
}

/// A job whose work succeeded while the database was away ends SUCCEEDED once it is back:
/// nothing was written, so the same outcome is written again (the chaos run found it
/// recorded FAILED with `ResultCommitFailed`).
async fn an_outcome_waits_for_the_database_to_come_back(backend: Backend) {
    let options = TestOptions {
        wrap_store: Some(Box::new(|store| {
            Arc::new(Faulty(store, Fault::OutcomeWhileDatabaseAway)) as Arc<dyn JobStore>
        })),
        ..Default::default()
    };
    let app = TestApp::spawn_with(backend, options).await;
    let (_, job) = app.submit(json!({ "operation": "count" })).await;
    let id = job["id"].as_str().unwrap();
    let done = app.wait_for_status(id, "succeeded").await;
    assert_eq!(done["result"], json!({ "counted": true }), "{done}");
    assert!(OUTCOMES_REFUSED.load(Ordering::SeqCst) > AWAY_FOR_WRITES, "the outcome was written after the outage");
    assert_eq!(app.count("SELECT COUNT(*) FROM execution_log").await, 1, "the work ran once");
}

on_both_backends!(
    an_outcome_waits_for_the_database_to_come_back,
    an_unreachable_store_answers_503_at_once,
    eight_consumers_run_two_thousand_jobs_exactly_once,
    without_group_commit_every_job_runs_exactly_once,
    with_several_ids_per_message_every_job_runs_exactly_once,
    a_session_two_commit_failure_leaves_the_job_failed,
    progress_that_cannot_be_written_does_not_fail_the_job,
    a_child_whose_parent_is_cancelled_after_its_claim_never_runs,
    a_run_that_cannot_be_requeued_at_shutdown_fails_with_worker_shutdown,
);
