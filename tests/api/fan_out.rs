//! Coordinator jobs: fan-out to batches on an operations queue, fan-in on a write queue,
//! exactly-once closing, failure and cancellation of the parent.

use std::time::Duration;

use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::json;
use uuid::Uuid;
use yardmaster::domain::{BatchAddress, BatchOutcome, BatchResult, FanOutForm, JobStatus, NewJob, QueueName};
use yardmaster::ops::{OperationMessage, OperationRegistry};
use yardmaster::store::entity::{job, job_batch, job_event};
use yardmaster::store::{BatchRecorded, RunRef};

use crate::helpers::{eventually, Backend, TestApp, TestOptions, LEASE_MS, PARKED};

fn registry() -> std::sync::Arc<OperationRegistry> {
    std::sync::Arc::new(OperationRegistry::builtin())
}

fn fan_out_app_options() -> TestOptions {
    TestOptions::fan_out()
}

/// Sum of i² over 1..=n.
fn sum_of_squares(n: u64) -> u64 {
    n * (n + 1) * (2 * n + 1) / 6
}

/// Batch `index` of a `sum_squares` parent's run `attempt`, succeeded with its index as sum.
fn summed(parent: Uuid, attempt: i32, index: i64) -> BatchOutcome {
    BatchOutcome {
        parent_job_id: parent,
        attempt,
        index,
        result: BatchResult::Succeeded { output: json!({ "sum": index }) },
    }
}

async fn batch_rows(app: &TestApp, parent: Uuid) -> Vec<job_batch::Model> {
    job_batch::Entity::find().filter(job_batch::Column::ParentJobId.eq(parent)).all(&app.db).await.unwrap()
}

async fn event_names(app: &TestApp, id: Uuid) -> Vec<String> {
    app.store.events(id, None, 100_000).await.unwrap().into_iter().map(|event| event.event).collect()
}

async fn a_coordinator_fans_in_exactly_once(backend: Backend) {
    let app = TestApp::spawn_with(backend, fan_out_app_options()).await;
    let (status, job) = app
        .submit(json!({ "operation": "sum_squares", "payload": { "start": 1, "end": 10000, "batch_size": 10 } }))
        .await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let done = app.wait_for_status(id, "succeeded").await;

    assert_eq!((done["progress_current"].as_i64(), done["progress_total"].as_i64()), (Some(1000), Some(1000)));
    assert_eq!(done["result"], json!({ "batches": 1000, "sum": sum_of_squares(10_000) }));
    assert_eq!(done["attempts"], 1);
    let parent: Uuid = id.parse().unwrap();
    let rows = batch_rows(&app, parent).await;
    assert_eq!(rows.len(), 1000);
    let sum: u64 = rows.iter().map(|row| row.output.as_ref().unwrap()["sum"].as_u64().unwrap()).sum();
    assert_eq!(sum, sum_of_squares(10_000));

    let names = event_names(&app, parent).await;
    assert_eq!(names[..3], ["job.queued", "job.started", "job.fanned_out"]);
    assert_eq!(names.iter().filter(|name| *name == "job.succeeded").count(), 1);
    assert_eq!(names.last().map(String::as_str), Some("job.succeeded"));
}

/// A batch that keeps failing is retried `max_retries` times (re-sent with one failure
/// more each time), then fails its parent (`ChildFailed`, `child.failed` naming it).
async fn a_failing_batch_fails_the_parent_with_its_reason(backend: Backend) {
    let app = TestApp::spawn_with(backend, fan_out_app_options()).await;
    let payload = json!({ "batches": 10, "fail_batch": 3, "fail_times": 1000, "max_retries": 2 });
    let (_, job) = app.submit(json!({ "operation": "flaky_fan", "payload": payload })).await;
    let id = job["id"].as_str().unwrap();
    let failed = app.wait_for_status(id, "failed").await;
    assert_eq!(failed["error_code"], "ChildFailed");
    let message = failed["error_message"].as_str().unwrap();
    assert!(message.contains("batch 3") && message.contains("FlakyBatch"), "{message}");
    assert_eq!(batch_runs(&app, id, 3).await, 3, "one run and max_retries (2) retries");

    let events = app.store.events(id.parse().unwrap(), None, 1000).await.unwrap();
    let child_failed: Vec<_> = events.iter().filter(|event| event.event == "child.failed").collect();
    assert_eq!(child_failed.len(), 1);
    assert_eq!(child_failed[0].fields["batch"], 3);
    assert_eq!(child_failed[0].fields["error_code"], "FlakyBatch");
    assert_eq!(events.iter().filter(|event| event.event == "job.failed").count(), 1);
}

