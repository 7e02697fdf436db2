//! A run that is no longer the job's current one (cancelled, or superseded by a retry)
//! writes nothing more into the job: its progress and events are dropped, and it is told
//! to stop. Its outcome was already dropped before; these tests guard its reports.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{eventually, Backend, TestApp, TestOptions};

const STEPS: i64 = 40;

/// Submits a `stubborn` job and waits until it has reported a few steps. Its 4 s leave
/// the cancel that follows seconds to land while it runs, however loaded the machine.
async fn start_stubborn(app: &TestApp) -> String {
    let payload = json!({ "steps": STEPS, "pause_ms": 100 });
    let (code, job) = app.submit(json!({ "operation": "stubborn", "payload": payload })).await;
    assert_eq!(code, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();
    eventually("progress reported", Duration::from_secs(30), || async {
        let (_, job) = app.get(&format!("/jobs/{id}")).await;
        (job["progress_current"].as_i64() >= Some(3)).then_some(())
    })
    .await;
    id
}

async fn a_cancelled_run_writes_no_more_progress(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 1)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let id = start_stubborn(&app).await;
    let (code, cancelled) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!((code, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");

    // One job at a time: the sentinel runs only once the stubborn run has ended.
    let (_, sentinel) = app.submit(json!({ "operation": "ping" })).await;
    app.wait_for_status(sentinel["id"].as_str().unwrap(), "succeeded").await;

    let (_, after) = app.get(&format!("/jobs/{id}")).await;
    assert_eq!(after["progress_current"], cancelled["progress_current"], "progress moved after cancel: {after}");
    let names = app.event_names(&id).await;
    assert_eq!(names.last().map(String::as_str), Some("job.cancelled"), "events after cancel: {names:?}");
}

async fn a_superseded_run_does_not_interleave_with_the_retry(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let id = start_stubborn(&app).await;
    let (code, _) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!(code, 200);
    let (code, retried) = app.post(&format!("/jobs/{id}/retry")).await;
    assert_eq!(code, 200, "{retried}");
    let done = app.wait_for_status(&id, "succeeded").await;
    assert_eq!(done["attempts"], 2);
    assert_eq!(done["progress_current"], STEPS);

    // Only the second run's reports follow its start.
    let names = app.event_names(&id).await;
    let second_start = names.iter().rposition(|name| name == "job.started").unwrap();
    let reports = names[second_start..].iter().filter(|name| *name == "job.progress").count();
    assert_eq!(reports as i64, STEPS, "{names:?}");
}

on_both_backends!(a_cancelled_run_writes_no_more_progress, a_superseded_run_does_not_interleave_with_the_retry);
