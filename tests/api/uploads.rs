//! Upload-and-run jobs over real HTTP on both stores: uploads streamed to disk under their
//! service's limits, `run.sh` run in a sandbox whose whole process group dies with the run,
//! the ZIP of what it made, quotas per user and per service, and hostile uploads refused
//! without a byte written outside the upload store.

use std::collections::BTreeSet;
use std::io::Read as _;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde_json::{json, Value};
use yardmaster::config::{ServiceSettings, UploadSettings};

use crate::helpers::{client_with, eventually, read, Backend, TestApp, TestOptions};

/// One part of a multipart body: `(field name, file name, content)`.
type Part<'a> = (&'a str, Option<&'a str>, &'a [u8]);

const BOUNDARY: &str = "yardmaster-test-boundary-7d1f";

/// A multipart/form-data body made by hand, so a test can send any file name at all.
fn form(parts: &[Part<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, filename, content) in parts {
        body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        let mut disposition = format!("Content-Disposition: form-data; name=\"{name}\"").into_bytes();
        if let Some(filename) = filename {
            disposition.extend_from_slice(b"; filename=\"");
            disposition.extend_from_slice(filename.as_bytes());
            disposition.extend_from_slice(b"\"");
        }
        body.extend_from_slice(&disposition);
        body.extend_from_slice(b"\r\n\r\n");
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

async fn upload_with(client: &reqwest::Client, app: &TestApp, parts: &[Part<'_>]) -> (u16, Value) {
    let response = client
        .post(app.url("/uploads"))
        .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
        .body(form(parts))
        .send()
        .await
        .unwrap();
    read(response).await
}

/// Uploads `run.sh` (and `extra` files) for `service` as the admin; answers the job.
async fn upload_script(app: &TestApp, service: &str, script: &str, extra: &[(&str, &[u8])]) -> Value {
    let mut parts: Vec<Part<'_>> =
        vec![("service", None, service.as_bytes()), ("file", Some("run.sh"), script.as_bytes())];
    parts.extend(extra.iter().map(|(name, content)| ("file", Some(*name), *content)));
    let (status, job) = upload_with(&app.client, app, &parts).await;
    assert_eq!(status, 201, "{job}");
    job
}

/// The job once it has ended (long-polls `GET /jobs/{id}`).
async fn ended(app: &TestApp, id: &str) -> Value {
    eventually("job ended", Duration::from_secs(60), || async {
        let response =
            app.client.get(app.url(&format!("/jobs/{id}"))).header("Prefer", "wait=10").send().await.unwrap();
        let (status, job) = read(response).await;
        assert_eq!(status, 200, "{job}");
        let over = ["succeeded", "failed", "cancelled"].contains(&job["status"].as_str().unwrap());
        over.then_some(job)
    })
    .await
}

/// A file of a running job, once the script has written it.
async fn file_when_written(app: &TestApp, id: &str, name: &str) -> String {
    eventually(&format!("{name} written"), Duration::from_secs(30), || async {
        let response = app.client.get(app.url(&format!("/jobs/{id}/files/{name}"))).send().await.unwrap();
        if response.status() != 200 {
            return None;
        }
        let text = response.text().await.unwrap();
        text.ends_with('\n').then_some(text)
    })
    .await
}

/// The result archive: name → content.
async fn archive(app: &TestApp, id: &str) -> std::collections::BTreeMap<String, String> {
    let response = app.client.get(app.url(&format!("/jobs/{id}/result"))).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/zip");
    let bytes = response.bytes().await.unwrap();
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes.to_vec())).unwrap();
    let mut files = std::collections::BTreeMap::new();
    for at in 0..zip.len() {
        let mut entry = zip.by_index(at).unwrap();
        let mut text = String::new();
        entry.read_to_string(&mut text).unwrap();
        files.insert(entry.name().unwrap().into_owned(), text);
    }
    files
}

fn options(services: &[(&str, ServiceSettings)], host_slots: usize) -> TestOptions {
    let mut uploads = UploadSettings { host_slots, idle_timeout_seconds: 2, ..UploadSettings::default() };
    uploads.services.extend(services.iter().map(|(name, service)| (name.to_string(), service.clone())));
    TestOptions { uploads: Some(uploads), ..TestOptions::default() }
}

/// Whether any process is left in process group `pgid`, or is `pid`.
fn alive(pgid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // pid (comm) state ppid pgrp …; comm may hold spaces, so read after the last ')'.
        let fields: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        let (state, pgrp) = (fields.first().copied(), fields.get(2).and_then(|pgrp| pgrp.parse::<i32>().ok()));
        if (pgrp == Some(pgid) || pid == pgid) && state != Some("Z") {
            found.push(pid);
        }
    }
    found
}

