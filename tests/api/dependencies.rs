//! Jobs that wait for jobs, on every backend: a DAG submitted in one batch (`#N`
//! references) runs in an order that respects every edge, each node once; a waiting job
//! says so and is in no line; an operation reads its dependencies' results; a failure
//! cancels exactly its descendants (`on_dependency_failure` `run` runs anyway); bad,
//! foreign and failed dependencies are refused and nothing is written.
//! `dependency_processes` does the same across processes with a worker killed.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::helpers::{read, Backend, TestApp, TestOptions};

/// A DAG of `nodes` nodes, each depending on up to three random earlier ones (a fixed
/// seed), as `POST /jobs:batch` items of `operation` with `#N` references.
pub fn random_dag(nodes: usize, seed: u64, item: impl Fn(usize) -> Value) -> (Vec<Value>, Vec<(usize, usize)>) {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    let (mut items, mut edges) = (Vec::new(), Vec::new());
    for at in 0..nodes {
        let mut on: Vec<usize> = Vec::new();
        if at > 0 {
            for _ in 0..next() % 4 {
                let earlier = next() % at;
                if !on.contains(&earlier) {
                    on.push(earlier);
                }
            }
        }
        let mut body = item(at);
        if !on.is_empty() {
            body["depends_on"] = json!(on.iter().map(|earlier| format!("#{earlier}")).collect::<Vec<_>>());
        }
        edges.extend(on.iter().map(|earlier| (at, *earlier)));
        items.push(body);
    }
    (items, edges)
}

fn time(value: &Value) -> DateTime<Utc> {
    value.as_str().and_then(|text| text.parse().ok()).unwrap_or_else(|| panic!("not a time: {value}"))
}

async fn batch(app: &TestApp, jobs: &[Value]) -> (u16, Value) {
    read(app.client.post(app.url("/jobs:batch")).json(&json!({ "jobs": jobs })).send().await.unwrap()).await
}

fn ids_of(answer: &Value) -> Vec<String> {
    answer["jobs"].as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap().to_owned()).collect()
}

async fn a_dag_runs_in_the_order_of_its_edges(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 8)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let (items, edges) =
        random_dag(300, 7, |_| json!({ "operation": "sleep", "payload": { "seconds": 0.002, "steps": 1 } }));
    let (status, answer) = batch(&app, &items).await;
    assert_eq!(status, 201, "{answer}");
    let ids = ids_of(&answer);
    // A node with dependencies is written waiting.
    let waiting = edges.iter().map(|(at, _)| *at).max().unwrap();
    assert!(answer["jobs"][waiting]["waiting_since"].is_string(), "{}", answer["jobs"][waiting]);
    app.wait_for_count("SELECT COUNT(*) FROM job WHERE status = 'succeeded'", 300, Duration::from_secs(120)).await;
    let mut rows: HashMap<String, Value> = HashMap::new();
    for id in &ids {
        let (_, job) = app.get(&format!("/jobs/{id}")).await;
        assert!(job["waiting_since"].is_null() && job["held_since"].is_null(), "{job}");
        rows.insert(id.clone(), job);
    }
    for (at, earlier) in &edges {
        let (job, dependency) = (&rows[&ids[*at]], &rows[&ids[*earlier]]);
        assert!(
            time(&job["started_at"]) >= time(&dependency["finished_at"]),
            "node {at} started before its dependency {earlier} ended: {job} {dependency}"
        );
    }
    let starts = app.count("SELECT COUNT(*) FROM job_event WHERE event = 'job.started'").await;
    assert_eq!(starts, 300, "each node runs once");
    let met = app.count("SELECT COUNT(*) FROM job_event WHERE event = 'job.dependencies_met'").await;
    let dependent = edges.iter().map(|(at, _)| *at).collect::<std::collections::BTreeSet<_>>().len() as i64;
    assert_eq!(met, dependent);
    // Both ends of an edge list it.
    let (at, earlier) = edges[0];
    let (status, links) = app.get(&format!("/jobs/{}/dependencies", ids[at])).await;
    assert_eq!(status, 200, "{links}");
    let named = |list: &Value, id: &str| list.as_array().unwrap().iter().any(|job| job["id"] == id);
    assert!(named(&links["dependencies"], &ids[earlier]), "{links}");
    let (_, links) = app.get(&format!("/jobs/{}/dependencies", ids[earlier])).await;
    assert!(named(&links["dependents"], &ids[at]), "{links}");
}

