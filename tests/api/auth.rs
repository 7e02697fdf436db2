//! Who may do what, on every backend: every route of the router walked without a token, with
//! bad tokens, with a member's token on admin routes and a read-only token on writes; two
//! tenants that cannot see or touch each other's jobs; `@global` and `@internal`; revoked
//! tokens; token management and its hostile input.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;
use yardmaster::api::routes;
use yardmaster::auth::Access;

use crate::helpers::{client_with, read, Backend, TestApp, TestDatabase, TestOptions, PARKED};

/// Every (method, path pattern, access) the router serves, HEAD included.
fn endpoints() -> Vec<(Method, &'static str, Access)> {
    let mut all = Vec::new();
    for route in routes() {
        for method in route.allow.split(", ") {
            all.push((Method::from_bytes(method.as_bytes()).unwrap(), route.path, route.access));
        }
    }
    assert!(all.len() >= 18, "the router has more routes than this: {all:?}");
    all
}

/// A path of `pattern` with its parameters filled: `{id}` by `id`, `{set}` by a set name,
/// the docs page's file by its index.
fn fill(pattern: &str, id: &str) -> String {
    pattern
        .replace("{id}", id)
        .replace("{set}", "some-set")
        .replace("{file:.*}", "index.html")
        .replace("{room}", "a")
        .replace("{path:.*}", "run.sh")
}

/// The problem code of an answer; a HEAD answer has no body, so it is taken as `expected`.
fn code<'a>(method: &Method, body: &'a Value, expected: &'a str) -> Option<&'a str> {
    match *method == Method::HEAD {
        true => Some(expected),
        false => body["code"].as_str(),
    }
}

