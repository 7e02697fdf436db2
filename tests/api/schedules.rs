//! Schedules on every backend: one job per tick, keyed by the tick, however many schedulers
//! run; catch-up after downtime and overlap by their policies; pause and resume; run-now;
//! schedules declared in the configuration; bad schedules refused with their field.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Timelike, Utc};
use serde_json::{json, Value};
use uuid::Uuid;
use yardmaster::store::{Call, Hook, StoreError};

use crate::helpers::{eventually, read, Backend, TestApp, TestOptions, PARKED};

async fn send(app: &TestApp, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = app.client.request(method, app.url(path));
    if let Some(body) = body {
        request = request.json(&body);
    }
    read(request.send().await.unwrap()).await
}

async fn create(app: &TestApp, body: Value) -> Value {
    let (status, created) = send(app, reqwest::Method::POST, "/schedules", Some(body)).await;
    assert_eq!(status, 201, "{created}");
    created
}

async fn ticks(app: &TestApp, id: &str) -> Vec<Value> {
    let (status, page) = app.get(&format!("/schedules/{id}/ticks?limit=100")).await;
    assert_eq!(status, 200, "{page}");
    page["ticks"].as_array().unwrap().clone()
}

fn with(ticks: &[Value], outcome: &str) -> Vec<Value> {
    ticks.iter().filter(|tick| tick["outcome"] == outcome).cloned().collect()
}

fn time(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().unwrap_or_else(|| panic!("not a time: {value}"))).unwrap().into()
}

/// Waits until the schedule's log has at least `count` ticks of `outcome`; returns the log.
async fn until_ticks(app: &TestApp, id: &str, outcome: &str, count: usize) -> Vec<Value> {
    eventually(&format!("{count} {outcome} ticks of {id}"), Duration::from_secs(20), || async {
        let log = ticks(app, id).await;
        (with(&log, outcome).len() >= count).then_some(log)
    })
    .await
}

async fn every_second_schedule_fires_one_job_per_tick(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let s = create(
        &app,
        // Every tick fires, even one a loaded machine's scheduler reaches late.
        json!({ "name": "heartbeat", "every_seconds": 1, "overlap": "allow", "catch_up": "all",
                "job": { "operation": "ping" } }),
    )
    .await;
    let id = s["id"].as_str().unwrap();
    assert_eq!(s["timezone"], "UTC");
    assert!(s["next_fire_at"].is_string(), "{s}");
    let log = until_ticks(&app, id, "fired", 3).await;
    let fired = with(&log, "fired");
    // One second apart, on whole seconds, each with its own job keyed by the tick.
    let times: Vec<DateTime<Utc>> = fired.iter().map(|tick| time(&tick["tick_at"])).collect();
    for pair in times.windows(2) {
        assert_eq!((pair[0] - pair[1]).num_milliseconds(), 1000, "{log:?}");
    }
    assert!(times.iter().all(|at| at.nanosecond() == 0), "{times:?}");
    for tick in &fired {
        let job = tick["job_id"].as_str().unwrap();
        let (_, got) = app.get(&format!("/jobs/{job}")).await;
        let key =
            format!("schedule:{id}:{}", time(&tick["tick_at"]).to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        assert_eq!(got["idempotency_key"].as_str(), Some(key.as_str()), "{got}");
        app.wait_for_status(job, "succeeded").await;
    }
    let (status, jobs) = app.get(&format!("/schedules/{id}/jobs")).await;
    assert_eq!(status, 200, "{jobs}");
    assert!(jobs["jobs"].as_array().unwrap().len() >= 3, "{jobs}");
    assert!(jobs["jobs"][0]["job"]["id"].is_string(), "{jobs}");
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("yardmaster_schedule_ticks_total{outcome=\"fired\"}"), "{text}");
    let (status, _) = send(&app, reqwest::Method::DELETE, &format!("/schedules/{id}"), None).await;
    assert_eq!(status, 204);
    let (status, problem) = app.get(&format!("/schedules/{id}")).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("schedule_not_found")), "{problem}");
}