/// Waits until nothing of group `pgid` is left; panics with what is.
async fn group_gone(pgid: i32) {
    eventually("no process of the run survives", Duration::from_secs(10), || async {
        alive(pgid).is_empty().then_some(())
    })
    .await;
}

/// A script that starts a background child, records its process group, and waits forever.
const FOREVER: &str = "sleep 1000 &\necho $$ > pgid\nwait\n";

async fn an_upload_runs_and_its_zip_holds_exactly_what_it_made(backend: Backend) {
    let app = TestApp::spawn_with(backend, options(&[], 2)).await;
    let script = "set -e\nmkdir out\ncat data.txt | tr a-z A-Z > out/upper.txt\necho made > made.txt\n\
                  ln -s /etc/passwd leak\necho to-stdout\necho to-stderr >&2\n";
    let job = upload_script(&app, "default", script, &[("data.txt", b"hello\n"), ("./nested//in.txt", b"x")]).await;
    assert_eq!(job["operation"], "run_script");
    assert_eq!(job["service"], "default");
    assert_eq!(job["payload"]["files"].as_array().unwrap().len(), 3, "{job}");
    let id = job["id"].as_str().unwrap();
    let job = ended(&app, id).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["result"]["exit_code"], 0);
    assert_eq!(job["result"]["skipped"], json!(["leak"]), "a link is never followed: {job}");
    let files = archive(&app, id).await;
    let names: BTreeSet<&str> = files.keys().map(String::as_str).collect();
    let expected = BTreeSet::from(["out/upper.txt", "made.txt", ".yardmaster/stdout.txt", ".yardmaster/stderr.txt"]);
    assert_eq!(names, expected, "the outputs and logs, not the inputs, not the link");
    assert_eq!(files["out/upper.txt"], "HELLO\n");
    assert_eq!(files[".yardmaster/stdout.txt"], "to-stdout\n");
    assert_eq!(files[".yardmaster/stderr.txt"], "to-stderr\n");
    assert!(!files.values().any(|content| content.contains("root:")), "no /etc/passwd content");
    // A file of the run, whole and by range; the link is not served.
    let url = app.url(&format!("/jobs/{id}/files/out/upper.txt"));
    let response = app.client.get(&url).header("Range", "bytes=1-3").send().await.unwrap();
    assert_eq!(response.status(), 206);
    assert_eq!(response.headers()["content-range"], "bytes 1-3/6");
    assert_eq!(response.text().await.unwrap(), "ELL");
    let (status, body) = app.get(&format!("/jobs/{id}/files/leak")).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("file_not_found")), "{body}");
    let (status, body) = app.get(&format!("/jobs/{id}/files/..%2F..%2Fetc%2Fpasswd")).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("path_traversal")), "{body}");
    let response = app.client.get(&url).header("Range", "bytes=6-").send().await.unwrap();
    assert_eq!(response.status(), 416);
    let names: Vec<String> =
        app.events(id).await.iter().map(|event| event["event"].as_str().unwrap().to_owned()).collect();
    assert!(names.contains(&"script.exited".to_owned()), "{names:?}");
}

