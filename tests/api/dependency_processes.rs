//! A 1,000-node DAG across real processes, with a process killed -9 in the middle: on
//! PostgreSQL + RabbitMQ (an API process and three workers, one killed) and on the
//! embedded default (one process on SQLite, killed and started again). Every node ends
//! once, as its dependencies say: each started after every dependency succeeded, a node
//! whose operation fails fails, and exactly the descendants of failed nodes are cancelled.

use std::collections::BTreeMap;
use std::time::Duration;

use sea_orm::{Database, DatabaseConnection};
use serde_json::{json, Value};

use crate::amqp_processes::{count, wait_for_count, with_fast, Deployment, Process};
use crate::dependencies::random_dag;
use crate::helpers::{eventually, read, Backend, TestDatabase};

const NODES: usize = 1000;

/// Node `at` fails when its number says so (about one in 60).
fn fails(at: usize) -> bool {
    at % 61 == 17
}

fn node(at: usize) -> Value {
    match fails(at) {
        true => json!({ "operation": "fail", "payload": { "error_class": "Boom" } }),
        false => json!({ "operation": "sleep", "payload": { "seconds": 0.01, "steps": 1 } }),
    }
}

/// Starts an API (and maybe worker) process and waits for it to answer.
async fn answering(client: &reqwest::Client, base: &str) {
    eventually("the API to answer", Duration::from_secs(60), || async {
        client.get(format!("{base}/healthz")).send().await.ok().filter(|r| r.status().is_success())
    })
    .await;
}

/// Submits the DAG, calls `kill` once 300 nodes have ended, and checks how every node ended.
async fn run_dag(client: &reqwest::Client, base: &str, db: &DatabaseConnection, kill: impl AsyncFnOnce()) {
    let (items, edges) = random_dag(NODES, 29, node);
    let (status, answer) =
        read(client.post(format!("{base}/jobs:batch")).json(&json!({ "jobs": items })).send().await.unwrap()).await;
    assert_eq!(status, 201, "{answer}");
    let ids: Vec<String> =
        answer["jobs"].as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap().to_owned()).collect();
    let ended = "SELECT COUNT(*) FROM job WHERE status IN ('succeeded', 'failed', 'cancelled')";
    eventually("300 nodes to end", Duration::from_secs(120), || async {
        (count(db, ended).await >= 300).then_some(())
    })
    .await;
    kill().await;
    wait_for_count(db, ended, NODES as i64, Duration::from_secs(240)).await;

    // What each node must have become, in order (an edge goes to an earlier node).
    let mut expected: Vec<&str> = Vec::with_capacity(NODES);
    let mut on: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (at, earlier) in &edges {
        on.entry(*at).or_default().push(*earlier);
    }
    for at in 0..NODES {
        let broken = on.get(&at).is_some_and(|earlier| earlier.iter().any(|e| expected[*e] != "succeeded"));
        expected.push(match (broken, fails(at)) {
            (true, _) => "cancelled",
            (false, true) => "failed",
            (false, false) => "succeeded",
        });
    }
    let cancelled = expected.iter().filter(|status| **status == "cancelled").count();
    assert!(cancelled > 20 && cancelled < NODES / 2, "the DAG cancels {cancelled}: pick another seed");
    for (at, id) in ids.iter().enumerate() {
        let (status, job) = read(client.get(format!("{base}/jobs/{id}")).send().await.unwrap()).await;
        assert_eq!((status, job["status"].as_str()), (200, Some(expected[at])), "node {at}: {job}");
    }
    // Ended once; started only after every dependency succeeded; a cancelled node never started.
    let twice = "SELECT COUNT(*) FROM (SELECT job_id FROM job_event WHERE event IN \
                 ('job.succeeded', 'job.failed', 'job.cancelled', 'job.dependency_failed') \
                 GROUP BY job_id HAVING COUNT(*) > 1) t";
    assert_eq!(count(db, twice).await, 0, "a node ended twice");
    let early = "SELECT COUNT(*) FROM job_dependency e JOIN job d ON d.id = e.dependency_id \
                 JOIN job_event s ON s.job_id = e.job_id AND s.event = 'job.started' \
                 WHERE d.status <> 'succeeded' OR s.ts < d.finished_at";
    assert_eq!(count(db, early).await, 0, "a node started before a dependency succeeded");
    assert_eq!(count(db, "SELECT COUNT(*) FROM job WHERE waiting_since IS NOT NULL").await, 0);
}

#[actix_rt::test]
async fn amqp_a_dag_survives_a_worker_killed_mid_graph() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    let deployment = Deployment::new(&url);
    let bind = format!("127.0.0.1:{}", crate::amqp_processes::free_port());
    let _api = deployment.spawn(&["serve", "--no-workers"], &with_fast(&[("YARDMASTER__SERVER__BIND", &bind)]));
    let base = format!("http://{bind}");
    let client = deployment.client();
    answering(&client, &base).await;
    let mut workers: Vec<Process> = ["first", "second", "third"]
        .into_iter()
        .map(|id| deployment.spawn(&["worker", "--queue", "default"], &with_fast(&[("YARDMASTER__WORKER__ID", id)])))
        .collect();
    let db = Database::connect(&url).await.unwrap();
    let mut first = workers.remove(0);
    run_dag(&client, &base, &db, async || {
        first.0.kill().unwrap();
        first.0.wait().unwrap();
    })
    .await;
}

#[actix_rt::test]
async fn a_dag_survives_the_embedded_process_killed_mid_graph() {
    let (_database, url) = TestDatabase::create(Backend::Sqlite).await;
    let deployment = Deployment::new(&url);
    let bind = format!("127.0.0.1:{}", crate::amqp_processes::free_port());
    let env = with_fast(&[("YARDMASTER__SERVER__BIND", &bind), ("YARDMASTER__TRANSPORT__KIND", "in_process")]);
    let mut first = deployment.spawn(&["serve"], &env);
    let base = format!("http://{bind}");
    let client = deployment.client();
    answering(&client, &base).await;
    let db = Database::connect(&url).await.unwrap();
    let mut second = None;
    run_dag(&client, &base, &db, async || {
        first.0.kill().unwrap();
        first.0.wait().unwrap();
        second = Some(deployment.spawn(&["serve"], &env));
        answering(&client, &base).await;
    })
    .await;
}