/// Two schedulers on one store (two processes' worth: each its own pool and notifier):
/// every tick has one job, and no tick is decided twice.
async fn two_schedulers_make_one_job_per_tick(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let beside = Some((app.store_url.clone(), app.uploads.0.clone()));
    let _other = TestApp::spawn_with(backend, TestOptions { beside, ..Default::default() }).await;
    let s =
        create(&app, json!({ "name": "both", "every_seconds": 1, "overlap": "allow", "job": { "operation": "ping" } }))
            .await;
    let id = s["id"].as_str().unwrap().to_owned();
    let log = until_ticks(&app, &id, "fired", 4).await;
    let fired = with(&log, "fired");
    let tick_times: BTreeSet<String> = fired.iter().map(|tick| tick["tick_at"].as_str().unwrap().to_owned()).collect();
    assert_eq!(tick_times.len(), fired.len(), "a tick decided twice: {log:?}");
    let jobs: BTreeSet<&str> = fired.iter().map(|tick| tick["job_id"].as_str().unwrap()).collect();
    assert_eq!(jobs.len(), fired.len(), "{log:?}");
    // Paused and settled, the jobs made are exactly the ticks fired.
    let settled = pause_and_settle(&app, &id).await;
    let keyed = app.count(&format!("SELECT COUNT(*) FROM job WHERE idempotency_key LIKE 'schedule:{id}:%'")).await;
    assert_eq!(keyed as usize, with(&settled, "fired").len(), "{settled:?}");
}

/// Pauses a schedule and waits until no tick of it is still firing; returns its log.
async fn pause_and_settle(app: &TestApp, id: &str) -> Vec<Value> {
    let (status, paused) =
        send(app, reqwest::Method::PATCH, &format!("/schedules/{id}"), Some(json!({ "paused": true }))).await;
    assert_eq!(status, 200, "{paused}");
    eventually("no tick firing", Duration::from_secs(20), || async {
        let log = ticks(app, id).await;
        with(&log, "firing").is_empty().then_some(log)
    })
    .await
}

/// A cron schedule whose ticks fall 30 minutes past now's minute, started five hours back:
/// five ticks are due at once, the latest half an hour late.
fn five_due(name: &str, catch_up: &str) -> Value {
    let now = Utc::now();
    let minute = (now.minute() + 30) % 60;
    json!({
        "name": name, "cron": format!("{minute} * * * *"), "catch_up": catch_up, "max_catch_up": 3,
        "overlap": "allow", "start_at": (now - chrono::Duration::hours(5)).to_rfc3339(),
        "job": { "operation": "ping" },
    })
}

async fn catch_up_follows_its_policy(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let expected = [("last", 1, 4), ("all", 3, 2), ("none", 0, 5)];
    for (policy, fired, missed) in expected {
        let s = create(&app, five_due(policy, policy)).await;
        let id = s["id"].as_str().unwrap().to_owned();
        let log = eventually(&format!("the five due ticks of {policy}"), Duration::from_secs(20), || async {
            let log = ticks(&app, &id).await;
            let decided: i64 = with(&log, "fired").len() as i64
                + with(&log, "missed").iter().map(|t| t["missed"].as_i64().unwrap()).sum::<i64>();
            (decided == 5).then_some(log)
        })
        .await;
        assert_eq!(with(&log, "fired").len(), fired, "{policy}: {log:?}");
        let counted: i64 = with(&log, "missed").iter().map(|tick| tick["missed"].as_i64().unwrap()).sum();
        assert_eq!(counted, missed, "{policy}: {log:?}");
        let (_, now) = app.get(&format!("/schedules/{id}")).await;
        assert!(time(&now["next_fire_at"]) > Utc::now(), "{now}");
    }
}