async fn a_failing_script_reports_its_exit_code_and_stderr(backend: Backend) {
    let app = TestApp::spawn_with(backend, options(&[], 2)).await;
    let job = upload_script(&app, "default", "echo partial > part.txt\necho 'it broke here' >&2\nexit 3\n", &[]).await;
    let job = ended(&app, job["id"].as_str().unwrap()).await;
    assert_eq!(job["status"], "failed");
    assert_eq!(job["error_code"], "ScriptFailed");
    let message = job["error_message"].as_str().unwrap();
    assert!(message.contains("code 3") && message.contains("it broke here"), "{message}");
    let files = archive(&app, job["id"].as_str().unwrap()).await;
    assert_eq!(files["part.txt"], "partial\n", "a failed run's outputs and logs come back too");
}

async fn limits_fail_the_run_with_a_clear_error(backend: Backend) {
    let small = ServiceSettings { file_size_bytes: 1 << 20, memory_bytes: 256 << 20, ..ServiceSettings::default() };
    let app = TestApp::spawn_with(backend, options(&[("small", small)], 2)).await;
    let big = upload_script(&app, "small", "head -c 3000000 /dev/zero > big\n", &[]).await;
    let greedy = upload_script(&app, "small", "python3 -c 'x = bytearray(1 << 30)'\n", &[]).await;
    let big = ended(&app, big["id"].as_str().unwrap()).await;
    assert_eq!(big["error_code"], "FileSizeLimit", "{big}");
    assert!(big["error_message"].as_str().unwrap().contains("1048576 bytes"), "{big}");
    let greedy = ended(&app, greedy["id"].as_str().unwrap()).await;
    assert_eq!(greedy["error_code"], "MemoryLimit", "{greedy}");
}

async fn cancel_and_timeout_kill_the_whole_process_group(backend: Backend) {
    let quick = ServiceSettings { timeout_seconds: 2, ..ServiceSettings::default() };
    let app = TestApp::spawn_with(backend, options(&[("quick", quick)], 2)).await;
    let cancelled = upload_script(&app, "default", FOREVER, &[]).await;
    let timed = upload_script(&app, "quick", FOREVER, &[]).await;
    let (cancelled, timed) = (cancelled["id"].as_str().unwrap(), timed["id"].as_str().unwrap());
    let cancelled_group: i32 = file_when_written(&app, cancelled, "pgid").await.trim().parse().unwrap();
    let timed_group: i32 = file_when_written(&app, timed, "pgid").await.trim().parse().unwrap();
    assert!(alive(cancelled_group).len() >= 2, "run.sh and its child run");
    let (status, _) = app.post(&format!("/jobs/{cancelled}/cancel")).await;
    assert_eq!(status, 200);
    group_gone(cancelled_group).await;
    let timed_job = ended(&app, timed).await;
    assert_eq!(timed_job["error_code"], "ScriptTimeout", "{timed_job}");
    group_gone(timed_group).await;
}

/// Options under which only the cancel path can stop a run: the heartbeat, which would
/// find the run cancelled too, comes after ten minutes.
fn no_heartbeat(options: TestOptions) -> TestOptions {
    TestOptions { heartbeat_ms: 600_000, lease_ms: 1_200_000, ..options }
}

/// Uploads a script that runs until stopped, cancels it through `api` once it runs, and
/// waits until its processes are gone.
async fn cancel_kills_the_run(api: &TestApp) {
    let job = upload_script(api, "default", FOREVER, &[]).await;
    let id = job["id"].as_str().unwrap();
    let group: i32 = file_when_written(api, id, "pgid").await.trim().parse().unwrap();
    let (status, _) = api.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!(status, 200);
    group_gone(group).await;
}

async fn a_cancel_stops_the_script_at_once(backend: Backend) {
    let app = TestApp::spawn_with(backend, no_heartbeat(options(&[], 2))).await;
    cancel_kills_the_run(&app).await;
}

/// The API in one process, the script host in another (on one PostgreSQL store and one
/// upload directory): the cancel reaches the run through the store's notification.
#[actix_rt::test]
async fn a_cancel_made_by_another_process_stops_the_script_on_postgres() {
    let api = TestApp::spawn_with(Backend::Postgres, TestOptions { workers: false, ..options(&[], 0) }).await;
    let beside = Some((api.store_url.clone(), api.uploads.0.clone()));
    let _host = TestApp::spawn_with(Backend::Postgres, no_heartbeat(TestOptions { beside, ..options(&[], 2) })).await;
    cancel_kills_the_run(&api).await;
}

