//! The lifecycle over HTTP: success, failure, progress, cancel, retry, idempotency, listing.

use serde_json::json;

use crate::helpers::{eventually, Backend, TestApp, TestOptions};
use yardmaster::dispatch::encode_job_message;

async fn ping_succeeds_with_its_events(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (code, job) = app.submit(json!({ "operation": "ping" })).await;
    assert_eq!(code, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let done = app.wait_for_status(id, "succeeded").await;
    assert_eq!(done["result"], json!({ "pong": true }));
    assert_eq!(done["attempts"], 1);
    assert!(done["finished_at"].is_string() && done["leased_until"].is_null());
    assert_eq!(app.event_names(id).await, ["job.queued", "job.started", "job.succeeded"]);
}

async fn fail_records_its_error_class(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let payload = json!({ "error_class": "ValueError", "message": "bad value" });
    let (code, job) = app.submit(json!({ "operation": "fail", "payload": payload })).await;
    assert_eq!(code, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let failed = app.wait_for_status(id, "failed").await;
    assert_eq!(failed["error_code"], "ValueError");
    assert_eq!(failed["error_message"], "bad value");
    assert_eq!(app.event_names(id).await, ["job.queued", "job.started", "job.failed"]);
}

async fn sleep_reports_progress(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, job) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 0.03, "steps": 3 } })).await;
    let id = job["id"].as_str().unwrap();
    let done = app.wait_for_status(id, "succeeded").await;
    assert_eq!((done["progress_current"].as_i64(), done["progress_total"].as_i64()), (Some(3), Some(3)));
    let progress = app.event_names(id).await.into_iter().filter(|name| name == "job.progress").count();
    assert_eq!(progress, 3);
}

async fn cancel_before_claim_is_never_executed(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 1)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    // "parked" has no consumer, so the job stays QUEUED until cancelled.
    let (_, job) = app.submit(json!({ "operation": "count", "queue": "parked" })).await;
    let id = job["id"].as_str().unwrap();
    let (code, cancelled) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!((code, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");

    // A stale delivery of the cancelled job reaches a worker, followed by a sentinel job;
    // with one job at a time, the sentinel finishing means the stale one was handled.
    let stale = encode_job_message(id.parse().unwrap());
    app.transport.publish("default", stale).await.unwrap();
    let (_, sentinel) = app.submit(json!({ "operation": "ping" })).await;
    app.wait_for_status(sentinel["id"].as_str().unwrap(), "succeeded").await;

    let (_, after) = app.get(&format!("/jobs/{id}")).await;
    assert_eq!(after["status"], "cancelled");
    assert_eq!(after["attempts"], 0);
    assert_eq!(app.count("SELECT COUNT(*) FROM execution_log").await, 0);
    assert_eq!(app.event_names(id).await, ["job.queued", "job.cancelled"]);
}

async fn cancel_of_a_finished_job_is_a_no_op(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, job) = app.submit(json!({ "operation": "ping" })).await;
    let id = job["id"].as_str().unwrap();
    app.wait_for_status(id, "succeeded").await;
    let (code, after) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!((code, after["status"].as_str()), (200, Some("succeeded")), "{after}");
    assert_eq!(app.event_names(id).await, ["job.queued", "job.started", "job.succeeded"]);
}

async fn retry_of_a_succeeded_job_is_an_invalid_transition(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, job) = app.submit(json!({ "operation": "ping" })).await;
    let id = job["id"].as_str().unwrap();
    app.wait_for_status(id, "succeeded").await;
    let response = app.client.post(app.url(&format!("/jobs/{id}/retry"))).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 409);
    assert_eq!(response.headers()["content-type"], "application/problem+json");
    let problem: serde_json::Value = response.json().await.unwrap();
    assert_eq!(problem["code"], "invalid_transition");
    assert_eq!(problem["status"], 409);
    assert_eq!(app.wait_for_status(id, "succeeded").await["attempts"], 1);
}

async fn retry_of_a_failed_job_runs_it_again(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, job) = app.submit(json!({ "operation": "fail" })).await;
    let id = job["id"].as_str().unwrap();
    app.wait_for_status(id, "failed").await;
    let (code, retried) = app.post(&format!("/jobs/{id}/retry")).await;
    assert_eq!(code, 200, "{retried}");
    assert!(retried["error_code"].is_null());
    eventually("second run finished", std::time::Duration::from_secs(30), || async {
        (app.event_names(id).await.len() >= 6).then_some(())
    })
    .await;
    let names = app.event_names(id).await;
    assert_eq!(names[3..], ["job.retried", "job.started", "job.failed"]);
    assert_eq!(app.wait_for_status(id, "failed").await["attempts"], 2);
}

