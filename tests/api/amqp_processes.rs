//! Real processes against PostgreSQL and RabbitMQ: two worker processes draining one queue,
//! a broker restart in the middle of a run, and a crash between commit and publish.

use std::net::TcpListener;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{amqp_url, eventually, seed, Backend, TestApp, TestDatabase, TestOptions, UNEXPLAINED_RUNS};

/// A `yardmaster` child process, killed when dropped.
pub struct Process(pub Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Debian's libfaketime (package `faketime`), which `scripts/test.sh` installs.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Settings shared by the processes of one test, as environment variables.
pub struct Deployment {
    store_url: String,
    pub prefix: String,
    /// The admin token every API process of the deployment stores at start.
    pub token: String,
}

impl Deployment {
    pub fn new(store_url: &str) -> Self {
        Deployment {
            store_url: store_url.to_owned(),
            prefix: format!("p{}.", &Uuid::new_v4().simple().to_string()[..12]),
            token: crate::helpers::new_token(),
        }
    }

    /// A client that sends the deployment's admin token.
    pub fn client(&self) -> reqwest::Client {
        crate::helpers::client_with(&self.token)
    }

    pub fn spawn(&self, args: &[&str], extra: &[(&str, &str)]) -> Process {
        self.spawn_program(env!("CARGO_BIN_EXE_yardmaster").into(), args, extra)
    }

    /// As [`Deployment::spawn`], with the process's wall clock `skew` ahead (libfaketime,
    /// preloaded into the process itself; the monotonic clock, which timers use, is left
    /// alone).
    pub fn spawn_skewed(&self, skew: &str, args: &[&str], extra: &[(&str, &str)]) -> Process {
        assert!(std::path::Path::new(LIBFAKETIME).exists(), "install libfaketime: apt-get install faketime");
        let mut env = vec![("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", skew), ("FAKETIME_DONT_FAKE_MONOTONIC", "1")];
        env.extend_from_slice(extra);
        self.spawn(args, &env)
    }

    /// Runs `examples/custom_operation`: the same command line plus the `count` operation.
    pub fn spawn_counting(&self, args: &[&str], extra: &[(&str, &str)]) -> Process {
        let binary = std::path::Path::new(env!("CARGO_BIN_EXE_yardmaster"));
        let example = binary.parent().unwrap().join("examples").join("custom_operation");
        assert!(example.exists(), "build the example first: cargo build --examples");
        self.spawn_program(example, args, extra)
    }

    fn spawn_program(&self, program: std::path::PathBuf, args: &[&str], extra: &[(&str, &str)]) -> Process {
        let mut command = Command::new(program);
        command
            .args(args)
            .env("YARDMASTER__STORE__URL", &self.store_url)
            .env("YARDMASTER__TRANSPORT__KIND", "amqp")
            .env("YARDMASTER__TRANSPORT__AMQP__URL", amqp_url())
            .env("YARDMASTER__TRANSPORT__AMQP__QUEUE_PREFIX", &self.prefix)
            .env("YARDMASTER__DISPATCH__INTERVAL_MS", "100")
            .env("YARDMASTER__DISPATCH__GRACE_MS", "500")
            .env("YARDMASTER__QUEUES__DEFAULT__CONCURRENCY", "4")
            .env("YARDMASTER__QUEUES__DEFAULT__PREFETCH", "8")
            .env("YARDMASTER__AUTH__BOOTSTRAP_TOKEN", &self.token)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (key, value) in extra {
            command.env(key, value);
        }
        Process(command.spawn().expect("spawn yardmaster"))
    }
}

pub async fn count(db: &DatabaseConnection, sql: &str) -> i64 {
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await.unwrap().unwrap();
    row.try_get_by_index::<i64>(0).unwrap()
}

pub async fn wait_for_count(db: &DatabaseConnection, sql: &str, expected: i64, within: Duration) {
    eventually(&format!("{sql} = {expected}"), within, || async { (count(db, sql).await == expected).then_some(()) })
        .await;
}

const JOBS: i64 = 2_000;

#[actix_rt::test]
async fn two_worker_processes_drain_two_thousand_jobs_exactly_once() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    seed(&url, "count", JOBS as usize).await;
    let deployment = Deployment::new(&url);
    // Each worker's start-up dispatch publishes every QUEUED job, so every job is
    // delivered about twice and the two processes race for the claims.
    let args = ["worker", "--queue", "default"];
    let _first = deployment.spawn_counting(&args, &[("YARDMASTER__WORKER__ID", "first")]);
    let _second = deployment.spawn_counting(&args, &[("YARDMASTER__WORKER__ID", "second")]);

    let db = Database::connect(&url).await.unwrap();
    wait_for_count(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'", JOBS, Duration::from_secs(240)).await;
    // Every execution inserted a row: exactly one per job.
    assert_eq!(count(&db, "SELECT COUNT(*) FROM execution_log").await, JOBS);
    assert_eq!(count(&db, "SELECT COUNT(DISTINCT job_id) FROM execution_log").await, JOBS);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM job_event WHERE event = 'job.started'").await, JOBS);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM job_event WHERE event = 'job.succeeded'").await, JOBS);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM job WHERE attempts <> 1").await, 0);
    assert_eq!(count(&db, "SELECT COUNT(DISTINCT owner) FROM job").await, 2, "both processes ran jobs");
}

