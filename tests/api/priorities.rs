//! Priorities on every backend: a runnable job of a better level starts before any of a
//! worse one queued before it (in process, on PostgreSQL, and through RabbitMQ's priority
//! queues); a waiting job rises a level per `jobs.priority_aging_seconds`, so a stream of
//! urgent work cannot starve it; defaults come from the operation, then the queue; children
//! run at their parent's level; bad priorities are refused, nothing kept.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{eventually, read, Backend, TestApp, TestOptions};
use yardmaster::config::JobsSettings;

/// One worker slot, so the start order is the queue's order, not a race between slots.
fn one_slot(jobs: JobsSettings) -> TestOptions {
    TestOptions { queues: vec![("default", 1)], jobs: Some(jobs), ..Default::default() }
}

/// A job that holds the only slot until it is cancelled; returns its id once it runs.
async fn occupy(app: &TestApp) -> String {
    let (status, blocker) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 3600 } })).await;
    assert_eq!(status, 201, "{blocker}");
    let id = blocker["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&id, "running").await;
    id
}

async fn submit_batch(app: &TestApp, jobs: Vec<Value>) -> Vec<String> {
    let body = json!({ "jobs": jobs });
    let (status, answer) = read(app.client.post(app.url("/jobs:batch")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{answer}");
    answer["jobs"].as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap().to_owned()).collect()
}

/// The id of the `job.started` event of the first (`MIN`) or last (`MAX`) ping of
/// `priority` to start: event ids are in commit order.
async fn started(app: &TestApp, which: &str, priority: i64) -> i64 {
    app.count(&format!(
        "SELECT {which}(e.id) FROM job_event e JOIN job j ON j.id = e.job_id \
         WHERE e.event = 'job.started' AND j.operation = 'ping' AND j.priority = {priority}"
    ))
    .await
}

/// 1,000 jobs at level 9 wait behind a busy worker, then 10 at level 0 come: all 10
/// start before any of the 1,000.
async fn urgent_jobs_start_before_the_queued_low_ones(backend: Backend) {
    let app = TestApp::spawn_with(backend, one_slot(JobsSettings::default())).await;
    let blocker = occupy(&app).await;
    let low = submit_batch(&app, (0..1000).map(|_| json!({ "operation": "ping", "priority": 9 })).collect()).await;
    let high = submit_batch(&app, (0..10).map(|_| json!({ "operation": "ping", "priority": 0 })).collect()).await;
    // In line, the urgent ones are ahead of every low one, though they came later.
    let (_, first_high) = app.get(&format!("/jobs/{}", high[0])).await;
    assert_eq!(first_high["queue_position"], 1, "{first_high}");
    let (_, first_low) = app.get(&format!("/jobs/{}", low[0])).await;
    assert_eq!(first_low["queue_position"], 11, "{first_low}");
    let (status, _) = app.post(&format!("/jobs/{blocker}/cancel")).await;
    assert_eq!(status, 200);
    let done = "SELECT COUNT(*) FROM job WHERE operation = 'ping' AND status = 'succeeded'";
    app.wait_for_count(done, 1010, Duration::from_secs(120)).await;
    let (last_high, first_low) = (started(&app, "MAX", 0).await, started(&app, "MIN", 9).await);
    assert!(last_high < first_low, "an urgent job started after a low one: {last_high} > {first_low}");
}

/// A job at level 9 waits while urgent work keeps coming: it rises to level 0 (aging), and
/// then starts before the urgent jobs that came after it rose. With aging off it would
/// start after every one of them.
async fn a_waiting_job_rises_and_is_not_starved(backend: Backend) {
    // Nine rises of 0.5 s: the batch submitted right after the low job is queued long before
    // it reaches level 0, however loaded the machine.
    let jobs = JobsSettings { priority_aging_seconds: 0.5, ..Default::default() };
    let app = TestApp::spawn_with(backend, one_slot(jobs)).await;
    let blocker = occupy(&app).await;
    let (status, low) = app.submit(json!({ "operation": "ping", "priority": 9 })).await;
    assert_eq!(status, 201, "{low}");
    assert_eq!((low["priority"].as_i64(), low["effective_priority"].as_i64()), (Some(9), Some(9)), "{low}");
    assert!(!low["ages_at"].is_null(), "{low}");
    let low = low["id"].as_str().unwrap().to_owned();
    let earlier = submit_batch(&app, (0..20).map(|_| json!({ "operation": "ping", "priority": 0 })).collect()).await;
    let risen = eventually("the low job to rise to level 0", Duration::from_secs(30), || async {
        let (_, job) = app.get(&format!("/jobs/{low}")).await;
        (job["effective_priority"] == 0).then_some(job)
    })
    .await;
    assert_eq!((risen["priority"].as_i64(), risen["status"].as_str()), (Some(9), Some("queued")), "{risen}");
    assert!(risen["ages_at"].is_null(), "nothing above level 0 to rise to: {risen}");
    let later = submit_batch(&app, (0..20).map(|_| json!({ "operation": "ping", "priority": 0 })).collect()).await;
    app.post(&format!("/jobs/{blocker}/cancel")).await;
    let done = "SELECT COUNT(*) FROM job WHERE operation = 'ping' AND status = 'succeeded'";
    app.wait_for_count(done, 41, Duration::from_secs(60)).await;
    let start = |id: String| {
        let app = &app;
        async move {
            let events = app.events(&id).await;
            let started = events.iter().find(|event| event["event"] == "job.started");
            started.and_then(|event| event["id"].as_i64()).unwrap_or_else(|| panic!("{id} never started: {events:?}"))
        }
    };
    let low_started = start(low).await;
    for id in later {
        assert!(start(id.clone()).await > low_started, "{id}, submitted after the low job rose, started before it");
    }
    // It rose to the urgent jobs' level: those queued before it still went first.
    for id in earlier {
        assert!(start(id.clone()).await < low_started, "{id} queued at level 0 before the low job rose");
    }
}

/// Defaults: the operation's (`[jobs.operations.NAME]`), then the queue's, else 0; what a
/// submission asks wins; a group's children run at the group's level; a reused key with
/// another priority is another request.
async fn priorities_default_by_operation_then_queue(backend: Backend) {
    let mut jobs = JobsSettings::default();
    jobs.queues
        .insert("default".into(), yardmaster::jobs::settings::JobDefaults { priority: Some(7), ..Default::default() });
    jobs.operations
        .insert("ping".into(), yardmaster::jobs::settings::JobDefaults { priority: Some(3), ..Default::default() });
    let app = TestApp::spawn_with(backend, TestOptions { jobs: Some(jobs), ..Default::default() }).await;
    for (body, expected) in [
        (json!({ "operation": "ping" }), 3),
        (json!({ "operation": "sleep", "payload": { "seconds": 0 } }), 7),
        (json!({ "operation": "ping", "priority": 1 }), 1),
        (json!({ "operation": "ping", "priority": null }), 3),
        (json!({ "operation": "ping", "priority": 4.0 }), 4),
    ] {
        let (status, job) = app.submit(body.clone()).await;
        assert_eq!((status, job["priority"].as_i64()), (201, Some(expected)), "{body}: {job}");
        assert_eq!(job["effective_priority"], job["priority"], "{job}");
    }
    let group = json!({ "operation": "group", "priority": 2, "payload": { "jobs": [{ "operation": "ping" }] } });
    let (status, parent) = app.submit(group).await;
    assert_eq!(status, 201, "{parent}");
    let parent = app.wait_for_status(parent["id"].as_str().unwrap(), "succeeded").await;
    let (_, children) = app.get(&format!("/jobs?parent_job_id={}", parent["id"].as_str().unwrap())).await;
    let child = &children["jobs"][0];
    assert_eq!(child["priority"], 2, "a child runs at its parent's level: {children}");
    let keyed = json!({ "operation": "ping", "idempotency_key": "prio-key", "priority": 5 });
    let (status, _) = app.submit(keyed.clone()).await;
    assert_eq!(status, 201);
    let (status, again) = app.submit(keyed).await;
    assert_eq!(status, 200, "{again}");
    let (status, other) =
        app.submit(json!({ "operation": "ping", "idempotency_key": "prio-key", "priority": 6 })).await;
    assert_eq!((status, other["code"].as_str()), (409, Some("idempotency_conflict")), "{other}");
}

async fn bad_priorities_are_refused(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let cases = [
        (json!({ "operation": "ping", "priority": 10 }), "invalid_priority", Some("/priority")),
        (json!({ "operation": "ping", "priority": -1 }), "invalid_priority", Some("/priority")),
        (json!({ "operation": "ping", "priority": 1e300 }), "invalid_request", None),
        (json!({ "operation": "ping", "priority": 2.5 }), "invalid_request", None),
        (json!({ "operation": "ping", "priority": "1" }), "invalid_request", None),
        (json!({ "operation": "ping", "priority": [1] }), "invalid_request", None),
        (json!({ "operation": "ping", "priority": "\u{0}" }), "invalid_request", None),
    ];
    for (body, code, pointer) in cases {
        let (status, problem) = app.submit(body.clone()).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some(code)), "{body}: {problem}");
        if let Some(pointer) = pointer {
            assert_eq!(problem["pointer"].as_str(), Some(pointer), "{body}: {problem}");
        }
    }
    let body = json!({ "jobs": [{ "operation": "ping", "priority": 0 }, { "operation": "ping", "priority": 99 }] });
    let (status, problem) = read(app.client.post(app.url("/jobs:batch")).json(&body).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_priority")), "{problem}");
    assert_eq!(problem["pointer"].as_str(), Some("/jobs/1/priority"), "{problem}");
    let schedule =
        json!({ "name": "bad-priority", "every_seconds": 60, "job": { "operation": "ping", "priority": 12 } });
    let (status, problem) = read(app.client.post(app.url("/schedules")).json(&schedule).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_priority")), "{problem}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) FROM schedule").await, 0);
}