/// `POST /jobs/{id}/retry` of a CANCELLED job queues it again, and it runs.
async fn retry_of_a_cancelled_job_runs_it_again(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 1)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    // One job at a time: while the blocker runs, the job waits QUEUED and is cancelled so.
    let (_, blocker) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 60, "steps": 600 } })).await;
    let blocker = blocker["id"].as_str().unwrap();
    app.wait_for_status(blocker, "running").await;
    let (_, job) = app.submit(json!({ "operation": "count" })).await;
    let id = job["id"].as_str().unwrap();
    let (_, cancelled) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");

    let (code, retried) = app.post(&format!("/jobs/{id}/retry")).await;
    assert_eq!((code, retried["status"].as_str()), (200, Some("queued")), "{retried}");
    app.post(&format!("/jobs/{blocker}/cancel")).await;
    let done = app.wait_for_status(id, "succeeded").await;
    assert_eq!(done["attempts"], 1, "{done}");
    assert_eq!(app.count(&format!("SELECT COUNT(*) FROM execution_log WHERE job_id = '{id}'")).await, 1);
    let names = app.event_names(id).await;
    assert_eq!(names, ["job.queued", "job.cancelled", "job.retried", "job.started", "job.succeeded"]);
}

/// `GET /jobs/{id}/events` pages with `limit` and `after` = the previous `next_after`: the
/// pages walk the whole log in order, none repeated or skipped, and only this job's.
async fn events_page_through_the_whole_log(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let sleep = json!({ "operation": "sleep", "payload": { "seconds": 0.2, "steps": 20 } });
    let (_, job) = app.submit(sleep.clone()).await;
    // A second job writing at the same time: its events interleave in the table.
    let (_, other) = app.submit(sleep).await;
    let id = job["id"].as_str().unwrap();
    app.wait_for_status(id, "succeeded").await;
    app.wait_for_status(other["id"].as_str().unwrap(), "succeeded").await;
    let whole: Vec<i64> = app.events(id).await.iter().map(|event| event["id"].as_i64().unwrap()).collect();
    assert_eq!(whole.len(), 23, "queued, started, 20 × progress, succeeded");

    let (mut walked, mut path) = (Vec::new(), format!("/jobs/{id}/events?limit=5"));
    loop {
        let (code, page) = app.get(&path).await;
        assert_eq!(code, 200, "{page}");
        let events = page["events"].as_array().unwrap();
        assert!(events.len() <= 5, "{page}");
        assert!(events.iter().all(|event| event["job_id"] == id), "{page}");
        if events.is_empty() {
            assert_eq!(page["next_after"].as_i64(), walked.last().copied(), "an empty page keeps the cursor");
            break;
        }
        walked.extend(events.iter().map(|event| event["id"].as_i64().unwrap()));
        assert!(walked.len() <= whole.len(), "pages repeat events: {walked:?}");
        path = format!("/jobs/{id}/events?limit=5&after={}", page["next_after"]);
    }
    assert_eq!(walked, whole);
}

async fn an_idempotency_key_returns_the_same_job(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "operation": "count", "payload": { "n": 1 }, "idempotency_key": "order-42" });
    let (first_code, first) = app.submit(body.clone()).await;
    let (second_code, second) = app.submit(body).await;
    assert_eq!((first_code, second_code), (201, 200));
    assert_eq!(first["id"], second["id"]);
    app.wait_for_status(first["id"].as_str().unwrap(), "succeeded").await;
    assert_eq!(app.count("SELECT COUNT(*) FROM execution_log").await, 1);
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 1);

    let header_submit = app
        .client
        .post(app.url("/jobs"))
        .header("Idempotency-Key", "order-42")
        .json(&json!({ "operation": "count", "payload": { "n": 2 } }))
        .send()
        .await
        .unwrap();
    let (code, problem) = crate::helpers::read(header_submit).await;
    assert_eq!((code, problem["code"].as_str()), (409, Some("idempotency_conflict")), "{problem}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 1);
}

