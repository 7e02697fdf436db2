//! Registered types and remote workers, on both stores: registration rules (conflict,
//! allow-list, rooms, soft delete and revival), schema validation at submit, 16 claimers
//! over 1,000 tasks each run once, a silent worker's task finished by another, reports by
//! the wrong worker refused, a cancel reaching the worker, claims that wait to be woken,
//! hostile input, and the registry's writes in the store's write turn on SQLite.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;
use yardmaster::config::RemoteSettings;

use crate::helpers::{client_with, eventually, gauge, read, Backend, TestApp, TestOptions, UNEXPLAINED_RUNS};

pub(crate) const ROTATE: &str = "lab:modifiers:Rotate";

pub(crate) fn schema() -> Value {
    json!({
        "type": "object",
        "properties": { "angle": { "type": "number" }, "axis": { "enum": ["x", "y", "z"] } },
        "required": ["angle"],
    })
}

/// Short deadlines, so silence and orphans show within a test.
fn quick() -> TestOptions {
    deadlines(3)
}

/// A 1 s lease and a sweep every 200 ms, with a worker deadline of `worker_ttl_seconds`.
pub(crate) fn deadlines(worker_ttl_seconds: u64) -> TestOptions {
    let remote =
        RemoteSettings { worker_ttl_seconds, lease_seconds: 1, sweep_interval_ms: 200, ..RemoteSettings::default() };
    TestOptions { workers: false, remote: Some(remote), ..Default::default() }
}