/// A batch is retried up to its `max_retries`: one that fails twice succeeds with 2 (run
/// three times) and fails its parent with 1 (run twice).
async fn a_batch_is_retried_up_to_its_max_retries(backend: Backend) {
    let app = TestApp::spawn_with(backend, fan_out_app_options()).await;
    let fan_out = |max_retries: i32| {
        let payload = json!({ "batches": 4, "fail_batch": 1, "fail_times": 2, "max_retries": max_retries });
        app.submit(json!({ "operation": "flaky_fan", "payload": payload }))
    };
    let (_, enough) = fan_out(2).await;
    let (_, too_few) = fan_out(1).await;
    let (enough, too_few) = (enough["id"].as_str().unwrap(), too_few["id"].as_str().unwrap());

    let done = app.wait_for_status(enough, "succeeded").await;
    assert_eq!(done["result"], json!({ "batches": 4 }));
    assert_eq!(batch_runs(&app, enough, 1).await, 3);
    let failed = app.wait_for_status(too_few, "failed").await;
    assert_eq!(failed["error_code"], "ChildFailed", "{failed}");
    assert!(failed["error_message"].as_str().unwrap().contains("batch 1"), "{failed}");
    assert_eq!(batch_runs(&app, too_few, 1).await, 2);
}

/// Runs of batch `index` of `flaky_fan` coordinator `id` (each run logs one row).
async fn batch_runs(app: &TestApp, id: &str, index: u64) -> i64 {
    let tag = crate::test_ops::batch_tag(id, index);
    app.count(&format!("SELECT COUNT(*) FROM execution_log WHERE job_id = '{tag}'")).await
}

/// Cancelling a fanned-out parent: its remaining batches are skipped, not run, and nothing
/// more is counted.
async fn cancelling_a_parent_stops_its_batches(backend: Backend) {
    let app = TestApp::spawn_with(backend, fan_out_app_options()).await;
    let (_, job) = app.submit(json!({ "operation": "fan_count", "payload": { "batches": 200, "delay_ms": 50 } })).await;
    let id = job["id"].as_str().unwrap();
    let parent: Uuid = id.parse().unwrap();
    eventually("a batch finished", Duration::from_secs(30), || async {
        (app.count("SELECT COUNT(*) FROM job_batch").await >= 5).then_some(())
    })
    .await;
    let (status, cancelled) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");

    // A message sent after the cancel runs once every batch before it was taken off the queue.
    let sentinel = OperationMessage::new("count", json!({ "tag": "sentinel" }));
    app.transport.publish("batches", sentinel.encode()).await.unwrap();
    let sentinel_ran = "SELECT COUNT(*) FROM execution_log WHERE job_id = 'sentinel'";
    app.wait_for_count(sentinel_ran, 1, Duration::from_secs(30)).await;

    let executed = app.count("SELECT COUNT(*) FROM execution_log WHERE job_id = 'ephemeral'").await;
    let recorded = batch_rows(&app, parent).await.len() as i64;
    let job = app.store.get(parent).await.unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Cancelled);
    assert_eq!(job.progress_current, recorded, "the counter matches the outcomes recorded");
    assert!(executed < 100, "batches kept running after the cancel: {executed} of 200 ran");
    assert!(!event_names(&app, parent).await.contains(&"job.succeeded".to_owned()));
}