async fn listing_is_newest_first_with_a_cursor(backend: Backend) {
    let options = TestOptions { workers: false, ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let mut submitted = Vec::new();
    for queue in ["default", "default", "parked", "default", "parked"] {
        let (_, job) = app.submit(json!({ "operation": "ping", "queue": queue })).await;
        submitted.push(job["id"].as_str().unwrap().to_owned());
    }
    let mut seen = Vec::new();
    let mut path = "/jobs?limit=2".to_owned();
    for expected_len in [2, 2, 1] {
        let (code, page) = app.get(&path).await;
        assert_eq!(code, 200, "{page}");
        let jobs = page["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), expected_len);
        seen.extend(jobs.iter().map(|job| job["id"].as_str().unwrap().to_owned()));
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/jobs?limit=2&cursor={cursor}"),
            None => assert_eq!(expected_len, 1),
        }
    }
    submitted.reverse();
    assert_eq!(seen, submitted);

    let (_, only_parked) = app.get("/jobs?queue=parked&status=queued&operation=ping").await;
    assert_eq!(only_parked["jobs"].as_array().unwrap().len(), 2);
    let (_, none) = app.get("/jobs?status=running").await;
    assert!(none["jobs"].as_array().unwrap().is_empty());
}

/// A listing by status finds every job of that status and no other, page by page, succeeded
/// ones too: on PostgreSQL the status indexes leave succeeded jobs out (migration 32), so
/// those are found through the room's index instead.
async fn listing_by_status_finds_each_status_whole(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (mut succeeded, mut failed) = (Vec::new(), Vec::new());
    for at in 0..7 {
        let (_, job) = app.submit(json!({ "operation": "ping" })).await;
        succeeded.push(job["id"].as_str().unwrap().to_owned());
        if at % 2 == 0 {
            let (_, job) = app.submit(json!({ "operation": "fail", "max_retries": 0 })).await;
            failed.push(job["id"].as_str().unwrap().to_owned());
        }
    }
    let (_, parked) = app.submit(json!({ "operation": "ping", "queue": crate::helpers::PARKED })).await;
    let queued = vec![parked["id"].as_str().unwrap().to_owned()];
    for id in &succeeded {
        app.wait_for_status(id, "succeeded").await;
    }
    for id in &failed {
        app.wait_for_status(id, "failed").await;
    }
    for (status, mut expected) in [("succeeded", succeeded), ("failed", failed), ("queued", queued)] {
        let mut seen = Vec::new();
        let mut path = format!("/jobs?status={status}&limit=2");
        loop {
            let (code, page) = app.get(&path).await;
            assert_eq!(code, 200, "{page}");
            seen.extend(page["jobs"].as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap().to_owned()));
            match page["next_cursor"].as_str() {
                Some(cursor) => path = format!("/jobs?status={status}&limit=2&cursor={cursor}"),
                None => break,
            }
        }
        expected.reverse();
        assert_eq!(seen, expected, "{status}, newest first");
    }
}

/// Running jobs are listed whole, page by page and under every filter, a member's rooms
/// among them: SQLite finds them through the index of leases (its status indexes hold none,
/// migration 37), the other columns written so that no other index of its serves them.
async fn listing_running_jobs_pages_and_filters(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 4)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let mut running = Vec::new();
    for _ in 0..3 {
        let (_, job) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 60 } })).await;
        running.push(job["id"].as_str().unwrap().to_owned());
    }
    let (_, other) = app.submit(json!({ "operation": "ping" })).await;
    app.wait_for_status(other["id"].as_str().unwrap(), "succeeded").await;
    for id in &running {
        app.wait_for_status(id, "running").await;
    }
    running.reverse();
    let member = app.member("ana").await;
    for filters in ["", "&queue=default&operation=sleep"] {
        for client in [&app.client, &member] {
            let (mut seen, mut path) = (Vec::new(), format!("/jobs?status=running&limit=2{filters}"));
            loop {
                let (code, page) = crate::helpers::read(client.get(app.url(&path)).send().await.unwrap()).await;
                assert_eq!(code, 200, "{page}");
                seen.extend(page["jobs"].as_array().unwrap().iter().map(|job| job["id"].as_str().unwrap().to_owned()));
                match page["next_cursor"].as_str() {
                    Some(cursor) => path = format!("/jobs?status=running&limit=2{filters}&cursor={cursor}"),
                    None => break,
                }
            }
            assert_eq!(seen, running, "running jobs{filters}, newest first");
        }
    }
    let (_, none) = app.get("/jobs?status=running&operation=ping").await;
    assert_eq!(none["jobs"], json!([]), "{none}");
    let (_, none) = app.get("/jobs?status=running&queue=parked").await;
    assert_eq!(none["jobs"], json!([]), "{none}");
    for id in &running {
        app.post(&format!("/jobs/{id}/cancel")).await;
    }
}