pub(crate) async fn token(app: &TestApp, body: Value) -> reqwest::Client {
    let (status, created) = read(app.client.post(app.url("/admin/tokens")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{created}");
    client_with(created["token"].as_str().unwrap())
}

pub(crate) async fn worker_token(app: &TestApp, rooms: &[&str]) -> reqwest::Client {
    token(app, json!({ "user": "w", "role": "worker", "rooms": rooms })).await
}

pub(crate) async fn call(client: &reqwest::Client, method: reqwest::Method, url: String, body: Value) -> (u16, Value) {
    read(client.request(method, url).json(&body).send().await.unwrap()).await
}

pub(crate) async fn register_type(app: &TestApp, client: &reqwest::Client, body: Value) -> (u16, Value) {
    call(client, reqwest::Method::POST, app.url("/types"), body).await
}

/// A remote worker as the tests drive it: its token and its registration.
pub(crate) struct Worker {
    pub(crate) client: reqwest::Client,
    pub(crate) id: String,
}

impl Worker {
    pub(crate) async fn register(app: &TestApp, client: reqwest::Client, types: &[&str]) -> Worker {
        let (status, body) = call(&client, reqwest::Method::POST, app.url("/workers"), json!({ "types": types })).await;
        assert_eq!(status, 201, "{body}");
        Worker { client, id: body["id"].as_str().unwrap().to_owned() }
    }

    /// `POST /tasks/claim` with `Prefer: wait=N`: (status, the task or null).
    pub(crate) async fn claim(&self, app: &TestApp, wait: u64) -> (u16, Value) {
        let request = self.client.post(app.url("/tasks/claim")).header("prefer", format!("wait={wait}"));
        let (status, body) = read(request.json(&json!({ "worker_id": self.id })).send().await.unwrap()).await;
        (status, if status == 200 { body["task"].clone() } else { body })
    }

    /// Claims until a task comes, as a worker loops: one claim's wait is capped a second
    /// under the worker's deadline, which a task that takes a lease's lapse and a reaper
    /// pass to come back may outlast on a loaded machine. (status, the task), or the
    /// refusal; a deadline of `within`.
    async fn claim_within(&self, app: &TestApp, within: Duration) -> (u16, Value) {
        let deadline = Instant::now() + within;
        loop {
            let (status, task) = self.claim(app, 10).await;
            if status != 200 || !task.is_null() {
                return (status, task);
            }
            assert!(Instant::now() < deadline, "no task within {within:?}");
        }
    }

    pub(crate) async fn report(&self, app: &TestApp, task: &str, mut body: Value) -> (u16, Value) {
        body["worker_id"] = json!(self.id);
        call(&self.client, reqwest::Method::PATCH, app.url(&format!("/tasks/{task}")), body).await
    }

    async fn heartbeat(&self, app: &TestApp, tasks: Value) -> (u16, Value) {
        let url = app.url(&format!("/workers/{}/heartbeat", self.id));
        call(&self.client, reqwest::Method::POST, url, json!({ "tasks": tasks })).await
    }
}

async fn registration_follows_its_rules(backend: Backend) {
    // The default worker deadline: under `quick()`'s 3 s the orphan sweep could take a type
    // away mid-test (see `an_orphaned_type_is_swept_and_revived`).
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let lab = worker_token(&app, &["lab"]).await;
    let body = |schema: Value| json!({ "category": "modifiers", "name": "Rotate", "schema": schema });
    let (status, created) = register_type(&app, &lab, body(schema())).await;
    assert_eq!((status, created["id"].as_str(), created["active"].as_bool()), (201, Some(ROTATE), Some(true)));
    let (status, _) = register_type(&app, &lab, body(schema())).await;
    assert_eq!(status, 200, "the same registration again changes nothing");
    let (status, problem) = register_type(&app, &lab, body(json!({ "type": "object" }))).await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("schema_conflict")), "{problem}");
    // The same name in another room is another type, whatever its schema.
    let other = worker_token(&app, &["other"]).await;
    let (status, created) = register_type(&app, &other, body(json!({ "type": "object" }))).await;
    assert_eq!((status, created["id"].as_str()), (201, Some("other:modifiers:Rotate")), "{created}");
    // A member registers in its room; nobody else's, and only admins in @global.
    let member = token(&app, json!({ "user": "m", "rooms": ["lab"] })).await;
    let (status, _) =
        register_type(&app, &member, json!({ "category": "analysis", "name": "RDF", "schema": true })).await;
    assert_eq!(status, 201);
    for (client, room, code) in [
        (&lab, "other", "room_forbidden"),
        (&member, "@global", "room_forbidden"),
        (&app.client, "@internal", "room_forbidden"),
    ] {
        let (status, problem) =
            register_type(&app, client, json!({ "room": room, "category": "analysis", "name": "X", "schema": {} }))
                .await;
        assert_eq!((status, problem["code"].as_str()), (403, Some(code)), "{room}: {problem}");
    }
    let global = json!({ "room": "@global", "category": "selections", "name": "All", "schema": {} });
    assert_eq!(register_type(&app, &app.client, global).await.0, 201);
    // Bad parts.
    for (bad, status, code) in [
        (json!({ "category": "weather", "name": "X", "schema": {} }), 400, "invalid_category"),
        (json!({ "category": "modifiers", "name": "a b", "schema": {} }), 422, "invalid_type_name"),
        (json!({ "category": "modifiers", "name": "N\u{0}", "schema": {} }), 422, "invalid_type_name"),
        (json!({ "category": "modifiers", "name": "X", "schema": { "type": "nope" } }), 422, "invalid_schema"),
        (json!({ "category": "modifiers", "name": "X", "schema": [1] }), 422, "invalid_schema"),
        (
            json!({ "category": "modifiers", "name": "X", "schema": { "$ref": "http://127.0.0.1:9/s.json" } }),
            422,
            "invalid_schema",
        ),
        (json!({ "category": "modifiers", "name": "X", "schema": { "title": "\u{0}" } }), 422, "nul_character"),
        (json!({ "category": "modifiers", "name": "X", "schema": {}, "room": "a:b" }), 400, "invalid_room_id"),
        (json!({ "category": 7, "name": "X", "schema": {} }), 422, "invalid_request"),
    ] {
        let (got, problem) = register_type(&app, &lab, bad.clone()).await;
        assert_eq!((got, problem["code"].as_str()), (status, Some(code)), "{bad}: {problem}");
    }
    // Listing: the caller's rooms, @global, and the built-in operations as @internal types.
    let (status, listed) = read(member.get(app.url("/types")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = listed["types"].as_array().unwrap().iter().map(|t| t["id"].as_str().unwrap()).collect();
    for expected in [ROTATE, "lab:analysis:RDF", "@global:selections:All", "@internal:builtin:sleep"] {
        assert!(ids.contains(&expected), "{expected} missing from {ids:?}");
    }
    assert!(!ids.contains(&"other:modifiers:Rotate"), "another room's type is listed: {ids:?}");
    let (_, only) = read(member.get(app.url("/types?room=other")).send().await.unwrap()).await;
    assert_eq!(only["types"], json!([]), "another room's types by name");
}

/// No worker and nothing pending: the sweeper soft-deletes a type after its grace (one
/// worker deadline, 3 s here), a submission no longer finds it, and a registration revives
/// it with a new schema.
async fn an_orphaned_type_is_swept_and_revived(backend: Backend) {
    let app = TestApp::spawn_with(backend, quick()).await;
    let lab = worker_token(&app, &["lab"]).await;
    let body = |schema: Value| json!({ "category": "modifiers", "name": "Rotate", "schema": schema });
    let (status, created) = register_type(&app, &lab, body(schema())).await;
    assert_eq!((status, created["id"].as_str()), (201, Some(ROTATE)), "{created}");
    let listed_rotate = |listed: &Value| listed["types"].as_array().unwrap().iter().any(|t| t["id"] == ROTATE);
    eventually("the orphaned type is soft-deleted", Duration::from_secs(30), || async {
        let (_, listed) = read(lab.get(app.url("/types")).send().await.unwrap()).await;
        (!listed_rotate(&listed)).then_some(())
    })
    .await;
    let (status, problem) =
        app.submit(json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": 1 } })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("unknown_operation")), "{problem}");
    let reviving = Instant::now();
    let (status, revived) = register_type(&app, &lab, body(json!({ "type": "object" }))).await;
    assert_eq!(
        (status, revived["active"].as_bool(), &revived["schema"]),
        (201, Some(true), &json!({ "type": "object" }))
    );
    let (_, listed) = read(lab.get(app.url("/types")).send().await.unwrap()).await;
    // Still an orphan: past its new grace the sweep may take it again, so only a listing
    // read within that grace must show it.
    let within_grace = reviving.elapsed() < Duration::from_secs(3);
    assert!(listed_rotate(&listed) || !within_grace, "the revived type is listed: {listed}");
}

async fn payloads_are_checked_at_submit_and_a_type_without_worker_refuses(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "modifiers", "name": "Rotate", "schema": schema() })).await;
    let member = token(&app, json!({ "user": "m", "rooms": ["lab"] })).await;
    let submit = |body: Value| {
        let member = member.clone();
        let url = app.url("/jobs");
        async move { read(member.post(url).json(&body).send().await.unwrap()).await }
    };
    let (status, problem) =
        submit(json!({ "operation": "modifiers:Rotate", "payload": { "angle": "x", "axis": "w" } })).await;
    assert_eq!(
        (status, problem["code"].as_str(), problem["pointer"].as_str()),
        (422, Some("invalid_payload"), Some("/payload/angle"))
    );
    assert!(problem["detail"].as_str().unwrap().contains("\"/axis\""), "every failing pointer is named: {problem}");
    let (status, problem) = submit(json!({ "operation": "modifiers:Rotate", "payload": { "angle": 1 } })).await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("no_worker")), "{problem}");
    let (status, problem) =
        submit(json!({ "operation": "modifiers:Rotate", "queue": "default", "payload": { "angle": 1 } })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_queue")), "{problem}");
    let (status, problem) = submit(json!({ "operation": "other:modifiers:Rotate", "payload": { "angle": 1 } })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("unknown_operation")), "another room's type: {problem}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0, "a refused submission wrote a job");
    // One that may wait is queued, and knows its place in line.
    let mut ids = Vec::new();
    for angle in [1, 2] {
        let body = json!({ "operation": "modifiers:Rotate", "payload": { "angle": angle }, "wait_for_worker": true });
        let (status, job) = submit(body).await;
        assert_eq!(
            (status, job["operation"].as_str(), job["queue"].as_str()),
            (201, Some(ROTATE), Some("@remote")),
            "{job}"
        );
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    for (at, id) in ids.iter().enumerate() {
        let (_, job) = read(member.get(app.url(&format!("/jobs/{id}"))).send().await.unwrap()).await;
        assert_eq!(job["queue_position"], json!(at + 1), "{job}");
    }
    // With a worker, the type takes submissions; a claimed task has no place in line.
    let worker = Worker::register(&app, lab, &[ROTATE]).await;
    let (status, _) = submit(json!({ "operation": "modifiers:Rotate", "payload": { "angle": 3 } })).await;
    assert_eq!(status, 201);
    let (_, task) = worker.claim(&app, 0).await;
    assert_eq!(task["id"].as_str(), Some(ids[0].as_str()), "the oldest runnable task first");
    let (_, job) = read(member.get(app.url(&format!("/jobs/{}", ids[0]))).send().await.unwrap()).await;
    assert_eq!((job["status"].as_str(), &job["queue_position"]), (Some("running"), &Value::Null));
    let (_, job) = read(member.get(app.url(&format!("/jobs/{}", ids[1]))).send().await.unwrap()).await;
    assert_eq!(job["queue_position"], json!(1));
}

async fn sixteen_claimers_run_each_of_a_thousand_tasks_once(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "analysis", "name": "Noop", "schema": true })).await;
    let mut workers = Vec::new();
    for _ in 0..16 {
        workers.push(Worker::register(&app, lab.clone(), &["lab:analysis:Noop"]).await);
    }
    for chunk in 0..2 {
        let jobs: Vec<Value> = (0..500)
            .map(|n| json!({ "room": "lab", "operation": "analysis:Noop", "payload": { "n": chunk * 500 + n } }))
            .collect();
        let (status, body) =
            read(app.client.post(app.url("/jobs:batch")).json(&json!({ "jobs": jobs })).send().await.unwrap()).await;
        assert_eq!(status, 201, "{body}");
    }
    let app = std::sync::Arc::new(app);
    let mut runs = Vec::new();
    for (at, worker) in workers.into_iter().enumerate() {
        let app = app.clone();
        runs.push(actix_rt::spawn(async move {
            let mut done = Vec::new();
            loop {
                let (status, task) = worker.claim(&app, 0).await;
                assert_eq!(status, 200, "{task}");
                if task.is_null() {
                    return done;
                }
                let id = task["id"].as_str().unwrap().to_owned();
                let body = json!({ "attempt": task["attempts"], "status": "succeeded", "result": { "by": at } });
                let (status, finished) = worker.report(&app, &id, body).await;
                assert_eq!((status, finished["status"].as_str()), (200, Some("succeeded")), "{finished}");
                done.push(id);
            }
        }));
    }
    each_ran_once(&app, runs, 1000).await;
}