/// A fan-out that outlasts its coordinator's lease is kept by its batches, not reaped: the
/// test holds the batches back until the reaper has re-queued a run leased after the
/// coordinator deferred, then lets them run.
async fn a_long_fan_out_outlives_the_lease(backend: Backend) {
    // Nothing in the app consumes `batches` but the test, which relays them to `relay`.
    let options =
        TestOptions { operation_queues: vec!["relay"], write_queues: vec!["batch_writes"], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let mut held = app.transport.subscribe("batches", 16).await.unwrap();
    let payload = json!({ "start": 1, "end": 4, "batch_size": 1 });
    let (_, job) = app.submit(json!({ "operation": "sum_squares", "payload": payload })).await;
    let id = job["id"].as_str().unwrap();
    let mut batches = Vec::new();
    for _ in 0..4 {
        let next = tokio::time::timeout(Duration::from_secs(30), held.next()).await;
        batches.push(next.expect("a batch within 30 s").expect("the subscription is open"));
    }
    wait_for_event(&app, id, "job.deferred").await;

    // A run leased now, for as long as the coordinator's was, expires after it would have.
    let (_, ghost) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
    let ghost = ghost["id"].as_str().unwrap();
    app.store.claim(ghost.parse().unwrap(), "ghost", Duration::from_millis(LEASE_MS)).await.unwrap().unwrap();
    wait_for_event(&app, ghost, "job.lease_expired_requeue").await;
    let (_, parent) = app.get(&format!("/jobs/{id}")).await;
    assert_eq!((parent["status"].as_str(), parent["attempts"].as_i64()), (Some("running"), Some(1)), "{parent}");
    assert!(parent["leased_until"].is_null() && parent["deferred_at"].is_string(), "{parent}");

    for batch in batches {
        app.transport.publish("relay", batch.body.clone()).await.unwrap();
        batch.acker.ack().await.unwrap();
    }
    let done = app.wait_for_status(id, "succeeded").await;
    assert_eq!((done["attempts"].as_i64(), &done["result"]), (Some(1), &json!({ "batches": 4, "sum": 30 })));
    let names = event_names(&app, id.parse().unwrap()).await;
    assert!(!names.iter().any(|name| name.starts_with("job.lease_expired")), "{names:?}");
}

/// Polls a job's events until one is named `name`.
async fn wait_for_event(app: &TestApp, id: &str, name: &str) {
    eventually(&format!("a {name} event"), Duration::from_secs(30), || async {
        app.event_names(id).await.iter().any(|event| event == name).then_some(())
    })
    .await;
}

/// The store's side of fan-in: a redelivered outcome and one for an older run change
/// nothing; the outcome that completes the count closes the parent once.
async fn outcomes_count_once_per_batch_and_run(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let store = app.store.clone();
    let parent = store.submit(NewJob::new("sum_squares")).await.unwrap().job;
    let run = RunRef::from(&store.claim(parent.id, "test", Duration::from_secs(60)).await.unwrap().unwrap());
    assert!(store.fan_out(run, 2, FanOutForm::Batches).await.unwrap().is_some());
    let outcome = |index: i64, attempt: i32| summed(run.id, attempt, index);

    let first = store.record_batch(outcome(0, run.attempt), registry()).await.unwrap();
    assert_eq!(first, BatchRecorded::Counted { closed: None });
    assert_eq!(store.record_batch(outcome(0, run.attempt), registry()).await.unwrap(), BatchRecorded::Duplicate);
    assert_eq!(store.record_batch(outcome(1, run.attempt - 1), registry()).await.unwrap(), BatchRecorded::ParentGone);
    assert!(store.defer(run).await.unwrap().is_some());
    let last = store.record_batch(outcome(1, run.attempt), registry()).await.unwrap();
    assert_eq!(last, BatchRecorded::Counted { closed: Some(JobStatus::Succeeded) });
    assert_eq!(store.record_batch(outcome(1, run.attempt), registry()).await.unwrap(), BatchRecorded::ParentGone);

    let job = store.get(run.id).await.unwrap().unwrap();
    assert_eq!((job.status, job.progress_current, job.progress_total), (JobStatus::Succeeded, 2, Some(2)));
    // sum_squares folds its batches' sums: 0 + 1.
    assert_eq!(job.result, Some(json!({ "batches": 2, "sum": 1 })));
    let names = event_names(&app, run.id).await;
    assert_eq!(names.iter().filter(|name| *name == "job.succeeded").count(), 1, "{names:?}");
}

/// A parent whose row holds a large payload (a coordinator's inputs) counts each batch
/// where a reader sees it at once (`GET /jobs/{id}`, the listing, the events), and the close
/// leaves the count on the row. On SQLite the count moves beside the row, which is not
/// rewritten per batch (SQLite rebuilds a whole record, payload and all, on update): a
/// trigger counts the updates of the running parent's row.
async fn a_parent_counts_its_batches_where_readers_see_them(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let store = app.store.clone();
    let mut new = NewJob::new("sum_squares");
    new.payload = json!({ "inputs": vec!["M".repeat(1_000); 1_000] });
    let parent = store.submit(new).await.unwrap().job;
    let run = RunRef::from(&store.claim(parent.id, "test", Duration::from_secs(60)).await.unwrap().unwrap());
    const BATCHES: i64 = 20;
    assert!(store.fan_out(run, BATCHES, FanOutForm::Batches).await.unwrap().is_some());
    assert!(store.defer(run).await.unwrap().is_some());
    let sqlite = backend == Backend::Sqlite;
    if sqlite {
        let watch = "CREATE TABLE test_parent_rewrites (n integer); \
                     CREATE TRIGGER test_parent_rewrites AFTER UPDATE ON job \
                     WHEN OLD.status = 'running' AND NEW.status = 'running' \
                     BEGIN INSERT INTO test_parent_rewrites VALUES (1); END;";
        sea_orm::ConnectionTrait::execute_unprepared(&app.db, watch).await.unwrap();
    }
    let outcome = |index: i64| summed(run.id, run.attempt, index);
    let id = run.id.to_string();
    for index in 0..BATCHES - 1 {
        let counted = store.record_batch(outcome(index), registry()).await.unwrap();
        assert_eq!(counted, BatchRecorded::Counted { closed: None });
        let (status, job) = app.get(&format!("/jobs/{id}")).await;
        assert_eq!((status, job["progress_current"].as_i64()), (200, Some(index + 1)), "{job}");
        let (status, page) = app.get("/jobs?status=running&limit=10").await;
        let listed = page["jobs"].as_array().unwrap().iter().find(|job| job["id"] == id.as_str()).cloned();
        assert_eq!((status, listed.map(|job| job["progress_current"].clone())), (200, Some(json!(index + 1))));
    }
    if sqlite {
        assert_eq!(app.count("SELECT COUNT(*) FROM test_parent_rewrites").await, 0, "the parent's row was rewritten");
        let row = job::Entity::find_by_id(run.id).one(&app.db).await.unwrap().unwrap();
        assert_eq!(row.progress_current, 0, "the count is beside the row while the run lasts");
    }
    let last = store.record_batch(outcome(BATCHES - 1), registry()).await.unwrap();
    assert_eq!(last, BatchRecorded::Counted { closed: Some(JobStatus::Succeeded) });
    let job = store.get(run.id).await.unwrap().unwrap();
    assert_eq!((job.status, job.progress_current), (JobStatus::Succeeded, BATCHES));
    let stored = job::Entity::find_by_id(run.id).one(&app.db).await.unwrap().unwrap();
    assert_eq!(stored.progress_current, BATCHES, "the close leaves the count on the row");
    if sqlite {
        assert_eq!(app.count("SELECT COUNT(*) FROM job_fan_in").await, 0, "a finished run's count stays beside it");
    }
    let counts: Vec<i64> = app
        .events(&id)
        .await
        .iter()
        .filter(|event| event["event"] == "batch.succeeded")
        .filter_map(|event| event["fields"]["_progress_current"].as_i64())
        .collect();
    assert_eq!(counts, (1..=BATCHES).collect::<Vec<_>>());
}

/// A batch parent that leaves RUNNING any other way (here: cancelled) keeps on its row what
/// its batches counted.
async fn a_cancelled_parent_keeps_its_count(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let store = app.store.clone();
    let parent = store.submit(NewJob::new("sum_squares")).await.unwrap().job;
    let run = RunRef::from(&store.claim(parent.id, "test", Duration::from_secs(60)).await.unwrap().unwrap());
    assert!(store.fan_out(run, 10, FanOutForm::Batches).await.unwrap().is_some());
    assert!(store.defer(run).await.unwrap().is_some());
    for index in 0..3 {
        store.record_batch(summed(run.id, run.attempt, index), registry()).await.unwrap();
    }
    let (status, cancelled) = app.post(&format!("/jobs/{}/cancel", run.id)).await;
    let answer = (status, cancelled["status"].as_str(), cancelled["progress_current"].as_i64());
    assert_eq!(answer, (200, Some("cancelled"), Some(3)), "{cancelled}");
    let stored = job::Entity::find_by_id(run.id).one(&app.db).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.progress_current), (JobStatus::Cancelled, 3));
    let (_, job) = app.get(&format!("/jobs/{}", run.id)).await;
    assert_eq!(job["progress_current"], 3, "{job}");
}