/// Stops the RabbitMQ application and starts it again when dropped, whatever happened.
struct BrokerDown;

impl BrokerDown {
    async fn stop() -> BrokerDown {
        rabbitmqctl("stop_app").await;
        BrokerDown
    }
}

impl Drop for BrokerDown {
    fn drop(&mut self) {
        let status = Command::new("rabbitmqctl").arg("start_app").stdout(Stdio::null()).status();
        assert!(status.map(|status| status.success()).unwrap_or(false), "rabbitmqctl start_app failed");
    }
}

async fn rabbitmqctl(action: &'static str) {
    let status =
        actix_rt::task::spawn_blocking(move || Command::new("rabbitmqctl").arg(action).stdout(Stdio::null()).status())
            .await
            .unwrap();
    assert!(status.map(|status| status.success()).unwrap_or(false), "rabbitmqctl {action} failed");
}

#[actix_rt::test]
async fn a_broker_restart_mid_run_loses_no_job() {
    let options = TestOptions { queues: vec![("default", 4)], ..Default::default() };
    let app = TestApp::spawn_with(Backend::Amqp, options).await;
    let sleep = json!({ "operation": "sleep", "payload": { "seconds": 0.02 } });
    for _ in 0..300 {
        let (code, body) = app.submit(sleep.clone()).await;
        assert_eq!(code, 201, "{body}");
    }
    let succeeded = "SELECT COUNT(*) FROM job WHERE status = 'succeeded'";
    eventually("jobs started running", Duration::from_secs(60), || async {
        (app.count(succeeded).await >= 30).then_some(())
    })
    .await;

    let broker = BrokerDown::stop().await;
    // The app learns of the loss when its connection closes, which may come a moment after
    // `stop_app` returns: readiness must turn, not have turned already.
    let ready = eventually("not ready with the broker down", Duration::from_secs(30), || async {
        let (code, ready) = app.get("/readyz").await;
        (code == 503).then_some(ready)
    })
    .await;
    assert_eq!(ready["code"].as_str(), Some("not_ready"), "{ready}");
    // Submissions while the broker is down are committed; their publish fails and the
    // dispatch sweep sends them once the broker is back.
    let during = join_all((0..20).map(|_| app.submit(sleep.clone()))).await;
    assert!(during.iter().all(|(code, _)| *code == 201), "{during:?}");
    drop(broker);

    app.wait_for_count(succeeded, 320, Duration::from_secs(180)).await;
    let (code, ready) = app.get("/readyz").await;
    assert_eq!((code, ready["transport"].as_str()), (200, Some("amqp")), "{ready}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job_event WHERE event = 'job.started'").await, 320);
    assert_eq!(app.count("SELECT COUNT(*) FROM job WHERE attempts <> 1").await, 0);
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// An API process that kills itself at `failpoint` on its first submission, which `body`
/// (posted to `path`) makes: the process is seen dead by SIGKILL before answering.
async fn submit_into_a_crash(deployment: &Deployment, failpoint: &str, path: &str, body: serde_json::Value) {
    let bind = format!("127.0.0.1:{}", free_port());
    let mut api = deployment.spawn(
        &["serve", "--no-workers", "--bind", &bind],
        &[("YARDMASTER_FAILPOINT", failpoint), ("YARDMASTER__DISPATCH__ENABLED", "false")],
    );
    let client = deployment.client();
    eventually("the API came up", Duration::from_secs(60), || async {
        client.get(format!("http://{bind}/healthz")).send().await.is_ok().then_some(())
    })
    .await;
    let submitted = client.post(format!("http://{bind}{path}")).json(&body).send().await;
    assert!(submitted.is_err(), "the process should have died before answering");
    let status = actix_rt::task::spawn_blocking(move || api.0.wait()).await.unwrap().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
}