/// Sends `method path` with an optional `Authorization` value and a JSON body for writes.
async fn call(app: &TestApp, method: &Method, path: &str, authorization: Option<&str>) -> (StatusCode, String, Value) {
    let mut request = reqwest::Client::new().request(method.clone(), app.url(path));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    if !matches!(*method, Method::GET | Method::HEAD | Method::DELETE) {
        request = request.json(&json!({}));
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let challenge = response.headers().get("www-authenticate").map(|v| v.to_str().unwrap().to_owned());
    // An event stream that opens is not read: a room's stays open.
    let body = match path.contains("/stream") && status.is_success() {
        true => Value::Null,
        false => read(response).await.1,
    };
    (status, challenge.unwrap_or_default(), body)
}

/// Makes a token through the API as the app's admin.
async fn token(app: &TestApp, body: Value) -> (String, String) {
    let response = app.client.post(app.url("/admin/tokens")).json(&body).send().await.unwrap();
    let (status, created) = read(response).await;
    assert_eq!(status, 201, "{created}");
    (created["token"].as_str().unwrap().to_owned(), created["id"].as_str().unwrap().to_owned())
}

async fn member(app: &TestApp, user: &str, rooms: &[&str]) -> reqwest::Client {
    client_with(&token(app, json!({ "user": user, "rooms": rooms })).await.0)
}

/// `method url` by `client`, with an empty JSON body when the method writes. An event
/// stream that opens is not read (it stays open while its job runs).
async fn send(client: &reqwest::Client, method: &Method, url: String) -> (u16, Value) {
    let streams = url.ends_with("/stream");
    let mut request = client.request(method.clone(), url);
    if *method == Method::POST || *method == Method::PATCH {
        request = request.json(&json!({}));
    }
    let response = request.send().await.unwrap();
    match streams && response.status().is_success() {
        true => (response.status().as_u16(), Value::Null),
        false => read(response).await,
    }
}

async fn submit(client: &reqwest::Client, app: &TestApp, body: Value) -> (u16, Value) {
    read(client.post(app.url("/jobs")).json(&body).send().await.unwrap()).await
}

async fn every_route_needs_a_valid_bearer_token(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let (revoked, revoked_id) = token(&app, json!({ "user": "gone", "role": "admin" })).await;
    let (status, _) =
        read(app.client.delete(app.url(&format!("/admin/tokens/{revoked_id}"))).send().await.unwrap()).await;
    assert_eq!(status, 200);
    // One character of the secret changed (to one it is not: an `x` there would be no forgery).
    let other = if &app.admin_token[40..41] == "x" { "y" } else { "x" };
    let forged = format!("{}{other}{}", &app.admin_token[..40], &app.admin_token[41..]);
    let id = Uuid::now_v7().to_string();
    for (method, pattern, access) in endpoints() {
        let path = fill(pattern, &id);
        if access == Access::Public {
            let (status, _, body) = call(&app, &method, &path, None).await;
            assert!([200, 308].contains(&status.as_u16()), "{method} {path} is public: {status} {body}");
            continue;
        }
        let (status, challenge, body) = call(&app, &method, &path, None).await;
        let unauthorized = (status.as_u16(), code(&method, &body, "unauthorized"));
        assert_eq!(unauthorized, (401, Some("unauthorized")), "{method} {path}: {body}");
        assert_eq!(challenge, r#"Bearer realm="yardmaster""#, "{method} {path}");
        for bad in [
            "Bearer nonsense".to_owned(),
            format!("Basic {}", app.admin_token),
            format!("Bearer {forged}"),
            format!("Bearer {revoked}"),
            "Bearer".to_owned(),
        ] {
            let (status, challenge, body) = call(&app, &method, &path, Some(&bad)).await;
            assert_eq!(status, 401, "{method} {path} with {bad:.20}: {body}");
            assert!(challenge.contains(r#"error="invalid_token""#), "{method} {path}: {challenge}");
        }
        let in_query = format!("{path}?access_token={}", app.admin_token);
        let (status, _, body) = call(&app, &method, &in_query, None).await;
        let refused = (status.as_u16(), code(&method, &body, "token_in_query"));
        assert_eq!(refused, (400, Some("token_in_query")), "{method} {path}: {body}");
    }
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0, "a refused request wrote a job");
}

async fn roles_and_read_only_tokens_are_enforced_on_every_route(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let member = format!("Bearer {}", token(&app, json!({ "user": "m", "rooms": ["a"] })).await.0);
    let reader = format!("Bearer {}", token(&app, json!({ "user": "r", "rooms": ["a"], "read_only": true })).await.0);
    let reading_admin =
        format!("Bearer {}", token(&app, json!({ "user": "ra", "role": "admin", "read_only": true })).await.0);
    let worker = format!("Bearer {}", token(&app, json!({ "user": "w", "role": "worker", "rooms": ["a"] })).await.0);
    let id = Uuid::now_v7().to_string();
    for (method, pattern, access) in endpoints() {
        let path = fill(pattern, &id);
        let writes = !matches!(method, Method::GET | Method::HEAD);
        match access {
            Access::Public => continue,
            Access::Admin => {
                for caller in [&member, &reader, &worker] {
                    let (status, _, body) = call(&app, &method, &path, Some(caller)).await;
                    let refused = (status.as_u16(), code(&method, &body, "forbidden"));
                    assert_eq!(refused, (403, Some("forbidden")), "{method} {path}");
                }
            }
            Access::Member | Access::Worker => {
                let (allowed, refused) = match access {
                    Access::Member => (&member, &worker),
                    _ => (&worker, &member),
                };
                let (status, _, body) = call(&app, &method, &path, Some(refused)).await;
                let refused = (status.as_u16(), code(&method, &body, "forbidden"));
                assert_eq!(refused, (403, Some("forbidden")), "{method} {path}");
                let (status, _, body) = call(&app, &method, &path, Some(allowed)).await;
                assert!(![401, 403].contains(&status.as_u16()), "{method} {path} refused its role: {body}");
            }
            Access::WorkerWrites if writes => {
                let (status, _, body) = call(&app, &method, &path, Some(&member)).await;
                let refused = (status.as_u16(), code(&method, &body, "forbidden"));
                assert_eq!(refused, (403, Some("forbidden")), "{method} {path}");
                let (status, _, body) = call(&app, &method, &path, Some(&worker)).await;
                assert!(![401, 403].contains(&status.as_u16()), "{method} {path} refused a worker: {body}");
            }
            Access::Any | Access::WorkerWrites => {
                for caller in [&member, &worker] {
                    let (status, _, body) = call(&app, &method, &path, Some(caller)).await;
                    assert!(![401, 403].contains(&status.as_u16()), "{method} {path} refused a caller: {body}");
                }
            }
        }
        let members_may = matches!(access, Access::Member | Access::Any) || (access == Access::WorkerWrites && !writes);
        for caller in [&reader, &reading_admin] {
            let (status, _, body) = call(&app, &method, &path, Some(caller)).await;
            if writes && (members_may || caller == &reading_admin) {
                let refused = (status.as_u16(), code(&method, &body, "read_only_token"));
                assert_eq!(refused, (403, Some("read_only_token")), "{method} {path}: {body}");
            } else if !writes && (members_may || caller == &reading_admin) {
                assert!(![401, 403].contains(&status.as_u16()), "{method} {path} refused a reader: {body}");
            }
        }
    }
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
}

async fn two_tenants_cannot_see_or_touch_each_others_jobs(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let alice = member(&app, "alice", &["a"]).await;
    let bob = member(&app, "bob", &["b"]).await;
    let (status, parent) = submit(&alice, &app, json!({ "operation": "ping", "queue": PARKED })).await;
    assert_eq!((status, parent["room"].as_str()), (201, Some("a")), "{parent}");
    let parent_id = parent["id"].as_str().unwrap().to_owned();
    let body = json!({ "operation": "ping", "queue": PARKED, "parent_job_id": parent_id });
    let (status, child) = submit(&alice, &app, body).await;
    assert_eq!((status, child["room"].as_str()), (201, Some("a")), "{child}");

    let body = json!({ "name": "hers", "cron": "@yearly", "job": { "operation": "ping", "queue": PARKED } });
    let (status, schedule) = read(alice.post(app.url("/schedules")).json(&body).send().await.unwrap()).await;
    assert_eq!((status, schedule["room"].as_str()), (201, Some("a")), "{schedule}");
    let schedule_id = schedule["id"].as_str().unwrap().to_owned();

    // Every route with a job's or a schedule's id: another room's is a 404, exactly as a
    // missing one.
    for (method, pattern, access) in endpoints() {
        if access != Access::Member || !pattern.contains("{id}") {
            continue;
        }
        let of_schedule = pattern.starts_with("/schedules/");
        let (id, not_found) = match of_schedule {
            true => (&schedule_id, "schedule_not_found"),
            false => (&parent_id, "job_not_found"),
        };
        let path = fill(pattern, id);
        let (status, body) = send(&bob, &method, app.url(&path)).await;
        if method == Method::HEAD {
            assert_eq!(status, 404, "{method} {path}");
            continue;
        }
        assert_eq!((status, body["code"].as_str()), (404, Some(not_found)), "{method} {path}: {body}");
        let missing = fill(pattern, &Uuid::now_v7().to_string());
        let (_, other) = send(&bob, &method, app.url(&missing)).await;
        assert_eq!(body["title"], other["title"], "a foreign job is told apart from a missing one");
        if of_schedule && method != Method::GET {
            // Changing her own schedule is the schedule tests' business (bodies, a delete).
            continue;
        }
        let (status, body) = send(&alice, &method, app.url(&path)).await;
        // The upload routes answer a job that was not uploaded with `not_an_upload`.
        assert!(status < 400 || body["code"] == "not_an_upload", "{path}: alice is refused her own job: {body}");
    }
    // Lists: bob sees nothing of room a and may not ask for it.
    let (status, page) = read(bob.get(app.url("/jobs")).send().await.unwrap()).await;
    assert_eq!((status, page["jobs"].as_array().map(Vec::len)), (200, Some(0)), "{page}");
    let (status, problem) = read(bob.get(app.url("/jobs?room=a")).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("room_forbidden")), "{problem}");
    let (_, page) = read(alice.get(app.url("/jobs")).send().await.unwrap()).await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 2, "{page}");
    // Nor can bob hang a child under alice's job, or name her room.
    let body = json!({ "operation": "ping", "queue": PARKED, "parent_job_id": parent_id });
    let (status, problem) = submit(&bob, &app, body).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("parent_not_found")), "{problem}");
    let (status, problem) = submit(&bob, &app, json!({ "operation": "ping", "queue": PARKED, "room": "a" })).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("room_forbidden")), "{problem}");
    let batch = json!({ "jobs": [{ "operation": "ping", "queue": PARKED }, { "operation": "ping", "room": "a" }] });
    let (status, problem) = read(bob.post(app.url("/jobs:batch")).json(&batch).send().await.unwrap()).await;
    assert_eq!((status, problem["pointer"].as_str()), (403, Some("/jobs/1/room")), "{problem}");
    // The admin sees both rooms' jobs; nothing of bob's refused writes exists.
    let (_, page) = app.get("/jobs").await;
    assert_eq!(page["jobs"].as_array().unwrap().len(), 2, "{page}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 2);
}

