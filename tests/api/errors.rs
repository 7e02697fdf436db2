//! Bad input gets problem+json with a stable code, and writes nothing.

use serde_json::{json, Value};

use crate::helpers::{read, Backend, TestApp};

async fn expect_problem(response: reqwest::Response, status: u16, code: &str) -> Value {
    let content_type = response.headers().get("content-type").cloned();
    let (actual, body) = read(response).await;
    assert_eq!((actual, body["code"].as_str()), (status, Some(code)), "{body}");
    assert_eq!(content_type.unwrap(), "application/problem+json");
    assert_eq!(body["status"], status);
    assert!(body["title"].is_string() && body["detail"].is_string() && body["type"].is_string());
    body
}

async fn bad_submissions_are_refused_and_write_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let post = |body: &'static str, content_type: &'static str| {
        app.client.post(app.url("/jobs")).header("content-type", content_type).body(body).send()
    };
    expect_problem(post("{\"operation\": ", "application/json").await.unwrap(), 400, "invalid_json").await;
    expect_problem(post("{\"payload\": {}}", "application/json").await.unwrap(), 422, "invalid_request").await;
    expect_problem(post("{\"operation\": \"ping\"}", "text/plain").await.unwrap(), 415, "unsupported_media_type").await;

    let huge = json!({ "operation": "ping", "payload": { "blob": "x".repeat(100 * 1024) } });
    let response = app.client.post(app.url("/jobs")).json(&huge).send().await.unwrap();
    let problem = expect_problem(response, 413, "payload_too_large").await;
    // The refusal names the setting that would let it in.
    assert!(problem["detail"].as_str().is_some_and(|detail| detail.contains("server.max_body_bytes")), "{problem}");

    let cases = [
        (json!({ "operation": "launch_rockets" }), "unknown_operation"),
        (json!({ "operation": "sleep", "payload": { "seconds": "soon" } }), "invalid_payload"),
        (json!({ "operation": "sleep", "payload": { "seconds": 1, "extra": true } }), "invalid_payload"),
        (json!({ "operation": "ping", "queue": "no spaces" }), "invalid_queue"),
        (json!({ "operation": "ping", "max_retries": -1 }), "invalid_request"),
        (json!({ "operation": "ping", "parent_job_id": uuid::Uuid::now_v7() }), "parent_not_found"),
        (json!({ "operation": "ping", "surprise": 1 }), "invalid_request"),
    ];
    for (body, code) in cases {
        let response = app.client.post(app.url("/jobs")).json(&body).send().await.unwrap();
        expect_problem(response, 422, code).await;
    }
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) FROM job_event").await, 0);
}

async fn unknown_jobs_paths_and_methods_are_problems(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let get = |path: String| app.client.get(app.url(&path)).send();
    let missing = uuid::Uuid::now_v7();
    expect_problem(get(format!("/jobs/{missing}")).await.unwrap(), 404, "job_not_found").await;
    expect_problem(get(format!("/jobs/{missing}/events")).await.unwrap(), 404, "job_not_found").await;
    expect_problem(get("/jobs/not-a-uuid".into()).await.unwrap(), 400, "invalid_job_id").await;
    expect_problem(get("/jobs?status=done".into()).await.unwrap(), 400, "invalid_query").await;
    expect_problem(get("/jobs?limit=0".into()).await.unwrap(), 400, "invalid_query").await;
    expect_problem(get("/nowhere".into()).await.unwrap(), 404, "not_found").await;
    let cancel_missing = app.client.post(app.url(&format!("/jobs/{missing}/cancel"))).send().await.unwrap();
    expect_problem(cancel_missing, 404, "job_not_found").await;
    let delete = app.client.delete(app.url("/jobs")).send().await.unwrap();
    expect_problem(delete, 405, "method_not_allowed").await;
}

async fn health_and_readiness_answer(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (code, health) = app.get("/healthz").await;
    assert_eq!((code, health["status"].as_str()), (200, Some("ok")));
    let (code, ready) = app.get("/readyz").await;
    assert_eq!((code, ready["status"].as_str()), (200, Some("ready")), "{ready}");
}

on_every_backend!(
    bad_submissions_are_refused_and_write_nothing,
    unknown_jobs_paths_and_methods_are_problems,
    health_and_readiness_answer,
);
