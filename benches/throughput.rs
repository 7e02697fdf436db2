//! `cargo bench --bench throughput`: end-to-end no-op job throughput of yardmaster next to a
//! peer (graphile-worker, from npm, on the same PostgreSQL) and a plain-SQL claim/complete
//! queue (the machine's limit), all measured in this one run, printed with ratios.
//!
//! `BENCH_JOBS` sets the number of jobs per case (default 5000). Needs the local PostgreSQL
//! and RabbitMQ (`scripts/bench.sh` starts them and installs the peer).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::{json, Value};
use uuid::Uuid;
use yardmaster::config::{QueueSettings, TransportKind};
use yardmaster::dispatch::Dispatcher;
use yardmaster::domain::NewJob;
use yardmaster::store::{JobStore, SeaStore};
use yardmaster::transport::AmqpTransport;
use yardmaster::{Application, Settings};

const POSTGRES_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/test";
/// A virtual host `scripts/bench.sh` recreates empty on each run.
const AMQP_URL: &str = "amqp://127.0.0.1:5672/yardmaster_bench";
/// Jobs each worker process (and the in-process app) runs at once.
const CONCURRENCY: usize = 8;

fn main() {
    let jobs = std::env::var("BENCH_JOBS").ok().and_then(|n| n.parse().ok()).unwrap_or(5_000);
    actix_rt::System::new().block_on(run(jobs));
}

/// One measured case.
struct Figure {
    name: String,
    per_second: f64,
    note: String,
}

async fn run(jobs: usize) {
    println!("yardmaster throughput benchmark: {jobs} no-op jobs per case, {} cores", num_cores());
    let mut figures = Vec::new();
    figures.push(plain_sql(jobs, 1).await);
    figures.push(plain_sql(jobs, 100).await);
    let peer_single = graphile(jobs, "single").await;
    let peer_batched = graphile(jobs, "batched").await;
    figures.extend([peer_single, peer_batched].into_iter().flatten());
    for group_commit in [1, 64] {
        // Explicit sizes here; the default (0) picks 64 on SQLite and 1 on PostgreSQL.
        figures.push(in_process(jobs, Store::Sqlite, group_commit).await);
        figures.push(in_process(jobs, Store::Postgres, group_commit).await);
    }
    figures.push(with_rabbitmq(jobs, 1).await);
    figures.push(with_rabbitmq(jobs, 2).await);
    figures.push(http_submit(jobs).await);

    let peer = figures.iter().find(|figure| figure.name.starts_with("graphile-worker batched")).map(|f| f.per_second);
    println!();
    for figure in &figures {
        let ratio = peer.map(|peer| format!("{:>6.2}×", figure.per_second / peer)).unwrap_or_default();
        println!("{:<58} {:>10.0} /s  {ratio}  {}", figure.name, figure.per_second, figure.note);
    }
    println!("(ratios: against graphile-worker batched in this run)");
}

fn num_cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// A PostgreSQL database for one case, dropped afterwards.
struct FreshDatabase {
    name: String,
    url: String,
}

impl FreshDatabase {
    async fn create() -> FreshDatabase {
        let name = format!("yardmaster_bench_{}", Uuid::new_v4().simple());
        execute(POSTGRES_ADMIN, &format!("CREATE DATABASE \"{name}\"")).await;
        let base = POSTGRES_ADMIN.rsplit_once('/').map_or(POSTGRES_ADMIN, |(base, _)| base);
        FreshDatabase { url: format!("{base}/{name}"), name }
    }

    async fn drop_now(self) {
        execute(POSTGRES_ADMIN, &format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name)).await;
    }
}

async fn execute(url: &str, sql: &str) {
    let db = Database::connect(url).await.expect("PostgreSQL must be running");
    db.execute_unprepared(sql).await.expect(sql);
    db.close().await.ok();
}

async fn count(db: &DatabaseConnection, sql: &str) -> i64 {
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await.unwrap().unwrap();
    row.try_get_by_index::<i64>(0).unwrap()
}

