//! Hostile and malformed input on every backend: NUL characters, queues that would strand a
//! job, children slipped under a coordinator, reused keys, HEAD and wrong methods, huge
//! details. Each is refused with its problem code, located by a JSON pointer, and writes
//! nothing.

use reqwest::Method;
use serde_json::{json, Value};

use crate::helpers::{read, Backend, TestApp, TestOptions};

/// Sends `body` to `path` and checks the problem's status, code and pointer.
async fn refused(app: &TestApp, path: &str, body: Value, status: u16, code: &str, pointer: Option<&str>) -> Value {
    let response = app.client.post(app.url(path)).json(&body).send().await.unwrap();
    let (actual, problem) = read(response).await;
    assert_eq!((actual, problem["code"].as_str()), (status, Some(code)), "{body} -> {problem}");
    assert_eq!(problem["pointer"].as_str(), pointer, "{body} -> {problem}");
    problem
}

async fn nul_characters_are_refused_where_they_stand(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let nul = "a\u{0}b";
    let cases = [
        (json!({ "operation": nul }), "/operation"),
        (json!({ "operation": "ping", "queue": nul }), "/queue"),
        (json!({ "operation": "ping", "idempotency_key": nul }), "/idempotency_key"),
        (json!({ "operation": "ping", "payload": { "deep": [0, { "x": nul }] } }), "/payload/deep/1/x"),
        (json!({ "operation": "ping", "payload": { nul: 1 } }), "/payload/a\u{0}b"),
        (json!({ "operation": "ping", "retry": { "retry_on": ["E", nul] } }), "/retry/retry_on/1"),
        (
            json!({ "operation": "group", "payload": { "jobs": [{ "operation": "ping", "payload": { "s": nul } }] } }),
            "/payload/jobs/0/payload/s",
        ),
    ];
    for (body, pointer) in cases {
        refused(&app, "/jobs", body, 422, "nul_character", Some(pointer)).await;
    }
    let batch = json!({ "jobs": [{ "operation": "ping" }, { "operation": "ping", "payload": { "s": nul } }] });
    refused(&app, "/jobs:batch", batch, 422, "nul_character", Some("/jobs/1/payload/s")).await;
    let (code, problem) = app.get("/jobs?operation=a%00b").await;
    assert_eq!((code, problem["code"].as_str()), (400, Some("invalid_query")), "{problem}");
    // An escaped backslash is no NUL: `\\u0000` is six ordinary characters.
    let (code, job) = app.submit(json!({ "operation": "ping", "payload": { "s": "\\u0000" } })).await;
    assert_eq!(code, 201, "{job}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 1);
}

async fn a_queue_nothing_consumes_as_jobs_is_refused(backend: Backend) {
    let options = TestOptions {
        workers: false,
        operation_queues: vec!["batches"],
        write_queues: vec!["batch_writes"],
        ..Default::default()
    };
    let app = TestApp::spawn_with(backend, options).await;
    for queue in ["batches", "batch_writes", "nowhere"] {
        let body = json!({ "operation": "ping", "queue": queue });
        let problem = refused(&app, "/jobs", body, 422, "unknown_queue", Some("/queue")).await;
        assert!(problem["detail"].as_str().unwrap().contains("default"), "{problem}");
    }
    let group = json!({ "operation": "group", "payload": { "jobs": [{ "operation": "ping", "queue": "batches" }] } });
    refused(&app, "/jobs", group, 422, "unknown_queue", Some("/payload/jobs/0/queue")).await;
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
}

async fn a_coordinators_children_are_its_own_from_submission(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let group = json!({ "operation": "group", "payload": { "jobs": [{ "operation": "ping" }] } });
    let (code, queued_group) = app.submit(group).await;
    assert_eq!(code, 201, "{queued_group}");
    let intruder = json!({ "operation": "fail", "parent_job_id": queued_group["id"] });
    refused(&app, "/jobs", intruder.clone(), 409, "parent_is_coordinator", Some("/parent_job_id")).await;
    let batch = json!({ "jobs": [{ "operation": "ping" }, intruder] });
    refused(&app, "/jobs:batch", batch, 409, "parent_is_coordinator", Some("/jobs/1/parent_job_id")).await;
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 1);
}

