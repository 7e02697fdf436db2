//! Many jobs per statement: group commits that write claims and outcomes of concurrent jobs
//! with multi-row statements, and `POST /jobs:batch`.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{json, Value};
use yardmaster::domain::NewJob;
use yardmaster::store::{Completion, RunRef};

use crate::helpers::{read, Backend, TestApp, TestOptions};

const JOBS: usize = 200;

/// Every write in a shared statement is still judged by its own compare-and-set: of two
/// racing claims one wins, each outcome lands on its own job with its own result, and an
/// outcome naming a stale run changes nothing.
async fn group_commit_judges_each_write_on_its_own(backend: Backend) {
    let options = TestOptions { workers: false, group_commit_max: 64, ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let store = app.store.clone();

    let submitted = join_all((0..JOBS).map(|_| store.submit(NewJob::new("ping")))).await;
    let ids: Vec<_> = submitted.into_iter().map(|submission| submission.unwrap().job.id).collect();

    let lease = Duration::from_secs(60);
    let claims = ids.iter().flat_map(|id| ["a", "b"].map(|owner| store.claim(*id, owner, lease)));
    let claimed: Vec<_> = join_all(claims).await.into_iter().filter_map(Result::unwrap).collect();
    assert_eq!(claimed.len(), JOBS, "exactly one of each pair of claims wins");

    let outcome = |n: usize| match n % 2 {
        0 => Completion::Succeeded { result: json!({ "n": n }) },
        _ => Completion::Failed { error_code: format!("E{n}"), message: format!("failure {n}") },
    };
    let finishes = claimed.iter().enumerate().flat_map(|(n, job)| {
        let stale = RunRef { id: job.id, attempt: job.attempts + 1 };
        [(RunRef::from(job), outcome(n)), (stale, Completion::Succeeded { result: json!("stale") })]
    });
    let finishes: Vec<_> = finishes.collect();
    let finished = join_all(finishes.iter().map(|(run, completion)| store.finish(*run, completion))).await;
    for ((run, _), result) in finishes.iter().zip(finished) {
        let moved = result.unwrap().is_some();
        let current = claimed.iter().any(|job| RunRef::from(job) == *run);
        assert_eq!(moved, current, "{run:?}");
    }

    for (n, job) in claimed.iter().enumerate() {
        let stored = store.get(job.id).await.unwrap().unwrap();
        let events = store.events(job.id, None, 10).await.unwrap();
        let names: Vec<_> = events.iter().map(|event| event.event.as_str()).collect();
        match n % 2 {
            0 => {
                assert_eq!(stored.result, Some(json!({ "n": n })));
                assert_eq!((stored.error_code, stored.failures), (None, 0));
                assert_eq!(names, ["job.queued", "job.started", "job.succeeded"]);
            }
            _ => {
                assert_eq!(stored.result, None);
                assert_eq!(stored.error_code.as_deref(), Some(format!("E{n}").as_str()));
                assert_eq!(stored.error_message.as_deref(), Some(format!("failure {n}").as_str()));
                assert_eq!(stored.failures, 1);
                assert_eq!(names, ["job.queued", "job.started", "job.failed"]);
            }
        }
        assert_eq!(stored.owner, job.owner);
        assert!(stored.leased_until.is_none());
    }
}

async fn post_batch(app: &TestApp, body: Value) -> (u16, Value) {
    read(app.client.post(app.url("/jobs:batch")).json(&body).send().await.unwrap()).await
}

async fn a_batch_is_submitted_in_one_go_and_runs(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let batch = json!({ "jobs": [
        { "operation": "ping" },
        { "operation": "sleep", "payload": { "seconds": 0.01 }, "idempotency_key": "batch-a" },
        { "operation": "ping", "idempotency_key": "batch-b" },
    ]});
    let (status, body) = post_batch(&app, batch.clone()).await;
    assert_eq!(status, 201, "{body}");
    let jobs = body["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 3);
    assert!(jobs.iter().all(|job| job["created"] == true && job["status"] == "queued"), "{body}");
    assert_eq!(jobs[1]["operation"], "sleep");
    for job in jobs {
        app.wait_for_status(job["id"].as_str().unwrap(), "succeeded").await;
    }

    // The keyed submissions answer with their jobs; the keyless one is new.
    let (status, again) = post_batch(&app, batch).await;
    assert_eq!(status, 201, "{again}");
    let created: Vec<_> = again["jobs"].as_array().unwrap().iter().map(|job| job["created"].clone()).collect();
    assert_eq!(created, [true, false, false]);
    assert_eq!(again["jobs"][1]["id"], jobs[1]["id"]);
    assert_eq!(again["jobs"][2]["status"], "succeeded");

    let keyed_only = json!({ "jobs": [{ "operation": "ping", "idempotency_key": "batch-b" }] });
    let (status, repeat) = post_batch(&app, keyed_only).await;
    assert_eq!(status, 200, "{repeat}");
    assert_eq!(repeat["jobs"][0]["id"], jobs[2]["id"]);
}

/// A bad item rejects the whole batch, names the item, and writes nothing.
async fn a_bad_item_rejects_the_whole_batch(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let count = "SELECT COUNT(*) FROM job";

    let unknown = json!({ "jobs": [{ "operation": "ping" }, { "operation": "ping" }, { "operation": "nope" }] });
    let (status, problem) = post_batch(&app, unknown).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("unknown_operation")), "{problem}");
    assert_eq!(problem["pointer"], "/jobs/2/operation");

    let key_twice = json!({ "jobs": [
        { "operation": "ping", "idempotency_key": "k" },
        { "operation": "sleep", "payload": { "seconds": 1 }, "idempotency_key": "k" },
    ]});
    let (status, problem) = post_batch(&app, key_twice).await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("idempotency_conflict")), "{problem}");

    let (status, problem) = post_batch(&app, json!({ "jobs": [] })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    let too_many: Vec<Value> = (0..1001).map(|_| json!({ "operation": "ping" })).collect();
    let (status, problem) = post_batch(&app, json!({ "jobs": too_many })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");

    assert_eq!(app.count(count).await, 0);
    assert_eq!(app.count("SELECT COUNT(*) FROM job_event").await, 0);

    // The same key twice with the same request is one job.
    let same_twice = json!({ "jobs": [
        { "operation": "ping", "idempotency_key": "k" },
        { "operation": "ping", "idempotency_key": "k" },
    ]});
    let (status, body) = post_batch(&app, same_twice).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["jobs"][0]["id"], body["jobs"][1]["id"]);
    assert_eq!((body["jobs"][0]["created"].clone(), body["jobs"][1]["created"].clone()), (json!(true), json!(false)));
    assert_eq!(app.count(count).await, 1);
}

on_both_backends!(
    group_commit_judges_each_write_on_its_own,
    a_batch_is_submitted_in_one_go_and_runs,
    a_bad_item_rejects_the_whole_batch,
);
