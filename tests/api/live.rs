//! Clients that wait without polling, on every backend: a long-poll (`Prefer: wait=N`)
//! answers as soon as the job ends and at its cap otherwise; an event stream sends every
//! event once, in order, and resumes after a reconnect without a gap; both keep rooms.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{client_with, eventually, gauge, read, Backend, TestApp, TestOptions, PARKED};

/// (status, Preference-Applied, body) of `GET /jobs/{id}` with `Prefer: wait=...`.
async fn long_poll(client: &reqwest::Client, app: &TestApp, id: &str, prefer: &str) -> (u16, Option<String>, Value) {
    let response = client.get(app.url(&format!("/jobs/{id}"))).header("prefer", prefer).send().await.unwrap();
    let applied = response.headers().get("preference-applied").map(|value| value.to_str().unwrap().to_owned());
    let (status, body) = read(response).await;
    (status, applied, body)
}

async fn a_long_poll_answers_as_soon_as_the_job_ends(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (_, job) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 1, "steps": 4 } })).await;
    let id = job["id"].as_str().unwrap();
    let (status, applied, done) = long_poll(&app.client, &app, id, "wait=30").await;
    let answered = chrono::Utc::now();
    assert_eq!((status, applied.as_deref(), done["status"].as_str()), (200, Some("wait=30"), Some("succeeded")));
    let finished: chrono::DateTime<chrono::Utc> = done["finished_at"].as_str().unwrap().parse().unwrap();
    // `finished_at` is this host's clock plus the offset measured against the database,
    // read while the finishing statement is built, so the gap holds that statement's commit,
    // the wake-up and the answer: usually a few ms, more on a loaded machine. Nothing polls:
    // a long poll nobody wakes answers at the end of its 30 s, so a bound far under that
    // (and over any scheduling delay) is what tells the two apart.
    let late = answered - finished;
    assert!(late < chrono::Duration::seconds(5), "answered {late} after the job ended");
    // A job already over answers at once, the wait applied all the same (a wait on it would
    // last the whole 30 s).
    let started = Instant::now();
    let (_, applied, _) = long_poll(&app.client, &app, id, "wait=30").await;
    assert!(started.elapsed() < Duration::from_secs(5) && applied.as_deref() == Some("wait=30"));
}

async fn a_long_poll_answers_at_its_cap_with_the_job_as_it_is(backend: Backend) {
    // The cap is well above the 1 s asked for, so "waited the cap instead" stays far from
    // "waited what was asked" however slow the machine: upper bounds only rule out the wrong
    // wait, never a slow answer.
    let cap = Duration::from_secs(5);
    let options = TestOptions { workers: false, max_wait_seconds: cap.as_secs(), ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let (_, job) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
    let id = job["id"].as_str().unwrap();
    let started = Instant::now();
    let (status, applied, body) = long_poll(&app.client, &app, id, "wait=1").await;
    let waited = started.elapsed();
    assert_eq!((status, applied.as_deref(), body["status"].as_str()), (200, Some("wait=1"), Some("queued")));
    assert!(waited >= Duration::from_secs(1) && waited < cap - Duration::from_secs(1), "waited {waited:?}");
    // Past the server's cap: the cap applies, and says so (unapplied, the wait is an hour).
    let started = Instant::now();
    let (_, applied, _) = long_poll(&app.client, &app, id, "respond-async, wait=3600").await;
    let waited = started.elapsed();
    assert_eq!(applied.as_deref(), Some("wait=5"));
    assert!(waited >= cap && waited < cap + Duration::from_secs(5), "the cap was not applied: waited {waited:?}");
    // A preference that cannot be read is ignored (RFC 7240): an answer at once, nothing
    // applied. A wait read from one anyway would say so in Preference-Applied, and the
    // likeliest misreading (a huge number saturating) would run to the cap.
    for ignored in ["wait=soon", "wait=-1", "wait", "wait=1.5", "wait=99999999999999999999999"] {
        let started = Instant::now();
        let (status, applied, _) = long_poll(&app.client, &app, id, ignored).await;
        assert_eq!((status, applied), (200, None), "{ignored}");
        assert!(started.elapsed() < cap - Duration::from_secs(1), "{ignored} was waited on");
    }
    // Another room's job is missing at once, however long the caller would wait (here the
    // 30 s asked, capped to 5 s).
    let (token, _) = member_token(&app, "b").await;
    let started = Instant::now();
    let (status, _, problem) = long_poll(&client_with(&token), &app, id, "wait=30").await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("job_not_found")), "{problem}");
    assert!(started.elapsed() < cap - Duration::from_secs(1), "the other room's job was waited on");
}

