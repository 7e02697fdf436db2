//! The real binary: the first `serve` on a new store prints one admin token, once, stored
//! only as a digest and never logged; `yardmaster token create|list|revoke` work on the
//! store a running server uses, and refuse bad arguments with a clear message.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use uuid::Uuid;

use crate::helpers::{client_with, eventually, new_token};

const BIN: &str = env!("CARGO_BIN_EXE_yardmaster");

fn store_url(dir: &Path) -> String {
    format!("sqlite://{}?mode=rwc", dir.join("ym.db").display())
}

pub(crate) fn fresh_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("yardmaster-tokens-{}", Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `yardmaster token ARGS` on the store in `dir`.
fn token_command(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN).arg("token").args(args).env("YARDMASTER__STORE__URL", store_url(dir)).output().unwrap()
}

/// A `serve` with its standard output and log read line by line as they come.
pub(crate) struct Server {
    child: Child,
    pub port: u16,
    pub stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

impl Server {
    pub fn start(dir: &Path, env: &[(&str, &str)]) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Server::start_on(dir, port, env)
    }

    /// As `start`, on `port` (a restart where clients expect the server).
    pub fn start_on(dir: &Path, port: u16, env: &[(&str, &str)]) -> Server {
        Server::spawn(dir, port, &["--no-workers"], env)
    }

    /// A `serve` that runs jobs too.
    pub fn start_with_workers(dir: &Path, env: &[(&str, &str)]) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Server::spawn(dir, port, &[], env)
    }

    fn spawn(dir: &Path, port: u16, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut child = Command::new(BIN)
            .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
            .args(args)
            .env("YARDMASTER__STORE__URL", store_url(dir))
            .env("YARDMASTER__WORKER__GRACE_SECONDS", "1")
            .env("YARDMASTER__AUTH__CACHE_SECONDS", "1")
            .env("RUST_LOG", "debug")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = lines(child.stdout.take().unwrap());
        let stderr = lines(child.stderr.take().unwrap());
        Server { child, port, stdout, stderr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub async fn wait_until_up(&self) {
        eventually("the server came up", Duration::from_secs(60), || async {
            reqwest::get(self.url("/healthz")).await.is_ok().then_some(())
        })
        .await;
    }

    /// SIGTERM, then everything it printed: (standard output, log).
    pub fn stop(mut self) -> (String, String) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap();
        let drain = |rx: &mpsc::Receiver<String>| rx.iter().collect::<Vec<_>>().join("\n");
        (drain(&self.stdout), drain(&self.stderr))
    }
}

fn lines(stream: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// The bytes of the store's files (database and write-ahead log), as text.
fn store_bytes(dir: &Path) -> String {
    ["ym.db", "ym.db-wal"]
        .iter()
        .filter_map(|name| std::fs::read(dir.join(name)).ok())
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .collect()
}

impl Server {
    /// The admin token the first start on a new store prints.
    pub fn printed_token(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let line = self.stdout.recv_timeout(deadline - Instant::now()).expect("no token printed");
            if let Some(token) = line.split_whitespace().find(|word| word.starts_with("ym_")) {
                return token.to_owned();
            }
        }
    }
}

#[actix_rt::test]
async fn the_first_serve_prints_one_admin_token_once() {
    let dir = fresh_dir();
    let server = Server::start(&dir, &[]);
    let token = server.printed_token();
    server.wait_until_up().await;
    let admin = client_with(&token);
    let (status, body) = crate::helpers::read(admin.get(server.url("/admin/tokens")).send().await.unwrap()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["tokens"][0]["role"], "admin", "{body}");
    let (_, log) = server.stop();
    let secret = &token[36..];
    let leaks: Vec<&str> = log.lines().filter(|line| line.contains(secret)).collect();
    assert!(leaks.is_empty(), "the token is in the log: {leaks:#?}");
    assert!(log.contains("printed it on standard output"), "{log}");
    assert!(!store_bytes(&dir).contains(secret), "the token is stored in clear");

    // Restarted on the same store: no second token, and the first still works.
    let again = Server::start(&dir, &[]);
    again.wait_until_up().await;
    assert_eq!(admin.get(again.url("/jobs")).send().await.unwrap().status(), 200);
    let (stdout, _) = again.stop();
    assert!(!stdout.contains("ym_"), "a second token was printed: {stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[actix_rt::test]
async fn the_token_command_line_manages_tokens_of_a_running_server() {
    let dir = fresh_dir();
    let created = token_command(&dir, &["create", "--user", "eve", "--room", "e", "--label", "laptop"]);
    assert!(created.status.success(), "{created:?}");
    let eve = String::from_utf8(created.stdout.clone()).unwrap().trim().to_owned();
    assert!(eve.starts_with("ym_"), "{eve}");
    assert!(String::from_utf8_lossy(&created.stderr).contains("shown this once"), "{created:?}");

    let bootstrap = new_token();
    let server = Server::start(&dir, &[("YARDMASTER__AUTH__BOOTSTRAP_TOKEN", &bootstrap)]);
    server.wait_until_up().await;
    let client = client_with(&eve);
    let body = serde_json::json!({ "operation": "ping", "queue": "default" });
    let (status, job) = crate::helpers::read(client.post(server.url("/jobs")).json(&body).send().await.unwrap()).await;
    assert_eq!((status, job["room"].as_str()), (201, Some("e")), "{job}");

    let listed = token_command(&dir, &["list", "--json"]);
    assert!(listed.status.success(), "{listed:?}");
    let tokens: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
    let row = tokens.iter().find(|token| token["user"] == "eve").expect("eve is listed");
    assert_eq!((row["role"].as_str(), row["label"].as_str()), (Some("member"), Some("laptop")));
    assert!(!String::from_utf8_lossy(&listed.stdout).contains(&eve[36..]), "a secret is listed");
    let id = row["id"].as_str().unwrap().to_owned();
    let table = token_command(&dir, &["list"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains(&id), "{table:?}");

    let revoked = token_command(&dir, &["revoke", &id]);
    assert!(revoked.status.success(), "{revoked:?}");
    // Another process revoked it: the server's cache (1 s here) lets go of it.
    eventually("the revoked token is refused", Duration::from_secs(10), || async {
        (client.get(server.url("/jobs")).send().await.unwrap().status() == 401).then_some(())
    })
    .await;
    let admin = client_with(&bootstrap);
    assert_eq!(admin.get(server.url("/admin/tokens")).send().await.unwrap().status(), 200);
    server.stop();

    for (args, message) in [
        (vec!["create", "--user", "x", "--room", "a:b"], "room id"),
        (vec!["create", "--user", "x"], "at least one room"),
        (vec!["create", "--user", "x", "--room", "a", "--role", "root"], "not one of admin, member, worker"),
        (vec!["revoke", "not-a-uuid"], "invalid"),
    ] {
        let output = token_command(&dir, &args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(message), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let missing = token_command(&dir, &["revoke", &Uuid::new_v4().to_string()]);
    assert_eq!(missing.status.code(), Some(1), "{missing:?}");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no token"), "{missing:?}");
    let fresh = token_command(&dir, &["new"]);
    assert!(String::from_utf8_lossy(&fresh.stdout).trim().starts_with("ym_"), "{fresh:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