/// A deferred parent holds no lease: the reaper judges it by its batches' events. Started
/// an hour ago, with its own events (queued, started, fanned out, deferred) as old, a fresh
/// `batch.succeeded` alone keeps it alive; once that is old too, it times out.
async fn the_reaper_judges_a_deferred_parent_by_its_batches(backend: Backend) {
    use yardmaster::actors::reaper::run_once;
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let store = app.store.clone();
    let dispatcher = yardmaster::dispatch::Dispatcher::new(store.clone(), app.transport.clone());
    let parent = store.submit(NewJob::new("sum_squares")).await.unwrap().job;
    // A lease long enough to outlast the claim-to-defer steps: the app's reaper passes every
    // 200 ms and would re-queue a run whose lease ran out before `defer` dropped it. Nothing
    // below needs the lease to expire: a deferred run holds none.
    let run = RunRef::from(&store.claim(parent.id, "test", Duration::from_secs(60)).await.unwrap().unwrap());
    store.fan_out(run, 3, FanOutForm::Batches).await.unwrap().unwrap();
    let deferred = store.defer(run).await.unwrap().unwrap();
    assert!(deferred.leased_until.is_none() && deferred.deferred_at.is_some());
    age(&app, run.id).await;
    let minute = Duration::from_secs(60);
    assert_eq!(store.stalled_runs(minute, minute, 10).await.unwrap(), [run], "its own events are old");

    let outcome = BatchOutcome {
        parent_job_id: run.id,
        attempt: run.attempt,
        index: 0,
        result: BatchResult::Succeeded { output: json!(0) },
    };
    store.record_batch(outcome, registry()).await.unwrap();
    let mut settings = yardmaster::Settings::default().reaper;
    (settings.timeout_seconds, settings.stall_seconds) = (60, 60);
    let counts = run_once(store.as_ref(), store.as_ref(), &dispatcher, &settings).await.unwrap();
    assert_eq!(counts.total(), 0, "the batch event keeps it alive: {counts:?}");
    assert_eq!(store.get(run.id).await.unwrap().unwrap().status, JobStatus::Running);

    age(&app, run.id).await;
    let counts = run_once(store.as_ref(), store.as_ref(), &dispatcher, &settings).await.unwrap();
    assert_eq!(counts.timed_out, 1, "{counts:?}");
    let job = store.get(run.id).await.unwrap().unwrap();
    assert_eq!((job.status, job.error_code.as_deref()), (JobStatus::Failed, Some("JobTimeout")));
}

/// Moves job `id`'s start and every event of it an hour into the past.
async fn age(app: &TestApp, id: Uuid) {
    let hour_ago = yardmaster::store::clock::now() - chrono::Duration::hours(1);
    let update = job::Entity::update_many().col_expr(job::Column::StartedAt, Expr::value(hour_ago));
    update.filter(job::Column::Id.eq(id)).exec(&app.db).await.unwrap();
    let update = job_event::Entity::update_many().col_expr(job_event::Column::Ts, Expr::value(hour_ago));
    update.filter(job_event::Column::JobId.eq(id)).exec(&app.db).await.unwrap();
}

