//! Remote workers taking and reporting tasks in batches, on both stores: a claim hands out up
//! to `max_tasks` (oldest first, each once), eight claimers taking batches run every task
//! once, the reports of one `POST /tasks:report` are applied or refused each on its own, a
//! silent worker's batch comes back whole to another, and hostile batches are refused whole
//! with nothing applied.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uuid::Uuid;

use crate::helpers::{read, Backend, TestApp, TestOptions, UNEXPLAINED_RUNS};
use crate::remote::{deadlines, each_ran_once, register_type, schema, token, worker_token, Worker, ROTATE};

const NOOP: &str = "lab:analysis:Noop";

async fn app_with_noop(backend: Backend) -> (TestApp, reqwest::Client) {
    // Room in a body for the most reports a request may hold.
    let options = TestOptions { workers: false, max_body_bytes: 1 << 20, ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "analysis", "name": "Noop", "schema": true })).await;
    (app, lab)
}

/// Submits `count` Noop tasks in one batch; their ids.
async fn submit_noops(app: &TestApp, count: usize) -> Vec<String> {
    let jobs: Vec<Value> =
        (0..count).map(|n| json!({ "room": "lab", "operation": "analysis:Noop", "payload": { "n": n } })).collect();
    let (status, body) =
        read(app.client.post(app.url("/jobs:batch")).json(&json!({ "jobs": jobs })).send().await.unwrap()).await;
    assert_eq!(status, 201, "{body}");
    body["jobs"].as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap().to_owned()).collect()
}

/// `POST /tasks/claim` without a wait and with `body` besides the worker: (status, answer).
async fn claim_with(app: &TestApp, worker: &Worker, mut body: Value) -> (u16, Value) {
    body["worker_id"] = json!(worker.id);
    read(worker.client.post(app.url("/tasks/claim")).json(&body).send().await.unwrap()).await
}

/// The claimed tasks' ids, checking the answer's shape: `task` is the first of `tasks`.
fn claimed_ids(answer: &Value) -> Vec<String> {
    let tasks = answer["tasks"].as_array().unwrap_or_else(|| panic!("no tasks in {answer}"));
    assert_eq!(answer["task"], tasks.first().cloned().unwrap_or(Value::Null), "{answer}");
    for task in tasks {
        assert_eq!((task["status"].as_str(), task["attempts"].as_i64()), (Some("running"), Some(1)), "{task}");
    }
    tasks.iter().map(|task| task["id"].as_str().unwrap().to_owned()).collect()
}

async fn report_many(app: &TestApp, client: &reqwest::Client, reports: Value) -> (u16, Value) {
    let request = client.post(app.url("/tasks:report")).json(&json!({ "reports": reports }));
    read(request.send().await.unwrap()).await
}

async fn a_claim_takes_up_to_max_tasks_oldest_first(backend: Backend) {
    let (app, lab) = app_with_noop(backend).await;
    let worker = Worker::register(&app, lab, &[NOOP]).await;
    let mut submitted = submit_noops(&app, 25).await;
    submitted.sort();
    let mut claimed = Vec::new();
    // One by default, then up to ten a claim: 10, 10, and the 4 left.
    for (body, expected) in [(json!({}), 1), (json!({ "max_tasks": 10 }), 10), (json!({ "max_tasks": 10 }), 10)]
        .into_iter()
        .chain([(json!({ "max_tasks": 10 }), 4), (json!({ "max_tasks": 100 }), 0)])
    {
        let (status, answer) = claim_with(&app, &worker, body.clone()).await;
        assert_eq!(status, 200, "{answer}");
        let ids = claimed_ids(&answer);
        assert_eq!(ids.len(), expected, "{body}: {answer}");
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted, "a claim's tasks come oldest first");
        claimed.extend(ids);
    }
    assert_eq!(claimed, submitted, "each task claimed once, oldest first");
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE status = 'running'").await, 25);
    assert_eq!(app.count("SELECT COUNT(*) FROM job_event WHERE event = 'job.started'").await, 25);
}

