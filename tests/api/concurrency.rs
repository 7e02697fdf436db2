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
use yardmaster::domain::Job;
use yardmaster::store::{Call, Change, Completion, Hook, JobStore, Requeue, StoreError};

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

/// Fails the calls of the real store its [`Fault`] names, as if the database went away.
struct Faulty(Fault);

fn injected() -> StoreError {
    StoreError::Database(sea_orm::DbErr::Custom("injected: connection lost at commit".into()))
}

fn unreachable() -> StoreError {
    StoreError::Database(sea_orm::DbErr::ConnectionAcquire(sea_orm::error::ConnAcquireErr::Timeout))
}

#[async_trait]
impl Hook for Faulty {
    async fn before(&self, call: Call<'_>) -> Result<(), StoreError> {
        match (self.0, call) {
            (Fault::Unreachable, Call::Read("get", _)) => {
                UNREACHABLE_READS.fetch_add(1, Ordering::SeqCst);
                Err(unreachable())
            }
            (Fault::Success, Call::Finish(_, Completion::Succeeded { .. })) => Err(injected()),
            (Fault::OutcomeWhileDatabaseAway, Call::Finish(..))
                if OUTCOMES_REFUSED.fetch_add(1, Ordering::SeqCst) < AWAY_FOR_WRITES =>
            {
                Err(unreachable())
            }
            (Fault::ShutdownRequeue, Call::Requeue(_, Requeue::Shutdown)) => Err(injected()),
            (Fault::Events, Call::RecordEvent(..)) => Err(injected()),
            _ => Ok(()),
        }
    }

    async fn after(&self, call: Call<'_>, changes: &[Change<'_>], store: &dyn JobStore) -> Result<(), StoreError> {
        if let (Fault::CancelParentOnClaim, Call::Claim(_)) = (self.0, call) {
            for change in changes {
                if let Change::Moved { job: Job { parent_job_id: Some(parent), .. }, .. } = change {
                    store.cancel(*parent).await?;
                }
            }
        }
        Ok(())
    }
}

fn faulty(fault: Fault) -> Option<Arc<dyn Hook>> {
    Some(Arc::new(Faulty(fault)))
}

async fn a_session_two_commit_failure_leaves_the_job_failed(backend: Backend) {
    let options = TestOptions { hook: faulty(Fault::Success), ..Default::default() };
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
    let options = TestOptions { hook: faulty(Fault::Events), ..Default::default() };
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
    let options = TestOptions { workers: false, hook: faulty(Fault::Unreachable), ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let path = format!("/jobs/{}", Uuid::now_v7());
    let first_sent = std::time::Instant::now();
    for _ in 0..3 {
        let response = app.client.get(app.url(&path)).send().await.unwrap();
        let retry_after = response.headers().get("retry-after").map(|value| value.to_str().unwrap().to_owned());
        let (code, problem) = crate::helpers::read(response).await;
        assert_eq!((code, problem["code"].as_str()), (503, Some("store_unavailable")), "{problem}");
        assert_eq!(retry_after.as_deref(), Some("2"));
    }
    // The window opened after the first request was sent; if the last answer came within a
    // window of that, every later request came inside it and read nothing. (A machine that
    // stalled past the window may have let one of them look again, as it should.)
    let reads = UNREACHABLE_READS.load(Ordering::SeqCst);
    if first_sent.elapsed() < yardmaster::http::DOWN_WINDOW {
        assert_eq!(reads, 1, "later requests did not wait on the store");
    } else {
        assert!((1..=3).contains(&reads), "{reads} reads");
    }
    assert_eq!(app.get("/healthz").await.0, 200);
}

/// A child whose parent is cancelled between its claim and its execution ends CANCELLED
/// without running.
async fn a_child_whose_parent_is_cancelled_after_its_claim_never_runs(backend: Backend) {
    let options =
        TestOptions { queues: vec![("default", 1)], hook: faulty(Fault::CancelParentOnClaim), ..Default::default() };
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
    let options = TestOptions { handle_signals: true, hook: faulty(Fault::ShutdownRequeue), ..Default::default() };
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
    let options = TestOptions { hook: faulty(Fault::OutcomeWhileDatabaseAway), ..Default::default() };
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