/// A waiting job says so: `waiting_since`, a `job.waiting` event, no place in line; its
/// operation reads its dependencies' results once they succeed.
async fn a_waiting_job_reads_its_dependencies_results(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 4)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let (status, slow) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 8, "steps": 1 } })).await;
    assert_eq!(status, 201, "{slow}");
    let slow = slow["id"].as_str().unwrap().to_owned();
    let (status, quick) = app.submit(json!({ "operation": "ping" })).await;
    assert_eq!(status, 201);
    let quick = quick["id"].as_str().unwrap().to_owned();
    let (status, gather) = app.submit(json!({ "operation": "gather", "depends_on": [slow, quick, slow] })).await;
    assert_eq!(status, 201, "{gather}");
    let gather = gather["id"].as_str().unwrap().to_owned();
    let (_, job) = app.get(&format!("/jobs/{gather}")).await;
    if job["waiting_since"].is_string() {
        assert!(job["queue_position"].is_null(), "{job}");
        assert_eq!(job["status"], "queued");
    }
    let events = app.events(&gather).await;
    let waiting = events.iter().find(|event| event["event"] == "job.waiting").unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(waiting["fields"]["depends_on"].as_array().unwrap().len(), 2, "{waiting}");
    let done = app.wait_for_status(&gather, "succeeded").await;
    let seen = done["result"]["dependencies"].as_array().unwrap();
    assert_eq!(seen.len(), 2, "{done}");
    for dependency in seen {
        assert_eq!(dependency["status"], "succeeded", "{dependency}");
        assert!(dependency["result"].is_object(), "{dependency}");
    }
    // A dependency that has ended already lets a new job queue at once.
    let (status, after) = app.submit(json!({ "operation": "ping", "depends_on": [quick] })).await;
    assert_eq!(status, 201, "{after}");
    assert!(after["waiting_since"].is_null(), "{after}");
    app.wait_for_status(after["id"].as_str().unwrap(), "succeeded").await;
}

/// a fails; b waits for a, c for b, f for c and e; d waits for a but runs anyway; e is
/// independent. a's failure cancels b, c and f, each naming the dependency that failed.
async fn a_failure_cancels_exactly_its_descendants(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 4)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let items = [
        json!({ "operation": "fail", "payload": { "error_class": "Boom" } }),
        json!({ "operation": "ping", "depends_on": ["#0"] }),
        json!({ "operation": "ping", "depends_on": ["#1"] }),
        json!({ "operation": "gather", "depends_on": ["#0"], "on_dependency_failure": "run" }),
        json!({ "operation": "ping" }),
        json!({ "operation": "ping", "depends_on": ["#2", "#4"] }),
    ];
    let (status, answer) = batch(&app, &items).await;
    assert_eq!(status, 201, "{answer}");
    let ids = ids_of(&answer);
    app.wait_for_status(&ids[0], "failed").await;
    for (at, dependency) in [(1, 0), (2, 1), (5, 2)] {
        let job = app.wait_for_status(&ids[at], "cancelled").await;
        assert!(job["started_at"].is_null(), "{job}");
        let events = app.events(&ids[at]).await;
        let failed = events.iter().find(|event| event["event"] == "job.dependency_failed");
        let failed = failed.unwrap_or_else(|| panic!("{events:?}"));
        assert_eq!(failed["fields"]["dependency_job_id"], ids[dependency].as_str(), "{failed}");
    }
    let ran = app.wait_for_status(&ids[3], "succeeded").await;
    assert_eq!(ran["result"]["dependencies"][0]["status"], "failed", "{ran}");
    app.wait_for_status(&ids[4], "succeeded").await;
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE status = 'cancelled'").await, 3);
    // Cancelling a job by hand cancels what waits for it.
    let items = [
        json!({ "operation": "sleep", "payload": { "seconds": 30, "steps": 30 } }),
        json!({ "operation": "ping", "depends_on": ["#0"] }),
    ];
    let (_, answer) = batch(&app, &items).await;
    let ids = ids_of(&answer);
    let (status, _) = app.post(&format!("/jobs/{}/cancel", ids[0])).await;
    assert_eq!(status, 200);
    app.wait_for_status(&ids[1], "cancelled").await;
    // A waiting job cancelled by hand no longer waits; retried by hand, it runs now,
    // whatever its dependencies.
    let items = [
        json!({ "operation": "sleep", "payload": { "seconds": 30, "steps": 30 } }),
        json!({ "operation": "ping", "depends_on": ["#0"] }),
    ];
    let (_, answer) = batch(&app, &items).await;
    let ids = ids_of(&answer);
    let (status, cancelled) = app.post(&format!("/jobs/{}/cancel", ids[1])).await;
    assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");
    assert!(cancelled["waiting_since"].is_null(), "{cancelled}");
    let (status, retried) = app.post(&format!("/jobs/{}/retry", ids[1])).await;
    assert_eq!(status, 200, "{retried}");
    app.wait_for_status(&ids[1], "succeeded").await;
    let (_, running) = app.get(&format!("/jobs/{}", ids[0])).await;
    assert_ne!(running["status"], "succeeded", "{running}");
    app.post(&format!("/jobs/{}/cancel", ids[0])).await;
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for line in [
        "yardmaster_dependencies_settled_total{operation=\"ping\",outcome=\"cancelled\"} 4",
        "yardmaster_dependencies_settled_total{operation=\"gather\",outcome=\"queued\"} 1",
    ] {
        assert!(metrics.lines().any(|seen| seen == line), "{line} not in {metrics}");
    }
}

