//! `GET /metrics` on both stores: Prometheus text that a Prometheus parser reads, counters
//! and histograms that move as jobs run, fail and are cancelled, queue gauges read from the
//! rows, HTTP requests labelled by route pattern (`/jobs/:id`, never a raw path or a
//! client's method);
//! admins only.

use std::collections::HashMap;

use prometheus_parse::{Scrape, Value as Sample};
use serde_json::json;

use crate::helpers::{eventually, read, Backend, TestApp, PARKED};

/// The scrape, parsed.
async fn scrape(app: &TestApp) -> Scrape {
    let response = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let text = response.text().await.unwrap();
    let scrape =
        Scrape::parse(text.lines().map(|line| Ok(line.to_owned()))).unwrap_or_else(|err| panic!("{err}: {text}"));
    // The parser skips a line it cannot read: every request line must have been read.
    let lines = text.lines().filter(|line| line.starts_with("yardmaster_http_requests_total{")).count();
    let read = scrape.samples.iter().filter(|sample| sample.metric == "yardmaster_http_requests_total").count();
    assert_eq!(lines, read, "lines the parser could not read: {text}");
    scrape
}

/// The value of `name` whose labels include all of `labels` (counters and gauges), summed;
/// for a histogram, its count.
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|sample| sample.metric == name)
        .filter(|sample| labels.iter().all(|(key, value)| sample.labels.get(key) == Some(*value)))
        .map(|sample| match &sample.value {
            Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => *v,
            Sample::Histogram(buckets) => buckets.last().map_or(0.0, |bucket| bucket.count),
            Sample::Summary(_) => panic!("{name} is a summary, not a histogram"),
        })
        .sum()
}

async fn metrics_move_as_jobs_run(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let before = scrape(&app).await;
    assert_eq!(value(&before, "yardmaster_store_up", &[]), 1.0);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (status, job) = app.submit(json!({ "operation": "ping" })).await;
        assert_eq!(status, 201, "{job}");
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        app.wait_for_status(id, "succeeded").await;
    }
    let (_, failing) = app.submit(json!({ "operation": "fail" })).await;
    app.wait_for_status(failing["id"].as_str().unwrap(), "failed").await;
    let (_, parked) = app.submit(json!({ "operation": "count", "queue": PARKED })).await;
    let (_, cancelled) = app.submit(json!({ "operation": "count", "queue": PARKED })).await;
    let cancel = app.client.post(app.url(&format!("/jobs/{}/cancel", cancelled["id"].as_str().unwrap())));
    assert_eq!(cancel.send().await.unwrap().status(), 200);
    // A request whose path holds an id, and one with a method of the client's invention.
    let (status, _) = app.get(&format!("/jobs/{}", ids[0])).await;
    assert_eq!(status, 200);
    let odd = reqwest::Method::from_bytes(b"BREW").unwrap();
    app.client.request(odd, app.url("/jobs")).send().await.unwrap();

    let after = scrape(&app).await;
    let moved = |name: &str, labels: &[(&str, &str)]| value(&after, name, labels) - value(&before, name, labels);
    assert_eq!(moved("yardmaster_jobs_started_total", &[("operation", "ping"), ("queue", "default")]), 3.0);
    let succeeded = [("operation", "ping"), ("status", "succeeded")];
    assert_eq!(moved("yardmaster_jobs_finished_total", &succeeded), 3.0);
    assert_eq!(moved("yardmaster_job_run_seconds", &succeeded), 3.0, "one run time per job");
    assert_eq!(moved("yardmaster_job_wait_seconds", &[("operation", "ping")]), 3.0, "one wait per first run");
    assert_eq!(moved("yardmaster_jobs_finished_total", &[("operation", "fail"), ("status", "failed")]), 1.0);
    let cancelled = [("operation", "count"), ("queue", PARKED), ("status", "cancelled")];
    assert_eq!(moved("yardmaster_jobs_finished_total", &cancelled), 1.0);
    // Gauges from the rows: the one parked job waits, none runs.
    assert_eq!(value(&after, "yardmaster_queue_depth", &[("queue", PARKED)]), 1.0, "{parked}");
    assert_eq!(value(&after, "yardmaster_jobs_running", &[("queue", PARKED)]), 0.0);
    assert!(value(&after, "yardmaster_queue_oldest_age_seconds", &[("queue", PARKED)]) >= 0.0);
    assert_eq!(value(&after, "yardmaster_queue_depth", &[("queue", "default")]), 0.0, "configured queues show 0");
    // Requests by route pattern and status; never a raw path, never an invented method.
    let posts = [("route", "/jobs"), ("method", "POST"), ("status", "201")];
    assert_eq!(moved("yardmaster_http_requests_total", &posts), 6.0);
    assert!(moved("yardmaster_http_requests_total", &[("route", "/jobs/:id"), ("method", "GET")]) >= 1.0);
    assert_eq!(moved("yardmaster_http_requests_total", &[("route", "/jobs/:id/cancel"), ("status", "200")]), 1.0);
    assert_eq!(moved("yardmaster_http_requests_total", &[("method", "other")]), 1.0);
    let routes: Vec<&str> = after.samples.iter().filter_map(|sample| sample.labels.get("route")).collect();
    assert!(routes.iter().all(|route| !route.contains(&ids[0])), "a raw path became a label: {routes:?}");
    assert!(after.samples.iter().all(|sample| sample.labels.get("method") != Some("BREW")));
    assert!(moved("yardmaster_http_request_seconds", &[("route", "/jobs"), ("method", "POST")]) >= 6.0);
}