async fn quotas_hold_jobs_and_serve_users_in_turn(backend: Backend) {
    let trio = ServiceSettings { per_user: 2, total: 3, ..ServiceSettings::default() };
    let app = TestApp::spawn_with(backend, options(&[("trio", trio)], 4)).await;
    let bob = app.member("bob").await;
    let bob_upload = || async {
        let parts: Vec<Part<'_>> = vec![("service", None, b"trio"), ("file", Some("run.sh"), FOREVER.as_bytes())];
        let (status, job) = upload_with(&bob, &app, &parts).await;
        assert_eq!(status, 201, "{job}");
        assert_eq!(job["submitted_by"], "bob");
        job["id"].as_str().unwrap().to_owned()
    };
    let mut alice = Vec::new();
    for at in 0..4 {
        alice.push(upload_script(&app, "trio", FOREVER, &[]).await["id"].as_str().unwrap().to_owned());
        if at < 2 {
            app.wait_for_status(&alice[at], "running").await;
        }
    }
    // Alice is at her quota; the service is not: bob's first job runs, alice's third waits.
    let b1 = bob_upload().await;
    app.wait_for_status(&b1, "running").await;
    let (_, third) = app.get(&format!("/jobs/{}", alice[2])).await;
    assert_eq!(third["status"], "queued", "alice has 2 of 2 runs: {third}");
    let events = app.events(&alice[2]).await;
    let waiting = events.iter().find(|event| event["event"] == "job.waiting_for_quota").expect("the wait is explained");
    assert_eq!((waiting["fields"]["user_ahead"].as_u64(), waiting["fields"]["per_user"].as_u64()), (Some(2), Some(2)));
    let first = app.events(&alice[0]).await;
    assert!(!first.iter().any(|event| event["event"] == "job.waiting_for_quota"), "the first runs at once: {first:?}");
    // The service is full now (3 of 3): bob's second waits too.
    let b2 = bob_upload().await;
    // A freed slot goes to the user with fewer runs, the longest waiting on a tie.
    for (stop, next, still) in [(&alice[0], &alice[2], &b2), (&b1, &b2, &alice[3])] {
        let group: i32 = file_when_written(&app, stop, "pgid").await.trim().parse().unwrap();
        let (status, _) = app.post(&format!("/jobs/{stop}/cancel")).await;
        assert_eq!(status, 200);
        app.wait_for_status(next, "running").await;
        let (_, waiting) = app.get(&format!("/jobs/{still}")).await;
        assert_eq!(waiting["status"], "queued", "3 of 3 run: {waiting}");
        group_gone(group).await;
    }
    let (_, last) = app.get(&format!("/jobs/{}", alice[3])).await;
    assert_eq!(last["queue_position"], 1, "{last}");
    for id in alice.iter().chain([&b1, &b2]) {
        app.post(&format!("/jobs/{id}/cancel")).await;
    }
}