async fn eight_claimers_taking_batches_run_each_task_once(backend: Backend) {
    let (app, lab) = app_with_noop(backend).await;
    let mut workers = Vec::new();
    for _ in 0..8 {
        workers.push(Worker::register(&app, lab.clone(), &[NOOP]).await);
    }
    submit_noops(&app, 600).await;
    let app = std::sync::Arc::new(app);
    let mut runs = Vec::new();
    for (at, worker) in workers.into_iter().enumerate() {
        let app = app.clone();
        runs.push(actix_rt::spawn(async move {
            let mut done = Vec::new();
            loop {
                let (status, answer) = claim_with(&app, &worker, json!({ "max_tasks": 16 })).await;
                assert_eq!(status, 200, "{answer}");
                let tasks = answer["tasks"].as_array().unwrap().clone();
                if tasks.is_empty() {
                    return done;
                }
                let reports: Vec<Value> = tasks
                    .iter()
                    .map(|task| {
                        json!({ "worker_id": worker.id, "id": task["id"], "attempt": task["attempts"],
                                "status": "succeeded", "result": { "by": at } })
                    })
                    .collect();
                let (status, answer) = report_many(&app, &worker.client, json!(reports)).await;
                assert_eq!(status, 200, "{answer}");
                for (task, result) in tasks.iter().zip(answer["results"].as_array().unwrap()) {
                    assert_eq!(result["id"], task["id"], "results come in the reports' order");
                    assert_eq!(
                        (result["status"].as_u64(), result["task"]["status"].as_str()),
                        (Some(200), Some("succeeded"))
                    );
                    done.push(task["id"].as_str().unwrap().to_owned());
                }
            }
        }));
    }
    each_ran_once(&app, runs, 600).await;
}

async fn reports_in_one_request_are_applied_each_on_its_own(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "modifiers", "name": "Rotate", "schema": schema() })).await;
    let owner = Worker::register(&app, lab.clone(), &[ROTATE]).await;
    let rival = Worker::register(&app, worker_token(&app, &["lab"]).await, &[ROTATE]).await;
    let mut ids = Vec::new();
    for angle in 0..5 {
        let body =
            json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": angle }, "max_retries": 0 });
        ids.push(app.submit(body).await.1["id"].as_str().unwrap().to_owned());
    }
    let (_, answer) = claim_with(&app, &owner, json!({ "max_tasks": 4 })).await;
    assert_eq!(claimed_ids(&answer), ids[..4]);
    let (_, answer) = claim_with(&app, &rival, json!({})).await;
    assert_eq!(claimed_ids(&answer), ids[4..]);
    let missing = Uuid::now_v7();
    let me = &owner.id;
    let reports = json!([
        { "worker_id": me, "id": ids[0], "attempt": 1, "status": "succeeded", "result": { "ok": true } },
        { "worker_id": me, "id": ids[1], "attempt": 1, "status": "failed", "error_code": "ValueError", "message": "bad" },
        { "worker_id": me, "id": ids[2], "attempt": 1, "status": "running", "progress": { "current": 3, "total": 9 } },
        { "worker_id": me, "id": ids[3], "attempt": 2, "status": "succeeded" },
        { "worker_id": me, "id": ids[4], "attempt": 1, "status": "succeeded" },
        { "worker_id": me, "id": missing, "attempt": 1, "status": "succeeded" },
        // Speaking for another token's worker.
        { "worker_id": rival.id, "id": ids[3], "attempt": 1, "status": "succeeded" },
    ]);
    // A task named twice is refused whole: the first report must not be applied either.
    let (status, problem) = report_many(&app, &owner.client, reports.clone()).await;
    assert_eq!(
        (status, problem["code"].as_str(), problem["pointer"].as_str()),
        (422, Some("invalid_request"), Some("/reports/6/id"))
    );
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE status = 'running'").await, 5, "nothing applied");
    let mut reports = reports.as_array().unwrap().clone();
    reports[6]["id"] = json!(Uuid::now_v7());
    let (status, answer) = report_many(&app, &owner.client, json!(reports)).await;
    assert_eq!(status, 200, "{answer}");
    let results = answer["results"].as_array().unwrap();
    let got: Vec<(u64, Option<&str>, Option<&str>)> = results
        .iter()
        .map(|result| {
            let state = result["task"]["status"].as_str();
            (result["status"].as_u64().unwrap(), state, result["problem"]["code"].as_str())
        })
        .collect();
    assert_eq!(
        got,
        [
            (200, Some("succeeded"), None),
            (200, Some("failed"), None),
            (200, Some("running"), None),
            (409, None, Some("invalid_transition")),
            (403, None, Some("task_forbidden")),
            (404, None, Some("task_not_found")),
            (403, None, Some("worker_forbidden")),
        ],
        "{answer}"
    );
    for (at, result) in results.iter().enumerate() {
        assert_eq!(result["id"], reports[at]["id"], "{answer}");
        if let Some(pointer) = result["problem"]["pointer"].as_str() {
            assert_eq!(pointer, format!("/reports/{at}"), "{answer}");
        }
    }
    let (_, task) = app.get(&format!("/jobs/{}", ids[2])).await;
    assert_eq!((task["progress_current"].as_i64(), task["progress_total"].as_i64()), (Some(3), Some(9)), "{task}");
    let (_, task) = app.get(&format!("/jobs/{}", ids[1])).await;
    assert_eq!(task["error_code"].as_str(), Some("ValueError"), "{task}");
    // The refused ones are as they were: the owner's stale run and the rival's task still run.
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE status = 'running'").await, 3);
}