async fn a_held_long_poll_is_counted_until_it_answers(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let (_, job) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let before = gauge(&app, "yardmaster_watches_held").await;
    let polling = {
        let (client, url) = (app.client.clone(), app.url(&format!("/jobs/{id}")));
        actix_rt::spawn(async move { client.get(url).header("prefer", "wait=60").send().await.unwrap().status() })
    };
    eventually("the long-poll is counted", Duration::from_secs(10), || async {
        (gauge(&app, "yardmaster_watches_held").await >= before + 1.0).then_some(())
    })
    .await;
    // The job ends: the long-poll answers, and is no longer counted.
    let (code, _) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!(code, 200);
    assert_eq!(polling.await.unwrap(), StatusCode::OK);
    eventually("the answered long-poll is no longer counted", Duration::from_secs(10), || async {
        (gauge(&app, "yardmaster_watches_held").await <= before).then_some(())
    })
    .await;
}

async fn member_token(app: &TestApp, room: &str) -> (String, String) {
    let body = json!({ "user": format!("user-{room}"), "rooms": [room] });
    let (status, created) = read(app.client.post(app.url("/admin/tokens")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{created}");
    (created["token"].as_str().unwrap().to_owned(), created["id"].as_str().unwrap().to_owned())
}

/// A server-sent event as received.
#[derive(Debug, Clone, PartialEq)]
struct Received {
    id: i64,
    event: String,
    data: Value,
}

/// An open event stream, read frame by frame.
struct Stream {
    response: reqwest::Response,
    buffer: String,
}

impl Stream {
    async fn open(app: &TestApp, id: &str, last_event_id: Option<i64>) -> Stream {
        let mut request = app.client.get(app.url(&format!("/jobs/{id}/events/stream")));
        if let Some(last) = last_event_id {
            request = request.header("last-event-id", last.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Stream { response, buffer: String::new() }
    }

    /// The next event; `None` once the server ended the stream. Keep-alive comments are
    /// skipped; no event within 30 s fails the test (a missed event would otherwise wait
    /// forever behind the comments).
    async fn next(&mut self) -> Option<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                let field = |name: &str| {
                    frame.lines().find_map(|line| line.strip_prefix(name).map(|value| value.trim().to_owned()))
                };
                let (Some(id), Some(event), Some(data)) = (field("id:"), field("event:"), field("data:")) else {
                    assert!(frame.starts_with(':'), "a frame that is neither event nor comment: {frame:?}");
                    continue;
                };
                return Some(Received { id: id.parse().unwrap(), event, data: serde_json::from_str(&data).unwrap() });
            }
            // A deadline for the event, not for each chunk: keep-alive comments come every 15 s.
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk()).await;
            match chunk.expect("no event within 30 s").unwrap() {
                Some(bytes) => self.buffer.push_str(std::str::from_utf8(&bytes).unwrap()),
                None => return None,
            }
        }
    }
}

async fn an_event_stream_sends_every_event_once_in_order_and_resumes(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "operation": "sleep", "payload": { "seconds": 1.5, "steps": 6 } });
    let (_, job) = app.submit(body).await;
    let id = job["id"].as_str().unwrap().to_owned();
    let mut first = Stream::open(&app, &id, None).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(first.next().await.expect("the stream ended early"));
    }
    drop(first);
    // The job goes on while nobody listens; the reconnect picks up after the last event seen.
    let mut second = Stream::open(&app, &id, Some(seen.last().unwrap().id)).await;
    while let Some(event) = second.next().await {
        seen.push(event);
    }
    let logged = app.events(&id).await;
    let ids: Vec<i64> = seen.iter().map(|event| event.id).collect();
    let logged_ids: Vec<i64> = logged.iter().map(|event| event["id"].as_i64().unwrap()).collect();
    assert_eq!(ids, logged_ids, "the streams missed, repeated or reordered events");
    assert_eq!(seen.last().unwrap().event, "job.succeeded");
    assert_eq!(seen.iter().filter(|event| event.event == "job.progress").count(), 6);
    for (received, logged) in seen.iter().zip(&logged) {
        assert_eq!(&received.data, logged);
    }
    // A finished job's stream sends its log and ends; `?after=` works as Last-Event-ID.
    let mut replay = Stream::open(&app, &id, None).await;
    let mut replayed = 0;
    while replay.next().await.is_some() {
        replayed += 1;
    }
    assert_eq!(replayed, logged.len());
    let response = app.client.get(app.url(&format!("/jobs/{id}/events/stream?after={}", ids[4]))).send().await.unwrap();
    let mut after = Stream { response, buffer: String::new() };
    assert_eq!(after.next().await.map(|event| event.id), Some(ids[5]));
}