async fn cancelling_a_parent_cancels_its_queued_children(backend: Backend) {
    let options = TestOptions { workers: false, ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let (_, parent) = app.submit(json!({ "operation": "ping" })).await;
    let parent_id = parent["id"].as_str().unwrap();
    let (code, child) = app.submit(json!({ "operation": "ping", "parent_job_id": parent_id })).await;
    assert_eq!(code, 201, "{child}");
    app.post(&format!("/jobs/{parent_id}/cancel")).await;
    let (_, child_after) = app.get(&format!("/jobs/{}", child["id"].as_str().unwrap())).await;
    assert_eq!(child_after["status"], "cancelled");
    let (_, children) = app.get(&format!("/jobs?parent_job_id={parent_id}")).await;
    assert_eq!(children["jobs"].as_array().unwrap().len(), 1);
}

async fn retry_later_runs_the_job_again_after_its_delay(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let payload = json!({ "times": 2, "delay_seconds": 0.3 });
    let (code, job) = app.submit(json!({ "operation": "busy", "payload": payload })).await;
    assert_eq!(code, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let done = app.wait_for_status(id, "succeeded").await;
    assert_eq!((done["attempts"].as_i64(), &done["result"]), (Some(3), &json!({ "runs": 3 })));
    let events = app.events(id).await;
    assert_eq!(
        app.event_names(id).await,
        [
            "job.queued",
            "job.started",
            "job.retry_later",
            "job.started",
            "job.retry_later",
            "job.started",
            "job.succeeded"
        ]
    );
    // Each re-run started no sooner than the `run_after` its request set, 0.3 s later.
    let time = |value: &serde_json::Value| chrono::DateTime::parse_from_rfc3339(value.as_str().unwrap()).unwrap();
    // These times are read at different moments by different clocks: this host's plus an
    // offset measured against the database (off by up to half that measurement's round trip,
    // and re-measured now and then), and the database's own `CURRENT_TIMESTAMP` that the
    // claim compares `run_after` with. A few ms of slack absorbs that; a delay not applied
    // (0) or mis-scaled would still be off by far more.
    let slack = chrono::Duration::milliseconds(50);
    for (asked, restarted) in [(2, 3), (4, 5)] {
        let run_after = time(&events[asked]["fields"]["run_after"]);
        // The delay counts from the request, which came after the run started.
        let ahead = run_after - time(&events[asked - 1]["ts"]);
        let delay = chrono::Duration::milliseconds(300);
        assert!(ahead >= delay - slack, "run_after only {ahead} after the run began: {events:?}");
        let early = run_after - time(&events[restarted]["ts"]);
        assert!(early <= slack, "re-run {early} before its delay was over: {events:?}");
    }
}

async fn a_retryable_failure_is_retried_with_growing_delays(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({
        "operation": "fail",
        "payload": { "error_class": "Timeout", "times": 2 },
        "max_retries": 3,
        "retry": { "base_seconds": 0.2, "cap_seconds": 2.0, "retry_on": ["Timeout"] },
    });
    let (code, job) = app.submit(body).await;
    assert_eq!(code, 201, "{job}");
    let id = job["id"].as_str().unwrap();
    let done = app.wait_for_status(id, "succeeded").await;
    assert_eq!((done["attempts"].as_i64(), done["failures"].as_i64()), (Some(3), Some(2)), "{done}");
    let events = app.events(id).await;
    assert_eq!(
        app.event_names(id).await,
        [
            "job.queued",
            "job.started",
            "job.retry_scheduled",
            "job.started",
            "job.retry_scheduled",
            "job.started",
            "job.succeeded"
        ]
    );
    let delay = |i: usize| events[i]["fields"]["delay_seconds"].as_f64().unwrap();
    assert!((0.1..=0.2).contains(&delay(2)), "first delay {}", delay(2));
    assert!((0.2..=0.4).contains(&delay(4)), "second delay {}", delay(4));
    assert!(delay(4) >= delay(2), "delays grow");
    assert_eq!(events[2]["fields"]["failure"], 1);
    assert_eq!(events[4]["fields"]["failure"], 2);
}

async fn a_non_retryable_failure_fails_at_once(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({
        "operation": "fail",
        "payload": { "error_class": "ValidationError" },
        "max_retries": 5,
        "retry": { "base_seconds": 0.1, "no_retry_on": ["ValidationError"] },
    });
    let (_, job) = app.submit(body).await;
    let id = job["id"].as_str().unwrap();
    let failed = app.wait_for_status(id, "failed").await;
    assert_eq!((failed["attempts"].as_i64(), failed["failures"].as_i64()), (Some(1), Some(1)));
    assert_eq!(failed["error_code"], "ValidationError");
    assert_eq!(app.event_names(id).await, ["job.queued", "job.started", "job.failed"]);
}

async fn cancelling_a_running_job_stops_its_work(backend: Backend) {
    let options = TestOptions { queues: vec![("default", 1)], ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let (_, job) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 60, "steps": 600 } })).await;
    let id = job["id"].as_str().unwrap();
    app.wait_for_status(id, "running").await;
    let (code, cancelled) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!((code, cancelled["status"].as_str()), (200, Some("cancelled")), "{cancelled}");
    // One job at a time: the next job runs only once the cancelled one has stopped, long
    // before its minute is up.
    let started = std::time::Instant::now();
    let (_, next) = app.submit(json!({ "operation": "ping" })).await;
    app.wait_for_status(next["id"].as_str().unwrap(), "succeeded").await;
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "the cancelled job kept its slot");
    let (_, after) = app.get(&format!("/jobs/{id}")).await;
    assert_eq!(after["status"], "cancelled");
    assert!(after["progress_current"].as_i64().unwrap_or(0) < 600);
    assert!(!app.event_names(id).await.iter().any(|name| name == "job.succeeded" || name == "job.failed"));
}