async fn bad_dependencies_are_refused(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 2)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let (_, other) = app.submit(json!({ "operation": "ping", "room": "other" })).await;
    let other = other["id"].as_str().unwrap().to_owned();
    let (_, failed) = app.submit(json!({ "operation": "fail" })).await;
    let failed = failed["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&failed, "failed").await;
    let before = app.count("SELECT COUNT(*) FROM job").await;
    let unknown = uuid::Uuid::now_v7().to_string();
    let many: Vec<String> = (0..1001).map(|_| uuid::Uuid::now_v7().to_string()).collect();
    for (body, status, code, pointer) in [
        (json!({ "operation": "ping", "depends_on": ["#0"] }), 422, "invalid_dependency", "/depends_on/0"),
        (json!({ "operation": "ping", "depends_on": ["nope"] }), 422, "invalid_dependency", "/depends_on/0"),
        (json!({ "operation": "ping", "depends_on": ["a\u{0}b"] }), 422, "nul_character", "/depends_on/0"),
        (json!({ "operation": "ping", "depends_on": many }), 422, "invalid_dependency", "/depends_on"),
        (json!({ "operation": "ping", "depends_on": [unknown] }), 404, "dependency_not_found", ""),
        (json!({ "operation": "ping", "depends_on": [other] }), 404, "dependency_not_found", ""),
        (json!({ "operation": "ping", "depends_on": [failed] }), 409, "dependency_failed", ""),
    ] {
        let (answered, problem) = app.submit(body.clone()).await;
        assert_eq!((answered, problem["code"].as_str()), (status, Some(code)), "{problem}");
        if !pointer.is_empty() {
            assert_eq!(problem["pointer"], pointer, "{problem}");
        }
    }
    for body in [json!({ "operation": "ping", "depends_on": 5 }), json!({ "operation": "ping", "depends_on": [5] })] {
        let (answered, problem) = app.submit(body).await;
        assert_eq!((answered, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    }
    let (answered, problem) = app.submit(json!({ "operation": "ping", "on_dependency_failure": "maybe" })).await;
    assert_eq!((answered, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    // In a batch: only earlier items, and the failing item is named.
    for (items, pointer) in [
        (vec![json!({ "operation": "ping", "depends_on": ["#0"] })], "/jobs/0/depends_on/0"),
        (
            vec![json!({ "operation": "ping" }), json!({ "operation": "ping", "depends_on": ["#1"] })],
            "/jobs/1/depends_on/0",
        ),
        (
            vec![json!({ "operation": "ping", "depends_on": ["#1"] }), json!({ "operation": "ping" })],
            "/jobs/0/depends_on/0",
        ),
        (
            vec![json!({ "operation": "ping" }), json!({ "operation": "ping", "depends_on": ["#-1"] })],
            "/jobs/1/depends_on/0",
        ),
        (
            vec![json!({ "operation": "ping" }), json!({ "operation": "ping", "depends_on": ["#00000"] })],
            "/jobs/1/depends_on/0",
        ),
    ] {
        let (answered, problem) = batch(&app, &items).await;
        assert_eq!((answered, problem["code"].as_str()), (422, Some("invalid_dependency")), "{problem}");
        assert_eq!(problem["pointer"], pointer, "{problem}");
    }
    let items = [json!({ "operation": "ping" }), json!({ "operation": "ping", "depends_on": ["#0", other] })];
    let (answered, problem) = batch(&app, &items).await;
    assert_eq!((answered, problem["code"].as_str()), (404, Some("dependency_not_found")), "{problem}");
    assert_eq!(problem["pointer"], "/jobs/1/depends_on/1", "{problem}");
    // An earlier item of another room is another room's job.
    let items = [json!({ "operation": "ping", "room": "other" }), json!({ "operation": "ping", "depends_on": ["#0"] })];
    let (answered, problem) = batch(&app, &items).await;
    assert_eq!((answered, problem["code"].as_str()), (404, Some("dependency_not_found")), "{problem}");
    assert_eq!(problem["pointer"], "/jobs/1/depends_on/0", "{problem}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, before, "a refused submission wrote nothing");
    // A failed dependency with `run`: the job runs at once.
    let (status, job) =
        app.submit(json!({ "operation": "ping", "depends_on": [failed], "on_dependency_failure": "run" })).await;
    assert_eq!(status, 201, "{job}");
    app.wait_for_status(job["id"].as_str().unwrap(), "succeeded").await;
    let (status, problem) = app.get("/jobs/not-a-job/dependencies").await;
    assert_eq!((status, problem["code"].as_str()), (400, Some("invalid_job_id")), "{problem}");
    let (status, problem) = app.get(&format!("/jobs/{unknown}/dependencies")).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("job_not_found")), "{problem}");
    // Another room's job is not found, its links neither.
    let member = app.member("dora").await;
    let (status, problem) =
        read(member.get(app.url(&format!("/jobs/{other}/dependencies"))).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("job_not_found")), "{problem}");
    let body = json!({ "operation": "ping", "depends_on": [other] });
    let (status, problem) = read(member.post(app.url("/jobs")).json(&body).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("dependency_not_found")), "{problem}");
}

/// A repeated item (its idempotency key already used) answers with the earlier job; what
/// depends on the item depends on that job.
async fn a_repeated_item_is_depended_on_as_the_earlier_job(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 2)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let (status, first) = app.submit(json!({ "operation": "ping", "idempotency_key": "root" })).await;
    assert_eq!(status, 201);
    let items = [
        json!({ "operation": "ping", "idempotency_key": "root" }),
        json!({ "operation": "gather", "depends_on": ["#0"] }),
    ];
    let (status, answer) = batch(&app, &items).await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(answer["jobs"][0]["id"], first["id"]);
    let done = app.wait_for_status(answer["jobs"][1]["id"].as_str().unwrap(), "succeeded").await;
    assert_eq!(done["result"]["dependencies"][0]["id"], first["id"], "{done}");
}