async fn event_streams_refuse_bad_cursors_and_other_rooms(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let (_, job) = app.submit(json!({ "operation": "ping", "queue": PARKED })).await;
    let id = job["id"].as_str().unwrap();
    let path = format!("/jobs/{id}/events/stream");
    for bad in ["abc", "1.5", "", "99999999999999999999"] {
        let response = app.client.get(app.url(&path)).header("last-event-id", bad).send().await.unwrap();
        let (status, problem) = read(response).await;
        assert_eq!((status, problem["code"].as_str()), (400, Some("invalid_query")), "{bad:?}: {problem}");
    }
    let (status, problem) = app.get(&format!("{path}?after=x")).await;
    assert_eq!((status, problem["code"].as_str()), (400, Some("invalid_query")), "{problem}");
    let (token, _) = member_token(&app, "b").await;
    let (status, problem) = read(client_with(&token).get(app.url(&path)).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("job_not_found")), "{problem}");
    let missing = format!("/jobs/{}/events/stream", uuid::Uuid::now_v7());
    assert_eq!(app.get(&missing).await.0, 404);
    // A live stream of a queued job: its first event comes at once, then the stream waits.
    let mut stream = Stream::open(&app, id, None).await;
    assert_eq!(stream.next().await.map(|event| event.event), Some("job.queued".to_owned()));
    let (status, _) = app.post(&format!("/jobs/{id}/cancel")).await;
    assert_eq!(status, 200);
    assert_eq!(stream.next().await.map(|event| event.event), Some("job.cancelled".to_owned()));
    assert!(stream.next().await.is_none(), "the stream of a cancelled job stays open");
}

/// A room's stream: every event of the room's jobs, in order, none of another room's,
/// resumable; a room the caller cannot read is refused.
async fn a_room_stream_sends_the_rooms_events_in_order_and_resumes(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (token_a, _) = member_token(&app, "a").await;
    let alice = client_with(&token_a);
    let submit = |client: reqwest::Client, room: &'static str| {
        let url = app.url("/jobs");
        async move {
            let body = json!({ "operation": "sleep", "room": room, "payload": { "seconds": 0.3, "steps": 3 } });
            let (status, job) = read(client.post(url).json(&body).send().await.unwrap()).await;
            assert_eq!(status, 201, "{job}");
            job["id"].as_str().unwrap().to_owned()
        }
    };
    let response = alice.get(app.url("/rooms/a/events/stream")).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = Stream { response, buffer: String::new() };
    let first = submit(alice.clone(), "a").await;
    submit(app.client.clone(), "elsewhere").await;
    let second = submit(alice.clone(), "a").await;
    for id in [&first, &second] {
        app.wait_for_status(id, "succeeded").await;
    }
    // Both jobs' logs, interleaved as written: 1 queued + 1 started + 3 progress + 1 succeeded each.
    let mut seen = Vec::new();
    while seen.len() < 12 {
        seen.push(stream.next().await.expect("the room stream ended"));
    }
    let ids: Vec<i64> = seen.iter().map(|event| event.id).collect();
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "out of order: {ids:?}");
    assert!(seen.iter().all(|event| [&first, &second].contains(&&event.data["job_id"].as_str().unwrap().to_owned())));
    let mut logged: Vec<i64> = Vec::new();
    for id in [&first, &second] {
        logged.extend(app.events(id).await.iter().map(|event| event["id"].as_i64().unwrap()));
    }
    logged.sort();
    assert_eq!(ids, logged, "the room stream missed or repeated events");
    // Resumed after the sixth event: the rest, nothing before.
    let request = alice.get(app.url("/rooms/a/events/stream")).header("last-event-id", ids[5].to_string());
    let mut resumed = Stream { response: request.send().await.unwrap(), buffer: String::new() };
    assert_eq!(resumed.next().await.map(|event| event.id), Some(ids[6]));
    // Another room, a reserved one, a malformed one.
    for (path, status, code) in [
        ("/rooms/b/events/stream", 403, "room_forbidden"),
        ("/rooms/@internal/events/stream", 403, "room_forbidden"),
        ("/rooms/a:b/events/stream", 400, "invalid_room_id"),
    ] {
        let (got, problem) = read(alice.get(app.url(path)).send().await.unwrap()).await;
        assert_eq!((got, problem["code"].as_str()), (status, Some(code)), "{path}: {problem}");
    }
}