/// Polls until `sql` reaches `expected`; returns when it did.
async fn wait_for(db: &DatabaseConnection, sql: &str, expected: i64) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(600);
    while count(db, sql).await < expected {
        assert!(Instant::now() < deadline, "{sql} never reached {expected}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Instant::now()
}

/// The machine's limit: a claim/complete queue in plain SQL, `batch` jobs per transaction,
/// eight connections, two commits per batch.
async fn plain_sql(jobs: usize, batch: usize) -> Figure {
    let database = FreshDatabase::create().await;
    let db = Database::connect(&database.url).await.unwrap();
    db.execute_unprepared(
        "CREATE TABLE q (id bigserial PRIMARY KEY, state text NOT NULL, payload jsonb NOT NULL DEFAULT '{}');
         CREATE INDEX q_runnable ON q (id) WHERE state = 'queued';",
    )
    .await
    .unwrap();
    db.execute_unprepared(&format!("INSERT INTO q (state) SELECT 'queued' FROM generate_series(1, {jobs})"))
        .await
        .unwrap();
    let claim = format!(
        "UPDATE q SET state = 'running' WHERE id IN \
         (SELECT id FROM q WHERE state = 'queued' ORDER BY id LIMIT {batch} FOR UPDATE SKIP LOCKED) RETURNING id"
    );
    let start = Instant::now();
    let workers = (0..CONCURRENCY).map(|_| {
        let (db, claim) = (db.clone(), claim.clone());
        async move {
            loop {
                let backend = db.get_database_backend();
                let rows = db.query_all_raw(Statement::from_string(backend, claim.clone())).await.unwrap();
                if rows.is_empty() {
                    return;
                }
                let ids: Vec<String> =
                    rows.iter().map(|row| row.try_get_by_index::<i64>(0).unwrap().to_string()).collect();
                let complete = format!("UPDATE q SET state = 'done' WHERE id IN ({})", ids.join(","));
                db.execute_unprepared(&complete).await.unwrap();
            }
        }
    });
    join_all(workers).await;
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM q WHERE state = 'done'").await, jobs as i64);
    db.close().await.ok();
    database.drop_now().await;
    Figure {
        name: format!("baseline: plain SQL queue, {batch} per transaction"),
        per_second: jobs as f64 / seconds,
        note: "PostgreSQL, 8 connections, no events".into(),
    }
}

/// graphile-worker through node; `None` (with a note) when node or the package is missing.
async fn graphile(jobs: usize, mode: &'static str) -> Option<Figure> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/graphile/run.mjs");
    if !script.with_file_name("node_modules").exists() {
        println!("graphile-worker not installed: run `npm install` in bench/graphile (scripts/bench.sh does)");
        return None;
    }
    let database = FreshDatabase::create().await;
    let url = database.url.clone();
    let output = actix_rt::task::spawn_blocking(move || {
        Command::new("node").arg(&script).args([url.as_str(), &jobs.to_string(), mode]).output()
    })
    .await
    .unwrap()
    .expect("node runs");
    database.drop_now().await;
    assert!(output.status.success(), "graphile-worker failed: {}", String::from_utf8_lossy(&output.stderr));
    let line = String::from_utf8_lossy(&output.stdout);
    let figures: Value = serde_json::from_str(line.trim().lines().last().unwrap_or("{}")).unwrap();
    let note = match mode {
        "batched" => "local queue 500, batched completion",
        _ => "one job per fetch and completion",
    };
    Some(Figure {
        name: format!("graphile-worker {mode} (concurrency 8)"),
        per_second: figures["jobs_per_second"].as_f64().unwrap_or(0.0),
        note: note.into(),
    })
}

#[derive(Clone, Copy)]
enum Store {
    Sqlite,
    Postgres,
}

/// Inserts `jobs` QUEUED ping jobs (16 writers), unpublished: the start-up dispatch sends them.
async fn seed(url: &str, jobs: usize) {
    let mut settings = Settings::default();
    settings.store.url = url.to_owned();
    let db = yardmaster::store::connect(&settings.store).await.unwrap();
    yardmaster::store::migrate(&db).await.unwrap();
    let store = Arc::new(SeaStore::new(db.clone()));
    let writers = (0..16).map(|writer| {
        let store = store.clone();
        async move {
            for _ in (writer..jobs).step_by(16) {
                store.submit(NewJob::new("ping")).await.unwrap();
            }
        }
    });
    join_all(writers).await;
    db.close().await.ok();
}

fn bench_settings(url: &str) -> Settings {
    let mut settings = Settings::default();
    settings.store.url = url.to_owned();
    settings.store.max_connections = 16;
    settings.server.bind = "127.0.0.1:0".into();
    settings.worker.id = "bench".into();
    let queue = QueueSettings { concurrency: CONCURRENCY, prefetch: 2 * CONCURRENCY as u16, ..Default::default() };
    settings.queues = [("default".to_owned(), queue)].into();
    settings
}

/// One process, in-process transport: QUEUED → SUCCEEDED with every transition and event
/// committed, from start-up to the last job.
async fn in_process(jobs: usize, store: Store, group_commit: usize) -> Figure {
    let sqlite_dir = std::env::temp_dir().join(format!("yardmaster-bench-{}", Uuid::new_v4().simple()));
    let (url, database) = match store {
        Store::Sqlite => {
            std::fs::create_dir_all(&sqlite_dir).unwrap();
            (format!("sqlite://{}?mode=rwc", sqlite_dir.join("bench.db").display()), None)
        }
        Store::Postgres => {
            let database = FreshDatabase::create().await;
            (database.url.clone(), Some(database))
        }
    };
    seed(&url, jobs).await;
    let start = Instant::now();
    let mut settings = bench_settings(&url);
    settings.store.group_commit_max = group_commit;
    let app = Application::builder(settings).without_api().build().await.unwrap();
    let done = wait_for(&app.db(), "SELECT COUNT(*) FROM job WHERE status = 'succeeded'", jobs as i64).await;
    let seconds = done.duration_since(start).as_secs_f64();
    drop(app);
    if let Some(database) = database {
        database.drop_now().await;
    }
    let _ = std::fs::remove_dir_all(&sqlite_dir);
    let name = match store {
        Store::Sqlite => "yardmaster embedded: SQLite, in-process transport",
        Store::Postgres => "yardmaster one process: PostgreSQL, in-process transport",
    };
    let note = format!("group commit ≤ {group_commit}; claim + outcome + 2 events durable");
    Figure { name: name.into(), per_second: jobs as f64 / seconds, note }
}

/// A `yardmaster worker` process, killed when dropped.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn release_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_yardmaster"))
}

