//! Request ids and what the log says: every response carries `X-Request-Id`, a new one per
//! request; with `log.format = "json"` every line of the real binary is one JSON object, a
//! line logged while a request is served is inside its `request` span (the same id), and a
//! line about a running job is inside its `job` span (id, attempt).

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{json, Value};
use uuid::Uuid;

use crate::helpers::{client_with, eventually, read, Backend, TestApp};
use crate::tokens_cli::{fresh_dir, Server};

fn request_id(response: &reqwest::Response) -> Uuid {
    let value = response.headers().get("x-request-id").expect("no X-Request-Id").to_str().unwrap();
    value.parse().unwrap_or_else(|_| panic!("not a uuid: {value}"))
}

async fn every_response_has_its_own_request_id(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let anonymous = reqwest::Client::builder().pool_idle_timeout(yardmaster::http::CLIENT_IDLE).build().unwrap();
    let mut seen = HashSet::new();
    let responses = [
        app.client.get(app.url("/jobs")).send().await.unwrap(),
        app.client.get(app.url(&format!("/jobs/{}", Uuid::now_v7()))).send().await.unwrap(),
        anonymous.get(app.url("/jobs")).send().await.unwrap(),
        app.client.get(app.url("/no/such/route")).send().await.unwrap(),
        app.client
            .post(app.url("/jobs"))
            .header("content-type", "application/json")
            .body("{\"payload\": \"\0\"")
            .send()
            .await
            .unwrap(),
        app.client.get(app.url("/healthz")).send().await.unwrap(),
    ];
    let statuses: Vec<u16> = responses.iter().map(|response| response.status().as_u16()).collect();
    assert_eq!(statuses, [200, 404, 401, 404, 400, 200]);
    for response in &responses {
        assert!(seen.insert(request_id(response)), "a request id used twice");
    }
    // A client's own X-Request-Id is not taken: ids are the server's.
    let mine = Uuid::now_v7().to_string();
    let response = app.client.get(app.url("/jobs")).header("x-request-id", &mine).send().await.unwrap();
    assert_ne!(request_id(&response).to_string(), mine);
}

on_both_backends!(every_response_has_its_own_request_id);

/// The lines of a JSON log, each parsed (a line that is not JSON fails the test).
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|err| panic!("not a JSON line ({err}): {line}")))
        .collect()
}

fn span<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    line["spans"].as_array()?.iter().find(|span| span["name"] == name)
}

fn message(line: &Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or_default()
}

#[actix_rt::test]
async fn json_logs_name_the_request_and_the_job() {
    let dir = fresh_dir();
    let uploads = dir.join("uploads").display().to_string();
    let server = Server::start_with_workers(
        &dir,
        &[("YARDMASTER__LOG__FORMAT", "json"), ("RUST_LOG", "info"), ("YARDMASTER__UPLOADS__DIR", &uploads)],
    );
    let token = server.printed_token();
    server.wait_until_up().await;
    let admin = client_with(&token);

    let submitted =
        admin.post(server.url("/jobs")).json(&json!({ "operation": "sleep", "payload": { "seconds": 0.05 } }));
    let (status, quick) = read(submitted.send().await.unwrap()).await;
    assert_eq!(status, 201, "{quick}");
    let quick = quick["id"].as_str().unwrap().to_owned();
    eventually("finished", Duration::from_secs(30), || async {
        let (_, job) = read(admin.get(server.url(&format!("/jobs/{quick}"))).send().await.unwrap()).await;
        (job["status"] == "succeeded").then_some(())
    })
    .await;
    // A long job cancelled by request: that line is the request's.
    let long = json!({ "operation": "sleep", "payload": { "seconds": 60 } });
    let (_, parked) = read(admin.post(server.url("/jobs")).json(&long).send().await.unwrap()).await;
    let parked = parked["id"].as_str().unwrap().to_owned();
    let cancel = admin.post(server.url(&format!("/jobs/{parked}/cancel"))).send().await.unwrap();
    assert_eq!(cancel.status(), 200);
    let cancel_id = request_id(&cancel).to_string();

    let (_, log) = server.stop();
    let lines = json_lines(&log);
    assert!(lines.iter().all(|line| line["timestamp"].is_string() && line["level"].is_string()), "{log}");

    let cancelled = lines.iter().find(|line| message(line) == "job cancelled by request").expect("no cancel line");
    let request = span(cancelled, "request").unwrap_or_else(|| panic!("outside its request: {cancelled}"));
    assert_eq!(request["id"], cancel_id.as_str(), "{cancelled}");
    assert_eq!((request["method"].as_str(), request["route"].as_str()), (Some("POST"), Some("/jobs/{id}/cancel")));
    assert_eq!(cancelled["fields"]["job_id"], parked.as_str());

    let finished = lines
        .iter()
        .find(|line| message(line) == "finished" && line["fields"]["job_id"] == quick.as_str())
        .expect("no finished line");
    let job = span(finished, "job").unwrap_or_else(|| panic!("outside its job: {finished}"));
    assert_eq!((job["id"].as_str(), job["attempt"].as_i64()), (Some(quick.as_str()), Some(1)), "{finished}");
    let _ = std::fs::remove_dir_all(&dir);
}