/// Every refused upload: its problem code, and nothing left in the store or the table.
async fn hostile_uploads_are_refused_and_leave_nothing(backend: Backend) {
    let tiny = ServiceSettings { max_total_bytes: 64 * 1024, max_files: 100, ..ServiceSettings::default() };
    let app = TestApp::spawn_with(backend, options(&[("tiny", tiny)], 0)).await;
    let run: Part<'_> = ("file", Some("run.sh"), b"true\n");
    let cases: Vec<(Vec<Part<'_>>, u16, &str)> = vec![
        (vec![("service", None, b"default"), ("file", Some("../x"), b"x"), run], 400, "path_traversal"),
        (vec![("service", None, b"default"), ("file", Some("a/../../x"), b"x"), run], 400, "path_traversal"),
        (vec![("service", None, b"default"), ("file", Some("/etc/x"), b"x"), run], 400, "absolute_path"),
        // A raw NUL breaks the part's header; a tab reaches the name check (control characters).
        (vec![("service", None, b"default"), ("file", Some("a\0b"), b"x"), run], 400, "invalid_multipart"),
        (vec![("service", None, b"default"), ("file", Some("a\tb"), b"x"), run], 400, "invalid_file_name"),
        (vec![("service", None, b"default"), ("file", Some("NUL.txt"), b"x"), run], 400, "invalid_file_name"),
        (vec![("service", None, b"default"), run, run], 400, "duplicate_file"),
        (
            vec![("service", None, b"default"), ("file", Some("a"), b"x"), ("file", Some("a/b"), b"x")],
            400,
            "duplicate_file",
        ),
        (vec![("file", Some("run.sh"), b"true")], 400, "invalid_multipart"),
        (vec![("service", None, b"nope"), run], 422, "unknown_service"),
        (vec![("service", None, b"default"), ("file", Some("other.sh"), b"x")], 422, "missing_script"),
        (vec![("service", None, b"def\0ault"), run], 422, "nul_character"),
        (vec![("service", None, b"default"), ("colour", None, b"blue"), run], 400, "invalid_multipart"),
    ];
    for (parts, status, code) in cases {
        let (got, body) = upload_with(&app.client, &app, &parts).await;
        assert_eq!((got, body["code"].as_str()), (status, Some(code)), "{body}");
    }
    // Not multipart at all.
    let response = app.client.post(app.url("/uploads")).json(&json!({ "service": "default" })).send().await.unwrap();
    let (status, body) = read(response).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_multipart")), "{body}");
    // 10,000 tiny files against a service that takes 100.
    let names: Vec<String> = (0..10_000).map(|at| format!("f{at}")).collect();
    let mut parts: Vec<Part<'_>> = vec![("service", None, b"tiny"), run];
    parts.extend(names.iter().map(|name| ("file", Some(name.as_str()), b"x".as_slice())));
    let (status, body) = upload_with(&app.client, &app, &parts).await;
    assert_eq!((status, body["code"].as_str()), (413, Some("too_many_files")), "{body}");
    // A body over the limit, sent slowly: refused once the limit passes, long before its end.
    let head = form(&[("service", None, b"tiny"), run]);
    let head = head[..head.len() - format!("--{BOUNDARY}--\r\n").len()].to_vec();
    let part = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big\"\r\n\r\n");
    let mut chunks: Vec<Result<Vec<u8>, std::io::Error>> = vec![Ok(head), Ok(part.into_bytes())];
    chunks.extend((0..1000).map(|_| Ok(vec![b'y'; 8 * 1024])));
    let slow = futures_util::stream::iter(chunks).then(|chunk| async move {
        tokio::time::sleep(Duration::from_millis(5)).await;
        chunk
    });
    let started = Instant::now();
    let response = app
        .client
        .post(app.url("/uploads"))
        .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
        .body(reqwest::Body::wrap_stream(slow))
        .send()
        .await;
    let response = response.expect("the refusal is answered, not a reset connection");
    let (status, body) = read(response).await;
    assert_eq!((status, body["code"].as_str()), (413, Some("upload_too_large")), "{body}");
    assert!(started.elapsed() < Duration::from_secs(4), "refused at the limit, not at the end of the body");
    // Nothing of any of them: no staging, no job directory, no row.
    let jobs = app.uploads.0.join("jobs");
    let left: Vec<_> =
        std::fs::read_dir(&jobs).map(|entries| entries.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "files left behind: {left:?}");
    let (_, list) = app.get("/jobs?limit=10").await;
    assert_eq!(list["jobs"], json!([]), "{list}");
}

