//! Flow across real processes on PostgreSQL and RabbitMQ: an API process and three worker
//! processes. A pause reaches every worker (each gives its subscription back: the broker
//! sees no consumer of the queue) and no job starts after it; a resume starts them again.

use std::process::Command;
use std::time::Duration;

use sea_orm::Database;
use serde_json::json;

use crate::amqp_processes::{count, wait_for_count, Deployment};
use crate::helpers::{amqp_url, eventually, read, Backend, TestDatabase};

/// Consumers of this deployment's `queue` at the broker.
async fn consumers(deployment: &Deployment, queue: &str) -> Option<i64> {
    let name = format!("{}{queue}.prio", deployment.prefix);
    let vhost = amqp_url().rsplit('/').next().unwrap().replace("%2f", "/").replace("%2F", "/");
    let output = actix_rt::task::spawn_blocking(move || {
        let args = ["-q", "--no-table-headers", "list_queues", "-p", &vhost, "name", "consumers"];
        Command::new("rabbitmqctl").args(args).output().expect("rabbitmqctl runs")
    })
    .await
    .unwrap();
    let listing = String::from_utf8_lossy(&output.stdout).into_owned();
    let row = listing.lines().map(|line| line.split('\t').collect::<Vec<_>>()).find(|row| row[0] == name)?;
    row[1].trim().parse().ok()
}

#[actix_rt::test]
async fn amqp_a_pause_reaches_every_worker_process_and_no_job_starts_after_it() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    let deployment = Deployment::new(&url);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bind = format!("127.0.0.1:{port}");
    let _api = deployment.spawn(&["serve", "--no-workers"], &[("YARDMASTER__SERVER__BIND", &bind)]);
    let base = format!("http://{bind}");
    let client = deployment.client();
    eventually("the API to answer", Duration::from_secs(60), || async {
        client.get(format!("{base}/healthz")).send().await.ok().filter(|r| r.status().is_success())
    })
    .await;
    let _workers: Vec<_> = ["first", "second", "third"]
        .into_iter()
        .map(|id| deployment.spawn(&["worker", "--queue", "default"], &[("YARDMASTER__WORKER__ID", id)]))
        .collect();
    eventually("three consumers", Duration::from_secs(60), || async {
        (consumers(&deployment, "default").await == Some(3)).then_some(())
    })
    .await;
    let jobs: Vec<_> =
        (0..400).map(|_| json!({ "operation": "sleep", "payload": { "seconds": 0.05, "steps": 1 } })).collect();
    let (status, _) =
        read(client.post(format!("{base}/jobs:batch")).json(&json!({ "jobs": jobs })).send().await.unwrap()).await;
    assert_eq!(status, 201);
    let db = Database::connect(&url).await.unwrap();
    eventually("jobs to run", Duration::from_secs(60), || async {
        (count(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'").await >= 20).then_some(())
    })
    .await;

    let (status, paused) = read(client.post(format!("{base}/admin/queues/default/pause")).send().await.unwrap()).await;
    assert_eq!((status, paused["state"].as_str()), (200, Some("paused")), "{paused}");
    // Every worker process heard of it and gave its subscription back.
    eventually("no consumer of the paused queue", Duration::from_secs(10), || async {
        (consumers(&deployment, "default").await == Some(0)).then_some(())
    })
    .await;
    wait_for_count(&db, "SELECT COUNT(*) FROM job WHERE status = 'running'", 0, Duration::from_secs(30)).await;
    // A claim already under way as the pause commits may still start (its time stamped a few
    // milliseconds on, by its own process's clock): none may start a second after.
    let late = "SELECT COUNT(*) FROM job_event e JOIN job j ON j.id = e.job_id JOIN queue_state q ON q.name = j.queue \
                WHERE e.event = 'job.started' AND e.ts > q.paused_at + INTERVAL '1 second'";
    assert_eq!(count(&db, late).await, 0, "a job started over a second after its queue was paused");
    let waiting = count(&db, "SELECT COUNT(*) FROM job WHERE status = 'queued'").await;
    assert!(waiting > 0, "the pause came after every job started: nothing shows it held");

    let (status, _) = read(client.post(format!("{base}/admin/queues/default/resume")).send().await.unwrap()).await;
    assert_eq!(status, 200);
    eventually("three consumers again", Duration::from_secs(10), || async {
        (consumers(&deployment, "default").await == Some(3)).then_some(())
    })
    .await;
    wait_for_count(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'", 400, Duration::from_secs(120)).await;
}