#[actix_rt::test]
async fn a_crash_between_commit_and_publish_loses_no_job() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    let deployment = Deployment::new(&url);
    submit_into_a_crash(&deployment, "submit.after_commit", "/jobs", json!({ "operation": "ping" })).await;

    let db = Database::connect(&url).await.unwrap();
    assert_eq!(count(&db, "SELECT COUNT(*) FROM job WHERE status = 'queued'").await, 1, "the job was committed");
    let unconfirmed = "SELECT COUNT(*) FROM dispatch_outbox";
    assert_eq!(count(&db, unconfirmed).await, 1, "its submission's messages were never confirmed");

    let _worker = deployment.spawn(&["worker", "--queue", "default"], &[]);
    wait_for_count(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'", 1, Duration::from_secs(60)).await;
    assert_eq!(count(&db, unconfirmed).await, 0, "the sweep took the outbox row when it sent the job");
}

#[actix_rt::test]
async fn a_crash_between_publish_and_its_record_runs_each_job_once() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    let deployment = Deployment::new(&url);
    let items: Vec<_> = (0..5).map(|_| json!({ "operation": "ping" })).collect();
    submit_into_a_crash(&deployment, "submit.after_publish", "/jobs:batch", json!({ "jobs": items })).await;

    let db = Database::connect(&url).await.unwrap();
    let unconfirmed = "SELECT COUNT(*) FROM dispatch_outbox";
    assert_eq!(count(&db, unconfirmed).await, 1, "the outbox row outlived its confirmed messages");

    // The worker's start-up sweep finds the outbox row and sends the five again beside
    // their first messages: whichever comes second finds its job taken.
    let _worker = deployment.spawn(&["worker", "--queue", "default"], &[]);
    wait_for_count(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'", 5, Duration::from_secs(60)).await;
    wait_for_count(&db, unconfirmed, 0, Duration::from_secs(60)).await;
    assert_eq!(count(&db, "SELECT COUNT(*) FROM job_event WHERE event = 'job.started'").await, 5);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM job WHERE attempts <> 1").await, 0);
}

/// Short leases and fast reaper passes, so crash tests take seconds.
const FAST: [(&str, &str); 4] = [
    ("YARDMASTER__WORKER__LEASE_MS", "1500"),
    ("YARDMASTER__WORKER__HEARTBEAT_MS", "300"),
    ("YARDMASTER__REAPER__INTERVAL_MS", "200"),
    ("YARDMASTER__WORKER__GRACE_SECONDS", "1"),
];

pub fn with_fast<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    FAST.iter().copied().chain(extra.iter().copied()).collect()
}

/// Inserts a QUEUED job straight into the store (unpublished: a worker's sweep sends it).
pub async fn insert_job(url: &str, operation: &str, payload: serde_json::Value) -> Uuid {
    let mut settings = yardmaster::Settings::default();
    settings.store.url = url.to_owned();
    let db = yardmaster::store::connect(&settings.store).await.unwrap();
    let store = yardmaster::store::SeaStore::new(db.clone());
    let new = yardmaster::domain::NewJob { payload, ..yardmaster::domain::NewJob::new(operation) };
    let id = yardmaster::store::JobCommands::submit(&store, new).await.unwrap().job.id;
    db.close().await.ok();
    id
}

async fn wait_for_row(db: &DatabaseConnection, sql: &str, within: Duration) {
    wait_for_count(db, sql, 1, within).await;
}

/// Worker "first" running a `sleep` job, worker "second" idle beside it.
struct MidJob {
    db: DatabaseConnection,
    id: Uuid,
    first: Process,
    _second: Process,
    _deployment: Deployment,
    _database: TestDatabase,
}