async fn idempotency_keys_and_set_names_are_per_room(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let alice = member(&app, "alice", &["a"]).await;
    let bob = member(&app, "bob", &["b"]).await;
    let body =
        |who: &str| json!({ "operation": "ping", "queue": PARKED, "idempotency_key": "k1", "payload": { "who": who } });
    let (status, first) = submit(&alice, &app, body("alice")).await;
    assert_eq!(status, 201, "{first}");
    // Bob's same key neither returns alice's job nor conflicts with it.
    let (status, second) = submit(&bob, &app, body("bob")).await;
    assert_eq!(status, 201, "{second}");
    assert_ne!(first["id"], second["id"]);
    let (status, again) = submit(&alice, &app, body("alice")).await;
    assert_eq!((status, &again["id"]), (200, &first["id"]));
    let (status, problem) = read(bob.get(app.url("/embeddings/some-set?room=a")).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("set_not_found")), "{problem}");
}

async fn children_stay_in_their_parents_room(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let alice = member(&app, "alice", &["a", "a2"]).await;
    let group =
        json!({ "operation": "group", "payload": { "jobs": [{ "operation": "ping" }, { "operation": "ping" }] } });
    let (status, parent) = submit(&alice, &app, group).await;
    assert_eq!(status, 201, "{parent}");
    let id = parent["id"].as_str().unwrap();
    app.wait_for_status(id, "succeeded").await;
    let (_, children) = read(alice.get(app.url(&format!("/jobs/{id}/children"))).send().await.unwrap()).await;
    let rooms: Vec<&str> = children["jobs"].as_array().unwrap().iter().map(|c| c["room"].as_str().unwrap()).collect();
    assert_eq!(rooms, ["a", "a"], "{children}");
    // An outside child names another room of the caller's: refused, not moved.
    let (_, plain) = submit(&alice, &app, json!({ "operation": "ping", "queue": PARKED })).await;
    let body = json!({ "operation": "ping", "queue": PARKED, "room": "a2", "parent_job_id": plain["id"] });
    let (status, problem) = submit(&alice, &app, body).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("room_mismatch")), "{problem}");
}

