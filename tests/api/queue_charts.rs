//! The queues' per-minute rollup, on every backend: its runs started, succeeded and failed
//! by minute are the jobs' own rows counted by the minute of their `started_at` and
//! `finished_at`; its wait percentiles are the rows' waits; it samples the waiting depth
//! and a pause; the dashboard draws it.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{json, Value};
use yardmaster::flow::entity::queue_minute;
use yardmaster::flow::rollup::{bucket, hour, middle, minute_of};

use crate::helpers::{eventually, Backend, TestApp, TestOptions, PARKED};

fn time(value: &Value) -> DateTime<Utc> {
    value.as_str().and_then(|text| text.parse().ok()).unwrap_or_else(|| panic!("not a time: {value}"))
}

async fn rows(app: &TestApp, queue: &str) -> Vec<queue_minute::Model> {
    queue_minute::Entity::find().filter(queue_minute::Column::Queue.eq(queue)).all(&app.db).await.unwrap()
}

async fn dashboard(app: &TestApp) -> String {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(yardmaster::http::CLIENT_IDLE)
        .build()
        .unwrap();
    let request = client.get(app.url("/ui")).header("Cookie", format!("ym_session={}", app.admin_token));
    request.send().await.unwrap().text().await.unwrap()
}

async fn the_rollup_counts_what_the_rows_say(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 4)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let mut jobs: Vec<Value> =
        (0..30).map(|_| json!({ "operation": "sleep", "payload": { "seconds": 0.01, "steps": 1 } })).collect();
    jobs.extend((0..10).map(|_| json!({ "operation": "fail" })));
    let (status, answer) = crate::helpers::read(
        app.client.post(app.url("/jobs:batch")).json(&json!({ "jobs": jobs })).send().await.unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    let ended = "SELECT COUNT(*) FROM job WHERE status IN ('succeeded', 'failed')";
    app.wait_for_count(ended, 40, Duration::from_secs(60)).await;
    eventually("the rollup to count every run", Duration::from_secs(30), || async {
        let rows = rows(&app, "default").await;
        let started: i64 = rows.iter().map(|row| row.started).sum();
        let ended: i64 = rows.iter().map(|row| row.succeeded + row.failed).sum();
        (started == 40 && ended == 40).then_some(())
    })
    .await;

    // The rows, counted by minute.
    let (_, page) = app.get("/jobs?limit=100").await;
    let jobs = page["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 40, "{page}");
    let mut expected: BTreeMap<DateTime<Utc>, [i64; 3]> = BTreeMap::new();
    let mut waits: Vec<chrono::Duration> = Vec::new();
    for job in jobs {
        let started = time(&job["started_at"]);
        expected.entry(minute_of(started)).or_default()[0] += 1;
        let at = if job["status"] == "succeeded" { 1 } else { 2 };
        expected.entry(minute_of(time(&job["finished_at"]))).or_default()[at] += 1;
        waits.push(started - time(&job["created_at"]));
    }
    let mut rolled: BTreeMap<DateTime<Utc>, [i64; 3]> = BTreeMap::new();
    for row in rows(&app, "default").await {
        let minute = rolled.entry(row.minute).or_default();
        minute[0] += row.started;
        minute[1] += row.succeeded;
        minute[2] += row.failed;
    }
    rolled.retain(|_, counts| counts.iter().any(|count| *count > 0));
    assert_eq!(rolled, expected, "the rollup against the rows, by minute: [started, succeeded, failed]");

    // The median wait of a minute is the rows' median, to the histogram's bucket.
    let now = yardmaster::store::clock::now();
    let hour = hour(&app.db, now, None).await.unwrap();
    let minutes = &hour["default"];
    if expected.len() == 1 {
        waits.sort();
        let median = waits[(waits.len() as f64 * 0.5).ceil() as usize - 1];
        let p50 = minutes.iter().find_map(|minute| minute.wait_p50_ms).unwrap();
        assert_eq!(
            p50,
            middle(bucket(median)),
            "median wait {median}; every wait, sorted: {waits:?}; the minutes: {minutes:?}"
        );
    }
    // Another room's jobs are not counted for a viewer of this one.
    let other = yardmaster::flow::rollup::hour(&app.db, now, Some(&["other".to_owned()])).await.unwrap();
    assert!(other.get("default").is_none_or(|minutes| minutes.iter().all(|minute| minute.started == 0)));

    let page = dashboard(&app).await;
    assert!(page.contains(r#"class="queue-charts" data-queue="default" data-started="40" data-ended="40""#), "{page}");
    assert!(page.contains("<svg"), "{page}");
}

/// The sampler sees the parked queue's depth, and its pause (the chart shades it), and the
/// default queue's running job.
async fn the_rollup_samples_depth_and_pauses(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions::default()).await;
    for _ in 0..5 {
        let (status, _) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
        assert_eq!(status, 201);
    }
    let (_, sleeper) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 60 } })).await;
    let sleeper = sleeper["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&sleeper, "running").await;
    let (status, paused) = app.post(&format!("/admin/queues/{PARKED}/pause")).await;
    assert_eq!(status, 200, "{paused}");
    eventually("the depth, the pause and the running job sampled", Duration::from_secs(30), || async {
        let rows_of_parked = rows(&app, PARKED).await;
        let depth = rows_of_parked.iter().any(|row| row.depth == Some(5) && row.room == "default");
        let paused = rows_of_parked.iter().any(|row| row.paused && row.room.is_empty());
        let running = rows(&app, "default").await.iter().any(|row| row.running == Some(1) && row.room == "default");
        (depth && paused && running).then_some(())
    })
    .await;
    app.post(&format!("/jobs/{sleeper}/cancel")).await;
    let page = dashboard(&app).await;
    let at = page.find(&format!(r#"data-queue="{PARKED}""#)).unwrap_or_else(|| panic!("{page}"));
    assert!(
        !page[at..]
            .starts_with(&format!(r#"data-queue="{PARKED}" data-started="0" data-ended="0" data-paused-minutes="0""#)),
        "{}",
        &page[at..at + 200]
    );
    assert!(page[at..].contains(r#"class="paused""#), "{}", &page[at..]);
}

on_every_backend!(the_rollup_counts_what_the_rows_say, the_rollup_samples_depth_and_pauses);