/// The claimers' loops (each answering the tasks it finished) ran every one of `tasks`
/// tasks exactly once, each succeeded at its first run with one `job.started`.
pub(crate) async fn each_ran_once(app: &TestApp, runs: Vec<actix_rt::task::JoinHandle<Vec<String>>>, tasks: usize) {
    let mut by_task: HashMap<String, usize> = HashMap::new();
    for run in runs {
        for id in run.await.unwrap() {
            *by_task.entry(id).or_default() += 1;
        }
    }
    assert_eq!(by_task.len(), tasks, "every task ran");
    assert!(by_task.values().all(|runs| *runs == 1), "a task ran twice");
    let tasks = tasks as i64;
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE status = 'succeeded' AND attempts = 1").await, tasks);
    assert_eq!(app.count("SELECT COUNT(*) FROM job_event WHERE event = 'job.started'").await, tasks);
}

async fn a_silent_workers_task_is_requeued_and_finished_by_another(backend: Backend) {
    // The 1 s lease lapses long before the 10 s worker deadline, so the silent worker's late
    // report below comes while it is still registered (a worker already marked gone would
    // be refused for that instead), however slow the machine.
    let app = TestApp::spawn_with(backend, deadlines(10)).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "modifiers", "name": "Rotate", "schema": schema() })).await;
    let silent = Worker::register(&app, lab.clone(), &[ROTATE]).await;
    let (_, job) =
        app.submit(json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": 1 } })).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let (_, task) = silent.claim(&app, 0).await;
    assert_eq!((task["id"].as_str(), task["attempts"].as_i64()), (Some(id.as_str()), Some(1)));
    // The silent worker never beats; the reaper takes its task back once the lease lapses,
    // and a claimer waiting on another worker is woken by the requeue.
    let other = Worker::register(&app, lab.clone(), &[ROTATE]).await;
    finish_despite_lapses(&app, &other, &id).await;
    let names = app.event_names(&id).await;
    assert!(names.contains(&"job.lease_expired_requeue".to_owned()), "{names:?}");
    // The silent worker's late report is refused, and the worker itself is marked gone.
    let (status, problem) = silent.report(&app, &id, json!({ "attempt": 1, "status": "succeeded" })).await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("invalid_transition")), "{problem}");
    // (Its own heartbeat would renew it: the row tells.)
    eventually("the silent worker is marked gone", Duration::from_secs(30), || async {
        (app.count("SELECT COUNT(*) FROM remote_worker WHERE gone_at IS NOT NULL").await >= 1).then_some(())
    })
    .await;
    let (status, problem) = silent.heartbeat(&app, json!([])).await;
    assert_eq!((status, problem["code"].as_str()), (410, Some("worker_gone")), "{problem}");
    let (status, problem) = silent.claim(&app, 0).await;
    assert_eq!((status, problem["code"].as_str()), (410, Some("worker_gone")));
}

