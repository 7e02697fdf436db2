//! A job that outlives the broker's `consumer_timeout` (30 minutes by default, shortened
//! here for channels opened during the test): its delivery is acknowledged once the run is
//! claimed and has gone on for `ack_running_after_ms`, so the broker never closes the
//! channel under it; the job has one run and one outcome, and no delivery starts it twice.

use std::process::Command;

use serde_json::json;

use crate::helpers::{Backend, TestApp, TestOptions};

/// The broker's consumer timeout and the tick that checks it, for channels opened while
/// this lives; the defaults come back when it is dropped (a failed test included).
struct ShortConsumerTimeout;

impl ShortConsumerTimeout {
    fn set(timeout_ms: u64, tick_ms: u64) -> Self {
        eval(&format!(
            "application:set_env(rabbit, consumer_timeout, {timeout_ms}), \
             application:set_env(rabbit, channel_tick_interval, {tick_ms})."
        ));
        ShortConsumerTimeout
    }
}

impl Drop for ShortConsumerTimeout {
    fn drop(&mut self) {
        eval(
            "application:set_env(rabbit, consumer_timeout, 1800000), \
              application:set_env(rabbit, channel_tick_interval, 60000).",
        );
    }
}

fn eval(expression: &str) {
    let output = Command::new("rabbitmqctl").args(["eval", expression]).output().expect("rabbitmqctl runs");
    assert!(output.status.success(), "rabbitmqctl eval: {}", String::from_utf8_lossy(&output.stderr));
}

#[actix_rt::test]
async fn a_run_longer_than_the_consumer_timeout_keeps_its_channel_and_runs_once_amqp() {
    let _short = ShortConsumerTimeout::set(1_000, 100);
    let options = TestOptions { ack_running_after_ms: Some(300), ..TestOptions::default() };
    let app = TestApp::spawn_with(Backend::Amqp, options).await;
    let (status, job) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 4, "steps": 4 } })).await;
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let ended = app.wait_for_status(id, "succeeded").await;
    assert_eq!(ended["attempts"], 1, "{ended}");
    let names = app.event_names(id).await;
    assert_eq!(names.iter().filter(|name| *name == "job.started").count(), 1, "{names:?}");
    assert!(!names.iter().any(|name| name.contains("requeue")), "{names:?}");
    // The channel was never closed under the run: the consumer never subscribed anew.
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let restarts: Vec<&str> =
        metrics.lines().filter(|line| line.starts_with("yardmaster_consumer_restarts_total")).collect();
    assert!(restarts.is_empty(), "{restarts:?}");
    // Another job runs on the same channel afterwards.
    let (_, next) = app.submit(json!({ "operation": "ping" })).await;
    app.wait_for_status(next["id"].as_str().unwrap(), "succeeded").await;
}