impl MidJob {
    /// `lease_ms`: the workers' lease (`FAST`'s is short, for the reaper to act within a test).
    async fn start(seconds: f64, lease_ms: &'static str) -> MidJob {
        let (database, url) = TestDatabase::create(Backend::Postgres).await;
        seed(&url, "count", 0).await;
        let deployment = Deployment::new(&url);
        let args = ["worker", "--queue", "default"];
        let settings = |id| with_fast(&[("YARDMASTER__WORKER__ID", id), ("YARDMASTER__WORKER__LEASE_MS", lease_ms)]);
        let first = deployment.spawn(&args, &settings("first"));
        let payload = json!({ "seconds": seconds, "steps": (seconds * 10.0) as u32 });
        let id = insert_job(&url, "sleep", payload).await;
        let db = Database::connect(&url).await.unwrap();
        let running = format!("SELECT COUNT(*) FROM job WHERE id = '{id}' AND status = 'running' AND owner = 'first'");
        wait_for_row(&db, &running, Duration::from_secs(30)).await;
        let second = deployment.spawn(&args, &settings("second"));
        MidJob { db, id, first, _second: second, _deployment: deployment, _database: database }
    }
}

#[actix_rt::test]
async fn a_worker_killed_mid_job_loses_it_to_the_reaper_and_another_finishes_it() {
    let mid_job = MidJob::start(4.0, FAST[0].1).await;
    let (db, id, mut first) = (&mid_job.db, mid_job.id, mid_job.first);

    first.0.kill().unwrap();
    first.0.wait().unwrap();

    let done = format!("SELECT COUNT(*) FROM job WHERE id = '{id}' AND status = 'succeeded' AND owner = 'second'");
    wait_for_row(db, &done, Duration::from_secs(60)).await;
    // The killed run's lease lapsed and the reaper requeued it; each attempt is explained so
    // (a heartbeat late past the 1.5 s lease on a loaded machine is one more, logged as such).
    assert!(count(db, &format!("SELECT attempts::bigint FROM job WHERE id = '{id}'")).await >= 2);
    assert_eq!(count(db, UNEXPLAINED_RUNS).await, 0);
}

/// Six jobs travel in one message and run at once on worker "first", which is killed: the
/// broker redelivers the message (finding them RUNNING), the reaper re-queues each, and
/// worker "second" finishes all six. None is lost, and the redelivery runs none again: every
/// run after the first follows a lapse of the lease (one each, more only if a heartbeat was
/// late on a loaded machine).
#[actix_rt::test]
async fn a_worker_killed_holding_a_message_of_six_jobs_loses_none() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    seed(&url, "count", 0).await;
    let deployment = Deployment::new(&url);
    let grouped =
        [("YARDMASTER__QUEUES__DEFAULT__IDS_PER_MESSAGE", "6"), ("YARDMASTER__QUEUES__DEFAULT__CONCURRENCY", "6")];
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(insert_job(&url, "sleep", json!({ "seconds": 4, "steps": 40 })).await);
    }
    let args = ["worker", "--queue", "default"];
    let first = [("YARDMASTER__WORKER__ID", "first")];
    let mut first = deployment.spawn(&args, &with_fast(&[grouped[0], grouped[1], first[0]]));
    let db = Database::connect(&url).await.unwrap();
    let running = "SELECT COUNT(*) FROM job WHERE status = 'running' AND owner = 'first'";
    wait_for_count(&db, running, 6, Duration::from_secs(30)).await;
    first.0.kill().unwrap();
    first.0.wait().unwrap();

    let second = [("YARDMASTER__WORKER__ID", "second")];
    let _second = deployment.spawn(&args, &with_fast(&[grouped[0], grouped[1], second[0]]));
    let done = "SELECT COUNT(*) FROM job WHERE status = 'succeeded' AND owner = 'second'";
    wait_for_count(&db, done, 6, Duration::from_secs(60)).await;
    assert_eq!(count(&db, "SELECT COUNT(*) FROM job WHERE attempts < 2").await, 0);
    assert_eq!(count(&db, UNEXPLAINED_RUNS).await, 0);
}

