//! The dashboard over real HTTP, as a browser speaks to it (a cookie, forms, redirects):
//! the login and its cookie, rooms, CSRF and origin checks, read-only tokens, bulk actions,
//! keyset paging, and hostile input (markup, NUL, huge bodies, another room's ids). The
//! same pages driven in Chromium are `tests/browser/`.

use reqwest::header::{HeaderMap, CONTENT_TYPE, COOKIE, LOCATION, ORIGIN, SET_COOKIE};
use serde_json::{json, Value};

use crate::helpers::{read, Backend, TestApp, PARKED};

/// A client that does not follow redirects, so a 303 is seen as one.
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(yardmaster::http::CLIENT_IDLE)
        .build()
        .unwrap()
}

struct Answer {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Answer {
    fn location(&self) -> &str {
        self.headers.get(LOCATION).map_or("", |value| value.to_str().unwrap())
    }

    /// The CSRF token the page's forms carry.
    fn csrf(&self) -> String {
        let at = self.body.find(r#"name="csrf" value=""#).expect("no form with a CSRF token") + 19;
        self.body[at..at + 32].to_owned()
    }
}

async fn answer(request: reqwest::RequestBuilder) -> Answer {
    let response = request.send().await.unwrap();
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.text().await.unwrap(),
    }
}

async fn get(app: &TestApp, token: Option<&str>, path: &str) -> Answer {
    let mut request = browser().get(app.url(path));
    if let Some(token) = token {
        request = request.header(COOKIE, format!("ym_session={token}"));
    }
    answer(request).await
}

async fn post(app: &TestApp, token: &str, path: &str, form: &[(&str, &str)]) -> Answer {
    let request = browser().post(app.url(path)).header(COOKIE, format!("ym_session={token}")).form(form);
    answer(request).await
}

/// A new token made by the admin: (text).
async fn token(app: &TestApp, body: Value) -> String {
    let (status, created) = read(app.client.post(app.url("/admin/tokens")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{created}");
    created["token"].as_str().unwrap().to_owned()
}

async fn parked(app: &TestApp, body: Value) -> String {
    let mut body = body;
    body["queue"] = json!(PARKED);
    let (status, job) = app.submit(body).await;
    assert_eq!(status, 201, "{job}");
    job["id"].as_str().unwrap().to_owned()
}

async fn status_of(app: &TestApp, id: &str) -> String {
    app.get(&format!("/jobs/{id}")).await.1["status"].as_str().unwrap().to_owned()
}

async fn login_sets_a_strict_http_only_cookie_and_refuses_bad_tokens(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let away = get(&app, None, "/ui/jobs?status=failed").await;
    assert_eq!((away.status, away.location()), (303, "/ui/login?next=%2Fui%2Fjobs%3Fstatus%3Dfailed"));
    let page = get(&app, None, "/ui/login").await;
    assert_eq!(page.status, 200);
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");

    let login = |token: String, next: &'static str| {
        browser().post(app.url("/ui/login")).form(&[("token", token), ("next", next.to_owned())])
    };
    let bad = answer(login("ym_0123_nope".into(), "/ui")).await;
    assert_eq!(bad.status, 401);
    assert!(bad.body.contains("unknown or revoked") && bad.headers.get(SET_COOKIE).is_none());
    let worker = token(&app, json!({ "user": "w", "role": "worker", "rooms": ["default"] })).await;
    let refused = answer(login(worker, "/ui")).await;
    assert_eq!(refused.status, 403);
    assert!(refused.body.contains("worker token"));

    // No open redirect: a `next` off the dashboard goes to its start.
    let admitted = answer(login(app.admin_token.clone(), "https://evil.example/ui")).await;
    assert_eq!((admitted.status, admitted.location()), (303, "/ui"));
    let cookie = admitted.headers[SET_COOKIE].to_str().unwrap();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui", "Max-Age=43200"] {
        assert!(cookie.contains(attribute), "{attribute} missing: {cookie}");
    }
    let elsewhere = answer(login(app.admin_token.clone(), "/ui").header(ORIGIN, "http://evil.example")).await;
    assert_eq!(elsewhere.status, 403);
    assert!(elsewhere.headers.get(SET_COOKIE).is_none());

    // Logged in: the pages answer; logging out removes the cookie.
    let queues = get(&app, Some(&app.admin_token), "/ui").await;
    assert_eq!(queues.status, 200);
    assert!(
        queues.body.contains(r#"<tr data-queue="default" data-queued="0" data-state="running">"#),
        "{}",
        queues.body
    );
    let out = post(&app, &app.admin_token, "/ui/logout", &[("csrf", &queues.csrf())]).await;
    assert_eq!((out.status, out.location()), (303, "/ui/login"));
    assert!(out.headers[SET_COOKIE].to_str().unwrap().contains("Max-Age=0"));
    // A revoked token is logged out on its next page.
    let (_, tokens) = app.get("/admin/tokens").await;
    let member = token(&app, json!({ "user": "m", "role": "member", "rooms": ["default"] })).await;
    assert_eq!(get(&app, Some(&member), "/ui").await.status, 200);
    let (_, listed) = app.get("/admin/tokens").await;
    let id = listed["tokens"].as_array().unwrap().iter().find(|t| t["user"] == "m").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(app.client.delete(app.url(&format!("/admin/tokens/{id}"))).send().await.unwrap().status(), 200);
    let revoked = get(&app, Some(&member), "/ui").await;
    assert_eq!(revoked.status, 303, "{tokens}");
    // The assets need no session and come from the binary.
    let script = get(&app, None, "/ui/assets/dashboard.js").await;
    assert_eq!(script.status, 200);
    assert!(script.headers[CONTENT_TYPE].to_str().unwrap().starts_with("text/javascript"));
    assert_eq!(get(&app, None, "/ui/assets/../../etc/passwd").await.status, 404);
}

async fn a_viewer_sees_only_its_rooms(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let eve = token(&app, json!({ "user": "eve", "role": "member", "rooms": ["elsewhere"] })).await;
    let id = parked(&app, json!({ "operation": "ping" })).await;
    let theirs = get(&app, Some(&eve), &format!("/ui/jobs/{id}")).await;
    assert_eq!(theirs.status, 404);
    assert!(!theirs.body.contains("ping"));
    assert!(!get(&app, Some(&eve), "/ui/jobs").await.body.contains(&id));
    assert!(get(&app, Some(&app.admin_token), "/ui/jobs").await.body.contains(&id));
    let asked = get(&app, Some(&eve), "/ui/jobs?room=default").await;
    assert_eq!(asked.status, 403);
    // Eve's queues count only her room's jobs.
    let row = format!(r#"<tr data-queue="{PARKED}" data-queued="#);
    let queues = get(&app, Some(&eve), "/ui").await.body;
    assert!(queues.contains(&format!(r#"{row}"0""#)), "another room's job counted: {queues}");
    let all = get(&app, Some(&app.admin_token), "/ui").await.body;
    assert!(all.contains(&format!(r#"{row}"1""#)), "the admin's count: {all}");
    // Her stream of another room's job is the API's 404.
    assert_eq!(get(&app, Some(&eve), &format!("/ui/jobs/{id}/stream")).await.status, 404);
    let csrf = get(&app, Some(&eve), "/ui").await.csrf();
    let cancel = post(&app, &eve, &format!("/ui/jobs/{id}/cancel"), &[("csrf", &csrf)]).await;
    assert_eq!(cancel.status, 404);
    assert_eq!(status_of(&app, &id).await, "queued");
}

async fn changes_need_the_sessions_csrf_token_and_this_origin(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let admin = app.admin_token.clone();
    let id = parked(&app, json!({ "operation": "ping" })).await;
    let page = get(&app, Some(&admin), &format!("/ui/jobs/{id}")).await;
    assert!(page.body.contains(&format!(r#"action="/ui/jobs/{id}/cancel""#)), "{}", page.body);
    let cancel = format!("/ui/jobs/{id}/cancel");
    assert!(post(&app, &admin, &cancel, &[]).await.status >= 400);
    assert_eq!(post(&app, &admin, &cancel, &[("csrf", "0123456789abcdef0123456789abcdef")]).await.status, 403);
    let other = token(&app, json!({ "user": "o", "role": "admin" })).await;
    let others_csrf = get(&app, Some(&other), "/ui").await.csrf();
    assert_eq!(post(&app, &admin, &cancel, &[("csrf", &others_csrf)]).await.status, 403, "another session's token");
    let foreign = browser()
        .post(app.url(&cancel))
        .header(COOKIE, format!("ym_session={admin}"))
        .header(ORIGIN, "https://evil.example")
        .form(&[("csrf", page.csrf())]);
    assert_eq!(answer(foreign).await.status, 403);
    assert_eq!(status_of(&app, &id).await, "queued", "nothing changed yet");

    let done = post(&app, &admin, &cancel, &[("csrf", &page.csrf())]).await;
    assert_eq!((done.status, done.location()), (303, format!("/ui/jobs/{id}").as_str()));
    assert_eq!(status_of(&app, &id).await, "cancelled");
    let again = get(&app, Some(&admin), &format!("/ui/jobs/{id}")).await;
    assert!(again.body.contains(&format!(r#"action="/ui/jobs/{id}/retry""#)));
    assert_eq!(post(&app, &admin, &format!("/ui/jobs/{id}/retry"), &[("csrf", &page.csrf())]).await.status, 303);
    assert_eq!(status_of(&app, &id).await, "queued");
    // Cancelling what cannot be: a page that says so.
    let ping = app.submit(json!({ "operation": "ping" })).await.1["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&ping, "succeeded").await;
    let late = post(&app, &admin, &format!("/ui/jobs/{ping}/retry"), &[("csrf", &page.csrf())]).await;
    assert_eq!(late.status, 409);
}

async fn a_read_only_token_sees_no_buttons_and_changes_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reader = token(&app, json!({ "user": "r", "role": "member", "rooms": ["default"], "read_only": true })).await;
    let id = parked(&app, json!({ "operation": "ping" })).await;
    let page = get(&app, Some(&reader), &format!("/ui/jobs/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("read-only"));
    assert!(!page.body.contains("/cancel\"") && !page.body.contains("/retry\""), "{}", page.body);
    let list = get(&app, Some(&reader), "/ui/jobs").await;
    assert!(list.body.contains(&id) && !list.body.contains("/ui/bulk"));
    assert_eq!(get(&app, Some(&reader), "/ui/bulk?action=cancel").await.status, 403);
    let csrf = page.csrf(); // the log-out form's
    assert_eq!(post(&app, &reader, &format!("/ui/jobs/{id}/cancel"), &[("csrf", &csrf)]).await.status, 403);
    let bulk = post(&app, &reader, "/ui/bulk", &[("csrf", &csrf), ("action", "cancel")]).await;
    assert_eq!(bulk.status, 403);
    assert_eq!(status_of(&app, &id).await, "queued");
    assert_eq!(get(&app, Some(&reader), "/ui/dead-letters").await.status, 403, "admins only");
}

async fn bulk_actions_count_then_change_what_the_filter_matches(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let admin = app.admin_token.clone();
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(parked(&app, json!({ "operation": "ping" })).await);
    }
    let done = app.submit(json!({ "operation": "ping" })).await.1["id"].as_str().unwrap().to_owned();
    app.wait_for_status(&done, "succeeded").await;
    let confirm = get(&app, Some(&admin), &format!("/ui/bulk?action=cancel&queue={PARKED}")).await;
    assert_eq!(confirm.status, 200);
    assert!(confirm.body.contains(r#"data-count="3""#), "{}", confirm.body);
    let form = [("csrf", confirm.csrf()), ("action", "cancel".into()), ("queue", PARKED.into())];
    let form: Vec<(&str, &str)> = form.iter().map(|(name, value)| (*name, value.as_str())).collect();
    let applied = post(&app, &admin, "/ui/bulk", &form).await;
    assert_eq!(applied.status, 303);
    assert_eq!(applied.location(), format!("/ui/jobs?queue={PARKED}&done=cancel&changed=3&skipped=0"));
    for id in &ids {
        assert_eq!(status_of(&app, id).await, "cancelled");
    }
    assert_eq!(status_of(&app, &done).await, "succeeded", "outside the filter");
    let notice = get(&app, Some(&admin), applied.location()).await;
    assert!(notice.body.contains("3 jobs cancelled"), "{}", notice.body);

    let retry = get(&app, Some(&admin), &format!("/ui/bulk?action=retry&queue={PARKED}&status=cancelled")).await;
    assert!(retry.body.contains(r#"data-count="3""#));
    let form =
        [("csrf", retry.csrf()), ("action", "retry".into()), ("queue", PARKED.into()), ("status", "cancelled".into())];
    let form: Vec<(&str, &str)> = form.iter().map(|(name, value)| (*name, value.as_str())).collect();
    assert_eq!(post(&app, &admin, "/ui/bulk", &form).await.status, 303);
    for id in &ids {
        assert_eq!(status_of(&app, id).await, "queued");
    }
    // A filter that matches nothing changes nothing.
    let none = get(&app, Some(&admin), "/ui/bulk?action=retry&operation=nothing_like_it").await;
    assert!(none.body.contains(r#"data-count="0""#));
}

async fn the_list_pages_by_keyset_and_filters_by_time(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let admin = app.admin_token.clone();
    let jobs: Vec<Value> = (0..55).map(|_| json!({ "operation": "ping", "queue": PARKED })).collect();
    let (status, _) =
        read(app.client.post(app.url("/jobs:batch")).json(&json!({ "jobs": jobs })).send().await.unwrap()).await;
    assert_eq!(status, 201);
    let rows = |body: &str| body.matches("<tr data-id=").count();
    let first = get(&app, Some(&admin), &format!("/ui/jobs?queue={PARKED}")).await;
    assert_eq!(rows(&first.body), 50);
    let marker = r#"rel="next" href=""#;
    let at = first.body.find(marker).expect("no next page") + marker.len();
    let next = first.body[at..].split('"').next().unwrap().replace("&amp;", "&");
    let second = get(&app, Some(&admin), &next).await;
    assert_eq!(rows(&second.body), 5, "{next}");
    assert!(!second.body.contains(r#"rel="next""#));
    let hour = chrono::Duration::hours(1);
    let later = (chrono::Utc::now() + hour).format("%Y-%m-%dT%H:%M").to_string();
    let earlier = (chrono::Utc::now() - hour).format("%Y-%m-%dT%H:%M").to_string();
    assert_eq!(rows(&get(&app, Some(&admin), &format!("/ui/jobs?from={later}")).await.body), 0);
    assert_eq!(rows(&get(&app, Some(&admin), &format!("/ui/jobs?to={earlier}")).await.body), 0);
    assert_eq!(
        rows(&get(&app, Some(&admin), &format!("/ui/jobs?from={earlier}&to={later}&queue={PARKED}")).await.body),
        50
    );
}

async fn hostile_input_is_escaped_or_refused(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let admin = app.admin_token.clone();
    let evil = "<script>alert(1)</script>";
    let key = r#""><img src=x onerror=alert(1)>"#;
    let id = parked(&app, json!({ "operation": "ping", "payload": { "x": evil }, "idempotency_key": key })).await;
    let page = get(&app, Some(&admin), &format!("/ui/jobs/{id}")).await;
    assert!(!page.body.contains(evil) && !page.body.contains("<img src=x"), "unescaped");
    assert!(page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    // Found by its key, shown escaped in the form it was typed in.
    let found = get(&app, Some(&admin), &format!("/ui/jobs?q={}", urlencode(key))).await;
    assert!(found.body.contains(&id) && !found.body.contains("<img src=x"));
    // An id opens the job.
    let by_id = get(&app, Some(&admin), &format!("/ui/jobs?q={id}")).await;
    assert_eq!((by_id.status, by_id.location()), (303, format!("/ui/jobs/{id}").as_str()));
    for query in
        ["operation=a%00b", "status=everything", "from=yesterday", "parent=42", &format!("queue={}", "q".repeat(300))]
    {
        let refused = get(&app, Some(&admin), &format!("/ui/jobs?{query}")).await;
        assert_eq!(refused.status, 400, "{query}");
        assert!(refused.body.contains("notice error"), "{query}");
    }
    assert_eq!(get(&app, Some(&admin), "/ui/jobs/not-an-id").await.status, 404);
    assert_eq!(get(&app, Some(&admin), &format!("/ui/jobs/{}", uuid::Uuid::now_v7())).await.status, 404);
    // A body past the form limit; a form of the wrong shape.
    let huge = "a".repeat(200 * 1024);
    let big = browser().post(app.url("/ui/login")).form(&[("token", huge.as_str())]);
    assert_eq!(answer(big).await.status, 413);
    let csrf = page.csrf();
    let bad_action = post(&app, &admin, "/ui/bulk", &[("csrf", &csrf), ("action", "explode")]).await;
    assert_eq!(bad_action.status, 400);
    let nul = post(&app, &admin, "/ui/bulk", &[("csrf", &csrf), ("action", "cancel"), ("queue", "x\0y")]).await;
    assert_eq!(nul.status, 400);
    assert_eq!(status_of(&app, &id).await, "queued", "nothing changed");
}

async fn a_coordinators_page_counts_its_batches(backend: Backend) {
    let options = crate::helpers::TestOptions::fan_out();
    let app = TestApp::spawn_with(backend, options).await;
    let payload = json!({ "start": 1, "end": 100, "batch_size": 10 });
    let id = app.submit(json!({ "operation": "sum_squares", "payload": payload })).await.1["id"]
        .as_str()
        .unwrap()
        .to_owned();
    app.wait_for_status(&id, "succeeded").await;
    let page = get(&app, Some(&app.admin_token), &format!("/ui/jobs/{id}")).await;
    assert!(page.body.contains(r#"<p class="batches">10 of 10 ended: 10 succeeded</p>"#), "{}", page.body);
    assert_eq!(page.body.matches("<tr><td class=\"n\">").count(), 10);
    assert!(page.body.contains("10/10 (100%)"));
}

fn urlencode(text: &str) -> String {
    text.bytes().map(|byte| format!("%{byte:02X}")).collect()
}

/// A job that waits for its time says until when in the list; one that may run does not.
async fn a_waiting_job_says_until_when(backend: Backend) {
    let app = TestApp::spawn_with(backend, crate::helpers::TestOptions { workers: false, ..Default::default() }).await;
    let (_, waiting) = app.submit(json!({ "operation": "ping", "delay_seconds": 3600 })).await;
    let (_, ready) = app.submit(json!({ "operation": "ping" })).await;
    let page = get(&app, Some(&app.admin_token), "/ui/jobs").await.body;
    let row = |id: &Value| {
        let id = id.as_str().unwrap();
        let start = page.find(&format!("data-id=\"{id}\"")).unwrap_or_else(|| panic!("no row {id}: {page}"));
        let end = page[start..].find("</tr>").map_or(page.len(), |end| start + end);
        page[start..end].to_owned()
    };
    assert!(row(&waiting["id"]).contains("class=\"waits\""), "{}", row(&waiting["id"]));
    assert!(!row(&ready["id"]).contains("class=\"waits\""), "{}", row(&ready["id"]));
}

/// A job's page lists what it waits for and what waits for it, linked; the list says a
/// job waits for its dependencies.
async fn a_jobs_page_shows_its_dependencies_and_dependents(backend: Backend) {
    let app = TestApp::spawn_with(backend, crate::helpers::TestOptions { workers: false, ..Default::default() }).await;
    let items = json!({ "jobs": [{ "operation": "ping" }, { "operation": "ping", "depends_on": ["#0"] }] });
    let (status, answer) = read(app.client.post(app.url("/jobs:batch")).json(&items).send().await.unwrap()).await;
    assert_eq!(status, 201, "{answer}");
    let (first, second) = (answer["jobs"][0]["id"].as_str().unwrap(), answer["jobs"][1]["id"].as_str().unwrap());
    let page = get(&app, Some(&app.admin_token), &format!("/ui/jobs/{second}")).await.body;
    let section = &page[page.find("Waits for").unwrap_or_else(|| panic!("{page}"))..];
    assert!(section.contains(&format!("href=\"/ui/jobs/{first}\"")), "{section}");
    assert!(page.contains("Waiting for its dependencies since"), "{page}");
    let page = get(&app, Some(&app.admin_token), &format!("/ui/jobs/{first}")).await.body;
    let section = &page[page.find("Waited for by").unwrap_or_else(|| panic!("{page}"))..];
    assert!(section.contains(&format!("href=\"/ui/jobs/{second}\"")), "{section}");
    assert!(section.contains("waiting"), "{section}");
    let list = get(&app, Some(&app.admin_token), "/ui/jobs").await.body;
    assert!(list.contains("waiting for its dependencies"), "{list}");
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.lines().any(|line| line == "yardmaster_jobs_waiting{queue=\"default\"} 1"), "{metrics}");
}

async fn schedules_are_listed_paused_and_run_from_their_page(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "name": "<b>nightly</b>", "cron": "0 2 * * *", "timezone": "Europe/Madrid", "job": { "operation": "ping" } });
    let (status, created) = read(app.client.post(app.url("/schedules")).json(&body).send().await.unwrap()).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let page = get(&app, Some(&app.admin_token), "/ui/schedules").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("&lt;b&gt;nightly&lt;/b&gt;") && !page.body.contains("<b>nightly"),
        "escaped: {}",
        page.body
    );
    assert!(page.body.contains("0 2 * * * (Europe/Madrid)"), "{}", page.body);
    let csrf = page.csrf();
    let paused =
        post(&app, &app.admin_token, &format!("/ui/schedules/{id}"), &[("csrf", &csrf), ("action", "pause")]).await;
    assert_eq!(
        (paused.status, paused.location().starts_with("/ui/schedules?done=paused")),
        (303, true),
        "{}",
        paused.body
    );
    assert_eq!(app.get(&format!("/schedules/{id}")).await.1["paused"], true);
    let page = get(&app, Some(&app.admin_token), "/ui/schedules").await;
    assert!(page.body.contains("Resume"), "{}", page.body);
    let ran = post(&app, &app.admin_token, &format!("/ui/schedules/{id}"), &[("csrf", &csrf), ("action", "run")]).await;
    assert!(ran.status == 303 && ran.location().starts_with("/ui/jobs/"), "{}", ran.body);
    app.wait_for_status(ran.location().trim_start_matches("/ui/jobs/"), "succeeded").await;
    // Without the session's CSRF token nothing changes; another room's viewer sees nothing.
    let forged = post(
        &app,
        &app.admin_token,
        &format!("/ui/schedules/{id}"),
        &[("csrf", "0123456789abcdef0123456789abcdef"), ("action", "resume")],
    )
    .await;
    assert_eq!(forged.status, 403);
    assert_eq!(app.get(&format!("/schedules/{id}")).await.1["paused"], true);
    let eve = token(&app, json!({ "user": "eve", "role": "member", "rooms": ["elsewhere"] })).await;
    let theirs = get(&app, Some(&eve), "/ui/schedules").await;
    assert!(!theirs.body.contains("nightly"), "{}", theirs.body);
    let eve_csrf = get(&app, Some(&eve), "/ui").await.csrf();
    let refused = post(&app, &eve, &format!("/ui/schedules/{id}"), &[("csrf", &eve_csrf), ("action", "resume")]).await;
    assert_eq!(refused.status, 404, "{}", refused.body);
}

on_both_backends!(
    schedules_are_listed_paused_and_run_from_their_page,
    a_waiting_job_says_until_when,
    a_jobs_page_shows_its_dependencies_and_dependents,
    login_sets_a_strict_http_only_cookie_and_refuses_bad_tokens,
    a_viewer_sees_only_its_rooms,
    changes_need_the_sessions_csrf_token_and_this_origin,
    a_read_only_token_sees_no_buttons_and_changes_nothing,
    bulk_actions_count_then_change_what_the_filter_matches,
    the_list_pages_by_keyset_and_filters_by_time,
    hostile_input_is_escaped_or_refused,
    a_coordinators_page_counts_its_batches,
);