/// A worker that claimed a batch and went silent (as if killed -9): the reaper takes every
/// task of it back when the lease lapses, another worker claims and finishes them all,
/// and the silent worker's late reports are refused each.
async fn a_silent_workers_batch_is_requeued_and_finished_by_another(backend: Backend) {
    // The 1 s lease lapses long before the 10 s worker deadline.
    let app = TestApp::spawn_with(backend, deadlines(10)).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "analysis", "name": "Noop", "schema": true })).await;
    let silent = Worker::register(&app, lab.clone(), &[NOOP]).await;
    let mut submitted = submit_noops(&app, 12).await;
    submitted.sort();
    let (_, answer) = claim_with(&app, &silent, json!({ "max_tasks": 12 })).await;
    assert_eq!(claimed_ids(&answer), submitted);
    let other = Worker::register(&app, lab.clone(), &[NOOP]).await;
    // `other` claims and reports what it gets, as a worker loops. Its own tasks' 1 s leases
    // can lapse before its report on a loaded machine: such a report is refused, the task
    // comes back, and it claims it again (each such run explained by its lapse, below).
    let mut finished: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while finished.len() < submitted.len() {
        assert!(Instant::now() < deadline, "only {} of 12 finished: {finished:?}", finished.len());
        let request = other.client.post(app.url("/tasks/claim")).header("prefer", "wait=5");
        let body = json!({ "worker_id": other.id, "max_tasks": 12 });
        let (status, answer) = read(request.json(&body).send().await.unwrap()).await;
        assert_eq!(status, 200, "{answer}");
        let taken = answer["tasks"].as_array().unwrap().clone();
        if taken.is_empty() {
            continue;
        }
        assert!(taken.iter().all(|task| task["attempts"].as_i64() >= Some(2)), "{taken:?}");
        let reports: Vec<Value> = taken
            .iter()
            .map(|task| json!({ "worker_id": other.id, "id": task["id"], "attempt": task["attempts"], "status": "succeeded" }))
            .collect();
        let (status, answer) = report_many(&app, &other.client, json!(reports)).await;
        assert_eq!(status, 200, "{answer}");
        for (task, result) in taken.iter().zip(answer["results"].as_array().unwrap()) {
            match result["status"].as_u64() {
                Some(200) => finished.push(task["id"].as_str().unwrap().to_owned()),
                _ => assert_eq!(result["problem"]["code"].as_str(), Some("invalid_transition"), "{answer}"),
            }
        }
    }
    finished.sort();
    assert_eq!(finished, submitted);
    let late: Vec<Value> = submitted
        .iter()
        .map(|id| json!({ "worker_id": silent.id, "id": id, "attempt": 1, "status": "succeeded" }))
        .collect();
    let (status, answer) = report_many(&app, &silent.client, json!(late)).await;
    assert_eq!(status, 200, "{answer}");
    let codes: Vec<Option<&str>> =
        answer["results"].as_array().unwrap().iter().map(|result| result["problem"]["code"].as_str()).collect();
    assert_eq!(codes, vec![Some("invalid_transition"); 12], "{answer}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE status = 'succeeded' AND attempts >= 2").await, 12);
    assert_eq!(app.count(UNEXPLAINED_RUNS).await, 0);
}