async fn the_reaper_requeues_a_job_whose_worker_vanished(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, job) = app.submit(json!({ "operation": "count", "queue": "parked" })).await;
    let id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    // A worker elsewhere claims it with a short lease and is never heard from again.
    let ghost = app.store.claim(id, "ghost", std::time::Duration::from_millis(50)).await.unwrap().unwrap();
    assert_eq!(ghost.status, yardmaster::domain::JobStatus::Running);
    // Nobody consumes "parked", so the requeued job stays visible as QUEUED.
    eventually("the reaper requeued the job", std::time::Duration::from_secs(30), || async {
        let names = app.event_names(&id.to_string()).await;
        names.iter().any(|name| name == "job.lease_expired_requeue").then_some(())
    })
    .await;
    let (_, requeued) = app.get(&format!("/jobs/{id}")).await;
    assert_eq!((requeued["status"].as_str(), requeued["owner"].as_str()), (Some("queued"), None), "{requeued}");
    // The ghost's late outcome is refused: its run is no longer current.
    let late = app.store.finish((&ghost).into(), &yardmaster::store::Completion::Succeeded { result: json!({}) }).await;
    assert!(late.unwrap().is_none());
}

async fn the_reaper_times_out_stalled_runs_and_overdue_queued_jobs(backend: Backend) {
    use yardmaster::actors::reaper::run_once;
    let app = TestApp::spawn(backend).await;
    let dispatcher = yardmaster::dispatch::Dispatcher::new(app.store.clone(), app.transport.clone());
    let (_, job) = app.submit(json!({ "operation": "count", "queue": "parked" })).await;
    let id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    let lease = std::time::Duration::from_secs(3600);
    app.store.claim(id, "slow-worker", lease).await.unwrap().unwrap();

    // Past its timeout (0 s) but its last event (the claim) is within the stall window.
    let mut settings = yardmaster::Settings::default().reaper;
    settings.timeout_seconds = 0;
    settings.stall_seconds = 3600;
    let counts = run_once(app.store.as_ref(), app.store.as_ref(), &dispatcher, &settings).await.unwrap();
    assert_eq!(counts.timed_out, 0, "a run that reports progress is left alone");
    assert_eq!(app.get(&format!("/jobs/{id}")).await.1["status"], "running");

    settings.stall_seconds = 0;
    let counts = run_once(app.store.as_ref(), app.store.as_ref(), &dispatcher, &settings).await.unwrap();
    assert_eq!(counts.timed_out, 1);
    let (_, failed) = app.get(&format!("/jobs/{id}")).await;
    assert_eq!((failed["status"].as_str(), failed["error_code"].as_str()), (Some("failed"), Some("JobTimeout")));

    // A queued job nobody consumes fails once it has waited longer than the queue timeout.
    let (_, waiting) = app.submit(json!({ "operation": "count", "queue": "parked" })).await;
    settings.queue_timeout_seconds = 1;
    eventually("the queued job timed out", std::time::Duration::from_secs(30), || async {
        let counts = run_once(app.store.as_ref(), app.store.as_ref(), &dispatcher, &settings).await.unwrap();
        (counts.queue_timed_out != 0).then_some(())
    })
    .await;
    let (_, expired) = app.get(&format!("/jobs/{}", waiting["id"].as_str().unwrap())).await;
    assert_eq!((expired["status"].as_str(), expired["error_code"].as_str()), (Some("failed"), Some("QueueTimeout")));
}

