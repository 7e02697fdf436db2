//! Limits on every backend, in one process: `max_running` is never exceeded (sampled from
//! the rows every 50 ms, and from the runs' own start and end times), a `rate` never sees
//! more starts in any window than it allows, a partitioned limit shares work between keys
//! (20 jobs of one key finish long before a tenth of another's 2,000), held jobs say so;
//! bad concurrency keys are refused at submit; a limit that holds nothing is looked at for
//! held jobs once per quiet spell, not once per ending; a job released under a rate is
//! counted by it, whenever it was submitted. `flow_processes` does the same
//! across processes on PostgreSQL and RabbitMQ.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::helpers::{read, Backend, TestApp, TestOptions};
use yardmaster::config::JobsSettings;
use yardmaster::jobs::settings::JobDefaults;
use yardmaster::store::{Call, Hook, StoreError};

/// `[jobs.operations.NAME]` set to `limits`, eight worker slots (more than any limit).
fn limited(operation: &str, limits: JobDefaults) -> TestOptions {
    let mut jobs = JobsSettings::default();
    jobs.operations.insert(operation.to_owned(), limits);
    TestOptions { queues: vec![("default", 8)], jobs: Some(jobs), ..Default::default() }
}

pub async fn submit_batch(app: &TestApp, jobs: Vec<Value>) -> Vec<String> {
    let mut ids = Vec::new();
    for chunk in jobs.chunks(400) {
        let body = json!({ "jobs": chunk });
        let (status, answer) = read(app.client.post(app.url("/jobs:batch")).json(&body).send().await.unwrap()).await;
        assert_eq!(status, 201, "{answer}");
        ids.extend(answer["jobs"].as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap().to_owned()));
    }
    ids
}