/// `worker` claims the requeued task `id` and reports it succeeded, as a worker loops: should
/// its own 1 s lease lapse before the report on a loaded machine (the report refused, the
/// task requeued again), it claims the task once more. Every attempt must be one the log
/// explains by a lapse.
async fn finish_despite_lapses(app: &TestApp, worker: &Worker, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, task) = worker.claim_within(app, Duration::from_secs(30)).await;
        assert_eq!((status, task["id"].as_str()), (200, Some(id)), "{task}");
        let attempt = task["attempts"].as_i64().unwrap();
        assert!(attempt >= 2, "{task}");
        let report = json!({ "attempt": attempt, "status": "succeeded", "result": 7 });
        let (status, answer) = worker.report(app, id, report).await;
        if status == 200 {
            assert_eq!(answer["status"].as_str(), Some("succeeded"), "{answer}");
            break;
        }
        assert_eq!((status, answer["code"].as_str()), (409, Some("invalid_transition")), "{answer}");
        assert!(Instant::now() < deadline, "the task was never finished");
    }
    assert_eq!(app.count(UNEXPLAINED_RUNS).await, 0);
}

async fn reports_come_only_from_the_claiming_worker_and_run(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "modifiers", "name": "Rotate", "schema": schema() })).await;
    let owner = Worker::register(&app, lab.clone(), &[ROTATE]).await;
    let rival = Worker::register(&app, worker_token(&app, &["lab"]).await, &[ROTATE]).await;
    let stranger = {
        let client = worker_token(&app, &["other"]).await;
        register_type(&app, &client, json!({ "category": "modifiers", "name": "Rotate", "schema": {} })).await;
        Worker::register(&app, client, &["other:modifiers:Rotate"]).await
    };
    let (_, job) =
        app.submit(json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": 1 } })).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let (_, task) = owner.claim(&app, 0).await;
    assert_eq!(task["id"].as_str(), Some(id.as_str()));
    let (status, problem) = rival.report(&app, &id, json!({ "attempt": 1, "status": "succeeded" })).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("task_forbidden")), "{problem}");
    let (status, problem) = stranger.report(&app, &id, json!({ "attempt": 1, "status": "succeeded" })).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("task_not_found")), "another room's task: {problem}");
    // Speaking for another token's worker.
    let impostor = Worker { client: rival.client.clone(), id: owner.id.clone() };
    let (status, problem) = impostor.report(&app, &id, json!({ "attempt": 1, "status": "succeeded" })).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("worker_forbidden")), "{problem}");
    let (status, problem) = impostor.claim(&app, 0).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("worker_forbidden")), "{problem}");
    let (status, problem) = owner.report(&app, &id, json!({ "attempt": 2, "status": "succeeded" })).await;
    assert_eq!(
        (status, problem["code"].as_str()),
        (409, Some("invalid_transition")),
        "a run that is not this one: {problem}"
    );
    // Progress, then a failure the retry policy retries, then the outcome.
    let (status, running) = owner
        .report(&app, &id, json!({ "attempt": 1, "status": "running", "progress": { "current": 3, "total": 4 } }))
        .await;
    assert_eq!(
        (status, running["progress_current"].as_i64(), running["progress_total"].as_i64()),
        (200, Some(3), Some(4))
    );
    let (status, done) = owner
        .report(
            &app,
            &id,
            json!({ "attempt": 1, "status": "failed", "error_code": "ValueError", "message": "bad axis" }),
        )
        .await;
    assert_eq!(
        (status, done["status"].as_str(), done["error_code"].as_str()),
        (200, Some("failed"), Some("ValueError")),
        "{done}"
    );
    let (status, problem) = owner.report(&app, &id, json!({ "attempt": 1, "status": "succeeded" })).await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("invalid_transition")), "{problem}");
    // Hostile reports leave the task as it is.
    let (_, job) = app
        .submit(json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": 2 }, "max_retries": 1 }))
        .await;
    let second = job["id"].as_str().unwrap().to_owned();
    let (_, task) = owner.claim(&app, 0).await;
    assert_eq!(task["id"].as_str(), Some(second.as_str()));
    for (bad, status, code) in [
        (json!({ "attempt": "1", "status": "succeeded" }), 422, "invalid_request"),
        (json!({ "attempt": 1, "status": "exploded" }), 422, "invalid_request"),
        (json!({ "attempt": 1, "status": "succeeded", "result": { "a": "\u{0}" } }), 422, "invalid_request"),
        (json!({ "attempt": 1, "status": "running", "progress": { "current": -1 } }), 422, "invalid_request"),
        (json!({ "attempt": 1, "status": "retry_later", "delay_seconds": 1e9 }), 422, "invalid_request"),
    ] {
        let (got, problem) = owner.report(&app, &second, bad.clone()).await;
        assert_eq!((got, problem["code"].as_str()), (status, Some(code)), "{bad}: {problem}");
    }
    let (_, job) = app.get(&format!("/jobs/{second}")).await;
    assert_eq!((job["status"].as_str(), job["attempts"].as_i64()), (Some("running"), Some(1)), "{job}");
    // A retryable failure goes back to the queue under the retry policy, for any worker.
    let (_, job) =
        owner.report(&app, &second, json!({ "attempt": 1, "status": "failed", "error_code": "Flaky" })).await;
    assert_eq!(job["status"].as_str(), Some("queued"), "{job}");
    let (status, task) = rival.claim(&app, 10).await;
    assert_eq!(
        (status, task["id"].as_str(), task["attempts"].as_i64()),
        (200, Some(second.as_str()), Some(2)),
        "{task}"
    );
}

