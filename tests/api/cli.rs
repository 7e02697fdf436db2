//! The client commands of the real binary against a real server: `submit --wait` shows the
//! events as they come and the bar's final state and exits by the job's end (0, 3, 4),
//! `--json` prints documents that parse, errors print the server's problem title, and hostile
//! arguments change nothing on the server.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;

use yardmaster::domain::NewEvent;
use yardmaster::store::RunRef;

use crate::helpers::{eventually, read, Backend, ScratchDir, TestApp, TestOptions, PARKED};

const BIN: &str = env!("CARGO_BIN_EXE_yardmaster");
/// Longest a command may take here (it is not a timing test: a hang fails, not a slow run).
const DEADLINE: Duration = Duration::from_secs(60);

/// `yardmaster ARGS` against `app` with `token`, with no client file to read.
fn command(app: &TestApp, token: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("YARDMASTER_URL", &app.address)
        .env("YARDMASTER_TOKEN", token)
        .env("YARDMASTER_CLIENT_CONFIG", "/nonexistent/yardmaster-client.toml")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

async fn run(app: &TestApp, token: &str, args: &[&str]) -> Output {
    let child = command(app, token, args).spawn().unwrap();
    tokio::time::timeout(DEADLINE, child.wait_with_output()).await.expect("the command hung").unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| panic!("{err}: {}", text(&output.stdout)))
}

async fn jobs_in_store(app: &TestApp) -> i64 {
    app.count("SELECT COUNT(*) FROM job").await
}