/// A batch no worker can run (here: an operation nobody registered) fails its parent at
/// once instead of leaving it waiting.
async fn a_batch_that_cannot_run_fails_its_parent(backend: Backend) {
    let app = TestApp::spawn_with(backend, fan_out_app_options()).await;
    let store = app.store.clone();
    let parent = store
        .submit(NewJob { queue: QueueName::parse("parked").unwrap(), ..NewJob::new("sum_squares") })
        .await
        .unwrap();
    let run = RunRef::from(&store.claim(parent.job.id, "test", Duration::from_secs(60)).await.unwrap().unwrap());
    store.fan_out(run, 1, FanOutForm::Batches).await.unwrap().unwrap();
    let address = BatchAddress {
        parent_job_id: run.id,
        attempt: run.attempt,
        index: 0,
        write_queue: "batch_writes".into(),
        failures: 0,
        max_retries: 0,
    };
    let message = OperationMessage { batch: Some(address), ..OperationMessage::new("launch_rockets", json!({})) };
    app.transport.publish("batches", message.encode()).await.unwrap();

    let failed = app.wait_for_status(&run.id.to_string(), "failed").await;
    assert_eq!(failed["error_code"], "ChildFailed");
    let events = store.events(run.id, None, 100).await.unwrap();
    let child_failed = events.iter().find(|event| event.event == "child.failed").expect("a child.failed event");
    assert_eq!(child_failed.fields["error_code"], "unknown_operation");
}

/// `batches_per_message`: a coordinator's batches travel several to a message, and each
/// still counts once; a failing one is retried inside its bundle's budget.
async fn bundled_batches_fan_in_exactly_once(backend: Backend) {
    let options = TestOptions { batches_per_message: 32, ..fan_out_app_options() };
    let app = TestApp::spawn_with(backend, options).await;
    let (_, job) = app
        .submit(json!({ "operation": "sum_squares", "payload": { "start": 1, "end": 10000, "batch_size": 10 } }))
        .await;
    let flaky = json!({ "batches": 40, "fail_batch": 33, "fail_times": 2, "max_retries": 2 });
    let (_, flaky) = app.submit(json!({ "operation": "flaky_fan", "payload": flaky })).await;
    let (id, flaky) = (job["id"].as_str().unwrap(), flaky["id"].as_str().unwrap());

    let done = app.wait_for_status(id, "succeeded").await;
    assert_eq!(done["result"], json!({ "batches": 1000, "sum": sum_of_squares(10_000) }));
    assert_eq!(batch_rows(&app, id.parse().unwrap()).await.len(), 1000);
    let names = event_names(&app, id.parse().unwrap()).await;
    assert_eq!(names.iter().filter(|name| *name == "job.succeeded").count(), 1);
    assert_eq!(app.wait_for_status(flaky, "succeeded").await["result"], json!({ "batches": 40 }));
    assert_eq!(batch_runs(&app, flaky, 33).await, 3, "one run and two retries");
}