async fn hostile_batches_are_refused_whole(backend: Backend) {
    let (app, lab) = app_with_noop(backend).await;
    let worker = Worker::register(&app, lab.clone(), &[NOOP]).await;
    let id = submit_noops(&app, 1).await.remove(0);
    for (body, pointer) in [
        (json!({ "max_tasks": 0 }), "/max_tasks"),
        (json!({ "max_tasks": 101 }), "/max_tasks"),
        (json!({ "max_tasks": 1.5 }), ""),
        (json!({ "max_tasks": "3" }), ""),
        (json!({ "max_tasks": -1 }), ""),
        (json!({ "max_tasks": 2, "n\u{0}": 1 }), ""),
    ] {
        let (status, problem) = claim_with(&app, &worker, body.clone()).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{body}: {problem}");
        if !pointer.is_empty() {
            assert_eq!(problem["pointer"].as_str(), Some(pointer), "{body}: {problem}");
        }
    }
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE status = 'queued'").await, 1, "nothing claimed");
    let (_, answer) = claim_with(&app, &worker, json!({ "max_tasks": 5 })).await;
    assert_eq!(claimed_ids(&answer), std::slice::from_ref(&id));
    let good = json!({ "worker_id": worker.id, "id": id, "attempt": 1, "status": "succeeded" });
    let many: Vec<Value> = (0..1001)
        .map(|_| json!({ "worker_id": worker.id, "id": Uuid::now_v7(), "attempt": 1, "status": "succeeded" }))
        .collect();
    let mut nul = good.clone();
    nul["message"] = json!("a\u{0}b");
    nul["status"] = json!("failed");
    let mut no_id = good.clone();
    no_id.as_object_mut().unwrap().remove("id");
    for (reports, status, pointer) in [
        (json!([]), 422, Some("/reports")),
        (json!(many), 422, Some("/reports")),
        (json!([good.clone(), no_id]), 422, Some("/reports/1/id")),
        (json!({ "id": id }), 422, None),
        // Out of the schema's bounds, whoever the worker: refused before anything is read.
        (
            json!([{ "worker_id": Uuid::now_v7(), "id": id, "attempt": 1, "status": "running",
                  "progress": { "current": 0, "total": -1 } }]),
            422,
            Some("/reports/0/progress"),
        ),
        (
            json!([good.clone(), { "worker_id": worker.id, "id": Uuid::now_v7(), "attempt": 0, "status": "succeeded" }]),
            422,
            Some("/reports/1/attempt"),
        ),
        (
            json!([{ "worker_id": worker.id, "id": id, "attempt": 1, "status": "failed", "error_code": "" }]),
            422,
            Some("/reports/0/error_code"),
        ),
        (json!([{ "worker_id": worker.id, "id": id, "attempt": "1", "status": "succeeded" }]), 422, None),
        (json!([{ "worker_id": worker.id, "id": id, "attempt": 1, "status": "done" }]), 422, None),
        (json!([{ "worker_id": worker.id, "id": "a\u{0}b", "attempt": 1, "status": "succeeded" }]), 422, None),
    ] {
        let (got, problem) = report_many(&app, &worker.client, reports.clone()).await;
        let shown: String = reports.to_string().chars().take(200).collect();
        assert_eq!((got, problem["code"].as_str()), (status, Some("invalid_request")), "{shown}: {problem}");
        if let Some(pointer) = pointer {
            assert_eq!(problem["pointer"].as_str(), Some(pointer), "{problem}");
        }
    }
    // A body over the server's limit.
    let huge = json!([{ "worker_id": worker.id, "id": id, "attempt": 1, "status": "succeeded", "message": "x".repeat(3 << 20) }]);
    let (got, problem) = report_many(&app, &worker.client, huge).await;
    assert_eq!((got, problem["code"].as_str()), (413, Some("payload_too_large")), "{problem}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE status = 'running'").await, 1, "nothing applied");
    // A member may not report; another room's worker does not see the task.
    let member = token(&app, json!({ "user": "m", "rooms": ["lab"] })).await;
    let (got, problem) = report_many(&app, &member, json!([good.clone()])).await;
    assert_eq!((got, problem["code"].as_str()), (403, Some("forbidden")), "{problem}");
    let other = worker_token(&app, &["other"]).await;
    register_type(&app, &other, json!({ "category": "analysis", "name": "Noop", "schema": true })).await;
    let stranger = Worker::register(&app, other, &["other:analysis:Noop"]).await;
    let mut theirs = good.clone();
    theirs["worker_id"] = json!(stranger.id);
    let (got, answer) = report_many(&app, &stranger.client, json!([theirs])).await;
    assert_eq!((got, answer["results"][0]["problem"]["code"].as_str()), (200, Some("task_not_found")), "{answer}");
    // A NUL in a failure's message is kept out of the store, and the report applies.
    let (got, answer) = report_many(&app, &worker.client, json!([nul])).await;
    assert_eq!((got, answer["results"][0]["status"].as_u64()), (200, Some(200)), "{answer}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE status = 'running'").await, 0);
}

on_both_backends!(
    a_claim_takes_up_to_max_tasks_oldest_first,
    eight_claimers_taking_batches_run_each_task_once,
    reports_in_one_request_are_applied_each_on_its_own,
    a_silent_workers_batch_is_requeued_and_finished_by_another,
    hostile_batches_are_refused_whole,
);
