//! Messages no worker can process go to the dead letters, never run, and do not stop the
//! consumer; operators summarise, replay and purge them.

use std::time::Duration;

use serde_json::json;
use uuid::Uuid;
use yardmaster::dispatch::{encode_job_ids, encode_job_message};
use yardmaster::transport::MAX_MESSAGE_BYTES;

use crate::helpers::{eventually, Backend, TestApp, TestOptions, PARKED};

async fn unprocessable_messages_are_dead_lettered_and_the_consumer_goes_on(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 1)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    app.transport.publish("default", b"not a job id".to_vec()).await.unwrap();
    app.transport.publish("default", vec![b'x'; 2 * 1024 * 1024]).await.unwrap();
    app.transport.publish("default", encode_job_message(Uuid::now_v7())).await.unwrap();
    // One job at a time, in order: the sentinel finishing means the three were handled.
    let (_, sentinel) = app.submit(json!({ "operation": "ping" })).await;
    app.wait_for_status(sentinel["id"].as_str().unwrap(), "succeeded").await;
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 1);

    let (code, summary) = app.get("/admin/dead-letters?queue=default").await;
    assert_eq!(code, 200, "{summary}");
    assert_eq!(summary["total"], 3);
    assert_eq!(summary["by_reason"], json!({ "not_a_job_id": 1, "oversized": 1, "unknown_job": 1 }));

    let purge = |body| app.client.post(app.url("/admin/dead-letters/purge")).json(&body).send();
    let dry = crate::helpers::read(
        purge(json!({ "queue": "default", "reason": "oversized", "dry_run": true })).await.unwrap(),
    )
    .await;
    assert_eq!((dry.1["matched"].as_i64(), dry.1["acted"].as_i64()), (Some(1), Some(0)), "{}", dry.1);
    let done = crate::helpers::read(purge(json!({ "queue": "default", "reason": "oversized" })).await.unwrap()).await;
    assert_eq!(done.1["acted"], 1, "{}", done.1);

    // Replaying the unknown job's message sends it to a worker, which dead-letters it again.
    let replay = app
        .client
        .post(app.url("/admin/dead-letters/replay"))
        .json(&json!({ "queue": "default", "reason": "unknown_job" }));
    let (code, replayed) = crate::helpers::read(replay.send().await.unwrap()).await;
    assert_eq!((code, replayed["acted"].as_i64()), (200, Some(1)), "{replayed}");
    eventually("replayed letter came back", Duration::from_secs(30), || async {
        let (_, summary) = app.get("/admin/dead-letters?queue=default").await;
        (summary["by_reason"] == json!({ "not_a_job_id": 1, "unknown_job": 1 })).then_some(())
    })
    .await;
    let (code, problem) = app.get("/admin/dead-letters?queue=no%20such").await;
    assert_eq!((code, problem["code"].as_str()), (400, Some("invalid_query")), "{problem}");
    let (code, problem) = app.get("/admin/dead-letters?queue=default&limit=0").await;
    assert_eq!((code, problem["code"].as_str()), (400, Some("invalid_query")), "{problem}");
}

/// A message naming two jobs and an id no job has: the two run, the unknown id alone goes
/// to the dead letters, and the message is settled.
async fn a_message_naming_an_unknown_job_runs_the_others_and_dead_letters_it(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 4)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let mut known = Vec::new();
    for _ in 0..2 {
        let (_, job) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
        known.push(job["id"].as_str().unwrap().parse::<Uuid>().unwrap());
    }
    let unknown = Uuid::now_v7();
    app.transport.publish("default", encode_job_ids(&[known[0], unknown, known[1]])).await.unwrap();
    for id in &known {
        app.wait_for_status(&id.to_string(), "succeeded").await;
    }
    let summary = eventually("the unknown id reached the dead letters", Duration::from_secs(30), || async {
        let (_, summary) = app.get("/admin/dead-letters?queue=default").await;
        (summary["total"] == 1).then_some(summary)
    })
    .await;
    assert_eq!(summary["by_reason"], json!({ "unknown_job": 1 }), "{summary}");
    let letters = app.transport.take_dead_letters("default", 10).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].body, encode_job_message(unknown), "only the unknown id is set aside");
    for letter in letters {
        letter.acker.requeue().await.unwrap();
    }
}

/// The ephemeral path: operation messages run with no job row; bad ones are dead-lettered.
async fn operation_queues_run_payloads_without_job_rows(backend: Backend) {
    let options = TestOptions { operation_queues: vec!["batch"], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let message = yardmaster::actors::OperationMessage::new("count", json!({}));
    for _ in 0..20 {
        app.transport.publish("batch", message.encode()).await.unwrap();
    }
    let unknown = yardmaster::actors::OperationMessage { operation: "launch_rockets".into(), ..message.clone() };
    app.transport.publish("batch", unknown.encode()).await.unwrap();
    app.transport.publish("batch", b"{not json".to_vec()).await.unwrap();
    let failing = yardmaster::actors::OperationMessage { operation: "fail".into(), ..message.clone() };
    app.transport.publish("batch", failing.encode()).await.unwrap();

    app.wait_for_count("SELECT COUNT(*) FROM execution_log WHERE job_id = 'ephemeral'", 20, Duration::from_secs(30))
        .await;
    let expected = json!({ "failed:OperationFailed": 1, "undecodable": 1, "unknown_operation": 1 });
    eventually("dead letters matched", Duration::from_secs(30), || async {
        let (_, summary) = app.get("/admin/dead-letters?queue=batch").await;
        (summary["by_reason"] == expected).then_some(())
    })
    .await;
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0, "no job rows for ephemeral work");
}

