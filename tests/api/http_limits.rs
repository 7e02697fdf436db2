//! What one client can cost the server: bodies nobody reads, bodies that stall, too many
//! connections. Each is bounded, the descriptors come back, and `/healthz` keeps answering.
//! Raw TCP, since a well-behaved HTTP client cannot misbehave on purpose.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::helpers::{eventually, Backend, TestApp, TestOptions, BODY_TIMEOUT_SECONDS};

/// Server-side TCP connections of the app's port that still hold a socket (any state but
/// LISTEN and TIME_WAIT), from the kernel's table. Fails the test when the table cannot be
/// read or does not show the server's own listening socket: a count of 0 must mean 0.
fn server_connections(address: &str) -> usize {
    let port: u16 = address.rsplit(':').next().unwrap().parse().unwrap();
    let local = format!(":{port:04X}");
    let ipv4 = std::fs::read_to_string("/proc/net/tcp").expect("the kernel's TCP table is readable");
    // IPv6 may be off; the server listens on IPv4 (127.0.0.1).
    let ipv6 = std::fs::read_to_string("/proc/net/tcp6").unwrap_or_default();
    let rows = [ipv4, ipv6];
    let rows = rows.iter().flat_map(|text| text.lines().skip(1));
    let fields: Vec<Vec<&str>> = rows.map(|row| row.split_whitespace().collect()).collect();
    let ours = |f: &&Vec<&str>| f.len() > 3 && f[1].ends_with(&local);
    let listening = fields.iter().filter(ours).any(|f| f[3] == "0A");
    assert!(listening, "the TCP table does not show the server listening on port {port}");
    fields.iter().filter(ours).filter(|f| f[3] != "0A" && f[3] != "06").count()
}

fn connect(address: &str) -> TcpStream {
    let stream = TcpStream::connect(address.trim_start_matches("http://")).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
}

/// Reads until the server closes; what it sent. Panics if it keeps the connection open.
fn read_to_close(mut stream: TcpStream) -> String {
    let mut answer = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return String::from_utf8_lossy(&answer).into_owned(),
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => {
                return String::from_utf8_lossy(&answer).into_owned();
            }
            Err(err) => {
                panic!("the server kept the connection open ({err}); got {:?}", String::from_utf8_lossy(&answer))
            }
        }
    }
}

/// A chunked body of 300 KiB sent to an endpoint that reads none.
fn unread_chunked_body(address: &str, path: &str, token: &str) -> String {
    let mut stream = connect(address);
    let head = format!(
        "GET {path} HTTP/1.1\r\nhost: test\r\nauthorization: Bearer {token}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b'x'; 30 * 1024];
    for _ in 0..10 {
        // The server may stop reading once it has answered; what is not taken is dropped.
        let written = write!(stream, "{:x}\r\n", chunk.len())
            .and_then(|()| stream.write_all(&chunk))
            .and_then(|()| stream.write_all(b"\r\n"));
        if written.is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n");
    read_to_close(stream)
}

async fn an_unread_chunked_body_leaks_no_connection(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    // No earlier request: any server-side connection left afterwards is one of these.
    let path = format!("/jobs/{}", uuid::Uuid::now_v7());
    let requests = (0..20).map(|_| {
        let (path, address, token) = (path.clone(), app.address.clone(), app.admin_token.clone());
        actix_rt::task::spawn_blocking(move || unread_chunked_body(&address, &path, &token))
    });
    for answer in futures_util::future::join_all(requests).await {
        let answer = answer.unwrap();
        assert!(answer.starts_with("HTTP/1.1 404"), "{answer:.200}");
    }
    eventually("no connections still open on the server side", Duration::from_secs(10), || async {
        (server_connections(&app.address) == 0).then_some(())
    })
    .await;
    assert_eq!(app.get("/healthz").await.0, 200);
}

async fn a_stalled_body_is_cut_off(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for path in ["/jobs", "/schedules", "/tasks/claim", "/tasks:report"] {
        let (address, token) = (app.address.clone(), app.admin_token.clone());
        let started = Instant::now();
        let answer = actix_rt::task::spawn_blocking(move || {
            let mut stream = connect(&address);
            let head = format!(
                "POST {path} HTTP/1.1\r\nhost: test\r\nauthorization: Bearer {token}\r\n\
                 content-type: application/json\r\ncontent-length: 1000\r\n\r\n"
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(b"{\"operation\":").unwrap();
            read_to_close(stream)
        })
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{path}: {answer:.300}");
        assert!(answer.contains("request_timeout"), "{path}: {answer:.300}");
        let waited = started.elapsed();
        assert!(waited < Duration::from_secs(BODY_TIMEOUT_SECONDS + 5), "{path}: cut off after {waited:?}");
    }
    assert_eq!(app.count("SELECT COUNT(*) FROM job").await, 0);
    assert_eq!(app.count("SELECT COUNT(*) FROM schedule").await, 0);
}

/// A connection that was served one `/healthz` and stays open.
fn served(address: &str) -> TcpStream {
    let mut stream = connect(address);
    stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    while !String::from_utf8_lossy(&answer).contains("\"ok\"") {
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "closed before the answer: {:?}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buffer[..n]);
    }
    stream
}

async fn one_client_cannot_take_every_connection(backend: Backend) {
    const LIMIT: usize = 4;
    let options = TestOptions { max_connections_per_client: LIMIT, ..Default::default() };
    let app = TestApp::spawn_with(backend, options).await;
    let address = app.address.clone();
    let (held, refused) = actix_rt::task::spawn_blocking(move || {
        // Each held connection is answered once, so the server has admitted it, and then
        // kept open (keep-alive).
        let held: Vec<TcpStream> = (0..LIMIT).map(|_| served(&address)).collect();
        let mut extra = connect(&address);
        let _ = extra.write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n");
        (held, read_to_close(extra))
    })
    .await
    .unwrap();
    assert!(refused.is_empty(), "the connection past the limit was served: {refused:.200}");
    drop(held);
    eventually("a connection admitted again", Duration::from_secs(10), || async {
        let answer = app.client.get(app.url("/healthz")).send().await;
        matches!(answer, Ok(response) if response.status() == 200).then_some(())
    })
    .await;
}

on_both_backends!(
    an_unread_chunked_body_leaks_no_connection,
    a_stalled_body_is_cut_off,
    one_client_cannot_take_every_connection,
);
