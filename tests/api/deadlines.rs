//! A job's own deadlines on every backend: `timeout_seconds` (the worker stops a run past
//! it, which fails `Timeout` and is retried by its policy; the reaper fails one no worker
//! stops), with defaults by operation and queue; `expires_at` / `queue_timeout_seconds` (a
//! job not started by then is CANCELLED with `job.expired`, and no claim takes it); bad
//! values refused.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use uuid::Uuid;
use yardmaster::config::JobsSettings;

use crate::helpers::{read, Backend, TestApp, TestOptions, PARKED};

/// Without the reaper: the worker's own timer stops the run.
fn worker_alone() -> TestOptions {
    TestOptions { reaper: false, ..Default::default() }
}

async fn a_run_past_its_timeout_is_stopped_and_fails(backend: Backend) {
    let app = TestApp::spawn_with(backend, worker_alone()).await;
    let body = json!({ "operation": "sleep", "payload": { "seconds": 600, "steps": 600 }, "timeout_seconds": 0.5 });
    let (status, job) = app.submit(body).await;
    assert_eq!((status, job["timeout_seconds"].as_f64()), (201, Some(0.5)), "{job}");
    let failed = app.wait_for_status(job["id"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error_code"], "Timeout", "{failed}");
}

async fn a_timeout_is_retried_by_its_policy(backend: Backend) {
    let app = TestApp::spawn_with(backend, worker_alone()).await;
    let body = json!({
        "operation": "sleep", "payload": { "seconds": 600, "steps": 600 }, "timeout_seconds": 0.3,
        "max_retries": 1, "retry": { "base_seconds": 0.1, "cap_seconds": 0.1, "retry_on": ["Timeout"] },
    });
    let (status, job) = app.submit(body).await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let failed = app.wait_for_status(id, "failed").await;
    assert_eq!((failed["error_code"].as_str(), failed["attempts"].as_i64()), (Some("Timeout"), Some(2)), "{failed}");
    let names = app.event_names(id).await;
    assert!(names.contains(&"job.retry_scheduled".to_owned()), "{names:?}");
}

async fn timeouts_default_by_operation_then_queue(backend: Backend) {
    let mut jobs = JobsSettings::default();
    jobs.operations.insert("sleep".into(), defaults(30.0));
    jobs.queues.insert("default".into(), defaults(60.0));
    let options = TestOptions { jobs: Some(jobs), ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let cases = [
        (json!({ "operation": "sleep", "payload": { "seconds": 0 } }), Some(30.0)),
        (json!({ "operation": "ping" }), Some(60.0)),
        (json!({ "operation": "ping", "timeout_seconds": 5 }), Some(5.0)),
        (json!({ "operation": "ping", "queue": PARKED }), None),
    ];
    for (body, expected) in cases {
        let (status, job) = app.submit(body.clone()).await;
        assert_eq!((status, job["timeout_seconds"].as_f64()), (201, expected), "{body}: {job}");
    }
}

fn defaults(timeout_seconds: f64) -> yardmaster::jobs::settings::JobDefaults {
    yardmaster::jobs::settings::JobDefaults { timeout_seconds: Some(timeout_seconds), ..Default::default() }
}

/// A run whose worker is gone (claimed here, never run): the reaper fails it at its timeout.
async fn the_reaper_fails_a_run_no_worker_stops(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let (status, job) = app.submit(json!({ "operation": "ping", "timeout_seconds": 0.5 })).await;
    assert_eq!(status, 201, "{job}");
    let id: Uuid = job["id"].as_str().unwrap().parse().unwrap();
    let claimed = app.store.claim(id, "gone", Duration::from_secs(3600)).await.unwrap();
    assert!(claimed.is_some(), "the job was not claimable");
    let failed = app.wait_for_status(&id.to_string(), "failed").await;
    assert_eq!(failed["error_code"], "Timeout", "{failed}");
}

async fn a_job_not_started_in_time_expires(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let bodies: [fn() -> serde_json::Value; 3] = [
        || json!({ "operation": "ping", "queue_timeout_seconds": 0.5 }),
        || json!({ "operation": "ping", "expires_at": (Utc::now() + chrono::Duration::seconds(2)).to_rfc3339() }),
        // Its wait counts from its run_at.
        || json!({ "operation": "ping", "delay_seconds": 0.3, "queue_timeout_seconds": 0.3 }),
    ];
    for body in bodies {
        // Made just before it is sent: its expiry counts from now.
        let body = body();
        let (status, job) = app.submit(body.clone()).await;
        assert_eq!(status, 201, "{body}: {job}");
        assert!(job["expires_at"].is_string(), "{job}");
        let id = job["id"].as_str().unwrap();
        let cancelled = app.wait_for_status(id, "cancelled").await;
        assert!(cancelled["started_at"].is_null(), "{cancelled}");
        assert_eq!(app.event_names(id).await, ["job.queued", "job.expired"]);
    }
}

/// Past its expiry, a job no claim takes, whether or not the reaper came by yet.
async fn an_expired_job_is_not_claimed(backend: Backend) {
    let options = TestOptions { workers: false, reaper: false, ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let (status, job) = app.submit(json!({ "operation": "ping", "queue_timeout_seconds": 0.2 })).await;
    assert_eq!(status, 201, "{job}");
    let id: Uuid = job["id"].as_str().unwrap().parse().unwrap();
    let expires = chrono::DateTime::parse_from_rfc3339(job["expires_at"].as_str().unwrap()).unwrap();
    // Wait for the row's time to pass (with slack for the database's clock).
    while Utc::now() < expires + chrono::Duration::milliseconds(100) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let claimed = app.store.claim(id, "late", Duration::from_secs(60)).await.unwrap();
    assert!(claimed.is_none(), "an expired job was claimed: {claimed:?}");
    let (_, still) = app.get(&format!("/jobs/{id}")).await;
    assert_eq!(still["status"], "queued", "{still}");
}

async fn bad_deadlines_are_refused(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let past = (Utc::now() - chrono::Duration::seconds(5)).to_rfc3339();
    let run_at = (Utc::now() + chrono::Duration::hours(2)).to_rfc3339();
    let before_run = (Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let cases = [
        (json!({ "operation": "ping", "timeout_seconds": 0 }), Some("/timeout_seconds")),
        (json!({ "operation": "ping", "timeout_seconds": -3 }), Some("/timeout_seconds")),
        (json!({ "operation": "ping", "timeout_seconds": 1e12 }), Some("/timeout_seconds")),
        (json!({ "operation": "ping", "timeout_seconds": "5" }), None),
        (json!({ "operation": "ping", "timeout_seconds": [5] }), None),
        (json!({ "operation": "ping", "queue_timeout_seconds": 0 }), Some("/queue_timeout_seconds")),
        (json!({ "operation": "ping", "expires_at": past }), Some("/expires_at")),
        (json!({ "operation": "ping", "expires_at": "soon\u{0}" }), None),
        (json!({ "operation": "ping", "run_at": run_at, "expires_at": before_run }), Some("/expires_at")),
        (
            json!({ "operation": "ping", "expires_at": run_at, "queue_timeout_seconds": 5 }),
            Some("/queue_timeout_seconds"),
        ),
    ];
    for (body, pointer) in cases {
        let (status, problem) = app.submit(body.clone()).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{body}: {problem}");
        if let Some(pointer) = pointer {
            assert_eq!(problem["pointer"].as_str(), Some(pointer), "{body}: {problem}");
        }
    }
    let body = json!({ "jobs": [{ "operation": "ping" }, { "operation": "ping", "timeout_seconds": 0 }] });
    let (status, problem) = read(app.client.post(app.url("/jobs:batch")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 422, "{problem}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
    // Settings are checked too: a zero default is refused at start.
    let jobs = JobsSettings { queues: BTreeMap::from([("default".into(), defaults(0.0))]), ..Default::default() };
    assert!(jobs.validate().is_err());
}

on_every_backend!(
    a_run_past_its_timeout_is_stopped_and_fails,
    a_timeout_is_retried_by_its_policy,
    timeouts_default_by_operation_then_queue,
    the_reaper_fails_a_run_no_worker_stops,
    a_job_not_started_in_time_expires,
    an_expired_job_is_not_claimed,
    bad_deadlines_are_refused,
);
