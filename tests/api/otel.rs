//! OpenTelemetry export (built with `--features otel`): the real binary, pointed at a
//! collector (here a plain HTTP listener that keeps what it is sent), exports the spans of
//! a request (with the id its response carried) and of a job's run (with the job's id) as
//! OTLP, the last of them when it stops on SIGTERM.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::helpers::{client_with, eventually, read};
use crate::tokens_cli::{fresh_dir, Server};

/// The requests a collector received: (path, body).
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An OTLP/HTTP collector that answers 200 and keeps every request.
fn collector() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let kept = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let kept = kept.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream);
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = request_line.split_whitespace().nth(1).unwrap_or_default().to_owned();
                    let mut length = 0;
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).unwrap();
                        if header.trim().is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':') {
                            if name.eq_ignore_ascii_case("content-length") {
                                length = value.trim().parse().unwrap();
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    kept.lock().unwrap().push((path, body));
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    reader.get_mut().write_all(answer.as_bytes()).unwrap();
                }
            });
        }
    });
    (address, received)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle.as_bytes())
}

#[actix_rt::test]
async fn spans_of_requests_and_jobs_are_exported() {
    let (endpoint, received) = collector();
    let dir = fresh_dir();
    let uploads = dir.join("uploads").display().to_string();
    let server = Server::start_with_workers(
        &dir,
        &[
            ("YARDMASTER__LOG__OTLP_ENDPOINT", endpoint.as_str()),
            ("YARDMASTER__LOG__SERVICE_NAME", "yardmaster-otel-test"),
            ("YARDMASTER__UPLOADS__DIR", &uploads),
            ("RUST_LOG", "info"),
        ],
    );
    let token = server.printed_token();
    server.wait_until_up().await;
    let admin = client_with(&token);
    let response = admin.post(server.url("/jobs")).json(&json!({ "operation": "ping" })).send().await.unwrap();
    let request_id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    let (_, job) = read(response).await;
    let id = job["id"].as_str().unwrap().to_owned();
    eventually("the job ran", Duration::from_secs(30), || async {
        let (_, job) = read(admin.get(server.url(&format!("/jobs/{id}"))).send().await.unwrap()).await;
        (job["status"] == "succeeded").then_some(())
    })
    .await;
    // Stopped: what the batch still held is sent before the process exits.
    let (_, log) = server.stop();
    let received = received.lock().unwrap();
    assert!(!received.is_empty(), "nothing exported: {log}");
    assert!(
        received.iter().all(|(path, _)| path == "/v1/traces"),
        "{:?}",
        received.iter().map(|r| &r.0).collect::<Vec<_>>()
    );
    let all: Vec<u8> = received.iter().flat_map(|(_, body)| body.clone()).collect();
    for expected in ["yardmaster-otel-test", "request", "/jobs", &request_id, "job", &id, "ping"] {
        assert!(contains(&all, expected), "{expected:?} not in the exported spans");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