async fn a_reused_key_must_ask_for_the_same_retries(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let first = json!({ "operation": "ping", "idempotency_key": "k1", "max_retries": 1 });
    let (code, _) = app.submit(first.clone()).await;
    assert_eq!(code, 201);
    let (code, _) = app.submit(first).await;
    assert_eq!(code, 200, "the same request is an idempotent repeat");
    let other_retries = json!({ "operation": "ping", "idempotency_key": "k1", "max_retries": 2 });
    refused(&app, "/jobs", other_retries, 409, "idempotency_conflict", None).await;
    let other_policy =
        json!({ "operation": "ping", "idempotency_key": "k1", "max_retries": 1, "retry": { "base_seconds": 9 } });
    refused(&app, "/jobs", other_policy, 409, "idempotency_conflict", None).await;
    let batch = json!({ "jobs": [{ "operation": "ping" }, { "operation": "ping", "idempotency_key": "k1" }] });
    refused(&app, "/jobs:batch", batch, 409, "idempotency_conflict", Some("/jobs/1/idempotency_key")).await;
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 1);
}

async fn batch_problems_name_their_item(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let shape = json!({ "jobs": [{ "operation": "ping" }, { "operation": "ping" }, { "operation": 7 }] });
    refused(&app, "/jobs:batch", shape, 422, "invalid_request", Some("/jobs/2")).await;
    let orphan =
        json!({ "jobs": [{ "operation": "ping" }, { "operation": "ping", "parent_job_id": uuid::Uuid::now_v7() }] });
    refused(&app, "/jobs:batch", orphan, 422, "parent_not_found", Some("/jobs/1/parent_job_id")).await;
    refused(&app, "/jobs:batch", json!({ "jobs": [] }), 422, "invalid_request", Some("/jobs")).await;
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
}

async fn a_list_page_holds_summaries_not_payloads(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let blob = "p".repeat(60 * 1024);
    for _ in 0..20 {
        let (code, _) =
            app.submit(json!({ "operation": "ping", "queue": "parked", "payload": { "blob": blob } })).await;
        assert_eq!(code, 201);
    }
    let long_message = "m".repeat(20_000);
    let (_, failing) = app.submit(json!({ "operation": "fail", "payload": { "message": long_message } })).await;
    let failed = app.wait_for_status(failing["id"].as_str().unwrap(), "failed").await;
    assert_eq!(failed["error_message"].as_str().map(str::len), Some(20_000), "a job's own page has it all");

    let response = app.client.get(app.url("/jobs?limit=500")).send().await.unwrap();
    let bytes = response.bytes().await.unwrap();
    assert!(bytes.len() < 64 * 1024, "a page of 21 summaries took {} bytes", bytes.len());
    let page: Value = serde_json::from_slice(&bytes).unwrap();
    let jobs = page["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 21);
    assert!(jobs.iter().all(|job| job.get("payload").is_none() && job.get("result").is_none()), "{jobs:?}");
    let summary = jobs.iter().find(|job| job["id"] == failing["id"]).unwrap();
    assert_eq!(summary["error_message"].as_str().map(|message| message.chars().count()), Some(500));
}

async fn details_never_echo_a_huge_input(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let huge = "x".repeat(60 * 1024);
    let body = json!({ "operation": "sleep", "payload": { "seconds": huge } });
    let problem = refused(&app, "/jobs", body, 422, "invalid_payload", Some("/payload")).await;
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.len() <= 1100, "{} bytes of detail", detail.len());
}