/// PostgreSQL + RabbitMQ, `workers` worker processes; this process publishes every job.
async fn with_rabbitmq(jobs: usize, workers: usize) -> Figure {
    let database = FreshDatabase::create().await;
    seed(&database.url, jobs).await;
    let prefix = format!("bench{}.", &Uuid::new_v4().simple().to_string()[..8]);
    let processes: Vec<Worker> = (0..workers)
        .map(|n| {
            let child = Command::new(release_binary())
                .args(["worker", "--queue", "default"])
                .env("YARDMASTER__STORE__URL", &database.url)
                .env("YARDMASTER__STORE__MAX_CONNECTIONS", "16")
                .env("YARDMASTER__TRANSPORT__KIND", "amqp")
                .env("YARDMASTER__TRANSPORT__AMQP__URL", AMQP_URL)
                .env("YARDMASTER__TRANSPORT__AMQP__QUEUE_PREFIX", &prefix)
                .env("YARDMASTER__DISPATCH__ENABLED", "false")
                .env("YARDMASTER__QUEUES__DEFAULT__CONCURRENCY", CONCURRENCY.to_string())
                .env("YARDMASTER__QUEUES__DEFAULT__PREFETCH", (2 * CONCURRENCY).to_string())
                .env("YARDMASTER__WORKER__ID", format!("bench-{n}"))
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .spawn()
                .expect("the release binary is built");
            Worker(child)
        })
        .collect();
    let mut settings = bench_settings(&database.url);
    settings.transport.kind = TransportKind::Amqp;
    settings.transport.amqp.queue_prefix = prefix;
    settings.transport.amqp.url = AMQP_URL.into();
    let db = yardmaster::store::connect(&settings.store).await.unwrap();
    let store: Arc<dyn JobStore> = Arc::new(SeaStore::new(db.clone()));
    let transport = Arc::new(AmqpTransport::new(settings.transport.amqp.clone()).unwrap());
    let dispatcher = Dispatcher::new(store, transport);

    let start = Instant::now();
    let mut sent = 0;
    while sent < jobs as u64 {
        sent += dispatcher.sweep_once(Duration::ZERO, 1000).await.unwrap();
    }
    let done = wait_for(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'", jobs as i64).await;
    let seconds = done.duration_since(start).as_secs_f64();
    drop(processes);
    db.close().await.ok();
    database.drop_now().await;
    Figure {
        name: format!("yardmaster: PostgreSQL + RabbitMQ, {workers} worker process(es)"),
        per_second: jobs as f64 / seconds,
        note: "publish (confirmed) + claim + outcome + 2 events".into(),
    }
}

/// `POST /jobs` against the embedded default (SQLite), 32 clients, workers off.
async fn http_submit(jobs: usize) -> Figure {
    let dir = std::env::temp_dir().join(format!("yardmaster-bench-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut settings = bench_settings(&format!("sqlite://{}?mode=rwc", dir.join("bench.db").display()));
    settings.worker.enabled = false;
    let app = Application::builder(settings).build().await.unwrap();
    let url = format!("http://127.0.0.1:{}/jobs", app.port().unwrap());
    actix_rt::spawn(app.run_until_stopped());
    let client = reqwest::Client::new();
    let start = Instant::now();
    let clients = (0..32).map(|client_no| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let mut latencies = Vec::new();
            for _ in (client_no..jobs).step_by(32) {
                let sent = Instant::now();
                let response = client.post(&url).json(&json!({ "operation": "ping" })).send().await.unwrap();
                assert_eq!(response.status().as_u16(), 201);
                latencies.push(sent.elapsed());
            }
            latencies
        }
    });
    let mut latencies: Vec<Duration> = join_all(clients).await.into_iter().flatten().collect();
    let seconds = start.elapsed().as_secs_f64();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    let _ = std::fs::remove_dir_all(&dir);
    Figure {
        name: "yardmaster HTTP POST /jobs: embedded, 32 connections".into(),
        per_second: jobs as f64 / seconds,
        note: format!("p50 {:.1} ms, p99 {:.1} ms", at(0.5).as_secs_f64() * 1e3, at(0.99).as_secs_f64() * 1e3),
    }
}
