//! The Python SDK's worker (`BENCH_ONLY=sdk`): one process of `bench/sdk_worker.py` at
//! concurrency 8 drains no-op tasks of a registered type over HTTP from a server on
//! PostgreSQL, on the SDK (`Worker.run`) and as the loop the example worker was before the SDK
//! (one task per claim, one PATCH per outcome), each against the broker path of the same run.
//! The interpreter is `BENCH_PYTHON`, else the test suite's virtual environment, which
//! `scripts/bench.sh` sets up with the package installed.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, Statement};
use serde_json::json;

use super::{api_only, bench_client, bench_token, count, sampler, Figure, Kind, UNFINISHED};

/// The two ways a Python process serves the tasks.
#[derive(Clone, Copy)]
pub enum Mode {
    /// `yardmaster.worker.Worker.run(concurrency=8)`.
    Sdk,
    /// The pre-SDK example's loop, on 8 threads.
    Loop,
}

impl Mode {
    fn argument(self) -> &'static str {
        match self {
            Mode::Sdk => "sdk",
            Mode::Loop => "loop",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Mode::Sdk => "claims of up to the free slots, outcomes together in POST /tasks:report",
            Mode::Loop => "the pre-SDK example's loop: claim 1 + PATCH per task, urllib, 8 threads",
        }
    }
}

fn python() -> PathBuf {
    std::env::var_os("BENCH_PYTHON").map(PathBuf::from).unwrap_or_else(|| {
        let home = std::env::var_os("HOME").expect("HOME is set");
        PathBuf::from(home).join(".cache/yardmaster/python-venv/bin/python")
    })
}

pub async fn python_worker(tasks: usize, mode: Mode) -> Figure {
    let (scratch, base, db) = api_only().await;
    let client = bench_client();
    let post = |path: &str, body: serde_json::Value| {
        let request = client.post(format!("{base}{path}")).json(&body);
        async move {
            let response = request.send().await.unwrap();
            assert!(response.status().is_success(), "{}", response.status());
        }
    };
    let noop = json!({ "room": "bench", "category": "analysis", "name": "Noop", "schema": { "type": "object" } });
    post("/types", noop).await;

    // The process starts (imports, sets up) before the window; it registers when told to go.
    let mut child = Command::new(python())
        .args(["bench/sdk_worker.py", mode.argument(), &base, bench_token()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the benchmark's Python runs bench/sdk_worker.py");
    let stdout = child.stdout.take().unwrap();
    let ready = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    assert_eq!(ready.await.unwrap().unwrap().trim(), "ready", "sdk_worker.py did not start");
    for chunk in (0..tasks).collect::<Vec<_>>().chunks(1000) {
        let job = json!({ "room": "bench", "operation": "analysis:Noop", "wait_for_worker": true });
        post("/jobs:batch", json!({ "jobs": vec![job; chunk.len()] })).await;
    }

    let before = sampler().snapshot();
    let go = Utc::now();
    child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(900);
    while count(&db, UNFINISHED).await > 0 {
        assert!(Instant::now() < deadline, "the tasks never drained");
        assert!(child.try_wait().unwrap().is_none(), "sdk_worker.py ended early");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let usage = sampler().since(&before);
    let sql = "SELECT MAX(finished_at) FROM job";
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await.unwrap().unwrap();
    let last: DateTime<Utc> = row.try_get_by_index(0).unwrap();
    let seconds = (last - go).num_microseconds().unwrap() as f64 / 1e6;
    assert_eq!(count(&db, "SELECT COUNT(*) FROM job WHERE status = 'succeeded'").await, tasks as i64);

    // SAFETY: kill(2) on the child's own pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    // Waited for off this thread: it runs the reactor of the API's database connections, which
    // the worker's leaving (`DELETE /workers/{id}`) needs.
    tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    db.close().await.ok();
    scratch.remove().await;
    let name = format!("Python worker process ({}), concurrency 8: PostgreSQL", mode.argument());
    Figure { kind: Kind::Remote, ..Figure::rate(name, tasks as f64 / seconds, mode.describe()) }.with_cpu(usage, tasks)
}