async fn global_and_internal_rooms_follow_their_rules(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let alice = member(&app, "alice", &["a"]).await;
    let (status, problem) = submit(&alice, &app, json!({ "operation": "ping", "room": "@global" })).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("room_forbidden")), "{problem}");
    let (status, global) = app.submit(json!({ "operation": "ping", "queue": PARKED, "room": "@global" })).await;
    assert_eq!(status, 201, "{global}");
    let id = global["id"].as_str().unwrap();
    // Every member reads @global; none changes it.
    let (status, _) = read(alice.get(app.url(&format!("/jobs/{id}"))).send().await.unwrap()).await;
    assert_eq!(status, 200);
    let (_, page) = read(alice.get(app.url("/jobs")).send().await.unwrap()).await;
    assert_eq!(page["jobs"][0]["id"], global["id"], "{page}");
    let (status, problem) = read(alice.post(app.url(&format!("/jobs/{id}/cancel"))).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("room_forbidden")), "{problem}");
    // @internal is the server's: nobody submits to it, not even an admin.
    for client in [&alice, &app.client] {
        let (status, problem) = submit(client, &app, json!({ "operation": "ping", "room": "@internal" })).await;
        assert_eq!((status, problem["code"].as_str()), (403, Some("room_forbidden")), "{problem}");
    }
    let (status, problem) = read(alice.get(app.url("/jobs?room=@internal")).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (403, Some("room_forbidden")), "{problem}");
    for bad in ["a:b", "x@y", "@globals", "", &"r".repeat(65), "tab\there"] {
        let (status, problem) = app.submit(json!({ "operation": "ping", "room": bad })).await;
        assert_eq!((status, problem["code"].as_str()), (400, Some("invalid_room_id")), "{bad:?}: {problem}");
        assert_eq!(problem["pointer"], "/room");
        let encoded: String = bad.bytes().map(|byte| format!("%{byte:02X}")).collect();
        let (status, problem) = app.get(&format!("/jobs?room={encoded}")).await;
        assert_eq!((status, problem["code"].as_str()), (400, Some("invalid_room_id")), "{bad:?}: {problem}");
    }
    let (status, problem) = app.submit(json!({ "operation": "ping", "room": "a\u{0}b" })).await;
    assert_eq!((status, problem["pointer"].as_str()), (422, Some("/room")), "{problem}");
    let (status, problem) = app.submit(json!({ "operation": "ping", "room": 5 })).await;
    assert_eq!((status, problem["code"].as_str()), (422, Some("invalid_request")), "{problem}");
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 1, "only the admin's @global job exists");
}