async fn overlap_follows_its_policy(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    // Jobs on the parked queue stay QUEUED: the last tick's job is always unfinished.
    let parked = |name: &str, overlap: &str| json!({ "name": name, "every_seconds": 1, "overlap": overlap, "job": { "operation": "ping", "queue": PARKED } });
    let skip = create(&app, parked("skip", "skip")).await;
    let cancel = create(&app, parked("cancel", "cancel_previous")).await;
    let allow = create(&app, parked("allow", "allow")).await;
    let skip_log = until_ticks(&app, skip["id"].as_str().unwrap(), "skipped", 2).await;
    assert_eq!(with(&skip_log, "fired").len(), 1, "{skip_log:?}");
    until_ticks(&app, cancel["id"].as_str().unwrap(), "fired", 3).await;
    until_ticks(&app, allow["id"].as_str().unwrap(), "fired", 3).await;
    let cancel_log = pause_and_settle(&app, cancel["id"].as_str().unwrap()).await;
    let allow_log = pause_and_settle(&app, allow["id"].as_str().unwrap()).await;
    let statuses = |log: Vec<Value>| {
        let app = &app;
        async move {
            let mut statuses = Vec::new();
            for tick in with(&log, "fired") {
                let (_, job) = app.get(&format!("/jobs/{}", tick["job_id"].as_str().unwrap())).await;
                statuses.push(job["status"].as_str().unwrap().to_owned());
            }
            statuses
        }
    };
    // Newest first: the latest job waits, every earlier one was cancelled for the next.
    let cancelled = statuses(cancel_log).await;
    assert_eq!(cancelled[0], "queued", "{cancelled:?}");
    assert!(cancelled[1..].iter().all(|status| status == "cancelled"), "{cancelled:?}");
    assert!(statuses(allow_log).await.iter().all(|status| status == "queued"));
}

/// Pauses a schedule from inside a scheduler's pass, once armed: at the pass's next read of
/// a job (the last tick's, to see whether it overlaps), before the pass decides its tick.
#[derive(Default)]
struct PauseWhileDeciding {
    /// The schedule's URL and a client with a token, until the pause is sent.
    armed: Mutex<Option<(String, reqwest::Client)>>,
    /// The job whose read the pause went in front of.
    seen: Mutex<Option<Uuid>>,
}

#[async_trait]
impl Hook for PauseWhileDeciding {
    async fn before(&self, call: Call<'_>) -> Result<(), StoreError> {
        let Call::Read("get", Some(job)) = call else { return Ok(()) };
        let Some((url, client)) = self.armed.lock().unwrap().take() else { return Ok(()) };
        let (status, body) = read(client.patch(url).json(&json!({ "paused": true })).send().await.unwrap()).await;
        assert_eq!(status, 200, "{body}");
        *self.seen.lock().unwrap() = Some(job);
        Ok(())
    }
}

/// A pass that loses its tick to a pause cancels nothing: the last tick's job of a
/// `cancel_previous` schedule is cancelled only for a tick that fires.
async fn a_pass_that_loses_its_tick_cancels_nothing(backend: Backend) {
    let hook = Arc::new(PauseWhileDeciding::default());
    let app = TestApp::spawn_with(backend, TestOptions { hook: Some(hook.clone()), ..Default::default() }).await;
    let body = json!({ "name": "replace", "every_seconds": 1, "overlap": "cancel_previous", "job": { "operation": "ping", "queue": PARKED } });
    let id = create(&app, body).await["id"].as_str().unwrap().to_owned();
    until_ticks(&app, &id, "fired", 1).await;
    *hook.armed.lock().unwrap() = Some((app.url(&format!("/schedules/{id}")), app.client.clone()));
    let seen = eventually("the pause, sent from a pass", Duration::from_secs(20), || async {
        hook.seen.lock().unwrap().map(|job| job.to_string())
    })
    .await;
    let log = pause_and_settle(&app, &id).await;
    let fired = with(&log, "fired");
    let last = fired[0]["job_id"].as_str().unwrap();
    // The pause went in front of the pass's look at the last tick's job, so that pass lost.
    assert_eq!(seen, last, "{log:?}");
    let (_, job) = app.get(&format!("/jobs/{last}")).await;
    assert_eq!(job["status"], "queued", "the last job was cancelled for a tick that never fired: {log:?}");
}

