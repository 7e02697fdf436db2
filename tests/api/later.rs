//! Jobs that run later (`run_at`, `delay_seconds`) on every backend: a job waits for its time
//! (QUEUED, in no line), starts no earlier, is cancellable while it waits, outlives the
//! process that took it, and starts on time between sweeps; bad times are refused.

use std::time::Duration;

use chrono::{DateTime, FixedOffset, Utc};
use serde_json::{json, Value};

use crate::helpers::{eventually, read, Backend, TestApp, TestOptions};

fn time(value: &Value) -> DateTime<FixedOffset> {
    DateTime::parse_from_rfc3339(value.as_str().unwrap_or_else(|| panic!("not a time: {value}"))).unwrap()
}

/// These times come from different clocks (this host's for `run_at`; the database's, or
/// this host's plus a measured offset, for the start): a few ms of slack absorbs that, and a
/// job started before its time would be off by far more.
fn slack() -> chrono::Duration {
    chrono::Duration::milliseconds(50)
}

async fn a_job_waits_for_its_time_then_runs(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    // Far enough ahead that the submission is read before it, however loaded the machine.
    let run_at = Utc::now() + chrono::Duration::seconds(3);
    let (status, job) = app.submit(json!({ "operation": "ping", "run_at": run_at.to_rfc3339() })).await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!(time(&job["run_after"]), run_at, "{job}");
    // While it waits it says so: QUEUED until a time ahead, in no line yet.
    let (_, waiting) = app.get(&format!("/jobs/{id}")).await;
    if waiting["status"] == "queued" {
        assert!(waiting["queue_position"].is_null(), "{waiting}");
    }
    let done = app.wait_for_status(&id, "succeeded").await;
    let started = time(&done["started_at"]);
    assert!(started >= run_at - slack(), "started {started}, before its time {run_at}: {done}");
    let events = app.events(&id).await;
    assert_eq!(time(&events[0]["fields"]["run_after"]), run_at, "{events:?}");
}

async fn batch_items_take_their_own_times(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "jobs": [
        { "operation": "ping", "delay_seconds": 1.0 },
        { "operation": "ping" },
        { "operation": "ping", "run_at": "2001-01-01T00:00:00Z" },
    ] });
    let (status, answer) = read(app.client.post(app.url("/jobs:batch")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{answer}");
    let jobs = answer["jobs"].as_array().unwrap();
    let delayed = time(&jobs[0]["run_after"]);
    // No delay, and a time already past, both start at once: no run_after.
    assert!(jobs[1]["run_after"].is_null() && jobs[2]["run_after"].is_null(), "{answer}");
    for job in jobs {
        app.wait_for_status(job["id"].as_str().unwrap(), "succeeded").await;
    }
    let (_, done) = app.get(&format!("/jobs/{}", jobs[0]["id"].as_str().unwrap())).await;
    assert!(time(&done["started_at"]) >= delayed - slack(), "{done}");
}

async fn a_waiting_job_can_be_cancelled(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (status, job) = app.submit(json!({ "operation": "ping", "delay_seconds": 3600 })).await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let (status, cancelled) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");
    // Nothing waits for it any more: the next due time is no one's.
    assert_eq!(app.store.next_due().await.unwrap(), None);
}

/// The job's time is in its row, not in the memory of the process that took it: another
/// process on the same store (this one never sends it) runs it when it is due.
async fn a_waiting_job_outlives_the_process_that_took_it(backend: Backend) {
    let quiet = TestOptions { workers: false, dispatch_sweep: false, ..Default::default() };
    let first = TestApp::spawn_with(backend, quiet).await;
    let (status, job) = first.submit(json!({ "operation": "ping", "delay_seconds": 1.0 })).await;
    assert_eq!(status, 201, "{job}");
    let beside = Some((first.store_url.clone(), first.uploads.0.clone()));
    let second = TestApp::spawn_with(backend, TestOptions { beside, ..Default::default() }).await;
    let done = second.wait_for_status(job["id"].as_str().unwrap(), "succeeded").await;
    assert!(time(&done["started_at"]) >= time(&job["run_after"]) - slack(), "{done}");
}

/// With sweeps a minute apart, a job due in a second still starts within seconds: the
/// submission rings the sweeper, which then wakes at the job's time.
async fn the_sweep_wakes_when_a_job_falls_due(backend: Backend) {
    let options = TestOptions { dispatch_interval_ms: 60_000, ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let (status, job) = app.submit(json!({ "operation": "ping", "delay_seconds": 1.0 })).await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();
    eventually("the job ran, long before the next tick", Duration::from_secs(20), || async {
        let (_, job) = app.get(&format!("/jobs/{id}")).await;
        (job["status"] == "succeeded").then_some(())
    })
    .await;
}

async fn bad_times_are_refused(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let far = (Utc::now() + chrono::Duration::days(400)).to_rfc3339();
    let cases = [
        (json!({ "operation": "ping", "run_at": "tomorrow" }), "invalid_request", None),
        (json!({ "operation": "ping", "run_at": "2026-13-01T00:00:00Z" }), "invalid_request", None),
        (json!({ "operation": "ping", "run_at": 1767225600 }), "invalid_request", None),
        (json!({ "operation": "ping", "run_at": "2026-12-01T00:00:00\u{0}Z" }), "invalid_request", None),
        (json!({ "operation": "ping", "run_at": far }), "invalid_request", Some("/run_at")),
        (json!({ "operation": "ping", "delay_seconds": -1 }), "invalid_request", Some("/delay_seconds")),
        (json!({ "operation": "ping", "delay_seconds": "10" }), "invalid_request", None),
        (json!({ "operation": "ping", "delay_seconds": 1e300 }), "invalid_request", Some("/delay_seconds")),
        (
            json!({ "operation": "ping", "delay_seconds": 5, "run_at": "2030-01-01T00:00:00Z" }),
            "invalid_request",
            Some("/delay_seconds"),
        ),
    ];
    for (body, code, pointer) in cases {
        let (status, problem) = app.submit(body.clone()).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some(code)), "{body}: {problem}");
        if let Some(pointer) = pointer {
            assert_eq!(problem["pointer"].as_str(), Some(pointer), "{body}: {problem}");
        }
    }
    // A bad item of a batch is named, and nothing of the batch is kept.
    let body = json!({ "jobs": [{ "operation": "ping" }, { "operation": "ping", "delay_seconds": -5 }] });
    let (status, problem) = read(app.client.post(app.url("/jobs:batch")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 422, "{problem}");
    assert!(problem["pointer"].as_str().is_some_and(|pointer| pointer.starts_with("/jobs/1")), "{problem}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
}

on_every_backend!(
    a_job_waits_for_its_time_then_runs,
    batch_items_take_their_own_times,
    a_waiting_job_can_be_cancelled,
    a_waiting_job_outlives_the_process_that_took_it,
    the_sweep_wakes_when_a_job_falls_due,
    bad_times_are_refused,
);
