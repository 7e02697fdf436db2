//! Three real worker processes on PostgreSQL + RabbitMQ, each running the scheduler, and an
//! every-second schedule for a minute while one of them is killed with SIGKILL: exactly one
//! job per tick, sixty in all, none missed, none doubled.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use sea_orm::Database;
use serde_json::{json, Value};

use crate::amqp_processes::{count, Deployment};
use crate::helpers::{eventually, read, Backend, TestApp, TestOptions};

const TICKS: i64 = 60;

#[actix_rt::test]
async fn three_schedulers_one_killed_make_one_job_per_tick() {
    // An API on the store that runs nothing itself: no scheduler, sweep, reaper or worker.
    let quiet =
        TestOptions { workers: false, dispatch_sweep: false, reaper: false, scheduler: false, ..Default::default() };
    let app = TestApp::spawn_with(Backend::Postgres, quiet).await;
    let deployment = Deployment::new(&app.store_url);
    let args = ["worker", "--queue", "default"];
    let settle = [("YARDMASTER__SCHEDULER__SETTLE_MS", "1000")];
    let mut doomed = Some(deployment.spawn(&args, &[("YARDMASTER__WORKER__ID", "first"), settle[0]]));
    let _second = deployment.spawn(&args, &[("YARDMASTER__WORKER__ID", "second"), settle[0]]);
    let _third = deployment.spawn(&args, &[("YARDMASTER__WORKER__ID", "third"), settle[0]]);

    let start = Utc::now().trunc_subsecs(0) + chrono::Duration::seconds(3);
    let body = json!({
        "name": "every-second", "every_seconds": 1, "overlap": "allow", "catch_up": "all", "max_catch_up": 1000,
        "start_at": start.to_rfc3339(), "job": { "operation": "ping" },
    });
    let (status, schedule) = read(app.client.post(app.url("/schedules")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{schedule}");
    let id = schedule["id"].as_str().unwrap().to_owned();
    let db = Database::connect(&app.store_url).await.unwrap();
    let fired = format!("SELECT COUNT(*) FROM schedule_tick WHERE schedule_id = '{id}' AND outcome = 'fired'");

    // A third of the way in, one scheduler dies at whatever it was doing.
    eventually("20 ticks fired", Duration::from_secs(60), || async { (count(&db, &fired).await >= 20).then_some(()) })
        .await;
    let mut process = doomed.take().unwrap();
    process.0.kill().unwrap();
    process.0.wait().unwrap();
    drop(process);
    eventually("60 ticks fired", Duration::from_secs(90), || async {
        (count(&db, &fired).await >= TICKS).then_some(())
    })
    .await;

    let (status, paused) = read(
        app.client.patch(app.url(&format!("/schedules/{id}"))).json(&json!({ "paused": true })).send().await.unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{paused}");
    let firing = format!("SELECT COUNT(*) FROM schedule_tick WHERE schedule_id = '{id}' AND outcome = 'firing'");
    eventually("no tick left firing", Duration::from_secs(30), || async {
        (count(&db, &firing).await == 0).then_some(())
    })
    .await;

    let (_, page) = app.get(&format!("/schedules/{id}/ticks?limit=100")).await;
    let ticks: Vec<&Value> = page["ticks"].as_array().unwrap().iter().collect();
    let first_minute: Vec<&&Value> = ticks
        .iter()
        .filter(|tick| {
            let at: DateTime<Utc> = DateTime::parse_from_rfc3339(tick["tick_at"].as_str().unwrap()).unwrap().into();
            at >= start && at < start + chrono::Duration::seconds(TICKS)
        })
        .collect();
    assert_eq!(first_minute.len() as i64, TICKS, "every tick of the minute decided once: {page}");
    assert!(first_minute.iter().all(|tick| tick["outcome"] == "fired"), "{page}");
    let jobs: BTreeSet<&str> = first_minute.iter().map(|tick| tick["job_id"].as_str().unwrap()).collect();
    assert_eq!(jobs.len() as i64, TICKS, "{page}");
    // No job beyond the ticks' own: one per fired tick, in the store.
    let all_fired = count(&db, &fired).await;
    let keyed = count(&db, &format!("SELECT COUNT(*) FROM job WHERE idempotency_key LIKE 'schedule:{id}:%'")).await;
    assert_eq!(keyed, all_fired);
    let succeeded =
        format!("SELECT COUNT(*) FROM job WHERE idempotency_key LIKE 'schedule:{id}:%' AND status = 'succeeded'");
    eventually("every job ran", Duration::from_secs(60), || async {
        (count(&db, &succeeded).await == keyed).then_some(())
    })
    .await;
}