async fn a_paused_schedule_fires_nothing_until_resumed(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let s = create(
        &app,
        json!({ "name": "paused", "every_seconds": 1, "overlap": "allow", "job": { "operation": "ping" } }),
    )
    .await;
    let id = s["id"].as_str().unwrap().to_owned();
    until_ticks(&app, &id, "fired", 1).await;
    let (status, paused) =
        send(&app, reqwest::Method::PATCH, &format!("/schedules/{id}"), Some(json!({ "paused": true }))).await;
    assert_eq!(status, 200, "{paused}");
    assert!(paused["next_fire_at"].is_null() && paused["paused"] == true, "{paused}");
    let before = ticks(&app, &id).await.len();
    // A witness that fires twice proves the scheduler ran passes after the pause.
    let witness = create(
        &app,
        json!({ "name": "witness", "every_seconds": 1, "overlap": "allow", "job": { "operation": "ping" } }),
    )
    .await;
    until_ticks(&app, witness["id"].as_str().unwrap(), "fired", 2).await;
    assert_eq!(ticks(&app, &id).await.len(), before, "a paused schedule fired");
    let (status, resumed) =
        send(&app, reqwest::Method::PATCH, &format!("/schedules/{id}"), Some(json!({ "paused": false }))).await;
    assert_eq!(status, 200, "{resumed}");
    assert!(time(&resumed["next_fire_at"]) > time(&paused["updated_at"]), "{resumed}");
    // The ticks passed while paused are not caught up, nor logged as missed: the next fires
    // after the resume. (A pass late after it may log a tick of its own time missed.)
    let log = until_ticks(&app, &id, "fired", 2).await;
    let (from, to) = (time(&paused["updated_at"]), time(&resumed["updated_at"]));
    let paused_ticks: Vec<&Value> = log
        .iter()
        .filter(|tick| {
            let at = time(&tick["tick_at"]);
            at > from && at < to
        })
        .collect();
    assert!(paused_ticks.is_empty(), "{paused_ticks:?} in {log:?}");
}

async fn run_now_submits_and_lists_the_job(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let s = create(
        &app,
        json!({ "name": "yearly", "cron": "@yearly", "timezone": "Europe/Madrid", "job": { "operation": "ping" } }),
    )
    .await;
    let id = s["id"].as_str().unwrap();
    let next = time(&s["next_fire_at"]);
    // Midnight of January 1st in Madrid is 23:00 UTC the day before.
    assert_eq!((next.hour(), next.minute()), (23, 0), "{s}");
    let (status, job) = send(&app, reqwest::Method::POST, &format!("/schedules/{id}/run"), None).await;
    assert_eq!(status, 201, "{job}");
    app.wait_for_status(job["id"].as_str().unwrap(), "succeeded").await;
    let (_, jobs) = app.get(&format!("/schedules/{id}/jobs")).await;
    assert_eq!(jobs["jobs"][0]["outcome"], "run_now", "{jobs}");
    assert_eq!(jobs["jobs"][0]["job"]["id"], job["id"], "{jobs}");
    let (_, after) = app.get(&format!("/schedules/{id}")).await;
    assert_eq!(after["last_job_id"], job["id"], "{after}");
    assert_eq!(after["next_fire_at"], s["next_fire_at"], "run-now moves no tick: {after}");
}

async fn declared_schedules_are_created_then_updated(backend: Backend) {
    let declared = |cron: &str| {
        let text = format!("cron = \"{cron}\"\ntimezone = \"Europe/Madrid\"\njob = {{ operation = \"ping\" }}\n");
        let schedule: yardmaster::config::DeclaredSchedule = toml_from(&text);
        [("nightly".to_owned(), schedule)].into_iter().collect()
    };
    let app =
        TestApp::spawn_with(backend, TestOptions { schedules: declared("0 2 * * *"), ..Default::default() }).await;
    let (_, page) = app.get("/schedules?room=@global").await;
    let listed = &page["schedules"][0];
    assert_eq!((listed["name"].as_str(), listed["source"].as_str()), (Some("nightly"), Some("config")), "{page}");
    assert_eq!(listed["cron"], "0 2 * * *");
    // Another process starts with the file changed: the same schedule, brought up to date.
    let beside = Some((app.store_url.clone(), app.uploads.0.clone()));
    let _next =
        TestApp::spawn_with(backend, TestOptions { beside, schedules: declared("0 3 * * *"), ..Default::default() })
            .await;
    let (_, page) = app.get("/schedules?room=@global").await;
    assert_eq!(page["schedules"].as_array().unwrap().len(), 1, "{page}");
    assert_eq!(
        (page["schedules"][0]["id"].clone(), page["schedules"][0]["cron"].as_str()),
        (listed["id"].clone(), Some("0 3 * * *"))
    );
}