/// A coordinator closed by its last child's ending lets what waits for it go: the
/// settling's safety net, which would too, is an hour away.
async fn a_coordinator_closed_by_its_children_releases_its_dependents(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 4)], reaper_interval_ms: 3_600_000, ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let children: Vec<Value> = (0..5).map(|_| json!({ "operation": "ping" })).collect();
    let items = [
        json!({ "operation": "group", "payload": { "jobs": children } }),
        json!({ "operation": "gather", "depends_on": ["#0"] }),
    ];
    let (status, answer) = batch(&app, &items).await;
    assert_eq!(status, 201, "{answer}");
    let ids = ids_of(&answer);
    app.wait_for_status(&ids[0], "succeeded").await;
    app.wait_for_status(&ids[1], "succeeded").await;
}

/// `jobs.max_dependencies` is the most a job may name; 0 is refused at start.
async fn the_configured_number_of_dependencies_is_the_most(backend: Backend) {
    let jobs = yardmaster::config::JobsSettings { max_dependencies: 2, ..Default::default() };
    let options = TestOptions { workers: false, jobs: Some(jobs), ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let items: Vec<Value> = (0..3).map(|_| json!({ "operation": "ping" })).collect();
    let (_, answer) = batch(&app, &items).await;
    let ids = ids_of(&answer);
    let (status, problem) = app.submit(json!({ "operation": "ping", "depends_on": ids })).await;
    assert_eq!(
        (status, problem["code"].as_str(), problem["pointer"].as_str()),
        (422, Some("invalid_dependency"), Some("/depends_on")),
        "{problem}"
    );
    let (status, job) = app.submit(json!({ "operation": "ping", "depends_on": &ids[..2] })).await;
    assert_eq!(status, 201, "{job}");
    let zero = yardmaster::config::JobsSettings { max_dependencies: 0, ..Default::default() };
    assert!(zero.validate().unwrap_err().to_string().contains("max_dependencies"));
}

on_every_backend!(
    the_configured_number_of_dependencies_is_the_most,
    a_coordinator_closed_by_its_children_releases_its_dependents,
    a_dag_runs_in_the_order_of_its_edges,
    a_waiting_job_reads_its_dependencies_results,
    a_failure_cancels_exactly_its_descendants,
    bad_dependencies_are_refused,
    a_repeated_item_is_depended_on_as_the_earlier_job,
);