#[actix_rt::test]
async fn sigterm_mid_job_requeues_it_within_the_grace_and_exits_143() {
    // A lease no late heartbeat lapses: the job is first's until the signal.
    let mid_job = MidJob::start(5.0, "60000").await;
    let (db, id, mut first) = (&mid_job.db, mid_job.id, mid_job.first);

    let stopping = Instant::now();
    // Two signals, as an impatient operator sends: the second arms nothing more.
    for _ in 0..2 {
        // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
        unsafe {
            libc::kill(first.0.id() as libc::pid_t, libc::SIGTERM);
        }
    }
    let status = actix_rt::task::spawn_blocking(move || first.0.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}");
    assert!(stopping.elapsed() < Duration::from_secs(10), "took {:?} with a 1 s grace", stopping.elapsed());

    let requeued =
        format!("SELECT COUNT(*) FROM job_event WHERE job_id = '{id}' AND event = 'job.requeued_on_shutdown'");
    assert_eq!(count(db, &requeued).await, 1);
    let done = format!("SELECT COUNT(*) FROM job WHERE id = '{id}' AND status = 'succeeded' AND owner = 'second'");
    wait_for_row(db, &done, Duration::from_secs(60)).await;
}

#[actix_rt::test]
async fn a_job_that_kills_its_worker_every_time_fails_after_its_budget() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    seed(&url, "count", 0).await;
    let deployment = Deployment::new(&url);
    let budget = [("YARDMASTER__REAPER__MAX_LEASE_REQUEUES", "1")];
    let _reaper = deployment.spawn(&["reaper"], &with_fast(&budget));
    let id = insert_job(&url, "crash", json!({})).await;
    let db = Database::connect(&url).await.unwrap();

    // Play systemd: restart the worker whenever it dies, until the job is settled.
    let failed = format!("SELECT COUNT(*) FROM job WHERE id = '{id}' AND status = 'failed'");
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut restarts = 0;
    let mut worker = deployment.spawn_counting(&["worker", "--queue", "default"], &with_fast(&budget));
    while count(&db, &failed).await == 0 {
        assert!(Instant::now() < deadline, "the crashing job never failed");
        if worker.0.try_wait().unwrap().is_some() {
            restarts += 1;
            assert!(restarts <= 4, "crash loop: the worker keeps dying");
            worker = deployment.spawn_counting(&["worker", "--queue", "default"], &with_fast(&budget));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let code = format!("SELECT COUNT(*) FROM job WHERE id = '{id}' AND error_code = 'lease_expired' AND attempts = 2");
    assert_eq!(count(&db, &code).await, 1);

    // The same worker now runs other work and stays up.
    let next = insert_job(&url, "count", json!({})).await;
    let done = format!("SELECT COUNT(*) FROM job WHERE id = '{next}' AND status = 'succeeded'");
    wait_for_row(&db, &done, Duration::from_secs(30)).await;
    assert!(worker.0.try_wait().unwrap().is_none(), "the worker died again");
}

/// One job at a time per worker, the broker's window at its narrowest.
const ONE_AT_A_TIME: [(&str, &str); 2] =
    [("YARDMASTER__QUEUES__DEFAULT__CONCURRENCY", "1"), ("YARDMASTER__QUEUES__DEFAULT__PREFETCH", "1")];

fn one_at_a_time<'a>(id: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let named = [("YARDMASTER__WORKER__ID", id)];
    ONE_AT_A_TIME.iter().chain(&named).chain(extra).copied().collect()
}

/// Inserts `n` instant `sleep` jobs and waits until every one succeeded on worker `owner`.
async fn short_jobs_finish_on(db: &DatabaseConnection, url: &str, n: usize, owner: &str, within: Duration) {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(insert_job(url, "sleep", json!({ "seconds": 0 })).await);
    }
    let list = ids.iter().map(|id| format!("'{id}'")).collect::<Vec<_>>().join(",");
    let done = format!("SELECT COUNT(*) FROM job WHERE id IN ({list}) AND status = 'succeeded' AND owner = '{owner}'");
    wait_for_count(db, &done, n as i64, within).await;
}