fn toml_from(text: &str) -> yardmaster::config::DeclaredSchedule {
    use figment::providers::{Format, Toml};
    figment::Figment::from(Toml::string(text)).extract().unwrap()
}

async fn bad_schedules_are_refused(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let ping = json!({ "operation": "ping" });
    let cases = [
        (json!({ "name": "a", "cron": "61 * * * *", "job": ping }), 422, "invalid_schedule", "/cron", Some("minute")),
        (json!({ "name": "a", "cron": "* * *", "job": ping }), 422, "invalid_schedule", "/cron", None),
        (
            json!({ "name": "a", "cron": "@daily", "timezone": "Mars/Olympus", "job": ping }),
            422,
            "invalid_schedule",
            "/timezone",
            None,
        ),
        (json!({ "name": "a", "every_seconds": 0.5, "job": ping }), 422, "invalid_schedule", "/every_seconds", None),
        (
            json!({ "name": "a", "every_seconds": 5, "cron": "@daily", "job": ping }),
            422,
            "invalid_schedule",
            "/every_seconds",
            None,
        ),
        (json!({ "name": "a", "job": ping }), 422, "invalid_schedule", "/cron", None),
        (json!({ "name": "a\u{0}b", "cron": "@daily", "job": ping }), 422, "nul_character", "/name", None),
        (json!({ "name": "", "cron": "@daily", "job": ping }), 422, "invalid_request", "/name", None),
        (json!({ "name": "a", "cron": "@daily\u{0}", "job": ping }), 422, "nul_character", "/cron", None),
        (
            json!({ "name": "a", "cron": "@daily", "job": { "operation": "ping", "run_at": "2030-01-01T00:00:00Z" } }),
            422,
            "invalid_request",
            "/job/run_at",
            None,
        ),
        (
            json!({ "name": "a", "cron": "@daily", "job": { "operation": "nope" } }),
            422,
            "unknown_operation",
            "/job",
            None,
        ),
        (json!({ "name": "a", "cron": "@daily", "job": "ping" }), 422, "invalid_request", "/job", None),
        (
            json!({ "name": "a", "cron": "@daily", "max_catch_up": 0, "job": ping }),
            422,
            "invalid_request",
            "/max_catch_up",
            None,
        ),
        (
            json!({ "name": "a", "cron": "@daily", "start_at": "2001-01-01T00:00:00Z", "job": ping }),
            422,
            "invalid_schedule",
            "/start_at",
            None,
        ),
        (json!({ "name": 7, "cron": "@daily", "job": ping }), 422, "invalid_request", "", None),
    ];
    for (body, status, code, pointer, names) in cases {
        let (got, problem) = send(&app, reqwest::Method::POST, "/schedules", Some(body.clone())).await;
        assert_eq!((got, problem["code"].as_str()), (status, Some(code)), "{body}: {problem}");
        if !pointer.is_empty() {
            assert!(problem["pointer"].as_str().is_some_and(|at| at.starts_with(pointer)), "{body}: {problem}");
        }
        if let Some(field) = names {
            assert!(problem["detail"].as_str().unwrap().contains(field), "{problem}");
        }
    }
    // A body past `server.max_body_bytes` (64 KiB here) is refused before it is read whole.
    let huge = json!({ "name": "huge", "cron": "@daily", "job": { "operation": "ping", "payload": { "blob": "x".repeat(100_000) } } });
    let (status, problem) = send(&app, reqwest::Method::POST, "/schedules", Some(huge)).await;
    assert_eq!((status, problem["code"].as_str()), (413, Some("payload_too_large")), "{problem}");
    assert_eq!(app.count("SELECT COUNT(*) FROM schedule").await, 0);
    let s = create(&app, json!({ "name": "taken", "cron": "@daily", "job": ping })).await;
    let (status, problem) = send(
        &app,
        reqwest::Method::POST,
        "/schedules",
        Some(json!({ "name": "taken", "cron": "@hourly", "job": ping })),
    )
    .await;
    assert_eq!((status, problem["code"].as_str()), (409, Some("schedule_name_taken")), "{problem}");
    let (status, problem) = app.get("/schedules/not-a-uuid").await;
    assert_eq!((status, problem["code"].as_str()), (400, Some("invalid_schedule_id")), "{problem}");
    let id = s["id"].as_str().unwrap();
    let (status, problem) =
        send(&app, reqwest::Method::PATCH, &format!("/schedules/{id}"), Some(json!({ "cron": "0 25 * * *" }))).await;
    assert_eq!(
        (status, problem["code"].as_str(), problem["pointer"].as_str()),
        (422, Some("invalid_schedule"), Some("/cron")),
        "{problem}"
    );
    // An array is not an object, though serde would read one as a struct.
    let (status, problem) =
        send(&app, reqwest::Method::PATCH, &format!("/schedules/{id}"), Some(json!([null, null]))).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    let (status, problem) =
        send(&app, reqwest::Method::POST, "/schedules", Some(json!(["a", "@daily", { "operation": "ping" }]))).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    for path in [
        "/schedules?limit=0".to_owned(),
        format!("/schedules/{id}/ticks?limit=101"),
        format!("/schedules/{id}/jobs?limit=0"),
    ] {
        let (status, problem) = app.get(&path).await;
        assert_eq!((status, problem["code"].as_str()), (400, Some("invalid_query")), "{path}: {problem}");
    }
    // A cursor is a place in the order, not a schedule that must still exist.
    let (status, page) = app.get(&format!("/schedules?cursor={}", uuid::Uuid::now_v7())).await;
    assert_eq!((status, page["schedules"].as_array().map(Vec::len)), (200, Some(0)), "{page}");
    let (status, problem) =
        send(&app, reqwest::Method::PATCH, &format!("/schedules/{id}"), Some(json!({ "paused": "yes" }))).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    // Another room's schedule does not exist for a member; @global is written by admins.
    let admin_room =
        create(&app, json!({ "name": "theirs", "room": "elsewhere", "cron": "@daily", "job": ping })).await;
    let member = app.member("mallory").await;
    for path in [
        format!("/schedules/{}", admin_room["id"].as_str().unwrap()),
        format!("/schedules/{}/ticks", admin_room["id"].as_str().unwrap()),
    ] {
        let (status, problem) = read(member.get(app.url(&path)).send().await.unwrap()).await;
        assert_eq!((status, problem["code"].as_str()), (404, Some("schedule_not_found")), "{problem}");
    }
    let (status, problem) = read(
        member.delete(app.url(&format!("/schedules/{}", admin_room["id"].as_str().unwrap()))).send().await.unwrap(),
    )
    .await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("schedule_not_found")), "{problem}");
    let body = json!({ "name": "global", "room": "@global", "cron": "@daily", "job": ping });
    let (status, problem) = read(member.post(app.url("/schedules")).json(&body).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("room_forbidden")), "{problem}");
    let (_, page) = read(member.get(app.url("/schedules")).send().await.unwrap()).await;
    assert!(page["schedules"].as_array().unwrap().iter().all(|s| s["room"] != "elsewhere"), "{page}");
}

on_every_backend!(
    every_second_schedule_fires_one_job_per_tick,
    two_schedulers_make_one_job_per_tick,
    catch_up_follows_its_policy,
    overlap_follows_its_policy,
    a_pass_that_loses_its_tick_cancels_nothing,
    a_paused_schedule_fires_nothing_until_resumed,
    run_now_submits_and_lists_the_job,
    declared_schedules_are_created_then_updated,
    bad_schedules_are_refused,
);