async fn a_cancel_reaches_the_remote_worker(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "modifiers", "name": "Rotate", "schema": schema() })).await;
    let worker = Worker::register(&app, lab, &[ROTATE]).await;
    let (_, job) =
        app.submit(json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": 1 } })).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let (_, task) = worker.claim(&app, 0).await;
    let held = json!([{ "id": id, "attempt": task["attempts"] }]);
    let (status, beat) = worker.heartbeat(&app, held.clone()).await;
    assert_eq!((status, &beat["stop"]), (200, &json!([])), "a running task is renewed: {beat}");
    let (status, _) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!(status, 200);
    let (status, beat) = worker.heartbeat(&app, held).await;
    assert_eq!((status, &beat["stop"]), (200, &json!([{ "id": id, "attempt": 1, "status": "cancelled" }])), "{beat}");
    let (status, problem) =
        worker.report(&app, &id, json!({ "attempt": 1, "status": "running", "message": "still going" })).await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("task_cancelled")), "{problem}");
    let (_, job) = app.get(&format!("/jobs/{id}")).await;
    assert_eq!(job["status"].as_str(), Some("cancelled"));
    // A worker that leaves hands its tasks back at once.
    let (_, job) =
        app.submit(json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": 2 } })).await;
    let second = job["id"].as_str().unwrap().to_owned();
    assert_eq!(worker.claim(&app, 0).await.1["id"].as_str(), Some(second.as_str()));
    let (status, left) =
        call(&worker.client, reqwest::Method::DELETE, app.url(&format!("/workers/{}", worker.id)), json!(null)).await;
    assert_eq!(status, 200, "{left}");
    let (_, job) = app.get(&format!("/jobs/{second}")).await;
    assert_eq!(job["status"].as_str(), Some("queued"), "{job}");
    assert!(app.event_names(&second).await.contains(&"job.requeued_on_shutdown".to_owned()));
}

/// A beat held with `Prefer: wait`: (status, Preference-Applied, the answer, how long it took).
async fn held_beat(worker: &Worker, app: &TestApp, tasks: Value, wait: u64) -> (u16, Option<String>, Value, Duration) {
    let started = Instant::now();
    let url = app.url(&format!("/workers/{}/heartbeat", worker.id));
    let request = worker.client.post(url).header("prefer", format!("wait={wait}")).json(&json!({ "tasks": tasks }));
    let response = request.send().await.unwrap();
    let applied = response.headers().get("preference-applied").map(|value| value.to_str().unwrap().to_owned());
    let (status, body) = read(response).await;
    (status, applied, body, started.elapsed())
}

/// A cancel reaches a worker whose heartbeat the server holds, as the cancel commits: in
/// this process, and (`beside`) from another process's API on the same store.
async fn held_beat_hears_a_cancel(app: &TestApp, cancel_from: &TestApp) {
    let lab = worker_token(app, &["lab"]).await;
    register_type(app, &lab, json!({ "category": "modifiers", "name": "Rotate", "schema": schema() })).await;
    let worker = Worker::register(app, lab, &[ROTATE]).await;
    let (_, job) =
        app.submit(json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": 1 } })).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let (_, task) = worker.claim_within(app, Duration::from_secs(30)).await;
    let held = json!([{ "id": id, "attempt": task["attempts"] }]);
    // Nothing to stop: the answer comes at the wait, the lease renewed.
    let (status, applied, beat, took) = held_beat(&worker, app, held.clone(), 1).await;
    assert_eq!((status, applied.as_deref(), &beat["stop"]), (200, Some("wait=1"), &json!([])), "{beat}");
    assert!(took >= Duration::from_secs(1), "the beat was not held: {took:?}");
    // Held for up to 14 s (half the 30 s lease is the cap), answered by the cancel. A
    // cancel that lands before the beat looks is answered at once all the same.
    let beat = held_beat(&worker, app, held.clone(), 14);
    let cancel = async {
        let (status, _) =
            read(cancel_from.client.post(cancel_from.url(&format!("/jobs/{id}/cancel"))).send().await.unwrap()).await;
        assert_eq!(status, 200);
        Instant::now()
    };
    let ((status, applied, beat, _), cancelled) = tokio::join!(beat, cancel);
    let answered = Instant::now();
    assert_eq!((status, applied.as_deref()), (200, Some("wait=14")), "{beat}");
    assert_eq!(beat["stop"], json!([{ "id": id, "attempt": 1, "status": "cancelled" }]), "{beat}");
    assert!(answered - cancelled < Duration::from_secs(10), "answered at the wait, not by the cancel");
}

async fn a_held_heartbeat_answers_as_its_task_is_cancelled(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    held_beat_hears_a_cancel(&app, &app).await;
}

#[actix_rt::test]
async fn a_held_heartbeat_hears_a_cancel_made_by_another_process_on_postgres() {
    let app = TestApp::spawn_with(Backend::Postgres, TestOptions { workers: false, ..Default::default() }).await;
    let beside = Some((app.store_url.clone(), app.uploads.0.clone()));
    let other =
        TestApp::spawn_with(Backend::Postgres, TestOptions { workers: false, beside, ..Default::default() }).await;
    held_beat_hears_a_cancel(&app, &other).await;
}

async fn a_waiting_claim_is_woken_by_the_submission_and_by_a_delay_ending(backend: Backend) {
    let app =
        TestApp::spawn_with(backend, TestOptions { workers: false, max_wait_seconds: 20, ..Default::default() }).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "modifiers", "name": "Rotate", "schema": schema() })).await;
    let worker = Worker::register(&app, lab, &[ROTATE]).await;
    // Nothing to claim: the answer comes at the wait, empty.
    let started = Instant::now();
    let request = worker.client.post(app.url("/tasks/claim")).header("prefer", "wait=1");
    let response = request.json(&json!({ "worker_id": worker.id })).send().await.unwrap();
    assert_eq!(response.headers()["preference-applied"], "wait=1");
    assert_eq!(read(response).await.1, json!({ "task": null, "tasks": [] }));
    let waited = started.elapsed();
    // The upper bound rules out a wait longer than the one applied (the cap is 20 s), not a
    // slow answer.
    assert!(waited >= Duration::from_secs(1) && waited < Duration::from_secs(6), "{waited:?}");
    // A claim held open gets the job the moment it is submitted.
    let app = std::sync::Arc::new(app);
    let worker = std::sync::Arc::new(worker);
    let claiming = {
        let (app, worker) = (app.clone(), worker.clone());
        actix_rt::spawn(async move {
            let (_, task) = worker.claim(&app, 10).await;
            (task, Instant::now())
        })
    };
    // Submitted only once the claim has looked, found nothing and waits: only a wake can
    // bring it the job before its 10 s are over.
    eventually("the claim is held", Duration::from_secs(10), || async {
        (gauge(&app, "yardmaster_claims_held").await >= 1.0).then_some(())
    })
    .await;
    let (_, job) =
        app.submit(json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": 1 } })).await;
    let submitted = Instant::now();
    let (task, claimed) = claiming.await.unwrap();
    assert_eq!(task["id"], job["id"]);
    // Unwoken, the claim would answer (empty) at the end of its 10 s.
    let late = claimed.saturating_duration_since(submitted);
    assert!(late < Duration::from_secs(5), "the claim was not woken: answered {late:?} after the submission");
    // A task put off for a second is claimed when its second is over, not before.
    let id = job["id"].as_str().unwrap();
    let (status, _) =
        worker.report(&app, id, json!({ "attempt": 1, "status": "retry_later", "delay_seconds": 1 })).await;
    assert_eq!(status, 200);
    let started = Instant::now();
    let (_, task) = worker.claim(&app, 10).await;
    let waited = started.elapsed();
    assert_eq!((task["id"].as_str(), task["attempts"].as_i64()), (Some(id), Some(2)), "{task}");
    // Unwoken when the delay ends, the claim would answer (empty) at the end of its 10 s.
    assert!(waited < Duration::from_secs(6), "the claim was not woken when the delay ended: {waited:?}");
    // "Not before" is judged on the job's own times, not on this test's clock (the report's
    // answer may itself be slow): the delay counts from the request, after the run began,
    // and the second run started no sooner than the `run_after` it set. The times are this
    // host's clock plus a measured offset, or the database's: a few ms of slack absorbs
    // that; a delay not applied would be off by a second.
    let events = app.events(id).await;
    let names: Vec<&str> = events.iter().map(|event| event["event"].as_str().unwrap()).collect();
    assert_eq!(names, ["job.queued", "job.started", "job.retry_later", "job.started"], "{events:?}");
    let time = |value: &Value| chrono::DateTime::parse_from_rfc3339(value.as_str().unwrap()).unwrap();
    let slack = chrono::Duration::milliseconds(50);
    let run_after = time(&events[2]["fields"]["run_after"]);
    let ahead = run_after - time(&events[1]["ts"]);
    assert!(ahead >= chrono::Duration::seconds(1) - slack, "run_after only {ahead} after the run began: {events:?}");
    let early = run_after - time(&events[3]["ts"]);
    assert!(early <= slack, "claimed {early} before its delay was over: {events:?}");
}

