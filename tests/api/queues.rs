//! `GET /admin/queues` on both stores: every job queue with its waiting and running jobs and
//! its longest wait, read from the rows; admins only; no parameter taken.

use serde_json::{json, Value};

use crate::helpers::{read, Backend, TestApp, PARKED};

/// The entry of queue `name`.
fn queue<'a>(list: &'a Value, name: &str) -> &'a Value {
    let queues = list["queues"].as_array().unwrap_or_else(|| panic!("no queues: {list}"));
    queues.iter().find(|queue| queue["name"] == name).unwrap_or_else(|| panic!("no queue {name}: {list}"))
}

async fn queues_show_their_waiting_jobs(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for _ in 0..2 {
        let (status, job) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
        assert_eq!(status, 201, "{job}");
    }
    let (status, list) = app.get("/admin/queues").await;
    assert_eq!(status, 200, "{list}");
    let parked = queue(&list, PARKED);
    assert_eq!((parked["queued"].as_i64(), parked["running"].as_i64()), (Some(2), Some(0)), "{list}");
    assert!(parked["oldest_due"].is_string(), "{list}");
    assert!(parked["oldest_wait_seconds"].as_f64().is_some_and(|wait| wait >= 0.0), "{list}");
    // A configured queue with nothing in it is listed at 0.
    let default = queue(&list, "default");
    assert_eq!((default["queued"].as_i64(), default["oldest_due"].is_null()), (Some(0), true), "{list}");
    assert_eq!(default["running"].as_i64(), Some(0), "{list}");
    // A running job is counted as such (found through the index of leases on SQLite).
    let (_, sleeper) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 60 } })).await;
    let sleeper = sleeper["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&sleeper, "running").await;
    let (_, list) = app.get("/admin/queues").await;
    let default = queue(&list, "default");
    assert_eq!((default["queued"].as_i64(), default["running"].as_i64()), (Some(0), Some(1)), "{list}");
    app.post(&format!("/jobs/{sleeper}/cancel")).await;
}

async fn queues_are_for_admins_and_take_no_parameter(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let member = app.member("mia").await;
    let (status, problem) = read(member.get(app.url("/admin/queues")).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("forbidden")), "{problem}");
    for query in ["?room=default", "?x=%00", "?queues=1&queues=2"] {
        let (status, problem) = app.get(&format!("/admin/queues{query}")).await;
        assert_eq!((status, problem["code"].as_str()), (400, Some("invalid_query")), "{query}: {problem}");
    }
    let response = app.client.post(app.url("/admin/queues")).body(vec![0u8; 4096]).send().await.unwrap();
    let allow = response.headers().get("allow").map(|value| value.to_str().unwrap().to_owned());
    let (status, problem) = read(response).await;
    assert_eq!((status, problem["code"].as_str()), (405, Some("method_not_allowed")), "{problem}");
    assert_eq!(allow.as_deref(), Some("GET, HEAD"));
}

on_both_backends!(queues_show_their_waiting_jobs, queues_are_for_admins_and_take_no_parameter);