#[actix_rt::test]
async fn a_busy_worker_takes_no_message_while_another_is_idle() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    seed(&url, "count", 0).await;
    let deployment = Deployment::new(&url);
    let args = ["worker", "--queue", "default"];
    let _busy = deployment.spawn(&args, &one_at_a_time("busy", &[]));
    let long = insert_job(&url, "sleep", json!({ "seconds": 60, "steps": 60 })).await;
    let db = Database::connect(&url).await.unwrap();
    let running = format!("SELECT COUNT(*) FROM job WHERE id = '{long}' AND status = 'running'");
    wait_for_row(&db, &running, Duration::from_secs(30)).await;
    let _idle = deployment.spawn(&args, &one_at_a_time("idle", &[]));

    // Acknowledged at its claim, the long job's delivery would free the busy worker's
    // window, and about half of these would wait a minute behind it.
    short_jobs_finish_on(&db, &url, 6, "idle", Duration::from_secs(20)).await;
    assert_eq!(count(&db, &running).await, 1, "the long job is still running where it started");
}

#[actix_rt::test]
async fn a_frozen_worker_swallows_no_message() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    seed(&url, "count", 0).await;
    let deployment = Deployment::new(&url);
    let args = ["worker", "--queue", "default"];
    let frozen = deployment.spawn(&args, &one_at_a_time("frozen", &FAST));
    // Long enough to be still running when the SIGSTOP below arrives, after a process spawn
    // on a loaded machine: a run that ended first would leave nothing frozen.
    let stuck = insert_job(&url, "sleep", json!({ "seconds": 12, "steps": 24 })).await;
    let db = Database::connect(&url).await.unwrap();
    let running = format!("SELECT COUNT(*) FROM job WHERE id = '{stuck}' AND status = 'running' AND owner = 'frozen'");
    wait_for_row(&db, &running, Duration::from_secs(30)).await;
    let _thawed = deployment.spawn(&args, &one_at_a_time("thawed", &FAST));
    // SAFETY: kill(2) on a child we spawned has no memory-safety preconditions.
    unsafe {
        libc::kill(frozen.0.id() as libc::pid_t, libc::SIGSTOP);
    }

    // The reaper re-queues the frozen run once its lease expires; neither that message nor
    // any other may go into the frozen worker's window, where it would sit until the broker
    // gives up on the connection (minutes).
    // (One at a time: the short jobs may wait behind the 12 s re-run.)
    short_jobs_finish_on(&db, &url, 4, "thawed", Duration::from_secs(60)).await;
    let rerun = format!("SELECT COUNT(*) FROM job WHERE id = '{stuck}' AND status = 'succeeded' AND owner = 'thawed'");
    wait_for_row(&db, &rerun, Duration::from_secs(60)).await;
    // SAFETY: as above.
    unsafe {
        libc::kill(frozen.0.id() as libc::pid_t, libc::SIGCONT);
    }
}

#[actix_rt::test]
async fn a_worker_ten_minutes_ahead_times_out_no_job_and_stamps_database_time() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    seed(&url, "count", 0).await;
    let deployment = Deployment::new(&url);
    // Every run is past its timeout after a second; only a run quiet for 30 s is stalled.
    let reaper = [
        ("YARDMASTER__REAPER__TIMEOUT_SECONDS", "1"),
        ("YARDMASTER__REAPER__STALL_SECONDS", "30"),
        ("YARDMASTER__REAPER__INTERVAL_MS", "200"),
    ];
    // Each worker holds at most 3 of the 6 jobs, so the one that subscribes first cannot take
    // them all before the other has started.
    let reaper = [
        reaper[0],
        reaper[1],
        reaper[2],
        ("YARDMASTER__QUEUES__DEFAULT__CONCURRENCY", "3"),
        ("YARDMASTER__QUEUES__DEFAULT__PREFETCH", "3"),
    ];
    let args = ["worker", "--queue", "default"];
    let _on_time = deployment.spawn(&args, &[&reaper[..], &[("YARDMASTER__WORKER__ID", "on_time")]].concat());
    let _ahead =
        deployment.spawn_skewed("+600s", &args, &[&reaper[..], &[("YARDMASTER__WORKER__ID", "ahead")]].concat());
    // Both subscribed before the jobs exist, so the skewed worker gets its share whatever
    // the order and speed of the two start-ups.
    let queue = format!("{}default.prio", deployment.prefix);
    eventually(&format!("the two workers both subscribed to {queue}"), Duration::from_secs(60), || async {
        (broker_consumers(&queue).await >= 2).then_some(())
    })
    .await;
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(insert_job(&url, "sleep", json!({ "seconds": 3, "steps": 30 })).await);
    }
    let db = Database::connect(&url).await.unwrap();
    let list = ids.iter().map(|id| format!("'{id}'")).collect::<Vec<_>>().join(",");
    let ended = format!("SELECT COUNT(*) FROM job WHERE id IN ({list}) AND status IN ('succeeded', 'failed')");
    wait_for_count(&db, &ended, ids.len() as i64, Duration::from_secs(60)).await;
    let timed_out = format!("SELECT COUNT(*) FROM job WHERE id IN ({list}) AND status = 'failed'");
    assert_eq!(count(&db, &timed_out).await, 0, "healthy runs were failed by a skewed reaper");
    let by_ahead = format!("SELECT COUNT(*) FROM job WHERE id IN ({list}) AND owner = 'ahead'");
    assert!(count(&db, &by_ahead).await > 0, "the skewed worker ran none of the jobs");
    // Its stamps are the database's time, not its own ten minutes ahead.
    let off_clock = format!(
        "SELECT COUNT(*) FROM job WHERE id IN ({list}) AND (started_at > created_at + INTERVAL '60 seconds' \
         OR finished_at > CURRENT_TIMESTAMP + INTERVAL '60 seconds')"
    );
    assert_eq!(count(&db, &off_clock).await, 0);
    let future_events = format!(
        "SELECT COUNT(*) FROM job_event WHERE job_id IN ({list}) AND ts > CURRENT_TIMESTAMP + INTERVAL '60 seconds'"
    );
    assert_eq!(count(&db, &future_events).await, 0);
}