async fn a_revoked_token_is_refused_at_once(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let (text, id) = token(&app, json!({ "user": "carol", "rooms": ["c"] })).await;
    let carol = client_with(&text);
    for _ in 0..3 {
        assert_eq!(carol.get(app.url("/jobs")).send().await.unwrap().status(), 200);
    }
    let (status, revoked) =
        read(app.client.delete(app.url(&format!("/admin/tokens/{id}"))).send().await.unwrap()).await;
    assert_eq!(status, 200, "{revoked}");
    assert!(revoked["revoked_at"].is_string(), "{revoked}");
    let (status, problem) = read(carol.get(app.url("/jobs")).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (401, Some("unauthorized")), "{problem}");
    let missing = Uuid::new_v4();
    let (status, problem) =
        read(app.client.delete(app.url(&format!("/admin/tokens/{missing}"))).send().await.unwrap()).await;
    assert_eq!((status, problem["code"].as_str()), (404, Some("token_not_found")), "{problem}");
}

async fn token_management_keeps_secrets_and_refuses_bad_requests(backend: Backend) {
    let app = TestApp::spawn_with(backend, TestOptions { workers: false, ..Default::default() }).await;
    let (text, _) = token(&app, json!({ "user": "dave", "rooms": ["d"], "label": "ci" })).await;
    let (status, list) = app.get("/admin/tokens").await;
    assert_eq!(status, 200);
    let listed = list.to_string();
    assert!(!listed.contains(&text[36..]) && !listed.contains(&app.admin_token[36..]), "a secret is listed");
    assert!(!listed.contains("secret"), "{listed}");
    assert_eq!(list["tokens"].as_array().unwrap().len(), 2, "{list}");
    let secret = &text[36..];
    let in_clear = format!("SELECT COUNT(*) FROM api_token WHERE secret_sha256 = '{secret}' OR user_name = '{secret}'");
    assert_eq!(app.count(&in_clear).await, 0, "a token is stored in clear");
    assert_eq!(app.count("SELECT COUNT(*) FROM api_token WHERE LENGTH(secret_sha256) = 64").await, 2);
    let cases = [
        (json!({ "user": "x" }), 422, "invalid_token_request"),
        (json!({ "user": "x", "rooms": ["@global"] }), 422, "invalid_token_request"),
        (json!({ "user": "x", "rooms": ["a:b"] }), 400, "invalid_room_id"),
        (json!({ "user": "x", "rooms": ["a"], "role": "root" }), 422, "invalid_request"),
        (json!({ "user": "x\u{0}", "rooms": ["a"] }), 422, "nul_character"),
        (json!({ "user": "", "rooms": ["a"] }), 422, "invalid_token_request"),
        (json!({ "user": "x".repeat(129), "rooms": ["a"] }), 422, "invalid_token_request"),
        (json!({ "user": 5, "rooms": ["a"] }), 422, "invalid_request"),
        (json!({ "user": "x", "rooms": "a" }), 422, "invalid_request"),
        (json!({ "user": "x", "rooms": ["a"], "extra": 1 }), 422, "invalid_request"),
    ];
    for (body, status, code) in cases {
        let (actual, problem) = read(app.client.post(app.url("/admin/tokens")).json(&body).send().await.unwrap()).await;
        assert_eq!((actual, problem["code"].as_str()), (status, Some(code)), "{body} -> {problem}");
    }
    let huge = json!({ "user": "x", "rooms": vec!["r"; 200_000] });
    let (status, _) = read(app.client.post(app.url("/admin/tokens")).json(&huge).send().await.unwrap()).await;
    assert_eq!(status, 413);
    let (status, _) = read(app.client.delete(app.url("/admin/tokens/not-a-uuid")).send().await.unwrap()).await;
    assert_eq!(status, 400);
    assert_eq!(app.count("SELECT COUNT(*) FROM api_token").await, 2, "a refused request made a token");
    // A huge Authorization header is refused (or the connection closed), and nothing breaks.
    let big = format!("Bearer {}", "x".repeat(60_000));
    if let Ok(response) = reqwest::Client::new().get(app.url("/jobs")).header("authorization", big).send().await {
        assert!([400, 401, 431].contains(&response.status().as_u16()), "{}", response.status());
    }
    let non_utf8 = reqwest::header::HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap();
    let response = reqwest::Client::new().get(app.url("/jobs")).header("authorization", non_utf8).send().await;
    assert_eq!(response.unwrap().status(), 401);
    assert_eq!(app.get("/healthz").await.0, 200);
}