async fn head_works_and_wrong_methods_say_what_is_allowed(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let (_, job) = app.submit(json!({ "operation": "ping" })).await;
    let id = job["id"].as_str().unwrap();
    for path in ["/healthz", "/readyz", "/jobs", &format!("/jobs/{id}"), &format!("/jobs/{id}/events")] {
        let response = app.client.head(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "HEAD {path}");
        assert!(response.bytes().await.unwrap().is_empty(), "HEAD {path} has no body");
    }
    let cases = [
        (Method::POST, "/healthz".to_owned(), "GET, HEAD"),
        (Method::DELETE, "/readyz".to_owned(), "GET, HEAD"),
        (Method::PUT, "/jobs".to_owned(), "GET, HEAD, POST"),
        (Method::GET, format!("/jobs/{id}/cancel"), "POST"),
        (Method::DELETE, format!("/jobs/{id}"), "GET, HEAD"),
    ];
    for (method, path, allow) in cases {
        let response = app.client.request(method.clone(), app.url(&path)).send().await.unwrap();
        let allowed = response.headers().get("allow").map(|value| value.to_str().unwrap().to_owned());
        let (code, problem) = read(response).await;
        assert_eq!((code, problem["code"].as_str()), (405, Some("method_not_allowed")), "{method} {path}");
        assert_eq!(allowed.as_deref(), Some(allow), "{method} {path}");
    }
}

async fn an_encoding_the_server_does_not_decode_is_refused(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    for encoding in ["gzip", "br", "x-unknown"] {
        let response = app
            .client
            .post(app.url("/jobs"))
            .header("content-type", "application/json")
            .header("content-encoding", encoding)
            .body(r#"{"operation": "ping"}"#)
            .send()
            .await
            .unwrap();
        let (code, problem) = read(response).await;
        assert_eq!((code, problem["code"].as_str()), (415, Some("unsupported_encoding")), "{encoding}: {problem}");
    }
    let identity =
        app.client.post(app.url("/jobs")).header("content-encoding", "identity").json(&json!({ "operation": "ping" }));
    assert_eq!(identity.send().await.unwrap().status(), 201);
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 1);
}

async fn group_children_take_their_operations_retry_defaults(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let group = json!({ "operation": "group", "payload": { "jobs": [{ "operation": "flaky" }] } });
    let (_, job) = app.submit(group).await;
    let done = app.wait_for_status(job["id"].as_str().unwrap(), "succeeded").await;
    let (_, children) = app.get(&format!("/jobs/{}/children", done["id"].as_str().unwrap())).await;
    let child = &children["jobs"][0];
    assert_eq!((child["status"].as_str(), child["attempts"].as_i64()), (Some("succeeded"), Some(2)), "{child}");
    assert_eq!(child["max_retries"], 2);
}

async fn a_huge_batch_size_still_sums_the_range(backend: Backend) {
    let options =
        TestOptions { operation_queues: vec!["batches"], write_queues: vec!["batch_writes"], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let payload = json!({ "start": 1, "end": 10, "batch_size": u64::MAX - 1 });
    let (code, job) = app.submit(json!({ "operation": "sum_squares", "payload": payload })).await;
    assert_eq!(code, 201, "{job}");
    let done = app.wait_for_status(job["id"].as_str().unwrap(), "succeeded").await;
    assert_eq!(done["result"], json!({ "batches": 1, "sum": 385 }));
}

on_every_backend!(
    nul_characters_are_refused_where_they_stand,
    a_queue_nothing_consumes_as_jobs_is_refused,
    a_coordinators_children_are_its_own_from_submission,
    a_reused_key_must_ask_for_the_same_retries,
    batch_problems_name_their_item,
    details_never_echo_a_huge_input,
    a_list_page_holds_summaries_not_payloads,
    head_works_and_wrong_methods_say_what_is_allowed,
    an_encoding_the_server_does_not_decode_is_refused,
    group_children_take_their_operations_retry_defaults,
    a_huge_batch_size_still_sums_the_range,
);