async fn submit_wait_shows_events_and_the_final_bar(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.admin_token.clone();
    let output = run(&app, &token, &["submit", "sleep", "--payload", r#"{"seconds":0.2,"steps":4}"#, "--wait"]).await;
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    // The events, in order, as lines.
    let names: Vec<&str> = stdout.lines().filter_map(|line| line.split_whitespace().nth(2)).collect();
    assert_eq!(names.first(), Some(&"job.queued"), "{stdout}");
    let progress: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("job.progress"))
        .filter_map(|line| line.split_whitespace().nth(3))
        .collect();
    assert_eq!(progress, ["1/4", "2/4", "3/4", "4/4"], "{stdout}");
    assert!(names.contains(&"job.started") && names.contains(&"job.succeeded"), "{stdout}");
    assert!(stdout.contains(r#"result: {"slept_seconds":0.2}"#), "{stdout}");
    // The bar's final state (standard error is not a terminal here: one line).
    assert!(stderr.contains(&format!("[{}] 4/4 100% succeeded", "#".repeat(30))), "{stderr}");
}

async fn wait_exit_codes_tell_failed_from_cancelled(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.admin_token.clone();
    let failed = run(&app, &token, &["submit", "fail", "--wait"]).await;
    assert_eq!(failed.status.code(), Some(3), "{}", text(&failed.stderr));
    assert!(text(&failed.stdout).contains("error: OperationFailed"), "{}", text(&failed.stdout));

    // Cancelled while the command waits: it learns of it from the stream and exits 4.
    let mut child = command(&app, &token, &["submit", "ping", "--queue", PARKED, "--wait"]).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = tokio::time::timeout(DEADLINE, stderr.next_line()).await.unwrap().unwrap().unwrap();
    let id = first.split_whitespace().nth(1).unwrap().to_owned();
    assert!(first.starts_with("job ") && first.contains("queued"), "{first}");
    let (status, _) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!(status, 200);
    let output = tokio::time::timeout(DEADLINE, child.wait_with_output()).await.unwrap().unwrap();
    assert_eq!(output.status.code(), Some(4), "{}", text(&output.stdout));
    assert!(text(&output.stdout).contains("job.cancelled"), "{}", text(&output.stdout));

    // Given up on: exit 5, and the job goes on.
    let output = run(&app, &token, &["submit", "ping", "--queue", PARKED, "--wait", "--timeout", "1"]).await;
    assert_eq!(output.status.code(), Some(5), "{}", text(&output.stderr));
    assert!(text(&output.stderr).contains("is queued and goes on"), "{}", text(&output.stderr));

    // Given up on while it runs: the job as it is at the deadline, not as it was submitted.
    // No worker takes the parked queue: the test starts the run itself, long before the
    // deadline (which counts from after the first line), with a lease no reaper reaches.
    for json in [false, true] {
        let payload = r#"{"seconds": 30, "steps": 30}"#;
        let mut args = vec!["submit", "sleep", "--payload", payload, "--queue", PARKED, "--wait", "--timeout", "5"];
        if json {
            args.push("--json");
        }
        let mut child = command(&app, &token, &args).spawn().unwrap();
        // Text mode: the first line names the job; the rest is read to the end below (the
        // command must not meet a closed pipe).
        let mut lines = (!json).then(|| BufReader::new(child.stderr.take().unwrap()).lines());
        let id = match lines.as_mut() {
            None => parked_sleep(&app).await,
            Some(lines) => {
                let first = tokio::time::timeout(DEADLINE, lines.next_line()).await.unwrap().unwrap().unwrap();
                first.split_whitespace().nth(1).and_then(|id| id.parse().ok()).unwrap_or_else(|| panic!("{first}"))
            }
        };
        let started = std::time::Instant::now();
        let job = app.store.claim(id, "test", Duration::from_secs(600)).await.unwrap().expect("claimed");
        let progress = NewEvent::new("job.progress").fields(json!({"_progress_current": 1, "_progress_total": 30}));
        assert!(app.store.record_event(RunRef::from(&job), progress).await.unwrap());
        assert!(started.elapsed() < Duration::from_secs(4), "the run began too late to test the deadline");
        let mut stderr = String::new();
        if let Some(mut lines) = lines {
            while let Some(line) = tokio::time::timeout(DEADLINE, lines.next_line()).await.unwrap().unwrap() {
                stderr += &line;
                stderr.push('\n');
            }
        }
        let output = tokio::time::timeout(DEADLINE, child.wait_with_output()).await.unwrap().unwrap();
        stderr += &text(&output.stderr);
        assert_eq!(output.status.code(), Some(5), "{stderr}");
        assert!(stderr.contains("is running and goes on"), "{stderr}");
        if json {
            let printed = json_of(&output);
            assert_eq!((printed["status"].as_str(), printed["progress_current"].as_i64()), (Some("running"), Some(1)));
        } else {
            assert!(stderr.contains("1/30 3% running"), "{stderr}");
        }
        app.store.cancel(id).await.unwrap();
    }
}

/// The one job of operation `sleep` waiting in the parked queue, once it is there.
async fn parked_sleep(app: &TestApp) -> uuid::Uuid {
    eventually("the command submitted a job", DEADLINE, || async {
        let (_, page) = app.get(&format!("/jobs?queue={PARKED}&operation=sleep&status=queued")).await;
        let id = page["jobs"].as_array().and_then(|jobs| jobs.first()).and_then(|job| job["id"].as_str());
        id.map(|id| id.parse::<uuid::Uuid>().unwrap())
    })
    .await
}

async fn json_output_parses(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.admin_token.clone();
    let submitted = json_of(&run(&app, &token, &["submit", "ping", "--json", "--payload", "{}"]).await);
    let id = submitted["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&id, "succeeded").await;
    let status = json_of(&run(&app, &token, &["status", &id, "--json"]).await);
    assert_eq!((status["id"].as_str(), status["status"].as_str()), (Some(id.as_str()), Some("succeeded")));

    let waited =
        json_of(&run(&app, &token, &["submit", "sleep", "--payload", r#"{"seconds":0.05}"#, "--wait", "--json"]).await);
    assert_eq!(waited["status"], "succeeded");

    let listed = json_of(&run(&app, &token, &["ls", "--json", "--status", "succeeded", "--operation", "ping"]).await);
    let ids: Vec<&str> = listed["jobs"].as_array().unwrap().iter().filter_map(|job| job["id"].as_str()).collect();
    assert_eq!(ids, [id.as_str()]);

    // Events: one JSON document per line.
    let events = run(&app, &token, &["events", &id, "--json"]).await;
    let names: Vec<String> = text(&events.stdout)
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["event"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["job.queued", "job.started", "job.succeeded"]);
    // Followed after the end: the same events, then exit 0.
    let followed = run(&app, &token, &["events", &id, "--follow"]).await;
    assert_eq!(followed.status.code(), Some(0));
    assert_eq!(text(&followed.stdout).lines().count(), 3);
}

async fn listing_pages_with_a_cursor(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.admin_token.clone();
    for _ in 0..3 {
        let (status, _) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
        assert_eq!(status, 201);
    }
    let first = run(&app, &token, &["ls", "--limit", "2", "--queue", PARKED]).await;
    let (stdout, stderr) = (text(&first.stdout), text(&first.stderr));
    assert_eq!(stdout.lines().count(), 3, "a header and two jobs: {stdout}");
    let cursor = stderr.trim().strip_prefix("more: --cursor ").and_then(|rest| rest.split_whitespace().next()).unwrap();
    let rest = run(&app, &token, &["ls", "--limit", "2", "--queue", PARKED, "--cursor", cursor]).await;
    assert_eq!(text(&rest.stdout).lines().count(), 2, "{}", text(&rest.stdout));
    let all = json_of(&run(&app, &token, &["ls", "--limit", "2", "--queue", PARKED, "--all", "--json"]).await);
    assert_eq!(all["jobs"].as_array().unwrap().len(), 3);
    assert!(all["next_cursor"].is_null());
}

/// `--in`, `--at`, `--run-timeout` and `--expires-in` reach the job; a span or time the
/// command line cannot read is refused before anything is sent.
async fn times_reach_the_job(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.admin_token.clone();
    let args = ["submit", "ping", "--json", "--in", "1h30m", "--run-timeout", "90s", "--expires-in", "2h"];
    let job = json_of(&run(&app, &token, &args).await);
    let run_after = chrono::DateTime::parse_from_rfc3339(job["run_after"].as_str().unwrap()).unwrap();
    let ahead = run_after.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(ahead > chrono::Duration::minutes(89) && ahead <= chrono::Duration::minutes(90), "{job}");
    assert_eq!(job["timeout_seconds"].as_f64(), Some(90.0), "{job}");
    let expires = chrono::DateTime::parse_from_rfc3339(job["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(expires - run_after, chrono::Duration::hours(2), "{job}");
    let at = json_of(&run(&app, &token, &["submit", "ping", "--json", "--at", "2001-01-01T00:00:00+02:00"]).await);
    assert!(at["run_after"].is_null(), "a time past runs at once: {at}");
    let before = jobs_in_store(&app).await;
    for bad in [["--in", "10x"], ["--at", "tomorrow"], ["--run-timeout", "-5"]] {
        let output = run(&app, &token, &["submit", "ping", bad[0], bad[1]]).await;
        assert_eq!(output.status.code(), Some(2), "{bad:?}: {}", text(&output.stderr));
        assert!(text(&output.stderr).contains(bad[1]), "{bad:?}: {}", text(&output.stderr));
    }
    let both = run(&app, &token, &["submit", "ping", "--in", "5m", "--at", "2030-01-01T00:00:00Z"]).await;
    assert_eq!(both.status.code(), Some(2), "{}", text(&both.stderr));
    assert_eq!(jobs_in_store(&app).await, before);
}

/// `--depends-on` (repeated) and `--on-dependency-failure` reach the job; `show` says it
/// waits; a dependency that is not an id is refused before anything is sent.
async fn dependencies_reach_the_job(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.admin_token.clone();
    let (_, first) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
    let (_, second) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
    let (first, second) = (first["id"].as_str().unwrap(), second["id"].as_str().unwrap());
    let args =
        ["submit", "ping", "--json", "--depends-on", first, "--depends-on", second, "--on-dependency-failure", "run"];
    let job = json_of(&run(&app, &token, &args).await);
    assert_eq!(job["on_dependency_failure"], "run", "{job}");
    let id = job["id"].as_str().unwrap();
    let (_, links) = app.get(&format!("/jobs/{id}/dependencies")).await;
    assert_eq!(links["dependencies"].as_array().map(Vec::len), Some(2), "{links}");
    let shown = run(&app, &token, &["status", id]).await;
    assert!(text(&shown.stdout).contains("waiting "), "{}", text(&shown.stdout));
    let before = jobs_in_store(&app).await;
    let bad = run(&app, &token, &["submit", "ping", "--depends-on", "not-an-id"]).await;
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));
    assert!(text(&bad.stderr).contains("not-an-id"), "{}", text(&bad.stderr));
    let unknown = uuid::Uuid::now_v7().to_string();
    let missing = run(&app, &token, &["submit", "ping", "--depends-on", &unknown]).await;
    assert_ne!(missing.status.code(), Some(0));
    assert!(text(&missing.stderr).contains("dependency_not_found"), "{}", text(&missing.stderr));
    assert_eq!(jobs_in_store(&app).await, before);
}

async fn schedules_are_managed_by_name(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.admin_token.clone();
    let args = [
        "schedule",
        "create",
        "nightly",
        "--cron",
        "0 2 * * *",
        "--timezone",
        "Europe/Madrid",
        "--operation",
        "ping",
        "--overlap",
        "allow",
        "--run-timeout",
        "10m",
        "--json",
    ];
    let created = json_of(&run(&app, &token, &args).await);
    assert_eq!((created["cron"].as_str(), created["timezone"].as_str()), (Some("0 2 * * *"), Some("Europe/Madrid")));
    assert_eq!(created["job"]["timeout_seconds"].as_f64(), Some(600.0), "{created}");
    let listed = run(&app, &token, &["schedule", "list"]).await;
    assert!(
        text(&listed.stdout).contains("nightly") && text(&listed.stdout).contains("0 2 * * * Europe/Madrid"),
        "{}",
        text(&listed.stdout)
    );
    let paused = json_of(&run(&app, &token, &["schedule", "pause", "nightly", "--json"]).await);
    assert!(paused["paused"] == true && paused["next_fire_at"].is_null(), "{paused}");
    let resumed = json_of(&run(&app, &token, &["schedule", "resume", "nightly", "--json"]).await);
    assert!(resumed["paused"] == false && resumed["next_fire_at"].is_string(), "{resumed}");
    let job = json_of(&run(&app, &token, &["schedule", "run-now", "nightly", "--json"]).await);
    app.wait_for_status(job["id"].as_str().unwrap(), "succeeded").await;
    // A bad cron: the server's problem, naming the field; nothing made.
    let bad =
        run(&app, &token, &["schedule", "create", "bad", "--cron", "0 2 * * FUNDAY", "--operation", "ping"]).await;
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        text(&bad.stderr).contains("day of week") && text(&bad.stderr).contains("invalid_schedule"),
        "{}",
        text(&bad.stderr)
    );
    let missing = run(&app, &token, &["schedule", "pause", "nope"]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("no schedule named \"nope\""), "{}", text(&missing.stderr));
    let neither = run(&app, &token, &["schedule", "create", "x", "--operation", "ping"]).await;
    assert_eq!(neither.status.code(), Some(2), "{}", text(&neither.stderr));
    let deleted = run(&app, &token, &["schedule", "delete", "nightly"]).await;
    assert_eq!(deleted.status.code(), Some(0), "{}", text(&deleted.stderr));
    assert_eq!(app.count("SELECT COUNT(*) FROM schedule").await, 0);
}

async fn errors_print_the_problem_and_change_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.admin_token.clone();
    let before = jobs_in_store(&app).await;

    let bad_token = run(&app, "ym_not_a_token", &["submit", "ping"]).await;
    assert_eq!(bad_token.status.code(), Some(1));
    let stderr = text(&bad_token.stderr);
    assert!(
        stderr.contains("A valid bearer token is required") && stderr.contains("(unauthorized, HTTP 401)"),
        "{stderr}"
    );
    assert!(!stderr.contains('{'), "a problem, not its JSON: {stderr}");

    // Not JSON: refused before anything is sent.
    let not_json = run(&app, &token, &["submit", "ping", "--payload", "{nope"]).await;
    assert_eq!(not_json.status.code(), Some(1));
    assert!(text(&not_json.stderr).contains("the payload in --payload is not JSON"), "{}", text(&not_json.stderr));
    // A NUL character, an unknown operation, a queue that is not one: the server's words.
    let nul = run(&app, &token, &["submit", "ping", "--payload", r#"{"a":"x\u0000y"}"#]).await;
    assert!(text(&nul.stderr).contains("nul_character"), "{}", text(&nul.stderr));
    let unknown = run(&app, &token, &["submit", "no_such_operation"]).await;
    assert!(text(&unknown.stderr).contains("(unknown_operation, HTTP 422)"), "{}", text(&unknown.stderr));
    let queue = run(&app, &token, &["submit", "ping", "--queue", "../etc"]).await;
    assert_eq!(queue.status.code(), Some(1), "{}", text(&queue.stderr));
    // A payload file that is not there, a huge one that is not JSON.
    let missing = run(&app, &token, &["submit", "ping", "--payload", "@/nonexistent/payload.json"]).await;
    assert!(text(&missing.stderr).contains("cannot read the payload"), "{}", text(&missing.stderr));
    let scratch = ScratchDir::new("cli-payload");
    let huge = scratch.0.join("huge.json");
    std::fs::write(&huge, format!("{{\"a\":\"{}\"}}", "x".repeat(8 * 1024 * 1024))).unwrap();
    let too_big = run(&app, &token, &["submit", "ping", "--payload", &format!("@{}", huge.display())]).await;
    assert!(text(&too_big.stderr).contains("HTTP 413"), "{}", text(&too_big.stderr));
    // Not a job id; no server there.
    let not_id = run(&app, &token, &["status", "42"]).await;
    assert_eq!(not_id.status.code(), Some(2), "clap refuses it: {}", text(&not_id.stderr));
    let away = Command::new(BIN)
        .args(["ls", "--url", "http://127.0.0.1:9", "--token", &token])
        .env("YARDMASTER_CLIENT_CONFIG", "/nonexistent/yardmaster-client.toml")
        .output()
        .await
        .unwrap();
    assert_eq!(away.status.code(), Some(1));
    assert!(text(&away.stderr).contains("cannot reach http://127.0.0.1:9"), "{}", text(&away.stderr));
    assert_eq!(jobs_in_store(&app).await, before, "no job came of any of it");
}

async fn another_rooms_job_is_not_found(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "user": "eve", "role": "member", "rooms": ["elsewhere"] });
    let (status, created) = read(app.client.post(app.url("/admin/tokens")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{created}");
    let eve = created["token"].as_str().unwrap().to_owned();
    let (_, job) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
    let id = job["id"].as_str().unwrap();
    for args in [vec!["status", id], vec!["cancel", id], vec!["events", id, "--follow"]] {
        let output = run(&app, &eve, &args).await;
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        assert!(text(&output.stderr).contains("(job_not_found, HTTP 404)"), "{args:?}: {}", text(&output.stderr));
    }
    let (_, job) = app.get(&format!("/jobs/{id}")).await;
    assert_eq!(job["status"], "queued", "eve's cancel did nothing");
}

async fn the_client_file_names_server_and_token(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let scratch = ScratchDir::new("cli-config");
    let file = scratch.0.join("client.toml");
    std::fs::write(&file, format!("url = {:?}\ntoken = {:?}\n", app.address, app.admin_token)).unwrap();
    let from_file = |file: &Path, args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env_remove("YARDMASTER_URL")
            .env_remove("YARDMASTER_TOKEN")
            .env("YARDMASTER_CLIENT_CONFIG", file)
            .output()
    };
    let listed = from_file(&file, &["ls", "--json"]).await.unwrap();
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    assert!(json_of(&listed)["jobs"].is_array());
    // A flag wins over the file.
    let flagged = from_file(&file, &["ls", "--token", "ym_wrong"]).await.unwrap();
    assert!(text(&flagged.stderr).contains("HTTP 401"), "{}", text(&flagged.stderr));
    // A broken file says where and what.
    std::fs::write(&file, "url = [1\n").unwrap();
    let broken = from_file(&file, &["ls"]).await.unwrap();
    assert_eq!(broken.status.code(), Some(1));
    assert!(text(&broken.stderr).contains(&format!("client settings {}", file.display())), "{}", text(&broken.stderr));
    // No file there: the defaults (the server on this host's port 8080), not an error.
    let missing = scratch.0.join("missing.toml");
    let defaults = Command::new(BIN)
        .args(["ls", "--token", "ym_x"])
        .env_remove("YARDMASTER_URL")
        .env("YARDMASTER_CLIENT_CONFIG", &missing)
        .output()
        .await
        .unwrap();
    let said = text(&defaults.stderr);
    assert!(!said.contains("client settings"), "{said}");
    // Unreachable, or a server there refusing the made-up token: either way, that address.
    assert!(said.contains("cannot reach http://127.0.0.1:8080") || said.contains("HTTP 401"), "{said}");
    std::fs::write(&file, "url = \"ftp://x\"\n").unwrap();
    let scheme = from_file(&file, &["ls"]).await.unwrap();
    assert!(text(&scheme.stderr).contains("must start with http://"), "{}", text(&scheme.stderr));
}

async fn upload_waits_and_writes_the_archive(backend: Backend) {
    let uploads = yardmaster::config::UploadSettings { host_slots: 1, ..Default::default() };
    let app = TestApp::spawn_with(backend, TestOptions { uploads: Some(uploads), ..TestOptions::default() }).await;
    let token = app.admin_token.clone();
    let scratch = ScratchDir::new("cli-upload");
    let dir = scratch.0.join("job");
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("run.sh"), "#!/bin/sh\nmkdir -p out\ntr a-z A-Z < data/in.txt > out/upper.txt\n").unwrap();
    std::fs::write(dir.join("data/in.txt"), "hello yard").unwrap();
    let out = scratch.0.join("result.zip");
    let dir_arg = dir.display().to_string();
    let out_arg = out.display().to_string();
    let output = run(&app, &token, &["upload", &dir_arg, "--service", "default", "--wait", "--out", &out_arg]).await;
    assert_eq!(output.status.code(), Some(0), "{}\n{}", text(&output.stdout), text(&output.stderr));
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&out).unwrap()).unwrap();
    let mut upper = String::new();
    std::io::Read::read_to_string(&mut zip.by_name("out/upper.txt").unwrap(), &mut upper).unwrap();
    assert_eq!(upper, "HELLO YARD");
    // A directory without run.sh is refused here, before any upload.
    std::fs::remove_file(dir.join("run.sh")).unwrap();
    let before = jobs_in_store(&app).await;
    let refused = run(&app, &token, &["upload", &dir_arg, "--service", "default"]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stderr).contains("holds no run.sh"), "{}", text(&refused.stderr));
    assert_eq!(jobs_in_store(&app).await, before);
}

/// A server redeployed (SIGTERM, started again) while `--wait` follows a job: the command
/// resumes after the last event it printed and sees the job's end, with no event twice.
#[actix_rt::test]
async fn wait_goes_on_across_a_server_restart() {
    use crate::tokens_cli::{fresh_dir, Server};
    let dir = fresh_dir();
    let server = Server::start(&dir, &[]);
    let token = server.printed_token();
    server.wait_until_up().await;
    let port = server.port;
    let mut child = Command::new(BIN)
        .args(["submit", "ping", "--wait", "--url", &server.url(""), "--token", &token])
        .env("YARDMASTER_CLIENT_CONFIG", "/nonexistent/yardmaster-client.toml")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(DEADLINE, stderr.next_line()).await.unwrap().unwrap().unwrap();
    let id = first.split_whitespace().nth(1).unwrap().to_owned();
    // The stream is open once the first event is printed (this server runs no workers).
    let queued = tokio::time::timeout(DEADLINE, stdout.next_line()).await.unwrap().unwrap().unwrap();
    assert!(queued.contains("job.queued"), "{queued}");

    let _ = server.stop();
    let again = Server::start_on(&dir, port, &[]);
    again.wait_until_up().await;
    let admin = crate::helpers::client_with(&token);
    let cancelled = admin.post(again.url(&format!("/jobs/{id}/cancel"))).send().await.unwrap();
    assert_eq!(cancelled.status(), 200);

    let status = tokio::time::timeout(DEADLINE, child.wait()).await.expect("the command never saw the end").unwrap();
    let mut rest = Vec::new();
    while let Some(line) = stdout.next_line().await.unwrap() {
        rest.push(line);
    }
    assert_eq!(status.code(), Some(4), "{rest:?}");
    let names: Vec<&str> = rest.iter().filter_map(|line| line.split_whitespace().nth(2)).collect();
    assert_eq!(names, ["job.cancelled"], "each event once: {rest:?}");
    let _ = again.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

on_both_backends!(
    times_reach_the_job,
    dependencies_reach_the_job,
    schedules_are_managed_by_name,
    submit_wait_shows_events_and_the_final_bar,
    wait_exit_codes_tell_failed_from_cancelled,
    json_output_parses,
    listing_pages_with_a_cursor,
    errors_print_the_problem_and_change_nothing,
    another_rooms_job_is_not_found,
    the_client_file_names_server_and_token,
    upload_waits_and_writes_the_archive,
);

#[tokio::test]
async fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let output = Command::new(BIN).args(["completions", shell]).output().await.unwrap();
        assert_eq!(output.status.code(), Some(0));
        let script = text(&output.stdout);
        assert!(
            script.contains("submit") && script.contains("--wait"),
            "{shell}: {}",
            &script[..script.len().min(200)]
        );
    }
}