async fn hostile_worker_requests_are_refused(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "modifiers", "name": "Rotate", "schema": schema() })).await;
    for (body, status, code) in [
        (json!({ "types": [] }), 422, "invalid_request"),
        (json!({ "types": ["lab:modifiers:Nope"] }), 422, "unknown_type"),
        (json!({ "types": ["other:modifiers:Rotate"] }), 403, "room_forbidden"),
        (json!({ "types": ["lab:modifiers:Rotate\u{0}"] }), 422, "invalid_type_name"),
        (json!({ "types": ["nonsense"] }), 422, "invalid_type_name"),
        (json!({ "types": [ROTATE], "name": "a\u{0}b" }), 422, "invalid_request"),
        (json!({ "types": vec![ROTATE; 101] }), 422, "invalid_request"),
        (json!({ "types": ROTATE }), 422, "invalid_request"),
    ] {
        let (got, problem) = call(&lab, reqwest::Method::POST, app.url("/workers"), body.clone()).await;
        assert_eq!((got, problem["code"].as_str()), (status, Some(code)), "{body}: {problem}");
    }
    let worker = Worker::register(&app, lab.clone(), &[ROTATE]).await;
    let missing = Uuid::now_v7();
    let (status, problem) = Worker { client: lab.clone(), id: missing.to_string() }.claim(&app, 0).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("worker_not_found")));
    let (status, problem) =
        call(&lab, reqwest::Method::POST, app.url("/tasks/claim"), json!({ "worker_id": "not-a-uuid" })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    let many: Vec<Value> = (0..1001).map(|_| json!({ "id": Uuid::now_v7(), "attempt": 1 })).collect();
    let (status, problem) = worker.heartbeat(&app, json!(many)).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    // Naming tasks it does not hold renews nothing and tells it to stop them.
    let (status, beat) = worker.heartbeat(&app, json!([{ "id": missing, "attempt": 1 }])).await;
    assert_eq!((status, beat["stop"][0]["id"].as_str()), (200, Some(missing.to_string().as_str())), "{beat}");
    let (status, problem) =
        worker.report(&app, &missing.to_string(), json!({ "attempt": 1, "status": "succeeded" })).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("task_not_found")));
    // A member may not act as a worker, nor a worker read jobs.
    let member = token(&app, json!({ "user": "m", "rooms": ["lab"] })).await;
    let (status, problem) =
        call(&member, reqwest::Method::POST, app.url("/tasks/claim"), json!({ "worker_id": worker.id })).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("forbidden")));
    let (status, _) = read(lab.get(app.url("/jobs")).send().await.unwrap()).await;
    assert_eq!(status, StatusCode::FORBIDDEN.as_u16());
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
}