on_every_backend!(
    urgent_jobs_start_before_the_queued_low_ones,
    a_waiting_job_rises_and_is_not_starved,
    priorities_default_by_operation_then_queue,
    bad_priorities_are_refused,
);

/// A deployment upgraded from a version before priorities keeps messages in its plain
/// queue `PREFIX.Q` (a queue's arguments cannot change): the priority queue `PREFIX.Q.prio`
/// is declared beside it, and with `drain_legacy_queues` a subscription drains both, so
/// none of those messages is lost; what waits in the priority queue comes out by level.
#[actix_rt::test]
async fn amqp_a_queue_of_an_earlier_version_is_drained_beside_the_priority_queue() {
    use lapin::options::{BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions};
    use lapin::types::{AMQPValue, FieldTable};
    use yardmaster::transport::{AmqpTransport, Transport};

    let prefix = format!("t{}.", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let connection =
        lapin::Connection::connect(&crate::helpers::amqp_url(), lapin::ConnectionProperties::default()).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    // The queue as versions before priorities declared it.
    let legacy = format!("{prefix}q");
    let mut arguments = FieldTable::default();
    arguments.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
    arguments.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(format!("{legacy}.dead").into()));
    channel.queue_declare(legacy.as_str().into(), QueueDeclareOptions::durable(), arguments).await.unwrap();
    let properties = lapin::BasicProperties::default().with_delivery_mode(2);
    let options = BasicPublishOptions::default();
    channel.basic_publish("".into(), legacy.as_str().into(), options, b"legacy", properties).await.unwrap();

    let mut settings = yardmaster::config::Settings::default().transport.amqp;
    (settings.url, settings.queue_prefix) = (crate::helpers::amqp_url(), prefix.clone());
    settings.drain_legacy_queues = true;
    let transport = AmqpTransport::new(settings).unwrap();
    for (body, priority) in [("low", 9), ("middle", 5), ("high", 0)] {
        transport.publish_at("q", body.as_bytes().to_vec(), priority).await.unwrap();
    }
    let mut subscription = transport.subscribe("q", 10).await.unwrap();
    let mut bodies = Vec::new();
    for _ in 0..4 {
        let delivery = tokio::time::timeout(Duration::from_secs(30), subscription.next()).await.unwrap().unwrap();
        bodies.push(String::from_utf8(delivery.body.clone()).unwrap());
        delivery.acker.ack().await.unwrap();
    }
    assert!(bodies.contains(&"legacy".to_owned()), "{bodies:?}");
    bodies.retain(|body| body != "legacy");
    assert_eq!(bodies, ["high", "middle", "low"]);
    drop(subscription);
    for queue in [legacy, format!("{prefix}q.prio"), format!("{prefix}q.prio.wait"), format!("{prefix}q.dead")] {
        let _ = channel.queue_delete(queue.as_str().into(), QueueDeleteOptions::default()).await;
    }
    let _ = connection.close(200, "done".into()).await;
}