async fn another_rooms_job_and_a_plain_job_have_no_files(backend: Backend) {
    let app = TestApp::spawn_with(backend, options(&[], 0)).await;
    let job = upload_script(&app, "default", "true\n", &[]).await;
    let id = job["id"].as_str().unwrap();
    let (status, created) = read(
        app.client
            .post(app.url("/admin/tokens"))
            .json(&json!({ "user": "eve", "role": "member", "rooms": ["elsewhere"] }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201);
    let eve = client_with(created["token"].as_str().unwrap());
    for path in [format!("/jobs/{id}/result"), format!("/jobs/{id}/files/run.sh")] {
        let (status, body) = read(eve.get(app.url(&path)).send().await.unwrap()).await;
        assert_eq!((status, body["code"].as_str()), (404, Some("job_not_found")), "{path}: {body}");
    }
    // Not run yet (no script host): 202 with the job; the uploaded file is readable.
    let response = app.client.get(app.url(&format!("/jobs/{id}/result"))).send().await.unwrap();
    assert_eq!(response.status(), 202);
    let response = app.client.get(app.url(&format!("/jobs/{id}/files/run.sh"))).send().await.unwrap();
    assert_eq!(response.text().await.unwrap(), "true\n");
    let (_, plain) = app.submit(json!({ "operation": "count" })).await;
    let (status, body) = app.get(&format!("/jobs/{}/result", plain["id"].as_str().unwrap())).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("not_an_upload")), "{body}");
    let (status, body) = app.submit(json!({ "operation": "run_script", "payload": {} })).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("invalid_payload")), "{body}");
}

/// SIGTERM to the worker: once the grace (1 s here) is over, the run is requeued for another
/// worker, as any job, and its whole process group is killed before the process exits.
async fn a_redeploy_requeues_the_run_and_kills_its_processes(backend: Backend) {
    let options = TestOptions { handle_signals: true, ..options(&[], 2) };
    let mut app = TestApp::spawn_with(backend, options).await;
    let job = upload_script(&app, "default", FOREVER, &[]).await;
    let id = job["id"].as_str().unwrap();
    let group: i32 = file_when_written(&app, id, "pgid").await.trim().parse().unwrap();
    assert!(alive(group).len() >= 2, "run.sh and its child run");
    // Each test runs in a process of its own (nextest), whose SIGTERM the app's guard owns.
    // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
    let code = tokio::time::timeout(Duration::from_secs(30), &mut app.stopped).await;
    assert_eq!(code.expect("the app stops within 30 s").unwrap().unwrap(), 143);
    group_gone(group).await;
    let job = app.store.get(id.parse().unwrap()).await.unwrap().unwrap();
    assert_eq!(job.status.as_str(), "queued", "requeued for another worker: {job:?}");
    let events: Vec<String> = app.store.events(job.id, None, 100).await.unwrap().into_iter().map(|e| e.event).collect();
    assert!(events.contains(&"job.requeued_on_shutdown".to_owned()), "{events:?}");
}

