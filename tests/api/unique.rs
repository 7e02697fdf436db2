//! Unique jobs on every backend: a repeat within the window, while the first is in one of
//! the states, gets the first job back with 200 (by an explicit key, or by operation,
//! queue and payload); outside the states or the window a new job is made; 50 submissions
//! at once make exactly one job; bad `unique` bodies are refused and keep nothing.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::helpers::{eventually, read, Backend, TestApp, PARKED};

fn id(job: &Value) -> String {
    job["id"].as_str().unwrap_or_else(|| panic!("no id in {job}")).to_owned()
}

async fn a_repeat_within_the_window_gets_the_first_job(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    // On a queue nobody consumes, so the first stays QUEUED.
    let parked = |payload: Value, unique: Value| json!({ "operation": "ping", "queue": PARKED, "payload": payload, "unique": unique });
    let (status, first) = app.submit(parked(json!({ "n": 1 }), json!({ "for_seconds": 60 }))).await;
    assert_eq!(status, 201, "{first}");
    assert!(first["unique_key"].as_str().is_some_and(|key| key.starts_with("auto:")), "{first}");
    let (status, again) = app.submit(parked(json!({ "n": 1 }), json!({ "for_seconds": 60 }))).await;
    assert_eq!((status, id(&again)), (200, id(&first)), "{again}");
    // Another payload is another job; a key of its own makes them the same.
    let (status, other) = app.submit(parked(json!({ "n": 2 }), json!({ "for_seconds": 60 }))).await;
    assert_eq!(status, 201, "{other}");
    let keyed = |n: i64| parked(json!({ "n": n }), json!({ "key": "nightly-report", "for_seconds": 60 }));
    let (status, by_key) = app.submit(keyed(3)).await;
    assert_eq!(status, 201, "{by_key}");
    let (status, same_key) = app.submit(keyed(4)).await;
    assert_eq!((status, id(&same_key)), (200, id(&by_key)), "{same_key}");
    // Only the states named count: a cancelled job does not stop a new one by default.
    app.post(&format!("/jobs/{}/cancel", id(&by_key))).await;
    let (status, after_cancel) = app.submit(keyed(5)).await;
    assert_eq!(status, 201, "{after_cancel}");
    assert_ne!(id(&after_cancel), id(&by_key));
    // A succeeded job counts by default; with states ["queued"] it does not.
    let (_, ran) = app.submit(json!({ "operation": "ping", "unique": { "key": "ran", "for_seconds": 60 } })).await;
    app.wait_for_status(&id(&ran), "succeeded").await;
    let (status, repeat) =
        app.submit(json!({ "operation": "ping", "unique": { "key": "ran", "for_seconds": 60 } })).await;
    assert_eq!((status, id(&repeat)), (200, id(&ran)), "{repeat}");
    let queued_only =
        json!({ "operation": "ping", "unique": { "key": "ran", "for_seconds": 60, "states": ["queued"] } });
    let (status, fresh) = app.submit(queued_only).await;
    assert_eq!(status, 201, "{fresh}");
    // Past the window the first answers no more.
    let (status, short) = app.submit(parked(json!({}), json!({ "key": "short", "for_seconds": 0.3 }))).await;
    assert_eq!(status, 201, "{short}");
    let created: chrono::DateTime<chrono::Utc> = short["created_at"].as_str().unwrap().parse().unwrap();
    eventually("the window to pass", Duration::from_secs(10), || async {
        (chrono::Utc::now() > created + chrono::Duration::milliseconds(400)).then_some(())
    })
    .await;
    let (status, later) = app.submit(parked(json!({}), json!({ "key": "short", "for_seconds": 0.3 }))).await;
    assert_eq!(status, 201, "{later}");
    // In one batch, the second of a key is the first's job.
    let body = json!({ "jobs": [keyed(6), keyed(7), parked(json!({ "n": 8 }), json!({ "for_seconds": 60 }))] });
    let body = json!({ "jobs": body["jobs"].as_array().unwrap().iter().map(|job| {
        let mut job = job.clone();
        job["unique"]["key"] = json!("batch-key");
        job
    }).collect::<Vec<_>>() });
    let (status, batch) = read(app.client.post(app.url("/jobs:batch")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{batch}");
    let ids: Vec<String> = batch["jobs"].as_array().unwrap().iter().map(id).collect();
    assert!(ids.iter().all(|one| *one == ids[0]), "{batch}");
}

async fn fifty_at_once_make_one_job(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "operation": "ping", "queue": PARKED, "unique": { "key": "once", "for_seconds": 600 } });
    let answers = join_all((0..50).map(|_| app.submit(body.clone()))).await;
    let created = answers.iter().filter(|(status, _)| *status == 201).count();
    assert_eq!(created, 1, "{answers:?}");
    assert!(answers.iter().all(|(status, job)| (*status == 200 || *status == 201) && id(job) == id(&answers[0].1)));
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 1);
}

async fn bad_unique_bodies_are_refused(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let cases = [
        (json!({ "for_seconds": 0 }), "invalid_request", Some("/unique/for_seconds")),
        (json!({ "for_seconds": -5 }), "invalid_request", Some("/unique/for_seconds")),
        (json!({ "for_seconds": 1e300 }), "invalid_request", Some("/unique/for_seconds")),
        (json!({ "for_seconds": "60" }), "invalid_request", None),
        (json!({}), "invalid_request", None),
        (json!({ "for_seconds": 60, "states": [] }), "invalid_request", Some("/unique/states")),
        (json!({ "for_seconds": 60, "states": ["nope"] }), "invalid_request", None),
        (json!({ "for_seconds": 60, "key": "" }), "invalid_request", Some("/unique/key")),
        (json!({ "for_seconds": 60, "key": "a\u{0}b" }), "nul_character", Some("/unique/key")),
        (json!({ "for_seconds": 60, "key": "a\nb" }), "invalid_request", Some("/unique/key")),
        (json!({ "for_seconds": 60, "extra": true }), "invalid_request", None),
        (json!([60]), "invalid_request", None),
    ];
    for (unique, code, pointer) in cases {
        let body = json!({ "operation": "ping", "unique": unique });
        let (status, problem) = app.submit(body.clone()).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some(code)), "{body}: {problem}");
        if let Some(pointer) = pointer {
            assert_eq!(problem["pointer"].as_str(), Some(pointer), "{body}: {problem}");
        }
    }
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
}

on_every_backend!(
    a_repeat_within_the_window_gets_the_first_job,
    fifty_at_once_make_one_job,
    bad_unique_bodies_are_refused
);