/// `GET /tasks/{id}`: a task read by its worker and by its room's members, held with
/// `Prefer: wait` until it ends; anything else (another room's task, a job that is no task,
/// no job) is a missing task.
async fn a_task_is_read_and_long_polled_by_its_worker_and_room(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "modifiers", "name": "Rotate", "schema": schema() })).await;
    let worker = Worker::register(&app, lab.clone(), &[ROTATE]).await;
    let member = token(&app, json!({ "user": "m", "rooms": ["lab"] })).await;
    let stranger = token(&app, json!({ "user": "s", "rooms": ["elsewhere"] })).await;
    let (_, job) =
        app.submit(json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": 1 } })).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let url = app.url(&format!("/tasks/{id}"));
    for (client, who) in [(&lab, "its worker"), (&member, "a member of its room"), (&app.client, "an admin")] {
        let (status, task) = read(client.get(&url).send().await.unwrap()).await;
        assert_eq!(
            (status, task["status"].as_str(), task["id"].as_str()),
            (200, Some("queued"), Some(id.as_str())),
            "{who}: {task}"
        );
    }
    let (_, ping) = app.submit(json!({ "operation": "ping", "room": "lab" })).await;
    let missing = Uuid::now_v7().to_string();
    for (client, of, why) in [
        (&stranger, id.as_str(), "another room's task"),
        (&member, ping["id"].as_str().unwrap(), "a job that is no task"),
        (&lab, missing.as_str(), "no job"),
    ] {
        let (status, problem) = read(client.get(app.url(&format!("/tasks/{of}"))).send().await.unwrap()).await;
        assert_eq!((status, problem["code"].as_str()), (404, Some("task_not_found")), "{why}: {problem}");
    }
    for (path, code) in [("/tasks/not-a-uuid", "invalid_job_id"), ("/tasks/%00", "invalid_job_id")] {
        let (status, problem) = read(member.get(app.url(path)).send().await.unwrap()).await;
        assert_eq!((status, problem["code"].as_str()), (400, Some(code)), "{path}: {problem}");
    }
    // A member may read a task, not report on it.
    let (status, problem) = call(
        &member,
        reqwest::Method::PATCH,
        url.clone(),
        json!({ "worker_id": worker.id, "attempt": 1, "status": "succeeded" }),
    )
    .await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("forbidden")), "{problem}");
    // Held while it runs, answered as it ends.
    let (_, task) = worker.claim(&app, 0).await;
    assert_eq!(task["id"].as_str(), Some(id.as_str()));
    let before = gauge(&app, "yardmaster_watches_held").await;
    let held = {
        let (client, url) = (member.clone(), url.clone());
        actix_rt::spawn(async move {
            let response = client.get(url).header("prefer", "wait=60").send().await.unwrap();
            let applied = response.headers().get("preference-applied").map(|v| v.to_str().unwrap().to_owned());
            let (status, task) = read(response).await;
            (status, applied, task)
        })
    };
    eventually("the read is held", Duration::from_secs(10), || async {
        (gauge(&app, "yardmaster_watches_held").await >= before + 1.0).then_some(())
    })
    .await;
    let (status, reported) =
        worker.report(&app, &id, json!({ "attempt": 1, "status": "succeeded", "result": { "ok": true } })).await;
    assert_eq!(status, 200, "{reported}");
    let (status, applied, task) = held.await.unwrap();
    assert_eq!(
        (status, applied.as_deref(), task["status"].as_str(), &task["result"]),
        (200, Some("wait=60"), Some("succeeded"), &json!({ "ok": true })),
        "{task}"
    );
    // An ended task answers at once.
    let started = Instant::now();
    let (status, task) = read(lab.get(&url).header("prefer", "wait=60").send().await.unwrap()).await;
    assert!(status == 200 && task["status"] == "succeeded" && started.elapsed() < Duration::from_secs(30), "{task}");
}