async fn metrics_are_for_admins(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let anonymous = reqwest::Client::new().get(app.url("/metrics")).send().await.unwrap();
    let (status, body) = read(anonymous).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("unauthorized")), "{body}");
    let member = app.member("bob").await;
    let (status, body) = read(member.get(app.url("/metrics")).send().await.unwrap()).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("forbidden")), "{body}");
    let (status, body) = read(app.client.post(app.url("/metrics")).body("x").send().await.unwrap()).await;
    assert_eq!((status, body["code"].as_str()), (405, Some("method_not_allowed")), "{body}");
    // Query strings, NUL and all, change nothing.
    let response = app.client.get(app.url("/metrics?name=%00&x=%ff")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let families: HashMap<String, usize> =
        scrape(&app).await.samples.iter().fold(HashMap::new(), |mut seen, sample| {
            *seen.entry(sample.metric.clone()).or_default() += 1;
            seen
        });
    assert!(families.contains_key("yardmaster_http_requests_total"), "{families:?}");
}

/// A coordinator is closed by its last batch's outcome, not by its own run's write: it is
/// counted there, once.
async fn a_coordinator_closed_by_its_batches_is_counted_once(backend: Backend) {
    let options = crate::helpers::TestOptions::fan_out();
    let app = TestApp::spawn_with(backend, options).await;
    let finished = [("operation", "sum_squares"), ("status", "succeeded")];
    let before = value(&scrape(&app).await, "yardmaster_jobs_finished_total", &finished);
    let payload = json!({ "start": 1, "end": 100, "batch_size": 10 });
    let (_, job) = app.submit(json!({ "operation": "sum_squares", "payload": payload })).await;
    app.wait_for_status(job["id"].as_str().unwrap(), "succeeded").await;
    // Counted just after the commit the row shows: wait for it (with a deadline).
    let after = eventually("the coordinator was counted", std::time::Duration::from_secs(10), || async {
        let after = scrape(&app).await;
        (value(&after, "yardmaster_jobs_finished_total", &finished) > before).then_some(after)
    })
    .await;
    assert_eq!(value(&after, "yardmaster_jobs_finished_total", &finished) - before, 1.0);
    let run = [("operation", "sum_squares"), ("status", "succeeded")];
    assert_eq!(value(&after, "yardmaster_job_run_seconds", &run), 1.0, "its run time, once");
}

on_both_backends!(
    metrics_move_as_jobs_run,
    metrics_are_for_admins,
    a_coordinator_closed_by_its_batches_is_counted_once
);
