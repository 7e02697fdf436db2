//! Test harness: a fresh database per test, the app on port 0, and waits on rows (never sleeps
//! as synchronisation).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::Value;
use uuid::Uuid;
use yardmaster::config::{QueueKind, QueueSettings, TransportKind};
use yardmaster::ops::OperationRegistry;
use yardmaster::store::{JobCommands, JobStore};

use crate::custom_operation::{Count, FanCount};
use crate::test_ops::{Flaky, FlakyBatch, FlakyFan, Gather, Stubborn};
use yardmaster::transport::{AmqpTransport, InProcessTransport, Transport};
use yardmaster::{Application, Settings};

/// Where the test PostgreSQL server is; each test creates (and drops) its own database there.
pub const POSTGRES_ADMIN_URL_ENV: &str = "YARDMASTER_TEST_POSTGRES_URL";
const POSTGRES_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Generates one `#[actix_rt::test]` per store (SQLite, PostgreSQL; in-process transport)
/// for each named `async fn(Backend)`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $( #[actix_rt::test] async fn $name() { super::$name($crate::helpers::Backend::Sqlite).await } )*
        }
        mod postgres {
            $( #[actix_rt::test] async fn $name() { super::$name($crate::helpers::Backend::Postgres).await } )*
        }
    };
}

/// As `on_both_backends!`, plus PostgreSQL with RabbitMQ. Tests whose path contains `amqp`
/// run one at a time (`.config/nextest.toml`), since one of them restarts the broker.
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        on_both_backends!($($name),*);
        mod amqp {
            $( #[actix_rt::test] async fn $name() { super::$name($crate::helpers::Backend::Amqp).await } )*
        }
    };
}

/// Where a test's app keeps its jobs and sends its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite file, in-process transport: the embedded default.
    Sqlite,
    /// PostgreSQL, in-process transport.
    Postgres,
    /// PostgreSQL and RabbitMQ: production.
    Amqp,
    /// PostgreSQL with the `vector` extension (a server of its own, started by
    /// `scripts/pgvector.sh`), in-process transport: for the pgvector index.
    Pgvector,
}

/// Where the test PostgreSQL server with pgvector is (`scripts/pgvector.sh` starts it).
pub const PGVECTOR_ADMIN_URL_ENV: &str = "YARDMASTER_TEST_PGVECTOR_URL";
const PGVECTOR_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5439/postgres";

/// The RabbitMQ virtual host tests use; `scripts/test.sh` recreates it empty on each run.
pub const AMQP_URL_ENV: &str = "YARDMASTER_TEST_AMQP_URL";
const AMQP_URL: &str = "amqp://127.0.0.1:5672/yardmaster_test";

pub fn amqp_url() -> String {
    std::env::var(AMQP_URL_ENV).unwrap_or_else(|_| AMQP_URL.into())
}

/// A database that exists for one test and is removed afterwards.
pub enum TestDatabase {
    Sqlite {
        path: PathBuf,
    },
    Postgres {
        admin_url: String,
        name: String,
    },
    /// Another app's, removed with it.
    Borrowed,
}

impl TestDatabase {
    pub async fn create(backend: Backend) -> (TestDatabase, String) {
        let id = Uuid::new_v4().simple().to_string();
        match backend {
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("yardmaster-test-{id}.db"));
                let url = format!("sqlite://{}?mode=rwc", path.display());
                (TestDatabase::Sqlite { path }, url)
            }
            Backend::Postgres | Backend::Amqp | Backend::Pgvector => {
                let admin_url = match backend {
                    Backend::Pgvector => {
                        std::env::var(PGVECTOR_ADMIN_URL_ENV).unwrap_or_else(|_| PGVECTOR_ADMIN_URL.into())
                    }
                    _ => std::env::var(POSTGRES_ADMIN_URL_ENV).unwrap_or_else(|_| POSTGRES_ADMIN_URL.into()),
                };
                let name = format!("yardmaster_test_{id}");
                let admin = Database::connect(&admin_url).await.unwrap_or_else(|err| {
                    panic!("PostgreSQL must be running for tests at {admin_url} (scripts/test.sh starts it): {err}")
                });
                admin.execute_unprepared(&format!("CREATE DATABASE \"{name}\"")).await.expect("create database");
                admin.close().await.ok();
                let base = admin_url.rsplit_once('/').map(|(base, _)| base).unwrap_or(&admin_url);
                let url = format!("{base}/{name}");
                (TestDatabase::Postgres { admin_url, name }, url)
            }
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        match self {
            TestDatabase::Sqlite { path } => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            TestDatabase::Postgres { admin_url, name } => {
                let (admin_url, name) = (admin_url.clone(), name.clone());
                // The test's runtime is ending; drop on a runtime of our own.
                let dropper = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                    runtime.block_on(async {
                        if let Ok(admin) = Database::connect(&admin_url).await {
                            let _ = admin
                                .execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                                .await;
                        }
                    });
                });
                let _ = dropper.join();
            }
            TestDatabase::Borrowed => {}
        }
    }
}

