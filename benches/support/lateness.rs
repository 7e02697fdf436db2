//! Lateness of jobs that run later (`BENCH_ONLY=lateness`): `BENCH_LATE_JOBS` pings (default
//! 10,000) submitted up front with `run_at` spread evenly over `BENCH_LATE_WINDOW` seconds
//! (default 60), starting a few seconds out; each job's start minus its `run_at`, as p50,
//! p99 and max, and how many started before their time (the target: none, and p99 ≤ 1 s).
//! On the embedded default (one process, submitting over `POST /jobs:batch`) and on
//! PostgreSQL + RabbitMQ (two worker processes that each run the dispatch sweep; this
//! process submits and never sends a waiting job itself).

use std::process::{Command, Stdio};

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter};
use serde_json::json;
use yardmaster::domain::NewJob;
use yardmaster::store::entity::job;
use yardmaster::Application;

use super::{
    bench_client, bench_settings, migrated, number_or, publisher, queue_prefix, release_binary, wait_for, Process,
    Scratch, Store, AMQP_URL, PINGS_SUCCEEDED,
};

/// Seconds from the start of submitting to the first job's time: room to submit them all.
const LEAD_SECONDS: f64 = 5.0;

/// One deployment's lateness.
pub struct Lateness {
    pub name: &'static str,
    pub jobs: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Jobs that started before their `run_at`.
    pub early: usize,
}

impl Lateness {
    pub fn print(&self) {
        println!(
            "lateness  {:<58} {:>6} jobs  p50 {:>7.1} ms  p99 {:>7.1} ms  max {:>7.1} ms  started early: {}",
            self.name, self.jobs, self.p50_ms, self.p99_ms, self.max_ms, self.early
        );
    }
}

/// Every case of the group.
pub async fn figures() -> Vec<Lateness> {
    let jobs = number_or("BENCH_LATE_JOBS", 10_000);
    let window = number_or("BENCH_LATE_WINDOW", 60) as f64;
    vec![embedded(jobs, window).await, rabbitmq(jobs, window).await]
}

/// The `run_at` of job `n` of `jobs`, spread evenly over `window` seconds after the lead.
fn times(jobs: usize, window: f64) -> Vec<DateTime<Utc>> {
    let first = Utc::now() + chrono::Duration::milliseconds((LEAD_SECONDS * 1000.0) as i64);
    let step = window / jobs as f64;
    (0..jobs).map(|n| first + chrono::Duration::microseconds((n as f64 * step * 1e6) as i64)).collect()
}

async fn embedded(jobs: usize, window: f64) -> Lateness {
    let scratch = Scratch::create(Store::Sqlite).await;
    let app = Application::builder(bench_settings(&scratch.url)).build().await.unwrap();
    let url = format!("http://127.0.0.1:{}/jobs:batch", app.port().unwrap());
    let db = app.db();
    actix_rt::spawn(app.run_until_stopped());
    let client = bench_client();
    for chunk in times(jobs, window).chunks(1000) {
        let items: Vec<_> = chunk.iter().map(|at| json!({ "operation": "ping", "run_at": at.to_rfc3339() })).collect();
        let response = client.post(&url).json(&json!({ "jobs": items })).send().await.unwrap();
        assert!(response.status().is_success(), "batch refused: {}", response.text().await.unwrap_or_default());
    }
    wait_for(&db, PINGS_SUCCEEDED, jobs as i64).await;
    let figure = measure("yardmaster embedded (SQLite, in process)", &db).await;
    scratch.remove().await;
    figure
}

async fn rabbitmq(jobs: usize, window: f64) -> Lateness {
    let scratch = Scratch::create(Store::Postgres).await;
    migrated(&scratch.url).await.close().await.ok();
    let prefix = queue_prefix();
    let workers: Vec<Process> = (0..2).map(|n| sweeping_worker(&scratch.url, &prefix, n)).collect();
    let publisher = publisher(&scratch.url, &prefix).await;
    for chunk in times(jobs, window).chunks(1000) {
        let batch = chunk.iter().map(|at| NewJob { run_after: Some(*at), ..NewJob::new("ping") }).collect();
        publisher.dispatcher.submit_many(batch).await.unwrap();
    }
    wait_for(&publisher.db, PINGS_SUCCEEDED, jobs as i64).await;
    let figure = measure("yardmaster: PostgreSQL + RabbitMQ, 2 worker processes", &publisher.db).await;
    drop(workers);
    publisher.db.close().await.ok();
    scratch.remove().await;
    figure
}

/// A worker process that also runs the dispatch sweep (the bench's other RabbitMQ workers
/// leave it to the publisher).
fn sweeping_worker(url: &str, prefix: &str, n: usize) -> Process {
    let child = Command::new(release_binary())
        .arg("worker")
        .env("YARDMASTER__STORE__URL", url)
        .env("YARDMASTER__TRANSPORT__KIND", "amqp")
        .env("YARDMASTER__TRANSPORT__AMQP__URL", AMQP_URL)
        .env("YARDMASTER__TRANSPORT__AMQP__QUEUE_PREFIX", prefix)
        .env("YARDMASTER__DISPATCH__ENABLED", "true")
        .env("YARDMASTER__WORKER__ID", format!("late-{n}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("the release binary is built");
    Process(child)
}

/// Start minus `run_at` of every ping, by the rows.
async fn measure(name: &'static str, db: &DatabaseConnection) -> Lateness {
    let rows = job::Entity::find().filter(job::Column::Operation.eq("ping")).all(db).await.unwrap();
    let mut late: Vec<f64> = rows
        .iter()
        .filter_map(|row| Some((row.started_at? - row.run_after?).num_microseconds()? as f64 / 1e3))
        .collect();
    late.sort_by(f64::total_cmp);
    let at = |q: f64| late[((late.len() as f64 * q) as usize).min(late.len() - 1)];
    Lateness {
        name,
        jobs: late.len(),
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: late.last().copied().unwrap_or_default(),
        early: late.iter().filter(|ms| **ms < 0.0).count(),
    }
}