/// Polls `count` every 50 ms until `done` reaches `total`, and returns the highest
/// `running` seen.
pub async fn sample_running(running: impl AsyncFn() -> i64, done: impl AsyncFn() -> i64, total: i64) -> i64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let mut most = 0;
    loop {
        most = most.max(running().await);
        if done().await >= total {
            return most;
        }
        assert!(std::time::Instant::now() < deadline, "{} of {total} done after 300 s", done().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn time(value: &Value) -> DateTime<Utc> {
    value.as_str().and_then(|text| text.parse().ok()).unwrap_or_else(|| panic!("not a time: {value}"))
}

/// The most runs of `jobs` that overlapped, from their own start and end times.
fn most_at_once(jobs: &[Value]) -> usize {
    let mut edges: Vec<(DateTime<Utc>, i32)> = Vec::new();
    for job in jobs {
        edges.push((time(&job["started_at"]), 1));
        edges.push((time(&job["finished_at"]), -1));
    }
    // At one instant an end comes before a start.
    edges.sort();
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

async fn jobs_of(app: &TestApp, operation: &str) -> Vec<Value> {
    let mut jobs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/jobs?operation={operation}&limit=500");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let (status, page) = app.get(&path).await;
        assert_eq!(status, 200, "{page}");
        jobs.extend(page["jobs"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return jobs,
        }
    }
}

async fn max_running_is_never_exceeded(backend: Backend) {
    let limits = JobDefaults { max_running: Some(2), ..Default::default() };
    let app = TestApp::spawn_with(backend, limited("sleep", limits)).await;
    let jobs = (0..500).map(|_| json!({ "operation": "sleep", "payload": { "seconds": 0.005, "steps": 1 } })).collect();
    let ids = submit_batch(&app, jobs).await;
    // Held jobs say so: no place in line, and an event naming the limit.
    let (_, last) = app.get(&format!("/jobs/{}", ids[499])).await;
    if last["status"] == "queued" {
        assert!(last["queue_position"].is_null(), "{last}");
    }
    let events = app.events(&ids[499]).await;
    let held = events.iter().find(|event| event["event"] == "job.held").unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(
        (held["fields"]["limit"].as_str(), held["fields"]["max_running"].as_i64()),
        (Some("operation:sleep"), Some(2))
    );
    // The third job of the first batch, counted in the transaction that admitted the first
    // two, is held by max_running (later ones may wait behind held jobs instead).
    let events = app.events(&ids[2]).await;
    let held = events.iter().find(|event| event["event"] == "job.held").unwrap_or_else(|| panic!("{events:?}"));
    assert_eq!(held["fields"]["by"].as_str(), Some("max_running"), "{held}");
    let times: Vec<DateTime<Utc>> = events.iter().filter_map(|event| event["ts"].as_str()?.parse().ok()).collect();
    assert_eq!(times.len(), events.len(), "{events:?}");
    assert!(times.is_sorted(), "the events' times read in their order: {events:?}");
    let misnamed = "SELECT COUNT(*) FROM job_event WHERE event = 'job.held' AND message LIKE '%rate is used up'";
    assert_eq!(app.count(misnamed).await, 0, "a job held under max_running alone said a rate held it");
    let running = async || app.count("SELECT COUNT(*) FROM job WHERE operation = 'sleep' AND status = 'running'").await;
    let done = async || app.count("SELECT COUNT(*) FROM job WHERE operation = 'sleep' AND status = 'succeeded'").await;
    let most = sample_running(running, done, 500).await;
    assert!(most <= 2, "{most} sleep jobs RUNNING at once under max_running 2");
    let jobs = jobs_of(&app, "sleep").await;
    assert_eq!(jobs.len(), 500);
    assert_eq!(most_at_once(&jobs), 2, "runs overlapping, from their own times");
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE held_since IS NOT NULL").await, 0);
}

async fn a_rate_is_never_exceeded(backend: Backend) {
    let limits = JobDefaults { rate: Some(20), ..Default::default() };
    let app = TestApp::spawn_with(backend, limited("ping", limits)).await;
    submit_batch(&app, (0..100).map(|_| json!({ "operation": "ping" })).collect()).await;
    let done = "SELECT COUNT(*) FROM job WHERE operation = 'ping' AND status = 'succeeded'";
    app.wait_for_count(done, 100, Duration::from_secs(60)).await;
    let mut starts: Vec<DateTime<Utc>> =
        jobs_of(&app, "ping").await.iter().map(|job| time(&job["started_at"])).collect();
    starts.sort();
    // Any 21 starts span at least a second: no window of a second holds more than 20.
    for window in starts.windows(21) {
        let span = window[20] - window[0];
        assert!(span >= chrono::Duration::milliseconds(999), "21 starts within {span}");
    }
    assert!(app.count("SELECT COUNT(*) FROM job_event WHERE event = 'job.held'").await >= 80);
    let by_rate = "SELECT COUNT(*) FROM job_event WHERE event = 'job.held' AND message LIKE '%rate is used up'";
    assert!(app.count(by_rate).await >= 80, "held jobs name the rate as what holds them");
}

/// Two tenants share a partitioned limit: 2,000 jobs of one do not hold back the other's
/// 20. Counted when the last of the 20 is seen done: more of the 2,000 only finish later.
async fn keys_share_a_limit_round_robin(backend: Backend) {
    let limits = JobDefaults { max_running: Some(2), ..Default::default() };
    let app = TestApp::spawn_with(backend, limited("sleep", limits)).await;
    let job = |tenant: &str| json!({ "operation": "sleep", "concurrency_key": tenant, "payload": { "seconds": 0.05, "steps": 1 } });
    submit_batch(&app, (0..2000).map(|_| job("big")).collect()).await;
    let small = submit_batch(&app, (0..20).map(|_| job("small")).collect()).await;
    for id in &small {
        app.wait_for_status(id, "succeeded").await;
    }
    let big = app.count("SELECT COUNT(*) FROM job WHERE limit_key LIKE '%big' AND status = 'succeeded'").await;
    assert!(big < 200, "{big} of the big tenant's 2,000 jobs finished before the small one's 20");
}

async fn bad_concurrency_keys_are_refused(backend: Backend) {
    let limits = JobDefaults { max_running: Some(2), concurrency_key: Some("/tenant".into()), ..Default::default() };
    let app = TestApp::spawn_with(backend, limited("ping", limits)).await;
    let long = "k".repeat(201);
    let cases = [
        (json!({ "operation": "ping", "payload": {} }), "invalid_concurrency_key", "/payload/tenant"),
        (
            json!({ "operation": "ping", "payload": { "tenant": { "id": 1 } } }),
            "invalid_concurrency_key",
            "/payload/tenant",
        ),
        (json!({ "operation": "ping", "payload": { "tenant": null } }), "invalid_concurrency_key", "/payload/tenant"),
        (json!({ "operation": "ping", "payload": { "tenant": "" } }), "invalid_concurrency_key", "/payload/tenant"),
        (
            json!({ "operation": "ping", "payload": { "tenant": "a\u{1f}b" } }),
            "invalid_concurrency_key",
            "/payload/tenant",
        ),
        (json!({ "operation": "ping", "concurrency_key": "" }), "invalid_concurrency_key", "/concurrency_key"),
        (json!({ "operation": "ping", "concurrency_key": long }), "invalid_concurrency_key", "/concurrency_key"),
        (json!({ "operation": "ping", "concurrency_key": "a\nb" }), "invalid_concurrency_key", "/concurrency_key"),
        (json!({ "operation": "ping", "concurrency_key": "a\u{0}b" }), "nul_character", "/concurrency_key"),
    ];
    for (body, code, pointer) in cases {
        let (status, problem) = app.submit(body.clone()).await;
        assert_eq!(
            (status, problem["code"].as_str(), problem["pointer"].as_str()),
            (422, Some(code), Some(pointer)),
            "{body}: {problem}"
        );
    }
    let (status, problem) = app.submit(json!({ "operation": "ping", "concurrency_key": 7 })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
    // A number or a boolean is a key too; the submission's own key wins over the payload's.
    for (body, key) in [
        (json!({ "operation": "ping", "payload": { "tenant": 42 } }), "42"),
        (json!({ "operation": "ping", "payload": { "tenant": true } }), "true"),
        (json!({ "operation": "ping", "payload": { "tenant": "a" }, "concurrency_key": "b" }), "b"),
    ] {
        let (status, job) = app.submit(body.clone()).await;
        assert_eq!(status, 201, "{job}");
        assert_eq!(job["limit_key"].as_str(), Some(format!("operation:ping\u{1f}{key}").as_str()), "{body}: {job}");
    }
}

/// Counts the releaser's looks for held jobs.
struct Looks(AtomicUsize);

#[async_trait]
impl Hook for Looks {
    async fn before(&self, call: Call<'_>) -> Result<(), StoreError> {
        if let Call::Upkeep("release") = call {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    }
}

/// 400 endings under a limit that never binds: after a look finds nothing held, the endings
/// of the next quiet spell are looked at once, at its end (one look per ending would be
/// hundreds, a few per quiet spell).
async fn a_limit_that_holds_nothing_is_looked_at_once_per_quiet_spell(backend: Backend) {
    let looks = Arc::new(Looks(AtomicUsize::new(0)));
    let mut options = limited("sleep", JobDefaults { max_running: Some(1000), ..Default::default() });
    options.hook = Some(looks.clone());
    let app = TestApp::spawn_with(backend, options).await;
    let started = Instant::now();
    let jobs = (0..400).map(|_| json!({ "operation": "sleep", "payload": { "seconds": 0.005, "steps": 1 } })).collect();
    submit_batch(&app, jobs).await;
    let succeeded = "SELECT COUNT(*) FROM job WHERE operation = 'sleep' AND status = 'succeeded'";
    app.wait_for_count(succeeded, 400, Duration::from_secs(120)).await;
    let elapsed = started.elapsed();
    let looks = looks.0.load(Ordering::SeqCst);
    let spells = (elapsed.as_millis() / yardmaster::dispatch::QUIET.as_millis()) as usize;
    assert!(looks >= 1, "no look at all");
    assert!(looks <= spells + 5, "{looks} looks for held jobs in {elapsed:?} ({spells} quiet spells)");
}

on_every_backend!(
    max_running_is_never_exceeded,
    a_rate_is_never_exceeded,
    keys_share_a_limit_round_robin,
    bad_concurrency_keys_are_refused,
    a_limit_that_holds_nothing_is_looked_at_once_per_quiet_spell,
);

#[test]
fn limits_of_zero_and_loose_pointers_are_refused_at_start() {
    for (defaults, expected) in [
        (JobDefaults { max_running: Some(0), ..Default::default() }, "max_running must be at least 1"),
        (JobDefaults { rate: Some(0), ..Default::default() }, "rate must be at least 1"),
        (JobDefaults { rate: Some(5), rate_period_seconds: Some(0.0), ..Default::default() }, "rate_period_seconds"),
        (
            JobDefaults { max_running: Some(1), concurrency_key: Some("tenant".into()), ..Default::default() },
            "JSON pointer",
        ),
        (JobDefaults { concurrency_key: Some("/tenant".into()), ..Default::default() }, "needs max_running or rate"),
    ] {
        let mut jobs = JobsSettings::default();
        jobs.operations.insert("ping".into(), defaults);
        let err = jobs.validate().map(|()| format!("{jobs:?} accepted")).unwrap_or_else(|err| err.to_string());
        assert!(err.contains(expected), "{err}");
    }
}

/// At the store: which jobs' starts a rate counts (`rate_key`).
mod rate_keys {
    use sea_orm::{ConnectionTrait as _, DatabaseConnection, Statement};
    use yardmaster::domain::{Limit, NewJob, Rate};
    use yardmaster::store::{DispatchBook as _, JobCommands as _};

    use crate::helpers::{migrated_store, Backend, TestDatabase};

    /// Jobs with a rate key, then jobs held.
    async fn keyed_and_held(db: &DatabaseConnection) -> String {
        let sql = "SELECT CAST(COUNT(rate_key) AS TEXT) || ' ' || CAST(COUNT(held_since) AS TEXT) FROM job";
        let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await.unwrap().unwrap();
        row.try_get_by_index(0).unwrap()
    }

    /// A job held while its limit had no rate, released once it has one (a configuration
    /// changed between), counts toward the rate when it starts, as one submitted under it.
    async fn a_job_released_under_a_rate_counts_toward_it(backend: Backend) {
        let (_database, url) = TestDatabase::create(backend).await;
        let (db, store) = migrated_store(&url).await;
        let running_only = Limit { key: "operation:ping".into(), max_running: Some(1), rate: None };
        let job = NewJob { limit: Some(running_only.clone()), ..NewJob::new("ping") };
        store.submit_many(vec![job; 2]).await.unwrap();
        assert_eq!(keyed_and_held(&db).await, "0 1", "no rate: no key; room for one");

        let per = std::time::Duration::from_secs(1);
        let rated = Limit { max_running: Some(5), rate: Some(Rate { starts: 10, per }), ..running_only };
        assert_eq!(store.release(&rated).await.unwrap().jobs.len(), 1);
        assert_eq!(keyed_and_held(&db).await, "1 0", "released under the rate: keyed");
        db.close().await.unwrap();
    }

    on_both_backends!(a_job_released_under_a_rate_counts_toward_it);
}