/// A message of three batches, one of an operation this worker lacks: the good two count,
/// the bad one fails the parent; then a message of outcomes sent to the write queue
/// directly counts each of them once.
async fn a_message_of_batches_settles_each_batch(backend: Backend) {
    let app = TestApp::spawn_with(backend, fan_out_app_options()).await;
    let store = app.store.clone();
    let parked = || NewJob { queue: QueueName::parse("parked").unwrap(), ..NewJob::new("sum_squares") };
    let claim = |id| store.claim(id, "test", Duration::from_secs(60));
    let first = RunRef::from(&claim(store.submit(parked()).await.unwrap().job.id).await.unwrap().unwrap());
    store.fan_out(first, 3, FanOutForm::Batches).await.unwrap().unwrap();
    let address = |run: RunRef, index| BatchAddress {
        parent_job_id: run.id,
        attempt: run.attempt,
        index,
        write_queue: "batch_writes".into(),
        failures: 0,
        max_retries: 0,
    };
    let batch = |run, index, operation: &str, payload| {
        OperationMessage { batch: Some(address(run, index)), ..OperationMessage::new(operation, payload) }.encode()
    };
    let messages = vec![
        batch(first, 0, "sum_squares.batch", json!({ "index": 0, "from": 1, "to": 2 })),
        batch(first, 1, "launch_rockets", json!({})),
        batch(first, 2, "sum_squares.batch", json!({ "index": 2, "from": 3, "to": 3 })),
    ];
    let body = yardmaster::transport::bundle::pack(messages, 3);
    assert_eq!(body.len(), 1, "one message");
    app.transport.publish("batches", body[0].clone()).await.unwrap();
    let failed = app.wait_for_status(&first.id.to_string(), "failed").await;
    assert_eq!(failed["error_code"], "ChildFailed");
    let events = store.events(first.id, None, 100).await.unwrap();
    let child_failed: Vec<_> = events.iter().filter(|event| event.event == "child.failed").collect();
    assert_eq!(child_failed.len(), 1);
    assert_eq!(
        (child_failed[0].fields["batch"].as_i64(), child_failed[0].fields["error_code"].as_str()),
        (Some(1), Some("unknown_operation"))
    );

    let second = RunRef::from(&claim(store.submit(parked()).await.unwrap().job.id).await.unwrap().unwrap());
    store.fan_out(second, 2, FanOutForm::Batches).await.unwrap().unwrap();
    let outcome = |index, sum: u64| {
        let result = BatchResult::Succeeded { output: json!({ "sum": sum }) };
        BatchOutcome::of(&address(second, index), result).encode()
    };
    // The first outcome twice: it counts once.
    let outcomes = vec![outcome(0, 1), outcome(0, 1), outcome(1, 4)];
    let body = yardmaster::transport::bundle::pack(outcomes, 3);
    app.transport.publish("batch_writes", body[0].clone()).await.unwrap();
    let done = app.wait_for_status(&second.id.to_string(), "succeeded").await;
    assert_eq!((done["progress_current"].as_i64(), done["result"]["sum"].as_u64()), (Some(2), Some(5)), "{done}");
    assert_eq!(batch_rows(&app, second.id).await.len(), 2);

    // One message of outcomes that share a group commit: a success twice, a failure, then
    // a success after it. The failure fails the parent; what came after it is not recorded.
    let third = RunRef::from(&claim(store.submit(parked()).await.unwrap().job.id).await.unwrap().unwrap());
    store.fan_out(third, 3, FanOutForm::Batches).await.unwrap().unwrap();
    let outcome = |index, result| BatchOutcome::of(&address(third, index), result).encode();
    let summed = || BatchResult::Succeeded { output: json!({ "sum": 1 }) };
    let failed = BatchResult::Failed { error_code: "Boom".into(), message: "batch 1 broke".into() };
    let outcomes = vec![outcome(0, summed()), outcome(0, summed()), outcome(1, failed), outcome(2, summed())];
    let body = yardmaster::transport::bundle::pack(outcomes, 4);
    app.transport.publish("batch_writes", body[0].clone()).await.unwrap();
    let failed = app.wait_for_status(&third.id.to_string(), "failed").await;
    assert_eq!((failed["error_code"].as_str(), failed["progress_current"].as_i64()), (Some("ChildFailed"), Some(1)));
    let rows = batch_rows(&app, third.id).await;
    let mut recorded: Vec<(i64, &str)> = rows.iter().map(|row| (row.batch, row.status.as_str())).collect();
    recorded.sort();
    assert_eq!(recorded, [(0, "succeeded"), (1, "failed")]);
}

/// Bad coordinator payloads are refused at submit.
async fn a_bad_range_is_refused(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    for payload in [
        json!({ "start": 10, "end": 1 }),
        json!({ "start": 1, "end": 10, "batch_size": 0 }),
        json!({ "start": 0, "end": 1_000_000, "batch_size": 1 }),
        json!({ "start": 1 }),
    ] {
        let (status, problem) = app.submit(json!({ "operation": "sum_squares", "payload": payload })).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_payload")), "{payload}: {problem}");
    }
}

on_both_backends!(
    a_coordinator_fans_in_exactly_once,
    a_failing_batch_fails_the_parent_with_its_reason,
    a_batch_is_retried_up_to_its_max_retries,
    cancelling_a_parent_stops_its_batches,
    a_long_fan_out_outlives_the_lease,
    outcomes_count_once_per_batch_and_run,
    a_parent_counts_its_batches_where_readers_see_them,
    a_cancelled_parent_keeps_its_count,
    the_reaper_judges_a_deferred_parent_by_its_batches,
    a_batch_that_cannot_run_fails_its_parent,
    a_bad_range_is_refused,
    bundled_batches_fan_in_exactly_once,
    a_message_of_batches_settles_each_batch,
);

mod children {
    //! The child-job form: `group` runs jobs of its own as children.

    use serde_json::json;

    use crate::helpers::{Backend, TestApp};

    async fn a_group_closes_once_its_children_succeed(backend: Backend) {
        let app = TestApp::spawn(backend).await;
        let jobs: Vec<_> = (0..20).map(|_| json!({ "operation": "ping" })).collect();
        let (status, group) = app.submit(json!({ "operation": "group", "payload": { "jobs": jobs } })).await;
        assert_eq!(status, 201, "{group}");
        let id = group["id"].as_str().unwrap();
        let done = app.wait_for_status(id, "succeeded").await;
        assert_eq!((done["progress_current"].as_i64(), done["progress_total"].as_i64()), (Some(20), Some(20)));
        assert_eq!(done["result"], json!({ "children": 20 }));

        let (status, page) = app.get(&format!("/jobs/{id}/children?limit=100")).await;
        assert_eq!(status, 200, "{page}");
        let children = page["jobs"].as_array().unwrap();
        assert_eq!(children.len(), 20);
        assert!(children.iter().all(|child| child["status"] == "succeeded" && child["parent_job_id"] == id));
        let names = app.event_names(id).await;
        assert_eq!(names.iter().filter(|name| *name == "job.succeeded").count(), 1, "{names:?}");
        assert!(names.contains(&"job.deferred".to_owned()), "{names:?}");
    }