/// A built-in operation is submittable by the name `GET /types` lists it under.
async fn a_builtin_operation_is_submitted_by_its_type_name(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions::default()).await;
    let (status, types) = app.get("/types?room=@internal").await;
    let listed: Vec<&str> = types["types"].as_array().unwrap().iter().filter_map(|t| t["id"].as_str()).collect();
    assert!(status == 200 && listed.contains(&"@internal:builtin:ping"), "{types}");
    let (status, job) = app.submit(json!({ "operation": "@internal:builtin:ping" })).await;
    assert_eq!(
        (status, job["operation"].as_str(), job["queue"].as_str()),
        (201, Some("ping"), Some("default")),
        "{job}"
    );
    let id = job["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&id, "succeeded").await;
    let body = json!({ "jobs": [{ "operation": "@internal:builtin:ping" }, { "operation": "ping" }] });
    let (status, batch) = read(app.client.post(app.url("/jobs:batch")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{batch}");
    let operations: Vec<&str> =
        batch["jobs"].as_array().unwrap().iter().filter_map(|j| j["operation"].as_str()).collect();
    assert_eq!(operations, ["ping", "ping"], "{batch}");
    for (operation, status, code, why) in [
        ("@internal:builtin:nope", 422, "unknown_operation", "no such built-in"),
        ("@internal:modifiers:ping", 422, "unknown_operation", "not a built-in category"),
        ("@internal:builtin:", 422, "unknown_operation", "no name"),
        ("@internal:builtin:ping\u{0}", 422, "nul_character", "a NUL"),
    ] {
        let (got, problem) = app.submit(json!({ "operation": operation })).await;
        let answer = (got, problem["code"].as_str(), problem["pointer"].as_str());
        assert_eq!(answer, (status, Some(code), Some("/operation")), "{why}: {problem}");
    }
}

/// On PostgreSQL, a claim held by this process is woken by a task another process wrote:
/// the write here goes straight to the database (no in-process notifier), so only the
/// trigger's NOTIFY can wake the claimer.
#[actix_rt::test]
async fn a_claim_is_woken_by_a_task_another_process_wrote() {
    let app = TestApp::spawn_with(Backend::Postgres, TestOptions { workers: false, ..Default::default() }).await;
    let lab = worker_token(&app, &["lab"]).await;
    register_type(&app, &lab, json!({ "category": "modifiers", "name": "Rotate", "schema": schema() })).await;
    let worker = std::sync::Arc::new(Worker::register(&app, lab, &[ROTATE]).await);
    let app = std::sync::Arc::new(app);
    let claiming = {
        let (app, worker) = (app.clone(), worker.clone());
        actix_rt::spawn(async move { worker.claim(&app, 10).await.1 })
    };
    // Written only once the claim has looked, found nothing and waits.
    eventually("the claim is held", Duration::from_secs(10), || async {
        (gauge(&app, "yardmaster_claims_held").await >= 1.0).then_some(())
    })
    .await;
    // Another process's store: the same database, without this process's notifier.
    let elsewhere = yardmaster::store::SeaStore::new(app.db.clone());
    let mut new = yardmaster::domain::NewJob::new(ROTATE);
    new.room = yardmaster::domain::RoomId::parse("lab").unwrap();
    new.queue = yardmaster::domain::QueueName::remote();
    new.payload = json!({ "angle": 1 });
    new.announced = true;
    let started = Instant::now();
    let job = yardmaster::store::JobCommands::submit(&elsewhere, new).await.unwrap().job;
    let task = claiming.await.unwrap();
    assert_eq!(task["id"].as_str(), Some(job.id.to_string().as_str()), "{task}");
    // Unwoken, the claim would answer (empty) at the end of its 10 s.
    assert!(started.elapsed() < Duration::from_secs(5), "woken only at the wait's end: {:?}", started.elapsed());
}

/// A worker that claims and reports, and never heartbeats, stays live: a claim renews its
/// deadline even when a report found it live in between (a report checks, it does not renew).
/// Here each claim comes 2.1 s after the last, with reports all along: past a quarter of the
/// 6 s deadline a report is the first to look again, so a claim that counted that look as a
/// renewal would let the deadline lapse within a few rounds. (A stall of nearly 4 s would
/// lapse it too; the task's lease is long, so a late report cannot lose the task.)
async fn claims_keep_a_worker_that_also_reports_live(backend: Backend) {
    let remote = RemoteSettings {
        worker_ttl_seconds: 6,
        lease_seconds: 60,
        sweep_interval_ms: 200,
        ..RemoteSettings::default()
    };
    let app =
        TestApp::spawn_with(backend, TestOptions { workers: false, remote: Some(remote), ..Default::default() }).await;
    let client = worker_token(&app, &["lab"]).await;
    let body = json!({ "category": "modifiers", "name": "Rotate", "schema": schema() });
    assert_eq!(register_type(&app, &client, body).await.0, 201);
    let worker = Worker::register(&app, client, &[ROTATE]).await;
    for _ in 0..8 {
        let (status, _) =
            app.submit(json!({ "room": "lab", "operation": "modifiers:Rotate", "payload": { "angle": 1 } })).await;
        assert_eq!(status, 201);
    }
    let (status, task) = worker.claim(&app, 0).await;
    assert_eq!(status, 200, "{task}");
    let (id, attempt) = (task["id"].as_str().unwrap().to_owned(), task["attempts"].clone());
    let until = Instant::now() + Duration::from_secs(12);
    let mut round = Instant::now();
    while Instant::now() < until {
        let progress = json!({ "attempt": attempt, "status": "running", "progress": { "current": 1 } });
        let (status, answer) = worker.report(&app, &id, progress).await;
        assert_eq!(status, 200, "a report was refused: {answer}");
        if round.elapsed() >= Duration::from_millis(2_100) {
            let (status, answer) = worker.claim(&app, 0).await;
            assert_eq!(status, 200, "a claim was refused: {answer}");
            round = Instant::now();
        }
    }
}

on_both_backends!(
    registration_follows_its_rules,
    an_orphaned_type_is_swept_and_revived,
    payloads_are_checked_at_submit_and_a_type_without_worker_refuses,
    sixteen_claimers_run_each_of_a_thousand_tasks_once,
    a_silent_workers_task_is_requeued_and_finished_by_another,
    reports_come_only_from_the_claiming_worker_and_run,
    a_cancel_reaches_the_remote_worker,
    a_held_heartbeat_answers_as_its_task_is_cancelled,
    a_waiting_claim_is_woken_by_the_submission_and_by_a_delay_ending,
    hostile_worker_requests_are_refused,
    a_task_is_read_and_long_polled_by_its_worker_and_room,
    a_builtin_operation_is_submitted_by_its_type_name,
    claims_keep_a_worker_that_also_reports_live,
);

/// On SQLite the worker registry writes in the store's write turn: each of its writes made
/// while a job write holds the turn is counted waiting for it, and lands once that ends
/// (not in SQLite's busy handler beside it).
#[actix_rt::test]
async fn the_registrys_writes_wait_for_the_write_turn_on_sqlite() {
    use yardmaster::remote::workers::WorkerBook;
    use yardmaster::store::WriteGate;
    let (_database, url) = crate::helpers::TestDatabase::create(Backend::Sqlite).await;
    let (db, _) = crate::helpers::migrated_store(&url).await;
    let gate = WriteGate::for_backend(sea_orm::DbBackend::Sqlite);
    let book = std::sync::Arc::new(WorkerBook::new(db.clone(), gate.clone(), Duration::from_secs(1)));
    let token = Uuid::new_v4();
    // Each write in turn, while a transaction of the store's holds the turn.
    let held = || async { gate.begin(&db).await.unwrap() };
    let waited = |what: &'static str| {
        let gate = gate.clone();
        async move {
            crate::helpers::eventually(what, Duration::from_secs(10), || {
                let waiting = gate.waiting();
                async move { (waiting == 1).then_some(()) }
            })
            .await
        }
    };

    let turn = held().await;
    let registering = {
        let book = book.clone();
        actix_rt::spawn(async move { book.register(token, "w", &["default:echo:e".into()]).await })
    };
    waited("the registration waits for the turn").await;
    turn.commit().await.unwrap();
    let (id, _) = registering.await.unwrap().unwrap();

    let turn = held().await;
    let renewing = {
        let book = book.clone();
        actix_rt::spawn(async move { book.renew(id, token).await.map(|worker| worker.id) })
    };
    waited("the heartbeat waits for the turn").await;
    turn.commit().await.unwrap();
    assert_eq!(renewing.await.unwrap().unwrap(), id);

    let turn = held().await;
    let leaving = {
        let book = book.clone();
        actix_rt::spawn(async move { book.leave(id).await })
    };
    waited("the leave waits for the turn").await;
    turn.commit().await.unwrap();
    assert!(leaving.await.unwrap().unwrap());
    assert_eq!(gate.waiting(), 0);
}