/// A job running longer than its lease keeps it: its heartbeat, started when the first
/// renewal is due, renews it, so the reaper never takes the run away.
async fn a_job_longer_than_its_lease_keeps_it_by_its_heartbeat(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let seconds = 1.5 * crate::helpers::LEASE_MS as f64 / 1000.0;
    let steps = (10.0 * seconds) as u32;
    let (_, job) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": seconds, "steps": steps } })).await;
    let id = job["id"].as_str().unwrap();
    let done = app.wait_for_status(id, "succeeded").await;
    assert_eq!(done["attempts"], 1, "{done}");
    let names = app.event_names(id).await;
    assert!(!names.iter().any(|name| name.starts_with("job.lease_expired")), "{names:?}");
}

/// A submission whose caller goes away right after the commit (an HTTP client disconnecting
/// drops its handler's future) still announces its job: it runs, not waits for a restart.
async fn a_submission_abandoned_after_its_commit_still_runs(backend: Backend) {
    use std::future::Future;
    // No sweep to rescue the job: on RabbitMQ its row waits unpublished until a publish
    // confirms, and only the submission's own (detached) publish can send it.
    let app = TestApp::spawn_with(backend, TestOptions { dispatch_sweep: false, ..Default::default() }).await;
    let dispatcher = yardmaster::dispatch::Dispatcher::new(app.store.clone(), app.transport.clone());
    let mut job = yardmaster::domain::NewJob::new("ping");
    job.idempotency_key = Some("abandoned".into());
    let mut submission = Box::pin(dispatcher.submit(job));
    let filter = yardmaster::store::JobFilter { operation: Some("ping".into()), limit: 1, ..Default::default() };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // Start the submission, leave it unpolled until its row is committed, then drop it.
    let polled = futures_util::future::poll_fn(|cx| std::task::Poll::Ready(submission.as_mut().poll(cx))).await;
    assert!(polled.is_pending(), "a submission cannot commit within its first poll");
    let id = loop {
        if let Some(job) = app.store.list(&filter).await.unwrap().jobs.into_iter().next() {
            break job.id;
        }
        assert!(std::time::Instant::now() < deadline, "the row was never committed");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    };
    drop(submission);
    let done = app.wait_for_status(&id.to_string(), "succeeded").await;
    assert_eq!(done["attempts"], 1, "{done}");
}

on_every_backend!(
    a_submission_abandoned_after_its_commit_still_runs,
    a_job_longer_than_its_lease_keeps_it_by_its_heartbeat,
    the_reaper_times_out_stalled_runs_and_overdue_queued_jobs,
    a_retryable_failure_is_retried_with_growing_delays,
    a_non_retryable_failure_fails_at_once,
    cancelling_a_running_job_stops_its_work,
    the_reaper_requeues_a_job_whose_worker_vanished,
    retry_later_runs_the_job_again_after_its_delay,
    ping_succeeds_with_its_events,
    fail_records_its_error_class,
    sleep_reports_progress,
    cancel_before_claim_is_never_executed,
    cancel_of_a_finished_job_is_a_no_op,
    retry_of_a_succeeded_job_is_an_invalid_transition,
    retry_of_a_failed_job_runs_it_again,
    retry_of_a_cancelled_job_runs_it_again,
    events_page_through_the_whole_log,
    an_idempotency_key_returns_the_same_job,
    listing_is_newest_first_with_a_cursor,
    listing_by_status_finds_each_status_whole,
    listing_running_jobs_pages_and_filters,
    cancelling_a_parent_cancels_its_queued_children,
);