    async fn a_failing_child_fails_the_group_naming_it(backend: Backend) {
        let app = TestApp::spawn(backend).await;
        let jobs = json!([
            { "operation": "ping" },
            { "operation": "fail", "payload": { "error_class": "Boom", "message": "no" } },
        ]);
        let (_, group) = app.submit(json!({ "operation": "group", "payload": { "jobs": jobs } })).await;
        let id = group["id"].as_str().unwrap();
        let failed = app.wait_for_status(id, "failed").await;
        assert_eq!(failed["error_code"], "ChildFailed");

        let (_, page) = app.get(&format!("/jobs/{id}/children?status=failed")).await;
        let failing = page["jobs"][0]["id"].as_str().unwrap().to_owned();
        let events = app.events(id).await;
        let child_failed: Vec<_> = events.iter().filter(|event| event["event"] == "child.failed").collect();
        assert_eq!(child_failed.len(), 1, "{events:?}");
        assert_eq!(child_failed[0]["fields"]["child_job_id"], failing);
        assert_eq!(child_failed[0]["fields"]["error_code"], "Boom");
    }

    /// Cancelling a group cancels its queued and running children in the same transaction.
    async fn cancelling_a_group_cancels_its_children(backend: Backend) {
        let app = TestApp::spawn(backend).await;
        let jobs: Vec<_> =
            (0..6).map(|_| json!({ "operation": "sleep", "payload": { "seconds": 30, "steps": 300 } })).collect();
        let (_, group) = app.submit(json!({ "operation": "group", "payload": { "jobs": jobs } })).await;
        let id = group["id"].as_str().unwrap();
        let running = "SELECT COUNT(*) FROM job WHERE operation = 'sleep' AND status = 'running'";
        app.wait_for_count(running, 2, std::time::Duration::from_secs(30)).await;

        let (status, cancelled) = app.post(&format!("/jobs/{id}/cancel")).await;
        assert_eq!((status, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");
        let (_, page) = app.get(&format!("/jobs/{id}/children")).await;
        let statuses: Vec<_> = page["jobs"].as_array().unwrap().iter().map(|child| child["status"].clone()).collect();
        assert_eq!(statuses, vec![json!("cancelled"); 6]);
    }

    /// Retrying a FAILED group re-runs it: it finds its children, counts the one that
    /// succeeded, runs the failed one again, and closes when nothing is left.
    async fn a_retried_group_reruns_its_failed_children(backend: Backend) {
        let app = TestApp::spawn(backend).await;
        let jobs = json!([{ "operation": "ping" }, { "operation": "fail", "payload": { "times": 1 } }]);
        let (_, group) = app.submit(json!({ "operation": "group", "payload": { "jobs": jobs } })).await;
        let id = group["id"].as_str().unwrap();
        app.wait_for_status(id, "failed").await;
        let (code, retried) = app.post(&format!("/jobs/{id}/retry")).await;
        assert_eq!(code, 200, "{retried}");
        let done = app.wait_for_status(id, "succeeded").await;
        assert_eq!((done["progress_current"].as_i64(), done["progress_total"].as_i64()), (Some(2), Some(2)));
        assert_eq!(done["result"], json!({ "children": 2 }));
        let (_, page) = app.get(&format!("/jobs/{id}/children?limit=10")).await;
        let mut attempts: Vec<(String, i64)> = page["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|child| (child["operation"].as_str().unwrap().to_owned(), child["attempts"].as_i64().unwrap()))
            .collect();
        attempts.sort();
        assert_eq!(attempts, [("fail".to_owned(), 2), ("ping".to_owned(), 1)], "only the failed child ran again");
    }

    /// Retrying a CANCELLED group runs its cancelled children again.
    async fn a_retried_cancelled_group_runs_its_children_again(backend: Backend) {
        let app = TestApp::spawn(backend).await;
        let jobs = json!([{ "operation": "sleep", "payload": { "seconds": 30, "steps": 300 } }]);
        let (_, group) = app.submit(json!({ "operation": "group", "payload": { "jobs": jobs } })).await;
        let id = group["id"].as_str().unwrap();
        let running = "SELECT COUNT(*) FROM job WHERE operation = 'sleep' AND status = 'running'";
        app.wait_for_count(running, 1, std::time::Duration::from_secs(30)).await;
        app.post(&format!("/jobs/{id}/cancel")).await;
        let (_, page) = app.get(&format!("/jobs/{id}/children")).await;
        let child = page["jobs"][0]["id"].as_str().unwrap().to_owned();
        app.wait_for_status(&child, "cancelled").await;
        let (code, _) = app.post(&format!("/jobs/{id}/retry")).await;
        assert_eq!(code, 200);
        let again = "SELECT COUNT(*) FROM job WHERE operation = 'sleep' AND status = 'running' AND attempts = 2";
        app.wait_for_count(again, 1, std::time::Duration::from_secs(30)).await;
        let (_, parent) = app.get(&format!("/jobs/{id}")).await;
        assert_eq!(parent["status"], "running", "{parent}");
        app.post(&format!("/jobs/{id}/cancel")).await;
    }

    on_both_backends!(
        a_group_closes_once_its_children_succeed,
        a_failing_child_fails_the_group_naming_it,
        cancelling_a_group_cancels_its_children,
        a_retried_group_reruns_its_failed_children,
        a_retried_cancelled_group_runs_its_children_again,
    );
}

mod nesting {
    //! Coordinators inside coordinators, and what the API refuses around them.

    use serde_json::json;

    use crate::helpers::{read, Backend, TestApp, TestOptions};

    /// A group whose children are coordinators closes when they close.
    async fn a_group_of_coordinators_closes_when_they_do(backend: Backend) {
        let options =
            TestOptions { operation_queues: vec!["batches"], write_queues: vec!["batch_writes"], ..Default::default() };
        let app = TestApp::spawn_with(backend, options).await;
        let sums = json!({ "operation": "sum_squares", "payload": { "start": 1, "end": 100, "batch_size": 10 } });
        let (_, group) = app.submit(json!({ "operation": "group", "payload": { "jobs": [sums.clone(), sums] } })).await;
        let id = group["id"].as_str().unwrap();
        let done = app.wait_for_status(id, "succeeded").await;
        assert_eq!(done["result"], json!({ "children": 2 }));
        let (_, page) = app.get(&format!("/jobs/{id}/children")).await;
        for summary in page["jobs"].as_array().unwrap() {
            // A page holds summaries; the result is on the job's own page.
            let (_, child) = app.get(&format!("/jobs/{}", summary["id"].as_str().unwrap())).await;
            assert_eq!(child["result"], json!({ "batches": 10, "sum": 338_350 }), "{child}");
        }
    }

    async fn a_coordinator_takes_no_outside_children(backend: Backend) {
        let app = TestApp::spawn(backend).await;
        let (_, group) = app
            .submit(json!({ "operation": "group", "payload": { "jobs": [
            { "operation": "sleep", "payload": { "seconds": 30, "steps": 300 } },
        ] } }))
            .await;
        let id = group["id"].as_str().unwrap();
        let running = "SELECT COUNT(*) FROM job WHERE operation = 'sleep' AND status = 'running'";
        app.wait_for_count(running, 1, std::time::Duration::from_secs(30)).await;
        let (status, problem) = app.submit(json!({ "operation": "ping", "parent_job_id": id })).await;
        assert_eq!((status, problem["code"].as_str()), (409, Some("parent_is_coordinator")), "{problem}");

        let typo = json!({ "operation": "group", "payload": { "jobs": [{ "operation": "pnig" }] } });
        let (status, problem) = app.submit(typo).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_payload")), "{problem}");
        assert!(problem["detail"].as_str().unwrap().contains("jobs[0]"), "{problem}");

        let batch = json!({ "jobs": [{ "operation": "ping" }] });
        let response = app.client.post(app.url("/jobs:batch")).header("Idempotency-Key", "k").json(&batch).send();
        let (status, problem) = read(response.await.unwrap()).await;
        assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
        app.post(&format!("/jobs/{id}/cancel")).await;
    }

    on_both_backends!(a_group_of_coordinators_closes_when_they_do, a_coordinator_takes_no_outside_children);
}

mod unserved {
    //! A coordinator whose batches go where no process reads says so in its log.

    use std::time::Duration;

    use serde_json::json;

    use crate::helpers::{eventually, Backend, TestApp, TestOptions};

    async fn no_consumer_events(app: &TestApp, id: &str) -> Vec<String> {
        let events = app.events(id).await;
        let unserved = events.iter().filter(|event| event["event"] == "job.no_consumer");
        unserved.map(|event| event["fields"]["queue"].as_str().unwrap_or("").to_owned()).collect()
    }

    async fn a_coordinator_says_when_nobody_consumes_its_batches(backend: Backend) {
        let app = TestApp::spawn(backend).await;
        let sums = json!({ "operation": "sum_squares", "payload": { "start": 1, "end": 10, "batch_size": 5 } });
        let (_, job) = app.submit(sums).await;
        let id = job["id"].as_str().unwrap();
        let mut queues = eventually("job.no_consumer events", Duration::from_secs(30), || async {
            let queues = no_consumer_events(&app, id).await;
            (queues.len() >= 2).then_some(queues)
        })
        .await;
        queues.sort();
        assert_eq!(queues, ["batch_writes", "batches"]);
        app.post(&format!("/jobs/{id}/cancel")).await;
    }

    async fn a_served_coordinator_reports_nothing(backend: Backend) {
        let options =
            TestOptions { operation_queues: vec!["batches"], write_queues: vec!["batch_writes"], ..Default::default() };
        let app = TestApp::spawn_with(backend, options).await;
        let sums = json!({ "operation": "sum_squares", "payload": { "start": 1, "end": 10, "batch_size": 5 } });
        let (_, job) = app.submit(sums).await;
        let id = job["id"].as_str().unwrap();
        app.wait_for_status(id, "succeeded").await;
        assert!(no_consumer_events(&app, id).await.is_empty(), "{:?}", app.event_names(id).await);
    }

    on_every_backend!(a_coordinator_says_when_nobody_consumes_its_batches, a_served_coordinator_reports_nothing);
}