/// Servers starting together on an empty store: exactly one makes (and prints) the first
/// admin token.
async fn one_first_admin_token_however_many_servers_start(backend: Backend) {
    let (_database, url) = TestDatabase::create(backend).await;
    let settings = yardmaster::config::StoreSettings { url, ..yardmaster::config::Settings::default().store };
    let db = yardmaster::store::connect(&settings).await.unwrap();
    yardmaster::store::migrate(&db).await.unwrap();
    let starts = (0..8).map(|_| yardmaster::auth::ensure_admin(&db, None));
    let created = futures_util::future::join_all(starts)
        .await
        .into_iter()
        .filter(|first| matches!(first.as_ref().unwrap(), yardmaster::auth::FirstToken::Created(_)))
        .count();
    assert_eq!(created, 1);
    assert_eq!(yardmaster::auth::tokens::count(&db).await.unwrap(), 1);
    db.close().await.unwrap();
}

on_both_backends!(
    one_first_admin_token_however_many_servers_start,
    every_route_needs_a_valid_bearer_token,
    roles_and_read_only_tokens_are_enforced_on_every_route,
    two_tenants_cannot_see_or_touch_each_others_jobs,
    idempotency_keys_and_set_names_are_per_room,
    children_stay_in_their_parents_room,
    global_and_internal_rooms_follow_their_rules,
    a_revoked_token_is_refused_at_once,
    token_management_keeps_secrets_and_refuses_bad_requests,
);
