//! Paused queues on every backend: a paused queue starts nothing (the claim itself refuses
//! its jobs), its running jobs finish, submissions are accepted and wait, another queue runs
//! on; resuming sends what waited; the state is stored and outlives the process; only
//! admins pause, and only queues of the deployment.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{read, Backend, TestApp, TestOptions};

fn two_queues() -> TestOptions {
    TestOptions { queues: vec![("default", 2), ("other", 1)], ..Default::default() }
}

async fn queue(app: &TestApp, name: &str) -> Value {
    let (status, list) = app.get("/admin/queues").await;
    assert_eq!(status, 200, "{list}");
    let queues = list["queues"].as_array().unwrap();
    queues.iter().find(|queue| queue["name"] == name).cloned().unwrap_or_else(|| panic!("no {name} in {list}"))
}

async fn a_paused_queue_starts_nothing_until_resumed(backend: Backend) {
    let app = TestApp::spawn_with(backend, two_queues()).await;
    let (_, running) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 2, "steps": 1 } })).await;
    let running = running["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&running, "running").await;

    let (status, paused) = app.post("/admin/queues/default/pause").await;
    assert_eq!((status, paused["state"].as_str()), (200, Some("paused")), "{paused}");
    assert!(paused["paused_at"].is_string() && paused["paused_by"].is_string(), "{paused}");
    // What runs finishes.
    app.wait_for_status(&running, "succeeded").await;
    // Submissions are accepted and wait; the other queue goes on.
    let (status, waiting) = app.submit(json!({ "operation": "ping" })).await;
    assert_eq!(status, 201, "{waiting}");
    let waiting = waiting["id"].as_str().unwrap().to_owned();
    let (_, other) = app.submit(json!({ "operation": "ping", "queue": "other" })).await;
    app.wait_for_status(other["id"].as_str().unwrap(), "succeeded").await;
    let (_, job) = app.get(&format!("/jobs/{waiting}")).await;
    assert_eq!(job["status"], "queued", "{job}");
    // Whatever message reaches a worker, the claim refuses a paused queue's job.
    let id = waiting.parse().unwrap();
    assert!(app.store.claim(id, "intruder", Duration::from_secs(30)).await.unwrap().is_none());
    let listed = queue(&app, "default").await;
    assert_eq!((listed["state"].as_str(), listed["queued"].as_i64()), (Some("paused"), Some(1)), "{listed}");
    assert_eq!(queue(&app, "other").await["state"], "running");

    let (status, resumed) = app.post("/admin/queues/default/resume").await;
    assert_eq!((status, resumed["state"].as_str()), (200, Some("running")), "{resumed}");
    assert!(resumed["paused_at"].is_null(), "{resumed}");
    app.wait_for_status(&waiting, "succeeded").await;
}

/// The pause is a row: a process started afterwards (here beside the first, on its store)
/// starts with the queue paused, and runs what waits once it is resumed.
async fn a_pause_outlives_the_process(backend: Backend) {
    let first = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let (status, _) = first.post("/admin/queues/default/pause").await;
    assert_eq!(status, 200);
    let beside = Some((first.store_url.clone(), first.uploads.0.clone()));
    let second = TestApp::spawn_with(backend, TestOptions { beside, ..Default::default() }).await;
    assert_eq!(queue(&second, "default").await["state"], "paused");
    let (_, job) = second.submit(json!({ "operation": "ping" })).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let id = id.parse().unwrap();
    assert!(second.store.claim(id, "intruder", Duration::from_secs(30)).await.unwrap().is_none());
    let (status, _) = second.post("/admin/queues/default/resume").await;
    assert_eq!(status, 200);
    second.wait_for_status(&id.to_string(), "succeeded").await;
}

async fn pausing_is_for_admins_and_known_queues(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let member = app.member("someone").await;
    let (status, problem) = read(member.post(app.url("/admin/queues/default/pause")).send().await.unwrap()).await;
    assert_eq!(status, 403, "{problem}");
    let (status, problem) = read(member.get(app.url("/admin/queues")).send().await.unwrap()).await;
    assert_eq!(status, 403, "{problem}");
    assert_eq!(queue(&app, "default").await["state"], "running");
    for name in ["nope", "default%00", "%00", &"x".repeat(300), "%40remote-not", "default%20"] {
        let (status, problem) = app.post(&format!("/admin/queues/{name}/pause")).await;
        assert_eq!((status, problem["code"].as_str()), (404, Some("queue_not_found")), "{name}: {problem}");
    }
    // Twice is the same as once, either way.
    for _ in 0..2 {
        let (status, paused) = app.post("/admin/queues/default/pause").await;
        assert_eq!((status, paused["state"].as_str()), (200, Some("paused")), "{paused}");
    }
    for _ in 0..2 {
        let (status, resumed) = app.post("/admin/queues/default/resume").await;
        assert_eq!((status, resumed["state"].as_str()), (200, Some("running")), "{resumed}");
    }
    // The lines of registered types and uploads pause too.
    let (status, remote) = app.post("/admin/queues/@remote/pause").await;
    assert_eq!((status, remote["state"].as_str()), (200, Some("paused")), "{remote}");
    let (status, problem) = read(app.client.get(app.url("/admin/queues?state=paused")).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (400, Some("invalid_query")), "{problem}");
    let (status, problem) = read(app.client.get(app.url("/admin/queues/default/pause")).send().await.unwrap()).await;
    assert_eq!(status, 405, "{problem}");
}

on_every_backend!(
    a_paused_queue_starts_nothing_until_resumed,
    a_pause_outlives_the_process,
    pausing_is_for_admins_and_known_queues
);