/// The consumers of the broker's queue `name` (0 while it does not exist), as
/// `rabbitmqctl` lists them.
pub async fn broker_consumers(name: &str) -> i64 {
    let vhost = amqp_url().rsplit('/').next().unwrap().replace("%2f", "/").replace("%2F", "/");
    let output = actix_rt::task::spawn_blocking(move || {
        let args = ["-q", "--no-table-headers", "list_queues", "-p", &vhost, "name", "consumers"];
        Command::new("rabbitmqctl").args(args).output().expect("rabbitmqctl runs")
    })
    .await
    .unwrap();
    assert!(output.status.success(), "rabbitmqctl list_queues: {output:?}");
    let listing = String::from_utf8_lossy(&output.stdout).into_owned();
    let row = listing.lines().map(|line| line.split('\t').collect::<Vec<_>>()).find(|row| row[0] == name);
    row.map_or(0, |row| row[1].trim().parse().unwrap())
}

/// A long-poll and an event stream on the API process are woken by a worker process: the
/// job's events reach the API through PostgreSQL's `NOTIFY`, not a polling loop.
#[actix_rt::test]
async fn a_waiter_on_the_api_is_woken_by_a_worker_in_another_process() {
    let (_database, url) = TestDatabase::create(Backend::Postgres).await;
    let deployment = Deployment::new(&url);
    let bind = format!("127.0.0.1:{}", free_port());
    let _api = deployment.spawn(&["serve", "--no-workers", "--bind", &bind], &[]);
    let client = deployment.client();
    eventually("the API came up", Duration::from_secs(60), || async {
        client.get(format!("http://{bind}/readyz")).send().await.is_ok().then_some(())
    })
    .await;
    let _worker = deployment.spawn(&["worker", "--queue", "default"], &[]);
    for _ in 0..3 {
        let body = json!({ "operation": "sleep", "payload": { "seconds": 0.5, "steps": 2 } });
        let response = client.post(format!("http://{bind}/jobs")).json(&body).send().await.unwrap();
        let (status, job) = crate::helpers::read(response).await;
        assert_eq!(status, 201, "{job}");
        let id = job["id"].as_str().unwrap();
        let response = client.get(format!("http://{bind}/jobs/{id}")).header("prefer", "wait=30").send().await.unwrap();
        let answered = chrono::Utc::now();
        let (_, done) = crate::helpers::read(response).await;
        assert_eq!(done["status"], "succeeded", "{done}");
        let finished: chrono::DateTime<chrono::Utc> = done["finished_at"].as_str().unwrap().parse().unwrap();
        // Nothing polls: unwoken, the long poll would answer at the end of its 30 s. The bound
        // is far under that and far over any delay a loaded machine adds to the wake-up.
        let late = answered - finished;
        assert!(late < chrono::Duration::seconds(5), "answered {late} after another process ended the job");
    }
}