/// `server.body_timeout_seconds` of every test app.
pub const BODY_TIMEOUT_SECONDS: u64 = 2;

/// `worker.lease_ms` of every test app.
pub const LEASE_MS: u64 = 3_000;

/// Jobs with a run no lease's lapse explains: every attempt has its `job.started`, and every
/// attempt after the first follows a `job.lease_expired_requeue`. Tests that kill a worker
/// under a short lease count these (0), not the attempts: on a loaded machine a lease can
/// also lapse before the kill, a re-run the log explains.
pub const UNEXPLAINED_RUNS: &str = "SELECT COUNT(*) FROM job j WHERE j.attempts <> \
    (SELECT COUNT(*) FROM job_event e WHERE e.job_id = j.id AND e.event = 'job.started') \
    OR j.attempts <> 1 + \
    (SELECT COUNT(*) FROM job_event e WHERE e.job_id = j.id AND e.event = 'job.lease_expired_requeue')";

/// A job queue every test app knows and none consumes.
pub const PARKED: &str = "parked";

/// How to start the app under test.
pub struct TestOptions {
    pub workers: bool,
    /// (queue, concurrency) pairs consumed by this instance, as job queues.
    pub queues: Vec<(&'static str, usize)>,
    /// Queues consumed as operation (ephemeral batch) queues.
    pub operation_queues: Vec<&'static str>,
    /// Queues consumed as write queues (batch outcomes).
    pub write_queues: Vec<&'static str>,
    pub max_body_bytes: usize,
    /// Asked by the store before every call and after every commit (fault injection).
    pub hook: Option<Arc<dyn yardmaster::store::Hook>>,
    /// QUEUED `count` jobs inserted before the app (and its start-up dispatch) starts.
    pub seed_jobs: usize,
    /// `store.group_commit_max`: the default, 64, unless a test sets another.
    pub group_commit_max: usize,
    /// `server.max_connections_per_client`.
    pub max_connections_per_client: usize,
    /// Start the shutdown guard, which owns SIGTERM and SIGINT (`worker.grace_seconds` 1):
    /// a signal to the test's own process then drains and stops the app.
    pub handle_signals: bool,
    /// `ids_per_message` of every job queue in `queues`.
    pub ids_per_message: usize,
    /// `batches_per_message` of every queue in `operation_queues`.
    pub batches_per_message: usize,
    /// `[inference]`: the defaults (a model file that does not exist) unless a test sets it.
    pub inference: Option<yardmaster::config::InferenceSettings>,
    /// `server.max_wait_seconds`: the cap on `Prefer: wait`.
    pub max_wait_seconds: u64,
    /// `[remote]`: the defaults unless a test sets it.
    pub remote: Option<yardmaster::config::RemoteSettings>,
    /// `[uploads]`: the defaults unless a test sets it; its `dir` is always the test's own.
    pub uploads: Option<yardmaster::config::UploadSettings>,
    /// `worker.heartbeat_ms` and `worker.lease_ms`.
    pub heartbeat_ms: u64,
    pub lease_ms: u64,
    /// Another process on `app`'s store and upload directory, with a store (and notifier)
    /// of its own: what it learns of `app`'s writes, it learns as another process would.
    pub beside: Option<(String, std::path::PathBuf)>,
    /// `transport.amqp.ack_running_after_ms`: the default unless a test sets it.
    pub ack_running_after_ms: Option<u64>,
    /// Whether the dispatch sweep runs; off, only a submission's own publish sends its job.
    pub dispatch_sweep: bool,
    /// `dispatch.interval_ms`: 100 unless a test sets it.
    pub dispatch_interval_ms: u64,
    /// `[jobs]`: the defaults unless a test sets it.
    pub jobs: Option<yardmaster::config::JobsSettings>,
    /// Whether the reaper runs (every `reaper_interval_ms`, `timeout_grace_ms` 200).
    pub reaper: bool,
    /// `reaper.interval_ms`, also the safety nets' (limits, dependencies): 200 unless a
    /// test sets it.
    pub reaper_interval_ms: u64,
    /// Whether the scheduler runs.
    pub scheduler: bool,
    /// `[schedules.NAME]`: none unless a test declares some.
    pub schedules: std::collections::BTreeMap<String, yardmaster::config::DeclaredSchedule>,
}

impl TestOptions {
    /// Coordinators can fan out: a jobs queue, the batch queue and the batch-write queue.
    pub fn fan_out() -> TestOptions {
        TestOptions {
            queues: vec![("default", 2)],
            operation_queues: vec!["batches"],
            write_queues: vec!["batch_writes"],
            ..Default::default()
        }
    }
}

impl Default for TestOptions {
    fn default() -> Self {
        TestOptions {
            workers: true,
            queues: vec![("default", 2)],
            operation_queues: Vec::new(),
            write_queues: Vec::new(),
            max_body_bytes: 64 * 1024,
            hook: None,
            seed_jobs: 0,
            group_commit_max: 64,
            max_connections_per_client: 256,
            handle_signals: false,
            ids_per_message: 1,
            batches_per_message: 1,
            inference: None,
            max_wait_seconds: 60,
            remote: None,
            uploads: None,
            heartbeat_ms: 300,
            lease_ms: LEASE_MS,
            beside: None,
            ack_running_after_ms: None,
            dispatch_sweep: true,
            dispatch_interval_ms: 100,
            reaper_interval_ms: 200,
            jobs: None,
            reaper: true,
            scheduler: true,
            schedules: Default::default(),
        }
    }
}

pub struct TestApp {
    pub address: String,
    /// Sends the admin token with every request.
    pub client: reqwest::Client,
    /// The app's admin token (its bootstrap token).
    pub admin_token: String,
    pub db: DatabaseConnection,
    pub store: Arc<dyn JobStore>,
    pub transport: Arc<dyn Transport>,
    pub seeded: Vec<Uuid>,
    /// The app's run: with `handle_signals`, resolves with the exit code once it drained.
    pub stopped: actix_rt::task::JoinHandle<std::io::Result<i32>>,
    /// The app's `uploads.dir`, removed with it.
    pub uploads: ScratchDir,
    /// The store's URL (for another app beside this one).
    pub store_url: String,
    _database: TestDatabase,
}

/// A directory of the test's own under the system's temporary directory, removed on drop.
pub struct ScratchDir(pub std::path::PathBuf);

impl ScratchDir {
    pub fn new(what: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!("yardmaster-{what}-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> TestApp {
        Self::spawn_with(backend, TestOptions::default()).await
    }

    pub async fn spawn_with(backend: Backend, options: TestOptions) -> TestApp {
        // Warnings only (RUST_LOG still wins): a failing test's panic is then near the top of
        // its output, where CI's excerpt of it shows it, not under a thousand lines of jobs.
        let quiet = yardmaster::config::LogSettings { filter: "warn".into(), ..Default::default() };
        yardmaster::telemetry::init_with(&quiet);
        let (database, url) = match options.beside.clone() {
            Some((url, _)) => (TestDatabase::Borrowed, url),
            None => TestDatabase::create(backend).await,
        };
        let mut settings = Settings::default();
        settings.server.bind = "127.0.0.1:0".into();
        settings.server.http_workers = 1;
        settings.server.max_body_bytes = options.max_body_bytes;
        settings.server.body_timeout_seconds = BODY_TIMEOUT_SECONDS;
        settings.server.max_connections_per_client = options.max_connections_per_client;
        settings.server.max_wait_seconds = options.max_wait_seconds;
        settings.store.url = url;
        settings.store.max_connections = 16;
        settings.store.group_commit_max = options.group_commit_max;
        settings.worker.enabled = options.workers;
        settings.worker.id = "test-worker".into();
        settings.worker.lease_ms = options.lease_ms;
        settings.worker.heartbeat_ms = options.heartbeat_ms;
        settings.reaper.interval_ms = options.reaper_interval_ms;
        settings.reaper.timeout_grace_ms = 200;
        settings.reaper.enabled = options.reaper;
        if let Some(jobs) = options.jobs.clone() {
            settings.jobs = jobs;
        }
        settings.dispatch.interval_ms = options.dispatch_interval_ms;
        settings.dispatch.grace_ms = 500;
        settings.worker.grace_seconds = 1;
        let admin_token = new_token();
        settings.auth.bootstrap_token = Some(yardmaster::config::Secret::new(admin_token.clone()));
        if let Some(remote) = options.remote {
            settings.remote = remote;
        }
        if let Some(inference) = options.inference {
            settings.inference = inference;
        }
        if let Some(uploads) = options.uploads {
            settings.uploads = uploads;
        }
        settings.dispatch.enabled = options.dispatch_sweep;
        settings.scheduler.enabled = options.scheduler;
        settings.schedules = options.schedules.clone();
        // Tests run the cleaner's passes themselves.
        settings.retention.enabled = false;
        let uploads = ScratchDir::new("uploads");
        settings.uploads.dir = match &options.beside {
            Some((_, dir)) => dir.display().to_string(),
            None => uploads.0.display().to_string(),
        };
        if backend == Backend::Amqp {
            settings.transport.kind = TransportKind::Amqp;
            settings.transport.amqp.url = amqp_url();
            settings.transport.amqp.queue_prefix = format!("t{}.", &Uuid::new_v4().simple().to_string()[..12]);
            if let Some(after) = options.ack_running_after_ms {
                settings.transport.amqp.ack_running_after_ms = after;
            }
        }
        settings.queues = options
            .queues
            .iter()
            .map(|(name, concurrency)| {
                let ids_per_message = options.ids_per_message;
                (name.to_string(), QueueSettings { concurrency: *concurrency, ids_per_message, ..Default::default() })
            })
            .collect();
        for name in &options.operation_queues {
            let batches_per_message = options.batches_per_message;
            let operations = QueueSettings {
                concurrency: 2,
                kind: QueueKind::Operations,
                batches_per_message,
                ..Default::default()
            };
            settings.queues.insert(name.to_string(), operations);
        }
        for name in &options.write_queues {
            let writes = QueueSettings { concurrency: 8, prefetch: 32, kind: QueueKind::Writes, ..Default::default() };
            settings.queues.insert(name.to_string(), writes);
        }
        // Consumed: every queue above. Known too, with no consumer here: `parked`, where a
        // job stays QUEUED until a test moves it.
        settings.worker.queues = settings.queues.keys().cloned().collect();
        settings.queues.insert(PARKED.to_owned(), QueueSettings::default());

        let seeded = seed(&settings.store.url, "count", options.seed_jobs).await;
        let settings_url = settings.store.url.clone();
        let transport: Arc<dyn Transport> = match backend {
            Backend::Amqp => Arc::new(AmqpTransport::new(settings.transport.amqp.clone()).unwrap()),
            Backend::Sqlite | Backend::Postgres | Backend::Pgvector => Arc::new(InProcessTransport::new()),
        };
        let mut builder = Application::builder(settings)
            .registry(
                OperationRegistry::builtin()
                    .with(Count)
                    .with(FanCount)
                    .with(Stubborn)
                    .with(Flaky)
                    .with(FlakyFan)
                    .with(FlakyBatch)
                    .with(Gather),
            )
            .transport(transport.clone());
        if let Some(hook) = options.hook {
            builder = builder.hook(hook);
        }
        if options.handle_signals {
            builder = builder.handle_signals();
        }
        let app = builder.build().await.expect("app builds");
        let address = format!("http://127.0.0.1:{}", app.port().expect("the API is served"));
        let (db, store, store_url) = (app.db(), app.store(), settings_url);
        let stopped = actix_rt::spawn(app.run_until_stopped());
        let client = client_with(&admin_token);
        TestApp {
            address,
            client,
            admin_token,
            db,
            store,
            transport,
            seeded,
            stopped,
            uploads,
            store_url,
            _database: database,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    /// `POST /jobs` with a JSON body; returns (status, body).
    pub async fn submit(&self, body: Value) -> (u16, Value) {
        let response = self.client.post(self.url("/jobs")).json(&body).send().await.unwrap();
        read(response).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        read(self.client.get(self.url(path)).send().await.unwrap()).await
    }

    pub async fn post(&self, path: &str) -> (u16, Value) {
        read(self.client.post(self.url(path)).send().await.unwrap()).await
    }

    /// Polls the job row until it has `status`; panics at the deadline or if it ends elsewhere.
    pub async fn wait_for_status(&self, id: &str, status: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (code, job) = self.get(&format!("/jobs/{id}")).await;
            assert_eq!(code, 200, "{job}");
            if job["status"] == status {
                return job;
            }
            let terminal = ["succeeded", "failed", "cancelled"].contains(&job["status"].as_str().unwrap_or(""));
            assert!(!terminal, "job ended {} while waiting for {status}: {job}", job["status"]);
            assert!(Instant::now() < deadline, "job never became {status}: {job}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The events of a job, in order (up to 500: the largest page).
    pub async fn events(&self, id: &str) -> Vec<Value> {
        let (code, body) = self.get(&format!("/jobs/{id}/events?limit=500")).await;
        assert_eq!(code, 200, "{body}");
        body["events"].as_array().unwrap().clone()
    }

    /// The event names of a job, in order.
    pub async fn event_names(&self, id: &str) -> Vec<String> {
        let events = self.events(id).await;
        events.iter().map(|event| event["event"].as_str().unwrap().to_owned()).collect()
    }

    /// A single integer from SQL, e.g. a `COUNT(*)`.
    pub async fn count(&self, sql: &str) -> i64 {
        let backend = self.db.get_database_backend();
        let row = self.db.query_one_raw(Statement::from_string(backend, sql)).await.unwrap().unwrap();
        row.try_get_by_index::<i64>(0).unwrap()
    }

    /// Polls `sql` until it returns `expected`, with a deadline.
    pub async fn wait_for_count(&self, sql: &str, expected: i64, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let value = self.count(sql).await;
            if value == expected {
                return;
            }
            assert!(Instant::now() < deadline, "{sql} = {value}, expected {expected}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A fresh token's text (not stored anywhere yet).
pub fn new_token() -> String {
    yardmaster::auth::secret::issue().unwrap().text
}

/// A client that sends `token` with every request.
pub fn client_with(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    let bearer = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
    headers.insert(reqwest::header::AUTHORIZATION, bearer);
    reqwest::Client::builder()
        .default_headers(headers)
        .pool_idle_timeout(yardmaster::http::CLIENT_IDLE)
        .build()
        .unwrap()
}

impl TestApp {
    /// A client with a new member token of `user` in room `default`.
    pub async fn member(&self, user: &str) -> reqwest::Client {
        let body = serde_json::json!({ "user": user, "role": "member", "rooms": ["default"] });
        let (status, created) =
            read(self.client.post(self.url("/admin/tokens")).json(&body).send().await.unwrap()).await;
        assert_eq!(status, 201, "{created}");
        client_with(created["token"].as_str().unwrap())
    }
}

/// A gauge the server reports at `GET /metrics` now (0 before it is first set).
pub async fn gauge(app: &TestApp, name: &str) -> f64 {
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let value = text.lines().find_map(|line| line.strip_prefix(name)?.strip_prefix(' '));
    value.map_or(0.0, |value| value.trim().parse().unwrap())
}

/// Polls `probe` (every 50 ms) until it yields `Some`, and returns that; fails the test,
/// naming `what`, when `within` passes first. The one way tests wait for a state.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Migrates, creates `execution_log`, and inserts `jobs` QUEUED jobs of `operation` on
/// queue `default` straight into the store, before any consumer exists.
pub async fn seed(url: &str, operation: &str, jobs: usize) -> Vec<Uuid> {
    let mut settings = Settings::default();
    settings.store.url = url.to_owned();
    let db = yardmaster::store::connect(&settings.store).await.unwrap();
    yardmaster::store::migrate(&db).await.unwrap();
    db.execute_unprepared("CREATE TABLE IF NOT EXISTS execution_log (job_id VARCHAR(64) NOT NULL)").await.unwrap();
    let store = yardmaster::store::SeaStore::new(db.clone());
    let mut ids = Vec::with_capacity(jobs);
    for _ in 0..jobs {
        ids.push(store.submit(yardmaster::domain::NewJob::new(operation)).await.unwrap().job.id);
    }
    db.close().await.ok();
    ids
}

pub async fn read(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// A store on a migrated database at `url`, and its connection.
pub async fn migrated_store(url: &str) -> (sea_orm::DatabaseConnection, yardmaster::store::SeaStore) {
    let settings =
        yardmaster::config::StoreSettings { url: url.into(), ..yardmaster::config::Settings::default().store };
    let db = yardmaster::store::connect(&settings).await.unwrap();
    yardmaster::store::migrate(&db).await.unwrap();
    (db.clone(), yardmaster::store::SeaStore::new(db))
}