/// PostgreSQL hands out event ids before their transactions commit: an event of a room
/// committed after a lower id's transaction is still open is held back until that one ends,
/// so the stream sends both, in id order (before, the cursor passed the open id and the
/// stream never sent it). SQLite has one writer, so no id commits out of order there.
#[actix_rt::test]
async fn postgres_a_room_stream_holds_an_event_until_every_lower_id_has_committed() {
    let app = TestApp::spawn_with(Backend::Postgres, TestOptions { workers: false, ..Default::default() }).await;
    let (token, _) = member_token(&app, "a").await;
    let alice = client_with(&token);
    let submit = |body: Value| {
        let (alice, url) = (alice.clone(), app.url("/jobs"));
        async move {
            let (status, job) = read(alice.post(url).json(&body).send().await.unwrap()).await;
            assert_eq!(status, 201, "{job}");
            job["id"].as_str().unwrap().to_owned()
        }
    };
    let first = submit(json!({ "operation": "ping", "queue": PARKED, "room": "a" })).await;
    // An event of the first job whose transaction stays open: its id is drawn now.
    let open = sea_orm::TransactionTrait::begin(&app.db).await.unwrap();
    let insert = "INSERT INTO job_event (job_id, ts, event, fields, level) \
                  VALUES ($1, now(), 'test.held', '{}', 'info') RETURNING id";
    let statement = sea_orm::Statement::from_sql_and_values(
        sea_orm::DbBackend::Postgres,
        insert,
        [first.parse::<uuid::Uuid>().unwrap().into()],
    );
    let held: i64 =
        sea_orm::ConnectionTrait::query_one_raw(&open, statement).await.unwrap().unwrap().try_get("", "id").unwrap();
    // A second job's event, committed while the first is open, with a higher id.
    let second = submit(json!({ "operation": "ping", "queue": PARKED, "room": "a" })).await;
    let response = alice.get(app.url("/rooms/a/events/stream")).send().await.unwrap();
    let mut stream = Stream { response, buffer: String::new() };
    let mut reader = tokio::spawn(async move {
        let mut seen = Vec::new();
        while !seen.iter().any(|event: &Received| event.data["job_id"] == second.as_str()) {
            seen.push(stream.next().await.expect("the room stream ended"));
        }
        seen
    });
    // Let the stream read while the first transaction is open (the second job's event is
    // there to be read); a stream that sends it now has skipped the open id. Either way the
    // transaction then commits and the reader goes on.
    let early = tokio::time::timeout(Duration::from_secs(2), &mut reader).await.ok();
    open.commit().await.unwrap();
    let seen = match early {
        Some(seen) => seen.unwrap(),
        None => reader.await.unwrap(),
    };
    let ids: Vec<i64> = seen.iter().map(|event| event.id).collect();
    assert!(ids.contains(&held), "the stream sent the second job's event and never the first's held one: {ids:?}");
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "out of order: {ids:?}");
}

/// Counts each job's reads of its whole row (`get`).
#[derive(Default)]
struct RowReads(std::sync::Mutex<std::collections::HashMap<uuid::Uuid, usize>>);

#[async_trait::async_trait]
impl yardmaster::store::Hook for RowReads {
    async fn before(&self, call: yardmaster::store::Call<'_>) -> Result<(), yardmaster::store::StoreError> {
        if let yardmaster::store::Call::Read("get", Some(id)) = call {
            *self.0.lock().unwrap().entry(id).or_default() += 1;
        }
        Ok(())
    }
}

/// A long-poll reads its job's whole row when it starts and when it answers, whatever the
/// job does between; an event stream and a page of events never: a coordinator's row holds
/// megabytes of inputs and each of its batches changes it. They read its status and room.
async fn waiters_read_a_jobs_row_when_they_start_and_answer_not_at_each_change(backend: Backend) {
    let reads = std::sync::Arc::new(RowReads::default());
    let options = TestOptions { hook: Some(reads.clone()), ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let (_, job) = app.submit(json!({ "operation": "sleep", "payload": { "seconds": 1, "steps": 20 } })).await;
    let id = job["id"].as_str().unwrap();
    let mut stream = Stream::open(&app, id, None).await;
    let (status, _, done) = long_poll(&app.client, &app, id, "wait=30").await;
    assert_eq!((status, done["status"].as_str()), (200, Some("succeeded")), "{done}");
    let mut sent = 0;
    while stream.next().await.is_some() {
        sent += 1;
    }
    // queued, started, 20 progress reports, succeeded: each a change that woke both.
    assert!(sent >= 22, "the stream sent {sent} events");
    assert!(app.events(id).await.len() >= 22);
    let read = reads.0.lock().unwrap().get(&id.parse().unwrap()).copied().unwrap_or(0);
    assert!(read <= 2, "the job's row was read {read} times by one long-poll, one stream and a page of events");
}

on_both_backends!(
    a_held_long_poll_is_counted_until_it_answers,
    waiters_read_a_jobs_row_when_they_start_and_answer_not_at_each_change,
    a_room_stream_sends_the_rooms_events_in_order_and_resumes,
    a_long_poll_answers_as_soon_as_the_job_ends,
    a_long_poll_answers_at_its_cap_with_the_job_as_it_is,
    an_event_stream_sends_every_event_once_in_order_and_resumes,
    event_streams_refuse_bad_cursors_and_other_rooms,
);