/// An operations queue and a writes queue dead-letter what they cannot process, never run
/// it, and go on: a message over 1 MiB on either, an invalid payload on the operations
/// queue, an undecodable outcome on the writes queue.
async fn oversized_and_invalid_messages_on_operation_and_write_queues_are_dead_lettered(backend: Backend) {
    let options = TestOptions { operation_queues: vec!["batch"], write_queues: vec!["writes"], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let oversized = vec![b' '; MAX_MESSAGE_BYTES + 1];
    // `count` takes an object: 5 is refused by its validation.
    let invalid = yardmaster::actors::OperationMessage::new("count", json!(5));
    app.transport.publish("batch", oversized.clone()).await.unwrap();
    app.transport.publish("batch", invalid.encode()).await.unwrap();
    app.transport.publish("writes", oversized).await.unwrap();
    app.transport.publish("writes", br#"{"parent_job_id": "not an outcome"}"#.to_vec()).await.unwrap();
    let sentinel = yardmaster::actors::OperationMessage::new("count", json!({ "tag": "sentinel" }));
    app.transport.publish("batch", sentinel.encode()).await.unwrap();

    app.wait_for_count("SELECT COUNT(*) FROM execution_log WHERE job_id = 'sentinel'", 1, Duration::from_secs(30))
        .await;
    wait_for_dead_letters(&app, "batch", json!({ "invalid_payload": 1, "oversized": 1 })).await;
    wait_for_dead_letters(&app, "writes", json!({ "oversized": 1, "undecodable": 1 })).await;
    assert_eq!(app.count("SELECT COUNT(*) FROM execution_log WHERE job_id <> 'sentinel'").await, 0);
}

/// Polls `queue`'s dead letters until they are `by_reason`.
async fn wait_for_dead_letters(app: &TestApp, queue: &str, by_reason: serde_json::Value) {
    eventually(&format!("{queue}: dead letters became {by_reason}"), Duration::from_secs(30), || async {
        let (_, summary) = app.get(&format!("/admin/dead-letters?queue={queue}")).await;
        (summary["by_reason"] == by_reason).then_some(())
    })
    .await;
}

/// A job whose message reached a queue of another kind (the queue's kind changed while the
/// job waited, say) is failed with the reason, not left QUEUED for ever.
async fn a_job_message_on_an_operations_queue_fails_its_job(backend: Backend) {
    let options = TestOptions { operation_queues: vec!["batch"], write_queues: vec!["writes"], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let mut ids = Vec::new();
    for queue in ["batch", "writes"] {
        let (_, job) = app.submit(json!({ "operation": "ping", "queue": "parked" })).await;
        let id = job["id"].as_str().unwrap().to_owned();
        app.transport.publish(queue, encode_job_message(id.parse().unwrap())).await.unwrap();
        ids.push((queue, id));
    }
    for (queue, id) in ids {
        let failed = app.wait_for_status(&id, "failed").await;
        assert_eq!(failed["error_code"], "WrongQueue", "{failed}");
        assert!(failed["error_message"].as_str().unwrap().contains(queue), "{failed}");
    }
}

/// A message answering RetryLater waits out its delay off the queue: the consumer's slots
/// stay free for the rest (two "GPU busy" messages do not freeze a queue of concurrency 2).
async fn retry_later_messages_hold_no_slot(backend: Backend) {
    let options = TestOptions { operation_queues: vec!["batch"], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let busy = yardmaster::actors::OperationMessage::new("busy", json!({ "times": 1, "delay_seconds": 60 }));
    for _ in 0..4 {
        app.transport.publish("batch", busy.encode()).await.unwrap();
    }
    let count = yardmaster::actors::OperationMessage::new("count", json!({ "tag": "behind_busy" }));
    app.transport.publish("batch", count.encode()).await.unwrap();
    let counted = "SELECT COUNT(*) FROM execution_log WHERE job_id = 'behind_busy'";
    app.wait_for_count(counted, 1, Duration::from_secs(10)).await;
}

on_every_backend!(
    retry_later_messages_hold_no_slot,
    unprocessable_messages_are_dead_lettered_and_the_consumer_goes_on,
    a_message_naming_an_unknown_job_runs_the_others_and_dead_letters_it,
    operation_queues_run_payloads_without_job_rows,
    a_job_message_on_an_operations_queue_fails_its_job,
    oversized_and_invalid_messages_on_operation_and_write_queues_are_dead_lettered,
);