/// Processes whose environment says they belong to job `id` (the sandbox sets it).
fn processes_of(id: &str) -> Vec<i32> {
    let needle = format!("YARDMASTER_JOB_ID={id}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<i32>().ok()) else { continue };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .is_ok_and(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')));
        if !zombie && environ.split(|byte| *byte == 0).any(|pair| pair == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// A child process killed when the test ends, however it ends.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A script host on "another host": its own directory, nothing shared with the server but
/// HTTP. It fetches the upload, runs it, sends the archive back; a cancel reaches it through
/// its heartbeat and kills the run's processes; SIGTERM hands its runs back.
async fn a_script_host_elsewhere_runs_jobs_over_http(backend: Backend) {
    // Plain beats a hundred seconds apart: a cancel must come through the held beat.
    let remote = yardmaster::config::RemoteSettings { worker_ttl_seconds: 300, ..Default::default() };
    let app = TestApp::spawn_with(backend, TestOptions { remote: Some(remote), ..options(&[], 0) }).await;
    let (status, created) = read(
        app.client
            .post(app.url("/admin/tokens"))
            .json(&json!({ "user": "far-host", "role": "worker", "rooms": ["default"] }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let elsewhere = crate::helpers::ScratchDir::new("script-host");
    let host = std::process::Command::new(env!("CARGO_BIN_EXE_yardmaster"))
        .args(["script-host", "--url", &app.address, "--service", "default", "--slots", "2", "--grace-seconds", "1"])
        .arg("--dir")
        .arg(&elsewhere.0)
        .env("YARDMASTER_TOKEN", created["token"].as_str().unwrap())
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut host = Reaped(host);
    let data = vec![b'z'; 3 * 1024 * 1024];
    let job = upload_script(
        &app,
        "default",
        "mkdir out
wc -c < data.bin > out/size.txt
",
        &[("data.bin", &data)],
    )
    .await;
    let id = job["id"].as_str().unwrap();
    let done = ended(&app, id).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    assert!(done["owner"].as_str().unwrap().starts_with("remote:"), "run elsewhere: {done}");
    let files = archive(&app, id).await;
    assert_eq!(files["out/size.txt"].trim(), "3145728", "the upload arrived whole: {files:?}");
    // A cancel reaches the host through its held heartbeat at once, and its run's processes die.
    let forever = upload_script(&app, "default", FOREVER, &[]).await;
    let forever = forever["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&forever, "running").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while processes_of(&forever).len() < 2 {
        assert!(Instant::now() < deadline, "the run never started on the host");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, _) = app.post(&format!("/jobs/{forever}/cancel")).await;
    assert_eq!(status, 200);
    while !processes_of(&forever).is_empty() {
        assert!(Instant::now() < deadline, "the host's run survives its cancel: {:?}", processes_of(&forever));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // SIGTERM: a run under way is handed back, and the host exits 143.
    let last = upload_script(&app, "default", FOREVER, &[]).await;
    let last = last["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&last, "running").await;
    // SAFETY: kill(2) on the child we started.
    unsafe { libc::kill(host.0.id() as i32, libc::SIGTERM) };
    let code = actix_rt::task::spawn_blocking(move || {
        let status = host.0.wait();
        (host, status)
    });
    let (_host, status) = tokio::time::timeout(Duration::from_secs(20), code).await.unwrap().unwrap();
    assert_eq!(status.unwrap().code(), Some(143));
    let job = app.wait_for_status(&last, "queued").await;
    assert_eq!(job["attempts"], 1, "{job}");
    eventually("the host's run is gone after its exit", Duration::from_secs(10), || async {
        processes_of(&last).is_empty().then_some(())
    })
    .await;
}

/// The endpoints of script hosts elsewhere refuse other workers, other runs, other tokens
/// and bad pieces, and serve and take what they should.
async fn task_files_and_results_refuse_strangers(backend: Backend) {
    let app = TestApp::spawn_with(backend, options(&[], 0)).await;
    let worker_client = |user: &'static str| {
        let app = &app;
        async move {
            let body = json!({ "user": user, "role": "worker", "rooms": ["default"] });
            let (status, created) =
                read(app.client.post(app.url("/admin/tokens")).json(&body).send().await.unwrap()).await;
            assert_eq!(status, 201, "{created}");
            let client = client_with(created["token"].as_str().unwrap());
            let (status, worker) =
                read(client.post(app.url("/workers")).json(&json!({ "services": ["default"] })).send().await.unwrap())
                    .await;
            assert_eq!(status, 201, "{worker}");
            assert_eq!(worker["services"], json!(["default"]));
            (client, worker["id"].as_str().unwrap().to_owned())
        }
    };
    let (a, a_id) = worker_client("host-a").await;
    let (b, b_id) = worker_client("host-b").await;
    let (status, body) =
        read(a.post(app.url("/workers")).json(&json!({ "services": ["nope"] })).send().await.unwrap()).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("unknown_service")), "{body}");
    let job = upload_script(&app, "default", "true\n", &[]).await;
    let id = job["id"].as_str().unwrap();
    let (status, claimed) =
        read(a.post(app.url("/scripts/claim")).json(&json!({ "worker_id": a_id })).send().await.unwrap()).await;
    assert_eq!(status, 200, "{claimed}");
    assert_eq!(claimed["task"]["id"], id);
    assert_eq!(claimed["limits"]["timeout_seconds"], 3600);
    let file = |client: &reqwest::Client, worker: &str, attempt: i32, path: &str| {
        let url = app.url(&format!("/tasks/{id}/files/{path}?worker_id={worker}&attempt={attempt}"));
        let request = client.get(url);
        async move { read(request.send().await.unwrap()).await }
    };
    let cases = [
        (&b, b_id.as_str(), 1, "run.sh", 403, "task_forbidden"),
        (&a, a_id.as_str(), 2, "run.sh", 409, "invalid_transition"),
        (&a, b_id.as_str(), 1, "run.sh", 403, "worker_forbidden"),
        (&a, a_id.as_str(), 1, "..%2Fx", 400, "path_traversal"),
        (&a, a_id.as_str(), 1, "a%00b", 400, "invalid_file_name"),
        (&a, a_id.as_str(), 1, "missing.txt", 404, "file_not_found"),
    ];
    for (client, worker, attempt, path, status, code) in cases {
        let (got, body) = file(client, worker, attempt, path).await;
        assert_eq!((got, body["code"].as_str()), (status, Some(code)), "{path}: {body}");
    }
    let url = app.url(&format!("/tasks/{id}/files/run.sh?worker_id={a_id}&attempt=1"));
    let response = a.get(&url).header("Range", "bytes=0-1").send().await.unwrap();
    assert_eq!((response.status().as_u16(), response.text().await.unwrap()), (206, "tr".to_owned()));
    let put = |client: &reqwest::Client, worker: &str, range: Option<&str>, body: Vec<u8>| {
        let url = app.url(&format!("/tasks/{id}/result?worker_id={worker}&attempt=1"));
        let mut request = client.put(url).body(body);
        if let Some(range) = range {
            request = request.header("Content-Range", range.to_owned());
        }
        async move { read(request.send().await.unwrap()).await }
    };
    let (status, body) = put(&b, &b_id, None, b"x".to_vec()).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("task_forbidden")), "{body}");
    let (status, body) = put(&a, &a_id, Some("bytes nonsense"), b"x".to_vec()).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("invalid_request")), "{body}");
    let (status, body) = put(&a, &a_id, Some("bytes 0-0/99999999999999"), b"x".to_vec()).await;
    assert_eq!((status, body["code"].as_str()), (413, Some("upload_too_large")), "{body}");
    let (status, body) = put(&a, &a_id, Some("bytes 0-3/8"), b"abcd".to_vec()).await;
    assert_eq!((status, body["received"].as_u64(), body["complete"].as_bool()), (200, Some(4), Some(false)), "{body}");
    let (status, body) = put(&a, &a_id, Some("bytes 6-7/8"), b"gh".to_vec()).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("invalid_request")), "a gap: {body}");
    let progress = app.url(&format!("/tasks/{id}/result?worker_id={a_id}&attempt=1"));
    let (_, body) = read(a.get(progress).send().await.unwrap()).await;
    assert_eq!(body["received"], 4, "{body}");
    let (status, body) = put(&a, &a_id, Some("bytes 4-7/8"), b"efgh".to_vec()).await;
    assert_eq!((status, body["complete"].as_bool()), (200, Some(true)), "{body}");
    let stored = std::fs::read(app.uploads.0.join("jobs").join(id).join("result.zip")).unwrap();
    assert_eq!(stored, b"abcdefgh", "the pieces, in order, put in place whole");
    let pieces = app.uploads.0.join("runs").join(id).join("result.zip.part-1");
    assert!(!pieces.exists(), "the pieces' file became the result");
}

on_both_backends!(
    task_files_and_results_refuse_strangers,
    a_script_host_elsewhere_runs_jobs_over_http,
    a_redeploy_requeues_the_run_and_kills_its_processes,
    an_upload_runs_and_its_zip_holds_exactly_what_it_made,
    a_failing_script_reports_its_exit_code_and_stderr,
    limits_fail_the_run_with_a_clear_error,
    cancel_and_timeout_kill_the_whole_process_group,
    a_cancel_stops_the_script_at_once,
    quotas_hold_jobs_and_serve_users_in_turn,
    hostile_uploads_are_refused_and_leave_nothing,
    another_rooms_job_and_a_plain_job_have_no_files,
);
